// A bfloat16 tensor computed at run time (from an argument): refused, saying so.
func.func @bf16_at_run_time(%x: tensor<2xf32>) -> tensor<2xf32> {
  %b = aten.to.dtype %x {dtype = "bfloat16"} : (tensor<2xf32>) -> tensor<2xbf16>
  %f = aten.to.dtype %b {dtype = "float32"} : (tensor<2xbf16>) -> tensor<2xf32>
  func.return %f : tensor<2xf32>
}
