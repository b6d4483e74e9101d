"""Linear algebra: the ATen ops that are one LAPACK (or BLAS ``trsm``) routine each become
`tg.lapack` ops, one per result used (each calls the routine; dead ones are removed). The rest
of ``torch.linalg`` (det, inv, solve, qr, lu, pinv, cholesky_solve, ...) arrives composed of
these (`frontend/linalg_compositions.py`). float32 and float64, as torch's CPU LAPACK.

=============================  ===============================================================
aten op                        tg.lapack routine (results)
=============================  ===============================================================
linalg_lu_factor_ex            getrf (LU, pivots, info)
linalg_lu_solve                getrs (adjoint: transposed; left=False: on the transposes)
linalg_cholesky_ex             potrf, then the other triangle zeroed (L, info)
geqrf                          geqrf (a, tau)
linalg_householder_product     orgqr
ormqr                          ormqr
_linalg_eigh                   syevd (eigenvalues, eigenvectors), checked as torch checks
_linalg_svd                    gesdd (U, S, Vh), checked
linalg_solve_triangular        trsm
linalg_ldl_factor_ex           sytrf from the lower triangle, the upper zeroed (LD, pivots, info)
linalg_ldl_solve               sytrs
=============================  ===============================================================

```mlir
%lu, %p, %info = aten.linalg_lu_factor_ex %a : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xi32>, tensor<i32>)
// becomes
%lu = tg.lapack "getrf" "lu" %a : (tensor<3x3xf32>) -> tensor<3x3xf32>
%p = tg.lapack "getrf" "pivots" %a : (tensor<3x3xf32>) -> tensor<3xi32>
%info = tg.lapack "getrf" "info" %a : (tensor<3x3xf32>) -> tensor<i32>
```
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import f32, f64
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.shapes import ShapeError, broadcast_shapes
from tensor_graphs.dialects.tensor import BroadcastOp, ConstantOp, LapackOp, TransposeOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, notify_match_failure, scalar_constant
from tensor_graphs.lowering.aten_to_tensor.views import triangle


def _float_matrices(op, *values: SSAValue) -> str | None:
    """Why ``values`` cannot go to LAPACK (None when they can)."""
    for v in values:
        if element_type(v) not in (f32, f64):
            return f"{op.name}: float32 or float64 matrices (as torch's CPU LAPACK), got {element_type(v)}"
    return None


def _matrix_transpose(ops: OpList, x: SSAValue) -> SSAValue:
    rank = len(shape_of(x))
    return ops.add(TransposeOp(x, (*range(rank - 2), rank - 1, rank - 2)))


def _batched(ops: OpList, values: list[SSAValue], ranks: tuple[int, ...]) -> list[SSAValue]:
    """``values`` broadcast to their common batch dims (the dims before each one's last ``rank``)."""
    batches = [shape_of(v)[: len(shape_of(v)) - r] for v, r in zip(values, ranks)]
    common: tuple[int, ...] = ()
    for b in batches:
        common = broadcast_shapes(common, b)
    out = []
    for v, b, r in zip(values, batches, ranks):
        shape = shape_of(v)
        out.append(v if tuple(b) == tuple(common) else ops.add(BroadcastOp(v, (*common, *shape[len(shape) - r:]))))
    return out


def _batched_call(ops: OpList, routine: str, output: str, operands: list[SSAValue], ranks: tuple[int, ...],
                  params: dict[str, object] | None = None) -> SSAValue:
    """``routine``'s ``output`` over ``operands`` broadcast to common batch dims (`_batched`);
    raises ShapeError when they do not broadcast."""
    return ops.add(LapackOp(routine, output, _batched(ops, operands, ranks), params))


class LuFactorPattern(RewritePattern):
    """``linalg_lu_factor_ex``: getrf's LU, pivots (int32, 1-based as LAPACK's and torch's) and
    info; ``check_errors`` a run-time error for a singular matrix."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LinalgLuFactorExOp, rewriter: PatternRewriter) -> None:
        if (why := _float_matrices(op, op.A)) is not None:
            return notify_match_failure(op, why)
        if not op.pivot.value.data:
            return notify_match_failure(op, f"{op.name}: LU without pivoting is not on the CPU (torch refuses it too)")
        check = "torch.linalg.lu_factor_ex" if op.check_errors.value.data else None
        ops = OpList()
        results = [ops.add(LapackOp("getrf", out, [op.A], check=check)) for out in ("lu", "pivots", "info")]
        rewriter.replace(op, ops, results)


class LuSolvePattern(RewritePattern):
    """``linalg_lu_solve(LU, pivots, B, left, adjoint)``: getrs (``T`` for the adjoint); with
    ``left=False`` (``X A = B``) getrs of the transposes (``A^T X^T = B^T``)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LinalgLuSolveOp, rewriter: PatternRewriter) -> None:
        if (why := _float_matrices(op, op.LU, op.B)) is not None:
            return notify_match_failure(op, why)
        left, adjoint = bool(op.left.value.data), bool(op.adjoint.value.data)
        ops = OpList()
        b = op.B if left else _matrix_transpose(ops, op.B)
        try:
            x = _batched_call(ops, "getrs", "x", [op.LU, op.pivots, b], (2, 1, 2), {"trans": "T" if adjoint == left else "N"})
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        rewriter.replace(op, ops, [x if left else _matrix_transpose(ops, x)])


