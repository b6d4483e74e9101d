// RUN: tg-opt %s -p fuse-elementwise | filecheck %s

// A chain with a broadcast bias, a unary op and a splat constant (inlined).
// CHECK-LABEL: func.func @fuse$chain_with_broadcast_input_and_inlined_constant
func.func @fuse$chain_with_broadcast_input_and_inlined_constant(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[F:.*]] = tg.fused_elementwise %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: ^{{.*}}(%[[A:.*]]: f32, %[[B:.*]]: f32):
  // CHECK-NEXT:   %[[S:.*]] = arith.addf %[[A]], %[[B]] : f32
  // CHECK-NEXT:   %[[T:.*]] = math.tanh %[[S]] : f32
  // CHECK-NEXT:   %[[C:.*]] = arith.constant 2.000000e+00 : f32
  // CHECK-NEXT:   %[[M:.*]] = arith.mulf %[[T]], %[[C]] : f32
  // CHECK-NEXT:   tg.yield %[[M]] : f32
  // CHECK-NEXT: }
  // CHECK-NEXT: func.return %[[F]]
  %s = tg.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %t = tg.tanh %s : tensor<4x8xf32>
  %c = tg.constant dense<2.0> : tensor<f32>
  %m = tg.mul %t, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  func.return %m : tensor<4x8xf32>
}

// A diamond (x - y used twice) with the input deduplicated; select on an i1 input; cast from i1.
// CHECK-LABEL: func.func @fuse$diamond_select_cast
func.func @fuse$diamond_select_cast(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>, %m: tensor<2x3xi1>) -> tensor<2x3xf32> {
  // CHECK-NEXT: %[[F:.*]] = tg.fused_elementwise %x, %y, %m : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>) -> tensor<2x3xf32> {
  // CHECK-NEXT: ^{{.*}}(%[[X:.*]]: f32, %[[Y:.*]]: f32, %[[C:.*]]: i1):
  // CHECK-NEXT:   %[[D:.*]] = arith.subf %[[X]], %[[Y]] : f32
  // CHECK-NEXT:   %[[SQ:.*]] = arith.mulf %[[D]], %[[D]] : f32
  // CHECK-NEXT:   %[[E:.*]] = math.exp %[[D]] : f32
  // CHECK-NEXT:   %[[S:.*]] = arith.select %[[C]], %[[SQ]], %[[E]] : f32
  // CHECK-NEXT:   %[[CF:.*]] = arith.uitofp %[[C]] : i1 to f32
  // CHECK-NEXT:   %[[R:.*]] = arith.addf %[[S]], %[[CF]] : f32
  // CHECK-NEXT:   tg.yield %[[R]] : f32
  // CHECK-NEXT: }
  // CHECK-NEXT: func.return %[[F]]
  %d = tg.sub %x, %y : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %sq = tg.mul %d, %d : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %e = tg.exp %d : tensor<2x3xf32>
  %s = tg.select %m, %sq, %e : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %cf = tg.cast %m : (tensor<2x3xi1>) -> tensor<2x3xf32>
  %r = tg.add %s, %cf : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %r : tensor<2x3xf32>
}

// gelu, silu and rsqrt expand to math/arith ops; pow by 3 becomes two multiplies.
// CHECK-LABEL: func.func @fuse$expanded_functions
func.func @fuse$expanded_functions(%x: tensor<8xf32>) -> tensor<8xf32> {
  // CHECK-NEXT: %[[F:.*]] = tg.fused_elementwise %x : (tensor<8xf32>) -> tensor<8xf32> {
  // CHECK:        math.erf
  // CHECK:        math.exp
  // CHECK:        arith.divf
  // CHECK:        math.rsqrt
  // CHECK-NOT:    math.powf
  // CHECK:        tg.yield
  // CHECK-NEXT: }
  // CHECK-NEXT: func.return %[[F]]
  %three = tg.constant dense<3.0> : tensor<f32>
  %g = tg.gelu %x : tensor<8xf32>
  %s = tg.silu %g : tensor<8xf32>
  %r = tg.rsqrt %s : tensor<8xf32>
  %p = tg.pow %r, %three : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  func.return %p : tensor<8xf32>
}

