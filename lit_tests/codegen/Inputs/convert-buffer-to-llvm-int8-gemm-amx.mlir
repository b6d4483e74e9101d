// The int8 GEMM of ../convert-buffer-to-llvm-int8-gemm.mlir with K = 128 (AMX's tiles take K in
// multiples of 64).
func.func @forward(%x: memref<40x128xf32>, %b: memref<100xf32>, %o: memref<40x100xf32>) attributes {tg.num_outputs = 1 : i64} {
  %q = buf.alloc : memref<40x132xi8>
  buf.quantize_rows ins(%x : memref<40x128xf32>) outs(%q : memref<40x132xi8>)
  %w = buf.packed_weight "fc.weight" {transposed = true, layout = "int8kpanels", source_shape = array<i64: 100, 128>} : memref<2x34x256xi8>
  buf.packed_matmul ins(%q, %w, %b : memref<40x132xi8>, memref<2x34x256xi8>, memref<100xf32>) outs(%o : memref<40x100xf32>) {beta = 1.0 : f32, activation = "relu"}
  func.return
}
