"""aten → tg: reductions (mean, sum, amax over dims, the 2-norm), softmax / log_softmax and cumsum.

Dims are normalised (negative counted from the end), deduplicated and sorted; an empty or absent
dim list means every dim, as in torch.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.shapes import ShapeError
from tensor_graphs.dialects.tensor import AmaxOp, CumsumOp, LogSoftmaxOp, MeanOp, MulOp, SoftmaxOp, SqrtOp, SumOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, notify_match_failure

_REDUCTIONS = {
    aten.MeanDimOp: MeanOp,
    aten.SumDimIntListOp: SumOp,
    aten.SumOp: SumOp,
    aten.AmaxOp: AmaxOp,
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
        rank = len(shape_of(op.self))
        dims_attr = getattr(op, "dim", None)
        dims = list(dims_attr.get_values()) if dims_attr is not None else []
        try:
            dims = sorted({normalize_dim(d, rank) for d in dims}) if dims else list(range(rank))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        keepdim = bool(op.keepdim.value.data) if hasattr(op, "keepdim") else False
        ops = OpList()
        x = ops.cast(op.self, element_type(op.result))
        y = ops.add(tg_op(x, tuple(dims), keepdim))
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


class CumsumPattern(RewritePattern):
    """``cumsum`` (of run-time data: constant-fold removes the rest) is ``tg.cumsum`` in torch's
    result dtype (int64 for bool and integer inputs), the input cast to it first.

    ```mlir
    %p = aten.cumsum %m {dim = -1 : i64} : (tensor<2x7xi32>) -> tensor<2x7xi64>
    // becomes
    %c = tg.cast %m : (tensor<2x7xi32>) -> tensor<2x7xi64>
    %p = tg.cumsum %c {dim = 1 : i64} : tensor<2x7xi64>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.CumsumOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.self)
        try:
            dim = normalize_dim(op.dim.value.data, max(len(shape), 1))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        ops = OpList()
        x = ops.cast(op.self, element_type(op.result))
        if not shape:  # a rank-0 cumsum is the value itself
            return rewriter.replace(op, ops, [x])
        y = ops.add(CumsumOp(x, dim))
        rewriter.replace(op, ops, [y])


class VectorNormPattern(RewritePattern):
    """``linalg_vector_norm`` with ``ord = 2`` (``F.normalize``, sentence embeddings) is
    ``sqrt(sum(x * x))`` over the dims (all of them when absent); other orders are reported.

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
        if op.ord.value.data != 2:
            return notify_match_failure(op, f"only the 2-norm is supported, got ord = {op.ord.value.data}")
        shape = shape_of(op.self)
        try:
            dims = sorted({normalize_dim(d, len(shape)) for d in op.dim.get_values()}) if op.dim is not None and len(op.dim.get_values()) else list(range(len(shape)))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        ops = OpList()
        x = ops.cast(op.self, element_type(op.result))
        squares = ops.add(MulOp(x, x, x.type))
        total = ops.add(SumOp(squares, tuple(dims), bool(op.keepdim.value.data)))
        y = ops.add(SqrtOp(total))
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


def populate_reduction_patterns() -> list[RewritePattern]:
    return [ReducePattern(), SoftmaxPattern(), CumsumPattern(), VectorNormPattern()]
