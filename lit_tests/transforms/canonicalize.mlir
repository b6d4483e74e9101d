// RUN: tg-opt %s -p canonicalize | filecheck %s

// CHECK-LABEL: func.func @reshape$of_reshape_is_one_reshape
func.func @reshape$of_reshape_is_one_reshape(%x: tensor<2x6xf32>) -> tensor<3x4xf32> {
  // CHECK-NEXT: %[[R:.*]] = tg.reshape %x : (tensor<2x6xf32>) -> tensor<3x4xf32>
  // CHECK-NEXT: func.return %[[R]]
  %a = tg.reshape %x : (tensor<2x6xf32>) -> tensor<12xf32>
  %b = tg.reshape %a : (tensor<12xf32>) -> tensor<3x4xf32>
  func.return %b : tensor<3x4xf32>
}

// CHECK-LABEL: func.func @reshape$round_trip_is_input
func.func @reshape$round_trip_is_input(%x: tensor<2x6xf32>) -> tensor<2x6xf32> {
  // CHECK-NEXT: func.return %x : tensor<2x6xf32>
  %a = tg.reshape %x : (tensor<2x6xf32>) -> tensor<12xf32>
  %b = tg.reshape %a : (tensor<12xf32>) -> tensor<2x6xf32>
  func.return %b : tensor<2x6xf32>
}

