// RUN: tg-opt %s -p fuse-silu | filecheck %s

// CHECK-LABEL: func.func @fuse$x_times_sigmoid
func.func @fuse$x_times_sigmoid(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.silu %x : tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %s = tg.sigmoid %x : tensor<2x8xf32>
  %y = tg.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @fuse$sigmoid_times_x
func.func @fuse$sigmoid_times_x(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.silu %x : tensor<3x4xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %s = tg.sigmoid %x : tensor<3x4xf32>
  %y = tg.mul %s, %x : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  func.return %y : tensor<3x4xf32>
}

// CHECK-LABEL: func.func @fuse$x_over_one_plus_exp_neg
func.func @fuse$x_over_one_plus_exp_neg(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.silu %x : tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %one = tg.constant dense<1.0> : tensor<f32>
  %n = tg.neg %x : tensor<2x8xf32>
  %e = tg.exp %n : tensor<2x8xf32>
  %d = tg.add %one, %e : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = tg.div %x, %d : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @fuse$x_times_reciprocal_of_one_plus_exp_neg
func.func @fuse$x_times_reciprocal_of_one_plus_exp_neg(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[Y:.*]] = tg.silu %x : tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %one = tg.constant dense<1.0> : tensor<f32>
  %n = tg.neg %x : tensor<2x8xf32>
  %e = tg.exp %n : tensor<2x8xf32>
  %d = tg.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %s = tg.div %one, %d : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = tg.mul %s, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The sigmoid is of %g, the product is with %x (a gated form, not a SiLU).
// CHECK-LABEL: func.func @expect_no_fuse_as_sigmoid_is_of_another_value
func.func @expect_no_fuse_as_sigmoid_is_of_another_value(%x: tensor<2x8xf32>, %g: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.silu
  // CHECK: func.return
  %s = tg.sigmoid %g : tensor<2x8xf32>
  %y = tg.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_sigmoid_has_other_users
func.func @expect_no_fuse_as_sigmoid_has_other_users(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  // CHECK-NOT: tg.silu
  // CHECK: func.return
  %s = tg.sigmoid %x : tensor<2x8xf32>
  %y = tg.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y, %s : tensor<2x8xf32>, tensor<2x8xf32>
}

// exp(x) instead of exp(-x): x / (1 + e^x) is not a SiLU.
// CHECK-LABEL: func.func @expect_no_fuse_as_exponent_is_not_negated
func.func @expect_no_fuse_as_exponent_is_not_negated(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.silu
  // CHECK: func.return
  %one = tg.constant dense<1.0> : tensor<f32>
  %e = tg.exp %x : tensor<2x8xf32>
  %d = tg.add %one, %e : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = tg.div %x, %d : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The constant is 2, not 1.
// CHECK-LABEL: func.func @expect_no_fuse_as_constant_is_not_one
func.func @expect_no_fuse_as_constant_is_not_one(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.silu
  // CHECK: func.return
  %two = tg.constant dense<2.0> : tensor<f32>
  %n = tg.neg %x : tensor<2x8xf32>
  %e = tg.exp %n : tensor<2x8xf32>
  %d = tg.add %two, %e : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = tg.div %x, %d : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