class CholeskyPattern(RewritePattern):
    """``linalg_cholesky_ex(A, upper)``: potrf on that triangle, the other zeroed; info."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LinalgCholeskyExOp, rewriter: PatternRewriter) -> None:
        if (why := _float_matrices(op, op.self)) is not None:
            return notify_match_failure(op, why)
        upper = bool(op.upper.value.data)
        check = "torch.linalg.cholesky_ex" if op.check_errors.value.data else None
        params = {"uplo": "U" if upper else "L"}
        ops = OpList()
        factor = triangle(ops, ops.add(LapackOp("potrf", "l", [op.self], params, check)), upper)
        rewriter.replace(op, ops, [factor, ops.add(LapackOp("potrf", "info", [op.self], params, check))])


class QrPattern(RewritePattern):
    """``geqrf`` (the Householder vectors below R, tau), ``linalg_householder_product`` (orgqr)
    and ``ormqr`` (its side and transpose)."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        ops = OpList()
        if isinstance(op, aten.GeqrfOp):
            if (why := _float_matrices(op, op.self)) is not None:
                return notify_match_failure(op, why)
            return rewriter.replace(op, ops, [ops.add(LapackOp("geqrf", out, [op.self])) for out in ("qr", "tau")])
        if isinstance(op, aten.LinalgHouseholderProductOp):
            if (why := _float_matrices(op, op.input)) is not None:
                return notify_match_failure(op, why)
            try:
                return rewriter.replace(op, ops, [_batched_call(ops, "orgqr", "q", [op.input, op.tau], (2, 1))])
            except ShapeError as e:
                return notify_match_failure(op, str(e))
        if isinstance(op, aten.OrmqrOp):
            if (why := _float_matrices(op, op.self, op.input3)) is not None:
                return notify_match_failure(op, why)
            params = {"side": "L" if op.left.value.data else "R", "trans": "T" if op.transpose.value.data else "N"}
            try:
                return rewriter.replace(op, ops, [_batched_call(ops, "ormqr", "out", [op.self, op.input2, op.input3], (2, 1, 2), params)])
            except ShapeError as e:
                return notify_match_failure(op, str(e))


def _empty(ops: OpList, like: SSAValue) -> SSAValue:
    """A float tensor of shape ``[0]`` (torch's eigenvectors/U/Vh when not computed)."""
    return ops.add(BroadcastOp(ops.add(scalar_constant(0, element_type(like))), (0,)))


