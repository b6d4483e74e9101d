"""`fuse-bias-activation`: ``relu(x + bias)`` becomes one `tg.bias_activation` sweep.

Two producers count as ``x + bias``: a `tg.add` with one operand broadcasting to the other, and a
`tg.matmul` whose accumulator is added with ``beta = 1`` (what `absorb-blas-flags` makes of the
same add), so the result does not depend on which of the two passes ran first. In both cases the
producer must have no other (live) user, or the fused op would compute it a second time.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects.shapes import is_broadcastable_to
from tensor_graphs.dialects.tensor import AddOp, BiasActivationOp, MatmulOp, ReluOp, shape_of
from tensor_graphs.transforms.dce import erase_with_dead_users, only_live_user_is


def _is_bias_for(bias: SSAValue, x: SSAValue) -> bool:
    """``bias`` can be added to ``x`` without changing ``x``'s type."""
    return (
        bias.type.element_type == x.type.element_type  # type: ignore[attr-defined]
        and is_broadcastable_to(shape_of(bias), shape_of(x))
    )


class FuseReluOfAdd(RewritePattern):
    """``relu(x + bias)`` (bias on either side) is one bias_activation.

    %s = tg.add %x, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    %r = tg.relu %s : tensor<2x8xf32>
    =>
    %r = tg.bias_activation %x, %b {activation = "relu"} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReluOp, rewriter: PatternRewriter) -> None:
        add = op.input.owner
        if not isinstance(add, AddOp) or not only_live_user_is(add.result, op):
            return
        for x, bias in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
            if x.type == add.result.type and _is_bias_for(bias, x):
                rewriter.replace(op, BiasActivationOp(x, bias, "relu"))
                erase_with_dead_users(add, rewriter)
                return


class FuseReluOfMatmulAccumulator(RewritePattern):
    """``relu(matmul(a, b, acc))`` with ``beta = 1`` takes the accumulator out as the bias.

    %y = tg.matmul %a, %w, %b {beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    %r = tg.relu %y : tensor<2x8xf32>
    =>
    %y = tg.matmul %a, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    %r = tg.bias_activation %y, %b {activation = "relu"} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReluOp, rewriter: PatternRewriter) -> None:
        mm = op.input.owner
        if not isinstance(mm, MatmulOp) or mm.acc is None or not only_live_user_is(mm.result, op):
            return
        transpose_a, transpose_b, alpha, beta = mm.flags
        if beta != 1.0 or not _is_bias_for(mm.acc, mm.result):
            return
        product = MatmulOp(
            mm.lhs, mm.rhs, transpose_a=transpose_a, transpose_b=transpose_b, alpha=alpha, result_type=mm.result.type
        )
        product.result.name_hint = mm.result.name_hint
        rewriter.replace(op, [product, BiasActivationOp(product.result, mm.acc, "relu")])
        erase_with_dead_users(mm, rewriter)


@dataclass(frozen=True)
class FuseBiasActivationPass(ModulePass):
    """Fuses ``relu(x + bias)`` (from a tg.add or a matmul accumulator) into tg.bias_activation."""

    name = "fuse-bias-activation"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseReluOfAdd(), FuseReluOfMatmulAccumulator()], dce_enabled=False)
        ).rewrite_module(op)
