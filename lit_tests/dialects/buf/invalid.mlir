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
// CHECK: operand 'arena' at position 0 does not verify: Expected attribute i8 but got f32

// -----

func.func @arena_of_floats() {
  %a = "buf.arena"() : () -> memref<64xf32>
  func.return
}
// CHECK: result 'result' at position 0 does not verify: Expected attribute i8 but got f32

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

func.func @matmul_bool(%a: memref<2x3xi1>, %b: memref<3x5xi1>, %o: memref<2x5xi1>) {
  buf.matmul ins(%a, %b : memref<2x3xi1>, memref<3x5xi1>) outs(%o : memref<2x5xi1>)
  func.return
}
// CHECK: buf.matmul: buffers of one dtype expected, float32, float64 or an integer (without activation), got i1

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

// -----

func.func @subview_overflows(%a: memref<2x8xf32>) {
  %v = buf.subview %a[12] : memref<2x8xf32> -> memref<8xf32>
  func.return
}
// CHECK: buf.subview: elements [12, 20) overflow the 16 of the input

// -----

func.func @subview_negative_offset(%a: memref<2x8xf32>) {
  %v = buf.subview %a[-1] : memref<2x8xf32> -> memref<8xf32>
  func.return
}
// CHECK: buf.subview: elements [-1, 7) overflow the 16 of the input

// -----

func.func @subview_element_type(%a: memref<2x8xf32>) {
  %v = buf.subview %a[0] : memref<2x8xf32> -> memref<8xi32>
  func.return
}
// CHECK: buf.subview: element type must not change

// -----

func.func @unary_unknown_function(%a: memref<4xf32>, %o: memref<4xf32>) {
  buf.unary ins(%a : memref<4xf32>) outs(%o : memref<4xf32>) {fn = "cbrt"}
  func.return
}
// CHECK: buf.unary: unknown function 'cbrt'

// -----

func.func @unary_wrong_output(%a: memref<4xf32>, %o: memref<2x2xf32>) {
  buf.unary ins(%a : memref<4xf32>) outs(%o : memref<2x2xf32>) {fn = "exp"}
  func.return
}
// CHECK: buf.unary: output shape [2, 2] should be [4] (same as the input)

// -----

func.func @unary_without_fn(%a: memref<4xf32>, %o: memref<4xf32>) {
  buf.unary ins(%a : memref<4xf32>) outs(%o : memref<4xf32>)
  func.return
}
// CHECK: property 'fn' expected in operation 'buf.unary'

// -----

func.func @binary_unknown_function(%a: memref<4xf32>, %o: memref<4xf32>) {
  buf.binary ins(%a, %a : memref<4xf32>, memref<4xf32>) outs(%o : memref<4xf32>) {fn = "atan2"}
  func.return
}
// CHECK: buf.binary: unknown function 'atan2'

// -----

func.func @binary_no_broadcast(%a: memref<2x3xf32>, %b: memref<2xf32>, %o: memref<2x3xf32>) {
  buf.binary ins(%a, %b : memref<2x3xf32>, memref<2xf32>) outs(%o : memref<2x3xf32>) {fn = "max"}
  func.return
}
// CHECK: buf.binary: shapes [2, 3], [2] do not broadcast: dim -1 has sizes [2, 3]

// -----

func.func @select_two_inputs(%a: memref<4xf32>, %o: memref<4xf32>) {
  buf.select ins(%a, %a : memref<4xf32>, memref<4xf32>) outs(%o : memref<4xf32>)
  func.return
}
// CHECK: buf.select: expected 3 input(s), got 2

// -----

func.func @select_wrong_output(%c: memref<2x4xi1>, %a: memref<4xf32>, %o: memref<4xf32>) {
  buf.select ins(%c, %a, %a : memref<2x4xi1>, memref<4xf32>, memref<4xf32>) outs(%o : memref<4xf32>)
  func.return
}
// CHECK: buf.select: output shape [4] should be [2, 4] (broadcast of the inputs)

// -----

func.func @cast_changes_shape(%a: memref<4xf32>, %o: memref<2xf16>) {
  buf.cast ins(%a : memref<4xf32>) outs(%o : memref<2xf16>)
  func.return
}
// CHECK: buf.cast: output shape [2] should be [4] (same as the input)

