// A Winograd convolution pinned to its direct path in bf16 (winograd_conv.direct_bf16): see ../convert-tensor-to-buffer-winograd.mlir.
func.func @direct_bf16(%x: tensor<1x17x9x9xf32>) -> tensor<1x32x9x9xf32> {
  %w = tg.weight "conv.weight" : tensor<32x17x3x3xf32>
  %b = tg.weight "conv.bias" : tensor<32xf32>
  %b3 = tg.reshape %b : (tensor<32xf32>) -> tensor<32x1x1xf32>
  %y = tg.winograd_conv %x, %w, %b3 {padding = array<i64: 1, 1>, tile = 2 : i64, beta = 1.0 : f32, activation = "relu", tg.kernel = "winograd_conv.direct_bf16"} : (tensor<1x17x9x9xf32>, tensor<32x17x3x3xf32>, tensor<32x1x1xf32>) -> tensor<1x32x9x9xf32>
  func.return %y : tensor<1x32x9x9xf32>
}
