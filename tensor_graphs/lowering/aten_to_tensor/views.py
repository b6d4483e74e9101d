"""aten → tg: the element gathers and scatters of Core ATen whose positions are known while
compiling, as ``tg.take`` / ``tg.put`` by an offset table (and the ops that make new tensors).

Shapes are static, so which element of ``x`` each result element reads (``flip``,
``diagonal``, ``as_strided``, ``unfold``) or which element each source element writes
(``slice_scatter``, ``select_scatter``, ``diagonal_scatter``) is a table of i64 offsets computed
here with NumPy on ``arange(numel(x))`` laid out as ``x``: the same NumPy op applied to those
positions gives the offsets. Ops indexed by a run-time tensor (``index_select``, ``scatter``,
``scatter_add``, ``index_fill``, ``masked_scatter``) add its (range-checked) term to the table
(`take.OffsetSum`), as ``gather`` and ``index_put`` do.

```mlir
%y = aten.flip %x {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// becomes
%o = tg.constant dense<[[2, 1, 0], [5, 4, 3]]> : tensor<2x3xi64>
%y = tg.take %x, %o : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
```

``copy``, ``fill``, ``empty`` make values without moving elements: a cast and broadcast, a
broadcast constant (``empty``'s contents are unspecified: zeros); ``triu``/``tril`` of run-time
data select by a constant mask.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from xdsl.dialects.builtin import IntegerType, TensorType, i1, i64
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.shapes import ShapeError, contiguous_strides, is_broadcastable_to, numel
from tensor_graphs.dialects.tensor import PUT_REDUCTIONS, BroadcastOp, ConstantOp, CumsumOp, DivOp, PutOp, SelectOp, SubOp, TakeOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, elementwise_body, notify_match_failure, scalar_constant
from tensor_graphs.lowering.aten_to_tensor.elementwise import floor_divide_body
from tensor_graphs.lowering.aten_to_tensor.take import OffsetSum, _index_problem


def positions(shape: tuple[int, ...]) -> np.ndarray:
    """``arange(numel)`` laid out as ``shape``: each element's offset in a contiguous tensor."""
    return np.arange(numel(shape), dtype=np.int64).reshape(shape)


def _constant(ops: OpList, offsets: np.ndarray) -> SSAValue:
    # np.array, not np.ascontiguousarray: that makes a 0-d table (as_strided to size ()) 1-d
    return ops.add(ConstantOp(dense_from_numpy(np.array(offsets, dtype=np.int64, order="C"), i64)))


def _broadcast(ops: OpList, value: SSAValue, shape: tuple[int, ...]) -> SSAValue:
    return value if shape_of(value) == tuple(shape) else ops.add(BroadcastOp(value, tuple(shape)))


def _int(attr, default: int | None = None) -> int | None:
    return default if attr is None else attr.value.data


# --------------------------------------------------------------------------- gathers of known positions


def _flip(op, shape):
    dims = [normalize_dim(d, len(shape)) for d in op.dims.get_values()]
    return np.flip(positions(shape), dims) if dims else positions(shape)


def _diagonal(op, shape):
    offset, d1, d2 = op.offset.value.data, normalize_dim(op.dim1.value.data, len(shape)), normalize_dim(op.dim2.value.data, len(shape))
    if d1 == d2:
        raise ShapeError(f"diagonal of dims {d1} and {d2}: they must differ")
    return np.diagonal(positions(shape), offset, d1, d2)


def _as_strided(op, shape):
    size, stride = list(op.size.get_values()), list(op.stride.get_values())
    table = np.full(size, _int(op.storage_offset, 0), np.int64)
    for k, (n, s) in enumerate(zip(size, stride)):
        table = table + (np.arange(n, dtype=np.int64) * s).reshape([n if j == k else 1 for j in range(len(size))])
    if table.size and (table.min() < 0 or table.max() >= numel(shape)):
        raise ShapeError(f"as_strided(size={size}, stride={stride}) reads beyond the {numel(shape)} elements of its input")
    return table