// -----

func.func @reduce_unknown_kind(%a: memref<2x4xf32>, %o: memref<2xf32>) {
  buf.reduce ins(%a : memref<2x4xf32>) outs(%o : memref<2xf32>) {kind = "median", dims = array<i64: 1>}
  func.return
}
// CHECK: buf.reduce: unknown reduction 'median' (sum, mean, max, min, prod, any)

// -----

func.func @reduce_wrong_output(%a: memref<2x4xf32>, %o: memref<2xf32>) {
  buf.reduce ins(%a : memref<2x4xf32>) outs(%o : memref<2xf32>) {kind = "sum", dims = array<i64: 1>, keepdim = true}
  func.return
}
// CHECK: buf.reduce: output shape [2] should be [2, 1] (reduction over [1])

// -----

func.func @softmax_dim_out_of_range(%a: memref<2x4xf32>, %o: memref<2x4xf32>) {
  buf.softmax ins(%a : memref<2x4xf32>) outs(%o : memref<2x4xf32>) {dim = 2 : i64}
  func.return
}
// CHECK: buf.softmax: dim 2 out of range for rank 2

// -----

func.func @cumsum_dim_out_of_range(%a: memref<2x4xi64>, %o: memref<2x4xi64>) {
  buf.cumsum ins(%a : memref<2x4xi64>) outs(%o : memref<2x4xi64>) {dim = -1 : i64}
  func.return
}
// CHECK: buf.cumsum: dim -1 out of range for rank 2

// -----

func.func @softmax_wrong_output(%a: memref<2x4xf32>, %o: memref<4x2xf32>) {
  buf.softmax ins(%a : memref<2x4xf32>) outs(%o : memref<4x2xf32>) {dim = 1 : i64, log = true}
  func.return
}
// CHECK: buf.softmax: output shape [4, 2] should be [2, 4] (same as the input)

// -----

func.func @layer_norm_bad_weight(%a: memref<2x4xf32>, %w: memref<2xf32>, %o: memref<2x4xf32>) {
  buf.layer_norm ins(%a, %w, %w : memref<2x4xf32>, memref<2xf32>, memref<2xf32>) outs(%o : memref<2x4xf32>)
  func.return
}
// CHECK: buf.layer_norm: weight/bias shape [2] should be [4]

// -----

func.func @layer_norm_wrong_output(%a: memref<2x4xf32>, %w: memref<4xf32>, %o: memref<8xf32>) {
  buf.layer_norm ins(%a, %w, %w : memref<2x4xf32>, memref<4xf32>, memref<4xf32>) outs(%o : memref<8xf32>)
  func.return
}
// CHECK: buf.layer_norm: output shape [8] should be [2, 4] (same as the input)

// -----

func.func @rms_norm_bad_weight(%a: memref<2x4xf32>, %w: memref<2xf32>, %o: memref<2x4xf32>) {
  buf.rms_norm ins(%a, %w : memref<2x4xf32>, memref<2xf32>) outs(%o : memref<2x4xf32>)
  func.return
}
// CHECK: buf.rms_norm: weight shape [2] should be [4]

// -----

func.func @rms_norm_wrong_output(%a: memref<2x4xf32>, %w: memref<4xf32>, %o: memref<8xf32>) {
  buf.rms_norm ins(%a, %w : memref<2x4xf32>, memref<4xf32>) outs(%o : memref<8xf32>)
  func.return
}
// CHECK: buf.rms_norm: output shape [8] should be [2, 4] (same as the input)

// -----

func.func @rope_wrong_output(%x: memref<2x8xf32>, %c: memref<8xf32>, %o: memref<16xf32>) {
  buf.rope ins(%x, %c, %c : memref<2x8xf32>, memref<8xf32>, memref<8xf32>) outs(%o : memref<16xf32>)
  func.return
}
// CHECK: buf.rope: output shape [16] should be [2, 8] (same as the input)

// -----

