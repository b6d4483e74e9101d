// RUN: tg-opt %s -p absorb-attention-layouts,dce | filecheck %s

// The PyTorch form: q, k, v transposed [B, S, H, D] -> [B, H, S, D] for SDPA, the result back.
// CHECK-LABEL: func.func @in_and_out
// CHECK-NEXT: %o = tg.attention %q, %k, %v {scale = 2.500000e-01 : f32, causal = true, q_seq_major = true, k_seq_major = true, v_seq_major = true, out_seq_major = true} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>) -> tensor<1x8x4x16xf32>
// CHECK-NEXT: func.return %o
func.func @in_and_out(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x8x2x16xf32>) -> tensor<1x8x4x16xf32> {
  %qt = tg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %kt = tg.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %vt = tg.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %o = tg.attention %qt, %kt, %vt {scale = 0.25 : f32, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  %ot = tg.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %ot : tensor<1x8x4x16xf32>
}

// A transpose of an operand already stored sequence-major toggles the flag back; a mask stays
// heads-major ([..., H, Sq, Sk]); rank 3 (no batch dim) too.
// CHECK-LABEL: func.func @toggle_back_with_mask
// CHECK-NEXT: %o = tg.attention %q, %k, %v mask %m {scale = 5.000000e-01 : f32, k_seq_major = true} : (tensor<2x3x8xf32>, tensor<5x2x8xf32>, tensor<2x5x8xf32>, tensor<2x3x5xf32>) -> tensor<2x3x8xf32>
func.func @toggle_back_with_mask(%q: tensor<2x3x8xf32>, %k: tensor<5x2x8xf32>, %v: tensor<2x5x8xf32>, %m: tensor<2x3x5xf32>) -> tensor<2x3x8xf32> {
  %kt = tg.transpose %k {perm = array<i64: 1, 0, 2>} : (tensor<5x2x8xf32>) -> tensor<2x5x8xf32>
  %vt = tg.transpose %v {perm = array<i64: 1, 0, 2>} : (tensor<2x5x8xf32>) -> tensor<5x2x8xf32>
  %o = tg.attention %q, %kt, %vt mask %m {scale = 0.5 : f32, v_seq_major = true} : (tensor<2x3x8xf32>, tensor<2x5x8xf32>, tensor<5x2x8xf32>, tensor<2x3x5xf32>) -> tensor<2x3x8xf32>
  func.return %o : tensor<2x3x8xf32>
}

// Llama/Qwen: the rope sits between the transpose and the attention; it moves before the
// transpose, its tables transposed to match (size-1 dims only: views), lower-rank tables given
// the input's rank first.
// CHECK-LABEL: func.func @rope_between
// CHECK-NEXT: %cos_seq_major = tg.transpose %cos {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x1x8x16xf32>) -> tensor<1x8x1x16xf32>
// CHECK-NEXT: %sin_padded = tg.reshape %sin : (tensor<8x16xf32>) -> tensor<1x1x8x16xf32>
// CHECK-NEXT: %sin_seq_major = tg.transpose %sin_padded {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x1x8x16xf32>) -> tensor<1x8x1x16xf32>
// CHECK-NEXT: %r = tg.rope %q, %cos_seq_major, %sin_seq_major : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>) -> tensor<1x8x4x16xf32>
// CHECK: %o = tg.attention %r, %k, %v {scale = 2.500000e-01 : f32, causal = true, q_seq_major = true} : (tensor<1x8x4x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
// CHECK-NOT: tg.transpose
func.func @rope_between(%q: tensor<1x8x4x16xf32>, %k: tensor<1x4x8x16xf32>, %v: tensor<1x4x8x16xf32>, %cos: tensor<1x1x8x16xf32>, %sin: tensor<8x16xf32>) -> tensor<1x4x8x16xf32> {
  %qt = tg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %r = tg.rope %qt, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %o = tg.attention %r, %k, %v {scale = 0.25 : f32, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}

// Gemma-3: the q norm after the transpose, then the rope (here already fused with it by
// fuse-rms-norm-rope, run first: the norm stays with the rope); the k norm unfused moves too.
// CHECK-LABEL: func.func @norm_after_transpose
// CHECK:      %r = tg.rope %q, %cos_seq_major, %sin_seq_major norm %w {eps = 1.000000e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>, tensor<16xf32>) -> tensor<1x8x4x16xf32>
// CHECK:      %n = tg.rms_norm %k, %w : (tensor<1x8x4x16xf32>, tensor<16xf32>) -> tensor<1x8x4x16xf32>
// CHECK:      %rk = tg.rope %n, %{{.*}}, %{{.*}} : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>) -> tensor<1x8x4x16xf32>
// CHECK-NEXT: %o = tg.attention %r, %rk, %v {scale = 2.500000e-01 : f32, q_seq_major = true, k_seq_major = true} :
// CHECK-NOT:  tg.transpose {{.*}} -> tensor<1x4x8x16xf32>
func.func @norm_after_transpose(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x4x16xf32>, %v: tensor<1x4x8x16xf32>, %w: tensor<16xf32>, %cos: tensor<1x1x8x16xf32>, %sin: tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %qt = tg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %r = tg.rope %qt, %cos, %sin norm %w {eps = 1.0e-06 : f32} : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<16xf32>) -> tensor<1x4x8x16xf32>
  %kt = tg.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %n = tg.rms_norm %kt, %w {eps = 1.0e-06 : f32} : (tensor<1x4x8x16xf32>, tensor<16xf32>) -> tensor<1x4x8x16xf32>
  %rk = tg.rope %n, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  %o = tg.attention %r, %rk, %v {scale = 0.25 : f32} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}

// GPT-2's c_attn: q, k and v sliced out of one projection's output, each viewed [B, S, H, D]:
// read in place, a head range each (no slice copied).
// CHECK-LABEL: func.func @fused_qkv
// CHECK:      %o = tg.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32, causal = true, q_seq_major = true, k_seq_major = true, v_seq_major = true, out_seq_major = true, q_heads = array<i64: 0, 4>, k_heads = array<i64: 4, 4>, v_heads = array<i64: 8, 4>} : (tensor<1x8x12x16xf32>, tensor<1x8x12x16xf32>, tensor<1x8x12x16xf32>) -> tensor<1x8x4x16xf32>
// CHECK-NOT:  tg.slice
func.func @fused_qkv(%qkv: tensor<1x8x192xf32>) -> tensor<1x8x4x16xf32> {
  %qs = tg.slice %qkv {dim = 2 : i64, start = 0 : i64} : (tensor<1x8x192xf32>) -> tensor<1x8x64xf32>
  %ks = tg.slice %qkv {dim = 2 : i64, start = 64 : i64} : (tensor<1x8x192xf32>) -> tensor<1x8x64xf32>
  %vs = tg.slice %qkv {dim = 2 : i64, start = 128 : i64} : (tensor<1x8x192xf32>) -> tensor<1x8x64xf32>
  %q = tg.reshape %qs : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %k = tg.reshape %ks : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %v = tg.reshape %vs : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %qt = tg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %kt = tg.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %vt = tg.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %o = tg.attention %qt, %kt, %vt {scale = 0.25 : f32, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  %ot = tg.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %ot : tensor<1x8x4x16xf32>
}

// A slice that is not of whole heads (start 8 with D = 16) stays a copy.
// CHECK-LABEL: func.func @not_whole_heads
// CHECK:      tg.slice
// CHECK:      tg.attention {{.*}}q_seq_major = true
// CHECK-NOT:  q_heads
func.func @not_whole_heads(%x: tensor<1x8x80xf32>, %k: tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %qs = tg.slice %x {dim = 2 : i64, start = 8 : i64} : (tensor<1x8x80xf32>) -> tensor<1x8x64xf32>
  %q = tg.reshape %qs : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
  %qt = tg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %o = tg.attention %qt, %k, %k {scale = 0.25 : f32} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}

// Left alone: a rope whose result has another user (the transpose would only move), a result
// with another user, another permutation, and the keys of an attention over a KV cache.
// CHECK-LABEL: func.func @left_alone
// CHECK-NEXT: %qt = tg.transpose %q
// CHECK-NEXT: %r = tg.rope %qt, %cos, %cos
// CHECK-NEXT: %kt = tg.transpose %k {perm = array<i64: 0, 1, 3, 2>}
// CHECK-NEXT: %o = tg.attention %r, %kt, %c {scale = 2.500000e-01 : f32, causal = true, kv_cache = true} :
// CHECK-NEXT: %ot = tg.transpose %o
// CHECK-NEXT: func.return %r, %o, %ot
func.func @left_alone(%q: tensor<1x8x4x16xf32>, %k: tensor<1x4x16x8xf32>, %c: tensor<1x4x8x16xf32>, %cos: tensor<1x1x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>) {
  %qt = tg.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %r = tg.rope %qt, %cos, %cos : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  %kt = tg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x16x8xf32>) -> tensor<1x4x8x16xf32>
  %o = tg.attention %r, %kt, %c {scale = 0.25 : f32, causal = true, kv_cache = true} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  %ot = tg.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %r, %o, %ot : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>
}
