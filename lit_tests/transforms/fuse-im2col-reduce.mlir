// RUN: tg-opt %s -p fuse-im2col-reduce --split-input-file | filecheck %s

// A 3x3 max pool at stride 2 lowered by convert-tensor-to-buffer: the windows (-inf padding),
// then the max over the taps dim. Fused: one im2col reduces each window into the output; the
// windows buffer and its reshape are gone.

// CHECK-LABEL: func.func @max_pool(
// CHECK-NEXT:    buf.im2col ins(%x : memref<1x4x9x9xf32>) outs(%out0 : memref<1x4x5x5xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, pad_value = 0xff800000 : f32, reduce = "max"}
// CHECK-NEXT:    func.return
func.func @max_pool(%x: memref<1x4x9x9xf32>, %out0: memref<1x4x5x5xf32>) attributes {tg.num_outputs = 1 : i64} {
  %c = buf.alloc : memref<1x4x3x3x5x5xf32>
  buf.im2col ins(%x : memref<1x4x9x9xf32>) outs(%c : memref<1x4x3x3x5x5xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, pad_value = 0xFF800000 : f32}
  %r = buf.reshape %c : memref<1x4x3x3x5x5xf32> -> memref<1x4x9x5x5xf32>
  buf.reduce ins(%r : memref<1x4x9x5x5xf32>) outs(%out0 : memref<1x4x5x5xf32>) {kind = "max", dims = array<i64: 2>}
  func.return
}

// -----

// An average pool (a mean over the taps) of two images: the same.

// CHECK-LABEL: func.func @avg_pool(
// CHECK-NEXT:    buf.im2col ins(%x : memref<2x4x8x8xf32>) outs(%out0 : memref<2x4x4x4xf32>) {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, reduce = "mean"}
func.func @avg_pool(%x: memref<2x4x8x8xf32>, %out0: memref<2x4x4x4xf32>) attributes {tg.num_outputs = 1 : i64} {
  %c = buf.alloc : memref<2x4x2x2x4x4xf32>
  buf.im2col ins(%x : memref<2x4x8x8xf32>) outs(%c : memref<2x4x2x2x4x4xf32>) {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>}
  %r = buf.reshape %c : memref<2x4x2x2x4x4xf32> -> memref<2x4x4x4x4xf32>
  buf.reduce ins(%r : memref<2x4x4x4x4xf32>) outs(%out0 : memref<2x4x4x4xf32>) {kind = "mean", dims = array<i64: 2>}
  func.return
}

// -----

// Left alone: the windows are also an output of the graph.

// CHECK-LABEL: func.func @windows_read_twice(
// CHECK:         buf.reduce
func.func @windows_read_twice(%x: memref<1x4x9x9xf32>, %out0: memref<1x4x5x5xf32>, %out1: memref<1x4x9x5x5xf32>) attributes {tg.num_outputs = 2 : i64} {
  %c = buf.alloc : memref<1x4x3x3x5x5xf32>
  buf.im2col ins(%x : memref<1x4x9x9xf32>) outs(%c : memref<1x4x3x3x5x5xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, pad_value = 0xFF800000 : f32}
  %r = buf.reshape %c : memref<1x4x3x3x5x5xf32> -> memref<1x4x9x5x5xf32>
  buf.reduce ins(%r : memref<1x4x9x5x5xf32>) outs(%out0 : memref<1x4x5x5xf32>) {kind = "max", dims = array<i64: 2>}
  buf.copy ins(%r : memref<1x4x9x5x5xf32>) outs(%out1 : memref<1x4x9x5x5xf32>)
  func.return
}
