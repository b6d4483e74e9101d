"""aten → tg: scaled_dot_product_attention → ``tg.attention`` (scale, causal, additive f32 mask)."""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import f32, i1
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import AttentionOp, ConstantOp, SelectOp, shape_of
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, notify_match_failure, scalar_constant


class ScaledDotProductAttentionPattern(RewritePattern):
    """``softmax(q @ k^T * scale + mask) @ v`` as one ``tg.attention``.

    ```mlir
    %y = aten.scaled_dot_product_attention %q, %k, %v, %m : (tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, tensor<1x1x7x7xi1>) -> tensor<1x4x7x16xf32>
    // becomes
    %zero = tg.constant dense<0.000000e+00> : tensor<f32>
    %ninf = tg.constant dense<0xFF800000> : tensor<f32>
    %add = tg.select %m, %zero, %ninf : (tensor<1x1x7x7xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x7x7xf32>
    %y = tg.attention %q, %k, %v mask %add {scale = 2.500000e-01 : f32} : (...) -> tensor<1x4x7x16xf32>
    ```
    ``scale`` defaults to ``1/sqrt(D)``; ``is_causal`` is ``causal = true`` (for Sq != Sk torch's
    top-left aligned causal mask becomes an explicit constant mask); a bool mask (true = attend)
    becomes the additive ``select(mask, 0, -inf)`` (constant-fold folds it when the mask is
    constant); an f32 mask is used as is. Fewer key/value heads than query heads (GQA) pass
    through. Rank-2 operands get a unit head dim and lose it again.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.ScaledDotProductAttentionOp, rewriter: PatternRewriter) -> None:
        if op.dropout_p.value.data != 0.0:
            return notify_match_failure(op, f"dropout_p = {op.dropout_p.value.data}: attention dropout is not supported in inference")
        q, k, v = shape_of(op.query), shape_of(op.key), shape_of(op.value)
        causal = bool(op.is_causal.value.data)
        if causal and op.attn_mask is not None:
            return notify_match_failure(op, "both is_causal and attn_mask are set")
        if len(q) < 2 or len(k) != len(q) or len(v) != len(q):
            return notify_match_failure(op, f"query, key and value need one rank >= 2, got {list(q)}, {list(k)}, {list(v)}")
        if len(q) >= 3 and (q[:-3] != k[:-3] or k[:-2] != v[:-2] or k[-3] == 0 or q[-3] % k[-3]):
            return notify_match_failure(op, f"batch/head dims of query {list(q)}, key {list(k)}, value {list(v)} do not fit (heads must be a multiple of kv heads)")
        scale = op.scale.value.data if op.scale is not None else 1.0 / math.sqrt(q[-1])
        ops = OpList()
        mask = op.attn_mask
        if mask is not None and element_type(mask) == i1:
            zero, ninf = ops.add(scalar_constant(0.0)), ops.add(scalar_constant(-math.inf))
            mask = ops.add(SelectOp(mask, zero, ninf))
        elif mask is not None and element_type(mask) != f32:
            return notify_match_failure(op, f"attn_mask must be i1 or f32, got {mask.type}")
        if causal and q[-2] != k[-2]:  # torch aligns the causal mask top-left; tg.attention bottom-right
            keep = np.tril(np.ones((q[-2], k[-2]), dtype=bool))
            mask = ops.add(ConstantOp(dense_from_numpy(np.where(keep, 0.0, -np.inf).astype(np.float32))))
            causal = False
        query, key, value = op.query, op.key, op.value
        if len(q) == 2:
            query, key, value = (ops.reshape(x, (1, *shape_of(x))) for x in (query, key, value))
        y = ops.add(AttentionOp(query, key, value, mask, scale, causal))
        y = ops.reshape(y, shape_of(op.result))
        rewriter.replace(op, ops, [y])


def populate_attention_patterns() -> list[RewritePattern]:
    return [ScaledDotProductAttentionPattern()]
