// RUN: tg-opt %s --split-input-file -p convert-aten-to-tensor | filecheck %s
// RUN: not tg-opt %S/Inputs/convert-aten-to-tensor-unsupported.mlir -p convert-aten-to-tensor 2>&1 | filecheck %s --check-prefix=ERR
// RUN: tg-opt %S/Inputs/convert-aten-to-tensor-unsupported.mlir -p convert-aten-to-tensor --verify-diagnostics | filecheck %s --check-prefix=ERR

// ERR: convert-aten-to-tensor: 2 aten ops could not be converted:
// ERR-NEXT: aten::erfinv has no tg lowering (unsupported ATen op) at layers.1 (Erfinv), model.py:12 in forward; write it with supported ops
// ERR-NEXT: aten::atan has no tg lowering (unsupported ATen op); write it with supported ops

// CHECK-LABEL: func.func @aten.linear$basic
// CHECK-SAME:    (%[[X:.*]]: tensor<2x8xf32>)
// CHECK:         %[[W:.*]] = tg.weight "fc.weight" : tensor<6x8xf32>
// CHECK:         %[[B:.*]] = tg.weight "fc.bias" : tensor<6xf32>
// CHECK:         %[[WT:.*]] = tg.transpose %[[W]] {perm = array<i64: 1, 0>} : (tensor<6x8xf32>) -> tensor<8x6xf32>
// CHECK:         %[[MM:.*]] = tg.matmul %[[X]], %[[WT]] : (tensor<2x8xf32>, tensor<8x6xf32>) -> tensor<2x6xf32>
// CHECK:         %[[Y:.*]] = tg.add %[[MM]], %[[B]] : (tensor<2x6xf32>, tensor<6xf32>) -> tensor<2x6xf32>
// CHECK:         func.return %[[Y]]
// CHECK-NOT:     aten.
func.func @aten.linear$basic(%x: tensor<2x8xf32>) -> tensor<2x6xf32> {
  %w = tg.weight "fc.weight" : tensor<6x8xf32>
  %b = tg.weight "fc.bias" : tensor<6xf32>
  %y = aten.linear %x, %w, %b : (tensor<2x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<2x6xf32>
  func.return %y : tensor<2x6xf32>
}

// -----

// CHECK-LABEL: func.func @aten.linear$no_bias_batched
// CHECK:         %[[WT:.*]] = tg.transpose %{{.*}} {perm = array<i64: 1, 0>} : (tensor<6x8xf32>) -> tensor<8x6xf32>
// CHECK:         %[[MM:.*]] = tg.matmul %{{.*}}, %[[WT]] : (tensor<4x2x8xf32>, tensor<8x6xf32>) -> tensor<4x2x6xf32>
// CHECK-NOT:     tg.add
// CHECK:         func.return %[[MM]]
func.func @aten.linear$no_bias_batched(%x: tensor<4x2x8xf32>, %w: tensor<6x8xf32>) -> tensor<4x2x6xf32> {
  %y = aten.linear %x, %w : (tensor<4x2x8xf32>, tensor<6x8xf32>) -> tensor<4x2x6xf32>
  func.return %y : tensor<4x2x6xf32>
}

// -----

// CHECK-LABEL: func.func @aten.linear$vector_input
// CHECK:         %[[X2:.*]] = tg.reshape %{{.*}} : (tensor<8xf32>) -> tensor<1x8xf32>
// CHECK:         %[[WT:.*]] = tg.transpose
// CHECK:         %[[MM:.*]] = tg.matmul %[[X2]], %[[WT]] : (tensor<1x8xf32>, tensor<8x6xf32>) -> tensor<1x6xf32>
// CHECK:         %[[R:.*]] = tg.reshape %[[MM]] : (tensor<1x6xf32>) -> tensor<6xf32>
// CHECK:         tg.add %[[R]], %{{.*}} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
func.func @aten.linear$vector_input(%x: tensor<8xf32>, %w: tensor<6x8xf32>, %b: tensor<6xf32>) -> tensor<6xf32> {
  %y = aten.linear %x, %w, %b : (tensor<8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<6xf32>
  func.return %y : tensor<6xf32>
}

// -----

// CHECK-LABEL: func.func @aten.mm$basic
// CHECK:         %[[Y:.*]] = tg.matmul %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
// CHECK-NEXT:    func.return %[[Y]]
func.func @aten.mm$basic(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x5xf32> {
  %y = aten.mm %a, %b : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  func.return %y : tensor<2x5xf32>
}

// -----

// CHECK-LABEL: func.func @aten.bmm$basic
// CHECK:         tg.matmul %{{.*}}, %{{.*}} : (tensor<4x2x3xf32>, tensor<4x3x5xf32>) -> tensor<4x2x5xf32>
func.func @aten.bmm$basic(%a: tensor<4x2x3xf32>, %b: tensor<4x3x5xf32>) -> tensor<4x2x5xf32> {
  %y = aten.bmm %a, %b : (tensor<4x2x3xf32>, tensor<4x3x5xf32>) -> tensor<4x2x5xf32>
  func.return %y : tensor<4x2x5xf32>
}

// -----

// CHECK-LABEL: func.func @aten.matmul$broadcast_batch
// CHECK:         tg.matmul %{{.*}}, %{{.*}} : (tensor<4x2x3xf32>, tensor<3x5xf32>) -> tensor<4x2x5xf32>
// CHECK-NOT:     tg.reshape
func.func @aten.matmul$broadcast_batch(%a: tensor<4x2x3xf32>, %b: tensor<3x5xf32>) -> tensor<4x2x5xf32> {
  %y = aten.matmul %a, %b : (tensor<4x2x3xf32>, tensor<3x5xf32>) -> tensor<4x2x5xf32>
  func.return %y : tensor<4x2x5xf32>
}

// -----

// CHECK-LABEL: func.func @aten.matmul$vector_lhs
// CHECK:         %[[V:.*]] = tg.reshape %{{.*}} : (tensor<3xf32>) -> tensor<1x3xf32>
// CHECK:         %[[P:.*]] = tg.matmul %[[V]], %{{.*}} : (tensor<1x3xf32>, tensor<4x3x5xf32>) -> tensor<4x1x5xf32>
// CHECK:         tg.reshape %[[P]] : (tensor<4x1x5xf32>) -> tensor<4x5xf32>
func.func @aten.matmul$vector_lhs(%v: tensor<3xf32>, %b: tensor<4x3x5xf32>) -> tensor<4x5xf32> {
  %y = aten.matmul %v, %b : (tensor<3xf32>, tensor<4x3x5xf32>) -> tensor<4x5xf32>
  func.return %y : tensor<4x5xf32>
}

// -----

// CHECK-LABEL: func.func @aten.matmul$dot
// CHECK:         tg.reshape %{{.*}} : (tensor<3xf32>) -> tensor<1x3xf32>
// CHECK:         tg.reshape %{{.*}} : (tensor<3xf32>) -> tensor<3x1xf32>
// CHECK:         %[[P:.*]] = tg.matmul %{{.*}}, %{{.*}} : (tensor<1x3xf32>, tensor<3x1xf32>) -> tensor<1x1xf32>
// CHECK:         tg.reshape %[[P]] : (tensor<1x1xf32>) -> tensor<f32>
func.func @aten.matmul$dot(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<f32> {
  %y = aten.matmul %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<f32>
  func.return %y : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @aten.addmm$basic
// CHECK-SAME:    (%[[B:.*]]: tensor<4xf32>, %[[X:.*]]: tensor<5x6xf32>, %[[W:.*]]: tensor<6x4xf32>)
// CHECK:         %[[MM:.*]] = tg.matmul %[[X]], %[[W]] : (tensor<5x6xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
// CHECK-NEXT:    %[[Y:.*]] = tg.add %[[MM]], %[[B]] : (tensor<5x4xf32>, tensor<4xf32>) -> tensor<5x4xf32>
// CHECK-NEXT:    func.return %[[Y]]
func.func @aten.addmm$basic(%b: tensor<4xf32>, %x: tensor<5x6xf32>, %w: tensor<6x4xf32>) -> tensor<5x4xf32> {
  %y = aten.addmm %b, %x, %w : (tensor<4xf32>, tensor<5x6xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
  func.return %y : tensor<5x4xf32>
}

// -----

// CHECK-LABEL: func.func @aten.addmm$alpha_beta
// CHECK-SAME:    (%[[B:.*]]: tensor<4xf32>, %[[X:.*]]: tensor<5x6xf32>, %[[W:.*]]: tensor<6x4xf32>)
// CHECK:         %[[MM:.*]] = tg.matmul %[[X]], %[[W]]
// CHECK:         %[[A:.*]] = tg.constant dense<2.000000e+00> : tensor<f32>
// CHECK:         %[[MMA:.*]] = tg.mul %[[MM]], %[[A]] : (tensor<5x4xf32>, tensor<f32>) -> tensor<5x4xf32>
// CHECK:         %[[BETA:.*]] = tg.constant dense<5.000000e-01> : tensor<f32>
// CHECK:         %[[BB:.*]] = tg.mul %[[B]], %[[BETA]] : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
// CHECK:         tg.add %[[MMA]], %[[BB]] : (tensor<5x4xf32>, tensor<4xf32>) -> tensor<5x4xf32>
func.func @aten.addmm$alpha_beta(%b: tensor<4xf32>, %x: tensor<5x6xf32>, %w: tensor<6x4xf32>) -> tensor<5x4xf32> {
  %y = aten.addmm %b, %x, %w {beta = 0.5 : f64, alpha = 2.0 : f64} : (tensor<4xf32>, tensor<5x6xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
  func.return %y : tensor<5x4xf32>
}

// -----

// CHECK-LABEL: func.func @aten.addmm$beta_zero_drops_self
// CHECK:         %[[MM:.*]] = tg.matmul
// CHECK-NOT:     tg.add
// CHECK:         func.return %[[MM]]
func.func @aten.addmm$beta_zero_drops_self(%b: tensor<4xf32>, %x: tensor<5x6xf32>, %w: tensor<6x4xf32>) -> tensor<5x4xf32> {
  %y = aten.addmm %b, %x, %w {beta = 0.0 : f64} : (tensor<4xf32>, tensor<5x6xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
  func.return %y : tensor<5x4xf32>
}

// -----

// CHECK-LABEL: func.func @aten.add.Tensor$alpha
// CHECK-SAME:    (%[[A:.*]]: tensor<2x3xf32>, %[[B:.*]]: tensor<3xf32>)
// CHECK:         %[[C:.*]] = tg.constant dense<3.000000e+00> : tensor<f32>
// CHECK:         %[[BS:.*]] = tg.mul %[[B]], %[[C]] : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
// CHECK:         tg.add %[[A]], %[[BS]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
func.func @aten.add.Tensor$alpha(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %y = aten.add.Tensor %a, %b {alpha = 3.0 : f64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.binary$tensor_and_scalar_forms
// CHECK:         tg.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK:         tg.constant dense<1.500000e+00> : tensor<f32>
// CHECK:         tg.add
// CHECK:         tg.sub %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK:         tg.constant dense<2.000000e+00> : tensor<f32>
// CHECK:         tg.sub
// CHECK:         tg.mul %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK:         tg.constant dense<5.000000e-01> : tensor<f32>
// CHECK:         tg.mul
// CHECK:         tg.div %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK:         tg.constant dense<4.000000e+00> : tensor<f32>
// CHECK:         tg.div
// CHECK:         tg.relu %{{.*}} : tensor<2x3xf32>
// CHECK-NOT:     aten.
func.func @aten.binary$tensor_and_scalar_forms(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %c = tg.constant dense<2.0> : tensor<f32>
  %0 = aten.add.Tensor %a, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %1 = aten.add.Scalar %0 {other = 1.5 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = aten.sub.Tensor %1, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = aten.sub.Scalar %2 {other = 1.0 : f64, alpha = 2.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = aten.mul.Tensor %3, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %5 = aten.mul.Scalar %4 {other = 0.5 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = aten.div.Tensor %5, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = aten.div.Scalar %6 {other = 4.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %8 = aten.relu %7 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %8 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.t$basic
// CHECK:         tg.transpose %{{.*}} {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
func.func @aten.t$basic(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %y = aten.t %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}

// -----

// CHECK-LABEL: func.func @aten.t$vector_is_identity
// CHECK-SAME:    (%[[X:.*]]: tensor<3xf32>)
// CHECK-NEXT:    func.return %[[X]]
func.func @aten.t$vector_is_identity(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = aten.t %x : (tensor<3xf32>) -> tensor<3xf32>
  func.return %y : tensor<3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.transpose.int$negative_dims
// CHECK:         tg.transpose %{{.*}} {perm = array<i64: 0, 2, 1>} : (tensor<2x3x4xf32>) -> tensor<2x4x3xf32>
func.func @aten.transpose.int$negative_dims(%x: tensor<2x3x4xf32>) -> tensor<2x4x3xf32> {
  %y = aten.transpose.int %x {dim0 = -1 : i64, dim1 = -2 : i64} : (tensor<2x3x4xf32>) -> tensor<2x4x3xf32>
  func.return %y : tensor<2x4x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.permute$negative_dims
// CHECK:         tg.transpose %{{.*}} {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
func.func @aten.permute$negative_dims(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %y = aten.permute %x {dims = array<i64: -1, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  func.return %y : tensor<4x2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.view$reshape_forms
// CHECK:         tg.reshape %{{.*}} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK:         tg.reshape %{{.*}} : (tensor<6x4xf32>) -> tensor<24xf32>
// CHECK:         tg.reshape %{{.*}} : (tensor<24xf32>) -> tensor<4x6xf32>
// CHECK:         tg.reshape %{{.*}} : (tensor<4x6xf32>) -> tensor<4x1x6xf32>
// CHECK:         tg.reshape %{{.*}} : (tensor<4x1x6xf32>) -> tensor<4x6xf32>
// CHECK-NOT:     aten.
func.func @aten.view$reshape_forms(%x: tensor<2x3x4xf32>) -> tensor<4x6xf32> {
  %0 = aten.view %x {size = array<i64: 6, -1>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = aten.reshape %0 {shape = array<i64: 24>} : (tensor<6x4xf32>) -> tensor<24xf32>
  %2 = aten._unsafe_view %1 {size = array<i64: 4, 6>} : (tensor<24xf32>) -> tensor<4x6xf32>
  %3 = aten.unsqueeze %2 {dim = 1 : i64} : (tensor<4x6xf32>) -> tensor<4x1x6xf32>
  %4 = aten.flatten.using_ints %3 {start_dim = 1 : i64} : (tensor<4x1x6xf32>) -> tensor<4x6xf32>
  func.return %4 : tensor<4x6xf32>
}

// -----

// CHECK-LABEL: func.func @aten.contiguous$is_identity
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT:    func.return %[[X]], %[[X]], %[[X]]
func.func @aten.contiguous$is_identity(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = aten.contiguous %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = aten.clone %0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = aten.view %1 {size = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.tanh$unary_functions
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT:    %[[A:.*]] = tg.tanh %[[X]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[B:.*]] = tg.exp %[[A]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[C:.*]] = tg.rsqrt %[[B]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[D:.*]] = tg.neg %[[C]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[E:.*]] = tg.gelu %[[D]] {approximate = "tanh"} : tensor<2x3xf32>
// CHECK-NEXT:    %[[F:.*]] = tg.gelu %[[E]] : tensor<2x3xf32>
// CHECK-NEXT:    func.return %[[F]]
func.func @aten.tanh$unary_functions(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = aten.tanh %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = aten.exp %0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = aten.rsqrt %1 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = aten.neg %2 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = aten.gelu %3 {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = aten.gelu %4 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %5 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.pow$scalar_and_tensor_exponent
// CHECK:         %[[C:.*]] = tg.constant dense<3.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[P:.*]] = tg.pow %{{.*}}, %[[C]] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %[[Q:.*]] = tg.pow %[[P]], %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    tg.max %[[Q]], %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
func.func @aten.pow$scalar_and_tensor_exponent(%x: tensor<2x3xf32>, %e: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = aten.pow.Tensor_Scalar %x {exponent = 3 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = aten.pow.Tensor_Tensor %0, %e : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = aten.maximum %1, %e : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return %2 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.add$int_tensor_plus_float_promotes
// CHECK:         %[[C:.*]] = tg.cast %{{.*}} : (tensor<3xi64>) -> tensor<3xf32>
// CHECK-NEXT:    tg.add %[[C]], %{{.*}} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
func.func @aten.add$int_tensor_plus_float_promotes(%i: tensor<3xi64>, %x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = aten.add.Tensor %i, %x : (tensor<3xi64>, tensor<3xf32>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.mean$dims_normalised
// CHECK:         tg.mean %{{.*}} {dims = array<i64: 0, 2>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
// CHECK:         tg.sum %{{.*}} {dims = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<f32>
// CHECK:         tg.amax %{{.*}} {dims = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3xf32>
func.func @aten.mean$dims_normalised(%x: tensor<2x3x4xf32>) -> (tensor<1x3x1xf32>, tensor<f32>, tensor<3xf32>) {
  %0 = aten.mean.dim %x {dim = array<i64: -1, 0>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  %1 = aten.sum %x : (tensor<2x3x4xf32>) -> tensor<f32>
  %2 = aten.amax %x {dim = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  func.return %0, %1, %2 : tensor<1x3x1xf32>, tensor<f32>, tensor<3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.softmax$negative_dim
// CHECK:         tg.softmax %{{.*}} {dim = 1 : i64} : tensor<2x3xf32>
// CHECK:         tg.log_softmax %{{.*}} {dim = 0 : i64} : tensor<2x3xf32>
func.func @aten.softmax$negative_dim(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = aten.softmax.int %x {dim = -1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = aten._log_softmax %x {dim = 0 : i64, half_to_float = false} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0, %1 : tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.layer_norm$no_affine_gets_ones_and_zeros
// CHECK:         %[[W:.*]] = tg.constant dense<1.000000e+00> : tensor<8xf32>
// CHECK-NEXT:    %[[B:.*]] = tg.constant dense<0.000000e+00> : tensor<8xf32>
// CHECK-NEXT:    tg.layer_norm %{{.*}}, %[[W]], %[[B]] {eps = 1.000000e-06 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
func.func @aten.layer_norm$no_affine_gets_ones_and_zeros(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = aten.layer_norm %x {normalized_shape = array<i64: 8>, eps = 1.0e-6 : f64} : tensor<2x8xf32> -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// -----

// CHECK-LABEL: func.func @aten.scaled_dot_product_attention$bool_mask_becomes_additive
// CHECK-SAME:    %[[M:[a-z0-9]+]]: tensor<1x1x7x7xi1>
// CHECK:         %[[ZERO:.*]] = tg.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[NINF:.*]] = tg.constant dense<"0x000080FF"> : tensor<f32>
// CHECK-NEXT:    %[[ADD:.*]] = tg.select %[[M]], %[[ZERO]], %[[NINF]] : (tensor<1x1x7x7xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x7x7xf32>
// CHECK-NEXT:    tg.attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[ADD]] {scale = 2.500000e-01 : f32} : (tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<1x1x7x7xf32>) -> tensor<1x4x7x16xf32>
func.func @aten.scaled_dot_product_attention$bool_mask_becomes_additive(%q: tensor<1x4x7x16xf32>, %k: tensor<1x4x7x16xf32>, %v: tensor<1x4x7x16xf32>, %m: tensor<1x1x7x7xi1>) -> tensor<1x4x7x16xf32> {
  %0 = aten.scaled_dot_product_attention %q, %k, %v, %m : (tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<1x1x7x7xi1>) -> tensor<1x4x7x16xf32>
  func.return %0 : tensor<1x4x7x16xf32>
}

// -----

// CHECK-LABEL: func.func @aten.scaled_dot_product_attention$causal_gqa
// CHECK-NEXT:    tg.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f32, causal = true} : (tensor<2x4x5x8xf32>, tensor<2x2x5x8xf32>, tensor<2x2x5x8xf32>) -> tensor<2x4x5x8xf32>
func.func @aten.scaled_dot_product_attention$causal_gqa(%q: tensor<2x4x5x8xf32>, %k: tensor<2x2x5x8xf32>, %v: tensor<2x2x5x8xf32>) -> tensor<2x4x5x8xf32> {
  %0 = aten.scaled_dot_product_attention %q, %k, %v {is_causal = true, scale = 0.5 : f64, enable_gqa = true} : (tensor<2x4x5x8xf32>, tensor<2x2x5x8xf32>, tensor<2x2x5x8xf32>) -> tensor<2x4x5x8xf32>
  func.return %0 : tensor<2x4x5x8xf32>
}

// -----

// CHECK-LABEL: func.func @aten.slice$clamped_and_negative
// CHECK-SAME:    (%[[X:.*]]: tensor<2x5xf32>)
// CHECK-NEXT:    %[[A:.*]] = tg.slice %[[X]] {dim = 1 : i64, start = 2 : i64} : (tensor<2x5xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %[[S:.*]] = tg.slice %[[X]] {dim = 0 : i64, start = 1 : i64} : (tensor<2x5xf32>) -> tensor<1x5xf32>
// CHECK-NEXT:    %[[B:.*]] = tg.reshape %[[S]] : (tensor<1x5xf32>) -> tensor<5xf32>
// CHECK-NEXT:    %[[C:.*]] = tg.slice %[[X]] {dim = 1 : i64, start = 1 : i64} : (tensor<2x5xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:    func.return %[[A]], %[[B]], %[[C]], %[[X]]
func.func @aten.slice$clamped_and_negative(%x: tensor<2x5xf32>) -> (tensor<2x3xf32>, tensor<5xf32>, tensor<2x2xf32>, tensor<2x5xf32>) {
  %0 = aten.slice.Tensor %x {dim = 1 : i64, start = -3 : i64, end = 100 : i64} : (tensor<2x5xf32>) -> tensor<2x3xf32>
  %1 = aten.select.int %x {dim = 0 : i64, index = -1 : i64} : (tensor<2x5xf32>) -> tensor<5xf32>
  %2 = aten.narrow %x {dim = -1 : i64, start = 1 : i64, length = 2 : i64} : (tensor<2x5xf32>) -> tensor<2x2xf32>
  %3 = aten.slice.Tensor %x {dim = 1 : i64} : (tensor<2x5xf32>) -> tensor<2x5xf32>
  func.return %0, %1, %2, %3 : tensor<2x3xf32>, tensor<5xf32>, tensor<2x2xf32>, tensor<2x5xf32>
}

// -----

// CHECK-LABEL: func.func @aten.split$one_slice_per_result
// CHECK-NEXT:    %[[A:.*]] = tg.slice %{{.*}} {dim = 1 : i64, start = 0 : i64} : (tensor<2x5xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %[[B:.*]] = tg.slice %{{.*}} {dim = 1 : i64, start = 3 : i64} : (tensor<2x5xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:    %[[C:.*]] = tg.concat %[[B]], %[[A]] {dim = 1 : i64} : (tensor<2x2xf32>, tensor<2x3xf32>) -> tensor<2x5xf32>
func.func @aten.split$one_slice_per_result(%x: tensor<2x5xf32>) -> (tensor<2x3xf32>, tensor<2x2xf32>, tensor<2x5xf32>) {
  %0:2 = aten.split.Tensor %x {split_size = 3 : i64, dim = 1 : i64} : (tensor<2x5xf32>) -> (tensor<2x3xf32>, tensor<2x2xf32>)
  %1 = aten.cat %0#1, %0#0 {dim = -1 : i64} : (tensor<2x2xf32>, tensor<2x3xf32>) -> tensor<2x5xf32>
  func.return %0#0, %0#1, %1 : tensor<2x3xf32>, tensor<2x2xf32>, tensor<2x5xf32>
}

// -----

// CHECK-LABEL: func.func @aten.where$scalar_branches
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3xf32>, %[[C:.*]]: tensor<2x3xi1>)
// CHECK-NEXT:    %[[V:.*]] = tg.constant dense<-1.000000e+00> : tensor<f32>
// CHECK-NEXT:    tg.select %[[C]], %[[X]], %[[V]] : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
func.func @aten.where$scalar_branches(%x: tensor<2x3xf32>, %c: tensor<2x3xi1>) -> tensor<2x3xf32> {
  %0 = aten.where.ScalarOther %c, %x {other = -1.0 : f64} : (tensor<2x3xi1>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.masked_fill$select
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3xf32>, %[[M:.*]]: tensor<3xi1>, %[[C:.*]]: tensor<2x3xi1>)
// CHECK-NEXT:    %[[V:.*]] = tg.constant dense<"0x000080FF"> : tensor<f32>
// CHECK-NEXT:    %[[A:.*]] = tg.select %[[M]], %[[V]], %[[X]] : (tensor<3xi1>, tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    tg.select %[[C]], %[[X]], %[[A]] : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
func.func @aten.masked_fill$select(%x: tensor<2x3xf32>, %m: tensor<3xi1>, %c: tensor<2x3xi1>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = aten.masked_fill.Scalar %x, %m {value = 0xFFF0000000000000 : f64} : (tensor<2x3xf32>, tensor<3xi1>) -> tensor<2x3xf32>
  %1 = aten.where.self %c, %x, %0 : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0, %1 : tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.expand$broadcast_and_identity
// CHECK-SAME:    (%[[X:.*]]: tensor<1x3xf32>, %[[IDS:.*]]: tensor<1x3xi64>, %[[W:.*]]: tensor<10x4xf32>)
// CHECK-NEXT:    %[[A:.*]] = tg.broadcast %[[X]] : (tensor<1x3xf32>) -> tensor<4x1x3xf32>
// CHECK-NEXT:    %[[B:.*]] = tg.reshape %[[X]] : (tensor<1x3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %[[C:.*]] = tg.embedding %[[W]], %[[IDS]] : (tensor<10x4xf32>, tensor<1x3xi64>) -> tensor<1x3x4xf32>
// CHECK-NEXT:    func.return %[[A]], %[[X]], %[[B]], %[[C]]
func.func @aten.expand$broadcast_and_identity(%x: tensor<1x3xf32>, %ids: tensor<1x3xi64>, %w: tensor<10x4xf32>) -> (tensor<4x1x3xf32>, tensor<1x3xf32>, tensor<3xf32>, tensor<1x3x4xf32>) {
  %0 = aten.expand %x {size = array<i64: 4, -1, 3>} : (tensor<1x3xf32>) -> tensor<4x1x3xf32>
  %1 = aten.expand %x {size = array<i64: 1, 3>} : (tensor<1x3xf32>) -> tensor<1x3xf32>
  %2 = aten.squeeze.dim %x {dim = 0 : i64} : (tensor<1x3xf32>) -> tensor<3xf32>
  %3 = aten.embedding %w, %ids : (tensor<10x4xf32>, tensor<1x3xi64>) -> tensor<1x3x4xf32>
  func.return %0, %1, %2, %3 : tensor<4x1x3xf32>, tensor<1x3xf32>, tensor<3xf32>, tensor<1x3x4xf32>
}

// -----

// CHECK-LABEL: func.func @aten.to$cast_or_identity
// CHECK-SAME:    (%[[I:.*]]: tensor<3xi64>, %[[X:.*]]: tensor<3xf32>)
// CHECK-NEXT:    %[[C:.*]] = tg.cast %[[I]] : (tensor<3xi64>) -> tensor<3xf32>
// CHECK-NEXT:    func.return %[[C]], %[[X]], %[[X]]
func.func @aten.to$cast_or_identity(%i: tensor<3xi64>, %x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0 = aten.to.dtype %i {dtype = "float32"} : (tensor<3xi64>) -> tensor<3xf32>
  %1 = aten.to.dtype_layout %x {dtype = "float32"} : (tensor<3xf32>) -> tensor<3xf32>
  %2 = aten.type_as %x, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %0, %1, %2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.cos$rope_tables
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT:    %[[C:.*]] = tg.cos %[[X]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[S:.*]] = tg.sin %[[X]] : tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[C]], %[[S]]
func.func @aten.cos$rope_tables(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = aten.cos %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = aten.sin %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @aten.to.device$cast_or_identity
// CHECK-SAME:    (%[[I:.*]]: tensor<3xi64>, %[[X:.*]]: tensor<3xf32>)
// CHECK-NEXT:    %[[C:.*]] = tg.cast %[[I]] : (tensor<3xi64>) -> tensor<3xf32>
// CHECK-NEXT:    func.return %[[C]], %[[X]]
func.func @aten.to.device$cast_or_identity(%i: tensor<3xi64>, %x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = aten.to.device %i {dtype = "float32"} : (tensor<3xi64>) -> tensor<3xf32>
  %1 = aten.to.device %x {dtype = "float32"} : (tensor<3xf32>) -> tensor<3xf32>
  func.return %0, %1 : tensor<3xf32>, tensor<3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.zeros_like$splat_constant_whatever_the_input
// CHECK-NEXT:    %[[Z:.*]] = tg.constant dense<0.000000e+00> : tensor<2x3xf32>
// CHECK-NEXT:    func.return %[[Z]]
func.func @aten.zeros_like$splat_constant_whatever_the_input(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = aten.zeros_like %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// Comparisons and boolean logic on run-time data: one-op scalar bodies, both sides promoted first.
// CHECK-LABEL: func.func @aten.ne.Scalar$padding_mask_and_positions
// CHECK-SAME:    (%[[IDS:.*]]: tensor<2x7xi64>, %[[X:.*]]: tensor<2x7xf32>)
// CHECK:         %[[NE:.*]] = tg.fused_elementwise %[[IDS]] : (tensor<2x7xi64>) -> tensor<2x7xi1> {
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: i64):
// CHECK-NEXT:      %[[C:.*]] = arith.constant 1 : i64
// CHECK-NEXT:      %[[R:.*]] = arith.cmpi ne, %[[A]], %[[C]] : i64
// CHECK-NEXT:      tg.yield %[[R]] : i1
// CHECK:         %[[GT:.*]] = tg.fused_elementwise %[[IDS]] : (tensor<2x7xi64>) -> tensor<2x7xi1> {
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: i64):
// CHECK-NEXT:      %[[C:.*]] = arith.constant 4 : i64
// CHECK-NEXT:      arith.cmpi sgt, %[[A]], %[[C]] : i64
// CHECK:         %[[XF:.*]] = tg.cast %[[IDS]] : (tensor<2x7xi64>) -> tensor<2x7xf32>
// CHECK:         %[[LT:.*]] = tg.fused_elementwise %[[XF]], %[[X]] : (tensor<2x7xf32>, tensor<2x7xf32>) -> tensor<2x7xi1> {
// CHECK:           arith.cmpf olt
// CHECK:         %[[AND:.*]] = tg.fused_elementwise %[[NE]], %[[GT]] : (tensor<2x7xi1>, tensor<2x7xi1>) -> tensor<2x7xi1> {
// CHECK:           arith.andi
// CHECK:         %[[NOT:.*]] = tg.fused_elementwise %[[LT]] : (tensor<2x7xi1>) -> tensor<2x7xi1> {
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: i1):
// CHECK-NEXT:      %[[T:.*]] = arith.constant true
// CHECK-NEXT:      arith.xori %[[A]], %[[T]] : i1
// CHECK:         %[[I:.*]] = tg.cast %[[AND]] : (tensor<2x7xi1>) -> tensor<2x7xi64>
// CHECK:         %[[POS:.*]] = tg.cumsum %[[I]] {dim = 1 : i64} : tensor<2x7xi64>
// CHECK-NOT:     aten.
func.func @aten.ne.Scalar$padding_mask_and_positions(%ids: tensor<2x7xi64>, %x: tensor<2x7xf32>) -> (tensor<2x7xi64>, tensor<2x7xi1>) {
  %ne = aten.ne.Scalar %ids {other = 1 : i64} : (tensor<2x7xi64>) -> tensor<2x7xi1>
  %gt = aten.gt.Scalar %ids {other = 4 : i64} : (tensor<2x7xi64>) -> tensor<2x7xi1>
  %lt = aten.lt.Tensor %ids, %x : (tensor<2x7xi64>, tensor<2x7xf32>) -> tensor<2x7xi1>
  %and = aten.__and__.Tensor %ne, %gt : (tensor<2x7xi1>, tensor<2x7xi1>) -> tensor<2x7xi1>
  %not = aten.logical_not %lt : (tensor<2x7xi1>) -> tensor<2x7xi1>
  %pos = aten.cumsum %and {dim = -1 : i64} : (tensor<2x7xi1>) -> tensor<2x7xi64>
  func.return %pos, %not : tensor<2x7xi64>, tensor<2x7xi1>
}

// -----

// CHECK-LABEL: func.func @aten.conv2d$bias
// CHECK:         %[[C:.*]] = tg.im2col %{{.*}} {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x8x5x5xf32>) -> tensor<1x8x3x3x5x5xf32>
// CHECK:         %[[W2:.*]] = tg.reshape %{{.*}} : (tensor<16x8x3x3xf32>) -> tensor<16x72xf32>
// CHECK:         %[[C2:.*]] = tg.reshape %[[C]] : (tensor<1x8x3x3x5x5xf32>) -> tensor<1x72x25xf32>
// CHECK:         %[[M:.*]] = tg.matmul %[[W2]], %[[C2]] : (tensor<16x72xf32>, tensor<1x72x25xf32>) -> tensor<1x16x25xf32>
// CHECK:         %[[B2:.*]] = tg.reshape %{{.*}} : (tensor<16xf32>) -> tensor<16x1xf32>
// CHECK:         %[[S:.*]] = tg.add %[[M]], %[[B2]] : (tensor<1x16x25xf32>, tensor<16x1xf32>) -> tensor<1x16x25xf32>
// CHECK:         tg.reshape %[[S]] : (tensor<1x16x25xf32>) -> tensor<1x16x5x5xf32>
// CHECK-NOT:     aten.
func.func @aten.conv2d$bias(%x: tensor<1x8x5x5xf32>) -> tensor<1x16x5x5xf32> {
  %w = tg.weight "conv.weight" : tensor<16x8x3x3xf32>
  %b = tg.weight "conv.bias" : tensor<16xf32>
  %y = aten.conv2d %x, %w, %b {padding = array<i64: 1, 1>} : (tensor<1x8x5x5xf32>, tensor<16x8x3x3xf32>, tensor<16xf32>) -> tensor<1x16x5x5xf32>
  func.return %y : tensor<1x16x5x5xf32>
}

// -----

// A 1x1 convolution needs no im2col; a depthwise one is a GEMM batched over its 8 groups.
// CHECK-LABEL: func.func @aten.conv2d$pointwise_depthwise
// CHECK-NOT:     tg.im2col
// CHECK:         %[[X2:.*]] = tg.reshape %{{.*}} : (tensor<2x8x6x6xf32>) -> tensor<2x8x36xf32>
// CHECK:         tg.matmul %{{.*}}, %[[X2]] : (tensor<8x8xf32>, tensor<2x8x36xf32>) -> tensor<2x8x36xf32>
// CHECK:         tg.im2col
// CHECK:         tg.matmul %{{.*}}, %{{.*}} : (tensor<8x1x9xf32>, tensor<2x8x9x36xf32>) -> tensor<2x8x1x36xf32>
// CHECK-NOT:     aten.
func.func @aten.conv2d$pointwise_depthwise(%x: tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32> {
  %w1 = tg.weight "pw.weight" : tensor<8x8x1x1xf32>
  %w2 = tg.weight "dw.weight" : tensor<8x1x3x3xf32>
  %y = aten.conv2d %x, %w1 : (tensor<2x8x6x6xf32>, tensor<8x8x1x1xf32>) -> tensor<2x8x6x6xf32>
  %z = aten.conv2d %y, %w2 {padding = array<i64: 1, 1>, groups = 8 : i64} : (tensor<2x8x6x6xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x6x6xf32>
  func.return %z : tensor<2x8x6x6xf32>
}

// -----

// CHECK-LABEL: func.func @aten.conv1d$strided
// CHECK:         tg.im2col %{{.*}} {kernel = array<i64: 1, 5>, stride = array<i64: 1, 2>, padding = array<i64: 0, 2>, dilation = array<i64: 1, 1>} : (tensor<2x4x1x20xf32>) -> tensor<2x4x1x5x1x10xf32>
// CHECK:         tg.matmul %{{.*}}, %{{.*}} : (tensor<8x20xf32>, tensor<2x20x10xf32>) -> tensor<2x8x10xf32>
// CHECK-NOT:     aten.
func.func @aten.conv1d$strided(%x: tensor<2x4x20xf32>) -> tensor<2x8x10xf32> {
  %w = tg.weight "conv.weight" : tensor<8x4x5xf32>
  %y = aten.conv1d %x, %w {stride = array<i64: 2>, padding = array<i64: 2>} : (tensor<2x4x20xf32>, tensor<8x4x5xf32>) -> tensor<2x8x10xf32>
  func.return %y : tensor<2x8x10xf32>
}

// -----

// CHECK-LABEL: func.func @aten.max_pool2d$ceil
// CHECK:         %[[C:.*]] = tg.im2col %{{.*}} {{{.*}}pad_value = 0xff800000 : f32} : (tensor<1x2x8x7xf32>) -> tensor<1x2x3x3x5x4xf32>
// CHECK:         %[[R:.*]] = tg.reshape %[[C]] : (tensor<1x2x3x3x5x4xf32>) -> tensor<1x2x9x5x4xf32>
// CHECK:         tg.amax %[[R]] {dims = array<i64: 2>} : (tensor<1x2x9x5x4xf32>) -> tensor<1x2x5x4xf32>
func.func @aten.max_pool2d$ceil(%x: tensor<1x2x8x7xf32>) -> tensor<1x2x5x4xf32> {
  %y = aten.max_pool2d %x {kernel_size = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, ceil_mode = true} : (tensor<1x2x8x7xf32>) -> tensor<1x2x5x4xf32>
  func.return %y : tensor<1x2x5x4xf32>
}

// -----

// Windows that cover padding divide by the taps inside the input.
// CHECK-LABEL: func.func @aten.avg_pool2d$exclude_pad
// CHECK:         %[[S:.*]] = tg.sum %{{.*}} {dims = array<i64: 2>} : (tensor<1x2x9x2x2xf32>) -> tensor<1x2x2x2xf32>
// CHECK:         %[[D:.*]] = tg.constant dense<{{\[\[}}4.000000e+00, 6.000000e+00], [6.000000e+00, 9.000000e+00]]> : tensor<2x2xf32>
// CHECK:         tg.div %[[S]], %[[D]]
func.func @aten.avg_pool2d$exclude_pad(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32> {
  %y = aten.avg_pool2d %x {kernel_size = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, count_include_pad = false} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>
  func.return %y : tensor<1x2x2x2xf32>
}

// -----

// CHECK-LABEL: func.func @aten.adaptive_avg_pool2d$global
// CHECK:         tg.mean %{{.*}} {dims = array<i64: 2, 3>, keepdim = true} : (tensor<1x8x7x7xf32>) -> tensor<1x8x1x1xf32>
func.func @aten.adaptive_avg_pool2d$global(%x: tensor<1x8x7x7xf32>) -> tensor<1x8x1x1xf32> {
  %y = aten.adaptive_avg_pool2d %x {output_size = array<i64: 1, 1>} : (tensor<1x8x7x7xf32>) -> tensor<1x8x1x1xf32>
  func.return %y : tensor<1x8x1x1xf32>
}

// -----

// CHECK-LABEL: func.func @aten.group_norm$affine
// CHECK:         %[[G:.*]] = tg.reshape %{{.*}} : (tensor<1x4x3x3xf32>) -> tensor<1x2x18xf32>
// CHECK:         %[[N:.*]] = tg.layer_norm %[[G]], %{{.*}}, %{{.*}} : (tensor<1x2x18xf32>, tensor<18xf32>, tensor<18xf32>) -> tensor<1x2x18xf32>
// CHECK:         %[[C:.*]] = tg.reshape %[[N]] : (tensor<1x2x18xf32>) -> tensor<1x4x9xf32>
// CHECK:         tg.mul %[[C]], %{{.*}} : (tensor<1x4x9xf32>, tensor<4x1xf32>) -> tensor<1x4x9xf32>
// CHECK:         tg.add %{{.*}}, %{{.*}} : (tensor<1x4x9xf32>, tensor<4x1xf32>) -> tensor<1x4x9xf32>
func.func @aten.group_norm$affine(%x: tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32> {
  %w = tg.weight "gn.weight" : tensor<4xf32>
  %b = tg.weight "gn.bias" : tensor<4xf32>
  %y = aten.group_norm %x weight %w : tensor<4xf32> bias %b : tensor<4xf32> {num_groups = 2 : i64} : tensor<1x4x3x3xf32> -> tensor<1x4x3x3xf32>
  func.return %y : tensor<1x4x3x3xf32>
}

// -----

// A batch norm not folded into a convolution (the importer folds those): x * s + (bias - mean * s).
// CHECK-LABEL: func.func @aten.batch_norm$eval
// CHECK:         %[[R:.*]] = tg.rsqrt %{{.*}} : tensor<4x1xf32>
// CHECK:         %[[S:.*]] = tg.mul %{{.*}}, %[[R]] : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
// CHECK:         %[[MS:.*]] = tg.mul %{{.*}}, %[[S]]
// CHECK:         %[[T:.*]] = tg.sub %{{.*}}, %[[MS]]
// CHECK:         %[[XS:.*]] = tg.mul %{{.*}}, %[[S]] : (tensor<2x4x3xf32>, tensor<4x1xf32>) -> tensor<2x4x3xf32>
// CHECK:         tg.add %[[XS]], %[[T]] : (tensor<2x4x3xf32>, tensor<4x1xf32>) -> tensor<2x4x3xf32>
// CHECK-NOT:     aten.
func.func @aten.batch_norm$eval(%x: tensor<2x4x3xf32>) -> tensor<2x4x3xf32> {
  %w = tg.weight "bn.weight" : tensor<4xf32>
  %b = tg.weight "bn.bias" : tensor<4xf32>
  %m = tg.weight "bn.running_mean" : tensor<4xf32>
  %v = tg.weight "bn.running_var" : tensor<4xf32>
  %y = aten.batch_norm %x weight %w : tensor<4xf32> bias %b : tensor<4xf32> running_mean %m : tensor<4xf32> running_var %v : tensor<4xf32> {training = false, momentum = 1.000000e-01 : f64, eps = 1.000000e-05 : f64, cudnn_enabled = false} : tensor<2x4x3xf32> -> tensor<2x4x3xf32>
  func.return %y : tensor<2x4x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.upsample_nearest2d$whole_factor
// CHECK:         %[[R:.*]] = tg.reshape %{{.*}} : (tensor<1x3x4x4xf32>) -> tensor<1x3x4x1x4x1xf32>
// CHECK:         %[[B:.*]] = tg.broadcast %[[R]] : (tensor<1x3x4x1x4x1xf32>) -> tensor<1x3x4x2x4x2xf32>
// CHECK:         tg.reshape %[[B]] : (tensor<1x3x4x2x4x2xf32>) -> tensor<1x3x8x8xf32>
func.func @aten.upsample_nearest2d$whole_factor(%x: tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32> {
  %y = aten.upsample_nearest2d.vec %x {scale_factors = array<f64: 2.0, 2.0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
  func.return %y : tensor<1x3x8x8xf32>
}

// -----

// CHECK-LABEL: func.func @aten.upsample_bilinear2d$align_corners
// CHECK:         %[[RH:.*]] = tg.constant dense<{{\[\[}}1.000000e+00, 0.000000e+00], [5.000000e-01, 5.000000e-01], [0.000000e+00, 1.000000e+00]]> : tensor<3x2xf32>
// CHECK:         %[[RWT:.*]] = tg.constant dense<{{\[\[}}1.000000e+00, 5.000000e-01, 0.000000e+00], [0.000000e+00, 5.000000e-01, 1.000000e+00]]> : tensor<2x3xf32>
// CHECK:         %[[T:.*]] = tg.matmul %{{.*}}, %[[RWT]] : (tensor<1x1x2x2xf32>, tensor<2x3xf32>) -> tensor<1x1x2x3xf32>
// CHECK:         tg.matmul %[[RH]], %[[T]] : (tensor<3x2xf32>, tensor<1x1x2x3xf32>) -> tensor<1x1x3x3xf32>
func.func @aten.upsample_bilinear2d$align_corners(%x: tensor<1x1x2x2xf32>) -> tensor<1x1x3x3xf32> {
  %y = aten.upsample_bilinear2d.vec %x {output_size = array<i64: 3, 3>, align_corners = true} : (tensor<1x1x2x2xf32>) -> tensor<1x1x3x3xf32>
  func.return %y : tensor<1x1x3x3xf32>
}

// -----

// Core ATen's elementwise functions without a named tg op: one-op scalar bodies
// (lowering/aten_to_tensor/math_functions.py)
// CHECK-LABEL: func.func @aten.log1p$scalar_body
// CHECK:         %{{.*}} = tg.fused_elementwise %{{.*}} : (tensor<2x3xf32>) -> tensor<2x3xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: f32):
// CHECK-NEXT:      %[[L:.*]] = math.log1p %[[A]] : f32
// CHECK-NEXT:      tg.yield %[[L]] : f32
// CHECK:         tg.fused_elementwise
// CHECK:           arith.cmpf uno
// CHECK:         tg.fused_elementwise
// CHECK:           math.expm1
// CHECK:           arith.select
// CHECK:         tg.fused_elementwise
// CHECK:           math.atan2
// CHECK:         tg.fused_elementwise
// CHECK:           arith.divf
// CHECK-NEXT:      math.trunc
// CHECK-NOT:     aten.
func.func @aten.log1p$scalar_body(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %a = aten.log1p %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = aten.isnan %x : (tensor<2x3xf32>) -> tensor<2x3xi1>
  %c = aten.elu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %d = aten.atan2 %y, %x : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %e = aten.div.Tensor_mode %x, %y {rounding_mode = "trunc"} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return %a, %b, %c, %d, %e : tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// An integer division with a rounding mode needs a constant divisor without zeros
// CHECK-LABEL: func.func @aten.div.Tensor_mode$integer_constant_divisor
// CHECK:         arith.divsi
func.func @aten.div.Tensor_mode$integer_constant_divisor(%x: tensor<4xi64>) -> tensor<4xi64> {
  %k = tg.constant dense<3> : tensor<i64>
  %q = aten.div.Tensor_mode %x, %k {rounding_mode = "trunc"} : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  func.return %q : tensor<4xi64>
}

// -----

// max.dim is the values (tg.amax) and the first position of the largest (tg.arg_reduce);
// var is mean, squared deviations, their sum over N - correction
// CHECK-LABEL: func.func @aten.max.dim$values_and_indices
// CHECK:         %{{.*}} = tg.arg_reduce %{{.*}} {kind = "max", dim = 1 : i64} : (tensor<4x7xf32>) -> tensor<4xi64>
// CHECK:         %{{.*}} = tg.amax %{{.*}} {dims = array<i64: 1>} : (tensor<4x7xf32>) -> tensor<4xf32>
// CHECK:         tg.mean %{{.*}} {dims = array<i64: 1>, keepdim = true}
// CHECK:         tg.sub
// CHECK:         tg.mul
// CHECK:         tg.sum
// CHECK:         tg.constant dense<6.000000e+00> : tensor<f32>
// CHECK:         tg.div
// CHECK-NOT:     aten.
func.func @aten.max.dim$values_and_indices(%x: tensor<4x7xf32>) -> (tensor<4xf32>, tensor<4xi64>, tensor<4xf32>) {
  %v, %i = aten.max.dim %x {dim = 1 : i64} : (tensor<4x7xf32>) -> (tensor<4xf32>, tensor<4xi64>)
  %s = aten.var.correction %x {dim = array<i64: -1>, correction = 1 : i64} : (tensor<4x7xf32>) -> tensor<4xf32>
  func.return %v, %i, %s : tensor<4xf32>, tensor<4xi64>, tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @aten.diff$run_time_twice_with_prepend
// CHECK:         %[[X:.*]] = tg.concat %p, %x {dim = 1 : i64} : (tensor<2x1xf32>, tensor<2x4xf32>) -> tensor<2x5xf32>
// CHECK-NEXT:    %[[HI:.*]] = tg.slice %[[X]] {dim = 1 : i64, start = 1 : i64} : (tensor<2x5xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %[[LO:.*]] = tg.slice %[[X]] {dim = 1 : i64, start = 0 : i64} : (tensor<2x5xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %[[D:.*]] = tg.sub %[[HI]], %[[LO]] : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK:         tg.sub %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
func.func @aten.diff$run_time_twice_with_prepend(%x: tensor<2x4xf32>, %p: tensor<2x1xf32>) -> tensor<2x3xf32> {
  %d = aten.diff %x prepend %p : tensor<2x1xf32> {n = 2 : i64, dim = 1 : i64} : tensor<2x4xf32> -> tensor<2x3xf32>
  func.return %d : tensor<2x3xf32>
}
