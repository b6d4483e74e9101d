// RUN: tg-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Every verifier message of the tg dialect, one case each.

func.func @matmul_k_mismatch(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  %y = tg.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return %y : tensor<2x5xf32>
}
// CHECK: matmul contraction dims differ: lhs [2, 3] (transpose_a=False) has K=3, rhs [4, 5] (transpose_b=False) has K=4

// -----

func.func @matmul_wrong_result(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x4xf32> {
  %y = tg.matmul %a, %b : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x4xf32>
  func.return %y : tensor<2x4xf32>
}
// CHECK: tg.matmul: result shape [2, 4] should be [2, 5]

// -----

func.func @matmul_bad_acc(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>, %c: tensor<3xf32>) -> tensor<2x5xf32> {
  %y = tg.matmul %a, %b, %c {beta = 1.0 : f32} : (tensor<2x3xf32>, tensor<3x5xf32>, tensor<3xf32>) -> tensor<2x5xf32>
  func.return %y : tensor<2x5xf32>
}
// CHECK: tg.matmul: accumulator shape [3] does not broadcast to the result [2, 5]

// -----

func.func @matmul_rank1(%a: tensor<3xf32>, %b: tensor<3x5xf32>) -> tensor<5xf32> {
  %y = tg.matmul %a, %b : (tensor<3xf32>, tensor<3x5xf32>) -> tensor<5xf32>
  func.return %y : tensor<5xf32>
}
// CHECK: matmul operands need rank >= 2, got [3] and [3, 5]

// -----

func.func @add_no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  %y = tg.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK: shapes [2, 3], [4] do not broadcast: dim -1 has sizes [3, 4]

// -----

func.func @add_wrong_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %y = tg.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %y : tensor<3xf32>
}
// CHECK: tg.add: result shape [3] should be the broadcast shape [2, 3]

// -----

