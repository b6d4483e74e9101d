// RUN: tg-opt %s | tg-opt | filecheck %s
// Round trip of the mixture-of-experts ops of the tg dialect (verifier messages: moe-invalid.mlir).

// CHECK-LABEL: func.func @moe_ops
// CHECK: tg.argtopk %{{.*}} {k = 2 : i64, dim = 1 : i64} : (tensor<9x4xf32>) -> tensor<9x2xi64>
// CHECK: tg.argtopk %{{.*}} {k = 18 : i64, dim = 0 : i64, largest = false} : (tensor<18xi64>) -> tensor<18xi64>
// CHECK: tg.put %{{.*}}, %{{.*}}, %{{.*}} {accumulate = true} : (tensor<18xi64>, tensor<18xi64>, tensor<18xi64>) -> tensor<18xi64>
// CHECK: tg.put %{{.*}}, %{{.*}}, %{{.*}} {accumulate = true, reduce = "amax"} : (tensor<18xi64>, tensor<18xi64>, tensor<18xi64>) -> tensor<18xi64>
// CHECK: tg.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} {transpose_b = true} : (tensor<18x32xf32>, tensor<4x128x32xf32>, tensor<4xi64>) -> tensor<18x128xf32>
func.func @moe_ops(%p: tensor<9x4xf32>, %e: tensor<18xi64>, %x: tensor<18x32xf32>, %o: tensor<4xi64>) -> (tensor<9x2xi64>, tensor<18xi64>, tensor<18x128xf32>) {
  %i = tg.argtopk %p {k = 2 : i64, dim = 1 : i64} : (tensor<9x4xf32>) -> tensor<9x2xi64>
  %s = tg.argtopk %e {k = 18 : i64, dim = 0 : i64, largest = false} : (tensor<18xi64>) -> tensor<18xi64>
  %r = tg.put %e, %s, %e {accumulate = true} : (tensor<18xi64>, tensor<18xi64>, tensor<18xi64>) -> tensor<18xi64>
  %m = tg.put %r, %s, %e {accumulate = true, reduce = "amax"} : (tensor<18xi64>, tensor<18xi64>, tensor<18xi64>) -> tensor<18xi64>
  %w = tg.weight "experts.gate_up_proj" : tensor<4x128x32xf32>
  %y = tg.grouped_matmul %x, %w, %o {transpose_b = true} : (tensor<18x32xf32>, tensor<4x128x32xf32>, tensor<4xi64>) -> tensor<18x128xf32>
  func.return %i, %m, %y : tensor<9x2xi64>, tensor<18xi64>, tensor<18x128xf32>
}
