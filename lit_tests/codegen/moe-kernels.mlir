// RUN: tg-opt %s -p set-target{target=x86-64-v3},convert-buffer-to-llvm --split-input-file | filecheck %s

// The mixture-of-experts kernels of convert-buffer-to-llvm (tensor_graphs/codegen/llvm/kernels_moe.py).

// The grouped GEMM by experts packed into AVX2 panels (16 columns: 2 x 8 floats): the offsets
// checked first (non-decreasing, at most S = 6: the graph's error status), then per item
// (panel, group) = (i / 4, i % 4) the group's rows in 6-row register tiles, then one tile of the
// 1..5 rows left (the module's tile functions, kernels_gemm.tile_function), with a stack tile for
// the last panel's 4 padding columns. No BLAS call.
// CHECK:       tg.errors = ["grouped matmul: the group offsets must be non-decreasing running row counts within [0, 6]"]
// CHECK-NOT:   scipy_cblas
// CHECK-LABEL: llvm.func internal @forward__0_packed_grouped_matmul(
// CHECK:         llvm.alloca %{{.*}} x f32 {alignment = 64 : i64}
// CHECK:         llvm.icmp "sle"
// CHECK:         llvm.sdiv %{{.*}}, %[[G:.*]] : i64
// CHECK-NEXT:    llvm.srem %{{.*}}, %[[G]] : i64
// CHECK:         llvm.call @tg_tile_6x2v8_s1(
// CHECK:         llvm.call @tg_tile_1x2v8_s1(
// CHECK:         llvm.call @tg_tile_5x2v8_s1(
// CHECK-LABEL: llvm.func internal @tg_tile_6x2v8_s1(
// CHECK-COUNT-12: llvm.intr.fma(%{{.*}}) : (vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
func.func @forward(%x: memref<6x64xf32>, %w: memref<4x2x64x16xf32>, %o: memref<4xi64>, %y: memref<6x20xf32>) attributes {tg.num_outputs = 1 : i64} {
  buf.packed_grouped_matmul ins(%x, %w, %o : memref<6x64xf32>, memref<4x2x64x16xf32>, memref<4xi64>) outs(%y : memref<6x20xf32>)
  func.return
}

// -----

// The same through BLAS (pack-weights=false), weights [E, N, K] read in place: sgemv for a
// group of one row (a decode step), sgemm (B transposed: 112) for more, nothing for none.
// CHECK-LABEL: llvm.func internal @forward__0_grouped_matmul(
// CHECK:         llvm.call @scipy_cblas_sgemv(
// CHECK:         llvm.icmp "sgt"
// CHECK:         llvm.call @scipy_cblas_sgemm(
func.func @forward(%x: memref<6x64xf32>, %w: memref<4x128x64xf32>, %o: memref<4xi64>, %y: memref<6x128xf32>) attributes {tg.num_outputs = 1 : i64} {
  buf.grouped_matmul ins(%x, %w, %o : memref<6x64xf32>, memref<4x128x64xf32>, memref<4xi64>) outs(%y : memref<6x128xf32>) {transpose_b = true}
  func.return
}

// -----

// argtopk: positions 0..7 written to the scratch's first row, log2(8) = 3 merge passes over
// pairs of runs (each a loop carrying the two run cursors), then the first k = 2 positions out.
// CHECK-LABEL: llvm.func internal @forward__0_argtopk(
// CHECK-COUNT-3: llvm.fcmp "ogt"
func.func @forward(%p: memref<3x8xf32>, %i: memref<3x2xi64>, %s: memref<2x8xi64>) attributes {tg.num_outputs = 1 : i64} {
  buf.argtopk ins(%p : memref<3x8xf32>) outs(%i, %s : memref<3x2xi64>, memref<2x8xi64>) {k = 2 : i64, dim = 1 : i64}
  func.return
}
