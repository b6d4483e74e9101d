// RUN: tg-opt %s -p absorb-blas-flags | filecheck %s

// ----------------------------------------------------------------- transposes -> flags

// CHECK-LABEL: func.func @absorb$transpose_rhs
func.func @absorb$transpose_rhs(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w {transpose_b = true} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %t = tg.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %y = tg.matmul %x, %t : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @absorb$transpose_lhs_toggles_set_flag
func.func @absorb$transpose_lhs_toggles_set_flag(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %t = tg.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %y = tg.matmul %t, %w {transpose_a = true} : (tensor<4x2xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @absorb$batched_transpose_of_last_two_dims
func.func @absorb$batched_transpose_of_last_two_dims(%q: tensor<3x5x4xf32>, %k: tensor<3x6x4xf32>) -> tensor<3x5x6xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %q, %k {transpose_b = true} : (tensor<3x5x4xf32>, tensor<3x6x4xf32>) -> tensor<3x5x6xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %t = tg.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<3x6x4xf32>) -> tensor<3x4x6xf32>
  %y = tg.matmul %q, %t : (tensor<3x5x4xf32>, tensor<3x4x6xf32>) -> tensor<3x5x6xf32>
  func.return %y : tensor<3x5x6xf32>
}

// The transpose keeps its other user; the matmul still reads the untransposed tensor.
// CHECK-LABEL: func.func @absorb$transpose_with_other_users
func.func @absorb$transpose_with_other_users(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>) -> (tensor<2x8xf32>, tensor<4x8xf32>) {
  // CHECK: %[[T:.*]] = tg.transpose %w
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w {transpose_b = true}
  // CHECK-NEXT: func.return %[[Y]], %[[T]]
  %t = tg.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %y = tg.matmul %x, %t : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y, %t : tensor<2x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_as_transpose_moves_batch_dims
func.func @expect_no_absorb_as_transpose_moves_batch_dims(%q: tensor<3x5x4xf32>, %k: tensor<4x3x6xf32>) -> tensor<3x5x6xf32> {
  // CHECK: %[[T:.*]] = tg.transpose %k {perm = array<i64: 1, 0, 2>}
  // CHECK-NEXT: tg.matmul %q, %[[T]] : (tensor<3x5x4xf32>, tensor<3x4x6xf32>) -> tensor<3x5x6xf32>
  %t = tg.transpose %k {perm = array<i64: 1, 0, 2>} : (tensor<4x3x6xf32>) -> tensor<3x4x6xf32>
  %y = tg.matmul %q, %t : (tensor<3x5x4xf32>, tensor<3x4x6xf32>) -> tensor<3x5x6xf32>
  func.return %y : tensor<3x5x6xf32>
}

// ----------------------------------------------------------------- scalar scales -> alpha

// CHECK-LABEL: func.func @absorb$scaled_operands_into_alpha
func.func @absorb$scaled_operands_into_alpha(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w {alpha = 1.250000e+00 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %half = tg.constant dense<0.5> : tensor<f32>
  %two_fifths = tg.constant dense<0.4> : tensor<1x1xf32>
  %sx = tg.mul %half, %x : (tensor<f32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %sw = tg.div %w, %two_fifths : (tensor<4x8xf32>, tensor<1x1xf32>) -> tensor<4x8xf32>
  %y = tg.matmul %sx, %sw : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @absorb$scaled_result_into_alpha_and_beta
func.func @absorb$scaled_result_into_alpha_and_beta(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w, %b {alpha = 3.000000e+00 : f32, beta = 3.000000e+00 : f32}
  // CHECK-NEXT: func.return %[[Y]]
  %c = tg.constant dense<3.0> : tensor<f32>
  %y = tg.matmul %x, %w, %b {beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %s = tg.mul %y, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  func.return %s : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_as_product_has_other_users
func.func @expect_no_absorb_as_product_has_other_users(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: %[[S:.*]] = tg.mul %[[Y]], %{{.*}}
  // CHECK-NEXT: func.return %[[S]], %[[Y]]
  %c = tg.constant dense<3.0> : tensor<f32>
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %s = tg.mul %y, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  func.return %s, %y : tensor<2x8xf32>, tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_as_scale_is_not_a_scalar
func.func @expect_no_absorb_as_scale_is_not_a_scalar(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[S:.*]] = tg.mul %x, %{{.*}} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %[[S]], %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %c = tg.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %s = tg.mul %x, %c : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %y = tg.matmul %s, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_as_scale_is_not_a_constant
func.func @expect_no_absorb_as_scale_is_not_a_constant(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %c: tensor<f32>) -> tensor<2x8xf32> {
  // CHECK: %[[S:.*]] = tg.mul %x, %c
  // CHECK-NEXT: tg.matmul %[[S]], %w :
  %s = tg.mul %x, %c : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %y = tg.matmul %s, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_as_division_is_by_zero
func.func @expect_no_absorb_as_division_is_by_zero(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[S:.*]] = tg.div %x, %{{.*}}
  // CHECK-NEXT: tg.matmul %[[S]], %w :
  %zero = tg.constant dense<0.0> : tensor<f32>
  %s = tg.div %x, %zero : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %y = tg.matmul %s, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// ----------------------------------------------------------------- add -> accumulator

// CHECK-LABEL: func.func @absorb$add_bias_into_acc
func.func @absorb$add_bias_into_acc(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w, %b {beta = 1.000000e+00 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %z = tg.add %b, %y : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %z : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @absorb$sub_into_acc_with_negative_beta
func.func @absorb$sub_into_acc_with_negative_beta(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %c: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w, %c {beta = -1.000000e+00 : f32}
  // CHECK-NEXT: func.return %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %z = tg.sub %y, %c : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %z : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @absorb$sub_from_acc_negates_alpha
func.func @absorb$sub_from_acc_negates_alpha(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %c: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w, %c {alpha = -1.000000e+00 : f32, beta = 1.000000e+00 : f32}
  // CHECK-NEXT: func.return %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %z = tg.sub %c, %y : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %z : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_as_addend_does_not_broadcast_to_product
func.func @expect_no_absorb_as_addend_does_not_broadcast_to_product(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<3x1x8xf32>) -> tensor<3x2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: tg.add %[[Y]], %b
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %z = tg.add %y, %b : (tensor<2x8xf32>, tensor<3x1x8xf32>) -> tensor<3x2x8xf32>
  func.return %z : tensor<3x2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_as_matmul_already_has_acc
func.func @expect_no_absorb_as_matmul_already_has_acc(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w, %b
  // CHECK-NEXT: tg.add %[[Y]], %b
  %y = tg.matmul %x, %w, %b {beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %z = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return %z : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_as_sum_has_product_twice
func.func @expect_no_absorb_as_sum_has_product_twice(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w :
  // CHECK-NEXT: tg.add %[[Y]], %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %z = tg.add %y, %y : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %z : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_absorb_of_add_as_product_has_other_users
func.func @expect_no_absorb_of_add_as_product_has_other_users(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w :
  // CHECK-NEXT: %[[Z:.*]] = tg.add %[[Y]], %b
  // CHECK-NEXT: func.return %[[Z]], %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %z = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return %z, %y : tensor<2x8xf32>, tensor<2x8xf32>
}

// ----------------------------------------------------------------- all at once

// CHECK-LABEL: func.func @absorb$linear_layer_all_flags
func.func @absorb$linear_layer_all_flags(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w, %b {transpose_b = true, alpha = 5.000000e-01 : f32, beta = 5.000000e-01 : f32}
  // CHECK-NEXT: func.return %[[Y]]
  %c = tg.constant dense<2.0> : tensor<f32>
  %t = tg.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %y = tg.matmul %x, %t : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %z = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %s = tg.div %z, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  func.return %s : tensor<2x8xf32>
}

// Dead users (left by earlier rewrites for dce) do not count as other users; they go with the product.
// CHECK-LABEL: func.func @absorb$add_despite_dead_users_of_product
func.func @absorb$add_despite_dead_users_of_product(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.matmul %x, %w, %b {beta = 1.000000e+00 : f32}
  // CHECK-NEXT: func.return %[[Y]]
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %dead = tg.reshape %y : (tensor<2x8xf32>) -> tensor<16xf32>
  %dead2 = tg.relu %dead : tensor<16xf32>
  %z = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return %z : tensor<2x8xf32>
}

// The scaling mul is dead and the product has a live user: nothing to absorb.
// CHECK-LABEL: func.func @expect_no_absorb_as_scale_is_dead_and_product_is_live_elsewhere
func.func @expect_no_absorb_as_scale_is_dead_and_product_is_live_elsewhere(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[Y:.*]] = tg.matmul %x, %w :
  // CHECK-NEXT: %{{.*}} = tg.mul %[[Y]], %{{.*}}
  // CHECK-NEXT: %[[R:.*]] = tg.relu %[[Y]]
  // CHECK-NEXT: func.return %[[R]]
  %c = tg.constant dense<3.0> : tensor<f32>
  %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %dead = tg.mul %y, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %r = tg.relu %y : tensor<2x8xf32>
  func.return %r : tensor<2x8xf32>
}
