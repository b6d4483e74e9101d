// RUN: tg-opt %s | tg-opt | filecheck %s
// Round trip of every tg op.

// CHECK-LABEL: func.func @mlp_layer
func.func @mlp_layer(%x: tensor<2x256xf32>) -> tensor<2x1024xf32> {
  // CHECK: tg.weight "fc1.weight" : tensor<1024x256xf32>
  %w = tg.weight "fc1.weight" : tensor<1024x256xf32>
  %b = tg.weight "fc1.bias" : tensor<1024xf32>
  // CHECK: tg.constant dense<2.000000e+00> : tensor<f32>
  %c = tg.constant dense<2.0> : tensor<f32>
  // CHECK: tg.matmul %{{.*}}, %{{.*}}, %{{.*}} {transpose_b = true, beta = 1.000000e+00 : f32} : (tensor<2x256xf32>, tensor<1024x256xf32>, tensor<1024xf32>) -> tensor<2x1024xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32} : (tensor<2x256xf32>, tensor<1024x256xf32>, tensor<1024xf32>) -> tensor<2x1024xf32>
  // CHECK: tg.mul %{{.*}}, %{{.*}} : (tensor<2x1024xf32>, tensor<f32>) -> tensor<2x1024xf32>
  %m = tg.mul %y, %c : (tensor<2x1024xf32>, tensor<f32>) -> tensor<2x1024xf32>
  // CHECK: tg.add
  %a = tg.add %m, %b : (tensor<2x1024xf32>, tensor<1024xf32>) -> tensor<2x1024xf32>
  // CHECK: tg.sub
  %s0 = tg.sub %a, %m : (tensor<2x1024xf32>, tensor<2x1024xf32>) -> tensor<2x1024xf32>
  // CHECK: tg.div
  %d = tg.div %s0, %c : (tensor<2x1024xf32>, tensor<f32>) -> tensor<2x1024xf32>
  // CHECK: tg.relu %{{.*}} : tensor<2x1024xf32>
  %r = tg.relu %d : tensor<2x1024xf32>
  // CHECK: tg.transpose %{{.*}} {perm = array<i64: 1, 0>} : (tensor<2x1024xf32>) -> tensor<1024x2xf32>
  %t = tg.transpose %r {perm = array<i64: 1, 0>} : (tensor<2x1024xf32>) -> tensor<1024x2xf32>
  // CHECK: tg.reshape %{{.*}} : (tensor<1024x2xf32>) -> tensor<2x1024xf32>
  %s = tg.reshape %t : (tensor<1024x2xf32>) -> tensor<2x1024xf32>
  // CHECK: tg.bias_activation %{{.*}}, %{{.*}} {activation = "relu"} : (tensor<2x1024xf32>, tensor<1024xf32>) -> tensor<2x1024xf32>
  %ba = tg.bias_activation %s, %b {activation = "relu"} : (tensor<2x1024xf32>, tensor<1024xf32>) -> tensor<2x1024xf32>
  func.return %ba : tensor<2x1024xf32>
}

// CHECK-LABEL: func.func @batched_matmul_broadcast
func.func @batched_matmul_broadcast(%a: tensor<4x3x8x16xf32>, %b: tensor<3x16x5xf32>) -> tensor<4x3x8x5xf32> {
  // CHECK: tg.matmul %{{.*}}, %{{.*}} : (tensor<4x3x8x16xf32>, tensor<3x16x5xf32>) -> tensor<4x3x8x5xf32>
  %y = tg.matmul %a, %b : (tensor<4x3x8x16xf32>, tensor<3x16x5xf32>) -> tensor<4x3x8x5xf32>
  func.return %y : tensor<4x3x8x5xf32>
}

