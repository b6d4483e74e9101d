// RUN: tg-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Every verifier message of the buf dialect, one case each.

func.func @view_unaligned_offset(%arena: memref<256xi8>) {
  %v = buf.view %arena[32] : memref<256xi8> -> memref<4xf32>
  func.return
}
// CHECK: buf.view: offset 32 is not a non-negative multiple of 64

// -----

func.func @view_negative_offset(%arena: memref<256xi8>) {
  %v = buf.view %arena[-64] : memref<256xi8> -> memref<4xf32>
  func.return
}
// CHECK: buf.view: offset -64 is not a non-negative multiple of 64

// -----

func.func @view_overflows_arena(%arena: memref<256xi8>) {
  %v = buf.view %arena[192] : memref<256xi8> -> memref<32xf32>
  func.return
}
// CHECK: buf.view: bytes [192, 320) overflow the arena of 256 bytes

// -----

func.func @view_of_non_byte_arena(%arena: memref<64xf32>) {
  %v = "buf.view"(%arena) <{offset = 0 : i64}> : (memref<64xf32>) -> memref<4xf32>
  func.return
}
// CHECK: operand 'arena' at position 0 does not verify:
// CHECK-NEXT: Expected attribute i8 but got f32

// -----

func.func @arena_of_floats() {
  %a = "buf.arena"() : () -> memref<64xf32>
  func.return
}
// CHECK: result 'result' at position 0 does not verify:
// CHECK-NEXT: Expected attribute i8 but got f32

// -----

func.func @constant_shape_mismatch() {
  %c = buf.constant dense<1.0> : tensor<3xf32> : memref<2xf32>
  func.return
}
// CHECK: buf.constant: value and result must have the same shape and element type

// -----

func.func @constant_element_type_mismatch() {
  %c = buf.constant dense<1.0> : tensor<2xf32> : memref<2xf64>
  func.return
}
// CHECK: buf.constant: value and result must have the same shape and element type

// -----

func.func @reshape_numel(%a: memref<2x3xf32>) {
  %r = buf.reshape %a : memref<2x3xf32> -> memref<7xf32>
  func.return
}
// CHECK: buf.reshape: [2, 3] and [7] hold different element counts

// -----

func.func @reshape_element_type(%a: memref<2x3xf32>) {
  %r = buf.reshape %a : memref<2x3xf32> -> memref<6xi32>
  func.return
}
// CHECK: buf.reshape: element type must not change

// -----

func.func @relu_two_inputs(%a: memref<4xf32>, %o: memref<4xf32>) {
  buf.relu ins(%a, %a : memref<4xf32>, memref<4xf32>) outs(%o : memref<4xf32>)
  func.return
}
// CHECK: buf.relu: expected 1 input(s), got 2

// -----

func.func @matmul_one_input(%a: memref<2x2xf32>, %o: memref<2x2xf32>) {
  buf.matmul ins(%a : memref<2x2xf32>) outs(%o : memref<2x2xf32>)
  func.return
}
// CHECK: buf.matmul: expected 2 or 3 input(s), got 1

// -----

func.func @add_two_outputs(%a: memref<4xf32>, %o: memref<4xf32>) {
  buf.add ins(%a, %a : memref<4xf32>, memref<4xf32>) outs(%o, %o : memref<4xf32>, memref<4xf32>)
  func.return
}
// CHECK: buf.add: expected 1 output(s), got 2

// -----

func.func @matmul_k_mismatch(%a: memref<2x3xf32>, %b: memref<4x5xf32>, %o: memref<2x5xf32>) {
  buf.matmul ins(%a, %b : memref<2x3xf32>, memref<4x5xf32>) outs(%o : memref<2x5xf32>)
  func.return
}
// CHECK: buf.matmul: matmul contraction dims differ: lhs [2, 3] (transpose_a=False) has K=3, rhs [4, 5] (transpose_b=False) has K=4

// -----

func.func @matmul_wrong_output(%a: memref<2x3xf32>, %b: memref<5x3xf32>, %o: memref<2x3xf32>) {
  buf.matmul ins(%a, %b : memref<2x3xf32>, memref<5x3xf32>) outs(%o : memref<2x3xf32>) {transpose_b = true}
  func.return
}
// CHECK: buf.matmul: output shape [2, 3] should be [2, 5] (matmul)

