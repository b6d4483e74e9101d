// RUN: tg-opt %s -p convert-aten-to-tensor | filecheck %s
// RUN: tg-opt %s -p constant-fold,widen-dtypes,convert-aten-to-tensor,canonicalize,constant-fold,fuse-attention,fuse-gelu,fuse-layer-norm,fuse-rms-norm,fuse-silu,fuse-rope,fuse-bias-activation,absorb-blas-flags,absorb-attention-layouts,fuse-rms-norm-rope,fuse-matmul-epilogue,winograd-convolution,fuse-elementwise,canonicalize,dce | filecheck %s --check-prefix=OPT
// A transformer block's attention half whose sequence length is the symbol seq (imported from
// torch.export with Dim("seq", min=1, max=512)): convert-aten-to-tensor keeps every size's
// expression, and so does the whole tg optimisation (the compile pipeline's tensor passes):
// the linear's bias and the qkv permute are absorbed as for a static graph.

// CHECK: builtin.module attributes {tg.symbols = {seq = array<i64: 1, 512>}}
// CHECK: tg.matmul %x, %{{.*}} : (tensor<2x?x32xf32, ["seq"]>, tensor<32x96xf32>) -> tensor<2x?x96xf32, ["seq"]>
// CHECK: tg.reshape %{{.*}} : (tensor<2x?x96xf32, ["seq"]>) -> tensor<2x?x3x4x8xf32, ["seq"]>
// CHECK: tg.transpose %{{.*}} {perm = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x?x3x4x8xf32, ["seq"]>) -> tensor<3x2x4x?x8xf32, ["seq"]>
// CHECK: tg.attention {{.*}} -> tensor<2x4x?x8xf32, ["seq"]>
// CHECK: tg.layer_norm {{.*}} -> tensor<2x?x32xf32, ["seq"]>

// OPT: tg.matmul %x, %p_qkv_weight, %p_qkv_bias {transpose_b = true, beta = 1.000000e+00 : f32} : (tensor<2x?x32xf32, ["seq"]>, tensor<96x32xf32>, tensor<96xf32>) -> tensor<2x?x96xf32, ["seq"]>
// OPT: tg.attention {{.*}}out_seq_major = true} : (tensor<2x4x?x8xf32, ["seq"]>, tensor<2x4x?x8xf32, ["seq"]>, tensor<2x4x?x8xf32, ["seq"]>) -> tensor<2x?x4x8xf32, ["seq"]>
// OPT-NOT: tg.transpose %scaled_dot_product_attention
// OPT: tg.layer_norm {{.*}} : (tensor<2x?x32xf32, ["seq"]>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x?x32xf32, ["seq"]>

builtin.module attributes {tg.symbols = {seq = array<i64: 1, 512>}} {
  func.func @forward(%x: tensor<2x?x32xf32, ["seq"]>) -> tensor<2x?x32xf32, ["seq"]> {
    %p_qkv_weight = tg.weight "qkv.weight" : tensor<96x32xf32>
    %p_qkv_bias = tg.weight "qkv.bias" : tensor<96xf32>
    %p_o_weight = tg.weight "o.weight" : tensor<32x32xf32>
    %p_o_bias = tg.weight "o.bias" : tensor<32xf32>
    %p_ln_weight = tg.weight "ln.weight" : tensor<32xf32>
    %p_ln_bias = tg.weight "ln.bias" : tensor<32xf32>
    %linear = aten.linear %x, %p_qkv_weight, %p_qkv_bias : (tensor<2x?x32xf32, ["seq"]>, tensor<96x32xf32>, tensor<96xf32>) -> tensor<2x?x96xf32, ["seq"]>
    %view = aten.view %linear {size = array<i64: 2, -9223372036854775808, 3, 4, 8>} : (tensor<2x?x96xf32, ["seq"]>) -> tensor<2x?x3x4x8xf32, ["seq"]>
    %permute = aten.permute %view {dims = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x?x3x4x8xf32, ["seq"]>) -> tensor<3x2x4x?x8xf32, ["seq"]>
    %slice = aten.slice.Tensor %permute {start = 0 : i64, end = 1 : i64} : (tensor<3x2x4x?x8xf32, ["seq"]>) -> tensor<1x2x4x?x8xf32, ["seq"]>
    %slice_1 = aten.slice.Tensor %permute {start = 1 : i64, end = 2 : i64} : (tensor<3x2x4x?x8xf32, ["seq"]>) -> tensor<1x2x4x?x8xf32, ["seq"]>
    %slice_2 = aten.slice.Tensor %permute {start = 2 : i64, end = 3 : i64} : (tensor<3x2x4x?x8xf32, ["seq"]>) -> tensor<1x2x4x?x8xf32, ["seq"]>
    %squeeze = aten.squeeze.dim %slice {dim = 0 : i64} : (tensor<1x2x4x?x8xf32, ["seq"]>) -> tensor<2x4x?x8xf32, ["seq"]>
    %squeeze_1 = aten.squeeze.dim %slice_1 {dim = 0 : i64} : (tensor<1x2x4x?x8xf32, ["seq"]>) -> tensor<2x4x?x8xf32, ["seq"]>
    %squeeze_2 = aten.squeeze.dim %slice_2 {dim = 0 : i64} : (tensor<1x2x4x?x8xf32, ["seq"]>) -> tensor<2x4x?x8xf32, ["seq"]>
    %scaled_dot_product_attention = aten.scaled_dot_product_attention %squeeze, %squeeze_1, %squeeze_2 : (tensor<2x4x?x8xf32, ["seq"]>, tensor<2x4x?x8xf32, ["seq"]>, tensor<2x4x?x8xf32, ["seq"]>) -> tensor<2x4x?x8xf32, ["seq"]>
    %transpose = aten.transpose.int %scaled_dot_product_attention {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<2x4x?x8xf32, ["seq"]>) -> tensor<2x?x4x8xf32, ["seq"]>
    %view_1 = aten.view %transpose {size = array<i64: 2, -9223372036854775808, 32>} : (tensor<2x?x4x8xf32, ["seq"]>) -> tensor<2x?x32xf32, ["seq"]>
    %linear_1 = aten.linear %view_1, %p_o_weight, %p_o_bias : (tensor<2x?x32xf32, ["seq"]>, tensor<32x32xf32>, tensor<32xf32>) -> tensor<2x?x32xf32, ["seq"]>
    %add = aten.add.Tensor %x, %linear_1 : (tensor<2x?x32xf32, ["seq"]>, tensor<2x?x32xf32, ["seq"]>) -> tensor<2x?x32xf32, ["seq"]>
    %layer_norm = aten.layer_norm %add weight %p_ln_weight : tensor<32xf32> bias %p_ln_bias : tensor<32xf32> {normalized_shape = array<i64: 32>, cudnn_enable = false} : tensor<2x?x32xf32, ["seq"]> -> tensor<2x?x32xf32, ["seq"]>
    func.return %layer_norm : tensor<2x?x32xf32, ["seq"]>
  }
}
