// RUN: tg-opt %s -p "set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1}" | filecheck %s
// RUN: not tg-opt %s -p "set-target{target=x86-64-v3},convert-tensor-to-buffer{pack-weights=false threads=1}" 2>&1 | filecheck --check-prefix=NOPACK %s
// RUN: tg-opt %S/Inputs/convert-tensor-to-buffer-winograd-direct-bf16.mlir -p "set-target{target=sapphirerapids},convert-tensor-to-buffer{threads=1}" | filecheck --check-prefix=BF16 %s
// RUN: not tg-opt %S/Inputs/convert-tensor-to-buffer-winograd-direct-bf16.mlir -p "set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1}" 2>&1 | filecheck --check-prefix=NOBF16 %s

// A Winograd convolution (winograd-convolution's tg.winograd_conv): the weight transformed at
// load time (a buf.packed_weight of layout winograd2: 16 matrices [Cout, C]); the input
// transform into 16 sets of column panels (9x9 outputs: 5x5 = 25 tiles, in panels of 16 on AVX2:
// 2 panels); the 16 GEMMs as one batch of packed GEMMs writing the 25 tiles' columns; the
// output transform with the bias and ReLU, into the output. Without load-time packing no
// variant is left, and the error says why.

// CHECK-LABEL: func.func @winograd(
// CHECK:         %w_winograd = buf.packed_weight "conv.weight" {layout = "winograd2", source_shape = array<i64: 32, 16, 3, 3>} : memref<16x32x16xf32>
// CHECK-NEXT:    %x_tiles = buf.alloc : memref<16x2x16x16xf32>
// CHECK-NEXT:    buf.winograd_input ins(%x : memref<1x16x9x9xf32>) outs(%x_tiles : memref<16x2x16x16xf32>) {padding = array<i64: 1, 1>}
// CHECK-NEXT:    %{{.*}} = buf.alloc : memref<16x32x25xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%w_winograd, %x_tiles : memref<16x32x16xf32>, memref<16x2x16x16xf32>) outs(%[[P:.*]] : memref<16x32x25xf32>)
// CHECK:         buf.winograd_output ins(%[[P]], %b3 : memref<16x32x25xf32>, memref<32x1x1xf32>) outs(%out0 : memref<1x32x9x9xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
// NOPACK: every kernel of 'tg.winograd_conv' reads a weight transformed at load time, which pack-weights=false rules out
builtin.module attributes {tg.symbols = {n = array<i64: 1, 8>}} {
func.func @winograd(%x: tensor<1x16x9x9xf32>) -> tensor<1x32x9x9xf32> {
  %w = tg.weight "conv.weight" : tensor<32x16x3x3xf32>
  %b = tg.weight "conv.bias" : tensor<32xf32>
  %b3 = tg.reshape %b : (tensor<32xf32>) -> tensor<32x1x1xf32>
  %y = tg.winograd_conv %x, %w, %b3 {padding = array<i64: 1, 1>, tile = 2 : i64, beta = 1.0 : f32, activation = "relu"} : (tensor<1x16x9x9xf32>, tensor<32x16x3x3xf32>, tensor<32x1x1xf32>) -> tensor<1x32x9x9xf32>
  func.return %y : tensor<1x32x9x9xf32>
}

// The same convolution pinned to the tg-level alternative (a tuner's choice): no Winograd, the
// 3x3 windows straight into column panels (81 outputs: 6 panels of 16), the GEMM reading the
// weight as stored [32, 144] and writing the output seen as [32, 81], the bias as [32, 1].
// CHECK-LABEL: func.func @direct(
// CHECK:         %x_panels = buf.alloc : memref<6x144x16xf32>
// CHECK-NEXT:    buf.im2col ins(%x : memref<1x16x9x9xf32>) outs(%x_panels : memref<6x144x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
// CHECK-NEXT:    %[[W:.*]] = buf.reshape %w : memref<32x16x3x3xf32> -> memref<32x144xf32>
// CHECK-NEXT:    %[[B:.*]] = buf.reshape %b3 : memref<32x1x1xf32> -> memref<32x1xf32>
// CHECK-NEXT:    %[[O:.*]] = buf.reshape %out0 : memref<1x32x9x9xf32> -> memref<32x81xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%[[W]], %x_panels, %[[B]] : memref<32x144xf32>, memref<6x144x16xf32>, memref<32x1xf32>) outs(%[[O]] : memref<32x81xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
func.func @direct(%x: tensor<1x16x9x9xf32>) -> tensor<1x32x9x9xf32> {
  %w = tg.weight "conv.weight" : tensor<32x16x3x3xf32>
  %b = tg.weight "conv.bias" : tensor<32xf32>
  %b3 = tg.reshape %b : (tensor<32xf32>) -> tensor<32x1x1xf32>
  %y = tg.winograd_conv %x, %w, %b3 {padding = array<i64: 1, 1>, tile = 2 : i64, beta = 1.0 : f32, activation = "relu", tg.kernel = "winograd_conv.direct"} : (tensor<1x16x9x9xf32>, tensor<32x16x3x3xf32>, tensor<32x1x1xf32>) -> tensor<1x32x9x9xf32>
  func.return %y : tensor<1x32x9x9xf32>
}

// A batch of images, its size a symbol: 16 GEMMs per image (16*n in all), image i's tiles in
// panels [16*i, 16*i + 16), each GEMM g by the transformed weight g % 16 (one [16, 32, 16] for
// every image); the output transform over the batch. Pinned to the direct path: each image's
// windows into its own panels, one weight [32, 144] as every image's GEMM's A.
// CHECK-LABEL: func.func @batch(
// CHECK:         %x_tiles = buf.alloc : memref<?x2x16x16xf32, ["16*n"]>
// CHECK-NEXT:    buf.winograd_input ins(%x : memref<?x16x9x9xf32, ["n"]>) outs(%x_tiles : memref<?x2x16x16xf32, ["16*n"]>) {padding = array<i64: 1, 1>}
// CHECK-NEXT:    %{{.*}} = buf.alloc : memref<?x32x25xf32, ["16*n"]>
// CHECK-NEXT:    buf.packed_matmul ins(%w_winograd, %x_tiles : memref<16x32x16xf32>, memref<?x2x16x16xf32, ["16*n"]>) outs(%[[P:.*]] : memref<?x32x25xf32, ["16*n"]>)
// CHECK:         buf.winograd_output ins(%[[P]], %b3 : memref<?x32x25xf32, ["16*n"]>, memref<32x1x1xf32>) outs(%{{.*}} : memref<?x32x9x9xf32, ["n"]>) {beta = 1.000000e+00 : f32, activation = "relu"}
// CHECK:         %x_panels = buf.alloc : memref<?x6x144x16xf32, ["n"]>
// CHECK-NEXT:    buf.im2col ins(%x : memref<?x16x9x9xf32, ["n"]>) outs(%x_panels : memref<?x6x144x16xf32, ["n"]>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
// CHECK:         buf.packed_matmul ins(%{{.*}}, %x_panels, %{{.*}} : memref<32x144xf32>, memref<?x6x144x16xf32, ["n"]>, memref<32x1xf32>) outs(%{{.*}} : memref<?x32x81xf32, ["n"]>) {beta = 1.000000e+00 : f32, activation = "relu"}
func.func @batch(%x: tensor<?x16x9x9xf32, ["n"]>) -> (tensor<?x32x9x9xf32, ["n"]>, tensor<?x32x9x9xf32, ["n"]>) {
  %w = tg.weight "conv.weight" : tensor<32x16x3x3xf32>
  %b = tg.weight "conv.bias" : tensor<32xf32>
  %b3 = tg.reshape %b : (tensor<32xf32>) -> tensor<32x1x1xf32>
  %y = tg.winograd_conv %x, %w, %b3 {padding = array<i64: 1, 1>, tile = 2 : i64, beta = 1.0 : f32, activation = "relu"} : (tensor<?x16x9x9xf32, ["n"]>, tensor<32x16x3x3xf32>, tensor<32x1x1xf32>) -> tensor<?x32x9x9xf32, ["n"]>
  %z = tg.winograd_conv %x, %w, %b3 {padding = array<i64: 1, 1>, tile = 2 : i64, beta = 1.0 : f32, activation = "relu", tg.kernel = "winograd_conv.direct"} : (tensor<?x16x9x9xf32, ["n"]>, tensor<32x16x3x3xf32>, tensor<32x1x1xf32>) -> tensor<?x32x9x9xf32, ["n"]>
  func.return %y, %z : tensor<?x32x9x9xf32, ["n"]>, tensor<?x32x9x9xf32, ["n"]>
}
}

