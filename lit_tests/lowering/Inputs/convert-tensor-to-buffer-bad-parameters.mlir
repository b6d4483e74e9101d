// A kernel parameter pinned on a tg op that its kernel cannot take (convert-tensor-to-buffer.mlir).
func.func @bad_panel_width(%x: tensor<5x32xf32>) -> tensor<5x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x32xf32>
  %y = tg.matmul %x, %w {transpose_b = true, tg.kernel = "matmul.packed", tg.nr = 24 : i64} : (tensor<5x32xf32>, tensor<100x32xf32>) -> tensor<5x100xf32>
  func.return %y : tensor<5x100xf32>
}
