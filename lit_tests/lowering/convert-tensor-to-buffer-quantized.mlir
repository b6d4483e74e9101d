// RUN: not tg-opt %s --split-input-file -p "set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1}" 2>&1 | filecheck %s
// RUN: tg-opt %S/Inputs/convert-tensor-to-buffer-bf16-dot.mlir -p "set-target{target=sapphirerapids},convert-tensor-to-buffer{threads=1}" | filecheck --check-prefix=SPR %s
// RUN: not tg-opt %S/Inputs/convert-tensor-to-buffer-bf16-dot.mlir -p "set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1}" 2>&1 | filecheck --check-prefix=NOBF16 %s
// RUN: tg-opt %S/Inputs/convert-tensor-to-buffer-packed-bf16.mlir -p "set-target{target=sapphirerapids},convert-tensor-to-buffer{threads=1}" | filecheck --check-prefix=GEMM %s
// RUN: not tg-opt %S/Inputs/convert-tensor-to-buffer-packed-bf16.mlir -p "set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1}" 2>&1 | filecheck --check-prefix=NOGEMM %s
// RUN: tg-opt %S/Inputs/convert-tensor-to-buffer-packed-int8.mlir -p "set-target{target=icelake-server},convert-tensor-to-buffer{threads=1}" | filecheck --check-prefix=INT8 %s
// RUN: not tg-opt %S/Inputs/convert-tensor-to-buffer-packed-int8.mlir -p "set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1}" 2>&1 | filecheck --check-prefix=NOINT8 %s
// RUN: tg-opt %S/Inputs/convert-tensor-to-buffer-packed-rhs-bf16.mlir -p "set-target{target=sapphirerapids},convert-tensor-to-buffer{threads=1},fuse-im2col-panels" | filecheck --check-prefix=CONV %s
// RUN: tg-opt %S/Inputs/convert-tensor-to-buffer-bf16-operands.mlir -p "set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1}" | filecheck --check-prefix=OPS %s
// convert-tensor-to-buffer for the matrix-vector products over cheaper weights
// (matmul.bf16_weights, matmul.int8_weights, matmul.int4_weights, matmul.int4zp_weights,
// matmul.bf16_dot): never the heuristic's choice, a tuner's within a
// tolerance, pinned by tg.kernel. The weight becomes panels of 16 columns (AVX2) in bf16, or in
// int8 with per-column scales, packed at load time.

// CHECK-LABEL: func.func @pinned_to_int8_weights
// CHECK-NEXT:    %b = buf.weight "fc.bias" : memref<100xf32>
// CHECK-NEXT:    %w_int8 = buf.packed_weight "fc.weight" {transposed = true, layout = "int8panels", source_shape = array<i64: 100, 32>} : memref<7x32x16xi8>
// CHECK-NEXT:    %w_int8scales = buf.packed_weight "fc.weight" {transposed = true, layout = "int8scalespanels", source_shape = array<i64: 100, 32>} : memref<7x16xf32>
// CHECK-NEXT:    buf.quantized_matvec ins(%x, %w_int8, %w_int8scales, %b : memref<1x32xf32>, memref<7x32x16xi8>, memref<7x16xf32>, memref<100xf32>) outs(%out0 : memref<1x100xf32>) {beta = 1.000000e+00 : f32, activation = "relu", format = "int8"}
func.func @pinned_to_int8_weights(%x: tensor<1x32xf32>) -> tensor<1x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x32xf32>
  %b = tg.weight "fc.bias" : tensor<100xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "relu", tg.kernel = "matmul.int8_weights"} : (tensor<1x32xf32>, tensor<100x32xf32>, tensor<100xf32>) -> tensor<1x100xf32>
  func.return %y : tensor<1x100xf32>
}

// -----