// The direct path in bf16 (winograd_conv.direct_bf16, a tuner's path on a target with bf16 dot
// products): the windows rounded to bf16 as buf.im2col packs them into panels of pairs along K
// (K = 17 x 9 = 153: 77 pair rows, the last half a zero), the weight as its bf16 rows packed at
// load time ([32, 154]: K padded to even), the bf16 GEMM (as matmul.packed_rhs_bf16's).
// BF16:         %x_panels = buf.alloc : memref<2x77x128xbf16>
// BF16-NEXT:    buf.im2col ins(%x : memref<1x17x9x9xf32>) outs(%x_panels : memref<2x77x128xbf16>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 64 : i64}
// BF16-NEXT:    %w_bf16rows = buf.packed_weight "conv.weight" {layout = "bf16rows", source_shape = array<i64: 32, 17, 3, 3>} : memref<32x154xbf16>
// BF16-NEXT:    %[[B:.*]] = buf.reshape %b3 : memref<32x1x1xf32> -> memref<32x1xf32>
// BF16-NEXT:    %[[O:.*]] = buf.reshape %out0 : memref<1x32x9x9xf32> -> memref<32x81xf32>
// BF16-NEXT:    buf.packed_matmul ins(%w_bf16rows, %x_panels, %[[B]] : memref<32x154xbf16>, memref<2x77x128xbf16>, memref<32x1xf32>) outs(%[[O]] : memref<32x81xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
// Refused on a target without bf16 dot products, with the reason:
// NOBF16: 'tg.winograd_conv' pins kernel 'winograd_conv.direct_bf16' (tg.kernel), which cannot run it: the target (x86-64-v3) has no bf16 dot products (AVX512-BF16)