func.func @rope_odd_last_dim(%x: memref<2x7xf32>, %c: memref<7xf32>, %o: memref<2x7xf32>) {
  buf.rope ins(%x, %c, %c : memref<2x7xf32>, memref<7xf32>, memref<7xf32>) outs(%o : memref<2x7xf32>)
  func.return
}
// CHECK: buf.rope: the last dim 7 must be even

// -----

func.func @rope_tables_do_not_broadcast(%x: memref<2x8xf32>, %c: memref<8xf32>, %s: memref<4xf32>, %o: memref<2x8xf32>) {
  buf.rope ins(%x, %c, %s : memref<2x8xf32>, memref<8xf32>, memref<4xf32>) outs(%o : memref<2x8xf32>)
  func.return
}
// CHECK: buf.rope: cos/sin [4] does not broadcast to [2, 8]

// -----

func.func @embedding_table_rank(%t: memref<10xf32>, %i: memref<3xi64>, %o: memref<3x1xf32>) {
  buf.embedding ins(%t, %i : memref<10xf32>, memref<3xi64>) outs(%o : memref<3x1xf32>)
  func.return
}
// CHECK: buf.embedding: the table must be rank 2, got [10]

// -----

func.func @embedding_wrong_output(%t: memref<10x4xf32>, %i: memref<3xi64>, %o: memref<3x10xf32>) {
  buf.embedding ins(%t, %i : memref<10x4xf32>, memref<3xi64>) outs(%o : memref<3x10xf32>)
  func.return
}
// CHECK: buf.embedding: output shape [3, 10] should be [3, 4] (indices shape + row size)

// -----

func.func @slice_dim_out_of_range(%a: memref<8x4xf32>, %o: memref<2x4xf32>) {
  buf.slice ins(%a : memref<8x4xf32>) outs(%o : memref<2x4xf32>) {dim = 2 : i64, start = 0 : i64}
  func.return
}
// CHECK: buf.slice: dim 2 out of range or rank mismatch ([8, 4] -> [2, 4])

// -----

func.func @slice_changes_other_dim(%a: memref<8x4xf32>, %o: memref<2x3xf32>) {
  buf.slice ins(%a : memref<8x4xf32>) outs(%o : memref<2x3xf32>) {dim = 0 : i64, start = 0 : i64}
  func.return
}
// CHECK: buf.slice: output [2, 3] may differ from the input [8, 4] only in dim 0

// -----

func.func @slice_out_of_bounds(%a: memref<8x4xf32>, %o: memref<3x4xf32>) {
  buf.slice ins(%a : memref<8x4xf32>) outs(%o : memref<3x4xf32>) {dim = 0 : i64, start = 4 : i64, step = 2 : i64}
  func.return
}
// CHECK: buf.slice: slice [4::2] of size 3 is out of bounds for 8

// -----

func.func @concat_dim_out_of_range(%a: memref<2x4xf32>, %o: memref<4x4xf32>) {
  buf.concat ins(%a, %a : memref<2x4xf32>, memref<2x4xf32>) outs(%o : memref<4x4xf32>) {dim = 2 : i64}
  func.return
}
// CHECK: buf.concat: dim 2 out of range for rank 2

// -----

func.func @concat_mismatch_outside_dim(%a: memref<2x4xf32>, %b: memref<2x3xf32>, %o: memref<4x4xf32>) {
  buf.concat ins(%a, %b : memref<2x4xf32>, memref<2x3xf32>) outs(%o : memref<4x4xf32>) {dim = 0 : i64}
  func.return
}
// CHECK: buf.concat: input [2, 3] does not match the output [4, 4] outside dim 0

// -----

func.func @concat_sizes_do_not_add_up(%a: memref<2x4xf32>, %o: memref<5x4xf32>) {
  buf.concat ins(%a, %a : memref<2x4xf32>, memref<2x4xf32>) outs(%o : memref<5x4xf32>) {dim = 0 : i64}
  func.return
}
// CHECK: buf.concat: sizes along dim 0 do not add up to 5

// -----

func.func @broadcast_incompatible(%a: memref<2x4xf32>, %o: memref<3x4xf32>) {
  buf.broadcast ins(%a : memref<2x4xf32>) outs(%o : memref<3x4xf32>)
  func.return
}
// CHECK: buf.broadcast: [2, 4] does not broadcast to [3, 4]