def _unfold(op, shape):
    d = normalize_dim(op.dimension.value.data, max(len(shape), 1))
    size, step = op.size.value.data, op.step.value.data
    if not shape:  # a 0-d tensor unfolds into [size] (size 1)
        return positions((1,))
    windows = sliding_window_view(positions(shape), size, axis=d)  # the window last, as torch
    return np.take(windows, np.arange(0, shape[d] - size + 1, step), axis=d)


#: aten op -> offsets of each result element in its input (a NumPy function of op and input shape)
GATHERS: dict[type, Callable[..., np.ndarray]] = {
    aten.FlipOp: _flip,
    aten.DiagonalOp: _diagonal,
    aten.AsStridedOp: _as_strided,
    aten.UnfoldOp: _unfold,
}


class KnownGatherPattern(RewritePattern):
    """``flip``, ``diagonal``, ``as_strided``, ``unfold``: ``tg.take`` by a constant offset table
    (:data:`GATHERS`; the module doc shows ``flip``)."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        table = GATHERS.get(type(op))
        if table is None:
            return
        try:
            offsets = table(op, shape_of(op.self))
        except (ShapeError, ValueError) as e:
            return notify_match_failure(op, str(e))
        if tuple(offsets.shape) != shape_of(op.result):
            return notify_match_failure(op, f"the positions have shape {list(offsets.shape)}, the result {list(shape_of(op.result))}")
        ops = OpList()
        rewriter.replace(op, ops, [ops.add(TakeOp(op.self, _constant(ops, offsets)))])


# --------------------------------------------------------------------------- scatters of known positions


def _slice_scatter(op, shape):
    d = normalize_dim(op.dim.value.data, len(shape))
    start, end, step = _int(op.start, 0), _int(op.end, shape[d]), op.step.value.data
    index = [slice(None)] * len(shape)
    index[d] = slice(start, end, step)
    return positions(shape)[tuple(index)]


def _select_scatter(op, shape):
    d = normalize_dim(op.dim.value.data, len(shape))
    i = op.index.value.data
    if not -shape[d] <= i < shape[d]:
        raise ShapeError(f"index {i} is out of range for dim {d} of size {shape[d]}")
    return np.take(positions(shape), i, axis=d)


def _diagonal_scatter(op, shape):
    return _diagonal(op, shape)


#: aten op -> offsets its ``src`` elements are written to
SCATTERS: dict[type, Callable[..., np.ndarray]] = {
    aten.SliceScatterOp: _slice_scatter,
    aten.SelectScatterOp: _select_scatter,
    aten.DiagonalScatterOp: _diagonal_scatter,
}


class KnownScatterPattern(RewritePattern):
    """``slice_scatter``, ``select_scatter``, ``diagonal_scatter``: ``tg.put`` of ``src`` (cast to
    ``x``'s type) at a constant offset table (:data:`SCATTERS`).

    ```mlir
    %y = aten.select_scatter %x, %s {dim = 0 : i64, index = 1 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    // becomes
    %o = tg.constant dense<[3, 4, 5]> : tensor<3xi64>
    %y = tg.put %x, %o, %s : (tensor<2x3xf32>, tensor<3xi64>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        table = SCATTERS.get(type(op))
        if table is None:
            return
        try:
            offsets = table(op, shape_of(op.self))
        except (ShapeError, ValueError) as e:
            return notify_match_failure(op, str(e))
        ops = OpList()
        src = ops.cast(op.src, element_type(op.self))
        if not is_broadcastable_to(shape_of(src), offsets.shape):
            return notify_match_failure(op, f"src {list(shape_of(src))} does not fit the {list(offsets.shape)} positions it is written to")
        y = ops.add(PutOp(op.self, _constant(ops, offsets), _broadcast(ops, src, offsets.shape)))
        rewriter.replace(op, ops, [y])


# --------------------------------------------------------------------------- run-time indices


def _dim_offsets(ops: OpList, shape: tuple[int, ...], result: tuple[int, ...], dim: int, index: SSAValue,
                 index_shape: tuple[int, ...]) -> SSAValue:
    """Offsets in ``x`` (of ``shape``) of a ``result``-shaped block whose coordinate along ``dim``
    is ``index`` (reshaped to ``index_shape``, broadcastable to ``result``) and along every other
    dim its own; ``index`` out of range [0, n) is reported when the take or put runs."""
    strides = contiguous_strides(shape)
    offsets = OffsetSum(ops, result, numel(shape))
    for d in range(len(shape)):
        if d != dim:
            offsets.add_range(result[d], strides[d], d)
    offsets.add_index(index, shape[dim], strides[dim], index_shape, wraps=False)
    return offsets.build()


class IndexSelectPattern(RewritePattern):
    """``index_select(x, dim, index)``: the rows ``index`` of ``dim`` as ``tg.take``.

    ```mlir
    %y = aten.index_select %x, %i {dim = 0 : i64} : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<2x3xf32>
    // becomes (the run-time index range-checked in a scalar body, as gather's)
    %y = tg.take %x, %offsets : (tensor<4x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.IndexSelectOp):
            return
        shape = shape_of(op.self) or (1,)
        if (problem := _index_problem(op.index)) is not None or len(shape_of(op.index)) > 1:
            return notify_match_failure(op, problem or "index_select takes a 0-d or 1-d index")
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
            ops = OpList()
            x = ops.reshape(op.self, shape)
            count = max(numel(shape_of(op.index)), 1)
            result = tuple(count if d == dim else n for d, n in enumerate(shape))
            along = tuple(count if d == dim else 1 for d in range(len(shape)))
            y = ops.add(TakeOp(x, _dim_offsets(ops, shape, result, dim, op.index, along)))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


class ScatterPattern(RewritePattern):
    """``scatter(x, dim, index, src)`` (``.src`` and ``.value``), ``scatter_add`` and
    ``scatter_reduce`` (``sum``, ``prod``, ``amax``, ``amin``, ``mean``; with or without
    ``include_self``): ``tg.put`` of ``src``'s index-shaped corner (or the value) at the positions
    ``gather`` would read, combining by the reduction (`_reduced_put`).

    ```mlir
    %y = aten.scatter_add %x, %i, %s {dim = 1 : i64} : (tensor<2x5xf32>, tensor<2x3xi64>, tensor<2x4xf32>) -> tensor<2x5xf32>
    // becomes
    %v = tg.take %s, %corner : (tensor<2x4xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
    %y = tg.put %x, %offsets, %v {accumulate = true} : (tensor<2x5xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<2x5xf32>
    ```
    """

    _OPS = (aten.ScatterSrcOp, aten.ScatterValueOp, aten.ScatterAddOp, aten.ScatterReduceTwoOp)

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, self._OPS):
            return
        reduce, include_self = ("sum" if isinstance(op, aten.ScatterAddOp) else None), True
        if isinstance(op, aten.ScatterReduceTwoOp):
            reduce, include_self = op.reduce.data, bool(op.include_self.value.data)
            if reduce not in (*PUT_REDUCTIONS, "mean"):
                return notify_match_failure(op, f"scatter_reduce with reduce='{reduce}': sum, prod, mean, amax or amin")
        shape, ishape = shape_of(op.self), shape_of(op.index)
        if (problem := _index_problem(op.index)) is not None:
            return notify_match_failure(op, problem)
        if numel(ishape) == 0:  # nothing scattered
            return rewriter.replace(op, [], [op.self])
        el = element_type(op.self)
        if reduce == "mean" and el == i1:
            return notify_match_failure(op, "scatter_reduce with reduce='mean' on bool")
        ops = OpList()
        x, index = op.self, op.index
        if not shape:  # a 0-d input (and index, src): as one element
            if numel(ishape) != 1:
                return notify_match_failure(op, f"index shape {list(ishape)} does not fit a 0-d input")
            x, index, shape, ishape = ops.reshape(x, (1,)), ops.reshape(index, (1,)), (1,), (1,)
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
            if len(ishape) != len(shape) or any(ishape[d] > shape[d] for d in range(len(shape)) if d != dim):
                raise ShapeError(f"index shape {list(ishape)} does not fit input {list(shape)} outside dim {dim}")
            offsets = _dim_offsets(ops, shape, ishape, dim, index, ishape)
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        if isinstance(op, aten.ScatterValueOp):
            values = ops.add(BroadcastOp(ops.add(scalar_constant(op.value.value.data, el)), ishape))
        else:
            src = ops.cast(op.src, el)
            src = ops.reshape(src, (1,)) if not shape_of(src) else src
            if shape_of(src) != ishape:  # the index-shaped corner of src
                corner = positions(shape_of(src))[tuple(slice(0, n) for n in ishape)]
                src = ops.add(TakeOp(src, _constant(ops, corner)))
            values = src
        y = ops.add(PutOp(x, offsets, values)) if reduce is None else _reduced_put(ops, x, offsets, values, reduce, include_self)
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


