// RUN: tg-opt %s --split-input-file -p convert-aten-to-tensor | filecheck %s
// convert-aten-to-tensor on the linear-algebra ops that are one LAPACK routine each: one
// tg.lapack per result (each a call of the routine), batch dims broadcast first, cholesky's other
// triangle zeroed, svd of an empty matrix as torch's identities.

// CHECK-LABEL: func.func @aten.linalg_lu_factor_ex$and_solve
// CHECK:         %[[LU:.*]] = tg.lapack "getrf" "lu" %a : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
// CHECK-NEXT:    %[[P:.*]] = tg.lapack "getrf" "pivots" %a : (tensor<2x3x3xf32>) -> tensor<2x3xi32>
// CHECK-NEXT:    %[[INFO:.*]] = tg.lapack "getrf" "info" %a : (tensor<2x3x3xf32>) -> tensor<2xi32>
// CHECK-NEXT:    %[[B:.*]] = tg.broadcast %b : (tensor<3x2xf32>) -> tensor<2x3x2xf32>
// CHECK-NEXT:    %[[X:.*]] = tg.lapack "getrs" "x" %[[LU]], %[[P]], %[[B]] {params = {trans = "N"}}
// CHECK-NEXT:    func.return %[[LU]], %[[P]], %[[INFO]], %[[X]]
func.func @aten.linalg_lu_factor_ex$and_solve(%a: tensor<2x3x3xf32>, %b: tensor<3x2xf32>) -> (tensor<2x3x3xf32>, tensor<2x3xi32>, tensor<2xi32>, tensor<2x3x2xf32>) {
  %lu, %p, %info = aten.linalg_lu_factor_ex %a : (tensor<2x3x3xf32>) -> (tensor<2x3x3xf32>, tensor<2x3xi32>, tensor<2xi32>)
  %x = aten.linalg_lu_solve %lu, %p, %b : (tensor<2x3x3xf32>, tensor<2x3xi32>, tensor<3x2xf32>) -> tensor<2x3x2xf32>
  func.return %lu, %p, %info, %x : tensor<2x3x3xf32>, tensor<2x3xi32>, tensor<2xi32>, tensor<2x3x2xf32>
}

// -----

// CHECK-LABEL: func.func @aten.linalg_cholesky_ex$checked_upper
// CHECK:         %[[U:.*]] = tg.lapack "potrf" "l" %a {params = {uplo = "U"}, check = "torch.linalg.cholesky_ex"} : (tensor<4x4xf64>) -> tensor<4x4xf64>
// CHECK-NEXT:    %[[M:.*]] = tg.constant dense<{{\[\[}}true, true, true, true], [false, true, true, true], [false, false, true, true], [false, false, false, true]]> : tensor<4x4xi1>
// CHECK:         tg.select %[[M]], %[[U]], %{{.*}}
func.func @aten.linalg_cholesky_ex$checked_upper(%a: tensor<4x4xf64>) -> tensor<4x4xf64> {
  %l, %info = aten.linalg_cholesky_ex %a {upper = true, check_errors = true} : (tensor<4x4xf64>) -> (tensor<4x4xf64>, tensor<i32>)
  func.return %l : tensor<4x4xf64>
}

// -----

// CHECK-LABEL: func.func @aten._linalg_svd$reduced
// CHECK:         tg.lapack "gesdd" "s" %a {params = {jobz = "S"}, check = "torch.linalg.svd"} : (tensor<5x3xf32>) -> tensor<3xf32>
// CHECK:         tg.lapack "gesdd" "u" %a {params = {jobz = "S"}, check = "torch.linalg.svd"} : (tensor<5x3xf32>) -> tensor<5x3xf32>
// CHECK:         tg.lapack "gesdd" "vt" %a {params = {jobz = "S"}, check = "torch.linalg.svd"} : (tensor<5x3xf32>) -> tensor<3x3xf32>
func.func @aten._linalg_svd$reduced(%a: tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<3xf32>, tensor<3x3xf32>) {
  %u, %s, %vh = aten._linalg_svd %a : (tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<3xf32>, tensor<3x3xf32>)
  func.return %u, %s, %vh : tensor<5x3xf32>, tensor<3xf32>, tensor<3x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten._linalg_svd$empty_full
// CHECK-NOT:     tg.lapack
// CHECK:         tg.constant dense<1.000000e+00> : tensor<1x1xf32>
func.func @aten._linalg_svd$empty_full(%a: tensor<2x0x1xf32>) -> (tensor<2x0x0xf32>, tensor<2x0xf32>, tensor<2x1x1xf32>) {
  %u, %s, %vh = aten._linalg_svd %a {full_matrices = true} : (tensor<2x0x1xf32>) -> (tensor<2x0x0xf32>, tensor<2x0xf32>, tensor<2x1x1xf32>)
  func.return %u, %s, %vh : tensor<2x0x0xf32>, tensor<2x0xf32>, tensor<2x1x1xf32>
}

// -----

// CHECK-LABEL: func.func @aten._linalg_eigh$values_only
// CHECK:         tg.lapack "syevd" "values" %a {params = {jobz = "N", uplo = "U"}, check = "torch.linalg.eigh"} : (tensor<3x3xf32>) -> tensor<3xf32>
// CHECK-NOT:     "vectors"
func.func @aten._linalg_eigh$values_only(%a: tensor<3x3xf32>) -> (tensor<3xf32>, tensor<0xf32>) {
  %w, %v = aten._linalg_eigh %a {UPLO = "U", compute_v = false} : (tensor<3x3xf32>) -> (tensor<3xf32>, tensor<0xf32>)
  func.return %w, %v : tensor<3xf32>, tensor<0xf32>
}

// -----

// CHECK-LABEL: func.func @aten.linalg_solve_triangular$right_unit
// CHECK:         tg.lapack "trsm" "x" %a, %b {params = {left = 0 : i64, upper = 1 : i64, transpose = 0 : i64, unit = 1 : i64}} : (tensor<3x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
func.func @aten.linalg_solve_triangular$right_unit(%a: tensor<3x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %x = aten.linalg_solve_triangular %a, %b {upper = true, left = false, unitriangular = true} : (tensor<3x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %x : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @aten.geqrf$and_householder_product
// CHECK:         %[[QR:.*]] = tg.lapack "geqrf" "qr" %a : (tensor<4x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    %[[TAU:.*]] = tg.lapack "geqrf" "tau" %a : (tensor<4x3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    tg.lapack "orgqr" "q" %[[QR]], %[[TAU]] : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
func.func @aten.geqrf$and_householder_product(%a: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %qr, %tau = aten.geqrf %a : (tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>)
  %q = aten.linalg_householder_product %qr, %tau : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  func.return %q : tensor<4x3xf32>
}
