// RUN: tg-opt %s -p fuse-panels-into-gemm --split-input-file | filecheck %s

// A convolution's windows written into the panels its GEMM alone reads: the im2col moves into
// the GEMM's packing region (the GEMM writes them a chunk at a time); the panels' buffer stays
// (where the GEMM's blocking takes no chunks, they are all written there first).

// CHECK-LABEL: func.func @conv3x3(
// CHECK:         %[[P:.*]] = buf.alloc : memref<3x36x16xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%{{.*}}, %[[P]] : memref<1x8x36xf32>, memref<3x36x16xf32>) outs(%out0 : memref<1x8x36xf32>) {activation = "relu"} packing {
// CHECK-NEXT:      buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%[[P]] : memref<3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
func.func @conv3x3(%x: memref<1x4x6x6xf32>, %out0: memref<1x8x36xf32>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "conv.weight" : memref<1x8x36xf32>
  %p = buf.alloc : memref<3x36x16xf32>
  buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%p : memref<3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<1x8x36xf32>, memref<3x36x16xf32>) outs(%out0 : memref<1x8x36xf32>) {activation = "relu"}
  func.return
}

// -----

// A bf16 model's windows into bf16 pairs, and a GEMM with an epilogue body: the body stays,
// the packing joins it.

// CHECK-LABEL: func.func @pairs(
// CHECK:         buf.packed_matmul ins(%w, %p : memref<8x36xbf16>, memref<3x18x32xbf16>) outs(%out0 : memref<8x36xf32>) epilogue {
// CHECK:           buf.yield
// CHECK-NEXT:    } packing {
// CHECK-NEXT:      buf.im2col ins(%x : memref<1x4x6x6xbf16>) outs(%p : memref<3x18x32xbf16>)
func.func @pairs(%x: memref<1x4x6x6xbf16>, %out0: memref<8x36xf32>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "conv.weight" : memref<8x36xbf16>
  %p = buf.alloc : memref<3x18x32xbf16>
  buf.im2col ins(%x : memref<1x4x6x6xbf16>) outs(%p : memref<3x18x32xbf16>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<8x36xbf16>, memref<3x18x32xbf16>) outs(%out0 : memref<8x36xf32>) epilogue {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    %2 = arith.extf %1 : bf16 to f32
    buf.yield %2 : f32
  }
  func.return
}

// -----

// Two images (a batch of GEMMs by one weight): the same, each image's panels packed in turn.

// CHECK-LABEL: func.func @batch(
// CHECK:         buf.packed_matmul ins(%w, %p : memref<8x36xf32>, memref<2x3x36x16xf32>) outs(%out0 : memref<2x8x36xf32>) packing {
// CHECK-NEXT:      buf.im2col ins(%x : memref<2x4x6x6xf32>) outs(%p : memref<2x3x36x16xf32>)
func.func @batch(%x: memref<2x4x6x6xf32>, %out0: memref<2x8x36xf32>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "conv.weight" : memref<8x36xf32>
  %p = buf.alloc : memref<2x3x36x16xf32>
  buf.im2col ins(%x : memref<2x4x6x6xf32>) outs(%p : memref<2x3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<8x36xf32>, memref<2x3x36x16xf32>) outs(%out0 : memref<2x8x36xf32>)
  func.return
}

// -----

// Left alone: a run-time count of images, panels another op also reads, and an input that an op
// between the windows and the GEMM writes.

// CHECK-LABEL: func.func @run_time_batch(
// CHECK:         buf.im2col
// CHECK-NEXT:    buf.packed_matmul
// CHECK-NOT:     packing
func.func @run_time_batch(%x: memref<?x4x6x6xf32, ["n"]>, %out0: memref<?x8x36xf32, ["n"]>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "conv.weight" : memref<8x36xf32>
  %p = buf.alloc : memref<?x3x36x16xf32, ["n"]>
  buf.im2col ins(%x : memref<?x4x6x6xf32, ["n"]>) outs(%p : memref<?x3x36x16xf32, ["n"]>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<8x36xf32>, memref<?x3x36x16xf32, ["n"]>) outs(%out0 : memref<?x8x36xf32, ["n"]>)
  func.return
}

// CHECK-LABEL: func.func @shared(
// CHECK:         buf.im2col
// CHECK-NEXT:    buf.packed_matmul
// CHECK-NOT:     packing
func.func @shared(%x: memref<1x4x6x6xf32>, %out0: memref<1x8x36xf32>, %out1: memref<3x36x16xf32>) attributes {tg.num_outputs = 2 : i64} {
  %w = buf.weight "conv.weight" : memref<1x8x36xf32>
  %p = buf.alloc : memref<3x36x16xf32>
  buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%p : memref<3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.packed_matmul ins(%w, %p : memref<1x8x36xf32>, memref<3x36x16xf32>) outs(%out0 : memref<1x8x36xf32>)
  buf.copy ins(%p : memref<3x36x16xf32>) outs(%out1 : memref<3x36x16xf32>)
  func.return
}

// CHECK-LABEL: func.func @overwritten(
// CHECK:         buf.im2col
// CHECK-NEXT:    buf.relu
// CHECK-NEXT:    buf.packed_matmul
// CHECK-NOT:     packing
func.func @overwritten(%x: memref<1x4x6x6xf32>, %out0: memref<1x8x36xf32>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "conv.weight" : memref<1x8x36xf32>
  %p = buf.alloc : memref<3x36x16xf32>
  buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%p : memref<3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  buf.relu ins(%x : memref<1x4x6x6xf32>) outs(%x : memref<1x4x6x6xf32>)
  buf.packed_matmul ins(%w, %p : memref<1x8x36xf32>, memref<3x36x16xf32>) outs(%out0 : memref<1x8x36xf32>)
  func.return
}
