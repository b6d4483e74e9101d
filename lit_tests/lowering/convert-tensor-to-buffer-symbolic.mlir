// RUN: tg-opt %s -p set-target{target=x86-64-v3},convert-tensor-to-buffer | filecheck %s
// A tg graph whose sequence length is the symbol seq (torch.export's Dim("seq", min=1, max=512)):
// every buffer keeps its size expression (memref<1x?x96xf32, ["seq"]>), kernels are chosen for
// the largest size (the attention's scratch: tiles for seq = 512), a slice at a constant offset
// is a subview, one whose offset depends on seq a copy (buf.slice), an arange up to seq a
// buf.iota.

// CHECK: func.func @forward(%x: memref<1x?x32xf32, ["seq"]>, %out0: memref<1x?x32xf32, ["seq"]>)
// CHECK: %linear = buf.alloc : memref<1x?x96xf32, ["seq"]>
// CHECK: buf.packed_matmul ins(%x, %{{.*}}, %p_qkv_bias : memref<1x?x32xf32, ["seq"]>, memref<6x32x16xf32>, memref<96xf32>) outs(%linear : memref<1x?x96xf32, ["seq"]>)
// CHECK: buf.transpose ins(%view : memref<1x?x3x4x8xf32, ["seq"]>) outs(%permute : memref<3x1x4x?x8xf32, ["seq"]>)
// CHECK: %slice = buf.subview %permute[0] : memref<3x1x4x?x8xf32, ["seq"]> -> memref<1x1x4x?x8xf32, ["seq"]>
// CHECK: buf.slice ins(%permute : memref<3x1x4x?x8xf32, ["seq"]>) outs(%slice_1 : memref<1x1x4x?x8xf32, ["seq"]>) {dim = 0 : i64, start = 1 : i64}
// CHECK: %scratch = buf.alloc : memref<{{[0-9]+}}xf32>
// CHECK: buf.attention ins({{.*}}) outs(%scaled_dot_product_attention, %scratch : memref<1x?x4x8xf32, ["seq"]>, memref<{{[0-9]+}}xf32>)
// CHECK: buf.iota ins(:) outs(%arange : memref<?xi64, ["seq"]>) {start = 0.000000e+00 : f64, step = 1.000000e+00 : f64}
// CHECK: buf.layer_norm ins(%add, %p_ln_weight, %p_ln_bias : memref<1x?x32xf32, ["seq"]>, memref<32xf32>, memref<32xf32>) outs(%out0 : memref<1x?x32xf32, ["seq"]>)

builtin.module attributes {tg.symbols = {seq = array<i64: 1, 512>}} {
  func.func @forward(%x: tensor<1x?x32xf32, ["seq"]>) -> tensor<1x?x32xf32, ["seq"]> {
    %p_qkv_weight = tg.weight "qkv.weight" : tensor<96x32xf32>
    %p_qkv_bias = tg.weight "qkv.bias" : tensor<96xf32>
    %p_ln_weight = tg.weight "ln.weight" : tensor<32xf32>
    %p_ln_bias = tg.weight "ln.bias" : tensor<32xf32>
    %linear = tg.matmul %x, %p_qkv_weight, %p_qkv_bias {transpose_b = true, beta = 1.000000e+00 : f32} : (tensor<1x?x32xf32, ["seq"]>, tensor<96x32xf32>, tensor<96xf32>) -> tensor<1x?x96xf32, ["seq"]>
    %view = tg.reshape %linear : (tensor<1x?x96xf32, ["seq"]>) -> tensor<1x?x3x4x8xf32, ["seq"]>
    %permute = tg.transpose %view {perm = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x?x3x4x8xf32, ["seq"]>) -> tensor<3x1x4x?x8xf32, ["seq"]>
    %slice = tg.slice %permute {dim = 0 : i64, start = 0 : i64} : (tensor<3x1x4x?x8xf32, ["seq"]>) -> tensor<1x1x4x?x8xf32, ["seq"]>
    %slice_1 = tg.slice %permute {dim = 0 : i64, start = 1 : i64} : (tensor<3x1x4x?x8xf32, ["seq"]>) -> tensor<1x1x4x?x8xf32, ["seq"]>
    %slice_2 = tg.slice %permute {dim = 0 : i64, start = 2 : i64} : (tensor<3x1x4x?x8xf32, ["seq"]>) -> tensor<1x1x4x?x8xf32, ["seq"]>
    %squeeze = tg.reshape %slice : (tensor<1x1x4x?x8xf32, ["seq"]>) -> tensor<1x4x?x8xf32, ["seq"]>
    %squeeze_1 = tg.reshape %slice_1 : (tensor<1x1x4x?x8xf32, ["seq"]>) -> tensor<1x4x?x8xf32, ["seq"]>
    %squeeze_2 = tg.reshape %slice_2 : (tensor<1x1x4x?x8xf32, ["seq"]>) -> tensor<1x4x?x8xf32, ["seq"]>
    %scaled_dot_product_attention = tg.attention %squeeze, %squeeze_1, %squeeze_2 {scale = 0.353553385 : f32, out_seq_major = true} : (tensor<1x4x?x8xf32, ["seq"]>, tensor<1x4x?x8xf32, ["seq"]>, tensor<1x4x?x8xf32, ["seq"]>) -> tensor<1x?x4x8xf32, ["seq"]>
    %view_1 = tg.reshape %scaled_dot_product_attention : (tensor<1x?x4x8xf32, ["seq"]>) -> tensor<1x?x32xf32, ["seq"]>
    %arange = tg.iota {start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : tensor<?xi64, ["seq"]>
    %_to_copy = tg.cast %arange : (tensor<?xi64, ["seq"]>) -> tensor<?xf32, ["seq"]>
    %view_2 = tg.reshape %_to_copy : (tensor<?xf32, ["seq"]>) -> tensor<1x?x1xf32, ["seq"]>
    %add = tg.fused_elementwise %x, %view_1, %view_2 : (tensor<1x?x32xf32, ["seq"]>, tensor<1x?x32xf32, ["seq"]>, tensor<1x?x1xf32, ["seq"]>) -> tensor<1x?x32xf32, ["seq"]> {
    ^bb0(%0: f32, %1: f32, %2: f32):
      %3 = arith.addf %0, %1 : f32
      %4 = arith.addf %3, %2 : f32
      tg.yield %4 : f32
    }
    %layer_norm = tg.layer_norm %add, %p_ln_weight, %p_ln_bias : (tensor<1x?x32xf32, ["seq"]>, tensor<32xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, ["seq"]>
    func.return %layer_norm : tensor<1x?x32xf32, ["seq"]>
  }
}
