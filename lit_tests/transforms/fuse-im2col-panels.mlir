// RUN: tg-opt %s -p fuse-im2col-panels --split-input-file | filecheck %s

// A 3x3 convolution lowered by convert-tensor-to-buffer: the plain windows (%c), then their
// packing into the GEMM's column panels. Fused: one im2col writes the windows into the panels;
// the plain windows buffer and its reshapes are gone.

// CHECK-LABEL: func.func @conv3x3(
// CHECK-NOT:     buf.alloc : memref<1x4x3x3x6x6xf32>
// CHECK:         %[[P:.*]] = buf.alloc : memref<3x36x16xf32>
// CHECK-NEXT:    buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%[[P]] : memref<3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
// CHECK-NEXT:    buf.packed_matmul ins(%{{.*}}, %[[P]] : memref<1x8x36xf32>, memref<3x36x16xf32>) outs(%out0 : memref<1x8x36xf32>)
// CHECK-NOT:     buf.im2col
func.func @conv3x3(%x: memref<1x4x6x6xf32>, %out0: memref<1x8x36xf32>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "conv.weight" : memref<8x4x3x3xf32>
  %w2 = buf.reshape %w : memref<8x4x3x3xf32> -> memref<8x36xf32>
  %c = buf.alloc : memref<1x4x3x3x6x6xf32>
  buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%c : memref<1x4x3x3x6x6xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
  %c2 = buf.reshape %c : memref<1x4x3x3x6x6xf32> -> memref<1x36x36xf32>
  %0 = buf.reshape %w2 : memref<8x36xf32> -> memref<1x8x36xf32>
  %1 = buf.reshape %c2 : memref<1x36x36xf32> -> memref<1x36x1x36xf32>
  %p = buf.alloc : memref<3x36x16xf32>
  buf.im2col ins(%1 : memref<1x36x1x36xf32>) outs(%p : memref<3x36x16xf32>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%0, %p : memref<1x8x36xf32>, memref<3x36x16xf32>) outs(%out0 : memref<1x8x36xf32>)
  func.return
}

// -----

// The plain windows are also read by something else (here a copy out): both copies stay.

// CHECK-LABEL: func.func @shared(
// CHECK:         buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%{{.*}} : memref<1x4x3x3x6x6xf32>)
// CHECK:         buf.im2col ins(%{{.*}} : memref<1x36x1x36xf32>) outs(%{{.*}} : memref<3x36x16xf32>) {{.*}}panels = 16
func.func @shared(%x: memref<1x4x6x6xf32>, %out0: memref<1x8x36xf32>, %out1: memref<1x36x36xf32>) attributes {tg.num_outputs = 2 : i64} {
  %w = buf.weight "conv.weight" : memref<1x8x36xf32>
  %c = buf.alloc : memref<1x4x3x3x6x6xf32>
  buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%c : memref<1x4x3x3x6x6xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
  %c2 = buf.reshape %c : memref<1x4x3x3x6x6xf32> -> memref<1x36x36xf32>
  %1 = buf.reshape %c2 : memref<1x36x36xf32> -> memref<1x36x1x36xf32>
  %p = buf.alloc : memref<3x36x16xf32>
  buf.im2col ins(%1 : memref<1x36x1x36xf32>) outs(%p : memref<3x36x16xf32>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<1x8x36xf32>, memref<3x36x16xf32>) outs(%out0 : memref<1x8x36xf32>)
  buf.copy ins(%c2 : memref<1x36x36xf32>) outs(%out1 : memref<1x36x36xf32>)
  func.return
}

// -----

// A 1x1 convolution at stride 1 has no im2col of its own: the packing of its input stays.

