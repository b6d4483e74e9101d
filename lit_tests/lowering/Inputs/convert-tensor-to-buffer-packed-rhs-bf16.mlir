// A convolution pinned to the bf16 convolution GEMM (matmul.packed_rhs_bf16): see ../convert-tensor-to-buffer-quantized.mlir.
func.func @forward(%input: tensor<1x3x12x12xf32>) -> tensor<1x20x12x12xf32> {
  %p_0_weight = tg.weight "0.weight" : tensor<20x3x3x3xf32>
  %p_0_bias = tg.weight "0.bias" : tensor<20xf32>
  %conv2d = tg.im2col %input {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x3x12x12xf32>) -> tensor<1x3x3x3x12x12xf32>
  %conv2d_1 = tg.reshape %p_0_weight : (tensor<20x3x3x3xf32>) -> tensor<20x27xf32>
  %conv2d_2 = tg.reshape %conv2d : (tensor<1x3x3x3x12x12xf32>) -> tensor<1x27x144xf32>
  %conv2d_3 = tg.reshape %p_0_bias : (tensor<20xf32>) -> tensor<20x1xf32>
  %relu = tg.matmul %conv2d_1, %conv2d_2, %conv2d_3 {tg.kernel = "matmul.packed_rhs_bf16", beta = 1.000000e+00 : f32, activation = "relu"} : (tensor<20x27xf32>, tensor<1x27x144xf32>, tensor<20x1xf32>) -> tensor<1x20x144xf32>
  %relu_1 = tg.reshape %relu : (tensor<1x20x144xf32>) -> tensor<1x20x12x12xf32>
  func.return %relu_1 : tensor<1x20x12x12xf32>
}
