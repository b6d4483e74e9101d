// RUN: tg-opt %s -p winograd-convolution,dce --split-input-file | filecheck %s

// A 3x3 convolution at stride 1 with a bias and ReLU in its GEMM's epilogue: one
// tg.winograd_conv of the input and the weight as stored, the bias reshaped to broadcast over
// the image, the epilogue carried over; the windows are dead.

// CHECK-LABEL: func.func @conv3x3(
// CHECK-NOT:     tg.im2col
// CHECK:         %[[B:.*]] = tg.reshape %b2 : (tensor<32x1xf32>) -> tensor<32x1x1xf32>
// CHECK-NEXT:    %[[Y:.*]] = tg.winograd_conv %x, %w, %[[B]] {padding = array<i64: 1, 1>, beta = 1.000000e+00 : f32, activation = "relu"} : (tensor<1x16x9x9xf32>, tensor<32x16x3x3xf32>, tensor<32x1x1xf32>) -> tensor<1x32x9x9xf32>
// CHECK-NEXT:    %{{.*}} = tg.reshape %[[Y]] : (tensor<1x32x9x9xf32>) -> tensor<1x32x81xf32>
// CHECK-NOT:     tg.matmul
func.func @conv3x3(%x: tensor<1x16x9x9xf32>) -> tensor<1x32x81xf32> {
  %w = tg.weight "conv.weight" : tensor<32x16x3x3xf32>
  %b = tg.weight "conv.bias" : tensor<32xf32>
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x16x9x9xf32>) -> tensor<1x16x3x3x9x9xf32>
  %w2 = tg.reshape %w : (tensor<32x16x3x3xf32>) -> tensor<32x144xf32>
  %c2 = tg.reshape %c : (tensor<1x16x3x3x9x9xf32>) -> tensor<1x144x81xf32>
  %b2 = tg.reshape %b : (tensor<32xf32>) -> tensor<32x1xf32>
  %y = tg.matmul %w2, %c2, %b2 {beta = 1.000000e+00 : f32, activation = "relu"} : (tensor<32x144xf32>, tensor<1x144x81xf32>, tensor<32x1xf32>) -> tensor<1x32x81xf32>
  func.return %y : tensor<1x32x81xf32>
}

// -----

// Without padding the image shrinks by 2; a residual accumulator [1, Cout, OH*OW] is reshaped
// to the image.

// CHECK-LABEL: func.func @valid_residual(
// CHECK:         %[[R:.*]] = tg.reshape %r : (tensor<1x16x49xf32>) -> tensor<1x16x7x7xf32>
// CHECK-NEXT:    tg.winograd_conv %x, %w, %[[R]] {padding = array<i64: 0, 0>, beta = 1.000000e+00 : f32} : (tensor<1x16x9x9xf32>, tensor<16x16x3x3xf32>, tensor<1x16x7x7xf32>) -> tensor<1x16x7x7xf32>
func.func @valid_residual(%x: tensor<1x16x9x9xf32>, %r: tensor<1x16x49xf32>) -> tensor<1x16x49xf32> {
  %w = tg.weight "conv.weight" : tensor<16x16x3x3xf32>
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x16x9x9xf32>) -> tensor<1x16x3x3x7x7xf32>
  %w2 = tg.reshape %w : (tensor<16x16x3x3xf32>) -> tensor<16x144xf32>
  %c2 = tg.reshape %c : (tensor<1x16x3x3x7x7xf32>) -> tensor<1x144x49xf32>
  %y = tg.matmul %w2, %c2, %r {beta = 1.000000e+00 : f32} : (tensor<16x144xf32>, tensor<1x144x49xf32>, tensor<1x16x49xf32>) -> tensor<1x16x49xf32>
  func.return %y : tensor<1x16x49xf32>
}

// -----

// A batch of images, its size a symbol: one tg.winograd_conv over the batch (each image's tiles
// transformed and multiplied by the same transformed weight), a residual over the batch reshaped
// to the images.