// CHECK-LABEL: func.func @pointwise(
// CHECK:         buf.im2col ins(%{{.*}} : memref<1x4x1x36xf32>) outs(%{{.*}} : memref<3x4x16xf32>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 16 : i64}
func.func @pointwise(%x: memref<1x4x6x6xf32>, %out0: memref<1x8x36xf32>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "conv.weight" : memref<1x8x4xf32>
  %1 = buf.reshape %x : memref<1x4x6x6xf32> -> memref<1x4x1x36xf32>
  %p = buf.alloc : memref<3x4x16xf32>
  buf.im2col ins(%1 : memref<1x4x1x36xf32>) outs(%p : memref<3x4x16xf32>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<1x8x4xf32>, memref<3x4x16xf32>) outs(%out0 : memref<1x8x36xf32>)
  func.return
}

// -----

// A bf16 model's 3x3 convolution (matmul.bf16_operands_rhs): its input widened from bf16 for the
// windows alone. The windows are packed into bf16 pairs from the bf16 values: no cast, no float32
// copy of the input.

// CHECK-LABEL: func.func @bf16_windows(
// CHECK-NOT:     buf.cast
// CHECK:         buf.im2col ins(%x : memref<1x4x6x6xbf16>) outs(%{{.*}} : memref<3x18x32xbf16>) {kernel = array<i64: 3, 3>, {{.*}}panels = 16 : i64}
// CHECK-NOT:     buf.cast
func.func @bf16_windows(%x: memref<1x4x6x6xbf16>, %out0: memref<1x8x36xf32>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "conv.weight" : memref<1x8x36xbf16>
  %f = buf.alloc : memref<1x4x6x6xf32>
  buf.cast ins(%x : memref<1x4x6x6xbf16>) outs(%f : memref<1x4x6x6xf32>)
  %c = buf.alloc : memref<1x4x3x3x6x6xf32>
  buf.im2col ins(%f : memref<1x4x6x6xf32>) outs(%c : memref<1x4x3x3x6x6xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
  %c2 = buf.reshape %c : memref<1x4x3x3x6x6xf32> -> memref<1x36x36xf32>
  %1 = buf.reshape %c2 : memref<1x36x36xf32> -> memref<1x36x1x36xf32>
  %p = buf.alloc : memref<3x18x32xbf16>
  buf.im2col ins(%1 : memref<1x36x1x36xf32>) outs(%p : memref<3x18x32xbf16>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%out0 : memref<1x8x36xf32>)
  func.return
}

// -----

// A 1x1 convolution of a bf16 value the model reads elsewhere too (a residual): the float32
// widening is the packing's alone, so it goes; the bf16 value stays for its other reader.

// CHECK-LABEL: func.func @bf16_pointwise(
// CHECK-NOT:     buf.cast
// CHECK:         %[[R:.*]] = buf.reshape %x : memref<1x4x6x6xbf16> -> memref<1x4x1x36xbf16>
// CHECK-NEXT:    buf.im2col ins(%[[R]] : memref<1x4x1x36xbf16>) outs(%{{.*}} : memref<3x2x32xbf16>)
// CHECK:         buf.copy ins(%x : memref<1x4x6x6xbf16>)
func.func @bf16_pointwise(%x: memref<1x4x6x6xbf16>, %out0: memref<1x8x36xf32>, %out1: memref<1x4x6x6xbf16>) attributes {tg.num_outputs = 2 : i64} {
  %w = buf.weight "conv.weight" : memref<1x8x4xbf16>
  %f = buf.alloc : memref<1x4x6x6xf32>
  buf.cast ins(%x : memref<1x4x6x6xbf16>) outs(%f : memref<1x4x6x6xf32>)
  %1 = buf.reshape %f : memref<1x4x6x6xf32> -> memref<1x4x1x36xf32>
  %p = buf.alloc : memref<3x2x32xbf16>
  buf.im2col ins(%1 : memref<1x4x1x36xf32>) outs(%p : memref<3x2x32xbf16>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<1x8x4xbf16>, memref<3x2x32xbf16>) outs(%out0 : memref<1x8x36xf32>)
  buf.copy ins(%x : memref<1x4x6x6xbf16>) outs(%out1 : memref<1x4x6x6xbf16>)
  func.return
}
