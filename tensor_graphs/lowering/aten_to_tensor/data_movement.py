"""aten → tg: data movement (t, transpose, permute, view/reshape/flatten/(un)squeeze, expand, contiguous/clone).

Everything is ``tg.transpose {perm}``, ``tg.reshape`` or ``tg.broadcast``; ops that do not change
the value (``contiguous``, ``clone``, a transpose of equal dims, a reshape or expand to the same
shape) disappear.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.aten import normalize_dim
from tensor_graphs.dialects.shapes import ShapeError
from tensor_graphs.dialects.tensor import BroadcastOp, ReshapeOp, TransposeOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import notify_match_failure


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
    """``expand`` materialises NumPy broadcasting as ``tg.broadcast`` (nothing when the shape stays).

    ```mlir
    %y = aten.expand %x {size = array<i64: 4, -1, 3>} : (tensor<1x3xf32>) -> tensor<4x1x3xf32>
    // becomes
    %y = tg.broadcast %x : (tensor<1x3xf32>) -> tensor<4x1x3xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.ExpandOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.result)
        if shape == shape_of(op.self):
            rewriter.replace(op, [], [op.self])
        else:
            rewriter.replace(op, BroadcastOp(op.self, shape))


def populate_data_movement_patterns() -> list[RewritePattern]:
    return [TransposePattern(), ReshapePattern(), ExpandPattern(), IdentityPattern()]
