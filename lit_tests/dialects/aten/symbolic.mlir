// RUN: tg-opt %s | tg-opt | filecheck %s
// Symbolic sizes at the aten level: each `?` names its expression (the type's last parameter),
// the module records each symbol's range; a reshape's dynamic size entries are read from its
// result type (lowered to tg: lowering/convert-aten-to-tensor-symbolic.mlir).

// CHECK: builtin.module attributes {tg.symbols = {seq = array<i64: 1, 512>}}
// CHECK-LABEL: func.func @attention_block
// CHECK-SAME: (%x: tensor<2x?x32xf32, ["seq"]>) -> tensor<2x?x3x4x8xf32, ["seq"]>
// CHECK: aten.linear {{.*}} -> tensor<2x?x96xf32, ["seq"]>
// CHECK: aten.view {{.*}} {size = array<i64: 2, -9223372036854775808, 3, 4, 8>} : (tensor<2x?x96xf32, ["seq"]>) -> tensor<2x?x3x4x8xf32, ["seq"]>
// CHECK: aten.cat {{.*}} -> tensor<4x?x3x4x8xf32, ["seq"]>
// CHECK: aten.view {{.*}} -> tensor<?x3x4x8xf32, ["2*seq"]>
builtin.module attributes {tg.symbols = {seq = array<i64: 1, 512>}} {
  func.func @attention_block(%x: tensor<2x?x32xf32, ["seq"]>) -> tensor<2x?x3x4x8xf32, ["seq"]> {
    %w = tg.weight "qkv.weight" : tensor<96x32xf32>
    %0 = aten.linear %x, %w : (tensor<2x?x32xf32, ["seq"]>, tensor<96x32xf32>) -> tensor<2x?x96xf32, ["seq"]>
    %1 = aten.view %0 {size = array<i64: 2, -9223372036854775808, 3, 4, 8>} : (tensor<2x?x96xf32, ["seq"]>) -> tensor<2x?x3x4x8xf32, ["seq"]>
    %2 = aten.cat %1, %1 {dim = 0 : i64} : (tensor<2x?x3x4x8xf32, ["seq"]>, tensor<2x?x3x4x8xf32, ["seq"]>) -> tensor<4x?x3x4x8xf32, ["seq"]>
    %3 = aten.view %1 {size = array<i64: -1, 3, 4, 8>} : (tensor<2x?x3x4x8xf32, ["seq"]>) -> tensor<?x3x4x8xf32, ["2*seq"]>
    func.return %1 : tensor<2x?x3x4x8xf32, ["seq"]>
  }
}
