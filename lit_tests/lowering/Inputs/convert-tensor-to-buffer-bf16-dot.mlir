// A GEMV pinned to AVX512-BF16 dot products (convert-tensor-to-buffer-quantized.mlir).
func.func @pinned_to_bf16_dot(%x: tensor<1x33xf32>) -> tensor<1x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x33xf32>
  %y = tg.matmul %x, %w {transpose_b = true, tg.kernel = "matmul.bf16_dot"} : (tensor<1x33xf32>, tensor<100x33xf32>) -> tensor<1x100xf32>
  func.return %y : tensor<1x100xf32>
}