// CHECK-LABEL: func.func @rms_norm
func.func @rms_norm(%x: tensor<2x8x16xf32>, %w: tensor<16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NEXT: %{{.*}} = tg.rms_norm %x, %w {eps = 1.000000e-05 : f32} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %y = tg.rms_norm %x, %w {eps = 1.0e-05 : f32} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  // CHECK-NEXT: %{{.*}} = tg.rms_norm %{{.*}}, %w : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %z = tg.rms_norm %y, %w : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  // CHECK-NEXT: %{{.*}} = tg.cumsum %z {dim = 1 : i64} : tensor<2x8x16xf32>
  %cs = tg.cumsum %z {dim = 1 : i64} : tensor<2x8x16xf32>
  // CHECK-NEXT: %{{.*}} = tg.cumsum %z {dim = 2 : i64, reduce = "logsumexp"} : tensor<2x8x16xf32>
  %cl = tg.cumsum %z {dim = 2 : i64, reduce = "logsumexp"} : tensor<2x8x16xf32>
  %ints = tg.constant dense<3> : tensor<2x8xi64>
  // CHECK: tg.check_nonzero %{{.*}} : tensor<2x8xi64>
  %nz = tg.check_nonzero %ints : tensor<2x8xi64>
  func.return %z : tensor<2x8x16xf32>
}

// CHECK-LABEL: func.func @rope
func.func @rope(%q: tensor<1x4x8x16xf32>, %cos: tensor<1x1x8x16xf32>, %sin: tensor<8x16xf32>) -> tensor<1x4x8x16xf32> {
  // CHECK-NEXT: %r = tg.rope %q, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %r = tg.rope %q, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %r : tensor<1x4x8x16xf32>
}

// KV cache: a persistent state, written in place at the run-time position, read by attention
// CHECK-LABEL: func.func @kv_cache_decode
func.func @kv_cache_decode(%q: tensor<1x4x1x16xf32>, %k: tensor<1x2x1x16xf32>) -> tensor<1x4x1x16xf32> {
  // CHECK-NEXT: %ks = tg.state "kv.0.key" : tensor<1x2x40x16xf32>
  %ks = tg.state "kv.0.key" : tensor<1x2x40x16xf32>
  // CHECK-NEXT: %kc = tg.cache_write %k into %ks {axis = 2 : i64} : (tensor<1x2x40x16xf32>, tensor<1x2x1x16xf32>) -> tensor<1x2x40x16xf32>
  %kc = tg.cache_write %k into %ks {axis = 2 : i64} : (tensor<1x2x40x16xf32>, tensor<1x2x1x16xf32>) -> tensor<1x2x40x16xf32>
  // CHECK-NEXT: %o = tg.attention %q, %kc, %kc {scale = 2.500000e-01 : f32, kv_cache = true} : (tensor<1x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>) -> tensor<1x4x1x16xf32>
  %o = tg.attention %q, %kc, %kc {scale = 0.25 : f32, kv_cache = true} : (tensor<1x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>) -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}

// CHECK-LABEL: func.func @kv_cache_prefill
func.func @kv_cache_prefill(%q: tensor<1x4x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %vs = tg.state "kv.0.value" : tensor<1x2x40x16xf32>
  // CHECK: tg.cache_write %v into %vs {axis = 2 : i64} : (tensor<1x2x40x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x40x16xf32>
  %vc = tg.cache_write %v into %vs {axis = 2 : i64} : (tensor<1x2x40x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x40x16xf32>
  // CHECK-NEXT: tg.attention %q, %vc, %vc {scale = 2.500000e-01 : f32, causal = true, kv_cache = true}
  %o = tg.attention %q, %vc, %vc {scale = 0.25 : f32, causal = true, kv_cache = true} : (tensor<1x4x8x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}

// Attention over sequence-major buffers ([B, S, H, D]: a projection's output, untransposed)
// CHECK-LABEL: func.func @attention_seq_major
func.func @attention_seq_major(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x8x4x16xf32> {
  // CHECK-NEXT: %o = tg.attention %q, %k, %v {scale = 2.500000e-01 : f32, causal = true, q_seq_major = true, k_seq_major = true, out_seq_major = true} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x8x4x16xf32>
  %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true, q_seq_major = true, k_seq_major = true, out_seq_major = true} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %o : tensor<1x8x4x16xf32>
}

// The windows of a 3x3 convolution at stride 2 over a 7x6 image padded by 1, and of a
// ceil-mode max pooling (one more window along the height, padded with -inf)
// CHECK-LABEL: func.func @im2col
func.func @im2col(%x: tensor<1x4x7x6xf32>) -> (tensor<1x4x3x3x4x3xf32>, tensor<1x4x2x2x4x3xf32>) {
  // CHECK-NEXT: %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x4x7x6xf32>) -> tensor<1x4x3x3x4x3xf32>
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x4x7x6xf32>) -> tensor<1x4x3x3x4x3xf32>
  // CHECK-NEXT: %p = tg.im2col %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, pad_value = 0xff800000 : f32} : (tensor<1x4x7x6xf32>) -> tensor<1x4x2x2x4x3xf32>
  %p = tg.im2col %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, pad_value = 0xff800000 : f32} : (tensor<1x4x7x6xf32>) -> tensor<1x4x2x2x4x3xf32>
  func.return %c, %p : tensor<1x4x3x3x4x3xf32>, tensor<1x4x2x2x4x3xf32>
}

