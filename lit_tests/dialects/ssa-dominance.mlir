// RUN: tg-opt %s --split-input-file --verify-diagnostics | filecheck %s
// The verifier's SSA checks (tensor_graphs/diagnostics.py), whatever the dialect: a value is
// defined once, before every use. xDSL's parser accepts forward references, so without these a
// module using a value before its definition would pass canonicalize and fail in a lowering.

// CHECK-LABEL: func.func @defined_before_use$ok
func.func @defined_before_use$ok(%a: tensor<2xf32>) -> tensor<2xf32> {
  %y = tg.add %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %z = tg.mul %y, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %z : tensor<2xf32>
}

// -----

func.func @use_before_definition(%a: tensor<2xf32>) -> tensor<2xf32> {
  %z = tg.add %y, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %y = tg.mul %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %z : tensor<2xf32>
}
// CHECK: ssa-dominance.mlir:16:3: error: 'tg.add' op (%z): operand #0 %y is used before it is defined (defined by 'tg.mul' at {{.*}}ssa-dominance.mlir:17:3)

// -----

func.func @used_by_its_own_definition(%a: tensor<2xf32>) -> tensor<2xf32> {
  %y = tg.add %y, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}
// CHECK: ssa-dominance.mlir:25:3: error: 'tg.add' op (%y): operand #0 %y is used by the op that defines it

// -----

func.func @use_before_definition_in_a_region(%x: tensor<4xf32>) -> tensor<4xf32> {
  %f = tg.fused_elementwise %x : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32):
    %m = arith.mulf %s, %a : f32
    %s = arith.addf %a, %a : f32
    tg.yield %m : f32
  }
  func.return %f : tensor<4xf32>
}
// CHECK: ssa-dominance.mlir:35:5: error: 'arith.mulf' op (%m): operand #0 %s is used before it is defined (defined by 'arith.addf' at {{.*}}:36:5)

// -----

func.func @result_returned_before_it_is_defined(%a: tensor<2xf32>) -> tensor<2xf32> {
  func.return %y : tensor<2xf32>
  %y = tg.add %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
}
// CHECK: ssa-dominance.mlir:46:3: error: 'func.return' op: operand #0 %y is used before it is defined

// -----

func.func @duplicate_definition(%a: tensor<2xf32>) -> tensor<2xf32> {
  %y = tg.add %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %y = tg.mul %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}
// CHECK: ssa-dominance.mlir:55:3: error: SSA value %y is already defined

// -----

func.func @never_defined(%a: tensor<2xf32>) -> tensor<2xf32> {
  %y = tg.add %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}
// CHECK: ssa-dominance.mlir:63:19: error: %b is used but never defined