// -----

func.func @matmul_bad_accumulator(%a: memref<2x3xf32>, %b: memref<3x5xf32>, %c: memref<3xf32>, %o: memref<2x5xf32>) {
  buf.matmul ins(%a, %b, %c : memref<2x3xf32>, memref<3x5xf32>, memref<3xf32>) outs(%o : memref<2x5xf32>) {beta = 1.0 : f32}
  func.return
}
// CHECK: buf.matmul: accumulator [3] does not broadcast to [2, 5]

// -----

func.func @matmul_f64(%a: memref<2x3xf64>, %b: memref<3x5xf64>, %o: memref<2x5xf64>) {
  buf.matmul ins(%a, %b : memref<2x3xf64>, memref<3x5xf64>) outs(%o : memref<2x5xf64>)
  func.return
}
// CHECK: buf.matmul: only f32 buffers are supported

// -----

func.func @sub_no_broadcast(%a: memref<2x3xf32>, %b: memref<4xf32>, %o: memref<2x3xf32>) {
  buf.sub ins(%a, %b : memref<2x3xf32>, memref<4xf32>) outs(%o : memref<2x3xf32>)
  func.return
}
// CHECK: buf.sub: shapes [2, 3], [4] do not broadcast: dim -1 has sizes [3, 4]

// -----

func.func @mul_wrong_output(%a: memref<2x3xf32>, %b: memref<3xf32>, %o: memref<3xf32>) {
  buf.mul ins(%a, %b : memref<2x3xf32>, memref<3xf32>) outs(%o : memref<3xf32>)
  func.return
}
// CHECK: buf.mul: output shape [3] should be [2, 3] (broadcast of the inputs)

// -----

func.func @copy_wrong_output(%a: memref<2x3xf32>, %o: memref<3x2xf32>) {
  buf.copy ins(%a : memref<2x3xf32>) outs(%o : memref<3x2xf32>)
  func.return
}
// CHECK: buf.copy: output shape [3, 2] should be [2, 3] (same as the input)

// -----

func.func @transpose_bad_perm(%a: memref<2x3xf32>, %o: memref<3x2xf32>) {
  buf.transpose ins(%a : memref<2x3xf32>) outs(%o : memref<3x2xf32>) {perm = array<i64: 0, 0>}
  func.return
}
// CHECK: buf.transpose: perm [0, 0] is not a permutation of the 2 dims of [2, 3]

// -----

func.func @transpose_wrong_output(%a: memref<2x3x4xf32>, %o: memref<3x2x4xf32>) {
  buf.transpose ins(%a : memref<2x3x4xf32>) outs(%o : memref<3x2x4xf32>) {perm = array<i64: 2, 0, 1>}
  func.return
}
// CHECK: buf.transpose: output shape [3, 2, 4] should be [4, 2, 3] (perm [2, 0, 1])

// -----

func.func @bias_activation_unknown(%a: memref<2x3xf32>, %b: memref<3xf32>, %o: memref<2x3xf32>) {
  buf.bias_activation ins(%a, %b : memref<2x3xf32>, memref<3xf32>) outs(%o : memref<2x3xf32>) {activation = "swish"}
  func.return
}
// CHECK: buf.bias_activation: unknown activation 'swish'

// -----

func.func @bias_activation_wrong_output(%a: memref<2x3xf32>, %b: memref<3xf32>, %o: memref<3x2xf32>) {
  buf.bias_activation ins(%a, %b : memref<2x3xf32>, memref<3xf32>) outs(%o : memref<3x2xf32>) {activation = "relu"}
  func.return
}
// CHECK: buf.bias_activation: output shape [3, 2] should be [2, 3] (same as the input)

// -----

func.func @bias_activation_bad_bias(%a: memref<2x3xf32>, %b: memref<2xf32>, %o: memref<2x3xf32>) {
  buf.bias_activation ins(%a, %b : memref<2x3xf32>, memref<2xf32>) outs(%o : memref<2x3xf32>) {activation = "relu"}
  func.return
}
// CHECK: buf.bias_activation: bias [2] does not broadcast to [2, 3]
