// RUN: tg-opt %s -p fuse-rms-norm-rope | filecheck %s

// Qwen3's per-head norm, then the rotation: one tg.rope with a norm prologue.
// CHECK-LABEL: func.func @norm_then_rope
// CHECK-NEXT: %r = tg.rope %x, %cos, %sin norm %w {eps = 1.000000e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>, tensor<16xf32>) -> tensor<1x8x4x16xf32>
// CHECK-NEXT: func.return %r
func.func @norm_then_rope(%x: tensor<1x8x4x16xf32>, %w: tensor<16xf32>, %cos: tensor<1x8x1x16xf32>, %sin: tensor<1x8x1x16xf32>) -> tensor<1x8x4x16xf32> {
  %n = tg.rms_norm %x, %w {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>) -> tensor<1x8x4x16xf32>
  %r = tg.rope %n, %cos, %sin : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %r : tensor<1x8x4x16xf32>
}

// Left alone: a norm with another user (it must be written anyway).
// CHECK-LABEL: func.func @norm_used_twice
// CHECK-NEXT: %n = tg.rms_norm %x, %w
// CHECK-NEXT: %r = tg.rope %n, %cos, %sin :
func.func @norm_used_twice(%x: tensor<2x16xf32>, %w: tensor<16xf32>, %cos: tensor<2x16xf32>, %sin: tensor<2x16xf32>) -> (tensor<2x16xf32>, tensor<2x16xf32>) {
  %n = tg.rms_norm %x, %w {eps = 1.0e-06 : f32} : (tensor<2x16xf32>, tensor<16xf32>) -> tensor<2x16xf32>
  %r = tg.rope %n, %cos, %sin : (tensor<2x16xf32>, tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32>
  func.return %n, %r : tensor<2x16xf32>, tensor<2x16xf32>
}
