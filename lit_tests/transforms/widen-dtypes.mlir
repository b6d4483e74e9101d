// RUN: tg-opt %s -p widen-dtypes | filecheck %s

// A bfloat16 op computes in float32 between a widening and a rounding cast (eager does so).
// CHECK-LABEL: func.func @widen$bf16_gelu
func.func @widen$bf16_gelu(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  // CHECK-NEXT: %[[W:.*]] = tg.cast %x : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[G:.*]] = aten.gelu %[[W]] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[Y:.*]] = tg.cast %[[G]] : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  // CHECK-NEXT: func.return %[[Y]]
  %y = aten.gelu %x : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  func.return %y : tensor<4x8xbf16>
}

// A symbolic dim keeps its size expression through the widening and the rounding.
// CHECK-LABEL: func.func @widen$bf16_symbolic_batch
func.func @widen$bf16_symbolic_batch(%x: tensor<?x8xbf16, ["batch"]>) -> tensor<?x8xbf16, ["batch"]> {
  // CHECK-NEXT: %[[W:.*]] = tg.cast %x : (tensor<?x8xbf16, ["batch"]>) -> tensor<?x8xf32, ["batch"]>
  // CHECK-NEXT: %[[G:.*]] = aten.gelu %[[W]] : (tensor<?x8xf32, ["batch"]>) -> tensor<?x8xf32, ["batch"]>
  // CHECK-NEXT: %[[Y:.*]] = tg.cast %[[G]] : (tensor<?x8xf32, ["batch"]>) -> tensor<?x8xbf16, ["batch"]>
  %y = aten.gelu %x : (tensor<?x8xbf16, ["batch"]>) -> tensor<?x8xbf16, ["batch"]>
  func.return %y : tensor<?x8xbf16, ["batch"]>
}

// A result that is float32 already (sum with dtype=float32) needs no cast back.
// CHECK-LABEL: func.func @widen$f16_sum_to_f32
func.func @widen$f16_sum_to_f32(%x: tensor<4x8xf16>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[W:.*]] = tg.cast %x : (tensor<4x8xf16>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[Y:.*]] = aten.sum.dim_IntList %[[W]] {dim = array<i64: 1>, dtype = "float32"} : (tensor<4x8xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[Y]]
  %y = aten.sum.dim_IntList %x {dim = array<i64: 1>, dtype = "float32"} : (tensor<4x8xf16>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}

// A dtype argument naming the narrow dtype names the compute dtype; the result is rounded.
// CHECK-LABEL: func.func @widen$full_bf16
func.func @widen$full_bf16() -> tensor<2xbf16> {
  // CHECK-NEXT: %[[F:.*]] = aten.full {size = array<i64: 2>, fill_value = 1.000000e-01 : f64, dtype = "float32"} : tensor<2xf32>
  // CHECK-NEXT: %[[Y:.*]] = tg.cast %[[F]] : (tensor<2xf32>) -> tensor<2xbf16>
  %y = aten.full {size = array<i64: 2>, fill_value = 0.1 : f64, dtype = "bfloat16"} : tensor<2xbf16>
  func.return %y : tensor<2xbf16>
}

// uint8 computes in int16 and wraps back to 8 bits (modular arithmetic either way).
// CHECK-LABEL: func.func @widen$uint8_add
func.func @widen$uint8_add(%x: tensor<3xui8>, %y: tensor<3xui8>) -> tensor<3xui8> {
  // CHECK-NEXT: %[[A:.*]] = tg.cast %x : (tensor<3xui8>) -> tensor<3xi16>
  // CHECK-NEXT: %[[B:.*]] = tg.cast %y : (tensor<3xui8>) -> tensor<3xi16>
  // CHECK-NEXT: %[[S:.*]] = aten.add.Tensor %[[A]], %[[B]] : (tensor<3xi16>, tensor<3xi16>) -> tensor<3xi16>
  // CHECK-NEXT: %[[Z:.*]] = tg.cast %[[S]] : (tensor<3xi16>) -> tensor<3xui8>
  %z = aten.add.Tensor %x, %y : (tensor<3xui8>, tensor<3xui8>) -> tensor<3xui8>
  func.return %z : tensor<3xui8>
}

// An integer result from a narrow operand: only the operand is widened.
// CHECK-LABEL: func.func @widen$argmax_bf16
func.func @widen$argmax_bf16(%x: tensor<4x8xbf16>) -> tensor<4xi64> {
  // CHECK-NEXT: %[[W:.*]] = tg.cast %x : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  // CHECK-NEXT: aten.argmax %[[W]] {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4xi64>
  %y = aten.argmax %x {dim = 1 : i64} : (tensor<4x8xbf16>) -> tensor<4xi64>
  func.return %y : tensor<4xi64>
}

// Ops that only move values keep the narrow dtype.
// CHECK-LABEL: func.func @expect_no_widening$moves
func.func @expect_no_widening$moves(%x: tensor<4x8xbf16>) -> tensor<8x4xbf16> {
  // CHECK-NEXT: aten.permute %x {dims = array<i64: 1, 0>} : (tensor<4x8xbf16>) -> tensor<8x4xbf16>
  %y = aten.permute %x {dims = array<i64: 1, 0>} : (tensor<4x8xbf16>) -> tensor<8x4xbf16>
  func.return %y : tensor<8x4xbf16>
}

// Nothing narrow: nothing changes.
// CHECK-LABEL: func.func @expect_no_widening$float32
func.func @expect_no_widening$float32(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: aten.gelu %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = aten.gelu %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
