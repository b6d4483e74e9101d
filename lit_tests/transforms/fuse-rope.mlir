// RUN: tg-opt %s -p fuse-rope | filecheck %s

// Hugging Face's apply_rotary_pos_emb (Qwen3, Llama) after convert-aten-to-tensor + canonicalize:
// q * cos + rotate_half(q) * sin, the [1, S, D] tables unsqueezed to [1, 1, S, D].
// CHECK-LABEL: func.func @fuse$qwen3
func.func @fuse$qwen3(%x: tensor<1x4x8x16xf32>, %cos: tensor<1x8x16xf32>, %sin: tensor<1x8x16xf32>) -> tensor<1x4x8x16xf32> {
  // CHECK-NEXT: %[[C:.*]] = tg.reshape %cos : (tensor<1x8x16xf32>) -> tensor<1x1x8x16xf32>
  // CHECK-NEXT: %[[S:.*]] = tg.reshape %sin : (tensor<1x8x16xf32>) -> tensor<1x1x8x16xf32>
  // CHECK-NEXT: %y = tg.rope %x, %[[C]], %[[S]] : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  // CHECK-NEXT: func.return %y
  %c4 = tg.reshape %cos : (tensor<1x8x16xf32>) -> tensor<1x1x8x16xf32>
  %s4 = tg.reshape %sin : (tensor<1x8x16xf32>) -> tensor<1x1x8x16xf32>
  %xc = tg.mul %x, %c4 : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  %lo = tg.slice %x {dim = 3 : i64, start = 0 : i64} : (tensor<1x4x8x16xf32>) -> tensor<1x4x8x8xf32>
  %hi = tg.slice %x {dim = 3 : i64, start = 8 : i64} : (tensor<1x4x8x16xf32>) -> tensor<1x4x8x8xf32>
  %n = tg.neg %hi : tensor<1x4x8x8xf32>
  %r = tg.concat %n, %lo {dim = 3 : i64} : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x16xf32>
  %rs = tg.mul %r, %s4 : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  %y = tg.add %xc, %rs : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %y : tensor<1x4x8x16xf32>
}

