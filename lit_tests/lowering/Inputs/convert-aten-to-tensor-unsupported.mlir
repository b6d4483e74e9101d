// Input of lit_tests/lowering/convert-aten-to-tensor.mlir: ops the pass must report, all at once.
func.func @expect_error_as_ops_have_no_lowering(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = aten.unsupported %x {target = "aten::erfinv", location = "layers.1 (Erfinv), model.py:12 in forward"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = aten.unsupported %0 {target = "aten::atan"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = aten.relu %1 : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %3 : tensor<2x8xf32>
}
