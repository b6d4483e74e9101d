// A bf16 model's GEMM (matmul.bf16_operands): see ../convert-tensor-to-buffer-quantized.mlir.
func.func @bf16_model(%x: tensor<40x96xbf16>) -> tensor<40x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x96xbf16>
  %xw = tg.cast %x : (tensor<40x96xbf16>) -> tensor<40x96xf32>
  %ww = tg.cast %w : (tensor<100x96xbf16>) -> tensor<100x96xf32>
  %y = tg.matmul %xw, %ww {transpose_b = true} : (tensor<40x96xf32>, tensor<100x96xf32>) -> tensor<40x100xf32>
  func.return %y : tensor<40x100xf32>
}