// CHECK-LABEL: func.func @reshape$identity_is_input
func.func @reshape$identity_is_input(%x: tensor<2x6xf32>) -> tensor<2x6xf32> {
  // CHECK-NEXT: func.return %x : tensor<2x6xf32>
  %a = tg.reshape %x : (tensor<2x6xf32>) -> tensor<2x6xf32>
  func.return %a : tensor<2x6xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_reshape_changes_shape
func.func @expect_no_fold_as_reshape_changes_shape(%x: tensor<2x6xf32>) -> tensor<12xf32> {
  // CHECK-NEXT: %[[R:.*]] = tg.reshape %x : (tensor<2x6xf32>) -> tensor<12xf32>
  // CHECK-NEXT: func.return %[[R]]
  %a = tg.reshape %x : (tensor<2x6xf32>) -> tensor<12xf32>
  func.return %a : tensor<12xf32>
}

// CHECK-LABEL: func.func @transpose$identity_is_input
func.func @transpose$identity_is_input(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  // CHECK-NEXT: func.return %x : tensor<2x3x4xf32>
  %t = tg.transpose %x {perm = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return %t : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @transpose$of_transpose_composes
func.func @transpose$of_transpose_composes(%x: tensor<2x3x4xf32>) -> tensor<3x2x4xf32> {
  // CHECK-NEXT: %[[T:.*]] = tg.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  // CHECK-NEXT: func.return %[[T]]
  %a = tg.transpose %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %b = tg.transpose %a {perm = array<i64: 0, 2, 1>} : (tensor<3x4x2xf32>) -> tensor<3x2x4xf32>
  func.return %b : tensor<3x2x4xf32>
}

// CHECK-LABEL: func.func @transpose$of_inverse_transpose_is_input
func.func @transpose$of_inverse_transpose_is_input(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  // CHECK-NEXT: func.return %x : tensor<2x3x4xf32>
  %a = tg.transpose %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %b = tg.transpose %a {perm = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  func.return %b : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_transpose_is_not_identity
func.func @expect_no_fold_as_transpose_is_not_identity(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // CHECK-NEXT: %[[T:.*]] = tg.transpose %x {perm = array<i64: 1, 0>}
  // CHECK-NEXT: func.return %[[T]]
  %t = tg.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %t : tensor<3x2xf32>
}

// CHECK-LABEL: func.func @algebra$mul_by_one_either_side
func.func @algebra$mul_by_one_either_side(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK-NEXT: func.return %x : tensor<2x3xf32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %a = tg.mul %x, %one : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %b = tg.mul %one, %a : (tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %b : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @algebra$div_by_one_add_zero_sub_zero
func.func @algebra$div_by_one_add_zero_sub_zero(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK-NEXT: func.return %x : tensor<2x3xf32>
  %one = tg.constant dense<1.0> : tensor<3xf32>
  %zero = tg.constant dense<0.0> : tensor<f32>
  %a = tg.div %x, %one : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %b = tg.add %zero, %a : (tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %c = tg.sub %b, %zero : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  func.return %c : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_one_broadcasts_x_to_a_bigger_type
func.func @expect_no_fold_as_one_broadcasts_x_to_a_bigger_type(%x: tensor<3xf32>) -> tensor<2x3xf32> {
  // CHECK: tg.mul %x, %{{.*}} : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %one = tg.constant dense<1.0> : tensor<2x3xf32>
  %a = tg.mul %x, %one : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %a : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_constant_is_not_neutral
func.func @expect_no_fold_as_constant_is_not_neutral(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK: %[[A:.*]] = tg.mul %x, %{{.*}}
  // CHECK: %[[B:.*]] = tg.div %[[A]], %{{.*}}
  // CHECK: %[[C:.*]] = tg.add %[[B]], %{{.*}}
  // CHECK: func.return %[[C]]
  %two = tg.constant dense<2.0> : tensor<f32>
  %mixed = tg.constant dense<[1.0, 0.0, 1.0]> : tensor<3xf32>
  %a = tg.mul %x, %two : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %b = tg.div %a, %mixed : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %c = tg.add %b, %mixed : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return %c : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_one_divides_by_x
func.func @expect_no_fold_as_one_divides_by_x(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK: tg.div %{{.*}}, %x
  %one = tg.constant dense<1.0> : tensor<2x3xf32>
  %a = tg.div %one, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %a : tensor<2x3xf32>
}

// Ops left dead by a rewrite go with it; dead ops the pass did not touch stay for dce.
// CHECK-LABEL: func.func @expect_unrelated_dead_op_kept_for_dce
func.func @expect_unrelated_dead_op_kept_for_dce(%x: tensor<2x6xf32>) -> tensor<2x6xf32> {
  // CHECK-NEXT: %unrelated = tg.relu %x
  // CHECK-NEXT: func.return %x : tensor<2x6xf32>
  %unrelated = tg.relu %x : tensor<2x6xf32>
  %a = tg.reshape %x : (tensor<2x6xf32>) -> tensor<12xf32>
  %b = tg.reshape %a : (tensor<12xf32>) -> tensor<2x6xf32>
  func.return %b : tensor<2x6xf32>
}

// CHECK-LABEL: func.func @data_movement$full_slice_broadcast_cast_concat_are_input
func.func @data_movement$full_slice_broadcast_cast_concat_are_input(%x: tensor<2x6xf32>) -> tensor<2x6xf32> {
  // CHECK-NEXT: func.return %x : tensor<2x6xf32>
  %s = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x6xf32>) -> tensor<2x6xf32>
  %b = tg.broadcast %s : (tensor<2x6xf32>) -> tensor<2x6xf32>
  %c = tg.cast %b : (tensor<2x6xf32>) -> tensor<2x6xf32>
  %k = tg.concat %c {dim = 0 : i64} : (tensor<2x6xf32>) -> tensor<2x6xf32>
  func.return %k : tensor<2x6xf32>
}

// A cast back to the dtype of a value widened exactly (bf16 -> f32 -> bf16, ui8 -> i16 -> ui8,
// widen-dtypes around an op that moves values) is that value.
// CHECK-LABEL: func.func @cast$exact_round_trip_is_input
func.func @cast$exact_round_trip_is_input(%x: tensor<2xbf16>, %u: tensor<2xui8>) -> (tensor<2xbf16>, tensor<2xui8>) {
  // CHECK-NEXT: func.return %x, %u : tensor<2xbf16>, tensor<2xui8>
  %w = tg.cast %x : (tensor<2xbf16>) -> tensor<2xf32>
  %b = tg.cast %w : (tensor<2xf32>) -> tensor<2xbf16>
  %i = tg.cast %u : (tensor<2xui8>) -> tensor<2xi16>
  %v = tg.cast %i : (tensor<2xi16>) -> tensor<2xui8>
  func.return %b, %v : tensor<2xbf16>, tensor<2xui8>
}

// The other way round a cast rounds: f32 -> bf16 -> f32 stays, as does f32 -> i32 -> f32.
// CHECK-LABEL: func.func @expect_no_fold_as_the_round_trip_rounds
func.func @expect_no_fold_as_the_round_trip_rounds(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  // CHECK-NEXT: %[[B:.*]] = tg.cast %x : (tensor<2xf32>) -> tensor<2xbf16>
  // CHECK-NEXT: %[[W:.*]] = tg.cast %[[B]] : (tensor<2xbf16>) -> tensor<2xf32>
  // CHECK-NEXT: %[[I:.*]] = tg.cast %x : (tensor<2xf32>) -> tensor<2xi32>
  // CHECK-NEXT: %[[F:.*]] = tg.cast %[[I]] : (tensor<2xi32>) -> tensor<2xf32>
  // CHECK-NEXT: func.return %[[W]], %[[F]]
  %b = tg.cast %x : (tensor<2xf32>) -> tensor<2xbf16>
  %w = tg.cast %b : (tensor<2xbf16>) -> tensor<2xf32>
  %i = tg.cast %x : (tensor<2xf32>) -> tensor<2xi32>
  %f = tg.cast %i : (tensor<2xi32>) -> tensor<2xf32>
  func.return %w, %f : tensor<2xf32>, tensor<2xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_slice_drops_elements
func.func @expect_no_fold_as_slice_drops_elements(%x: tensor<2x6xf32>) -> (tensor<2x3xf32>, tensor<2x6xf32>) {
  // CHECK-NEXT: %[[S:.*]] = tg.slice %x {dim = 1 : i64, start = 3 : i64}
  // CHECK:      %[[B:.*]] = tg.broadcast %{{.*}} : (tensor<6xf32>) -> tensor<2x6xf32>
  // CHECK-NEXT: func.return %[[S]], %[[B]]
  %s = tg.slice %x {dim = 1 : i64, start = 3 : i64} : (tensor<2x6xf32>) -> tensor<2x3xf32>
  %r = tg.reshape %x : (tensor<2x6xf32>) -> tensor<12xf32>
  %h = tg.slice %r {dim = 0 : i64, start = 0 : i64, step = 2 : i64} : (tensor<12xf32>) -> tensor<6xf32>
  %b = tg.broadcast %h : (tensor<6xf32>) -> tensor<2x6xf32>
  func.return %s, %b : tensor<2x3xf32>, tensor<2x6xf32>
}

// CHECK-LABEL: func.func @select$splat_condition_is_a_branch
func.func @select$splat_condition_is_a_branch(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  // CHECK-NEXT: %[[B:.*]] = tg.broadcast %b : (tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: func.return %a, %[[B]]
  %t = tg.constant dense<true> : tensor<2x3xi1>
  %f = tg.constant dense<false> : tensor<i1>
  %x = tg.select %t, %a, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %y = tg.select %f, %a, %b : (tensor<i1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return %x, %y : tensor<2x3xf32>, tensor<2x3xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_select_condition_varies
func.func @expect_no_fold_as_select_condition_varies(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
  // CHECK: tg.select
  %c = tg.constant dense<[true, false]> : tensor<2xi1>
  %x = tg.select %c, %a, %b : (tensor<2xi1>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %x : tensor<2xf32>
}
