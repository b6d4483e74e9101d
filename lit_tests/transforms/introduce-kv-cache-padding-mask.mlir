// RUN: tg-opt %s -p 'introduce-kv-cache{capacity=64 padding_mask=true}' | filecheck %s

// A batch of 3 (left-padded prompts): every layer's cached attention also reads the one
// key-padding mask state over the cache's positions, [3, 1, 1, 64].
// CHECK-LABEL: func.func @padded_batch
// CHECK: tg.state "kv.0.key" : tensor<3x2x64x16xf32>
// CHECK-NEXT: tg.state "kv.0.value" : tensor<3x2x64x16xf32>
// CHECK-NEXT: %[[M:.*]] = tg.state "kv.mask" : tensor<3x1x1x64xf32>
// CHECK-NEXT: tg.state "kv.1.key" : tensor<3x2x64x16xf32>
// CHECK-NOT: "kv.mask"
// CHECK: %a = tg.attention %q, %{{.*}}, %{{.*}} mask %[[M]] {scale = 2.500000e-01 : f32, causal = true, kv_cache = true} : (tensor<3x4x8x16xf32>, tensor<3x2x64x16xf32>, tensor<3x2x64x16xf32>, tensor<3x1x1x64xf32>) -> tensor<3x4x8x16xf32>
// CHECK: %b = tg.attention %a, %{{.*}}, %{{.*}} mask %[[M]] {scale = 2.500000e-01 : f32, causal = true, kv_cache = true}
func.func @padded_batch(%q: tensor<3x4x8x16xf32>, %k: tensor<3x2x8x16xf32>, %v: tensor<3x2x8x16xf32>) -> tensor<3x4x8x16xf32> {
  %a = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true} : (tensor<3x4x8x16xf32>, tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>) -> tensor<3x4x8x16xf32>
  %b = tg.attention %a, %k, %v {scale = 0.25 : f32, causal = true} : (tensor<3x4x8x16xf32>, tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>) -> tensor<3x4x8x16xf32>
  func.return %b : tensor<3x4x8x16xf32>
}
