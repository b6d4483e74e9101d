"""aten → tg: layer_norm over the trailing dims (weights materialised as ones/zeros when absent),
group_norm (a layer norm per group, then the per-channel affine), and eval-mode batch_norm that
the importer could not fold into a convolution (a per-channel scale and shift)."""

from __future__ import annotations

from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.tensor import AddOp, BroadcastOp, LayerNormOp, MulOp, RsqrtOp, SubOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, constant, element_type, notify_match_failure, scalar_constant


class LayerNormPattern(RewritePattern):
    """``layer_norm`` is ``tg.layer_norm`` over the last dim (several normalised trailing dims are
    flattened into one, and back); a missing weight is ones, a missing bias zeros.

    ```mlir
    %y = aten.layer_norm %x weight %w : tensor<8xf32> {normalized_shape = array<i64: 8>} : tensor<2x8xf32> -> tensor<2x8xf32>
    // becomes
    %b = tg.constant dense<0.000000e+00> : tensor<8xf32>
    %y = tg.layer_norm %x, %w, %b {eps = 1.000000e-05 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LayerNormOp, rewriter: PatternRewriter) -> None:
        ops = OpList()
        y = trailing_layer_norm(ops, op)
        if isinstance(y, str):
            return notify_match_failure(op, y)
        rewriter.replace(op, ops, [y])


def trailing_layer_norm(ops: OpList, op) -> SSAValue | str:
    """``op`` (``layer_norm`` or ``native_layer_norm``: ``input``, ``normalized_shape``,
    ``weight``, ``bias``, ``eps``) as one ``tg.layer_norm`` over its normalised trailing dims
    flattened into one, appended to ``ops``; why not, when those are not the input's trailing dims."""
    norm = tuple(op.normalized_shape.get_values())
    shape = shape_of(op.input)
    if not norm or tuple(shape[len(shape) - len(norm):]) != norm:
        return f"normalized_shape {list(norm)} is not the trailing dims of the input {list(shape)}"
    el, size = element_type(op.input), numel(norm)
    x = ops.reshape(op.input, (*shape[: len(shape) - len(norm)], size))
    weight = ops.reshape(op.weight, (size,)) if op.weight is not None else ops.add(constant(1.0, (size,), el))
    bias = ops.reshape(op.bias, (size,)) if op.bias is not None else ops.add(constant(0.0, (size,), el))
    return ops.reshape(ops.add(LayerNormOp(x, weight, bias, op.eps.value.data)), shape)


