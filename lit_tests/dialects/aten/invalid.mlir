// RUN: tg-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Every verifier message of the aten dialect, one case each.

func.func @mm_k_mismatch(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  %y = aten.mm %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return %y : tensor<2x5xf32>
}
// CHECK: aten.mm: matmul contraction dims differ: lhs [2, 3] (transpose_a=False) has K=3, rhs [4, 5] (transpose_b=False) has K=4

// -----

func.func @mm_rank3(%a: tensor<1x2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x5xf32> {
  %y = aten.mm %a, %b : (tensor<1x2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  func.return %y : tensor<2x5xf32>
}
// CHECK: aten.mm: self must have rank 2, got [1, 2, 3]

// -----

func.func @mm_wrong_result(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x4xf32> {
  %y = aten.mm %a, %b : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x4xf32>
  func.return %y : tensor<2x4xf32>
}
// CHECK: aten.mm: result shape [2, 4] should be [2, 5]

// -----

func.func @mm_complex(%a: tensor<2x3xcomplex<f32>>, %b: tensor<3x5xcomplex<f32>>) -> tensor<2x5xcomplex<f32>> {
  %y = aten.mm %a, %b : (tensor<2x3xcomplex<f32>>, tensor<3x5xcomplex<f32>>) -> tensor<2x5xcomplex<f32>>
  func.return %y : tensor<2x5xcomplex<f32>>
}
// CHECK: aten.mm: tensors of float64, float32, float16, bfloat16, int64, int32, int16, int8, uint8, bool are supported, got tensor<2x3xcomplex<f32>>

// -----

func.func @bmm_batch_mismatch(%a: tensor<2x2x3xf32>, %b: tensor<4x3x5xf32>) -> tensor<2x2x5xf32> {
  %y = aten.bmm %a, %b : (tensor<2x2x3xf32>, tensor<4x3x5xf32>) -> tensor<2x2x5xf32>
  func.return %y : tensor<2x2x5xf32>
}
// CHECK: aten.bmm: batch sizes differ: [2, 2, 3] and [4, 3, 5]

// -----

func.func @bmm_rank2(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x5xf32> {
  %y = aten.bmm %a, %b : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  func.return %y : tensor<2x5xf32>
}
// CHECK: aten.bmm: self must have rank 3, got [2, 3]

// -----

func.func @matmul_wrong_result(%v: tensor<3xf32>, %b: tensor<4x3x5xf32>) -> tensor<4x1x5xf32> {
  %y = aten.matmul %v, %b : (tensor<3xf32>, tensor<4x3x5xf32>) -> tensor<4x1x5xf32>
  func.return %y : tensor<4x1x5xf32>
}
// CHECK: aten.matmul: result shape [4, 1, 5] should be [4, 5]

// -----

func.func @linear_in_features(%x: tensor<2x7xf32>, %w: tensor<6x8xf32>) -> tensor<2x6xf32> {
  %y = aten.linear %x, %w : (tensor<2x7xf32>, tensor<6x8xf32>) -> tensor<2x6xf32>
  func.return %y : tensor<2x6xf32>
}
// CHECK: aten.linear: input [2, 7] does not match weight [6, 8] (in_features 8)

// -----

func.func @linear_bias(%x: tensor<2x8xf32>, %w: tensor<6x8xf32>, %b: tensor<5xf32>) -> tensor<2x6xf32> {
  %y = aten.linear %x, %w, %b : (tensor<2x8xf32>, tensor<6x8xf32>, tensor<5xf32>) -> tensor<2x6xf32>
  func.return %y : tensor<2x6xf32>
}
// CHECK: aten.linear: bias shape [5] should be [6]

// -----

func.func @linear_weight_rank(%x: tensor<2x8xf32>, %w: tensor<8xf32>) -> tensor<2xf32> {
  %y = aten.linear %x, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}
// CHECK: aten.linear: weight must have rank 2, got [8]

// -----

func.func @addmm_bad_self(%b: tensor<3xf32>, %x: tensor<2x8xf32>, %w: tensor<8x6xf32>) -> tensor<2x6xf32> {
  %y = aten.addmm %b, %x, %w : (tensor<3xf32>, tensor<2x8xf32>, tensor<8x6xf32>) -> tensor<2x6xf32>
  func.return %y : tensor<2x6xf32>
}
// CHECK: aten.addmm: shapes [3], [2, 6] do not broadcast: dim -1 has sizes [3, 6]

// -----

func.func @t_rank3(%x: tensor<2x3x4xf32>) -> tensor<4x3x2xf32> {
  %y = aten.t %x : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
  func.return %y : tensor<4x3x2xf32>
}
// CHECK: aten.t: self must have rank 0 or 1 or 2, got [2, 3, 4]

// -----

func.func @transpose_dim_range(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %y = aten.transpose.int %x {dim0 = 0 : i64, dim1 = 2 : i64} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}
// CHECK: aten.transpose.int: dim 2 is out of range for rank 2

// -----

func.func @permute_not_permutation(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %y = aten.permute %x {dims = array<i64: 0, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return %y : tensor<2x3x4xf32>
}
// CHECK: aten.permute: perm [0, 0, 1] is not a permutation of the 3 dims of [2, 3, 4]

// -----

func.func @permute_wrong_result(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %y = aten.permute %x {dims = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return %y : tensor<2x3x4xf32>
}
// CHECK: aten.permute: result shape [2, 3, 4] should be [4, 2, 3]

// -----

func.func @view_numel(%x: tensor<2x3xf32>) -> tensor<7xf32> {
  %y = aten.view %x {size = array<i64: 7>} : (tensor<2x3xf32>) -> tensor<7xf32>
  func.return %y : tensor<7xf32>
}
// CHECK: aten.view: cannot view 6 elements as [7]

// -----

func.func @reshape_two_holes(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = aten.reshape %x {shape = array<i64: -1, -1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK: aten.reshape: size [-1, -1] has more than one -1

// -----

func.func @unsqueeze_numel(%x: tensor<2x3xf32>) -> tensor<1x2x4xf32> {
  %y = aten.unsqueeze %x {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<1x2x4xf32>
  func.return %y : tensor<1x2x4xf32>
}
// CHECK: aten.unsqueeze: result [1, 2, 4] has 8 elements, self [2, 3] has 6

// -----

func.func @add_no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  %y = aten.add.Tensor %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK: aten.add.Tensor: shapes [2, 3], [4] do not broadcast: dim -1 has sizes [3, 4]

// -----

func.func @mul_scalar_type_change(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %y = aten.mul.Scalar %a {other = 2.0 : f64} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}
// CHECK: aten.mul.Scalar: result shape [3, 2] should be [2, 3]

// -----

func.func @relu_index(%a: tensor<2x3xindex>) -> tensor<2x3xindex> {
  %y = aten.relu %a : (tensor<2x3xindex>) -> tensor<2x3xindex>
  func.return %y : tensor<2x3xindex>
}
// CHECK: aten.relu: tensors of float64, float32, float16, bfloat16, int64, int32, int16, int8, uint8, bool are supported, got tensor<2x3xindex>

// -----

func.func @permute_missing_dims(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %y = aten.permute %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}
// CHECK: property 'dims' expected in operation 'aten.permute'

// -----


func.func @eq_not_bool(%a: tensor<2x3xi64>, %b: tensor<3xi64>) -> tensor<2x3xi64> {
  %y = aten.eq.Tensor %a, %b : (tensor<2x3xi64>, tensor<3xi64>) -> tensor<2x3xi64>
  func.return %y : tensor<2x3xi64>
}
// CHECK: aten.eq.Tensor: the result must be a tensor of i1, got tensor<2x3xi64>

// -----

func.func @masked_fill_float_mask(%x: tensor<2x3xf32>, %m: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = aten.masked_fill.Scalar %x, %m {value = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK: aten.masked_fill.Scalar: the mask must be a tensor of i1, got tensor<2x3xf32>

// -----

func.func @expand_bad(%x: tensor<2x3xf32>) -> tensor<4x3xf32> {
  %y = aten.expand %x {size = array<i64: 4, -1>} : (tensor<2x3xf32>) -> tensor<4x3xf32>
  func.return %y : tensor<4x3xf32>
}
// CHECK: aten.expand: shapes [2, 3], [4, 3] do not broadcast: dim -2 has sizes [2, 4]

// -----

func.func @cat_mismatch(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) -> tensor<2x6xf32> {
  %y = aten.cat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  func.return %y : tensor<2x6xf32>
}
// CHECK: aten.cat: [3, 3] does not match [2, 3] outside dim 1

// -----

func.func @embedding_float_indices(%w: tensor<10x4xf32>, %i: tensor<3xf32>) -> tensor<3x4xf32> {
  %y = aten.embedding %w, %i : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  func.return %y : tensor<3x4xf32>
}
// CHECK: aten.embedding: indices must be an integer tensor, got tensor<3xf32>

// -----

func.func @layer_norm_not_trailing(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %y = aten.layer_norm %x {normalized_shape = array<i64: 2>} : tensor<2x8xf32> -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK: aten.layer_norm: normalized_shape [2] is not the trailing dims of the input [2, 8]

// -----

func.func @softmax_dim(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %y = aten.softmax.int %x {dim = 2 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK: aten.softmax.int: dim 2 is out of range for rank 2

// -----

func.func @sdpa_int_mask(%q: tensor<1x2x4x8xf32>, %m: tensor<4x4xi64>) -> tensor<1x2x4x8xf32> {
  %y = aten.scaled_dot_product_attention %q, %q, %q, %m : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<4x4xi64>) -> tensor<1x2x4x8xf32>
  func.return %y : tensor<1x2x4x8xf32>
}
// CHECK: aten.scaled_dot_product_attention: attn_mask must be f32 (additive) or i1 (keep), got tensor<4x4xi64>

// -----

func.func @to_bad_dtype(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = aten.to.dtype %x {dtype = 3 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}
// CHECK: 3 : i64 should be of base attribute string

// -----

// The out-of-place masked_fill broadcasts self and the mask together: the result must be that shape.
func.func @masked_fill_result_not_the_broadcast(%x: tensor<1x4x1x7xf32>, %m: tensor<1x1x7x7xi1>) -> tensor<1x4x1x7xf32> {
  %y = aten.masked_fill.Scalar %x, %m {value = 0 : i64} : (tensor<1x4x1x7xf32>, tensor<1x1x7x7xi1>) -> tensor<1x4x1x7xf32>
  func.return %y : tensor<1x4x1x7xf32>
}
// CHECK: aten.masked_fill.Scalar: result shape [1, 4, 1, 7] should be [1, 4, 7, 7]