// The middle value has a user outside the chain: two groups, %t is the result of the first.
// CHECK-LABEL: func.func @fuse$split_at_value_with_outside_user
func.func @fuse$split_at_value_with_outside_user(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[T:.*]] = tg.fused_elementwise %x : (tensor<4xf32>) -> tensor<4xf32> {
  // CHECK:        math.exp
  // CHECK-NEXT:   math.tanh
  // CHECK:      %[[U:.*]] = tg.fused_elementwise %[[T]] : (tensor<4xf32>) -> tensor<4xf32> {
  // CHECK:        math.sqrt
  // CHECK-NEXT:   arith.negf
  // CHECK:      func.return %[[U]], %[[T]]
  %e = tg.exp %x : tensor<4xf32>
  %t = tg.tanh %e : tensor<4xf32>
  %s = tg.sqrt %t : tensor<4xf32>
  %u = tg.neg %s : tensor<4xf32>
  func.return %u, %t : tensor<4xf32>, tensor<4xf32>
}

// A smaller-shaped producer ([8] broadcast into [4x8]) stays outside: it is the group's input.
// CHECK-LABEL: func.func @fuse$smaller_producer_is_an_input
func.func @fuse$smaller_producer_is_an_input(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[E:.*]] = tg.exp %b : tensor<8xf32>
  // CHECK-NEXT: %[[F:.*]] = tg.fused_elementwise %x, %[[E]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %e = tg.exp %b : tensor<8xf32>
  %s = tg.add %x, %e : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = tg.relu %s : tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}

// An existing fused op joins a bigger group (its body is inlined).
// CHECK-LABEL: func.func @fuse$merges_existing_fused_op
func.func @fuse$merges_existing_fused_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[F:.*]] = tg.fused_elementwise %x : (tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: ^{{.*}}(%[[A:.*]]: f32):
  // CHECK-NEXT:   %[[N:.*]] = arith.negf %[[A]] : f32
  // CHECK-NEXT:   %[[E:.*]] = math.exp %[[N]] : f32
  // CHECK-NEXT:   tg.yield %[[E]] : f32
  %y = tg.fused_elementwise %x : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    tg.yield %n : f32
  }
  %e = tg.exp %y : tensor<4xf32>
  func.return %e : tensor<4xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_as_group_has_one_op
func.func @expect_no_fuse_as_group_has_one_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[E:.*]] = tg.exp %x
  // CHECK-NEXT: func.return %[[E]]
  %e = tg.exp %x : tensor<4xf32>
  func.return %e : tensor<4xf32>
}

// CHECK-LABEL: func.func @expect_no_fuse_across_a_reduction
func.func @expect_no_fuse_across_a_reduction(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // CHECK-NEXT: tg.exp %x
  // CHECK-NEXT: tg.sum
  // CHECK-NEXT: tg.log
  %e = tg.exp %x : tensor<4x8xf32>
  %s = tg.sum %e {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %l = tg.log %s : tensor<4x1xf32>
  func.return %l : tensor<4x1xf32>
}

// Both values leave the group: each would need its own store, so nothing fuses.
// CHECK-LABEL: func.func @expect_no_fuse_as_producer_result_is_returned
func.func @expect_no_fuse_as_producer_result_is_returned(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[E:.*]] = tg.exp %x
  // CHECK-NEXT: %[[T:.*]] = tg.tanh %[[E]]
  // CHECK-NEXT: func.return %[[T]], %[[E]]
  %e = tg.exp %x : tensor<4xf32>
  %t = tg.tanh %e : tensor<4xf32>
  func.return %t, %e : tensor<4xf32>, tensor<4xf32>
}

// A comparison on run-time data (a one-op body yielding i1) fuses into the select that uses it:
// the mask never reaches memory.
// CHECK-LABEL: func.func @fuse$comparison_into_select
func.func @fuse$comparison_into_select(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[F:.*]] = tg.fused_elementwise %x : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: ^{{.*}}(%[[A:.*]]: f32):
  // CHECK-NEXT:   %[[Z:.*]] = arith.constant 0.000000e+00 : f32
  // CHECK-NEXT:   %[[M:.*]] = arith.cmpf olt, %[[A]], %[[Z]] : f32
  // CHECK:        %[[S:.*]] = arith.select %[[M]], {{.*}}, %[[A]] : f32
  // CHECK-NEXT:   tg.yield %[[S]] : f32
  // CHECK:      func.return %[[F]]
  %m = tg.fused_elementwise %x : (tensor<4x8xf32>) -> tensor<4x8xi1> {
  ^bb0(%a: f32):
    %z = arith.constant 0.000000e+00 : f32
    %r = arith.cmpf olt, %a, %z : f32
    tg.yield %r : i1
  }
  %c = tg.constant dense<0.000000e+00> : tensor<f32>
  %y = tg.select %m, %c, %x : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
