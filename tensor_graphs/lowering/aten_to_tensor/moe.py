"""aten → tg: the ops of a mixture-of-experts layer (transformers' grouped experts, the default
``experts_implementation="grouped_mm"``):

- ``topk`` (the router's choice) and ``sort`` (the tokens ordered by expert): `tg.argtopk`, the
  positions, then a `tg.take` of the values at them;
- ``histc`` (the tokens per expert): a decomposition, bin masks summed (`tg.fused_elementwise`
  + `tg.sum`), with the bin edges torch uses;
- ``_grouped_mm`` (each expert's rows times its weights; transformers'
  ``grouped_mm_fallback`` is imported as this): `tg.grouped_matmul`, an ``nn.Linear``-style
  ``[E, N, K]`` weight read transposed in place rather than copied.

``cumsum`` (the offsets), ``floor_divide``, ``index.Tensor``, ``index_put`` and ``empty_like``
(the inverse permutation) have their own families (``reductions``, ``elementwise``, ``take``,
``masks``).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import Float32Type, Float64Type, FloatAttr, IntegerType, TensorType, f32, i1, i64
from xdsl.ir import Block, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs import dtypes
from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.shapes import ShapeError, contiguous_strides
from tensor_graphs.dialects.tensor import (
    AddOp,
    ArgTopkOp,
    ConstantOp,
    GroupedMatmulOp,
    MulOp,
    SumOp,
    TakeOp,
    TransposeOp,
    shape_of,
)
from tensor_graphs.lowering.aten_to_tensor.common import OpList, append, element_type, elementwise_body, notify_match_failure, scalar_constant


def _values_at(ops: OpList, x: SSAValue, positions: SSAValue, dim: int) -> SSAValue:
    """``x`` gathered along ``dim`` at ``positions`` (i64, in range by construction): a `tg.take`
    at ``positions * stride(dim)`` plus the constant offsets of the other dims."""
    shape, rshape = shape_of(x), shape_of(positions)
    strides = contiguous_strides(shape)
    grid = np.zeros(rshape, np.int64)
    for d, n in enumerate(rshape):
        if d != dim:
            grid = grid + (np.arange(n, dtype=np.int64) * strides[d]).reshape([n if i == d else 1 for i in range(len(rshape))])
    term = positions if strides[dim] == 1 else ops.add(MulOp(positions, ops.add(scalar_constant(strides[dim], i64))))
    if grid.any():
        term = ops.add(AddOp(ops.add(ConstantOp(dense_from_numpy(np.ascontiguousarray(grid), i64))), term, positions.type))
    return ops.add(TakeOp(x, term))


def _sortable(op, x: SSAValue) -> str | None:
    t = element_type(x)
    if not isinstance(t, IntegerType | Float32Type | Float64Type):
        return f"{op.name} of {x.type}: float and integer tensors only"
    return None


def _sort_key(ops: OpList, x: SSAValue) -> SSAValue:
    """What `tg.argtopk` orders: ``x``, or a bool as an i8 (false < true)."""
    return ops.cast(x, IntegerType(8)) if element_type(x) == i1 else x


class TopkPattern(RewritePattern):
    """``topk(x, k, dim, largest)``: the positions by `tg.argtopk` (ties to the lower position;
    torch leaves their order unspecified), the values a `tg.take` at them. ``sorted = false``
    still gets them best first (one of the orders torch allows).

    ```mlir
    %v, %i = aten.topk %p {k = 2 : i64} : (tensor<9x4xf32>) -> (tensor<9x2xf32>, tensor<9x2xi64>)
    // becomes
    %i = tg.argtopk %p {k = 2 : i64, dim = 1 : i64} : (tensor<9x4xf32>) -> tensor<9x2xi64>
    %c = tg.constant dense<[[0, 0], [4, 4], ..., [32, 32]]> : tensor<9x2xi64>
    %o = tg.add %c, %i : (tensor<9x2xi64>, tensor<9x2xi64>) -> tensor<9x2xi64>
    %v = tg.take %p, %o : (tensor<9x4xf32>, tensor<9x2xi64>) -> tensor<9x2xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.TopkOp, rewriter: PatternRewriter) -> None:
        if (problem := _sortable(op, op.self)) is not None:
            return notify_match_failure(op, problem)
        shape = shape_of(op.self)
        if not shape:
            return notify_match_failure(op, "topk of a rank-0 tensor")
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        k = op.k.value.data
        if not 0 <= k <= shape[dim]:
            return notify_match_failure(op, f"k = {k} is not within [0, {shape[dim]}] (the size of dim {dim})")
        ops = OpList()
        positions = ops.add(ArgTopkOp(_sort_key(ops, op.self), k, dim, bool(op.largest.value.data)))
        values = _values_at(ops, op.self, positions, dim)
        rewriter.replace(op, ops, [values, ops.cast(positions, element_type(op.result1))])


class SortPattern(RewritePattern):
    """``sort(x, dim, descending)`` (and ``sort.stable``): `tg.argtopk` with ``k`` = the dim's
    size, which is stable (equal values keep their order, as torch's CPU sort and
    ``stable=True`` give), NaN last ascending and first descending; the values a `tg.take`.

    ```mlir
    %v, %i = aten.sort %e : (tensor<36xi64>) -> (tensor<36xi64>, tensor<36xi64>)
    // becomes
    %i = tg.argtopk %e {k = 36 : i64, dim = 0 : i64, largest = false} : (tensor<36xi64>) -> tensor<36xi64>
    %v = tg.take %e, %i : (tensor<36xi64>, tensor<36xi64>) -> tensor<36xi64>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.SortOp | aten.SortStableOp):
            return
        if (problem := _sortable(op, op.self)) is not None:
            return notify_match_failure(op, problem)
        shape = shape_of(op.self)
        if not shape:  # a rank-0 sort is the value at position 0
            ops = OpList()
            zero = ops.add(scalar_constant(0, i64))
            return rewriter.replace(op, ops, [op.self, ops.cast(zero, element_type(op.result1))])
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        ops = OpList()
        positions = ops.add(ArgTopkOp(_sort_key(ops, op.self), shape[dim], dim, largest=bool(op.descending.value.data)))
        values = _values_at(ops, op.self, positions, dim)
        rewriter.replace(op, ops, [values, ops.cast(positions, element_type(op.result1))])


