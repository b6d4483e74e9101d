// RUN: tg-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Every verifier message of the tg dialect's mixture-of-experts ops, one case each.

func.func @argtopk_k_too_large(%p: tensor<9x4xf32>) -> tensor<9x5xi64> {
  %i = tg.argtopk %p {k = 5 : i64, dim = 1 : i64} : (tensor<9x4xf32>) -> tensor<9x5xi64>
  func.return %i : tensor<9x5xi64>
}
// CHECK: tg.argtopk: k = 5 is not within [0, 4] (the size of dim 1)

// -----

func.func @put_values_of_another_shape(%x: tensor<6xf32>, %o: tensor<3xi64>, %v: tensor<4xf32>) -> tensor<6xf32> {
  %r = tg.put %x, %o, %v : (tensor<6xf32>, tensor<3xi64>, tensor<4xf32>) -> tensor<6xf32>
  func.return %r : tensor<6xf32>
}
// CHECK: tg.put: values [4] must have the offsets' shape [3]

// -----

func.func @put_reduce_unknown(%x: tensor<6xf32>, %o: tensor<3xi64>, %v: tensor<3xf32>) -> tensor<6xf32> {
  %r = tg.put %x, %o, %v {accumulate = true, reduce = "median"} : (tensor<6xf32>, tensor<3xi64>, tensor<3xf32>) -> tensor<6xf32>
  func.return %r : tensor<6xf32>
}
// CHECK: tg.put: reduce must be one of sum, prod, amax, amin, got 'median'

// -----

func.func @grouped_matmul_offsets_per_group(%x: tensor<6x8xf32>, %w: tensor<4x8x10xf32>, %o: tensor<3xi64>) -> tensor<6x10xf32> {
  %y = tg.grouped_matmul %x, %w, %o : (tensor<6x8xf32>, tensor<4x8x10xf32>, tensor<3xi64>) -> tensor<6x10xf32>
  func.return %y : tensor<6x10xf32>
}
// CHECK: tg.grouped_matmul: offsets [3] should be [4], one per group

// -----

func.func @grouped_matmul_k_mismatch(%x: tensor<6x8xf32>, %w: tensor<4x10x8xf32>, %o: tensor<4xi64>) -> tensor<6x10xf32> {
  %y = tg.grouped_matmul %x, %w, %o : (tensor<6x8xf32>, tensor<4x10x8xf32>, tensor<4xi64>) -> tensor<6x10xf32>
  func.return %y : tensor<6x10xf32>
}
// CHECK: tg.grouped_matmul: the input's 8 columns do not match the weight's K = 10
