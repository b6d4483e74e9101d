"""aten → tg: elementwise ops (add/sub/mul/div in Tensor and Scalar forms, relu).

Scalars become rank-0 ``tg.constant dense<v> : tensor<f32>`` operands that broadcast.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import AddOp, DivOp, ElementwiseBinaryOp, MulOp, ReluOp, SubOp
from tensor_graphs.lowering.aten_to_tensor.common import OpList, scalar_constant

#: aten binary op -> (tg op, whether its ``other`` is a Scalar property)
_BINARY: dict[type, tuple[type[ElementwiseBinaryOp], bool]] = {
    aten.AddTensorOp: (AddOp, False),
    aten.SubTensorOp: (SubOp, False),
    aten.MulTensorOp: (MulOp, False),
    aten.DivTensorOp: (DivOp, False),
    aten.AddScalarOp: (AddOp, True),
    aten.SubScalarOp: (SubOp, True),
    aten.MulScalarOp: (MulOp, True),
    aten.DivScalarOp: (DivOp, True),
}


class BinaryPattern(RewritePattern):
    """``self <op> alpha * other``; a Scalar ``other`` (times alpha) becomes a rank-0 constant.

    ```mlir
    %y = aten.sub.Tensor %a, %b {alpha = 2.0 : f64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %z = aten.mul.Scalar %y {other = 0.5 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %c2 = tg.constant dense<2.0> : tensor<f32>
    %b2 = tg.mul %b, %c2 : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
    %y = tg.sub %a, %b2 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %c = tg.constant dense<0.5> : tensor<f32>
    %z = tg.mul %y, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        entry = _BINARY.get(type(op))
        if entry is None:
            return
        tg_op, scalar_other = entry
        alpha = op.alpha.value.data if hasattr(op, "alpha") else 1.0
        ops = OpList()
        if scalar_other:
            other = ops.add(scalar_constant(op.other.value.data * alpha))
        else:
            other = op.other
            if alpha != 1.0:
                other = ops.add(MulOp(other, ops.add(scalar_constant(alpha))))
        y = ops.add(tg_op(op.self, other, op.result.type))
        rewriter.replace(op, ops, [y])


class ReluPattern(RewritePattern):
    """```mlir
    %y = aten.relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %y = tg.relu %x : tensor<2x3xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.ReluOp, rewriter: PatternRewriter) -> None:
        rewriter.replace(op, ReluOp(op.self))


def populate_elementwise_patterns() -> list[RewritePattern]:
    return [BinaryPattern(), ReluPattern()]
