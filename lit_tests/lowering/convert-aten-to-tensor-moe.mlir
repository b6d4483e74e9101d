// RUN: tg-opt %s --split-input-file -p convert-aten-to-tensor | filecheck %s
// convert-aten-to-tensor on the ops of a mixture-of-experts layer (transformers' grouped experts):
// topk and sort as tg.argtopk + tg.take, histc as bin masks summed, _grouped_mm as
// tg.grouped_matmul over the [E, N, K] weights read transposed, floor_divide as a scalar body,
// empty_like + index_put (the inverse permutation) as a constant + tg.put.

// CHECK-LABEL: func.func @aten.topk$router
// CHECK:         %[[I:.*]] = tg.argtopk %[[P:.*]] {k = 2 : i64, dim = 1 : i64} : (tensor<3x4xf32>) -> tensor<3x2xi64>
// CHECK:         %[[ROWS:.*]] = tg.constant dense<{{\[\[}}0, 0], [4, 4], [8, 8]]> : tensor<3x2xi64>
// CHECK:         %[[O:.*]] = tg.add %[[ROWS]], %[[I]]
// CHECK:         %[[V:.*]] = tg.take %[[P]], %[[O]] : (tensor<3x4xf32>, tensor<3x2xi64>) -> tensor<3x2xf32>
// CHECK:         func.return %[[V]], %[[I]]
func.func @aten.topk$router(%p: tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>) {
  %v, %i = aten.topk %p {k = 2 : i64} : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
  func.return %v, %i : tensor<3x2xf32>, tensor<3x2xi64>
}

// -----

// CHECK-LABEL: func.func @aten.sort$stable_by_expert
// CHECK:         %[[I:.*]] = tg.argtopk %[[E:.*]] {k = 6 : i64, dim = 0 : i64, largest = false} : (tensor<6xi64>) -> tensor<6xi64>
// CHECK:         %[[V:.*]] = tg.take %[[E]], %[[I]] : (tensor<6xi64>, tensor<6xi64>) -> tensor<6xi64>
// CHECK:         func.return %[[V]], %[[I]]
func.func @aten.sort$stable_by_expert(%e: tensor<6xi64>) -> (tensor<6xi64>, tensor<6xi64>) {
  %v, %i = aten.sort %e : (tensor<6xi64>) -> (tensor<6xi64>, tensor<6xi64>)
  func.return %v, %i : tensor<6xi64>, tensor<6xi64>
}

// -----

// CHECK-LABEL: func.func @aten.histc$expert_counts
// CHECK:         %[[X:.*]] = tg.reshape %{{.*}} : (tensor<6xf32>) -> tensor<6x1xf32>
// CHECK:         %[[LO:.*]] = tg.constant dense<[0.000000e+00, 7.500000e-01, 1.500000e+00, 2.250000e+00]> : tensor<4xf32>
// CHECK:         %[[HI:.*]] = tg.constant dense<[7.500000e-01, 1.500000e+00, 2.250000e+00, 3.00000024]> : tensor<4xf32>
// CHECK:         %[[M:.*]] = tg.fused_elementwise %[[X]], %[[LO]], %[[HI]] : (tensor<6x1xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<6x4xf32>
// CHECK:           arith.cmpf oge
// CHECK:           arith.cmpf olt
// CHECK:           arith.select
// CHECK:         %[[H:.*]] = tg.sum %[[M]] {dims = array<i64: 0>} : (tensor<6x4xf32>) -> tensor<4xf32>
// CHECK:         func.return %[[H]]
func.func @aten.histc$expert_counts(%e: tensor<6xf32>) -> tensor<4xf32> {
  %h = aten.histc %e {bins = 4 : i64, max = 3 : i64} : (tensor<6xf32>) -> tensor<4xf32>
  func.return %h : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @aten._grouped_mm$transposed_expert_weights
// CHECK:         %[[W:.*]] = tg.weight "experts.gate_up_proj" : tensor<4x10x8xf32>
// CHECK:         %[[O:.*]] = tg.cast %{{.*}} : (tensor<4xi32>) -> tensor<4xi64>
// CHECK:         %[[Y:.*]] = tg.grouped_matmul %{{.*}}, %[[W]], %[[O]] {transpose_b = true} : (tensor<6x8xf32>, tensor<4x10x8xf32>, tensor<4xi64>) -> tensor<6x10xf32>
// CHECK:         func.return %[[Y]]
// CHECK-NOT:     aten.
func.func @aten._grouped_mm$transposed_expert_weights(%x: tensor<6x8xf32>, %offs: tensor<4xi32>) -> tensor<6x10xf32> {
  %w = tg.weight "experts.gate_up_proj" : tensor<4x10x8xf32>
  %wt = aten.transpose.int %w {dim0 = -2 : i64, dim1 = -1 : i64} : (tensor<4x10x8xf32>) -> tensor<4x8x10xf32>
  %y = aten._grouped_mm %x, %wt offs %offs : tensor<4xi32> : tensor<6x8xf32>, tensor<4x8x10xf32> -> tensor<6x10xf32>
  func.return %y : tensor<6x10xf32>
}

// -----

// CHECK-LABEL: func.func @aten.floor_divide$by_top_k
// CHECK:         tg.fused_elementwise %{{.*}}, %{{.*}} : (tensor<6xi64>, tensor<i64>) -> tensor<6xi64>
// CHECK:           arith.floordivsi %{{.*}}, %{{.*}} : i64
func.func @aten.floor_divide$by_top_k(%perm: tensor<6xi64>) -> tensor<6xi64> {
  %k = tg.constant dense<2> : tensor<i64>
  %q = aten.floor_divide %perm, %k : (tensor<6xi64>, tensor<i64>) -> tensor<6xi64>
  func.return %q : tensor<6xi64>
}

// -----

// CHECK-LABEL: func.func @aten.index_put$inverse_permutation
// CHECK:         %[[E:.*]] = tg.constant dense<0> : tensor<6xi64>
// CHECK:         %[[A:.*]] = tg.constant dense<[0, 1, 2, 3, 4, 5]> : tensor<6xi64>
// CHECK:         %[[O:.*]] = tg.add
// CHECK:         %[[R:.*]] = tg.put %[[E]], %[[O]], %[[A]] : (tensor<6xi64>, tensor<6xi64>, tensor<6xi64>) -> tensor<6xi64>
// CHECK:         func.return %[[R]]
func.func @aten.index_put$inverse_permutation(%perm: tensor<6xi64>) -> tensor<6xi64> {
  %e = aten.empty_like %perm {pin_memory = false} : (tensor<6xi64>) -> tensor<6xi64>
  %a = tg.constant dense<[0, 1, 2, 3, 4, 5]> : tensor<6xi64>
  %inv = aten.index_put %e[%perm], %a : (tensor<6xi64>, tensor<6xi64>, tensor<6xi64>) -> tensor<6xi64>
  func.return %inv : tensor<6xi64>
}
