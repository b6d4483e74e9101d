"""aten → tg: advanced indexing (``index.Tensor``) and ``gather`` as `tg.take` by element offsets;
``index_put`` (``x[idx] = v``) as `tg.put` at the same offsets.

Both read ``x.flat[offset]`` for every result element, with ``offset`` a sum of one term per dim
of ``x``: ``i * stride(d)``, where ``i`` runs over the dim (a dim that is not indexed: a constant
term) or is the index tensor's value (an indexed dim). The constant terms add up to one i64
constant of the result's shape; each run-time index tensor adds one scalar body,
``(i in [-n, n) ? (i < 0 ? i + n : i) * stride : numel(x))``: torch's negative indices wrap, and
an index out of range makes the offset out of range, which `tg.take` reports at run time. When
every index is a constant, the whole offset table is (``constant-fold`` then removes the op if ``x``
is one too).

A padding mask read as ``mask[batch_idx, kv_idx]`` (transformers' mask functions) is this, with
constant indices from ``arange``; so is GPT-J's ``gather`` of sin/cos rows by position ids.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, IntegerType, i1, i64
from xdsl.ir import Block, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.shapes import ShapeError, broadcast_shapes, contiguous_strides, is_broadcastable_to, numel
from tensor_graphs.dialects.symbolic import shaped
from tensor_graphs.dialects.tensor import AddOp, BroadcastOp, ConstantOp, IotaOp, MulOp, PutOp, SizeOp, TakeOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, append, element_type, elementwise_body, notify_match_failure
from tensor_graphs.transforms.evaluate import dense_to_array


def _constant_array(value: SSAValue) -> np.ndarray | None:
    owner = value.owner
    return dense_to_array(owner.value) if isinstance(owner, ConstantOp) else None  # type: ignore[attr-defined]


def _axis(values: np.ndarray, at: int, rank: int) -> np.ndarray:
    """``values`` (1-D) laid along axis ``at`` of a rank-``rank`` array (size 1 elsewhere)."""
    shape = [1] * rank
    shape[at] = values.size
    return values.reshape(shape)


class OffsetSum:
    """Builds ``offsets`` (i64, shape ``result``) as constant terms plus run-time index terms."""

    def __init__(self, ops: OpList, result: tuple, size):
        # symbolic sizes (`dialects.symbolic`): the constant terms are 1 along a symbolic dim
        # (broadcast), a range over one is a run-time `tg.iota`; the offset of an index out of
        # range is past the largest input (the take checks every offset against its input)
        self.ops, self.result = ops, result
        self.size = size if isinstance(size, int) else 1 << 62
        self.constant = np.zeros([d if isinstance(d, int) else 1 for d in result], np.int64)
        self.run_time: list[SSAValue] = []

    def add_range(self, n, stride, at: int) -> None:
        """The term ``i * stride`` for ``i`` along result axis ``at``."""
        if isinstance(n, int) and isinstance(stride, int):
            self.constant = self.constant + _axis(np.arange(n, dtype=np.int64) * stride, at, len(self.result))
            return
        if not isinstance(stride, int):  # a symbolic stride (the dims after it are): i * stride at run time
            iota = self.ops.add(IotaOp(0.0, 1.0, shaped(i64, (n,))))
            iota = self.ops.add(MulOp(iota, self.ops.add(SizeOp(stride))))
        else:
            iota = self.ops.add(IotaOp(0.0, float(stride), shaped(i64, (n,))))
        self.run_time.append(self.ops.reshape(iota, tuple(n if d == at else 1 for d in range(len(self.result)))))

    def add_index(self, index: SSAValue, n, stride: int, shape: tuple[int, ...], wraps: bool = True) -> None:
        """The term of index tensor ``index`` into a dim of size ``n``, reshaped to ``shape``
        (broadcastable to the result); ``wraps``: negative indices count from the end (tensor
        indexing), else they are out of range (``gather``). A symbolic ``n`` is read at run time
        (`tg.size`, the body's second input)."""
        symbolic, symbolic_stride = not isinstance(n, int), not isinstance(stride, int)
        known = None if symbolic or symbolic_stride else _constant_array(index)
        if known is not None:
            low = -n if wraps else 0
            i = known.astype(np.int64)
            if i.size and (i.min() < low or i.max() >= n):
                raise ShapeError(f"index {int(i.min() if i.min() < low else i.max())} is out of range for a dim of size {n}")
            self.constant = self.constant + (np.where(i < 0, i + n, i) * stride).reshape(shape)
            return
        ops = self.ops
        inputs = [ops.cast(index, i64)] + ([ops.add(SizeOp(n))] if symbolic else []) + (
            [ops.add(SizeOp(stride))] if symbolic_stride else [])
        body = _offset_body(None if symbolic else n, None if symbolic_stride else stride, wraps, self.size)
        term = ops.add(elementwise_body(inputs, shaped(i64, shape_of(index)), body))
        self.run_time.append(ops.reshape(term, shape))

    def build(self) -> SSAValue:
        ops = self.ops
        total = ops.add(ConstantOp(dense_from_numpy(np.ascontiguousarray(self.constant), i64)))
        for term in self.run_time:
            shape = broadcast_shapes(shape_of(total), shape_of(term))
            total = ops.add(AddOp(total, term, shaped(i64, shape)))
        if shape_of(total) != tuple(self.result):
            total = ops.add(BroadcastOp(total, tuple(self.result)))
        return total


def _offset_body(n: int | None, stride: int | None, wraps: bool, sentinel: int):
    """The body of an index's offset term: ``index * stride`` (a negative index counting from
    the end when ``wraps``), or ``sentinel`` (past the input: the take's check names it) for an
    index outside ``[-n or 0, n)``; ``n`` a constant, or (None) the body's second argument;
    ``stride`` a constant, or (None) the body's last argument (a symbolic one: `tg.size`)."""

    def body(block: Block, args: list[SSAValue]) -> SSAValue:
        def emit(op):
            return append(block, op)

        v = args[0]
        if n is not None:
            lo, hi = emit(arith.ConstantOp(IntegerAttr(-n if wraps else 0, i64))), emit(arith.ConstantOp(IntegerAttr(n, i64)))
            zero = emit(arith.ConstantOp(IntegerAttr(0, i64)))
        else:
            hi = args[1]
            zero = emit(arith.ConstantOp(IntegerAttr(0, i64)))
            lo = emit(arith.SubiOp(zero, hi)) if wraps else zero
        valid = emit(arith.AndIOp(emit(arith.CmpiOp(v, lo, "sge")), emit(arith.CmpiOp(v, hi, "slt"))))
        wrapped = emit(arith.SelectOp(emit(arith.CmpiOp(v, zero, "slt")), emit(arith.AddiOp(v, hi)), v))
        step = args[-1] if stride is None else emit(arith.ConstantOp(IntegerAttr(stride, i64)))
        scaled = emit(arith.MuliOp(wrapped, step))
        return emit(arith.SelectOp(valid, scaled, emit(arith.ConstantOp(IntegerAttr(sentinel, i64)))))

    return body


def _index_problem(index: SSAValue) -> str | None:
    t = element_type(index)
    if t == i1:
        return "indexing by a boolean mask (x[mask]) has a data-dependent shape; use torch.where(mask, x, 0) or masked_fill"
    if not isinstance(t, IntegerType):
        return f"index tensors must be integers, got {index.type}"
    return None


class IndexTensorPattern(RewritePattern):
    """``x[i0, :, i2]`` (``index.Tensor``; ``None`` positions are full slices) as ``tg.take``.
    The indexed dims' block sits where the first indexed dim was when they are adjacent, first
    otherwise (NumPy's rule, torch's too).

    ```mlir
    %y = aten.index.Tensor %mask, %b, %k {indices_none = array<i64>} : (tensor<2x7xi1>, tensor<2x1x1x1xi64>, tensor<1x1x1x7xi64>) -> tensor<2x1x1x7xi1>
    // (%b, %k constants from arange) becomes
    %o = tg.constant dense<[[[[0, 1, 2, 3, 4, 5, 6]]], [[[7, 8, 9, 10, 11, 12, 13]]]]> : tensor<2x1x1x7xi64>
    %y = tg.take %mask, %o : (tensor<2x7xi1>, tensor<2x1x1x7xi64>) -> tensor<2x1x1x7xi1>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.IndexTensorOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.self)
        if len(op.indices) == 0 and len(op.indices_none) <= len(shape):  # x[:, :] is x
            if shape_of(op.result) != shape:
                return notify_match_failure(op, f"no index tensor, yet the result {list(shape_of(op.result))} is not the input's shape")
            return rewriter.replace(op, [], [op.self])
        ops = OpList()
        found = index_offsets(ops, shape, list(op.indices), set(op.indices_none.get_values()))
        if isinstance(found, str):
            return notify_match_failure(op, found)
        result, offsets = found
        if result != shape_of(op.result):
            return notify_match_failure(op, f"the indexed shape {list(result)} differs from the result's {list(shape_of(op.result))}")
        y = ops.add(TakeOp(op.self, offsets))
        rewriter.replace(op, ops, [y])


def index_offsets(ops: OpList, shape: tuple[int, ...], tensors: list[SSAValue], nones: set[int]) -> tuple[tuple[int, ...], SSAValue] | str:
    """The shape ``x[indices]`` has (``tensors`` at the positions not in ``nones``, full slices
    at those) and the i64 offsets of its elements in ``x`` (of ``shape``), built into ``ops``;
    or why it cannot be indexed so. Shared by ``index.Tensor`` (a take) and ``index_put`` (a put)."""
    positions = len(tensors) + len(nones)
    if positions > len(shape):
        return f"{positions} indices for a tensor of rank {len(shape)}"
    it = iter(tensors)
    indexed = [(d, next(it)) for d in range(positions) if d not in nones]
    for _, index in indexed:
        if (problem := _index_problem(index)) is not None:
            return problem
    dims = [d for d, _ in indexed]
    try:
        block = broadcast_shapes(*(shape_of(v) for _, v in indexed))
    except ShapeError as e:
        return str(e)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    at = dims[0] if adjacent else 0  # where the indexed block goes in the result
    rest = [d for d in range(len(shape)) if d not in dims]
    before = [d for d in rest if adjacent and d < dims[0]]
    after = [d for d in rest if d not in before]
    result = tuple(shape[d] for d in before) + tuple(block) + tuple(shape[d] for d in after)
    strides = contiguous_strides(shape)
    offsets = OffsetSum(ops, result, numel(shape))
    for k, d in enumerate(before):
        offsets.add_range(shape[d], strides[d], k)
    for k, d in enumerate(after):
        offsets.add_range(shape[d], strides[d], len(before) + len(block) + k)
    try:
        for d, index in indexed:
            s = shape_of(index)
            aligned = (1,) * at + (1,) * (len(block) - len(s)) + tuple(s) + (1,) * (len(result) - at - len(block))
            offsets.add_index(index, shape[d], strides[d], aligned)
    except ShapeError as e:
        return str(e)
    return result, offsets.build()


class GatherPattern(RewritePattern):
    """``gather(x, dim, index)``: ``out[i][j][k] = x[i][index[i][j][k]][k]`` (dim 1) as ``tg.take``.

    ```mlir
    %y = aten.gather %x, %idx {dim = 1 : i64} : (tensor<2x5xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
    // becomes
    %o = tg.fused_elementwise %idx : (tensor<2x3xi64>) -> tensor<2x3xi64> { (i in [0, 5) ? i * 1 : 10) }
    %c = tg.constant dense<[[0, 0, 0], [5, 5, 5]]> : tensor<2x3xi64>
    %s = tg.add %c, %o : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
    %y = tg.take %x, %s : (tensor<2x5xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.GatherOp, rewriter: PatternRewriter) -> None:
        shape, ishape = shape_of(op.self), shape_of(op.index)
        if (problem := _index_problem(op.index)) is not None:
            return notify_match_failure(op, problem)
        try:
            dim = normalize_dim(op.dim.value.data, max(len(shape), 1))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        if len(ishape) != len(shape) or any(ishape[d] > shape[d] for d in range(len(shape)) if d != dim):
            return notify_match_failure(op, f"index shape {list(ishape)} does not fit input {list(shape)} outside dim {dim}")
        strides = contiguous_strides(shape)
        ops = OpList()
        offsets = OffsetSum(ops, tuple(ishape), numel(shape))
        for d in range(len(shape)):
            if d != dim:
                offsets.add_range(ishape[d], strides[d], d)
        try:
            offsets.add_index(op.index, shape[dim], strides[dim], tuple(ishape), wraps=False)
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        y = ops.add(TakeOp(op.self, offsets.build()))
        rewriter.replace(op, ops, [y])


class IndexPutPattern(RewritePattern):
    """``index_put(x, indices, values, accumulate)`` (``x[idx] = v`` once functionalised) as
    ``tg.put`` at the offsets ``x[idx]`` reads (:func:`index_offsets`: run-time indices wrap
    and are range-checked), ``values`` cast to x's type and broadcast to the indexed shape.

    ```mlir
    %r = aten.index_put %x[%perm], %v : (tensor<36xi64>, tensor<36xi64>, tensor<36xi64>) -> tensor<36xi64>
    // becomes
    %o = tg.fused_elementwise %perm : (tensor<36xi64>) -> tensor<36xi64> { (i in [-36, 36) ? (i < 0 ? i + 36 : i) : 36) }
    %c = tg.constant dense<0> : tensor<36xi64>
    %s = tg.add %c, %o : (tensor<36xi64>, tensor<36xi64>) -> tensor<36xi64>
    %r = tg.put %x, %s, %v : (tensor<36xi64>, tensor<36xi64>, tensor<36xi64>) -> tensor<36xi64>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.IndexPutOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.self)
        accumulate = bool(op.accumulate.value.data)
        ops = OpList()
        values = ops.cast(op.values, element_type(op.self))
        if len(op.indices) == 0:  # x[:, :] = v
            if len(op.indices_none) > len(shape) or not is_broadcastable_to(shape_of(values), shape):
                return notify_match_failure(op, f"values {list(shape_of(values))} do not broadcast to {list(shape)}")
            y = ops.add(AddOp(op.self, values, op.result.type)) if accumulate else ops.add(BroadcastOp(values, shape))
            return rewriter.replace(op, ops, [y])
        found = index_offsets(ops, shape, list(op.indices), set(op.indices_none.get_values()))
        if isinstance(found, str):
            return notify_match_failure(op, found)
        indexed, offsets = found
        if not is_broadcastable_to(shape_of(values), indexed):
            return notify_match_failure(op, f"values {list(shape_of(values))} do not broadcast to the indexed shape {list(indexed)}")
        if shape_of(values) != indexed:
            values = ops.add(BroadcastOp(values, indexed))
        y = ops.add(PutOp(op.self, offsets, values, accumulate))
        rewriter.replace(op, ops, [y])


def populate_take_patterns() -> list[RewritePattern]:
    return [IndexTensorPattern(), GatherPattern(), IndexPutPattern()]
