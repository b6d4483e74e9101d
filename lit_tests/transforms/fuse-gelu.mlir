// RUN: tg-opt %s -p fuse-gelu | filecheck %s

// GPT-2's NewGELUActivation as torch.export + convert-aten-to-tensor emit it: x used three times.
// CHECK-LABEL: func.func @fuse$tanh_form_with_pow
func.func @fuse$tanh_form_with_pow(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[G:.*]] = tg.gelu %x {approximate = "tanh"} : tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[G]]
  %half = tg.constant dense<0.5> : tensor<f32>
  %three = tg.constant dense<3.0> : tensor<f32>
  %c0 = tg.constant dense<0.044715> : tensor<f32>
  %c1 = tg.constant dense<0.7978845608> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %e = tg.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %p = tg.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %a = tg.mul %p, %c0 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %b = tg.add %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %c = tg.mul %b, %c1 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %t = tg.tanh %c : tensor<2x8xf32>
  %d = tg.add %t, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %f = tg.mul %e, %d : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %f : tensor<2x8xf32>
}

// x * x * x, operands swapped everywhere, the 0.5 applied last.
// CHECK-LABEL: func.func @fuse$tanh_form_with_cube_as_products_commuted
func.func @fuse$tanh_form_with_cube_as_products_commuted(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[G:.*]] = tg.gelu %x {approximate = "tanh"} : tensor<4xf32>
  // CHECK-NEXT: func.return %[[G]]
  %half = tg.constant dense<0.5> : tensor<f32>
  %c0 = tg.constant dense<0.044715> : tensor<f32>
  %c1 = tg.constant dense<0.79788456> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %xx = tg.mul %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %xxx = tg.mul %xx, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %a = tg.mul %c0, %xxx : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %b = tg.add %a, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = tg.mul %c1, %b : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %t = tg.tanh %c : tensor<4xf32>
  %d = tg.add %one, %t : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %e = tg.mul %d, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %f = tg.mul %half, %e : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %f : tensor<4xf32>
}

// CHECK-LABEL: func.func @fuse$erf_form_divided_by_sqrt2
func.func @fuse$erf_form_divided_by_sqrt2(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[G:.*]] = tg.gelu %x : tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[G]]
  %half = tg.constant dense<0.5> : tensor<f32>
  %sqrt2 = tg.constant dense<1.41421354> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %e = tg.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %s = tg.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %r = tg.erf %s : tensor<2x8xf32>
  %d = tg.add %r, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %f = tg.mul %e, %d : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %f : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @fuse$erf_form_times_sqrt_half
func.func @fuse$erf_form_times_sqrt_half(%x: tensor<3xf32>) -> tensor<3xf32> {
  // CHECK-NEXT: %[[G:.*]] = tg.gelu %x : tensor<3xf32>
  // CHECK-NEXT: func.return %[[G]]
  %half = tg.constant dense<0.5> : tensor<f32>
  %c = tg.constant dense<0.707106769> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %s = tg.mul %c, %x : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  %r = tg.erf %s : tensor<3xf32>
  %d = tg.add %one, %r : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  %e = tg.mul %x, %d : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %f = tg.mul %e, %half : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  func.return %f : tensor<3xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_tanh_argument_has_other_users
func.func @expect_no_fuse_as_tanh_argument_has_other_users(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NOT: tg.gelu
  // CHECK: func.return
  %half = tg.constant dense<0.5> : tensor<f32>
  %three = tg.constant dense<3.0> : tensor<f32>
  %c0 = tg.constant dense<0.044715> : tensor<f32>
  %c1 = tg.constant dense<0.7978845608> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %e = tg.mul %x, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %p = tg.pow %x, %three : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %a = tg.mul %p, %c0 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %b = tg.add %x, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = tg.mul %b, %c1 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %t = tg.tanh %c : tensor<4xf32>
  %d = tg.add %t, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %f = tg.mul %e, %d : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %f, %c : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_cubic_coefficient_is_wrong
func.func @expect_no_fuse_as_cubic_coefficient_is_wrong(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NOT: tg.gelu
  // CHECK: func.return
  %half = tg.constant dense<0.5> : tensor<f32>
  %three = tg.constant dense<3.0> : tensor<f32>
  %c0 = tg.constant dense<0.05> : tensor<f32>
  %c1 = tg.constant dense<0.7978845608> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %e = tg.mul %x, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %p = tg.pow %x, %three : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %a = tg.mul %p, %c0 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %b = tg.add %x, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = tg.mul %b, %c1 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %t = tg.tanh %c : tensor<4xf32>
  %d = tg.add %t, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %f = tg.mul %e, %d : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %f : tensor<4xf32>
}

// The three uses must be of one value: here the outer factor is %y, not %x.
// CHECK-LABEL: func.func @expect_no_fuse_as_outer_factor_is_another_value
func.func @expect_no_fuse_as_outer_factor_is_another_value(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NOT: tg.gelu
  // CHECK: func.return
  %half = tg.constant dense<0.5> : tensor<f32>
  %c = tg.constant dense<0.707106769> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %s = tg.mul %c, %x : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %r = tg.erf %s : tensor<4xf32>
  %d = tg.add %one, %r : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %e = tg.mul %y, %d : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %f = tg.mul %e, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  func.return %f : tensor<4xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_erf_is_replaced_by_tanh
func.func @expect_no_fuse_as_erf_is_replaced_by_tanh(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NOT: tg.gelu
  // CHECK: func.return
  %half = tg.constant dense<0.5> : tensor<f32>
  %c = tg.constant dense<0.707106769> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %s = tg.mul %c, %x : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %r = tg.tanh %s : tensor<4xf32>
  %d = tg.add %one, %r : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %e = tg.mul %x, %d : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %f = tg.mul %e, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  func.return %f : tensor<4xf32>
}
