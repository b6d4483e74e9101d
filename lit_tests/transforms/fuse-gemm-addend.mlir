// RUN: tg-opt %s -p fuse-gemm-addend --split-input-file | filecheck %s

// A 1x1 convolution's GEMM with its bias, then the residual add + ReLU: one GEMM writing the
// sum, the residual its fourth input (viewed as the GEMM's output shape), the ReLU its epilogue.

// CHECK-LABEL: func.func @residual(
// CHECK-NOT:     buf.bias_activation
// CHECK:         %[[R:.*]] = buf.reshape %r : memref<1x32x4x5xf32> -> memref<1x32x20xf32>
// CHECK-NEXT:    %[[Y:.*]] = buf.reshape %out0 : memref<1x32x4x5xf32> -> memref<1x32x20xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%w, %p, %b, %[[R]] : memref<1x32x16xf32>, memref<2x16x16xf32>, memref<32x1xf32>, memref<1x32x20xf32>) outs(%[[Y]] : memref<1x32x20xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
// CHECK-NEXT:    func.return
func.func @residual(%w: memref<1x32x16xf32>, %p: memref<2x16x16xf32>, %b: memref<32x1xf32>, %r: memref<1x32x4x5xf32>, %out0: memref<1x32x4x5xf32>) attributes {tg.num_outputs = 1 : i64} {
  %m = buf.alloc : memref<1x32x20xf32>
  buf.packed_matmul ins(%w, %p, %b : memref<1x32x16xf32>, memref<2x16x16xf32>, memref<32x1xf32>) outs(%m : memref<1x32x20xf32>) {beta = 1.000000e+00 : f32}
  %m4 = buf.reshape %m : memref<1x32x20xf32> -> memref<1x32x4x5xf32>
  buf.bias_activation ins(%m4, %r : memref<1x32x4x5xf32>, memref<1x32x4x5xf32>) outs(%out0 : memref<1x32x4x5xf32>) {activation = "relu"}
  func.return
}

// -----

// Two GEMMs (a block's last convolution, then its shortcut): the later one, the shortcut, takes
// the first one's output as its addend; without a bias it becomes the accumulator (beta = 1).

// CHECK-LABEL: func.func @two_gemms(
// CHECK:         %[[A:.*]] = buf.alloc : memref<1x32x20xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%w, %p : memref<1x32x16xf32>, memref<2x16x16xf32>) outs(%[[A]] : memref<1x32x20xf32>)
// CHECK-NEXT:    buf.packed_matmul ins(%w, %p, %[[A]] : memref<1x32x16xf32>, memref<2x16x16xf32>, memref<1x32x20xf32>) outs(%out0 : memref<1x32x20xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
// CHECK-NOT:     buf.bias_activation
func.func @two_gemms(%w: memref<1x32x16xf32>, %p: memref<2x16x16xf32>, %out0: memref<1x32x20xf32>) attributes {tg.num_outputs = 1 : i64} {
  %a = buf.alloc : memref<1x32x20xf32>
  buf.packed_matmul ins(%w, %p : memref<1x32x16xf32>, memref<2x16x16xf32>) outs(%a : memref<1x32x20xf32>)
  %s = buf.alloc : memref<1x32x20xf32>
  buf.packed_matmul ins(%w, %p : memref<1x32x16xf32>, memref<2x16x16xf32>) outs(%s : memref<1x32x20xf32>)
  buf.bias_activation ins(%a, %s : memref<1x32x20xf32>, memref<1x32x20xf32>) outs(%out0 : memref<1x32x20xf32>) {activation = "relu"}
  func.return
}

// -----

// Left alone: a broadcast bias (fuse-matmul-epilogue's business), and a GEMM output that
// something else also reads.

// CHECK-LABEL: func.func @not_fused(
// CHECK-COUNT-2: buf.bias_activation
func.func @not_fused(%w: memref<1x32x16xf32>, %p: memref<2x16x16xf32>, %b: memref<32x1xf32>, %r: memref<1x32x20xf32>, %out0: memref<1x32x20xf32>, %out1: memref<1x32x20xf32>, %out2: memref<1x32x20xf32>) attributes {tg.num_outputs = 3 : i64} {
  %m = buf.alloc : memref<1x32x20xf32>
  buf.packed_matmul ins(%w, %p : memref<1x32x16xf32>, memref<2x16x16xf32>) outs(%m : memref<1x32x20xf32>)
  buf.bias_activation ins(%m, %b : memref<1x32x20xf32>, memref<32x1xf32>) outs(%out0 : memref<1x32x20xf32>) {activation = "relu"}
  %n = buf.alloc : memref<1x32x20xf32>
  buf.packed_matmul ins(%w, %p : memref<1x32x16xf32>, memref<2x16x16xf32>) outs(%n : memref<1x32x20xf32>)
  buf.bias_activation ins(%n, %r : memref<1x32x20xf32>, memref<1x32x20xf32>) outs(%out1 : memref<1x32x20xf32>) {activation = "relu"}
  buf.copy ins(%n : memref<1x32x20xf32>) outs(%out2 : memref<1x32x20xf32>)
  func.return
}

// -----

// A transformer block's residual, `x + linear(h)` (a buf.add, no activation): the projection's
// GEMM takes x as its addend after its bias. Left alone: an add that broadcasts.

// CHECK-LABEL: func.func @transformer_residual(
// CHECK:         buf.packed_matmul ins(%h, %p, %b, %x : memref<8x16xf32>, memref<2x16x16xf32>, memref<32xf32>, memref<8x32xf32>) outs(%out0 : memref<8x32xf32>) {beta = 1.000000e+00 : f32}
// CHECK-NEXT:    %[[N:.*]] = buf.alloc : memref<8x32xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%h, %p : memref<8x16xf32>, memref<2x16x16xf32>) outs(%[[N]] : memref<8x32xf32>)
// CHECK-NEXT:    buf.add ins(%[[N]], %b
func.func @transformer_residual(%h: memref<8x16xf32>, %p: memref<2x16x16xf32>, %b: memref<32xf32>, %x: memref<8x32xf32>, %out0: memref<8x32xf32>, %out1: memref<8x32xf32>) attributes {tg.num_outputs = 2 : i64} {
  %m = buf.alloc : memref<8x32xf32>
  buf.packed_matmul ins(%h, %p, %b : memref<8x16xf32>, memref<2x16x16xf32>, memref<32xf32>) outs(%m : memref<8x32xf32>) {beta = 1.000000e+00 : f32}
  buf.add ins(%m, %x : memref<8x32xf32>, memref<8x32xf32>) outs(%out0 : memref<8x32xf32>)
  %n = buf.alloc : memref<8x32xf32>
  buf.packed_matmul ins(%h, %p : memref<8x16xf32>, memref<2x16x16xf32>) outs(%n : memref<8x32xf32>)
  buf.add ins(%n, %b : memref<8x32xf32>, memref<32xf32>) outs(%out1 : memref<8x32xf32>)
  func.return
}
