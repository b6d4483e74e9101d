"""aten → tg: data movement (t, transpose, permute, view/reshape/flatten/(un)squeeze/unflatten,
expand/expand_as, repeat, repeat_interleave, stack, contiguous/clone).

Everything is ``tg.transpose {perm}``, ``tg.reshape``, ``tg.broadcast`` or (stack) ``tg.concat``; ops that do not change
the value (``contiguous``, ``clone``, a transpose of equal dims, a reshape or expand to the same
shape) disappear.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.shapes import ShapeError, numel
from tensor_graphs.dialects.tensor import BroadcastOp, ConcatOp, ReshapeOp, TransposeOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, notify_match_failure


def _replace_with_transpose(op, perm: list[int], rewriter: PatternRewriter) -> None:
    if perm == sorted(perm):
        rewriter.replace(op, [], [op.self])
    else:
        rewriter.replace(op, TransposeOp(op.self, tuple(perm)))


class TransposePattern(RewritePattern):
    """``aten.t``, ``aten.transpose.int`` and ``aten.permute`` as one ``tg.transpose`` (dims normalised).

    ```mlir
    %y = aten.transpose.int %x {dim0 = -1 : i64, dim1 = 0 : i64} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
    // becomes
    %y = tg.transpose %x {perm = array<i64: 2, 1, 0>} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
    ```
    An identity permutation (``t`` of a vector, ``transpose(x, 1, 1)``) is no op at all.
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.TOp, aten.TransposeIntOp, aten.PermuteOp)):
            return
        rank = len(shape_of(op.self))
        perm = list(range(rank))
        try:
            if isinstance(op, aten.TOp):
                perm.reverse()
            elif isinstance(op, aten.TransposeIntOp):
                d0, d1 = normalize_dim(op.dim0.value.data, rank), normalize_dim(op.dim1.value.data, rank)
                if rank:
                    perm[d0], perm[d1] = perm[d1], perm[d0]
            else:
                perm = [normalize_dim(d, rank) for d in op.dims.get_values()]
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        _replace_with_transpose(op, perm, rewriter)


_RESHAPES = (
    aten.ViewOp,
    aten.ReshapeOp,
    aten.UnsafeViewOp,
    aten.FlattenUsingIntsOp,
    aten.UnflattenIntOp,
    aten.UnsqueezeOp,
    aten.SqueezeDimOp,
    aten.SqueezeDimsOp,
)


class ReshapePattern(RewritePattern):
    """Every shape change (``view``, ``reshape``, ``_unsafe_view``, ``flatten``, ``unflatten``, ``unsqueeze``, ``squeeze``)
    is ``tg.reshape`` to the op's result type.

    ```mlir
    %y = aten.view %x {size = array<i64: -1, 6>} : (tensor<2x3x2xf32>) -> tensor<2x6xf32>
    // becomes
    %y = tg.reshape %x : (tensor<2x3x2xf32>) -> tensor<2x6xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _RESHAPES):
            return
        shape = shape_of(op.result)
        if shape == shape_of(op.self):
            rewriter.replace(op, [], [op.self])
        else:
            rewriter.replace(op, ReshapeOp(op.self, shape))


class IdentityPattern(RewritePattern):
    """``contiguous`` and ``clone`` do not change values: their uses take the input.

    ```mlir
    %y = aten.contiguous %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    func.return %y : tensor<2x3xf32>
    // becomes
    func.return %x : tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, (aten.ContiguousOp, aten.CloneOp)):
            rewriter.replace(op, [], [op.self])


class ExpandPattern(RewritePattern):
    """``expand`` and ``expand_as`` materialise NumPy broadcasting as ``tg.broadcast`` (nothing
    when the shape stays).

    ```mlir
    %y = aten.expand %x {size = array<i64: 4, -1, 3>} : (tensor<1x3xf32>) -> tensor<4x1x3xf32>
    // becomes
    %y = tg.broadcast %x : (tensor<1x3xf32>) -> tensor<4x1x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.ExpandOp | aten.ExpandAsOp):
            return
        shape = shape_of(op.result)
        if shape == shape_of(op.self):
            rewriter.replace(op, [], [op.self])
        else:
            rewriter.replace(op, BroadcastOp(op.self, shape))