// The reductions besides sum/mean/amax, and the arg reductions (argmax, argmin)
// CHECK-LABEL: func.func @more_reductions
func.func @more_reductions(%x: tensor<4x7xf32>, %m: tensor<4x7xi1>) -> (tensor<4xf32>, tensor<7xf32>, tensor<4x1xi1>, tensor<4xi64>) {
  // CHECK-NEXT: %a = tg.amin %x {dims = array<i64: 1>} : (tensor<4x7xf32>) -> tensor<4xf32>
  %a = tg.amin %x {dims = array<i64: 1>} : (tensor<4x7xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %p = tg.prod %x {dims = array<i64: 0>} : (tensor<4x7xf32>) -> tensor<7xf32>
  %p = tg.prod %x {dims = array<i64: 0>} : (tensor<4x7xf32>) -> tensor<7xf32>
  // CHECK-NEXT: %n = tg.any %m {dims = array<i64: 1>, keepdim = true} : (tensor<4x7xi1>) -> tensor<4x1xi1>
  %n = tg.any %m {dims = array<i64: 1>, keepdim = true} : (tensor<4x7xi1>) -> tensor<4x1xi1>
  // CHECK-NEXT: %i = tg.arg_reduce %x {kind = "max", dim = 1 : i64} : (tensor<4x7xf32>) -> tensor<4xi64>
  %i = tg.arg_reduce %x {kind = "max", dim = 1 : i64} : (tensor<4x7xf32>) -> tensor<4xi64>
  func.return %a, %p, %n, %i : tensor<4xf32>, tensor<7xf32>, tensor<4x1xi1>, tensor<4xi64>
}

// CHECK-LABEL: func.func @lapack
func.func @lapack(%a: tensor<2x4x4xf64>, %b: tensor<2x4x3xf64>) -> tensor<2x4x3xf64> {
  // CHECK-NEXT: %lu = tg.lapack "getrf" "lu" %a : (tensor<2x4x4xf64>) -> tensor<2x4x4xf64>
  %lu = tg.lapack "getrf" "lu" %a : (tensor<2x4x4xf64>) -> tensor<2x4x4xf64>
  // CHECK-NEXT: %p = tg.lapack "getrf" "pivots" %a {check = "torch.linalg.lu_factor"} : (tensor<2x4x4xf64>) -> tensor<2x4xi32>
  %p = tg.lapack "getrf" "pivots" %a {check = "torch.linalg.lu_factor"} : (tensor<2x4x4xf64>) -> tensor<2x4xi32>
  // CHECK-NEXT: %x = tg.lapack "getrs" "x" %lu, %p, %b {params = {trans = "T"}} : (tensor<2x4x4xf64>, tensor<2x4xi32>, tensor<2x4x3xf64>) -> tensor<2x4x3xf64>
  %x = tg.lapack "getrs" "x" %lu, %p, %b {params = {trans = "T"}} : (tensor<2x4x4xf64>, tensor<2x4xi32>, tensor<2x4x3xf64>) -> tensor<2x4x3xf64>
  func.return %x : tensor<2x4x3xf64>
}
