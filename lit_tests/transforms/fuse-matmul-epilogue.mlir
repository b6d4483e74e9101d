// RUN: tg-opt %s -p fuse-matmul-epilogue | filecheck %s

// CHECK-LABEL: func.func @fuse$gelu_tanh_after_matmul_with_bias
func.func @fuse$gelu_tanh_after_matmul_with_bias(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.000000e+00 : f32, activation = "gelu_tanh"} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %g = tg.gelu %y {approximate = "tanh"} : tensor<2x8xf32>
  func.return %g : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @fuse$relu_silu_sigmoid_tanh_gelu
func.func @fuse$relu_silu_sigmoid_tanh_gelu(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  // CHECK-NEXT: %[[A:.*]] = tg.matmul %x, %w {activation = "relu"}
  // CHECK-NEXT: %[[B:.*]] = tg.matmul %[[A]], %w {activation = "silu"}
  // CHECK-NEXT: %[[C:.*]] = tg.matmul %[[B]], %w {activation = "sigmoid"}
  // CHECK-NEXT: %[[D:.*]] = tg.matmul %[[C]], %w {activation = "tanh"}
  // CHECK-NEXT: %[[E:.*]] = tg.matmul %[[D]], %w {activation = "gelu"}
  // CHECK-NEXT: func.return %[[E]]
  %a = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %ra = tg.relu %a : tensor<2x4xf32>
  %b = tg.matmul %ra, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %rb = tg.silu %b : tensor<2x4xf32>
  %c = tg.matmul %rb, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %rc = tg.sigmoid %c : tensor<2x4xf32>
  %d = tg.matmul %rc, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %rd = tg.tanh %d : tensor<2x4xf32>
  %e = tg.matmul %rd, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %re = tg.gelu %e : tensor<2x4xf32>
  func.return %re : tensor<2x4xf32>
}

