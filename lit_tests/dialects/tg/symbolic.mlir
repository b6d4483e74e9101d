// RUN: tg-opt %s | tg-opt | filecheck %s
// Symbolic sizes at the tg level: each `?` names its expression of the module's symbols, and
// the verifiers check the shape rules on the expressions (`dialects/symbolic.py`); their error cases are in invalid.mlir.

// CHECK: builtin.module attributes {tg.symbols = {b = array<i64: 1, 8>, seq = array<i64: 1, 512>}}
// CHECK-LABEL: func.func @block
// CHECK: tg.matmul {{.*}} -> tensor<?x?x64xf32, ["b", "seq"]>
// CHECK: tg.add {{.*}} -> tensor<?x?x64xf32, ["b", "seq"]>
// CHECK: tg.reshape {{.*}} : (tensor<?x?x64xf32, ["b", "seq"]>) -> tensor<?x64xf32, ["b*seq"]>
// CHECK: tg.concat {{.*}} -> tensor<?x64xf32, ["2*b*seq"]>
// CHECK: tg.softmax {{.*}} : tensor<?x64xf32, ["2*b*seq"]>
// CHECK: tg.sum {{.*}} -> tensor<?x1xf32, ["2*b*seq"]>
builtin.module attributes {tg.symbols = {b = array<i64: 1, 8>, seq = array<i64: 1, 512>}} {
  func.func @block(%x: tensor<?x?x64xf32, ["b", "seq"]>, %w: tensor<64x64xf32>, %bias: tensor<64xf32>) -> tensor<?x1xf32, ["2*b*seq"]> {
    %m = tg.matmul %x, %w, %bias {transpose_b = true, beta = 1.0 : f32} : (tensor<?x?x64xf32, ["b", "seq"]>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32, ["b", "seq"]>
    %a = tg.add %m, %x : (tensor<?x?x64xf32, ["b", "seq"]>, tensor<?x?x64xf32, ["b", "seq"]>) -> tensor<?x?x64xf32, ["b", "seq"]>
    %r = tg.reshape %a : (tensor<?x?x64xf32, ["b", "seq"]>) -> tensor<?x64xf32, ["b*seq"]>
    %c = tg.concat %r, %r {dim = 0 : i64} : (tensor<?x64xf32, ["b*seq"]>, tensor<?x64xf32, ["b*seq"]>) -> tensor<?x64xf32, ["2*b*seq"]>
    %p = tg.softmax %c {dim = 1 : i64} : tensor<?x64xf32, ["2*b*seq"]>
    %s = tg.sum %p {dims = array<i64: 1>, keepdim = true} : (tensor<?x64xf32, ["2*b*seq"]>) -> tensor<?x1xf32, ["2*b*seq"]>
    func.return %s : tensor<?x1xf32, ["2*b*seq"]>
  }
}
