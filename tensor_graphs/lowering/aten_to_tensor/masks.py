"""aten → tg: the mask builders (arange, full, ones, triu, comparisons, bitwise ops, cumsum, index, ...).

These have no tg lowering on purpose: they only ever compute constants (causal masks, position
ids), and ``constant-fold`` evaluates them with PyTorch before this pass runs. One that is still
here was computed from something that is not a constant; the pattern records why, and the pass
reports it with every other op left over. The exceptions are the ops whose value depends on their
operand's shape only (``zeros_like``, ``new_ones``, ...): they become a splat ``tg.constant``.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import ConstantOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import constant, element_type, notify_match_failure

#: ops whose value is one number everywhere, whatever their operand holds -> that number (None: fill_value)
SHAPE_ONLY: dict[type[aten.AtenOp], float | None] = {
    aten.OnesLikeOp: 1,
    aten.ZerosLikeOp: 0,
    aten.FullLikeOp: None,
    aten.NewOnesOp: 1,
    aten.NewZerosOp: 0,
    aten.NewFullOp: None,
}

#: ops that only constant-fold removes
FOLD_ONLY: tuple[type[aten.AtenOp], ...] = (
    aten.ArangeOp,
    aten.ArangeStartOp,
    aten.ArangeStartStepOp,
    aten.FullOp,
    aten.OnesOp,
    aten.ZerosOp,
    aten.ScalarTensorOp,
    aten.TriuOp,
    aten.TrilOp,
    aten.EqTensorOp,
    aten.EqScalarOp,
    aten.NeTensorOp,
    aten.NeScalarOp,
    aten.LtTensorOp,
    aten.LtScalarOp,
    aten.LeTensorOp,
    aten.LeScalarOp,
    aten.GtTensorOp,
    aten.GtScalarOp,
    aten.GeTensorOp,
    aten.GeScalarOp,
    aten.BitwiseAndTensorOp,
    aten.BitwiseOrTensorOp,
    aten.BitwiseNotOp,
    aten.AndTensorOp,
    aten.OrTensorOp,
    aten.LogicalAndOp,
    aten.LogicalOrOp,
    aten.LogicalNotOp,
    aten.CumsumOp,
    aten.DiffOp,
    aten.IndexTensorOp,
)


class FoldOnlyPattern(RewritePattern):
    """Never rewrites: records why a mask builder is still here.

    ```mlir
    %m = aten.gt.Scalar %x {other = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xi1>
    // stays, and the pass reports
    //   aten.gt.Scalar: only constant-fold removes this op, but operand 0 is computed at run time (an argument of the function)
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, FOLD_ONLY):
            return
        for i, v in enumerate(op.operands):
            if not isinstance(v.owner, ConstantOp):
                source = v.owner.name if hasattr(v.owner, "name") else "an argument of the function"
                where = f"by {source}" if hasattr(v.owner, "name") else "(an argument of the function)"
                return notify_match_failure(op, f"only constant-fold removes this op, but operand {i} is computed at run time {where}")
        notify_match_failure(op, "only constant-fold removes this op; run constant-fold before convert-aten-to-tensor")


class ShapeOnlyPattern(RewritePattern):
    """``zeros_like``, ``ones_like``, ``full_like``, ``new_zeros``, ``new_ones``, ``new_full``: a splat constant.

    ```mlir
    %z = aten.zeros_like %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %z = tg.constant dense<0.000000e+00> : tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if type(op) not in SHAPE_ONLY:
            return
        value = SHAPE_ONLY[type(op)]
        if value is None:
            value = op.fill_value.value.data
        rewriter.replace(op, constant(value, shape_of(op.result), element_type(op.result)))


def populate_mask_patterns() -> list[RewritePattern]:
    return [ShapeOnlyPattern(), FoldOnlyPattern()]