// int4 codes two to a byte (panels of 16 columns: 8 bytes a row), with a bf16 scale and a zero
// point per group of 128 along K (K = 160: a full group and a tail), or a scale per group of 32.
// CHECK-LABEL: func.func @pinned_to_int4zp_weights
// CHECK-NEXT:    %w_int4zg128 = buf.packed_weight "fc.weight" {transposed = true, layout = "int4zg128panels", source_shape = array<i64: 100, 160>} : memref<7x160x8xi8>
// CHECK-NEXT:    %w_int4zg128scales = buf.packed_weight "fc.weight" {transposed = true, layout = "int4zg128scalespanels", source_shape = array<i64: 100, 160>} : memref<7x2x16xbf16>
// CHECK-NEXT:    %w_int4zg128zeros = buf.packed_weight "fc.weight" {transposed = true, layout = "int4zg128zerospanels", source_shape = array<i64: 100, 160>} : memref<7x2x16xi8>
// CHECK-NEXT:    buf.quantized_matvec ins(%x, %w_int4zg128, %w_int4zg128scales, %w_int4zg128zeros : memref<1x160xf32>, memref<7x160x8xi8>, memref<7x2x16xbf16>, memref<7x2x16xi8>) outs(%out0 : memref<1x100xf32>) {format = "int4zg128"}
// CHECK-LABEL: func.func @pinned_to_int4_weights
// CHECK-NEXT:    %w_int4g32 = buf.packed_weight "fc.weight" {transposed = true, layout = "int4g32panels", source_shape = array<i64: 100, 160>} : memref<7x160x8xi8>
// CHECK-NEXT:    %w_int4g32scales = buf.packed_weight "fc.weight" {transposed = true, layout = "int4g32scalespanels", source_shape = array<i64: 100, 160>} : memref<7x5x16xbf16>
// CHECK-NEXT:    buf.quantized_matvec ins(%x, %w_int4g32, %w_int4g32scales : memref<1x160xf32>, memref<7x160x8xi8>, memref<7x5x16xbf16>) outs(%out0 : memref<1x100xf32>) {format = "int4g32"}
func.func @pinned_to_int4zp_weights(%x: tensor<1x160xf32>) -> tensor<1x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x160xf32>
  %y = tg.matmul %x, %w {transpose_b = true, tg.kernel = "matmul.int4zp_weights"} : (tensor<1x160xf32>, tensor<100x160xf32>) -> tensor<1x100xf32>
  func.return %y : tensor<1x100xf32>
}
func.func @pinned_to_int4_weights(%x: tensor<1x160xf32>) -> tensor<1x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x160xf32>
  %y = tg.matmul %x, %w {transpose_b = true, tg.kernel = "matmul.int4_weights"} : (tensor<1x160xf32>, tensor<100x160xf32>) -> tensor<1x100xf32>
  func.return %y : tensor<1x100xf32>
}

// -----

// bf16 panels of a [K, N] weight (transformers' Conv1D), two rows (a batch of two sequences).
// CHECK-LABEL: func.func @pinned_to_bf16_weights
// CHECK-NEXT:    %w_bf16 = buf.packed_weight "c_fc.weight" {layout = "bf16panels", source_shape = array<i64: 32, 64>} : memref<4x32x16xbf16>
// CHECK-NEXT:    buf.quantized_matvec ins(%x, %w_bf16 : memref<2x1x32xf32>, memref<4x32x16xbf16>) outs(%out0 : memref<2x1x64xf32>) {format = "bf16"}
func.func @pinned_to_bf16_weights(%x: tensor<2x1x32xf32>) -> tensor<2x1x64xf32> {
  %w = tg.weight "c_fc.weight" : tensor<32x64xf32>
  %y = tg.matmul %x, %w {tg.kernel = "matmul.bf16_weights"} : (tensor<2x1x32xf32>, tensor<32x64xf32>) -> tensor<2x1x64xf32>
  func.return %y : tensor<2x1x64xf32>
}

// -----

// Not for a GEMM of many rows: the pin is refused, with the reason.
func.func @too_many_rows(%x: tensor<16x32xf32>) -> tensor<16x64xf32> {
  %w = tg.weight "w" : tensor<32x64xf32>
  // CHECK: pins kernel 'matmul.int8_weights' (tg.kernel), which cannot run it: 16 rows: not a matrix-vector product (at most 8)
  %y = tg.matmul %x, %w {tg.kernel = "matmul.int8_weights"} : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  func.return %y : tensor<16x64xf32>
}

// -----

// AVX512-BF16 dot products (matmul.bf16_dot, Inputs/convert-tensor-to-buffer-bf16-dot.mlir): the
// weight packed as bf16 pairs along K, 64 columns per panel of 32 words ([P, ceil(K/2), 2 NR]),
// on a target that has them (SPR); refused with the reason elsewhere.
// SPR-LABEL: func.func @pinned_to_bf16_dot
// SPR-NEXT:    %w_bf16k = buf.packed_weight "fc.weight" {transposed = true, layout = "bf16kpanels", source_shape = array<i64: 100, 33>} : memref<2x17x128xbf16>
// SPR-NEXT:    buf.quantized_matvec ins(%x, %w_bf16k : memref<1x33xf32>, memref<2x17x128xbf16>) outs(%out0 : memref<1x100xf32>) {format = "bf16dot"}
// NOBF16: pins kernel 'matmul.bf16_dot' (tg.kernel), which cannot run it: the target (x86-64-v3) has no AVX512-BF16 dot products