// CHECK-LABEL: func.func @fuse$bias_activation_of_matmul
func.func @fuse$bias_activation_of_matmul(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w, %b {alpha = 5.000000e-01 : f32, beta = 1.000000e+00 : f32, activation = "relu"} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %y = tg.matmul %x, %w {alpha = 0.5 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %r = tg.bias_activation %y, %b {activation = "relu"} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_matmul_has_other_users
func.func @expect_no_fuse_as_matmul_has_other_users(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w :
  // CHECK-NEXT: %[[R:.*]] = tg.relu %[[Y]]
  // CHECK-NEXT: func.return %[[R]], %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %y : tensor<2x8xf32>
  func.return %r, %y : tensor<2x8xf32>, tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_exp_is_not_an_activation
func.func @expect_no_fuse_as_exp_is_not_an_activation(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w :
  // CHECK-NEXT: tg.exp %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %r = tg.exp %y : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// The matmul already applies an activation: a second one stays separate.
// CHECK-LABEL: func.func @expect_no_fuse_as_matmul_has_an_activation
func.func @expect_no_fuse_as_matmul_has_an_activation(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w {activation = "relu"}
  // CHECK-NEXT: tg.tanh %[[Y]]
  %y = tg.matmul %x, %w {activation = "relu"} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %r = tg.tanh %y : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_matmul_already_has_an_accumulator
func.func @expect_no_fuse_as_matmul_already_has_an_accumulator(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w, %b
  // CHECK-NEXT: tg.bias_activation %[[Y]], %b
  %y = tg.matmul %x, %w, %b {beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = tg.bias_activation %y, %b {activation = "relu"} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// -----

// GPT-2's MLP: addmm -> view -> gelu; the reshape is looked through.
// CHECK-LABEL: func.func @fuse$activation_through_reshape
// CHECK:         %[[M:.*]] = tg.matmul %{{.*}}, %{{.*}}, %{{.*}} {beta = 1.000000e+00 : f32, activation = "gelu_tanh"} : (tensor<7x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<7x32xf32>
// CHECK-NEXT:    %[[R:.*]] = tg.reshape %[[M]] : (tensor<7x32xf32>) -> tensor<1x7x32xf32>
// CHECK-NEXT:    func.return %[[R]]
func.func @fuse$activation_through_reshape(%x: tensor<7x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<1x7x32xf32> {
  %y = tg.matmul %x, %w, %b {beta = 1.0 : f32} : (tensor<7x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<7x32xf32>
  %v = tg.reshape %y : (tensor<7x32xf32>) -> tensor<1x7x32xf32>
  %g = tg.gelu %v {approximate = "tanh"} : tensor<1x7x32xf32>
  func.return %g : tensor<1x7x32xf32>
}

// -----

// CHECK-LABEL: func.func @expect_no_fuse$reshape_has_other_users
// CHECK:         tg.matmul
// CHECK-NOT:     activation
// CHECK:         tg.gelu
func.func @expect_no_fuse$reshape_has_other_users(%x: tensor<7x16xf32>, %w: tensor<16x32xf32>) -> (tensor<1x7x32xf32>, tensor<1x7x32xf32>) {
  %y = tg.matmul %x, %w : (tensor<7x16xf32>, tensor<16x32xf32>) -> tensor<7x32xf32>
  %v = tg.reshape %y : (tensor<7x32xf32>) -> tensor<1x7x32xf32>
  %g = tg.gelu %v : tensor<1x7x32xf32>
  func.return %g, %v : tensor<1x7x32xf32>, tensor<1x7x32xf32>
}

// An activation whose only user is an elementwise op of its shape stays out of the GEMM: it runs
// in that op's fused loop (fuse-elementwise), where it costs nothing either, and a GEMM in the GPU
// path's vendor library needs no sweep of its own for it. A SwiGLU's gate:
// CHECK-LABEL: func.func @expect_no_fuse_as_the_activation_feeds_an_elementwise_op
func.func @expect_no_fuse_as_the_activation_feeds_an_elementwise_op(%x: tensor<40x16xf32>, %wg: tensor<32x16xf32>, %wu: tensor<32x16xf32>) -> tensor<40x32xf32> {
  // CHECK-NEXT: %[[G:.*]] = tg.matmul %x, %wg {transpose_b = true} :
  // CHECK-NEXT: %[[S:.*]] = tg.silu %[[G]]
  // CHECK-NEXT: %[[U:.*]] = tg.matmul %x, %wu {transpose_b = true} :
  // CHECK-NEXT: tg.mul %[[S]], %[[U]]
  %g = tg.matmul %x, %wg {transpose_b = true} : (tensor<40x16xf32>, tensor<32x16xf32>) -> tensor<40x32xf32>
  %s = tg.silu %g : tensor<40x32xf32>
  %u = tg.matmul %x, %wu {transpose_b = true} : (tensor<40x16xf32>, tensor<32x16xf32>) -> tensor<40x32xf32>
  %m = tg.mul %s, %u : (tensor<40x32xf32>, tensor<40x32xf32>) -> tensor<40x32xf32>
  func.return %m : tensor<40x32xf32>
}

// ... but one feeding an elementwise op of another shape (a broadcast into a wider result: not
// one loop) is fused as before.
// CHECK-LABEL: func.func @fuse$activation_feeding_a_broadcast
func.func @fuse$activation_feeding_a_broadcast(%x: tensor<1x16xf32>, %w: tensor<32x16xf32>, %y: tensor<4x32xf32>) -> tensor<4x32xf32> {
  // CHECK-NEXT: %[[G:.*]] = tg.matmul %x, %w {transpose_b = true, activation = "silu"} :
  // CHECK-NEXT: tg.mul %[[G]], %y
  %g = tg.matmul %x, %w {transpose_b = true} : (tensor<1x16xf32>, tensor<32x16xf32>) -> tensor<1x32xf32>
  %s = tg.silu %g : tensor<1x32xf32>
  %m = tg.mul %s, %y : (tensor<1x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  func.return %m : tensor<4x32xf32>
}
