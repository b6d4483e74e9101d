"""aten → tg: reductions (mean, sum, amax, amin, prod, any over dims; argmax, argmin, max.dim,
min.dim; var; the 2-norm), softmax / log_softmax and cumsum.

Dims are normalised (negative counted from the end), deduplicated and sorted; an empty or absent
dim list means every dim, as in torch.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloat, IntegerAttr, IntegerType, f64, i1, i64
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.shapes import ShapeError, numel
from tensor_graphs.dialects.symbolic import shaped
from tensor_graphs.dialects.tensor import (
    AbsOp,
    AmaxOp,
    AminOp,
    AnyOp,
    ArgReduceOp,
    ConstantOp,
    CumsumOp,
    DivOp,
    LogSoftmaxOp,
    MeanOp,
    MulOp,
    PowOp,
    ProdOp,
    SoftmaxOp,
    SqrtOp,
    SubOp,
    SumOp,
    shape_of,
)
from tensor_graphs.lowering.aten_to_tensor.common import OpList, append, element_type, elementwise_body, notify_match_failure, scalar_constant

_REDUCTIONS = {
    aten.MeanDimOp: MeanOp,
    aten.MeanOp: MeanOp,
    aten.SumDimIntListOp: SumOp,
    aten.SumOp: SumOp,
    aten.AmaxOp: AmaxOp,
    aten.AminOp: AminOp,
    aten.MaxOp: AmaxOp,
    aten.MinOp: AminOp,
    aten.ProdOp: ProdOp,
    aten.ProdDimIntOp: ProdOp,
    aten.AnyOp: AnyOp,
    aten.AnyDimOp: AnyOp,
    aten.AnyDimsOp: AnyOp,
}

_SOFTMAX = {
    aten.SoftmaxIntOp: SoftmaxOp,
    aten.SoftmaxOp: SoftmaxOp,
    aten.LogSoftmaxIntOp: LogSoftmaxOp,
    aten.LogSoftmaxOp: LogSoftmaxOp,
}


class ReducePattern(RewritePattern):
    """``mean.dim``, ``sum``, ``sum.dim_IntList`` and ``amax`` as ``tg.mean/sum/amax`` over sorted dims.

    ```mlir
    %y = aten.mean.dim %x {dim = array<i64: -1, 0>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
    // becomes
    %y = tg.mean %x {dims = array<i64: 0, 2>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
    ```
    A ``dtype`` other than the input's is a ``tg.cast`` of the input first.
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        tg_op = _REDUCTIONS.get(type(op))
        if tg_op is None:
            return
        try:
            dims = reduced_dims(op)
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        keepdim = bool(op.keepdim.value.data) if hasattr(op, "keepdim") else False
        ops = OpList()
        x = ops.cast(op.self, element_type(op.results[0]))  # any: "!= 0", as the cast to bool
        if tg_op is AnyOp and element_type(op.results[0]) != i1:  # any of uint8 gives uint8
            y = ops.cast(ops.add(AnyOp(ops.cast(op.self, i1), tuple(dims), keepdim)), element_type(op.results[0]))
        else:
            y = ops.add(tg_op(x, tuple(dims), keepdim))
        rewriter.replace(op, ops, [y])


def reduced_dims(op) -> list[int]:
    """The sorted, non-negative dims ``op`` reduces: its ``dim`` (an int or a list; None or an
    empty list: every dim), as torch reads them. A ShapeError for a dim out of range."""
    rank = len(shape_of(op.self))
    attr = getattr(op, "dim", None)
    if attr is None:
        dims = []
    elif isinstance(attr, IntegerAttr):
        dims = [attr.value.data]
    else:
        dims = list(attr.get_values())
    return sorted({normalize_dim(d, max(rank, 1)) for d in dims}) if dims and rank else list(range(rank))


class ArgReducePattern(RewritePattern):
    """``argmax``/``argmin`` → ``tg.arg_reduce`` (no dim: over the flattened input), and
    ``max.dim``/``min.dim`` → ``tg.amax``/``tg.amin`` for the values and ``tg.arg_reduce`` for
    the indices (a NaN is the largest and the smallest, its first position the index).

    ```mlir
    %v, %i = aten.max.dim %x {dim = 1 : i64} : (tensor<4x7xf32>) -> (tensor<4xf32>, tensor<4xi64>)
    // becomes
    %v = tg.amax %x {dims = array<i64: 1>} : (tensor<4x7xf32>) -> tensor<4xf32>
    %i = tg.arg_reduce %x {kind = "max", dim = 1 : i64} : (tensor<4x7xf32>) -> tensor<4xi64>
    ```
    """

    _KINDS = {aten.ArgmaxOp: "max", aten.ArgminOp: "min", aten.MaxDimOp: "max", aten.MinDimOp: "min"}

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        kind = self._KINDS.get(type(op))
        if kind is None:
            return
        shape = shape_of(op.self)
        ops = OpList()
        x = op.self
        if op.dim is None or not shape:  # argmax over everything: the flattened input
            x, dim, keepdim = ops.reshape(x, (max(numel(shape), 1),)), 0, False
        else:
            try:
                dim, keepdim = normalize_dim(op.dim.value.data, len(shape)), bool(op.keepdim.value.data)
            except ShapeError as e:
                return notify_match_failure(op, str(e))
        if shape_of(x)[dim] == 0:
            return notify_match_failure(op, f"{op.name} of an empty dim (torch raises)")
        key = ops.cast(x, IntegerType(8)) if element_type(x) == i1 else x  # bools compare as 0 < 1, not signed
        indices = ops.reshape(ops.add(ArgReduceOp(key, kind, dim, keepdim)), shape_of(op.results[-1]))
        if isinstance(op, aten.ArgmaxOp | aten.ArgminOp):
            rewriter.replace(op, ops, [indices])
            return
        values = ops.add((AmaxOp if kind == "max" else AminOp)(x, (dim,), keepdim))
        rewriter.replace(op, ops, [values, indices])