func.func @mul_mixed_types(%a: tensor<2x3xf32>, %b: tensor<2x3xf64>) -> tensor<2x3xf32> {
  %y = tg.mul %a, %b : (tensor<2x3xf32>, tensor<2x3xf64>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK: tg.mul: operand and result element types differ

// -----

func.func @relu_type_change(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %y = "tg.relu"(%a) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}
// CHECK: attribute tensor<2x3xf32> expected from variable 'T', but got tensor<3x2xf32>

// -----

func.func @reshape_numel(%a: tensor<2x3xf32>) -> tensor<7xf32> {
  %y = tg.reshape %a : (tensor<2x3xf32>) -> tensor<7xf32>
  func.return %y : tensor<7xf32>
}
// CHECK: tg.reshape: cannot reshape [2, 3] (6 elements) to [7] (7 elements)

// -----

func.func @transpose_bad_perm(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %y = tg.transpose %a {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}
// CHECK: perm [0, 0] is not a permutation of the 2 dims of [2, 3]

// -----

func.func @transpose_wrong_result(%a: tensor<2x3x4xf32>) -> tensor<3x2x4xf32> {
  %y = tg.transpose %a {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  func.return %y : tensor<3x2x4xf32>
}
// CHECK: tg.transpose: result shape [3, 2, 4] should be [4, 2, 3] for perm [2, 0, 1]

// -----

func.func @bias_act_unknown(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %y = tg.bias_activation %a, %b {activation = "swish"} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK: tg.bias_activation: unknown activation 'swish' (expected one of none, relu, gelu, gelu_tanh, silu, sigmoid, tanh)

// -----

func.func @bias_act_bad_bias(%a: tensor<2x3xf32>, %b: tensor<2xf32>) -> tensor<2x3xf32> {
  %y = tg.bias_activation %a, %b {activation = "relu"} : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK: tg.bias_activation: bias shape [2] does not broadcast to [2, 3]

// -----

func.func @constant_type_mismatch() -> tensor<2xf32> {
  %c = "tg.constant"() <{value = dense<1.0> : tensor<3xf32>}> : () -> tensor<2xf32>
  func.return %c : tensor<2xf32>
}
// CHECK: attribute tensor<2xf32> expected from variable 'T', but got tensor<3xf32>

// -----

func.func @rms_norm_bad_weight(%x: tensor<2x8xf32>, %w: tensor<4xf32>) -> tensor<2x8xf32> {
  %y = tg.rms_norm %x, %w : (tensor<2x8xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK: tg.rms_norm: weight shape [4] should be [8]

// -----

func.func @rms_norm_scalar_input(%x: tensor<f32>, %w: tensor<1xf32>) -> tensor<f32> {
  %y = tg.rms_norm %x, %w : (tensor<f32>, tensor<1xf32>) -> tensor<f32>
  func.return %y : tensor<f32>
}
// CHECK: tg.rms_norm: the input needs rank >= 1

// -----

func.func @rope_odd_last_dim(%x: tensor<2x7xf32>, %c: tensor<7xf32>) -> tensor<2x7xf32> {
  %y = tg.rope %x, %c, %c : (tensor<2x7xf32>, tensor<7xf32>, tensor<7xf32>) -> tensor<2x7xf32>
  func.return %y : tensor<2x7xf32>
}
// CHECK: tg.rope: the last dim of the input [2, 7] must be even

// -----

func.func @rope_cos_does_not_broadcast(%x: tensor<2x8xf32>, %c: tensor<3x8xf32>, %s: tensor<8xf32>) -> tensor<2x8xf32> {
  %y = tg.rope %x, %c, %s : (tensor<2x8xf32>, tensor<3x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK: tg.rope: cos shape [3, 8] does not broadcast to [2, 8]

// -----

func.func @rope_sin_element_type(%x: tensor<2x8xf32>, %c: tensor<8xf32>, %s: tensor<8xf16>) -> tensor<2x8xf32> {
  %y = tg.rope %x, %c, %s : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf16>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK: tg.rope: sin element type differs from the input's

// -----

func.func @cache_write_shape_mismatch(%k: tensor<1x3x4x16xf32>) -> tensor<1x2x40x16xf32> {
  %s = tg.state "kv.0.key" : tensor<1x2x40x16xf32>
  %c = tg.cache_write %k into %s {axis = 2 : i64} : (tensor<1x2x40x16xf32>, tensor<1x3x4x16xf32>) -> tensor<1x2x40x16xf32>
  func.return %c : tensor<1x2x40x16xf32>
}
// CHECK: tg.cache_write: update [1, 3, 4, 16] does not fit state [1, 2, 40, 16] along axis 2

// -----

func.func @cache_write_too_many_positions(%k: tensor<1x2x48x16xf32>) -> tensor<1x2x40x16xf32> {
  %s = tg.state "kv.0.key" : tensor<1x2x40x16xf32>
  %c = tg.cache_write %k into %s {axis = 2 : i64} : (tensor<1x2x40x16xf32>, tensor<1x2x48x16xf32>) -> tensor<1x2x40x16xf32>
  func.return %c : tensor<1x2x40x16xf32>
}
// CHECK: tg.cache_write: update [1, 2, 48, 16] does not fit state [1, 2, 40, 16] along axis 2

// -----

// A mask over a cache indexes its positions: 16 keys do not fit a cache of 40.
func.func @kv_cache_attention_mask_not_over_the_cache(%q: tensor<1x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %m: tensor<1x1x1x16xf32>) -> tensor<1x4x1x16xf32> {
  %o = tg.attention %q, %k, %k mask %m {scale = 0.25 : f32, kv_cache = true} : (tensor<1x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}
// CHECK: tg.attention: mask shape [1, 1, 1, 16] does not broadcast to the scores [1, 4, 1, 40]

// -----

func.func @kv_cache_attention_not_causal(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x40x16xf32>) -> tensor<1x4x8x16xf32> {
  %o = tg.attention %q, %k, %k {scale = 0.25 : f32, kv_cache = true} : (tensor<1x4x8x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}
// CHECK: tg.attention: kv_cache attention with more than one query must be causal

// -----

func.func @rope_norm_weight_shape(%x: tensor<2x16xf32>, %c: tensor<2x16xf32>, %w: tensor<8xf32>) -> tensor<2x16xf32> {
  %r = tg.rope %x, %c, %c norm %w {eps = 1.0e-06 : f32} : (tensor<2x16xf32>, tensor<2x16xf32>, tensor<2x16xf32>, tensor<8xf32>) -> tensor<2x16xf32>
  func.return %r : tensor<2x16xf32>
}
// CHECK: tg.rope: norm weight shape [8] should be [16]

// -----

func.func @rope_norm_without_eps(%x: tensor<2x16xf32>, %c: tensor<2x16xf32>, %w: tensor<16xf32>) -> tensor<2x16xf32> {
  %r = tg.rope %x, %c, %c norm %w : (tensor<2x16xf32>, tensor<2x16xf32>, tensor<2x16xf32>, tensor<16xf32>) -> tensor<2x16xf32>
  func.return %r : tensor<2x16xf32>
}
// CHECK: tg.rope: a norm weight and eps go together

// -----

// A KV cache is heads-major: no sequence-major keys or values over one.
func.func @kv_cache_attention_seq_major_keys(%q: tensor<1x4x1x16xf32>, %k: tensor<1x40x2x16xf32>, %v: tensor<1x2x40x16xf32>) -> tensor<1x4x1x16xf32> {
  %o = tg.attention %q, %k, %v {scale = 0.25 : f32, kv_cache = true, k_seq_major = true} : (tensor<1x4x1x16xf32>, tensor<1x40x2x16xf32>, tensor<1x2x40x16xf32>) -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}
// CHECK: tg.attention: a KV cache is heads-major (no k_seq_major, v_seq_major)

// -----

// A head range past the operand's heads (it holds 12: [10, 14) is not within them).
func.func @attention_head_range_past_the_heads(%q: tensor<1x8x4x16xf32>, %kv: tensor<1x8x12x16xf32>) -> tensor<1x8x4x16xf32> {
  %o = tg.attention %q, %kv, %kv {scale = 0.25 : f32, q_seq_major = true, k_seq_major = true, v_seq_major = true, out_seq_major = true, k_heads = array<i64: 10, 4>, v_heads = array<i64: 4, 4>} : (tensor<1x8x4x16xf32>, tensor<1x8x12x16xf32>, tensor<1x8x12x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %o : tensor<1x8x4x16xf32>
}
// CHECK: tg.attention: k_heads [10, 4] (first, count) is not a range of its 12 heads

// -----

// A sequence-major result: [..., Sq, H, Dv]; the heads-major shape is an error.
func.func @attention_seq_major_result_shape(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %o = tg.attention %q, %k, %k {scale = 0.25 : f32, q_seq_major = true, out_seq_major = true} : (tensor<1x8x4x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}
// CHECK: tg.attention: result shape [1, 4, 8, 16] should be [1, 8, 4, 16]

// -----

func.func @cumsum_dim_out_of_range(%a: tensor<2x4xi64>) -> tensor<2x4xi64> {
  %y = tg.cumsum %a {dim = 2 : i64} : tensor<2x4xi64>
  func.return %y : tensor<2x4xi64>
}
// CHECK: tg.cumsum: dim 2 out of range for rank 2

// -----

func.func @cumsum_reduce_unknown(%a: tensor<2x4xi64>) -> tensor<2x4xi64> {
  %y = tg.cumsum %a {dim = 1 : i64, reduce = "mean"} : tensor<2x4xi64>
  func.return %y : tensor<2x4xi64>
}
// CHECK: tg.cumsum: reduce must be one of sum, prod, max, min, logsumexp, got 'mean'

// -----

func.func @im2col_not_nchw(%x: tensor<4x7x6xf32>) -> tensor<4x3x3x7x6xf32> {
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<4x7x6xf32>) -> tensor<4x3x3x7x6xf32>
  func.return %c : tensor<4x3x3x7x6xf32>
}
// CHECK: tg.im2col: the input must be NCHW (rank 4), got [4, 7, 6]

// -----

func.func @im2col_wrong_positions(%x: tensor<1x4x7x6xf32>) -> tensor<1x4x3x3x7x3xf32> {
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x4x7x6xf32>) -> tensor<1x4x3x3x7x3xf32>
  func.return %c : tensor<1x4x3x3x7x3xf32>
}
// CHECK: tg.im2col: 7 window positions along the height should be 4

// -----

func.func @im2col_zero_stride(%x: tensor<1x4x7x6xf32>) -> tensor<1x4x3x3x7x6xf32> {
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 0, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x4x7x6xf32>) -> tensor<1x4x3x3x7x6xf32>
  func.return %c : tensor<1x4x3x3x7x6xf32>
}
// CHECK: tg.im2col: kernel, stride and dilation must be >= 1, padding >= 0

// -----

// A pinned kernel parameter must be usable: a kernel reads tg.chunks only on several threads,
// so a negative one would otherwise pass unnoticed on one.
func.func @kernel_parameter_not_positive(%a: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %y = tg.matmul %a, %w {tg.chunks = -1 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: 'tg.matmul' op (%y): tg.chunks must be a positive integer, got -1 : i64

// -----

func.func @kernel_flag_not_0_or_1(%a: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %y = tg.matmul %a, %w {tg.separate_epilogue = 2 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: 'tg.matmul' op (%y): tg.separate_epilogue must be 0 or 1, got 2 : i64

// -----

func.func @arg_reduce_unknown_kind(%x: tensor<4x7xf32>) -> tensor<4xi64> {
  %i = tg.arg_reduce %x {kind = "median", dim = 1 : i64} : (tensor<4x7xf32>) -> tensor<4xi64>
  func.return %i : tensor<4xi64>
}
// CHECK: tg.arg_reduce: kind must be one of max, min, got 'median'

// -----

func.func @arg_reduce_of_an_empty_dim(%x: tensor<4x0xf32>) -> tensor<4xi64> {
  %i = tg.arg_reduce %x {kind = "max", dim = 1 : i64} : (tensor<4x0xf32>) -> tensor<4xi64>
  func.return %i : tensor<4xi64>
}
// CHECK: tg.arg_reduce: dim 1 must be a non-empty dim of [4, 0]

// -----

func.func @any_of_floats(%x: tensor<4x7xf32>) -> tensor<4xf32> {
  %n = tg.any %x {dims = array<i64: 1>} : (tensor<4x7xf32>) -> tensor<4xf32>
  func.return %n : tensor<4xf32>
}
// CHECK: tg.any: the input holds i1, got tensor<4x7xf32>

// -----

func.func @tanh_of_integers(%x: tensor<2x3xi64>) -> tensor<2x3xi64> {
  %y = tg.tanh %x : tensor<2x3xi64>
  func.return %y : tensor<2x3xi64>
}
// CHECK: tg.tanh: 'tanh' of integers is not defined (torch computes it in floats), got tensor<2x3xi64>

// -----

func.func @matmul_of_bools(%a: tensor<2x3xi1>, %b: tensor<3x5xi1>) -> tensor<2x5xi1> {
  %y = tg.matmul %a, %b : (tensor<2x3xi1>, tensor<3x5xi1>) -> tensor<2x5xi1>
  func.return %y : tensor<2x5xi1>
}
// CHECK: tg.matmul: operands and result of one dtype, float32, float64 or an integer, got i1

// -----

func.func @lapack_wrong_result(%a: tensor<2x4x4xf32>) -> tensor<2x3xi32> {
  %p = tg.lapack "getrf" "pivots" %a : (tensor<2x4x4xf32>) -> tensor<2x3xi32>
  func.return %p : tensor<2x3xi32>
}
// CHECK: tg.lapack: getrf's pivots is tensor<2x4xi32>, got tensor<2x3xi32>

// -----

func.func @lapack_batches_differ(%lu: tensor<2x4x4xf32>, %p: tensor<2x4xi32>, %b: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %x = tg.lapack "getrs" "x" %lu, %p, %b : (tensor<2x4x4xf32>, tensor<2x4xi32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  func.return %x : tensor<4x3xf32>
}
// CHECK: tg.lapack: getrs: the operands' batch dims differ: [[], [2]]

// -----

func.func @lapack_unknown_output(%a: tensor<4x4xf32>) -> tensor<4xf32> {
  %t = tg.lapack "getrf" "tau" %a : (tensor<4x4xf32>) -> tensor<4xf32>
  func.return %t : tensor<4xf32>
}
// CHECK: tg.lapack: getrf has no output 'tau' (it has lu, pivots, info)

// -----

func.func @lapack_integer(%a: tensor<4x4xi64>) -> tensor<4x4xi64> {
  %t = tg.lapack "getrf" "lu" %a : (tensor<4x4xi64>) -> tensor<4x4xi64>
  func.return %t : tensor<4x4xi64>
}
// CHECK: tg.lapack: float32 or float64 matrices, got i64

// -----

func.func @lapack_rows_do_not_fit(%lu: tensor<4x4xf32>, %p: tensor<4xi32>, %b: tensor<3x2xf32>) -> tensor<4x2xf32> {
  %x = tg.lapack "getrs" "x" %lu, %p, %b : (tensor<4x4xf32>, tensor<4xi32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  func.return %x : tensor<4x2xf32>
}
// CHECK: tg.lapack: getrs: a factored [n, n] matrix, [n] pivots and [n, k] rows, got [[4, 4], [4], [3, 2]]

// -----

func.func @two_symbols_do_not_broadcast(%x: tensor<?x4xf32, ["seq"]>, %y: tensor<?x4xf32, ["b"]>) -> tensor<?x4xf32, ["seq"]> {
  %a = tg.add %x, %y : (tensor<?x4xf32, ["seq"]>, tensor<?x4xf32, ["b"]>) -> tensor<?x4xf32, ["seq"]>
  func.return %a : tensor<?x4xf32, ["seq"]>
}
// CHECK: tg.add{{.*}}shapes [seq, 4], [b, 4] do not broadcast: dim -2 has sizes [b, seq]

// -----

func.func @reshape_keeps_the_count(%x: tensor<?x64xf32, ["seq"]>) -> tensor<?x32xf32, ["seq"]> {
  %r = tg.reshape %x : (tensor<?x64xf32, ["seq"]>) -> tensor<?x32xf32, ["seq"]>
  func.return %r : tensor<?x32xf32, ["seq"]>
}
// CHECK: tg.reshape: cannot reshape [seq, 64] (64*seq elements) to [seq, 32] (32*seq elements)
