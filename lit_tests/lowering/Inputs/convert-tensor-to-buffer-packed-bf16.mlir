// A GEMM pinned to the bf16 GEMM (matmul.packed_bf16): see ../convert-tensor-to-buffer-quantized.mlir.
func.func @pinned_to_packed_bf16(%x: tensor<40x96xf32>) -> tensor<40x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x96xf32>
  %b = tg.weight "fc.bias" : tensor<100xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "gelu_tanh", tg.kernel = "matmul.packed_bf16"} : (tensor<40x96xf32>, tensor<100x96xf32>, tensor<100xf32>) -> tensor<40x100xf32>
  func.return %y : tensor<40x100xf32>
}