class VariancePattern(RewritePattern):
    """``var.correction`` / ``var.dim`` / ``var_mean.correction`` (both results):
    ``sum((x - mean)^2) / max(0, N - correction)`` over the
    dims (``N`` their element count; ``unbiased`` is correction 1), as torch computes it (a
    zero divisor gives NaN or inf).

    ```mlir
    %v = aten.var.correction %x {dim = array<i64: 1>, correction = 1 : i64} : (tensor<4x7xf32>) -> tensor<4xf32>
    // becomes
    %m = tg.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x7xf32>) -> tensor<4x1xf32>
    %d = tg.sub %x, %m : (tensor<4x7xf32>, tensor<4x1xf32>) -> tensor<4x7xf32>
    %q = tg.mul %d, %d : (tensor<4x7xf32>, tensor<4x7xf32>) -> tensor<4x7xf32>
    %s = tg.sum %q {dims = array<i64: 1>} : (tensor<4x7xf32>) -> tensor<4xf32>
    %n = tg.constant dense<6.0> : tensor<f32>
    %v = tg.div %s, %n : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.VarCorrectionOp | aten.VarDimOp | aten.VarMeanCorrectionOp):
            return
        try:
            dims = tuple(reduced_dims(op))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        if isinstance(op, aten.VarDimOp):
            correction = 1.0 if bool(op.unbiased.value.data) else 0.0
        else:
            correction = float(op.correction.value.data) if op.correction is not None else 1.0
        shape = shape_of(op.self)
        count = numel([shape[d] for d in dims])
        keepdim = bool(op.keepdim.value.data)
        out = element_type(op.results[0])
        ops = OpList()
        x = ops.cast(op.self, out)
        mean = ops.add(MeanOp(x, dims, True))
        d = ops.add(SubOp(x, mean, x.type))
        total = ops.add(SumOp(ops.add(MulOp(d, d, x.type)), dims, keepdim))
        y = ops.add(DivOp(total, ops.add(scalar_constant(max(0.0, count - correction), out)), total.type))
        if isinstance(op, aten.VarMeanCorrectionOp):  # (var, mean)
            rewriter.replace(op, ops, [y, mean if keepdim else ops.reshape(mean, shape_of(op.results[1]))])
            return
        rewriter.replace(op, ops, [y])


class SoftmaxPattern(RewritePattern):
    """``softmax.int``/``_softmax`` → ``tg.softmax``; ``log_softmax.int``/``_log_softmax`` → ``tg.log_softmax``.

    ```mlir
    %y = aten.softmax.int %x {dim = -1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %y = tg.softmax %x {dim = 1 : i64} : tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        tg_op = _SOFTMAX.get(type(op))
        if tg_op is None:
            return
        if op.result.type != op.self.type:
            return notify_match_failure(op, f"the result type {op.result.type} differs from the input's {op.self.type}")
        shape = shape_of(op.self)
        if not shape:
            return notify_match_failure(op, "softmax of a rank-0 tensor")
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        rewriter.replace(op, tg_op(op.self, dim))


#: aten scan -> `tg.cumsum`'s reduce
_SCANS: dict[type, str] = {aten.CumsumOp: "sum", aten.CumprodOp: "prod", aten.LogcumsumexpOp: "logsumexp",
                           aten.CummaxOp: "max", aten.CumminOp: "min"}


class CumsumPattern(RewritePattern):
    """``cumsum``, ``cumprod``, ``logcumsumexp``, ``cummax`` and ``cummin`` (of run-time data:
    constant-fold removes the rest) are ``tg.cumsum`` with that running reduction, in torch's
    result dtype (int64 for bool and integer sums and products), the input cast to it first.
    cummax/cummin also give each element's position of the running extremum (`_scan_positions`).

    ```mlir
    %p = aten.cumsum %m {dim = -1 : i64} : (tensor<2x7xi32>) -> tensor<2x7xi64>
    // becomes
    %c = tg.cast %m : (tensor<2x7xi32>) -> tensor<2x7xi64>
    %p = tg.cumsum %c {dim = 1 : i64} : tensor<2x7xi64>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        reduce = _SCANS.get(type(op))
        if reduce is None:
            return
        shape = shape_of(op.self)
        try:
            dim = normalize_dim(op.dim.value.data, max(len(shape), 1))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        out = element_type(op.results[0])
        if reduce == "logsumexp" and isinstance(out, IntegerType):
            return notify_match_failure(op, f"logcumsumexp to {out}: float results only")
        ops = OpList()
        x = ops.cast(op.self, out)
        y = ops.cast(ops.add(CumsumOp(ops.cast(x, _scan_type(out, reduce)), dim, reduce)), out) if shape else x  # rank 0: itself
        if len(op.results) == 1:
            return rewriter.replace(op, ops, [y])
        positions = _scan_positions(ops, x, y, dim) if shape else ops.add(scalar_constant(0, i64))
        rewriter.replace(op, ops, [y, positions])