// -----

func.func @attention_rank(%q: memref<8x16xf32>, %o: memref<8x16xf32>) {
  buf.attention ins(%q, %q, %q : memref<8x16xf32>, memref<8x16xf32>, memref<8x16xf32>) outs(%o : memref<8x16xf32>) {scale = 0.25 : f32}
  func.return
}
// CHECK: buf.attention: q, k, v need the same rank >= 3, got [8, 16], [8, 16], [8, 16]

// -----

func.func @attention_head_dims_differ(%q: memref<1x2x8x16xf32>, %k: memref<1x2x8x8xf32>, %o: memref<1x2x8x8xf32>) {
  buf.attention ins(%q, %k, %k : memref<1x2x8x16xf32>, memref<1x2x8x8xf32>, memref<1x2x8x8xf32>) outs(%o : memref<1x2x8x8xf32>) {scale = 0.25 : f32}
  func.return
}
// CHECK: buf.attention: incompatible q [1, 2, 8, 16], k [1, 2, 8, 8], v [1, 2, 8, 8]

// -----

func.func @attention_heads_not_a_multiple(%q: memref<1x3x8x16xf32>, %k: memref<1x2x8x16xf32>, %o: memref<1x3x8x16xf32>) {
  buf.attention ins(%q, %k, %k : memref<1x3x8x16xf32>, memref<1x2x8x16xf32>, memref<1x2x8x16xf32>) outs(%o : memref<1x3x8x16xf32>) {scale = 0.25 : f32}
  func.return
}
// CHECK: buf.attention: incompatible q [1, 3, 8, 16], k [1, 2, 8, 16], v [1, 2, 8, 16]

// -----

func.func @attention_wrong_output(%q: memref<1x2x8x16xf32>, %o: memref<1x2x16x8xf32>) {
  buf.attention ins(%q, %q, %q : memref<1x2x8x16xf32>, memref<1x2x8x16xf32>, memref<1x2x8x16xf32>) outs(%o : memref<1x2x16x8xf32>) {scale = 0.25 : f32}
  func.return
}
// CHECK: buf.attention: output shape [1, 2, 16, 8] should be [1, 2, 8, 16] (q rows x v columns)

// -----

func.func @attention_bad_mask(%q: memref<1x2x8x16xf32>, %m: memref<8x7xf32>, %o: memref<1x2x8x16xf32>) {
  buf.attention ins(%q, %q, %q, %m : memref<1x2x8x16xf32>, memref<1x2x8x16xf32>, memref<1x2x8x16xf32>, memref<8x7xf32>) outs(%o : memref<1x2x8x16xf32>) {scale = 0.25 : f32}
  func.return
}
// CHECK: buf.attention: mask [8, 7] does not broadcast to the scores [1, 2, 8, 8]

// -----

func.func @attention_three_outputs(%q: memref<1x2x8x16xf32>, %o: memref<1x2x8x16xf32>, %s: memref<64xf32>) {
  buf.attention ins(%q, %q, %q : memref<1x2x8x16xf32>, memref<1x2x8x16xf32>, memref<1x2x8x16xf32>) outs(%o, %s, %s : memref<1x2x8x16xf32>, memref<64xf32>, memref<64xf32>) {scale = 0.25 : f32}
  func.return
}
// CHECK: buf.attention: expected 1 or 2 output(s), got 3

// -----

func.func @fused_elementwise_wrong_output(%a: memref<2x4xf32>, %o: memref<4xf32>) {
  buf.fused_elementwise ins(%a : memref<2x4xf32>) outs(%o : memref<4xf32>) {
  ^bb0(%x: f32):
    buf.yield %x : f32
  }
  func.return
}
// CHECK: buf.fused_elementwise: output shape [4] should be [2, 4] (broadcast of the inputs)

// -----

func.func @fused_elementwise_argument_count(%a: memref<4xf32>, %o: memref<4xf32>) {
  buf.fused_elementwise ins(%a, %a : memref<4xf32>, memref<4xf32>) outs(%o : memref<4xf32>) {
  ^bb0(%x: f32):
    buf.yield %x : f32
  }
  func.return
}
// CHECK: buf.fused_elementwise: the body takes 1 arguments for 2 inputs

