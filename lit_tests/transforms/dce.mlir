// RUN: tg-opt %s -p dce | filecheck %s

// CHECK-LABEL: func.func @dce$removes_dead_chain_to_fixpoint
func.func @dce$removes_dead_chain_to_fixpoint(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK-NEXT: %[[R:.*]] = tg.relu %x
  // CHECK-NEXT: func.return %[[R]]
  %w = tg.weight "unused" : tensor<3x2xf32>
  %c = tg.constant dense<2.0> : tensor<f32>
  %t = tg.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %m = tg.mul %t, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %r = tg.relu %x : tensor<2x3xf32>
  func.return %r : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @expect_no_removal_as_every_op_is_used
func.func @expect_no_removal_as_every_op_is_used(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK-NEXT: %[[W:.*]] = tg.weight "b" : tensor<3xf32>
  // CHECK-NEXT: %[[A:.*]] = tg.add %x, %[[W]]
  // CHECK-NEXT: %[[R:.*]] = tg.relu %[[A]]
  // CHECK-NEXT: func.return %[[R]]
  %b = tg.weight "b" : tensor<3xf32>
  %a = tg.add %x, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %r = tg.relu %a : tensor<2x3xf32>
  func.return %r : tensor<2x3xf32>
}

// An unused function is a symbol, not dead code.
// CHECK-LABEL: func.func @expect_no_removal_of_unused_function
func.func @expect_no_removal_of_unused_function() {
  // CHECK-NEXT: func.return
  func.return
}