def _scan_type(out, reduce: str):
    """The element type a scan runs in: float64 for the float sums, products and logsumexp, as
    torch's CPU scans accumulate (``acc_type<float>`` is double), rounding each result once."""
    return f64 if isinstance(out, AnyFloat) and reduce in ("sum", "prod", "logsumexp") else out


def _scan_positions(ops: OpList, x, running, dim: int):
    """Where cummax/cummin's running extremum came from: the last position ``j`` up to each
    element where ``x[j]`` equals the running value there (a tie takes the later position, as
    torch does) or is NaN (each NaN is its own position), as a running max of those positions."""
    shape = shape_of(x)
    along = np.arange(shape[dim], dtype=np.int64).reshape([-1 if d == dim else 1 for d in range(len(shape))])
    index = ops.add(ConstantOp(dense_from_numpy(np.ascontiguousarray(np.broadcast_to(along, shape)), i64)))
    el = element_type(x)

    def marked(block, args):
        v, r, i = args
        if isinstance(el, IntegerType):
            hit = append(block, arith.CmpiOp(v, r, "eq"))
        else:
            hit = append(block, arith.OrIOp(append(block, arith.CmpfOp(v, r, "oeq")), append(block, arith.CmpfOp(v, v, "uno"))))
        return append(block, arith.SelectOp(hit, i, append(block, arith.ConstantOp(IntegerAttr(0, i64)))))

    candidates = ops.add(elementwise_body([x, running, index], shaped(i64, shape), marked))
    return ops.add(CumsumOp(candidates, dim, "max"))


def p_norm(ops: OpList, x, p: float, dims: tuple[int, ...], keepdim: bool = False):
    """``||x||_p`` over ``dims``: p = 2 ``sqrt(sum(x * x))``, 1 ``sum |x|``, inf ``max |x|``,
    -inf ``min |x|``, 0 the count of nonzeros, else ``(sum |x|^p)^(1/p)``."""
    el = element_type(x)
    if p == 2.0:
        return ops.add(SqrtOp(ops.add(SumOp(ops.add(MulOp(x, x, x.type)), dims, keepdim))))
    a = ops.add(AbsOp(x))
    if p == float("inf"):
        return ops.add(AmaxOp(a, dims, keepdim))
    if p == float("-inf"):
        return ops.add(AminOp(a, dims, keepdim))
    if p == 0.0:
        return ops.add(SumOp(ops.cast(ops.cast(a, i1), el), dims, keepdim))
    if p == 1.0:
        return ops.add(SumOp(a, dims, keepdim))
    powered = ops.add(SumOp(ops.add(PowOp(a, ops.add(scalar_constant(p, el)), a.type)), dims, keepdim))
    return ops.add(PowOp(powered, ops.add(scalar_constant(1.0 / p, el)), powered.type))


class VectorNormPattern(RewritePattern):
    """``linalg_vector_norm`` of any order (`p_norm`) over the dims (all of them when absent).

    ```mlir
    %n = aten.linalg_vector_norm %x {dim = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
    // becomes
    %sq = tg.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    %s = tg.sum %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
    %n = tg.sqrt %s : tensor<2x1xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LinalgVectorNormOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.self)
        try:
            dims = sorted({normalize_dim(d, max(len(shape), 1)) for d in op.dim.get_values()}) if op.dim is not None and len(op.dim.get_values()) else list(range(len(shape)))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        ops = OpList()
        x = ops.cast(op.self, element_type(op.results[0]))
        y = p_norm(ops, x, float(op.ord.value.data), tuple(dims), bool(op.keepdim.value.data))
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


def populate_reduction_patterns() -> list[RewritePattern]:
    return [ReducePattern(), ArgReducePattern(), VariancePattern(), SoftmaxPattern(), CumsumPattern(), VectorNormPattern()]
