"""aten → tg: slicing (slice, narrow, select, split, split_with_sizes, chunk), cat, embedding.

Every slice becomes ``tg.slice {dim, start, step}`` whose result type gives the size, with
torch's rules applied here: negative starts/ends count from the end, ends are clamped to the
dim size. Once buffers exist a contiguous slice is a zero-copy view.
"""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.shapes import ShapeError
from tensor_graphs.dialects.tensor import TABLE_NAME, ConcatOp, EmbeddingOp, SliceOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, notify_match_failure


def _slice(ops: OpList, x, dim: int, start: int, size: int, step: int = 1):
    """``x[..., start : start + step * size : step, ...]`` along ``dim`` (no op when that is all of ``x``)."""
    if start == 0 and step == 1 and size == shape_of(x)[dim]:
        return x
    return ops.add(SliceOp(x, dim, start, size, step))


def _bound(value: int | None, default: int, size: int) -> int:
    """A torch slice bound: None -> default, negative counts from the end, clamped to [0, size]."""
    if value is None:
        return default
    if value < 0:
        value += size
    return min(max(value, 0), size)


class SlicePattern(RewritePattern):
    """``slice.Tensor``, ``narrow`` and ``select.int`` as one ``tg.slice`` (``select`` reshapes the dim away).

    ```mlir
    %y = aten.slice.Tensor %x {dim = 1 : i64, start = -3 : i64, end = 100 : i64} : (tensor<2x5xf32>) -> tensor<2x3xf32>
    %z = aten.select.int %x {dim = 0 : i64, index = -1 : i64} : (tensor<2x5xf32>) -> tensor<5xf32>
    // becomes
    %y = tg.slice %x {dim = 1 : i64, start = 2 : i64} : (tensor<2x5xf32>) -> tensor<2x3xf32>
    %s = tg.slice %x {dim = 0 : i64, start = 1 : i64} : (tensor<2x5xf32>) -> tensor<1x5xf32>
    %z = tg.reshape %s : (tensor<1x5xf32>) -> tensor<5xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.SliceTensorOp, aten.NarrowOp, aten.NarrowCopyOp, aten.SelectIntOp)):
            return
        shape = shape_of(op.self)
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        n = shape[dim]
        ops = OpList()
        if isinstance(op, aten.SliceTensorOp):
            step = op.step.value.data
            if step < 1:
                return notify_match_failure(op, f"step must be >= 1, got {step}")
            first = op.start.value.data if op.start is not None else None
            if not isinstance(n, int) or (op.end is not None and op.end.value.data == DYNAMIC_INDEX):
                # a symbolic size: the slice's length is the result's (torch.export worked it out)
                if (first or 0) < 0 or step != 1:
                    return notify_match_failure(op, f"a slice of the symbolic size {n} takes a start >= 0 and step 1")
                y = _slice(ops, op.self, dim, first or 0, shape_of(op.result)[dim], step)
                rewriter.replace(op, ops, [y])
                return
            start = _bound(first, 0, n)
            end = _bound(op.end.value.data if op.end is not None else None, n, n)
            size = max(0, -(-(end - start) // step))
            y = _slice(ops, op.self, dim, start, size, step)
        elif isinstance(op, aten.NarrowOp | aten.NarrowCopyOp):
            start, length = op.start.value.data, op.length.value.data
            start = start + n if start < 0 else start
            if not (0 <= start and 0 <= length and start + length <= n):
                return notify_match_failure(op, f"narrow({start}, {length}) is out of bounds for dim {dim} of size {n}")
            y = _slice(ops, op.self, dim, start, length)
        else:
            index = op.index.value.data
            index = index + n if index < 0 else index
            if not 0 <= index < n:
                return notify_match_failure(op, f"index {op.index.value.data} is out of bounds for dim {dim} of size {n}")
            y = ops.reshape(_slice(ops, op.self, dim, index, 1), shape_of(op.result))
        if shape_of(y) != shape_of(op.result):
            return notify_match_failure(op, f"computed shape {list(shape_of(y))} differs from the result {list(shape_of(op.result))}")
        rewriter.replace(op, ops, [y])


class SplitPattern(RewritePattern):
    """``split.Tensor``, ``split_with_sizes`` and ``chunk``: one ``tg.slice`` per result, back to back.

    ```mlir
    %a, %b = aten.split.Tensor %x {split_size = 3 : i64, dim = 1 : i64} : (tensor<2x5xf32>) -> (tensor<2x3xf32>, tensor<2x2xf32>)
    // becomes
    %a = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x5xf32>) -> tensor<2x3xf32>
    %b = tg.slice %x {dim = 1 : i64, start = 3 : i64} : (tensor<2x5xf32>) -> tensor<2x2xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.SplitTensorOp, aten.SplitWithSizesOp, aten.ChunkOp)):
            return
        shape = shape_of(op.self)
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        sizes = [shape_of(r)[dim] for r in op.results]
        if sum(sizes) != shape[dim]:
            return notify_match_failure(op, f"the results' sizes {sizes} along dim {dim} do not add up to {shape[dim]}")
        ops, values, start = OpList(), [], 0
        for size in sizes:
            values.append(_slice(ops, op.self, dim, start, size))
            start += size
        rewriter.replace(op, ops, values)


class CatPattern(RewritePattern):
    """``cat`` is ``tg.concat`` (1-D empty inputs dropped as torch does, one input is no op).

    ```mlir
    %y = aten.cat %a, %b {dim = -1 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x7xf32>
    // becomes
    %y = tg.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x7xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.CatOp, rewriter: PatternRewriter) -> None:
        ops = OpList()
        inputs = [ops.cast(t, element_type(op.result)) for t in op.tensors if shape_of(t) != (0,)]
        if not inputs:
            return notify_match_failure(op, "every input is empty")
        rank = len(shape_of(op.result))
        try:
            dim = normalize_dim(op.dim.value.data, rank)
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        y = inputs[0] if len(inputs) == 1 else ops.add(ConcatOp(inputs, dim))
        rewriter.replace(op, ops, [y])


class EmbeddingPattern(RewritePattern):
    """``embedding(weight, indices)`` is the row gather ``tg.embedding`` (padding_idx only matters
    for training); the table's name as the model wrote it (``tg.table_name``) goes with it.

    ```mlir
    %y = aten.embedding %w, %ids {tg.table_name = "wte.weight"} : (tensor<100x64xf32>, tensor<1x7xi64>) -> tensor<1x7x64xf32>
    // becomes
    %y = tg.embedding %w, %ids {tg.table_name = "wte.weight"} : (tensor<100x64xf32>, tensor<1x7xi64>) -> tensor<1x7x64xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.EmbeddingOp, rewriter: PatternRewriter) -> None:
        new = EmbeddingOp(op.weight, op.indices)
        if TABLE_NAME in op.attributes:
            new.attributes[TABLE_NAME] = op.attributes[TABLE_NAME]
        rewriter.replace(op, new)


def populate_indexing_patterns() -> list[RewritePattern]:
    return [SlicePattern(), SplitPattern(), CatPattern(), EmbeddingPattern()]
