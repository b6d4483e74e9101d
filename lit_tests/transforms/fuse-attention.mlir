// RUN: tg-opt %s -p fuse-attention | filecheck %s

// Note: -inf is written as raw bytes (xDSL 0.74 parses its own 0xff800000 float spelling back as an integer; tg.constant prints non-finite values as raw bytes for that reason).
// (dense<"0x000080FF"> is -inf as f32).

// CHECK-LABEL: func.func @fuse$transpose_mul_scale_softmax
func.func @fuse$transpose_mul_scale_softmax(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %k, %v {scale = 2.500000e-01 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  // CHECK-NEXT: func.return %[[O]]
  %kt = tg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = tg.constant dense<0.25> : tensor<f32>
  %ss = tg.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = tg.softmax %ss {dim = 3 : i64} : tensor<1x2x4x4xf32>
  %o = tg.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}

// The scale already absorbed into alpha, k^T as transpose_b, the scale divided on q before.
// CHECK-LABEL: func.func @fuse$alpha_transpose_b_and_scaled_q
func.func @fuse$alpha_transpose_b_and_scaled_q(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x3xf32>) -> tensor<2x4x3xf32> {
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %k, %v {scale = 2.500000e-01 : f32} : (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x3xf32>) -> tensor<2x4x3xf32>
  // CHECK-NEXT: func.return %[[O]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %qs = tg.div %q, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %s = tg.matmul %qs, %k {transpose_b = true, alpha = 0.5 : f32} : (tensor<2x4x8xf32>, tensor<2x6x8xf32>) -> tensor<2x4x6xf32>
  %p = tg.softmax %s {dim = 2 : i64} : tensor<2x4x6xf32>
  %o = tg.matmul %p, %v : (tensor<2x4x6xf32>, tensor<2x6x3xf32>) -> tensor<2x4x3xf32>
  func.return %o : tensor<2x4x3xf32>
}

// masked_fill(causal bool constant, -inf) after the scale: causal = true, no mask.
// CHECK-LABEL: func.func @fuse$causal_masked_fill
func.func @fuse$causal_masked_fill(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %k, %v {scale = 5.000000e-01 : f32, causal = true}
  // CHECK-NEXT: func.return %[[O]]
  %kt = tg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %s = tg.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %c = tg.constant dense<2.0> : tensor<f32>
  %ss = tg.div %s, %c : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %upper = tg.constant dense<[[false, true, true], [false, false, true], [false, false, false]]> : tensor<3x3xi1>
  %ninf = tg.constant dense<"0x000080FF"> : tensor<f32>
  %m = tg.select %upper, %ninf, %ss : (tensor<3x3xi1>, tensor<f32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %p = tg.softmax %m {dim = 3 : i64} : tensor<1x2x3x3xf32>
  %o = tg.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  func.return %o : tensor<1x2x3x4xf32>
}

// An additive causal constant (GPT-2's finfo.min), broadcast over batch and heads.
// CHECK-LABEL: func.func @fuse$causal_additive_constant
func.func @fuse$causal_additive_constant(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %k, %v {scale = 1.000000e+00 : f32, causal = true}
  // CHECK-NEXT: func.return %[[O]]
  %s = tg.matmul %q, %k {transpose_b = true} : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x2xf32>
  %mask = tg.constant dense<[[[[0.0, -3.40282347e+38], [0.0, 0.0]]]]> : tensor<1x1x2x2xf32>
  %a = tg.add %mask, %s : (tensor<1x1x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %p = tg.softmax %a {dim = 3 : i64} : tensor<1x2x2x2xf32>
  %o = tg.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  func.return %o : tensor<1x2x2x4xf32>
}

// A mask that is not a constant stays an additive mask.
// CHECK-LABEL: func.func @fuse$non_constant_additive_mask
func.func @fuse$non_constant_additive_mask(%q: tensor<2x3x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<3x5xf32>) -> tensor<2x3x4xf32> {
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %k, %v mask %mask {scale = 1.000000e+00 : f32} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<3x5xf32>) -> tensor<2x3x4xf32>
  // CHECK-NEXT: func.return %[[O]]
  %s = tg.matmul %q, %k {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
  %a = tg.add %s, %mask : (tensor<2x3x5xf32>, tensor<3x5xf32>) -> tensor<2x3x5xf32>
  %p = tg.softmax %a {dim = 2 : i64} : tensor<2x3x5xf32>
  %o = tg.matmul %p, %v : (tensor<2x3x5xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
  func.return %o : tensor<2x3x4xf32>
}

// A non-constant bool mask becomes select(cond, fill, 0): an additive mask.
// CHECK-LABEL: func.func @fuse$non_constant_masked_fill_becomes_additive
func.func @fuse$non_constant_masked_fill_becomes_additive(%q: tensor<2x3x4xf32>, %k: tensor<2x3x4xf32>, %v: tensor<2x3x4xf32>, %cond: tensor<3x3xi1>) -> tensor<2x3x4xf32> {
  // CHECK:      %[[SEL:.*]] = tg.select %cond, %{{.*}}, %{{.*}} : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %k, %v mask %[[SEL]] {scale = 1.000000e+00 : f32}
  // CHECK-NEXT: func.return %[[O]]
  %s = tg.matmul %q, %k {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  %fill = tg.constant dense<-1.0e+09> : tensor<f32>
  %m = tg.select %cond, %fill, %s : (tensor<3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %p = tg.softmax %m {dim = 2 : i64} : tensor<2x3x3xf32>
  %o = tg.matmul %p, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return %o : tensor<2x3x4xf32>
}

// The folded SDPA mask of GPT-2: an existing attention with a constant causal mask.
// CHECK-LABEL: func.func @fold$constant_causal_mask_of_attention
func.func @fold$constant_causal_mask_of_attention(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %k, %v {scale = 5.000000e-01 : f32, causal = true} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  // CHECK-NEXT: func.return %[[O]]
  %mask = tg.constant dense<"0x00000000000080FF000080FF0000000000000000000080FF000000000000000000000000"> : tensor<3x3xf32>
  %o = tg.attention %q, %k, %v mask %mask {scale = 0.5 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<3x3xf32>) -> tensor<1x2x3x4xf32>
  func.return %o : tensor<1x2x3x4xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_constant_mask_is_not_causal
func.func @expect_no_fold_as_constant_mask_is_not_causal(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  // CHECK: tg.attention %q, %k, %v mask %{{.*}} {scale = 5.000000e-01 : f32}
  %mask = tg.constant dense<"0x0000000000000000000080FF00000000"> : tensor<2x2xf32>
  %o = tg.attention %q, %k, %v mask %mask {scale = 0.5 : f32} : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>, tensor<2x2xf32>) -> tensor<1x2x2x4xf32>
  func.return %o : tensor<1x2x2x4xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_softmax_is_over_another_dim
func.func @expect_no_fuse_as_softmax_is_over_another_dim(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // CHECK: tg.softmax %{{.*}} {dim = 1 : i64}
  // CHECK-NOT: tg.attention
  %s = tg.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p = tg.softmax %s {dim = 1 : i64} : tensor<2x4x4xf32>
  %o = tg.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  func.return %o : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_probabilities_have_other_users
func.func @expect_no_fuse_as_probabilities_have_other_users(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>) {
  // CHECK: tg.softmax
  // CHECK-NOT: tg.attention
  %s = tg.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p = tg.softmax %s {dim = 2 : i64} : tensor<2x4x4xf32>
  %o = tg.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  func.return %o, %p : tensor<2x4x8xf32>, tensor<2x4x4xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_scores_have_other_users
func.func @expect_no_fuse_as_scores_have_other_users(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>) {
  // CHECK: tg.softmax
  // CHECK-NOT: tg.attention
  %s = tg.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p = tg.softmax %s {dim = 2 : i64} : tensor<2x4x4xf32>
  %o = tg.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  func.return %o, %s : tensor<2x4x8xf32>, tensor<2x4x4xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_scale_is_not_a_scalar
func.func @expect_no_fuse_as_scale_is_not_a_scalar(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // CHECK: tg.softmax
  // CHECK-NOT: tg.attention
  %s = tg.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %c = tg.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %ss = tg.mul %s, %c : (tensor<2x4x4xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
  %p = tg.softmax %ss {dim = 2 : i64} : tensor<2x4x4xf32>
  %o = tg.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  func.return %o : tensor<2x4x8xf32>
}

// Rank 2 has no head dim: tg.attention needs [..., H, S, D].
// CHECK-LABEL: func.func @expect_no_fuse_as_operands_have_rank_2
func.func @expect_no_fuse_as_operands_have_rank_2(%q: tensor<4x8xf32>, %k: tensor<4x8xf32>, %v: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NOT: tg.attention
  %s = tg.matmul %q, %k {transpose_b = true} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  %p = tg.softmax %s {dim = 1 : i64} : tensor<4x4xf32>
  %o = tg.matmul %p, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %o : tensor<4x8xf32>
}

// canonicalize composes view->transpose(1,2)->transpose(-1,-2) of k into one permutation [0, 2, 3, 1]:
// k is then transpose(y, [0, 2, 1, 3]).
// CHECK-LABEL: func.func @fuse$k_transpose_composed_with_head_split
func.func @fuse$k_transpose_composed_with_head_split(%q: tensor<1x2x3x4xf32>, %y: tensor<1x3x2x4xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  // CHECK-NEXT: %[[K:.*]] = tg.transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x3x2x4xf32>) -> tensor<1x2x3x4xf32>
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %[[K]], %v {scale = 5.000000e-01 : f32}
  // CHECK-NEXT: func.return %[[O]]
  %kt = tg.transpose %y {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x3x2x4xf32>) -> tensor<1x2x4x3xf32>
  %s = tg.matmul %q, %kt {alpha = 0.5 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %p = tg.softmax %s {dim = 3 : i64} : tensor<1x2x3x3xf32>
  %o = tg.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  func.return %o : tensor<1x2x3x4xf32>
}

// k^T given as a plain value: k becomes a transpose of it.
// CHECK-LABEL: func.func @fuse$k_transposed_value_gets_a_transpose
func.func @fuse$k_transposed_value_gets_a_transpose(%q: tensor<2x3x4xf32>, %kt: tensor<2x4x5xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x3x4xf32> {
  // CHECK-NEXT: %[[K:.*]] = tg.transpose %kt {perm = array<i64: 0, 2, 1>} : (tensor<2x4x5xf32>) -> tensor<2x5x4xf32>
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %[[K]], %v {scale = 1.000000e+00 : f32}
  // CHECK-NEXT: func.return %[[O]]
  %s = tg.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  %p = tg.softmax %s {dim = 2 : i64} : tensor<2x3x5xf32>
  %o = tg.matmul %p, %v : (tensor<2x3x5xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
  func.return %o : tensor<2x3x4xf32>
}

// Grouped-query attention written with repeat_kv: the shared K/V heads are read directly.
// CHECK-LABEL: func.func @gqa$repeat_kv_reads_shared_heads
func.func @gqa$repeat_kv_reads_shared_heads(%q: tensor<1x4x7x16xf32>, %k: tensor<1x2x7x16xf32>, %v: tensor<1x2x7x16xf32>) -> tensor<1x4x7x16xf32> {
  // CHECK-NEXT: %[[O:.*]] = tg.attention %q, %k, %v {scale = 2.500000e-01 : f32, causal = true} : (tensor<1x4x7x16xf32>, tensor<1x2x7x16xf32>, tensor<1x2x7x16xf32>) -> tensor<1x4x7x16xf32>
  // CHECK-NEXT: func.return %[[O]]
  %k5 = tg.reshape %k : (tensor<1x2x7x16xf32>) -> tensor<1x2x1x7x16xf32>
  %kb = tg.broadcast %k5 : (tensor<1x2x1x7x16xf32>) -> tensor<1x2x2x7x16xf32>
  %kr = tg.reshape %kb : (tensor<1x2x2x7x16xf32>) -> tensor<1x4x7x16xf32>
  %v5 = tg.reshape %v : (tensor<1x2x7x16xf32>) -> tensor<1x2x1x7x16xf32>
  %vb = tg.broadcast %v5 : (tensor<1x2x1x7x16xf32>) -> tensor<1x2x2x7x16xf32>
  %vr = tg.reshape %vb : (tensor<1x2x2x7x16xf32>) -> tensor<1x4x7x16xf32>
  %o = tg.attention %q, %kr, %vr {scale = 0.25 : f32, causal = true} : (tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>) -> tensor<1x4x7x16xf32>
  func.return %o : tensor<1x4x7x16xf32>
}

// A broadcast that repeats along another dim than the group dim is not repeat_kv.
// CHECK-LABEL: func.func @expect_no_gqa$broadcast_along_sequence
func.func @expect_no_gqa$broadcast_along_sequence(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x1x16xf32>) -> tensor<1x4x8x16xf32> {
  // CHECK: tg.broadcast
  // CHECK: tg.attention %q, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>)
  %k5 = tg.reshape %k : (tensor<1x4x1x16xf32>) -> tensor<1x4x1x1x16xf32>
  %kb = tg.broadcast %k5 : (tensor<1x4x1x1x16xf32>) -> tensor<1x4x1x8x16xf32>
  %kr = tg.reshape %kb : (tensor<1x4x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  %o = tg.attention %q, %kr, %kr {scale = 0.25 : f32} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}

// At a symbolic length: a mask computed from aranges alone is evaluated at the largest size
// (seq = 64), element by element; causal there, it is causal at every length, and becomes the flag.
builtin.module attributes {tg.symbols = {seq = array<i64: 1, 64>}} {
  // CHECK-LABEL: func.func @fold$symbolic_causal_mask_from_aranges
  func.func @fold$symbolic_causal_mask_from_aranges(%q: tensor<1x2x?x8xf32, ["seq"]>, %k: tensor<1x2x?x8xf32, ["seq"]>, %v: tensor<1x2x?x8xf32, ["seq"]>) -> tensor<1x2x?x8xf32, ["seq"]> {
    // CHECK: tg.attention %q, %k, %v {scale = 0.353553385 : f32, causal = true} : (tensor<1x2x?x8xf32, ["seq"]>, tensor<1x2x?x8xf32, ["seq"]>, tensor<1x2x?x8xf32, ["seq"]>)
    %i = tg.iota {start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : tensor<?xi64, ["seq"]>
    %key = tg.reshape %i : (tensor<?xi64, ["seq"]>) -> tensor<1x?xi64, ["seq"]>
    %query = tg.reshape %i : (tensor<?xi64, ["seq"]>) -> tensor<?x1xi64, ["seq"]>
    %m = tg.fused_elementwise %key, %query : (tensor<1x?xi64, ["seq"]>, tensor<?x1xi64, ["seq"]>) -> tensor<?x?xf32, ["seq", "seq"]> {
    ^bb0(%a: i64, %b: i64):
      %visible = arith.cmpi sle, %a, %b : i64
      %zero = arith.constant 0.000000e+00 : f32
      %low = arith.constant -3.000000e+38 : f32
      %s = arith.select %visible, %zero, %low : f32
      tg.yield %s : f32
    }
    %o = tg.attention %q, %k, %v mask %m {scale = 0.353553385 : f32} : (tensor<1x2x?x8xf32, ["seq"]>, tensor<1x2x?x8xf32, ["seq"]>, tensor<1x2x?x8xf32, ["seq"]>, tensor<?x?xf32, ["seq", "seq"]>) -> tensor<1x2x?x8xf32, ["seq"]>
    func.return %o : tensor<1x2x?x8xf32, ["seq"]>
  }

  // A mask that reads the length itself (tg.size): what it is at 64 says nothing of other lengths; it stays.
  // CHECK-LABEL: func.func @expect_no_fold$symbolic_mask_reads_the_length
  func.func @expect_no_fold$symbolic_mask_reads_the_length(%q: tensor<1x2x?x8xf32, ["seq"]>, %k: tensor<1x2x?x8xf32, ["seq"]>, %v: tensor<1x2x?x8xf32, ["seq"]>) -> tensor<1x2x?x8xf32, ["seq"]> {
    // CHECK: tg.attention %q, %k, %v mask %{{.*}} {scale = 0.353553385 : f32}
    %i = tg.iota {start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : tensor<?xi64, ["seq"]>
    %n = tg.size {size = "seq"} : tensor<i64>
    %key = tg.reshape %i : (tensor<?xi64, ["seq"]>) -> tensor<1x?xi64, ["seq"]>
    %query = tg.reshape %i : (tensor<?xi64, ["seq"]>) -> tensor<?x1xi64, ["seq"]>
    %m = tg.fused_elementwise %key, %query, %n : (tensor<1x?xi64, ["seq"]>, tensor<?x1xi64, ["seq"]>, tensor<i64>) -> tensor<?x?xf32, ["seq", "seq"]> {
    ^bb0(%a: i64, %b: i64, %len: i64):
      %shifted = arith.subi %a, %len : i64
      %visible = arith.cmpi sle, %shifted, %b : i64
      %zero = arith.constant 0.000000e+00 : f32
      %low = arith.constant -3.000000e+38 : f32
      %s = arith.select %visible, %zero, %low : f32
      tg.yield %s : f32
    }
    %o = tg.attention %q, %k, %v mask %m {scale = 0.353553385 : f32} : (tensor<1x2x?x8xf32, ["seq"]>, tensor<1x2x?x8xf32, ["seq"]>, tensor<1x2x?x8xf32, ["seq"]>, tensor<?x?xf32, ["seq", "seq"]>) -> tensor<1x2x?x8xf32, ["seq"]>
    func.return %o : tensor<1x2x?x8xf32, ["seq"]>
  }
}
