// RUN: tg-opt %s --split-input-file -p "set-target{target=x86-64-v4},convert-tensor-to-buffer{threads=1}" | filecheck %s
// RUN: tg-opt %s --split-input-file -p "set-target{target=x86-64-v4},convert-tensor-to-buffer{pack-weights=false threads=1}" | filecheck --check-prefix=NOPACK %s
// tg -> buf for the mixture-of-experts ops: tg.argtopk sorts in a scratch of two rows, tg.put
// scatters, tg.grouped_matmul reads each expert's weights packed into the target's panels
// ([G, P, K, NR]: 64 columns on AVX-512), or through BLAS where they are (pack-weights=false).

// CHECK-LABEL: func.func @argtopk_gets_a_scratch
// CHECK:         %scratch = buf.alloc : memref<2x8xi64>
// CHECK-NEXT:    buf.argtopk ins(%p : memref<3x8xf32>) outs(%out0, %scratch : memref<3x2xi64>, memref<2x8xi64>) {k = 2 : i64, dim = 1 : i64}
func.func @argtopk_gets_a_scratch(%p: tensor<3x8xf32>) -> tensor<3x2xi64> {
  %i = tg.argtopk %p {k = 2 : i64, dim = 1 : i64} : (tensor<3x8xf32>) -> tensor<3x2xi64>
  func.return %i : tensor<3x2xi64>
}

// -----

// CHECK-LABEL: func.func @put
// CHECK:         buf.put ins(%x, %o, %v : memref<6xi64>, memref<6xi64>, memref<6xi64>) outs(%out0 : memref<6xi64>) {accumulate = true}
func.func @put(%x: tensor<6xi64>, %o: tensor<6xi64>, %v: tensor<6xi64>) -> tensor<6xi64> {
  %r = tg.put %x, %o, %v {accumulate = true} : (tensor<6xi64>, tensor<6xi64>, tensor<6xi64>) -> tensor<6xi64>
  func.return %r : tensor<6xi64>
}

// -----

// CHECK-LABEL: func.func @grouped_matmul_reads_packed_experts
// CHECK:         %w_packed = buf.packed_weight "experts.gate_up_proj" {transposed = true, source_shape = array<i64: 4, 80, 8>} : memref<4x2x8x64xf32>
// CHECK-NEXT:    buf.packed_grouped_matmul ins(%x, %w_packed, %o : memref<6x8xf32>, memref<4x2x8x64xf32>, memref<4xi64>) outs(%out0 : memref<6x80xf32>)
// NOPACK-LABEL: func.func @grouped_matmul_reads_packed_experts
// NOPACK:         %w = buf.weight "experts.gate_up_proj" : memref<4x80x8xf32>
// NOPACK-NEXT:    buf.grouped_matmul ins(%x, %w, %o : memref<6x8xf32>, memref<4x80x8xf32>, memref<4xi64>) outs(%out0 : memref<6x80xf32>) {transpose_b = true}
func.func @grouped_matmul_reads_packed_experts(%x: tensor<6x8xf32>, %o: tensor<4xi64>) -> tensor<6x80xf32> {
  %w = tg.weight "experts.gate_up_proj" : tensor<4x80x8xf32>
  %y = tg.grouped_matmul %x, %w, %o {transpose_b = true} : (tensor<6x8xf32>, tensor<4x80x8xf32>, tensor<4xi64>) -> tensor<6x80xf32>
  func.return %y : tensor<6x80xf32>
}
