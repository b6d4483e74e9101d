"""aten → tg: data movement (t, transpose, permute, view/reshape/flatten/(un)squeeze/unflatten,
expand/expand_as, repeat, repeat_interleave, stack, numpy_T, roll, constant pad, contiguous/clone).

Everything is ``tg.transpose {perm}``, ``tg.reshape``, ``tg.broadcast``, ``tg.slice`` or ``tg.concat``; ops that do not change
the value (``contiguous``, ``clone``, a transpose of equal dims, a reshape or expand to the same
shape) disappear.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import i1
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.ir import SSAValue

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.shapes import ShapeError, numel
from tensor_graphs.dialects.tensor import BroadcastOp, ConcatOp, ReshapeOp, SliceOp, SubOp, TransposeOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, append, constant, element_type, elementwise_body, notify_match_failure


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


class NumpyTPattern(RewritePattern):
    """``x.T`` (``numpy_T``) reverses every dim: ``tg.transpose`` with the reversed permutation."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.NumpyTOp, rewriter: PatternRewriter) -> None:
        _replace_with_transpose(op, list(reversed(range(len(shape_of(op.self))))), rewriter)


def _slice_dim(ops: OpList, x, dim: int, start: int, size: int):
    if start == 0 and size == shape_of(x)[dim]:
        return x
    return ops.add(SliceOp(x, dim, start, size))