def _filled(ops: OpList, like: SSAValue, value: float | int, shape: tuple[int, ...]) -> SSAValue:
    return ops.add(BroadcastOp(ops.add(scalar_constant(value, element_type(like))), shape))


def _reduced_put(ops: OpList, x: SSAValue, offsets: SSAValue, values: SSAValue, reduce: str, include_self: bool) -> SSAValue:
    """``x`` with ``values`` combined into it at ``offsets`` by ``reduce`` (torch's
    ``scatter_reduce``). Without ``include_self`` the targets are first set to the reduction's
    identity (0 for sums, 1 for products, for ``amax``/``amin`` one of the values put there).
    ``mean`` is the sum over the count of what was combined (``x`` counts once with
    ``include_self``), floor-divided for integers, as torch does."""
    vshape = shape_of(values)
    if reduce == "mean":
        total = _reduced_put(ops, x, offsets, values, "sum", include_self)
        ones = _filled(ops, x, 1, shape_of(x))
        count = _reduced_put(ops, ones, offsets, _filled(ops, x, 1, vshape), "sum", include_self)
        out = element_type(x)
        if isinstance(out, IntegerType):
            body = floor_divide_body(out)
            return ops.add(elementwise_body([total, count], total.type, lambda block, args: body(block, args[0], args[1])))
        return ops.add(DivOp(total, count, total.type))
    if not include_self:
        start = {"sum": 0, "prod": 1}.get(reduce)
        x = ops.add(PutOp(x, offsets, values if start is None else _filled(ops, x, start, vshape)))
    return ops.add(PutOp(x, offsets, values, accumulate=True, reduce=reduce))


