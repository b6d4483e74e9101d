// RUN: tg-opt %s -p fuse-rms-norm | filecheck %s

// Hugging Face's LlamaRMSNorm: weight * (x * rsqrt(mean(pow(x, 2)) + eps)).
// CHECK-LABEL: func.func @fuse$weight_left_pow_rsqrt
func.func @fuse$weight_left_pow_rsqrt(%x: tensor<2x8xf32>, %w: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[N:.*]] = tg.rms_norm %x, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[N]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %sq = tg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %me : tensor<2x1xf32>
  %n = tg.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = tg.mul %w, %n : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// No weight: a constant of ones. Squared by a mul, eps first, 1 / sqrt, operands swapped.
// CHECK-LABEL: func.func @fuse$no_weight_mul_square_reciprocal_sqrt
func.func @fuse$no_weight_mul_square_reciprocal_sqrt(%x: tensor<3x2x4xf32>) -> tensor<3x2x4xf32> {
  // CHECK-NEXT: %[[W:.*]] = tg.constant dense<1.000000e+00> : tensor<4xf32>
  // CHECK-NEXT: %[[N:.*]] = tg.rms_norm %x, %[[W]] {eps = 1.000000e-05 : f32} : (tensor<3x2x4xf32>, tensor<4xf32>) -> tensor<3x2x4xf32>
  // CHECK-NEXT: func.return %[[N]]
  %one = tg.constant dense<1.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-05> : tensor<1xf32>
  %sq = tg.mul %x, %x : (tensor<3x2x4xf32>, tensor<3x2x4xf32>) -> tensor<3x2x4xf32>
  %ms = tg.mean %sq {dims = array<i64: 2>, keepdim = true} : (tensor<3x2x4xf32>) -> tensor<3x2x1xf32>
  %me = tg.add %eps, %ms : (tensor<1xf32>, tensor<3x2x1xf32>) -> tensor<3x2x1xf32>
  %s = tg.sqrt %me : tensor<3x2x1xf32>
  %r = tg.div %one, %s : (tensor<f32>, tensor<3x2x1xf32>) -> tensor<3x2x1xf32>
  %n = tg.mul %r, %x : (tensor<3x2x1xf32>, tensor<3x2x4xf32>) -> tensor<3x2x4xf32>
  func.return %n : tensor<3x2x4xf32>
}

// Divided by sqrt; a [1, 1, D] weight on the right is reshaped to [D].
// CHECK-LABEL: func.func @fuse$div_sqrt_weight_right_reshaped
func.func @fuse$div_sqrt_weight_right_reshaped(%x: tensor<1x2x4xf32>, %w: tensor<1x1x4xf32>) -> tensor<1x2x4xf32> {
  // CHECK-NEXT: %[[W:.*]] = tg.reshape %w : (tensor<1x1x4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[N:.*]] = tg.rms_norm %x, %[[W]] {eps = 1.000000e-05 : f32}
  // CHECK-NEXT: func.return %[[N]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-05> : tensor<f32>
  %sq = tg.pow %x, %two : (tensor<1x2x4xf32>, tensor<f32>) -> tensor<1x2x4xf32>
  %ms = tg.mean %sq {dims = array<i64: 2>, keepdim = true} : (tensor<1x2x4xf32>) -> tensor<1x2x1xf32>
  %me = tg.add %ms, %eps : (tensor<1x2x1xf32>, tensor<f32>) -> tensor<1x2x1xf32>
  %s = tg.sqrt %me : tensor<1x2x1xf32>
  %n = tg.div %x, %s : (tensor<1x2x4xf32>, tensor<1x2x1xf32>) -> tensor<1x2x4xf32>
  %y = tg.mul %n, %w : (tensor<1x2x4xf32>, tensor<1x1x4xf32>) -> tensor<1x2x4xf32>
  func.return %y : tensor<1x2x4xf32>
}