def _bin_edges(bins: int, low: float, high: float, element) -> np.ndarray:
    """The ``bins + 1`` edges torch's histc bins by (``torch.linspace(min, max, bins + 1)`` in
    the input's float dtype)."""
    import torch

    return torch.linspace(low, high, bins + 1, dtype=dtypes.of_element(element).torch).double().numpy()


class HistcPattern(RewritePattern):
    """``histc(x, bins, min, max)`` (``min < max``): element ``v`` falls in bin ``b`` when
    ``edge[b] <= v < edge[b + 1]`` (the last bin also takes ``v == max``), with torch's float32
    edges; NaN and values outside ``[min, max]`` fall in none. A bin mask per (element, bin),
    summed over the elements: exact counts (below 2^24 elements).

    ```mlir
    %h = aten.histc %e {bins = 4 : i64, max = 3 : i64} : (tensor<36xf32>) -> tensor<4xf32>
    // becomes
    %x = tg.reshape %e : (tensor<36xf32>) -> tensor<36x1xf32>
    %lo = tg.constant dense<[0.0, 0.75, 1.5, 2.25]> : tensor<4xf32>
    %hi = tg.constant dense<[0.75, 1.5, 2.25, 3.0000002]> : tensor<4xf32>
    %m = tg.fused_elementwise %x, %lo, %hi : (...) -> tensor<36x4xf32> { (x >= lo && x < hi) ? 1.0 : 0.0 }
    %h = tg.sum %m {dims = array<i64: 0>} : (tensor<36x4xf32>) -> tensor<4xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.HistcOp, rewriter: PatternRewriter) -> None:
        bins, low, high = op.bins.value.data, float(op.min.value.data), float(op.max.value.data)
        el = element_type(op.self)  # float16/bfloat16 arrive as float32 (widen-dtypes)
        if not isinstance(el, Float32Type | Float64Type):
            return notify_match_failure(op, f"histc of {el}: float tensors only, as in torch")
        if bins < 1:
            return notify_match_failure(op, f"histc needs at least one bin, got {bins}")
        if not low < high:
            return notify_match_failure(
                op, f"histc with min {low} >= max {high} takes its range from the data; give min < max"
            )
        edges = _bin_edges(bins, low, high, el).astype(np.float32 if el == f32 else np.float64)
        upper = edges[1:].copy()
        upper[-1] = np.nextafter(edges.dtype.type(high), edges.dtype.type(np.inf))  # the last bin includes max
        ops = OpList()
        n = int(np.prod(shape_of(op.self), dtype=np.int64))
        x = ops.reshape(op.self, (n, 1))
        lo = ops.add(ConstantOp(dense_from_numpy(np.ascontiguousarray(edges[:-1]), el)))
        hi = ops.add(ConstantOp(dense_from_numpy(upper, el)))

        def body(block: Block, args: list[SSAValue]) -> SSAValue:
            v, a, b = args
            inside = append(block, arith.AndIOp(append(block, arith.CmpfOp(v, a, "oge")), append(block, arith.CmpfOp(v, b, "olt"))))
            one, zero = (append(block, arith.ConstantOp(FloatAttr(c, el))) for c in (1.0, 0.0))
            return append(block, arith.SelectOp(inside, one, zero))

        masks = ops.add(elementwise_body([x, lo, hi], TensorType(el, (n, bins)), body))
        rewriter.replace(op, ops, [ops.add(SumOp(masks, (0,)))])


def _transposed_weight(value: SSAValue) -> SSAValue | None:
    """The ``[E, N, K]`` tensor whose last two dims ``value`` swaps (an ``nn.Linear``-style
    stack read as ``[E, K, N]``: transformers' ``weight.transpose(-2, -1)``), else None."""
    owner = value.owner
    if isinstance(owner, TransposeOp) and owner.permutation == (0, 2, 1):
        return owner.input
    if isinstance(owner, aten.TransposeIntOp) and len(shape_of(value)) == 3:
        dims = {normalize_dim(owner.dim0.value.data, 3), normalize_dim(owner.dim1.value.data, 3)}
        if dims == {1, 2}:
            return owner.self
    return None


class GroupedMmPattern(RewritePattern):
    """``_grouped_mm(x [S, K], w [E, K, N], offs [E])``: `tg.grouped_matmul`, rows
    ``[offs[e-1], offs[e])`` of ``x`` times ``w[e]``. A ``w`` that is the transpose of an
    ``[E, N, K]`` stack (transformers' experts) is read as it is stored (``transpose_b``).

    ```mlir
    %wt = aten.transpose.int %w {dim0 = -2 : i64, dim1 = -1 : i64} : (tensor<4x128x32xf32>) -> tensor<4x32x128xf32>
    %y = aten._grouped_mm %x, %wt offs %offs : tensor<4xi32> : tensor<36x32xf32>, tensor<4x32x128xf32> -> tensor<36x128xf32>
    // becomes
    %o = tg.cast %offs : (tensor<4xi32>) -> tensor<4xi64>
    %y = tg.grouped_matmul %x, %w, %o {transpose_b = true} : (tensor<36x32xf32>, tensor<4x128x32xf32>, tensor<4xi64>) -> tensor<36x128xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.GroupedMmOp, rewriter: PatternRewriter) -> None:
        x, w = op.self, op.mat2
        sx, sw = shape_of(x), shape_of(w)
        if op.offs is None or len(sx) != 2 or len(sw) != 3:
            return notify_match_failure(op, f"only the 2-D x 3-D form with offs is supported (rows grouped by offs), got {list(sx)} x {list(sw)}")
        if op.bias is not None:
            return notify_match_failure(op, "_grouped_mm with a bias is not supported; add the bias after it")
        if op.out_dtype is not None and op.out_dtype.data != "float32":
            return notify_match_failure(op, f"out_dtype {op.out_dtype.data}: float32 only")
        if any(element_type(v) != f32 for v in (x, w, op.result)):
            return notify_match_failure(op, "_grouped_mm: f32 input and weights only")
        if not isinstance(element_type(op.offs), IntegerType) or element_type(op.offs) == i1 or shape_of(op.offs) != (sw[0],):
            return notify_match_failure(op, f"offs must be [{sw[0]}] integers (one running row count per group), got {op.offs.type}")
        if sx[1] != sw[1]:
            return notify_match_failure(op, f"x has {sx[1]} columns, w[e] has {sw[1]} rows")
        ops = OpList()
        offsets = ops.cast(op.offs, i64)
        stored = _transposed_weight(w)
        y = ops.add(GroupedMatmulOp(x, stored, offsets, transpose_b=True) if stored is not None else GroupedMatmulOp(x, w, offsets))
        rewriter.replace(op, ops, [y])


def populate_moe_patterns() -> list[RewritePattern]:
    return [TopkPattern(), SortPattern(), HistcPattern(), GroupedMmPattern()]
