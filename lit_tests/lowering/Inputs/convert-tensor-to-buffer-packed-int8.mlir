// A GEMM pinned to the int8 GEMM (matmul.packed_int8): see ../convert-tensor-to-buffer-quantized.mlir.
func.func @pinned_to_packed_int8(%x: tensor<40x98xf32>) -> tensor<40x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x98xf32>
  %b = tg.weight "fc.bias" : tensor<100xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "gelu_tanh", tg.kernel = "matmul.packed_int8"} : (tensor<40x98xf32>, tensor<100x98xf32>, tensor<100xf32>) -> tensor<40x100xf32>
  func.return %y : tensor<40x100xf32>
}