class RollPattern(RewritePattern):
    """``roll(x, shifts, dims)``: along each dim, the last ``s`` entries then the first ``n - s``
    (two ``tg.slice``, one ``tg.concat``); without dims, on the flattened tensor.

    ```mlir
    %y = aten.roll %x {shifts = array<i64: 2>, dims = array<i64: 1>} : (tensor<3x5xf32>) -> tensor<3x5xf32>
    // becomes
    %a = tg.slice %x {dim = 1 : i64, start = 3 : i64} : (tensor<3x5xf32>) -> tensor<3x2xf32>
    %b = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<3x5xf32>) -> tensor<3x3xf32>
    %y = tg.concat %a, %b {dim = 1 : i64} : (tensor<3x2xf32>, tensor<3x3xf32>) -> tensor<3x5xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.RollOp, rewriter: PatternRewriter) -> None:
        shifts, dims = list(op.shifts.get_values()), list(op.dims.get_values())
        ops = OpList()
        x = op.self
        flat = not dims
        if flat:
            x, dims = ops.reshape(x, (numel(shape_of(x)),)), [0]
        if len(shifts) != len(dims):
            return notify_match_failure(op, f"{len(shifts)} shifts for {len(dims)} dims")
        for shift, d in zip(shifts, dims):
            try:
                d = normalize_dim(d, len(shape_of(x)))
            except ShapeError as e:
                return notify_match_failure(op, str(e))
            n = shape_of(x)[d]
            s = shift % n if n else 0
            if s:
                x = ops.add(ConcatOp([_slice_dim(ops, x, d, n - s, s), _slice_dim(ops, x, d, 0, n - s)], d))
        y = ops.reshape(x, shape_of(op.result))
        rewriter.replace(op, ops, [y])


def _edge_pieces(ops: OpList, x: SSAValue, d: int, before: int, after: int, mode: str) -> tuple[list[SSAValue], list[SSAValue]]:
    """What ``mode`` puts before and after ``x`` along ``d``."""
    n = shape_of(x)[d]

    def widened(piece: SSAValue, amount: int) -> SSAValue:
        shape = list(shape_of(piece))
        shape[d] = amount
        return ops.add(BroadcastOp(piece, tuple(shape)))

    if mode == "reflect":
        if before >= n or after >= n:
            raise ValueError(f"reflect padding of {max(before, after)} needs a dim longer than that, got {n}")
        return ([_slice_dim(ops, x, d, i, 1) for i in range(before, 0, -1)],
                [_slice_dim(ops, x, d, n - 2 - i, 1) for i in range(after)])
    if mode == "replicate":
        return ([widened(_slice_dim(ops, x, d, 0, 1), before)] if before else [],
                [widened(_slice_dim(ops, x, d, n - 1, 1), after)] if after else [])
    if before > n or after > n:
        raise ValueError(f"circular padding of {max(before, after)} is more than the dim's {n}")
    return ([_slice_dim(ops, x, d, n - before, before)] if before else [], [_slice_dim(ops, x, d, 0, after)] if after else [])


#: padding modes that repeat the input's own values
_PAD_MODES = ("reflect", "replicate", "circular")


def _replicate_gather(ops: OpList, x: SSAValue, pads: list[int]) -> SSAValue:
    """``replicate`` padding with negative amounts (a crop): output ``j`` along each padded dim
    reads input ``clamp(j - before, 0, n - 1)``, torch's definition, as one `tg.take` of a
    constant table."""
    import numpy as np

    from tensor_graphs.dialects.tensor import TakeOp
    from tensor_graphs.lowering.aten_to_tensor.views import _constant, positions

    shape = shape_of(x)
    table = positions(shape)
    for k in range(len(pads) // 2):
        d, before, after = len(shape) - 1 - k, pads[2 * k], pads[2 * k + 1]
        n = shape[d]
        size = n + before + after
        if size < 0 or (size > 0 and n == 0):
            raise ValueError(f"replicate padding {pads} leaves dim {d} of size {n} with {size} elements")
        table = np.take(table, np.clip(np.arange(size) - before, 0, max(n - 1, 0)), axis=d)
    return ops.add(TakeOp(x, _constant(ops, table)))


def _pad_from_input(ops: OpList, x: SSAValue, pads: list[int], mode: str) -> SSAValue:
    rank = len(shape_of(x))
    if mode == "replicate" and any(p < 0 for p in pads):
        return _replicate_gather(ops, x, pads)
    if any(p < 0 for p in pads):
        raise ValueError(f"{mode} padding must not be negative, got {pads}")
    for k in range(len(pads) // 2):
        d = rank - 1 - k
        head, tail = _edge_pieces(ops, x, d, pads[2 * k], pads[2 * k + 1], mode)
        if head or tail:
            x = ops.add(ConcatOp([*head, x, *tail], d))
    return x


class PadPattern(RewritePattern):
    """Padding (``constant_pad_nd``, ``pad``): per padded dim, from the last, a ``tg.concat`` of
    what goes before, the input and what goes after. ``constant``: constant blocks (a negative
    pad is a ``tg.slice``); ``reflect``: the slices at ``before .. 1`` and ``n-2 .. n-1-after``,
    one wide each (the edge not repeated); ``replicate``: the edge slice broadcast ``before`` /
    ``after`` wide (with a negative amount: a gather of clamped positions, `_replicate_gather`); ``circular``: the last ``before`` and the first ``after`` slices.

    ```mlir
    %y = aten.constant_pad_nd %x {pad = array<i64: 1, 2>, value = 0 : i64} : (tensor<3x4xf32>) -> tensor<3x7xf32>
    // becomes
    %l = tg.constant dense<0.0> : tensor<3x1xf32>
    %r = tg.constant dense<0.0> : tensor<3x2xf32>
    %y = tg.concat %l, %x, %r {dim = 1 : i64} : (tensor<3x1xf32>, tensor<3x4xf32>, tensor<3x2xf32>) -> tensor<3x7xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, aten.PadOp):
            mode = op.mode.data
            if mode not in ("constant", *_PAD_MODES):
                return notify_match_failure(op, f"pad mode '{mode}' is not supported (constant, {', '.join(_PAD_MODES)})")
            value = op.value.value.data if op.value is not None else 0.0
        elif isinstance(op, aten.ConstantPadNdOp):
            mode, value = "constant", op.value.value.data
        else:
            return
        pads = list(op.pad.get_values())
        rank = len(shape_of(op.self))
        if len(pads) % 2 or len(pads) // 2 > rank:
            return notify_match_failure(op, f"pad {pads} does not fit a tensor of rank {rank}")
        el = element_type(op.result)
        ops = OpList()
        x = ops.cast(op.self, el)
        if mode != "constant":
            try:
                x = _pad_from_input(ops, x, pads, mode)
            except ValueError as e:
                return notify_match_failure(op, str(e))
            return rewriter.replace(op, ops, [x])
        for k in range(len(pads) // 2):
            d, before, after = rank - 1 - k, pads[2 * k], pads[2 * k + 1]
            n = shape_of(x)[d]
            x = _slice_dim(ops, x, d, max(-before, 0), n - max(-before, 0) - max(-after, 0))
            parts = []
            for amount in (before, after):
                if amount > 0:
                    block = list(shape_of(x))
                    block[d] = amount
                    parts.append(ops.add(constant(value, tuple(block), el)))
                else:
                    parts.append(None)
            pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
            if len(pieces) > 1:
                x = ops.add(ConcatOp(pieces, d))
        rewriter.replace(op, ops, [x])


class DiffPattern(RewritePattern):
    """``diff(x, n, dim, prepend, append)`` of run-time values (of constants, constant-fold
    evaluates it): the operands concatenated along ``dim``, then ``n`` times the neighbours'
    difference, ``x[1:] - x[:-1]`` (bool: ``!=``, as torch's logical_xor); ``n`` at least the
    length gives an empty result.

    ```mlir
    %d = aten.diff %x {dim = 1 : i64} : (tensor<3x5xf32>) -> tensor<3x4xf32>
    // becomes
    %hi = tg.slice %x {dim = 1 : i64, start = 1 : i64} : (tensor<3x5xf32>) -> tensor<3x4xf32>
    %lo = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<3x5xf32>) -> tensor<3x4xf32>
    %d = tg.sub %hi, %lo : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.DiffOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.self)
        try:
            dim = normalize_dim(op.dim.value.data, len(shape))
        except ShapeError as e:
            return notify_match_failure(op, str(e))
        ops = OpList()
        parts = [v for v in (op.prepend, op.self, op.append) if v is not None]
        x = parts[0] if len(parts) == 1 else ops.add(ConcatOp(parts, dim))
        el = element_type(op.self)
        for _ in range(op.n.value.data):
            length = shape_of(x)[dim]
            if length == 0:
                break
            hi, lo = ops.add(SliceOp(x, dim, 1, length - 1)), ops.add(SliceOp(x, dim, 0, length - 1))
            if el == i1:
                x = ops.add(elementwise_body([hi, lo], hi.type, lambda block, args: append(block, arith.XOrIOp(*args))))
            else:
                x = ops.add(SubOp(hi, lo, hi.type))
        rewriter.replace(op, ops, [x])


def populate_data_movement_patterns() -> list[RewritePattern]:
    return [
        TransposePattern(), ReshapePattern(), ExpandPattern(), RepeatPattern(), StackPattern(), NumpyTPattern(),
        RollPattern(), PadPattern(), IdentityPattern(), DiffPattern(),
    ]
