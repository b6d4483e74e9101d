// RUN: tg-opt %s -p set-target{target=x86-64-v3},convert-buffer-to-llvm --split-input-file | filecheck %s

// buf.lapack of convert-buffer-to-llvm (tensor_graphs/codegen/llvm/kernels_lapack.py): per
// matrix of the batch, the in-place slot copied from its operand (here LU, in the scratch), one
// LAPACKE call (row-major: 101), its info checked: negative (an argument rejected) always, positive
// (a singular matrix) because of `check`.
// CHECK:       tg.errors = ["scipy_LAPACKE_sgetrf rejected its arguments or ran out of memory (a negative info)", "torch.linalg.lu_factor: the matrix is singular (a zero pivot in U) (getrf returned a positive info; torch raises LinAlgError)"]
// CHECK:       llvm.func @scipy_LAPACKE_sgetrf(i32, i32, i32, !llvm.ptr, i32, !llvm.ptr) -> i32
// CHECK-LABEL: llvm.func internal @forward__0_lapack(
// CHECK:         %[[INFO:.*]] = llvm.call @scipy_LAPACKE_sgetrf(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (i32, i32, i32, !llvm.ptr, i32, !llvm.ptr) -> i32
// CHECK:         llvm.icmp "sge" %[[INFO]]
// CHECK:         llvm.icmp "eq" %[[INFO]]
func.func @forward(%a: memref<2x4x4xf32>, %p: memref<2x4xi32>, %scratch: memref<17xf32>) attributes {tg.num_outputs = 1 : i64} {
  buf.lapack ins(%a : memref<2x4x4xf32>) outs(%p, %scratch : memref<2x4xi32>, memref<17xf32>) {routine = "getrf", output = "pivots", check = "torch.linalg.lu_factor"}
  func.return
}

// -----

// BLAS trsm (no info) in float64, its solution copied in first.
// CHECK:       llvm.func @scipy_cblas_dtrsm(i32, i32, i32, i32, i32, i32, i32, f64, !llvm.ptr, i32, !llvm.ptr, i32)
// CHECK-LABEL: llvm.func internal @forward__0_lapack(
// CHECK:         llvm.call @scipy_cblas_dtrsm(
func.func @forward(%a: memref<3x3xf64>, %b: memref<3x2xf64>, %x: memref<3x2xf64>) attributes {tg.num_outputs = 1 : i64} {
  buf.lapack ins(%a, %b : memref<3x3xf64>, memref<3x2xf64>) outs(%x : memref<3x2xf64>) {routine = "trsm", output = "x", params = {left = 1 : i64, upper = 1 : i64, transpose = 0 : i64, unit = 0 : i64}}
  func.return
}