class EighPattern(RewritePattern):
    """``_linalg_eigh(A, UPLO, compute_v)``: syevd's eigenvalues (ascending) and eigenvectors
    (columns), from the ``UPLO`` triangle; no convergence is a run-time error, as torch's."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LinalgEighOp, rewriter: PatternRewriter) -> None:
        if (why := _float_matrices(op, op.A)) is not None:
            return notify_match_failure(op, why)
        vectors = bool(op.compute_v.value.data)
        params = {"jobz": "V" if vectors else "N", "uplo": op.UPLO.data.upper()}
        ops = OpList()
        values = ops.add(LapackOp("syevd", "values", [op.A], params, "torch.linalg.eigh"))
        v = ops.add(LapackOp("syevd", "vectors", [op.A], params, "torch.linalg.eigh")) if vectors else _empty(ops, op.A)
        rewriter.replace(op, ops, [values, v])


def _empty_svd(ops: OpList, a: SSAValue, uv: bool, full: bool) -> list[SSAValue]:
    """The SVD of matrices with no element, as torch's: no singular values; U and Vh identities
    (full) or empty."""
    *batch, m, n = shape_of(a)
    el = element_type(a)

    def fill(rows: int, cols: int) -> SSAValue:
        eye = ops.add(ConstantOp(dense_from_numpy(np.eye(rows, cols), el)))
        return ops.add(BroadcastOp(eye, (*batch, rows, cols)))

    s = ops.add(BroadcastOp(ops.add(scalar_constant(0, el)), (*batch, 0)))
    if not uv:
        return [_empty(ops, a), s, _empty(ops, a)]
    return [fill(m, m if full else 0), s, fill(n if full else 0, n)]


class SvdPattern(RewritePattern):
    """``_linalg_svd(A, full_matrices, compute_uv)``: gesdd's U, S (descending), Vh (jobz ``A``,
    ``S`` or ``N``); no convergence is a run-time error, as torch's. Empty matrices: `_empty_svd`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LinalgSvdOp, rewriter: PatternRewriter) -> None:
        if (why := _float_matrices(op, op.A)) is not None:
            return notify_match_failure(op, why)
        uv = bool(op.compute_uv.value.data)
        params = {"jobz": ("A" if op.full_matrices.value.data else "S") if uv else "N"}
        ops = OpList()
        if 0 in shape_of(op.A)[-2:]:
            return rewriter.replace(op, ops, _empty_svd(ops, op.A, uv, bool(op.full_matrices.value.data)))
        s = ops.add(LapackOp("gesdd", "s", [op.A], params, "torch.linalg.svd"))
        if not uv:
            return rewriter.replace(op, ops, [_empty(ops, op.A), s, _empty(ops, op.A)])
        u = ops.add(LapackOp("gesdd", "u", [op.A], params, "torch.linalg.svd"))
        vt = ops.add(LapackOp("gesdd", "vt", [op.A], params, "torch.linalg.svd"))
        rewriter.replace(op, ops, [u, s, vt])


class SolveTriangularPattern(RewritePattern):
    """``linalg_solve_triangular(A, B, upper, left, unitriangular)``: BLAS trsm on the batch
    dims broadcast."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LinalgSolveTriangularOp, rewriter: PatternRewriter) -> None:
        if (why := _float_matrices(op, op.self, op.B)) is not None:
            return notify_match_failure(op, why)
        ops = OpList()
        params = {"left": int(bool(op.left.value.data)), "upper": int(bool(op.upper.value.data)), "transpose": 0,
                  "unit": int(bool(op.unitriangular.value.data))}
        try:
            rewriter.replace(op, ops, [_batched_call(ops, "trsm", "x", [op.self, op.B], (2, 2), params)])
        except ShapeError as e:
            return notify_match_failure(op, str(e))


class LdlPattern(RewritePattern):
    """``linalg_ldl_factor_ex`` (Bunch-Kaufman: sytrf on the lower triangle, the upper zeroed as
    torch's; pivots negative for a 2x2 block) and ``linalg_ldl_solve`` (sytrs); ``hermitian`` is
    the same for real matrices."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        ops = OpList()
        if isinstance(op, aten.LinalgLdlFactorExOp):
            if (why := _float_matrices(op, op.self)) is not None:
                return notify_match_failure(op, why)
            check = "torch.linalg.ldl_factor_ex" if op.check_errors.value.data else None
            params = {"uplo": "L"}
            ld = triangle(ops, ops.add(LapackOp("sytrf", "ld", [op.self], params, check)), upper=False)
            rest = [ops.add(LapackOp("sytrf", out, [op.self], params, check)) for out in ("pivots", "info")]
            return rewriter.replace(op, ops, [ld, *rest])
        if isinstance(op, aten.LinalgLdlSolveOp):
            if (why := _float_matrices(op, op.LD, op.B)) is not None:
                return notify_match_failure(op, why)
            try:
                return rewriter.replace(op, ops, [_batched_call(ops, "sytrs", "x", [op.LD, op.pivots, op.B], (2, 1, 2), {"uplo": "L"})])
            except ShapeError as e:
                return notify_match_failure(op, str(e))


def populate_linalg_patterns() -> list[RewritePattern]:
    return [LuFactorPattern(), LuSolvePattern(), CholeskyPattern(), QrPattern(), EighPattern(), SvdPattern(),
            SolveTriangularPattern(), LdlPattern()]