// -----

func.func @fused_elementwise_without_yield(%a: memref<4xf32>, %o: memref<4xf32>) {
  buf.fused_elementwise ins(%a : memref<4xf32>) outs(%o : memref<4xf32>) {
  ^bb0(%x: f32):
    buf.yield %x, %x : f32, f32
  }
  func.return
}
// CHECK: buf.fused_elementwise: the body must end with one buf.yield value

// -----

func.func @matmul_unknown_activation(%a: memref<2x3xf32>, %b: memref<3x5xf32>, %o: memref<2x5xf32>) {
  buf.matmul ins(%a, %b : memref<2x3xf32>, memref<3x5xf32>) outs(%o : memref<2x5xf32>) {activation = "exp"}
  func.return
}
// CHECK: buf.matmul: unknown activation 'exp'

// -----

func.func @cache_write_shape_mismatch(%u: memref<1x3x4x16xf32>) {
  %s = buf.state "kv.0.key" : memref<1x2x40x16xf32>
  buf.cache_write ins(%u : memref<1x3x4x16xf32>) outs(%s : memref<1x2x40x16xf32>) {axis = 2 : i64}
  func.return
}
// CHECK: buf.cache_write: update [1, 3, 4, 16] does not fit state [1, 2, 40, 16] along axis 2

// -----

func.func @cache_write_bad_axis(%u: memref<1x2x4x16xf32>) {
  %s = buf.state "kv.0.key" : memref<1x2x40x16xf32>
  buf.cache_write ins(%u : memref<1x2x4x16xf32>) outs(%s : memref<1x2x40x16xf32>) {axis = 4 : i64}
  func.return
}
// CHECK: buf.cache_write: axis 4 / rank mismatch ([1, 2, 4, 16] into [1, 2, 40, 16])

// -----

func.func @kv_cache_attention_mask_not_over_the_cache(%q: memref<1x2x4x8xf32>, %k: memref<1x2x16x8xf32>, %m: memref<1x1x1x8xf32>, %o: memref<1x2x4x8xf32>) {
  // expected-error@+1 {{buf.attention: mask [1, 1, 1, 8] does not broadcast to the scores [1, 2, 4, 16]}}
  buf.attention ins(%q, %k, %k, %m : memref<1x2x4x8xf32>, memref<1x2x16x8xf32>, memref<1x2x16x8xf32>, memref<1x1x1x8xf32>) outs(%o : memref<1x2x4x8xf32>) {scale = 1.0 : f32, causal = true, kv_cache = true}
  func.return
}

// -----

func.func @kv_cache_attention_not_causal(%q: memref<1x2x4x8xf32>, %k: memref<1x2x16x8xf32>, %o: memref<1x2x4x8xf32>) {
  // expected-error@+1 {{buf.attention: kv_cache attention with more than one query must be causal}}
  buf.attention ins(%q, %k, %k : memref<1x2x4x8xf32>, memref<1x2x16x8xf32>, memref<1x2x16x8xf32>) outs(%o : memref<1x2x4x8xf32>) {scale = 1.0 : f32, kv_cache = true}
  func.return
}

// -----

func.func @packed_weight_not_3d() {
  // expected-error@+1 {{buf.packed_weight: expected memref<panels x K x NR x f32>, got memref<8x64xf32>}}
  %wp = buf.packed_weight "w" {source_shape = array<i64: 64, 8>} : memref<8x64xf32>
  func.return
}

// -----

func.func @packed_weight_panel_not_whole_vectors() {
  // expected-error@+1 {{buf.packed_weight: panel width 24 is not a positive multiple of 16}}
  %wp = buf.packed_weight "w" {source_shape = array<i64: 8, 24>} : memref<1x8x24xf32>
  func.return
}

// -----