// The weight multiplies x first: (w * x) * r.
// CHECK-LABEL: func.func @fuse$weight_times_x_then_rsqrt
func.func @fuse$weight_times_x_then_rsqrt(%x: tensor<2x8xf32>, %w: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[N:.*]] = tg.rms_norm %x, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[N]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %sq = tg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %me : tensor<2x1xf32>
  %xw = tg.mul %w, %x : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = tg.mul %xw, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The weight multiplies the inverse RMS first: x * (r * w).
// CHECK-LABEL: func.func @fuse$rsqrt_times_weight_then_x
func.func @fuse$rsqrt_times_weight_then_x(%x: tensor<2x8xf32>, %w: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NEXT: %[[N:.*]] = tg.rms_norm %x, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: func.return %[[N]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %sq = tg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %me : tensor<2x1xf32>
  %rw = tg.mul %r, %w : (tensor<2x1xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.mul %x, %rw : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// Cast to f32 and back (Qwen3RMSNorm on a half-precision input): the norm fuses in float32 (its
// kernel's dtype), the casts stay around it.
// CHECK-LABEL: func.func @fuse$cast_round_trip
func.func @fuse$cast_round_trip(%x: tensor<2x8xf16>) -> tensor<2x8xf16> {
  // CHECK-NEXT: %[[XF:.*]] = tg.cast %x : (tensor<2x8xf16>) -> tensor<2x8xf32>
  // CHECK-NEXT: %[[W:.*]] = tg.constant dense<1.000000e+00> : tensor<8xf32>
  // CHECK-NEXT: %[[N:.*]] = tg.rms_norm %[[XF]], %[[W]] : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: %[[Y:.*]] = tg.cast %[[N]] : (tensor<2x8xf32>) -> tensor<2x8xf16>
  // CHECK-NEXT: func.return %[[Y]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %xf = tg.cast %x : (tensor<2x8xf16>) -> tensor<2x8xf32>
  %sq = tg.pow %xf, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %me : tensor<2x1xf32>
  %n = tg.mul %xf, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = tg.cast %n : (tensor<2x8xf32>) -> tensor<2x8xf16>
  func.return %y : tensor<2x8xf16>
}

// A weight that is a full [2, 8] tensor is not a per-feature weight: only the normalisation fuses.
// CHECK-LABEL: func.func @fuse$norm_only_as_weight_is_not_a_vector
func.func @fuse$norm_only_as_weight_is_not_a_vector(%x: tensor<2x8xf32>, %w: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK: %[[N:.*]] = tg.rms_norm %x
  // CHECK-NEXT: %[[Y:.*]] = tg.mul %[[N]], %w
  // CHECK-NEXT: func.return %[[Y]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %sq = tg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %me : tensor<2x1xf32>
  %n = tg.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = tg.mul %n, %w : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_mean_is_over_another_dim
func.func @expect_no_fuse_as_mean_is_over_another_dim(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rms_norm
  // CHECK: func.return
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %sq = tg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 0>, keepdim = true} : (tensor<2x8xf32>) -> tensor<1x8xf32>
  %me = tg.add %ms, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %r = tg.rsqrt %me : tensor<1x8xf32>
  %n = tg.mul %x, %r : (tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
  func.return %n : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_mean_square_has_other_users
func.func @expect_no_fuse_as_mean_square_has_other_users(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x1xf32>) {
  // CHECK-NOT: tg.rms_norm
  // CHECK: func.return
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %sq = tg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %me : tensor<2x1xf32>
  %n = tg.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  func.return %n, %ms : tensor<2x8xf32>, tensor<2x1xf32>
}

// The mean square is of %y, the product is of %x.
// CHECK-LABEL: func.func @expect_no_fuse_as_square_is_of_another_value
func.func @expect_no_fuse_as_square_is_of_another_value(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rms_norm
  // CHECK: func.return
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %sq = tg.pow %y, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %me : tensor<2x1xf32>
  %n = tg.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  func.return %n : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_exponent_is_not_two
func.func @expect_no_fuse_as_exponent_is_not_two(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rms_norm
  // CHECK: func.return
  %three = tg.constant dense<3.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-06> : tensor<f32>
  %sq = tg.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %r = tg.rsqrt %me : tensor<2x1xf32>
  %n = tg.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  func.return %n : tensor<2x8xf32>
}