// CHECK-LABEL: func.func @batch(
// CHECK:         %[[R:.*]] = tg.reshape %r : (tensor<?x16x49xf32, ["n"]>) -> tensor<?x16x7x7xf32, ["n"]>
// CHECK-NEXT:    %[[Y:.*]] = tg.winograd_conv %x, %w, %[[R]] {padding = array<i64: 0, 0>, beta = 1.000000e+00 : f32} : (tensor<?x16x9x9xf32, ["n"]>, tensor<16x16x3x3xf32>, tensor<?x16x7x7xf32, ["n"]>) -> tensor<?x16x7x7xf32, ["n"]>
// CHECK-NEXT:    tg.reshape %[[Y]] : (tensor<?x16x7x7xf32, ["n"]>) -> tensor<?x16x49xf32, ["n"]>
builtin.module attributes {tg.symbols = {n = array<i64: 1, 8>}} {
func.func @batch(%x: tensor<?x16x9x9xf32, ["n"]>, %r: tensor<?x16x49xf32, ["n"]>) -> tensor<?x16x49xf32, ["n"]> {
  %w = tg.weight "conv.weight" : tensor<16x16x3x3xf32>
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<?x16x9x9xf32, ["n"]>) -> tensor<?x16x3x3x7x7xf32, ["n"]>
  %w2 = tg.reshape %w : (tensor<16x16x3x3xf32>) -> tensor<16x144xf32>
  %c2 = tg.reshape %c : (tensor<?x16x3x3x7x7xf32, ["n"]>) -> tensor<?x144x49xf32, ["n"]>
  %y = tg.matmul %w2, %c2, %r {beta = 1.000000e+00 : f32} : (tensor<16x144xf32>, tensor<?x144x49xf32, ["n"]>, tensor<?x16x49xf32, ["n"]>) -> tensor<?x16x49xf32, ["n"]>
  func.return %y : tensor<?x16x49xf32, ["n"]>
}
}

// -----

// Left alone: a stride of 2, fewer than 16 input channels, and a weight the graph computes.

// CHECK-LABEL: func.func @not_eligible(
// CHECK-NOT:     tg.winograd_conv
// CHECK-COUNT-3: tg.matmul
// CHECK-NOT:     tg.winograd_conv
func.func @not_eligible(%x: tensor<1x16x9x9xf32>, %x8: tensor<1x8x9x9xf32>, %wx: tensor<16x144xf32>) -> (tensor<1x16x25xf32>, tensor<1x16x81xf32>, tensor<1x16x81xf32>) {
  %w = tg.weight "conv.weight" : tensor<16x16x3x3xf32>
  %w8 = tg.weight "conv8.weight" : tensor<16x8x3x3xf32>
  %w2 = tg.reshape %w : (tensor<16x16x3x3xf32>) -> tensor<16x144xf32>
  %s = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x16x9x9xf32>) -> tensor<1x16x3x3x5x5xf32>
  %s2 = tg.reshape %s : (tensor<1x16x3x3x5x5xf32>) -> tensor<1x144x25xf32>
  %y0 = tg.matmul %w2, %s2 : (tensor<16x144xf32>, tensor<1x144x25xf32>) -> tensor<1x16x25xf32>
  %c8 = tg.im2col %x8 {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x8x9x9xf32>) -> tensor<1x8x3x3x9x9xf32>
  %c82 = tg.reshape %c8 : (tensor<1x8x3x3x9x9xf32>) -> tensor<1x72x81xf32>
  %w82 = tg.reshape %w8 : (tensor<16x8x3x3xf32>) -> tensor<16x72xf32>
  %y1 = tg.matmul %w82, %c82 : (tensor<16x72xf32>, tensor<1x72x81xf32>) -> tensor<1x16x81xf32>
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x16x9x9xf32>) -> tensor<1x16x3x3x9x9xf32>
  %c2 = tg.reshape %c : (tensor<1x16x3x3x9x9xf32>) -> tensor<1x144x81xf32>
  %y2 = tg.matmul %wx, %c2 : (tensor<16x144xf32>, tensor<1x144x81xf32>) -> tensor<1x16x81xf32>
  func.return %y0, %y1, %y2 : tensor<1x16x25xf32>, tensor<1x16x81xf32>, tensor<1x16x81xf32>
}