func.func @packed_matmul_k_mismatch(%a: memref<4x7xf32>, %wp: memref<1x8x64xf32>, %o: memref<4x64xf32>) {
  // expected-error@+1 {{buf.packed_matmul: contraction dims differ: lhs [4, 7] has K=7, the packed weight [1, 8, 64] K=8}}
  buf.packed_matmul ins(%a, %wp : memref<4x7xf32>, memref<1x8x64xf32>) outs(%o : memref<4x64xf32>)
  func.return
}

// -----

func.func @packed_matmul_panel_count(%a: memref<4x8xf32>, %wp: memref<1x8x64xf32>, %o: memref<4x100xf32>) {
  // expected-error@+1 {{buf.packed_matmul: N=100 needs 2 panels of 64 columns, the packed weight has 1}}
  buf.packed_matmul ins(%a, %wp : memref<4x8xf32>, memref<1x8x64xf32>) outs(%o : memref<4x100xf32>)
  func.return
}

// -----

func.func @packed_matmul_wrong_rows(%a: memref<4x8xf32>, %wp: memref<1x8x64xf32>, %o: memref<3x64xf32>) {
  // expected-error@+1 {{buf.packed_matmul: output shape [3, 64] should be [4] + [N]}}
  buf.packed_matmul ins(%a, %wp : memref<4x8xf32>, memref<1x8x64xf32>) outs(%o : memref<3x64xf32>)
  func.return
}

// -----

func.func @packed_matmul_epilogue_and_activation(%a: memref<4x8xf32>, %wp: memref<1x8x64xf32>, %o: memref<4x64xf32>) {
  // expected-error@+1 {{buf.packed_matmul: an epilogue body takes the place of the activation, got activation 'relu'}}
  buf.packed_matmul ins(%a, %wp : memref<4x8xf32>, memref<1x8x64xf32>) outs(%o : memref<4x64xf32>) {activation = "relu"} epilogue {
  ^bb0(%0: f32):
    buf.yield %0 : f32
  }
  func.return
}

// -----

func.func @packed_matmul_epilogue_types(%a: memref<4x8xf32>, %wp: memref<1x8x64xf32>, %o: memref<4x64xf32>) {
  // expected-error@+1 {{buf.packed_matmul: the epilogue body takes one f32 (or two: the sum and the last input's value) and yields one f32}}
  buf.packed_matmul ins(%a, %wp : memref<4x8xf32>, memref<1x8x64xf32>) outs(%o : memref<4x64xf32>) epilogue {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    buf.yield %1 : bf16
  }
  func.return
}

// -----

func.func @packed_matmul_epilogue_without_operand(%a: memref<4x8xf32>, %wp: memref<1x8x64xf32>, %o: memref<4x64xf32>) {
  // expected-error@+1 {{buf.packed_matmul: an epilogue body of two arguments takes the last input's value: the GEMM has none after its operands}}
  buf.packed_matmul ins(%a, %wp : memref<4x8xf32>, memref<1x8x64xf32>) outs(%o : memref<4x64xf32>) epilogue {
  ^bb0(%0: f32, %1: f32):
    buf.yield %0 : f32
  }
  func.return
}

// -----

func.func @packed_matmul_epilogue_operand_type(%a: memref<4x8xf32>, %wp: memref<1x8x64xf32>, %r: memref<4x64xf32>, %o: memref<4x64xf32>) {
  // expected-error@+1 {{buf.packed_matmul: an epilogue body's second argument has the last input's dtype}}
  buf.packed_matmul ins(%a, %wp, %r : memref<4x8xf32>, memref<1x8x64xf32>, memref<4x64xf32>) outs(%o : memref<4x64xf32>) {beta = 1.0 : f32} epilogue {
  ^bb0(%0: f32, %1: bf16):
    buf.yield %0 : f32
  }
  func.return
}

// -----

func.func @packed_matmul_epilogue_scaled_bf16_accumulator(%a: memref<4x8xf32>, %wp: memref<1x8x64xf32>, %r: memref<4x64xbf16>, %o: memref<4x64xf32>) {
  // expected-error@+1 {{buf.packed_matmul: an epilogue body takes a bf16 accumulator as it is: beta must be 1}}
  buf.packed_matmul ins(%a, %wp, %r : memref<4x8xf32>, memref<1x8x64xf32>, memref<4x64xbf16>) outs(%o : memref<4x64xf32>) {beta = 0.5 : f32} epilogue {
  ^bb0(%0: f32, %1: bf16):
    buf.yield %0 : f32
  }
  func.return
}