class IndexFillPattern(RewritePattern):
    """``index_fill(x, dim, index, value)``: ``tg.put`` of the value at every element of the
    rows ``index`` of ``dim`` (a 0-d ``x`` as its one element)."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.IndexFillIntScalarOp):
            return
        shape = shape_of(op.self)
        if (problem := _index_problem(op.index)) is not None or len(shape_of(op.index)) > 1:
            return notify_match_failure(op, problem or "index_fill takes a 0-d or 1-d index")
        ops = OpList()
        x = op.self if shape else ops.reshape(op.self, (1,))  # a 0-d tensor: its one element along dim 0
        shape = shape or (1,)
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
            count = max(numel(shape_of(op.index)), 1)
            block = tuple(count if d == dim else n for d, n in enumerate(shape))
            along = tuple(count if d == dim else 1 for d in range(len(shape)))
            offsets = _dim_offsets(ops, shape, block, dim, op.index, along)
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        values = ops.add(BroadcastOp(ops.add(scalar_constant(op.value.value.data, element_type(op.self))), block))
        rewriter.replace(op, ops, [ops.reshape(ops.add(PutOp(x, offsets, values)), shape_of(op.self))])


class MaskedScatterPattern(RewritePattern):
    """``masked_scatter(x, mask, source)``: where the mask (broadcast to ``x``) is true, the next
    element of ``source`` in order: its position is the running count of true elements (a
    ``tg.cumsum`` of the flattened mask) minus one, gathered by ``tg.take`` (more true elements
    than ``source`` holds: an index error at run time, as torch raises), then ``tg.select``."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.MaskedScatterOp):
            return
        shape = shape_of(op.self)
        if element_type(op.mask) != i1 or not is_broadcastable_to(shape_of(op.mask), shape):
            return notify_match_failure(op, f"the mask must be bool and broadcast to {list(shape)}, got {op.mask.type}")
        ops = OpList()
        mask = _broadcast(ops, op.mask, shape)
        flat = ops.reshape(ops.cast(mask, i64), (numel(shape),))
        count = ops.add(CumsumOp(flat, 0))
        k = ops.add(SubOp(count, ops.add(scalar_constant(1, i64)), count.type))
        k = ops.add(SelectOp(ops.reshape(mask, (numel(shape),)), k, ops.add(BroadcastOp(ops.add(scalar_constant(0, i64)), (numel(shape),)))))
        source = ops.reshape(ops.cast(op.source, element_type(op.self)), (max(numel(shape_of(op.source)), 1),))
        taken = ops.add(TakeOp(source, ops.reshape(k, shape)))
        rewriter.replace(op, ops, [ops.add(SelectOp(mask, taken, op.self))])


