"""aten → tg: layer_norm over the last dim (weights materialised as ones/zeros when absent)."""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import LayerNormOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, constant, element_type, notify_match_failure


class LayerNormPattern(RewritePattern):
    """``layer_norm`` over ONE trailing dim is ``tg.layer_norm``; a missing weight is ones, a missing bias zeros.

    ```mlir
    %y = aten.layer_norm %x weight %w : tensor<8xf32> {normalized_shape = array<i64: 8>} : tensor<2x8xf32> -> tensor<2x8xf32>
    // becomes
    %b = tg.constant dense<0.000000e+00> : tensor<8xf32>
    %y = tg.layer_norm %x, %w, %b {eps = 1.000000e-05 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    ```
    Normalising over several dims is left alone (and reported).
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LayerNormOp, rewriter: PatternRewriter) -> None:
        norm = tuple(op.normalized_shape.get_values())
        shape = shape_of(op.input)
        if len(norm) != 1 or not shape or shape[-1] != norm[0]:
            return notify_match_failure(op, f"only normalisation over the last dim is supported, got normalized_shape {list(norm)} for input {list(shape)}")
        ops = OpList()
        el = element_type(op.input)
        weight = op.weight if op.weight is not None else ops.add(constant(1.0, norm, el))
        bias = op.bias if op.bias is not None else ops.add(constant(0.0, norm, el))
        y = ops.add(LayerNormOp(op.input, weight, bias, op.eps.value.data))
        rewriter.replace(op, ops, [y])


def populate_normalization_patterns() -> list[RewritePattern]:
    return [LayerNormPattern()]
