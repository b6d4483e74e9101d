// RUN: tg-opt %s -p fuse-bias-activation | filecheck %s

// CHECK-LABEL: func.func @fuse$relu_of_add_bias_rhs
func.func @fuse$relu_of_add_bias_rhs(%x: tensor<2x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[R:.*]] = tg.bias_activation %x, %b {activation = "relu"} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[R]]
  %s = tg.add %x, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %s : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @fuse$relu_of_add_bias_lhs
func.func @fuse$relu_of_add_bias_lhs(%x: tensor<3x2x8xf32>, %b: tensor<2x1xf32>) -> tensor<3x2x8xf32> {
  // CHECK-NEXT: %[[R:.*]] = tg.bias_activation %x, %b {activation = "relu"} : (tensor<3x2x8xf32>, tensor<2x1xf32>) -> tensor<3x2x8xf32>
  // CHECK-NEXT: func.return %[[R]]
  %s = tg.add %b, %x : (tensor<2x1xf32>, tensor<3x2x8xf32>) -> tensor<3x2x8xf32>
  %r = tg.relu %s : tensor<3x2x8xf32>
  func.return %r : tensor<3x2x8xf32>
}

// CHECK-LABEL: func.func @fuse$relu_of_matmul_accumulator
func.func @fuse$relu_of_matmul_accumulator(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w {transpose_b = true, alpha = 2.000000e+00 : f32} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: %[[R:.*]] = tg.bias_activation %[[Y]], %b {activation = "relu"} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[R]]
  %y = tg.matmul %x, %w, %b {transpose_b = true, alpha = 2.0 : f32, beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %y : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_add_has_other_users
func.func @expect_no_fuse_as_add_has_other_users(%x: tensor<2x8xf32>, %b: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  // CHECK-NEXT: %[[S:.*]] = tg.add %x, %b
  // CHECK-NEXT: %[[R:.*]] = tg.relu %[[S]]
  // CHECK-NEXT: func.return %[[R]], %[[S]]
  %s = tg.add %x, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %s : tensor<2x8xf32>
  func.return %r, %s : tensor<2x8xf32>, tensor<2x8xf32>
}

// Neither operand has the sum's shape: there is no `x` for the bias to be added to.
// CHECK-LABEL: func.func @expect_no_fuse_as_bias_does_not_broadcast_to_input
func.func @expect_no_fuse_as_bias_does_not_broadcast_to_input(%x: tensor<2x1xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[S:.*]] = tg.add %x, %b
  // CHECK-NEXT: tg.relu %[[S]]
  %s = tg.add %x, %b : (tensor<2x1xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %s : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_relu_is_of_a_mul
func.func @expect_no_fuse_as_relu_is_of_a_mul(%x: tensor<2x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[S:.*]] = tg.mul %x, %b
  // CHECK-NEXT: tg.relu %[[S]]
  %s = tg.mul %x, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %s : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_accumulator_beta_is_not_one
func.func @expect_no_fuse_as_accumulator_beta_is_not_one(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w, %b {beta = 5.000000e-01 : f32}
  // CHECK-NEXT: tg.relu %[[Y]]
  %y = tg.matmul %x, %w, %b {beta = 0.5 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %y : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_matmul_has_other_users
func.func @expect_no_fuse_as_matmul_has_other_users(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w, %b {beta = 1.000000e+00 : f32}
  // CHECK-NEXT: %[[R:.*]] = tg.relu %[[Y]]
  // CHECK-NEXT: func.return %[[R]], %[[Y]]
  %y = tg.matmul %x, %w, %b {beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %y : tensor<2x8xf32>
  func.return %r, %y : tensor<2x8xf32>, tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_matmul_has_no_accumulator
func.func @expect_no_fuse_as_matmul_has_no_accumulator(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w :
  // CHECK-NEXT: tg.relu %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %r = tg.relu %y : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// Dead users (left by earlier rewrites for dce) do not count as other users; they go with the add.
// CHECK-LABEL: func.func @fuse$relu_of_add_despite_dead_users
func.func @fuse$relu_of_add_despite_dead_users(%x: tensor<2x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[R:.*]] = tg.bias_activation %x, %b {activation = "relu"}
  // CHECK-NEXT: func.return %[[R]]
  %s = tg.add %x, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %dead = tg.transpose %s {perm = array<i64: 1, 0>} : (tensor<2x8xf32>) -> tensor<8x2xf32>
  %r = tg.relu %s : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}

// The relu is dead and the add has a live user: nothing to fuse, and the live user keeps the add.
// CHECK-LABEL: func.func @expect_no_fuse_as_relu_is_dead_and_add_is_live_elsewhere
func.func @expect_no_fuse_as_relu_is_dead_and_add_is_live_elsewhere(%x: tensor<2x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[S:.*]] = tg.add %x, %b
  // CHECK-NEXT: %{{.*}} = tg.relu %[[S]]
  // CHECK-NEXT: %[[M:.*]] = tg.mul %[[S]], %[[S]]
  // CHECK-NEXT: func.return %[[M]]
  %s = tg.add %x, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %dead = tg.relu %s : tensor<2x8xf32>
  %m = tg.mul %s, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %m : tensor<2x8xf32>
}