class GroupNormPattern(RewritePattern):
    """``group_norm``: x [N, C, *] as [N, G, C/G * prod(*)] normalised by `tg.layer_norm` (no
    affine), then ``* weight[C, 1] + bias[C, 1]`` per channel.

    ```mlir
    %y = aten.group_norm %x, %w, %b {num_groups = 2 : i64} : (tensor<1x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x3x3xf32>
    // becomes
    %g = tg.reshape %x : (tensor<1x4x3x3xf32>) -> tensor<1x2x18xf32>
    %n = tg.layer_norm %g, %ones, %zeros {eps = 1.000000e-05 : f32} : (tensor<1x2x18xf32>, tensor<18xf32>, tensor<18xf32>) -> tensor<1x2x18xf32>
    %c = tg.reshape %n : (tensor<1x2x18xf32>) -> tensor<1x4x9xf32>
    %s = tg.mul %c, %w2 : (tensor<1x4x9xf32>, tensor<4x1xf32>) -> tensor<1x4x9xf32>
    %t = tg.add %s, %b2 : (tensor<1x4x9xf32>, tensor<4x1xf32>) -> tensor<1x4x9xf32>
    %y = tg.reshape %t : (tensor<1x4x9xf32>) -> tensor<1x4x3x3xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.GroupNormOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.input)
        groups = op.num_groups.value.data
        if len(shape) < 2 or groups <= 0 or shape[1] % groups:
            return notify_match_failure(op, f"{groups} groups do not divide the channels of {list(shape)}")
        n, c = shape[:2]
        spatial = 1
        for d in shape[2:]:
            spatial *= d
        d = c // groups * spatial
        ops = OpList()
        el = element_type(op.input)
        g = ops.reshape(op.input, (n, groups, d))
        y = ops.add(LayerNormOp(g, ops.add(constant(1.0, (d,), el)), ops.add(constant(0.0, (d,), el)), op.eps.value.data))
        y = ops.reshape(y, (n, c, spatial))
        if op.weight is not None:
            y = ops.add(MulOp(y, ops.reshape(op.weight, (c, 1))))
        if op.bias is not None:
            y = ops.add(AddOp(y, ops.reshape(op.bias, (c, 1))))
        rewriter.replace(op, ops, [ops.reshape(y, shape)])


class BatchNormPattern(RewritePattern):
    """Eval-mode ``batch_norm`` the importer did not fold into a convolution (one after a linear
    layer, or on an input): ``x * s + (bias - mean * s)``, ``s = weight * rsqrt(var + eps)``, per
    channel (dim 1). The per-channel terms are C elements; fusion folds the rest into one sweep.

    ```mlir
    %y = aten.batch_norm %x, %w, %b, %m, %v {training = false, eps = 1.0e-05 : f64, ...} : (...) -> tensor<2x4x3xf32>
    // becomes (s and t of shape [4, 1])
    %s = tg.mul %w2, (tg.rsqrt (tg.add %v2, %eps))
    %t = tg.sub %b2, (tg.mul %m2, %s)
    %y = tg.add (tg.mul %x, %s), %t
    ```
    Training mode (batch statistics) arrives decomposed (`compositions.PARTIAL`); what is left
    is reported. ``_native_batch_norm_legit_no_training``'s saved statistics are empty, as eager's.
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, aten.BatchNormOp):
            if op.training.value.data:
                return notify_match_failure(op, "training-mode batch_norm (batch statistics) is not supported; call model.eval()")
            results = [op.result]
        elif isinstance(op, aten.NativeBatchNormLegitNoTrainingOp):
            results = [op.result0, op.result1, op.result2]
            if any(r.uses and shape_of(r) != (0,) for r in results[1:]):
                return notify_match_failure(op, "only the normalised output of batch_norm is supported (its saved statistics are used)")
        else:
            return
        shape = shape_of(op.input)
        if len(shape) < 2 or op.running_mean is None or op.running_var is None:
            return notify_match_failure(op, f"expected an input of rank >= 2 and running statistics, got {list(shape)}")
        c = shape[1]
        per_channel = (c,) + (1,) * (len(shape) - 2)
        ops = OpList()
        el = element_type(op.input)
        var = ops.reshape(op.running_var, per_channel)
        scale = ops.add(RsqrtOp(ops.add(AddOp(var, ops.add(scalar_constant(op.eps.value.data, el))))))
        if op.weight is not None:
            scale = ops.add(MulOp(ops.reshape(op.weight, per_channel), scale))
        shift = ops.add(MulOp(ops.reshape(op.running_mean, per_channel), scale))
        if op.bias is not None:
            shift = ops.add(SubOp(ops.reshape(op.bias, per_channel), shift))
            y = ops.add(AddOp(ops.add(MulOp(op.input, scale)), shift))
        else:
            y = ops.add(SubOp(ops.add(MulOp(op.input, scale)), shift))
        saved = [ops.add(BroadcastOp(ops.add(scalar_constant(0, element_type(r))), (0,))) if r.uses else None for r in results[1:]]
        rewriter.replace(op, ops, [y, *saved])  # eval mode saves no statistics: empty, as eager's


def populate_normalization_patterns() -> list[RewritePattern]:
    return [LayerNormPattern(), GroupNormPattern(), BatchNormPattern()]