// The bf16 GEMM (matmul.packed_bf16, Inputs/convert-tensor-to-buffer-packed-bf16.mlir): the weight
// packed as bf16 pairs along K at load time, the lhs rounded to bf16 by a cast into a buffer of
// its own, the GEMM over both with the float32 epilogue; refused where the target has no bf16
// dot products.
// GEMM-LABEL: func.func @pinned_to_packed_bf16
// GEMM-NEXT:    %b = buf.weight "fc.bias" : memref<100xf32>
// GEMM-NEXT:    %w_bf16k = buf.packed_weight "fc.weight" {transposed = true, layout = "bf16kpanels", source_shape = array<i64: 100, 96>} : memref<2x48x128xbf16>
// GEMM-NEXT:    %x_bf16 = buf.alloc : memref<40x96xbf16>
// GEMM-NEXT:    buf.cast ins(%x : memref<40x96xf32>) outs(%x_bf16 : memref<40x96xbf16>)
// GEMM-NEXT:    buf.packed_matmul ins(%x_bf16, %w_bf16k, %b : memref<40x96xbf16>, memref<2x48x128xbf16>, memref<100xf32>) outs(%out0 : memref<40x100xf32>) {beta = 1.000000e+00 : f32, activation = "gelu_tanh"}
// NOGEMM: pins kernel 'matmul.packed_bf16' (tg.kernel), which cannot run it: the target (x86-64-v3) has no bf16 dot products (AVX512-BF16)

// The int8 GEMM (matmul.packed_int8, Inputs/convert-tensor-to-buffer-packed-int8.mlir): the
// weight packed at load time as int8 quads along K (K = 98: 25 rows of quads) and two rows of
// its columns' scales and offsets, 64 columns per panel (256 bytes a row); the lhs quantised per
// row by buf.quantize_rows into a buffer of its own (98 codes, 2 of padding, the row's scale: 104
// bytes), the GEMM over both with the float32 epilogue; refused where the target has no VNNI.
// INT8-LABEL: func.func @pinned_to_packed_int8
// INT8-NEXT:    %b = buf.weight "fc.bias" : memref<100xf32>
// INT8-NEXT:    %w_int8k = buf.packed_weight "fc.weight" {transposed = true, layout = "int8kpanels", source_shape = array<i64: 100, 98>} : memref<2x27x256xi8>
// INT8-NEXT:    %x_q8 = buf.alloc : memref<40x104xi8>
// INT8-NEXT:    buf.quantize_rows ins(%x : memref<40x98xf32>) outs(%x_q8 : memref<40x104xi8>)
// INT8-NEXT:    buf.packed_matmul ins(%x_q8, %w_int8k, %b : memref<40x104xi8>, memref<2x27x256xi8>, memref<100xf32>) outs(%out0 : memref<40x100xf32>) {beta = 1.000000e+00 : f32, activation = "gelu_tanh"}
// A convolution in bf16 (matmul.packed_rhs_bf16, Inputs/convert-tensor-to-buffer-packed-rhs-bf16.mlir):
// the weight [20, 3, 3, 3] packed at load time as its bf16 rows (K = 27 padded to 28: pairs along
// K), the windows written by one buf.im2col (its own im2col folded in by fuse-im2col-panels)
// straight into panels of bf16 pairs ([3 panels, 14 pair rows, 2 x 64]), the GEMM over both with
// the float32 epilogue (bias, ReLU).
// CONV:         %p_0_weight_bf16rows = buf.packed_weight "0.weight" {layout = "bf16rows", source_shape = array<i64: 20, 3, 3, 3>} : memref<20x28xbf16>
// CONV-NEXT:    %0 = buf.reshape %p_0_weight_bf16rows : memref<20x28xbf16> -> memref<1x20x28xbf16>
// CONV-NEXT:    %conv2d_panels = buf.alloc : memref<3x14x128xbf16>
// CONV-NEXT:    buf.im2col ins(%input : memref<1x3x12x12xf32>) outs(%conv2d_panels : memref<3x14x128xbf16>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 64 : i64}
// CONV:         buf.packed_matmul ins(%0, %conv2d_panels, %conv2d : memref<1x20x28xbf16>, memref<3x14x128xbf16>, memref<20x1xf32>) outs(%relu : memref<1x20x144xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}

// NOINT8: pins kernel 'matmul.packed_int8' (tg.kernel), which cannot run it: the target (x86-64-v3) has no int8 dot products (AVX512-VNNI or AVX-VNNI)

// A bf16 model's GEMM (matmul.bf16_operands, Inputs/convert-tensor-to-buffer-bf16-operands.mlir):
// a bf16 weight and a bf16 activation, both widened to float32 by tg.cast, run on the bf16
// operands themselves on any target (here AVX2, which emulates the bf16 dot products): the weight
// packed once as bf16 pairs, the activation read as it is, and neither widening cast left.
// OPS-LABEL: func.func @bf16_model
// OPS-NEXT:    %w_bf16k = buf.packed_weight "fc.weight" {transposed = true, layout = "bf16kpanels", source_shape = array<i64: 100, 96>} : memref<7x48x32xbf16>
// OPS-NEXT:    buf.packed_matmul ins(%x, %w_bf16k : memref<40x96xbf16>, memref<7x48x32xbf16>) outs(%out0 : memref<40x100xf32>)
// OPS-NOT:     buf.cast
// OPS-NEXT:    func.return
