// A GPU variant that cannot run the op (a gemv of 40 rows): the pass fails with the reason.
func.func @bad_variant(%x: tensor<40x64xf32>) -> tensor<40x8xf32> {
  %w = tg.weight "fc.weight" : tensor<8x64xf32>
  %y = tg.matmul %x, %w {transpose_b = true, tg.gpu_kernel = "matmul.gemv"} : (tensor<40x64xf32>, tensor<8x64xf32>) -> tensor<40x8xf32>
  func.return %y : tensor<40x8xf32>
}