// -----

func.func @packed_matmul_packing_writes_elsewhere(%a: memref<8x36xf32>, %wp: memref<3x36x16xf32>, %other: memref<3x36x16xf32>,
                                                   %x: memref<1x4x6x6xf32>, %o: memref<8x36xf32>) {
  // expected-error@+1 {{buf.packed_matmul: the packing region holds one buf.im2col with panels that writes the rhs (the second input)}}
  buf.packed_matmul ins(%a, %wp : memref<8x36xf32>, memref<3x36x16xf32>) outs(%o : memref<8x36xf32>) packing {
    buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%other : memref<3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  }
  func.return
}

// -----

func.func @packed_matmul_packing_two_images(%a: memref<8x36xf32>, %wp: memref<3x36x16xf32>, %x: memref<2x4x6x6xf32>,
                                             %o: memref<8x36xf32>) {
  // expected-error@+1 {{buf.packed_matmul: a GEMM packs its own panels for one image ([panels, K, NR] from a [1, C, H, W] input) or a static count of them ([N, panels, K, NR] from [N, C, H, W])}}
  buf.packed_matmul ins(%a, %wp : memref<8x36xf32>, memref<3x36x16xf32>) outs(%o : memref<8x36xf32>) packing {
    buf.im2col ins(%x : memref<2x4x6x6xf32>) outs(%wp : memref<3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  }
  func.return
}

// -----

func.func @packed_embedding_row_count(%t: memref<2x32x64xf32>, %ids: memref<3xi64>, %o: memref<3x32xf32>) {
  // expected-error@+1 {{buf.packed_embedding: 200 rows need 4 panels of 64, the table has 2}}
  buf.packed_embedding ins(%t, %ids : memref<2x32x64xf32>, memref<3xi64>) outs(%o : memref<3x32xf32>) {rows = 200 : i64}
  func.return
}

// -----

func.func @im2col_panels_shape(%x: memref<1x4x6x6xf32>, %p: memref<2x36x16xf32>) {
  // expected-error@+1 {{buf.im2col: output shape [2, 36, 16] should be [3, 36, 16] (6x6 windows of 4x3x3 values in panels of 16)}}
  buf.im2col ins(%x : memref<1x4x6x6xf32>) outs(%p : memref<2x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  func.return
}

// -----

func.func @im2col_panels_batch(%x: memref<2x4x6x6xf32>, %p: memref<3x36x16xf32>) {
  // expected-error@+1 {{buf.im2col: the panel layout takes one image, x [1, C, H, W], got [2, 4, 6, 6]}}
  buf.im2col ins(%x : memref<2x4x6x6xf32>) outs(%p : memref<3x36x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  func.return
}

// -----

func.func @quantized_matvec_scales(%x: memref<1x32xf32>, %wq: memref<7x32x16xi8>, %ws: memref<7x8xf32>, %o: memref<1x100xf32>) {
  // expected-error@+1 {{buf.quantized_matvec: the scales of panels [7, 32, 16] are [7, 16], got [7, 8]}}
  buf.quantized_matvec ins(%x, %wq, %ws : memref<1x32xf32>, memref<7x32x16xi8>, memref<7x8xf32>) outs(%o : memref<1x100xf32>) {format = "int8"}
  func.return
}

// -----

func.func @quantized_matvec_panel_type(%x: memref<1x32xf32>, %w: memref<7x32x16xf32>, %o: memref<1x100xf32>) {
  // expected-error@+1 {{buf.quantized_matvec: bf16 panels hold bf16, got memref<7x32x16xf32>}}
  buf.quantized_matvec ins(%x, %w : memref<1x32xf32>, memref<7x32x16xf32>) outs(%o : memref<1x100xf32>) {format = "bf16"}
  func.return
}

// -----

func.func @quantized_matvec_format(%x: memref<1x32xf32>, %w: memref<7x32x16xbf16>, %o: memref<1x100xf32>) {
  // expected-error@+1 {{buf.quantized_matvec: unknown format 'fp8' (bf16, int8)}}
  buf.quantized_matvec ins(%x, %w : memref<1x32xf32>, memref<7x32x16xbf16>) outs(%o : memref<1x100xf32>) {format = "fp8"}
  func.return
}

// -----

func.func @packed_weight_format() {
  // expected-error@+1 {{buf.packed_weight: int8panels holds i8, got memref<7x32x16xf32>}}
  %w = buf.packed_weight "fc.weight" {layout = "int8panels", source_shape = array<i64: 32, 100>} : memref<7x32x16xf32>
  func.return
}

// -----

// A packed weight must be what packing its source weight gives: 100 rows of 32 in panels of 16
// columns are 7 panels, not 8 (the kernel would read a panel the runtime never packed).
func.func @packed_weight_larger_than_its_source() {
  // expected-error@+1 {{buf.packed_weight: packing 'fc.weight' of shape [100, 32] as panels gives [7, 32, 16], not the declared [8, 32, 16]}}
  %w = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<8x32x16xf32>
  func.return
}

// -----

func.func @packed_weight_source_of_wrong_rank() {
  // expected-error@+1 {{buf.packed_weight: panels packs a weight of rank 2 or 3, got source_shape [3200]}}
  %w = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 3200>} : memref<7x32x16xf32>
  func.return
}

// -----

func.func @packed_weight_winograd_source() {
  // expected-error@+1 {{buf.packed_weight: winograd2 packs a [Cout, C, 3, 3] weight, got source_shape [32, 16, 5, 5]}}
  %w = buf.packed_weight "conv.weight" {layout = "winograd2", source_shape = array<i64: 32, 16, 5, 5>} : memref<16x32x16xf32>
  func.return
}

// -----

func.func @packed_weight_without_source() {
  // expected-error@+1 {{source_shape}}
  %w = buf.packed_weight "fc.weight" {transposed = true} : memref<7x32x16xf32>
  func.return
}

// -----

// Two buffers live at the same time must not share bytes (what plan-memory guarantees and the
// generated code assumes): %b is written while %a is still to be read.
func.func @views_live_together_overlap(%x: memref<16xf32>, %y: memref<16xf32>) attributes {tg.num_outputs = 1 : i64} {
  // expected-error@+1 {{buf.arena: %a (bytes [0, 64), memref<16xf32>) and %b (bytes [0, 64), memref<16xf32>) overlap but are live at the same time (both at 'buf.relu' op}}
  %arena = buf.arena : memref<128xi8>
  %a = buf.view %arena[0] : memref<128xi8> -> memref<16xf32>
  %b = buf.view %arena[0] : memref<128xi8> -> memref<16xf32>
  buf.relu ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
  buf.relu ins(%x : memref<16xf32>) outs(%b : memref<16xf32>)
  buf.add ins(%a, %b : memref<16xf32>, memref<16xf32>) outs(%y : memref<16xf32>)
  func.return
}

// -----

// A partial overlap counts, and an alias (reshape, subview) keeps its root live: %b's bytes
// [64, 128) are written while %a, read through its reshape %r, is still live.
func.func @views_overlap_through_an_alias(%x: memref<32xf32>, %y: memref<4x8xf32>) attributes {tg.num_outputs = 1 : i64} {
  // expected-error@+1 {{buf.arena: %a (bytes [0, 128), memref<32xf32>) and %b (bytes [64, 192), memref<32xf32>) overlap but are live at the same time}}
  %arena = buf.arena : memref<192xi8>
  %a = buf.view %arena[0] : memref<192xi8> -> memref<32xf32>
  %b = buf.view %arena[64] : memref<192xi8> -> memref<32xf32>
  buf.relu ins(%x : memref<32xf32>) outs(%a : memref<32xf32>)
  buf.relu ins(%x : memref<32xf32>) outs(%b : memref<32xf32>)
  %r = buf.reshape %a : memref<32xf32> -> memref<4x8xf32>
  buf.relu ins(%r : memref<4x8xf32>) outs(%y : memref<4x8xf32>)
  func.return
}