class RepeatPattern(RewritePattern):
    """``repeat`` (tile) and ``repeat_interleave`` (each element ``r`` times) are a broadcast
    along a new size-1 dim beside each repeated one, then a reshape that merges the two.

    ```mlir
    %y = aten.repeat %x {repeats = array<i64: 2, 3>} : (tensor<4x5xf32>) -> tensor<8x15xf32>
    // becomes
    %a = tg.reshape %x : (tensor<4x5xf32>) -> tensor<1x4x1x5xf32>
    %b = tg.broadcast %a : (tensor<1x4x1x5xf32>) -> tensor<2x4x3x5xf32>
    %y = tg.reshape %b : (tensor<2x4x3x5xf32>) -> tensor<8x15xf32>
    ```
    ``repeat_interleave`` puts the new dim after the repeated one (``[4, 5] -> [4, 1, 5] ->
    [4, r, 5]``); without a dim it works on the flattened input, as torch does.
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        ops = OpList()
        x = op.self if isinstance(op, aten.RepeatOp | aten.RepeatInterleaveSelfIntOp) else None
        if x is None:
            return
        if isinstance(op, aten.RepeatOp):
            reps = tuple(op.repeats.get_values())
            shape = (1,) * (len(reps) - len(shape_of(x))) + shape_of(x)
            if len(reps) < len(shape):
                return notify_match_failure(op, f"{len(reps)} repeats for a tensor of rank {len(shape)}")
            spread = tuple(d for n in shape for d in (1, n))
            tiled = tuple(d for r, n in zip(reps, shape) for d in (r, n))
        else:
            r = op.repeats.value.data
            if op.dim is None:
                x = ops.reshape(x, (numel(shape_of(x)),))
                dim = 0
            else:
                try:
                    dim = normalize_dim(op.dim.value.data, len(shape_of(x)))
                except ShapeError as e:
                    return notify_match_failure(op, str(e))
            shape = shape_of(x)
            spread = shape[: dim + 1] + (1,) + shape[dim + 1 :]
            tiled = shape[: dim + 1] + (r,) + shape[dim + 1 :]
        y = ops.reshape(x, spread)
        if tiled != spread:
            y = ops.add(BroadcastOp(y, tiled))
        y = ops.reshape(y, shape_of(op.result))
        rewriter.replace(op, ops, [y])


class StackPattern(RewritePattern):
    """``stack`` is a concat of the inputs, each with a size-1 dim inserted at ``dim``.

    ```mlir
    %y = aten.stack %a, %b {dim = -1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3x2xf32>
    // becomes
    %a1 = tg.reshape %a : (tensor<2x3xf32>) -> tensor<2x3x1xf32>
    %b1 = tg.reshape %b : (tensor<2x3xf32>) -> tensor<2x3x1xf32>
    %y = tg.concat %a1, %b1 {dim = 2 : i64} : (tensor<2x3x1xf32>, tensor<2x3x1xf32>) -> tensor<2x3x2xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.StackOp, rewriter: PatternRewriter) -> None:
        rank = len(shape_of(op.result))
        try:
            dim = normalize_dim(op.dim.value.data, rank)
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        ops = OpList()
        parts = []
        for t in op.tensors:
            s = shape_of(t)
            parts.append(ops.reshape(ops.cast(t, element_type(op.result)), s[:dim] + (1,) + s[dim:]))
        y = parts[0] if len(parts) == 1 else ops.add(ConcatOp(parts, dim))
        rewriter.replace(op, ops, [y])


def populate_data_movement_patterns() -> list[RewritePattern]:
    return [TransposePattern(), ReshapePattern(), ExpandPattern(), RepeatPattern(), StackPattern(), IdentityPattern()]