// Every commutative operand swapped: sin * rot + cos * x, with constant tables.
// CHECK-LABEL: func.func @fuse$swapped_operands
func.func @fuse$swapped_operands(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  // CHECK-NEXT: %c = tg.constant
  // CHECK-NEXT: %s = tg.constant
  // CHECK-NEXT: %y = tg.rope %x, %c, %s : (tensor<2x3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<2x3x8xf32>
  // CHECK-NEXT: func.return %y
  %c = tg.constant dense<0.5> : tensor<3x8xf32>
  %s = tg.constant dense<0.25> : tensor<3x8xf32>
  %lo = tg.slice %x {dim = 2 : i64, start = 0 : i64} : (tensor<2x3x8xf32>) -> tensor<2x3x4xf32>
  %hi = tg.slice %x {dim = 2 : i64, start = 4 : i64} : (tensor<2x3x8xf32>) -> tensor<2x3x4xf32>
  %n = tg.neg %hi : tensor<2x3x4xf32>
  %r = tg.concat %n, %lo {dim = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
  %rs = tg.mul %s, %r : (tensor<3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %xc = tg.mul %c, %x : (tensor<3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %y = tg.add %rs, %xc : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  func.return %y : tensor<2x3x8xf32>
}

// The negation written as a product with -1; the matched ops and the constant all go.
// CHECK-LABEL: func.func @fuse$neg_as_mul_by_minus_one
func.func @fuse$neg_as_mul_by_minus_one(%x: tensor<4x6xf32>, %cos: tensor<6xf32>, %sin: tensor<6xf32>) -> tensor<4x6xf32> {
  // CHECK-NEXT: %y = tg.rope %x, %cos, %sin : (tensor<4x6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  // CHECK-NEXT: func.return %y
  %m1 = tg.constant dense<-1.0> : tensor<f32>
  %xc = tg.mul %x, %cos : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<4x6xf32>) -> tensor<4x3xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 3 : i64} : (tensor<4x6xf32>) -> tensor<4x3xf32>
  %n = tg.mul %m1, %hi : (tensor<f32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %r = tg.concat %n, %lo {dim = 1 : i64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x6xf32>
  %rs = tg.mul %r, %sin : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %y = tg.add %xc, %rs : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return %y : tensor<4x6xf32>
}

// q and k share the tables: both fuse, the tables stay.
// CHECK-LABEL: func.func @fuse$q_and_k_share_tables
func.func @fuse$q_and_k_share_tables(%q: tensor<4x8x16xf32>, %k: tensor<2x8x16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>) -> (tensor<4x8x16xf32>, tensor<2x8x16xf32>) {
  // CHECK-NEXT: %qe = tg.rope %q, %cos, %sin
  // CHECK-NEXT: %ke = tg.rope %k, %cos, %sin
  // CHECK-NEXT: func.return %qe, %ke
  %qc = tg.mul %q, %cos : (tensor<4x8x16xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  %qlo = tg.slice %q {dim = 2 : i64, start = 0 : i64} : (tensor<4x8x16xf32>) -> tensor<4x8x8xf32>
  %qhi = tg.slice %q {dim = 2 : i64, start = 8 : i64} : (tensor<4x8x16xf32>) -> tensor<4x8x8xf32>
  %qn = tg.neg %qhi : tensor<4x8x8xf32>
  %qr = tg.concat %qn, %qlo {dim = 2 : i64} : (tensor<4x8x8xf32>, tensor<4x8x8xf32>) -> tensor<4x8x16xf32>
  %qs = tg.mul %qr, %sin : (tensor<4x8x16xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  %qe = tg.add %qc, %qs : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %kc = tg.mul %k, %cos : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  %klo = tg.slice %k {dim = 2 : i64, start = 0 : i64} : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
  %khi = tg.slice %k {dim = 2 : i64, start = 8 : i64} : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
  %kn = tg.neg %khi : tensor<2x8x8xf32>
  %kr = tg.concat %kn, %klo {dim = 2 : i64} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
  %ks = tg.mul %kr, %sin : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  %ke = tg.add %kc, %ks : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  func.return %qe, %ke : tensor<4x8x16xf32>, tensor<2x8x16xf32>
}

// One token at position 0: cos is all ones and canonicalize folded x * cos to x; cos becomes 1.
// CHECK-LABEL: func.func @fuse$cos_product_folded_to_x
func.func @fuse$cos_product_folded_to_x(%x: tensor<1x4x1x16xf32>) -> tensor<1x4x1x16xf32> {
  // CHECK-NEXT: %s = tg.constant dense<0.000000e+00> : tensor<1x1x1x16xf32>
  // CHECK-NEXT: %[[ONE:.*]] = tg.constant dense<1.000000e+00> : tensor<f32>
  // CHECK-NEXT: %y = tg.rope %x, %[[ONE]], %s : (tensor<1x4x1x16xf32>, tensor<f32>, tensor<1x1x1x16xf32>) -> tensor<1x4x1x16xf32>
  // CHECK-NEXT: func.return %y
  %s = tg.constant dense<0.0> : tensor<1x1x1x16xf32>
  %lo = tg.slice %x {dim = 3 : i64, start = 0 : i64} : (tensor<1x4x1x16xf32>) -> tensor<1x4x1x8xf32>
  %hi = tg.slice %x {dim = 3 : i64, start = 8 : i64} : (tensor<1x4x1x16xf32>) -> tensor<1x4x1x8xf32>
  %n = tg.neg %hi : tensor<1x4x1x8xf32>
  %r = tg.concat %n, %lo {dim = 3 : i64} : (tensor<1x4x1x8xf32>, tensor<1x4x1x8xf32>) -> tensor<1x4x1x16xf32>
  %rs = tg.mul %r, %s : (tensor<1x4x1x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x4x1x16xf32>
  %y = tg.add %x, %rs : (tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>) -> tensor<1x4x1x16xf32>
  func.return %y : tensor<1x4x1x16xf32>
}

// The slices are [0, 2) and [4, 8) of 8: not the two halves.
// CHECK-LABEL: func.func @expect_no_fuse_as_slices_are_not_halves
func.func @expect_no_fuse_as_slices_are_not_halves(%x: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %xc = tg.mul %x, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x2xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 2 : i64} : (tensor<2x8xf32>) -> tensor<2x6xf32>
  %n = tg.neg %hi : tensor<2x6xf32>
  %r = tg.concat %n, %lo {dim = 1 : i64} : (tensor<2x6xf32>, tensor<2x2xf32>) -> tensor<2x8xf32>
  %rs = tg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.add %xc, %rs : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The halves are taken with step 2 (even / odd elements: the interleaved form, not rotate-half).
// CHECK-LABEL: func.func @expect_no_fuse_as_slices_are_strided
func.func @expect_no_fuse_as_slices_are_strided(%x: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %xc = tg.mul %x, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64, step = 2 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 1 : i64, step = 2 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = tg.neg %hi : tensor<2x4xf32>
  %r = tg.concat %n, %lo {dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %rs = tg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.add %xc, %rs : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The halves are sliced along the first dim, not the last.
// CHECK-LABEL: func.func @expect_no_fuse_as_halves_are_not_of_the_last_dim
func.func @expect_no_fuse_as_halves_are_not_of_the_last_dim(%x: tensor<8x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> tensor<8x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %xc = tg.mul %x, %cos : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  %lo = tg.slice %x {dim = 0 : i64, start = 0 : i64} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  %hi = tg.slice %x {dim = 0 : i64, start = 4 : i64} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  %n = tg.neg %hi : tensor<4x8xf32>
  %r = tg.concat %n, %lo {dim = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %rs = tg.mul %r, %sin : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  %y = tg.add %xc, %rs : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  func.return %y : tensor<8x8xf32>
}

// The halves come from %x and %z.
// CHECK-LABEL: func.func @expect_no_fuse_as_halves_are_of_different_values
func.func @expect_no_fuse_as_halves_are_of_different_values(%x: tensor<2x8xf32>, %z: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %xc = tg.mul %x, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = tg.slice %z {dim = 1 : i64, start = 4 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = tg.neg %hi : tensor<2x4xf32>
  %r = tg.concat %n, %lo {dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %rs = tg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.add %xc, %rs : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The rotated value is of %x, the cos product of %z.
// CHECK-LABEL: func.func @expect_no_fuse_as_cos_product_is_of_another_value
func.func @expect_no_fuse_as_cos_product_is_of_another_value(%x: tensor<2x8xf32>, %z: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %zc = tg.mul %z, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 4 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = tg.neg %hi : tensor<2x4xf32>
  %r = tg.concat %n, %lo {dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %rs = tg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.add %zc, %rs : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// concat(x_lo, -x_hi): the halves in the wrong order (that is the inverse rotation).
// CHECK-LABEL: func.func @expect_no_fuse_as_concat_order_is_wrong
func.func @expect_no_fuse_as_concat_order_is_wrong(%x: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %xc = tg.mul %x, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 4 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = tg.neg %hi : tensor<2x4xf32>
  %r = tg.concat %lo, %n {dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %rs = tg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.add %xc, %rs : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The lower half is negated instead of the upper one.
// CHECK-LABEL: func.func @expect_no_fuse_as_lower_half_is_negated
func.func @expect_no_fuse_as_lower_half_is_negated(%x: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %xc = tg.mul %x, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 4 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = tg.neg %lo : tensor<2x4xf32>
  %r = tg.concat %n, %hi {dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %rs = tg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.add %xc, %rs : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The scale is -2, not -1.
// CHECK-LABEL: func.func @expect_no_fuse_as_scale_is_not_minus_one
func.func @expect_no_fuse_as_scale_is_not_minus_one(%x: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> tensor<2x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %m2 = tg.constant dense<-2.0> : tensor<f32>
  %xc = tg.mul %x, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 4 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = tg.mul %hi, %m2 : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %r = tg.concat %n, %lo {dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %rs = tg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.add %xc, %rs : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// The rotated value is also returned: fusing would have to keep it.
// CHECK-LABEL: func.func @expect_no_fuse_as_rotated_value_has_other_users
func.func @expect_no_fuse_as_rotated_value_has_other_users(%x: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %xc = tg.mul %x, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 4 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = tg.neg %hi : tensor<2x4xf32>
  %r = tg.concat %n, %lo {dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %rs = tg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = tg.add %xc, %rs : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y, %r : tensor<2x8xf32>, tensor<2x8xf32>
}

// The tables are as large as x on a dim where x has 1 (the product broadcasts x): not a RoPE of x.
// CHECK-LABEL: func.func @expect_no_fuse_as_tables_broadcast_x
func.func @expect_no_fuse_as_tables_broadcast_x(%x: tensor<1x8xf32>, %cos: tensor<3x8xf32>, %sin: tensor<3x8xf32>) -> tensor<3x8xf32> {
  // CHECK-NOT: tg.rope
  // CHECK: func.return
  %xc = tg.mul %x, %cos : (tensor<1x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<1x8xf32>) -> tensor<1x4xf32>
  %hi = tg.slice %x {dim = 1 : i64, start = 4 : i64} : (tensor<1x8xf32>) -> tensor<1x4xf32>
  %n = tg.neg %hi : tensor<1x4xf32>
  %r = tg.concat %n, %lo {dim = 1 : i64} : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x8xf32>
  %rs = tg.mul %r, %sin : (tensor<1x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %y = tg.add %xc, %rs : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  func.return %y : tensor<3x8xf32>
}
