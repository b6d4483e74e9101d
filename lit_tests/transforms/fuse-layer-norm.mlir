// RUN: tg-opt %s -p fuse-layer-norm | filecheck %s

// CHECK-LABEL: func.func @fuse$affine_pow_rsqrt
func.func @fuse$affine_pow_rsqrt(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[N:.*]] = tg.layer_norm %x, %w, %b : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[N]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-05> : tensor<f32>
  %m = tg.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = tg.sub %x, %m : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %sq = tg.pow %d, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %v = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %ve = tg.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %ve : tensor<2x1xf32>
  %n = tg.mul %d, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = tg.mul %n, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %z = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return %z : tensor<2x8xf32>
}

// No affine part: constant ones and zeros. (x - mean) twice, squared by a mul, 1 / sqrt, operands swapped.
// CHECK-LABEL: func.func @fuse$no_affine_mul_square_reciprocal_sqrt
func.func @fuse$no_affine_mul_square_reciprocal_sqrt(%x: tensor<3x2x4xf32>) -> tensor<3x2x4xf32> {
  // CHECK-NEXT: %[[W:.*]] = tg.constant dense<1.000000e+00> : tensor<4xf32>
  // CHECK-NEXT: %[[B:.*]] = tg.constant dense<0.000000e+00> : tensor<4xf32>
  // CHECK-NEXT: %[[N:.*]] = tg.layer_norm %x, %[[W]], %[[B]] {eps = 1.000000e-06 : f32} : (tensor<3x2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<3x2x4xf32>
  // CHECK-NEXT: func.return %[[N]]
  %one = tg.constant dense<1.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<1xf32>
  %m = tg.mean %x {dims = array<i64: 2>, keepdim = true} : (tensor<3x2x4xf32>) -> tensor<3x2x1xf32>
  %d = tg.sub %x, %m : (tensor<3x2x4xf32>, tensor<3x2x1xf32>) -> tensor<3x2x4xf32>
  %d2 = tg.sub %x, %m : (tensor<3x2x4xf32>, tensor<3x2x1xf32>) -> tensor<3x2x4xf32>
  %sq = tg.mul %d2, %d2 : (tensor<3x2x4xf32>, tensor<3x2x4xf32>) -> tensor<3x2x4xf32>
  %v = tg.mean %sq {dims = array<i64: 2>, keepdim = true} : (tensor<3x2x4xf32>) -> tensor<3x2x1xf32>
  %ve = tg.add %eps, %v : (tensor<1xf32>, tensor<3x2x1xf32>) -> tensor<3x2x1xf32>
  %s = tg.sqrt %ve : tensor<3x2x1xf32>
  %r = tg.div %one, %s : (tensor<f32>, tensor<3x2x1xf32>) -> tensor<3x2x1xf32>
  %n = tg.mul %r, %d : (tensor<3x2x1xf32>, tensor<3x2x4xf32>) -> tensor<3x2x4xf32>
  func.return %n : tensor<3x2x4xf32>
}

// Divided by sqrt; a [1, 1, D] weight is reshaped to [D]; no bias.
// CHECK-LABEL: func.func @fuse$div_sqrt_weight_only
func.func @fuse$div_sqrt_weight_only(%x: tensor<1x2x4xf32>, %w: tensor<1x1x4xf32>) -> tensor<1x2x4xf32> {
  // CHECK-NEXT: %[[W:.*]] = tg.reshape %w : (tensor<1x1x4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[B:.*]] = tg.constant dense<0.000000e+00> : tensor<4xf32>
  // CHECK-NEXT: %[[N:.*]] = tg.layer_norm %x, %[[W]], %[[B]]
  // CHECK-NEXT: func.return %[[N]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-05> : tensor<f32>
  %m = tg.mean %x {dims = array<i64: 2>, keepdim = true} : (tensor<1x2x4xf32>) -> tensor<1x2x1xf32>
  %d = tg.sub %x, %m : (tensor<1x2x4xf32>, tensor<1x2x1xf32>) -> tensor<1x2x4xf32>
  %sq = tg.pow %d, %two : (tensor<1x2x4xf32>, tensor<f32>) -> tensor<1x2x4xf32>
  %v = tg.mean %sq {dims = array<i64: 2>, keepdim = true} : (tensor<1x2x4xf32>) -> tensor<1x2x1xf32>
  %ve = tg.add %v, %eps : (tensor<1x2x1xf32>, tensor<f32>) -> tensor<1x2x1xf32>
  %s = tg.sqrt %ve : tensor<1x2x1xf32>
  %n = tg.div %d, %s : (tensor<1x2x4xf32>, tensor<1x2x1xf32>) -> tensor<1x2x4xf32>
  %y = tg.mul %w, %n : (tensor<1x1x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  func.return %y : tensor<1x2x4xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_mean_is_over_another_dim
func.func @expect_no_fuse_as_mean_is_over_another_dim(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.layer_norm
  // CHECK: func.return
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-05> : tensor<f32>
  %m = tg.mean %x {dims = array<i64: 0>, keepdim = true} : (tensor<2x8xf32>) -> tensor<1x8xf32>
  %d = tg.sub %x, %m : (tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
  %sq = tg.pow %d, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %v = tg.mean %sq {dims = array<i64: 0>, keepdim = true} : (tensor<2x8xf32>) -> tensor<1x8xf32>
  %ve = tg.add %v, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %r = tg.rsqrt %ve : tensor<1x8xf32>
  %n = tg.mul %d, %r : (tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
  func.return %n : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_variance_has_other_users
func.func @expect_no_fuse_as_variance_has_other_users(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x1xf32>) {
  // CHECK-NOT: tg.layer_norm
  // CHECK: func.return
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-05> : tensor<f32>
  %m = tg.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = tg.sub %x, %m : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %sq = tg.pow %d, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %v = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %ve = tg.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %ve : tensor<2x1xf32>
  %n = tg.mul %d, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  func.return %n, %v : tensor<2x8xf32>, tensor<2x1xf32>
}

// The square is of x, not of x - mean: that is RMS-like, not a layer norm.
// CHECK-LABEL: func.func @expect_no_fuse_as_variance_is_not_centered
func.func @expect_no_fuse_as_variance_is_not_centered(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.layer_norm
  // CHECK: func.return
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-05> : tensor<f32>
  %m = tg.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = tg.sub %x, %m : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %sq = tg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %v = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %ve = tg.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %ve : tensor<2x1xf32>
  %n = tg.mul %d, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  func.return %n : tensor<2x8xf32>
}

// A weight that is a full [2, 8] tensor is not a per-feature weight: only the normalisation fuses.
// CHECK-LABEL: func.func @fuse$norm_only_as_weight_is_not_a_vector
func.func @fuse$norm_only_as_weight_is_not_a_vector(%x: tensor<2x8xf32>, %w: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[N:.*]] = tg.layer_norm %x
  // CHECK-NEXT: %[[Y:.*]] = tg.mul %[[N]], %w
  // CHECK-NEXT: func.return %[[Y]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-05> : tensor<f32>
  %m = tg.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %d = tg.sub %x, %m : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %sq = tg.pow %d, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %v = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %ve = tg.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %ve : tensor<2x1xf32>
  %n = tg.mul %d, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = tg.mul %n, %w : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
