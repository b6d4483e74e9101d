// RUN: tg-opt %s -p constant-fold | filecheck %s
// RUN: tg-opt %s -p "constant-fold{max_elements=4}" | filecheck %s --check-prefix=SMALL

// CHECK-LABEL: func.func @fold$elementwise_chain
// SMALL-LABEL: func.func @fold$elementwise_chain
func.func @fold$elementwise_chain() -> tensor<2xf32> {
  // CHECK-NEXT: %[[C:.*]] = tg.constant dense<[7.000000e+00, 1.600000e+01]> : tensor<2xf32>
  // CHECK-NEXT: func.return %[[C]]
  // SMALL: %[[C:.*]] = tg.constant dense<[7.000000e+00, 1.600000e+01]> : tensor<2xf32>
  // SMALL-NEXT: func.return %[[C]]
  %a = tg.constant dense<[2.0, 5.0]> : tensor<2xf32>
  %b = tg.constant dense<3.0> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %m = tg.mul %a, %b : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  %s = tg.add %m, %one : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  func.return %s : tensor<2xf32>
}

// CHECK-LABEL: func.func @fold$matmul_transpose_relu
func.func @fold$matmul_transpose_relu() -> tensor<2x2xf32> {
  // CHECK-NEXT: %[[C:.*]] = tg.constant dense<{{\[}}[0.000000e+00, 1.000000e+00], [0.000000e+00, 3.000000e+00]]> : tensor<2x2xf32>
  // CHECK-NEXT: func.return %[[C]]
  %a = tg.constant dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32>
  %b = tg.constant dense<[[-2.0, -4.0], [1.0, 3.0]]> : tensor<2x2xf32>
  %t = tg.transpose %b {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = tg.matmul %a, %t : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %r = tg.relu %y : tensor<2x2xf32>
  func.return %r : tensor<2x2xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_operand_is_a_weight
func.func @expect_no_fold_as_operand_is_a_weight() -> tensor<2xf32> {
  // CHECK: %[[W:.*]] = tg.weight "w" : tensor<2xf32>
  // CHECK: %[[M:.*]] = tg.mul %[[W]], %{{.*}}
  // CHECK: func.return %[[M]]
  %w = tg.weight "w" : tensor<2xf32>
  %b = tg.constant dense<3.0> : tensor<f32>
  %m = tg.mul %w, %b : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  func.return %m : tensor<2xf32>
}

// CHECK-LABEL: func.func @expect_no_fold_as_operand_is_an_argument
func.func @expect_no_fold_as_operand_is_an_argument(%x: tensor<2xf32>) -> tensor<2xf32> {
  // CHECK: %[[M:.*]] = tg.mul %x, %{{.*}}
  // CHECK: func.return %[[M]]
  %b = tg.constant dense<3.0> : tensor<f32>
  %m = tg.mul %x, %b : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  func.return %m : tensor<2xf32>
}

// 8 elements: folded by default, kept under max_elements=4.
// CHECK-LABEL: func.func @expect_no_fold_as_result_exceeds_max_elements
// SMALL-LABEL: func.func @expect_no_fold_as_result_exceeds_max_elements
func.func @expect_no_fold_as_result_exceeds_max_elements() -> tensor<2x4xf32> {
  // CHECK-NEXT: %[[C:.*]] = tg.constant dense<6.000000e+00> : tensor<2x4xf32>
  // CHECK-NEXT: func.return %[[C]]
  // SMALL: %[[M:.*]] = tg.mul
  // SMALL-NEXT: func.return %[[M]]
  %a = tg.constant dense<2.0> : tensor<2x4xf32>
  %b = tg.constant dense<3.0> : tensor<f32>
  %m = tg.mul %a, %b : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  func.return %m : tensor<2x4xf32>
}

// i1 and i64 constants fold too (a mask built from comparisons, here a select and a cast).
// CHECK-LABEL: func.func @fold$bool_mask_select_and_cast
func.func @fold$bool_mask_select_and_cast() -> (tensor<2x2xf32>, tensor<2xi64>) {
  // CHECK-NEXT: %[[M:.*]] = tg.constant dense<{{\[}}[0.000000e+00, -1.000000e+09], [0.000000e+00, 0.000000e+00]]> : tensor<2x2xf32>
  // CHECK-NEXT: %[[I:.*]] = tg.constant dense<[1, 0]> : tensor<2xi64>
  // CHECK-NEXT: func.return %[[M]], %[[I]]
  %keep = tg.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %zero = tg.constant dense<0.0> : tensor<f32>
  %fill = tg.constant dense<-1.0e9> : tensor<f32>
  %m = tg.select %keep, %zero, %fill : (tensor<2x2xi1>, tensor<f32>, tensor<f32>) -> tensor<2x2xf32>
  %b = tg.constant dense<[true, false]> : tensor<2xi1>
  %i = tg.cast %b : (tensor<2xi1>) -> tensor<2xi64>
  func.return %m, %i : tensor<2x2xf32>, tensor<2xi64>
}

// Ops without operands fold through the aten evaluator (aten.arange here).
// CHECK-LABEL: func.func @fold$aten_op_without_operands
func.func @fold$aten_op_without_operands() -> tensor<4xi64> {
  // CHECK-NEXT: %[[R:.*]] = tg.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  // CHECK-NEXT: func.return %[[R]]
  %r = aten.arange {end = 4.0 : f64, dtype = "int64"} : tensor<4xi64>
  func.return %r : tensor<4xi64>
}

// A bf16 value (no constant can hold one) is not folded alone: the op reading it folds with it,
// the aten ops computing it evaluated in torch on the way (bf16 arithmetic: 0.1 rounds to
// 0.10009765625, its square to 0.0100097656, not float32's 0.01), and they are erased.
// CHECK-LABEL: func.func @fold$through_a_bf16_value
func.func @fold$through_a_bf16_value() -> tensor<2xf32> {
  // CHECK-NEXT: %[[R:.*]] = tg.constant dense<[0.0100097656, 9.000000e+00]> : tensor<2xf32>
  // CHECK-NEXT: func.return %[[R]]
  %c = tg.constant dense<[0.1, 3.0]> : tensor<2xf32>
  %b = aten.to.dtype %c {dtype = "bfloat16"} : (tensor<2xf32>) -> tensor<2xbf16>
  %m = aten.mul.Tensor %b, %b : (tensor<2xbf16>, tensor<2xbf16>) -> tensor<2xbf16>
  %f = aten.to.dtype %m {dtype = "float32"} : (tensor<2xbf16>) -> tensor<2xf32>
  func.return %f : tensor<2xf32>
}

// A bf16 value computed from a function argument stays (the op reading it too).
// CHECK-LABEL: func.func @expect_no_fold$bf16_from_an_argument
func.func @expect_no_fold$bf16_from_an_argument(%x: tensor<2xf32>) -> tensor<2xf32> {
  // CHECK-NEXT: aten.to.dtype %x
  // CHECK-NEXT: aten.to.dtype
  %b = aten.to.dtype %x {dtype = "bfloat16"} : (tensor<2xf32>) -> tensor<2xbf16>
  %f = aten.to.dtype %b {dtype = "float32"} : (tensor<2xbf16>) -> tensor<2xf32>
  func.return %f : tensor<2xf32>
}