class TriangularPattern(RewritePattern):
    """``triu``/``tril`` of run-time data (of a constant, ``constant-fold`` evaluates them):
    ``tg.select`` between the input and zero by a constant mask of the last two dims.

    ```mlir
    %y = aten.triu %x {diagonal = 1 : i64} : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
    // becomes
    %m = tg.constant dense<[[false, true, true], [false, false, true], [false, false, false]]> : tensor<3x3xi1>
    %z = tg.constant dense<0.0> : tensor<f32>
    %y = tg.select %m, %x, %z : (tensor<3x3xi1>, tensor<2x3x3xf32>, tensor<f32>) -> tensor<2x3x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.TriuOp | aten.TrilOp):
            return
        shape = shape_of(op.self)
        if len(shape) < 2:
            return notify_match_failure(op, f"{op.name} needs a tensor of rank 2 or more, got {list(shape)}")
        ops = OpList()
        rewriter.replace(op, ops, [triangle(ops, op.self, isinstance(op, aten.TriuOp), op.diagonal.value.data)])


def triangle(ops: OpList, x: SSAValue, upper: bool, diagonal: int = 0) -> SSAValue:
    """``triu(x, diagonal)`` (``upper``) or ``tril``: ``tg.select`` between ``x`` and zero by a
    constant mask of the last two dims."""
    rows, cols = shape_of(x)[-2:]
    keep = (np.triu if upper else np.tril)(np.ones((rows, cols), bool), diagonal)
    mask = ops.add(ConstantOp(dense_from_numpy(keep, i1)))
    return ops.add(SelectOp(mask, x, ops.add(scalar_constant(0, element_type(x)))))


# --------------------------------------------------------------------------- new values


class NewValuePattern(RewritePattern):
    """``copy(x, src)`` is ``src`` cast to ``x``'s type and broadcast to its shape; ``fill(x, v)``
    the constant ``v`` broadcast; ``empty`` (and ``empty_strided``, ``new_empty_strided``) a
    broadcast zero (their contents are unspecified).

    ```mlir
    %y = aten.fill.Scalar %x {value = 2.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %c = tg.constant dense<2.0> : tensor<f32>
    %y = tg.broadcast %c : (tensor<f32>) -> tensor<2x3xf32>
    ```
    """

    _EMPTY = (aten.EmptyMemoryFormatOp, aten.EmptyStridedOp, aten.NewEmptyStridedOp)

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.CopyOp, aten.FillScalarOp, *self._EMPTY)):
            return
        result: TensorType = op.results[0].type  # type: ignore[assignment]
        shape, el = shape_of(op.results[0]), result.element_type
        ops = OpList()
        if isinstance(op, aten.CopyOp):
            src = ops.cast(op.src, el)
            if not is_broadcastable_to(shape_of(src), shape):
                return notify_match_failure(op, f"src {list(shape_of(src))} does not broadcast to {list(shape)}")
            value = _broadcast(ops, src, shape)
        else:
            number = op.value.value.data if isinstance(op, aten.FillScalarOp) else 0
            value = _broadcast(ops, ops.add(scalar_constant(number, el)), shape)
        rewriter.replace(op, ops, [value])


def populate_view_patterns() -> list[RewritePattern]:
    return [KnownGatherPattern(), KnownScatterPattern(), IndexSelectPattern(), ScatterPattern(), IndexFillPattern(),
            MaskedScatterPattern(), TriangularPattern(), NewValuePattern()]
