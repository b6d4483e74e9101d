"""`fuse-rms-norm-rope`: an RMS norm whose only user is a rope becomes the rope's norm prologue.

Qwen3 (and OLMo-2, Gemma-3: per-head "QK norm") normalise each head of q and k, then rotate it;
two sweeps over the same rows, two launches on a GPU. `tg.rope` with a ``norm`` weight does both
in one: each row is RMS-normalised as it is read (the normalised row is never written)::

    %n = tg.rms_norm %x, %w {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>) -> tensor<1x8x4x16xf32>
    %r = tg.rope %n, %cos, %sin : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>) -> tensor<1x8x4x16xf32>
    =>
    %r = tg.rope %x, %cos, %sin norm %w {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>, tensor<16xf32>) -> tensor<1x8x4x16xf32>

Only float32 (the kernels' norm prologue), and only when the norm has no other live user. It
runs after `absorb-attention-layouts`, which moves a rope before the transpose that used to
separate it from the norm.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects.tensor import RmsNormOp, RopeOp
from tensor_graphs.transforms.dce import erase_dead_producers, only_live_user_is


class FuseRmsNormIntoRope(RewritePattern):
    """``rope(rms_norm(x, w), cos, sin)`` -> ``rope(x, cos, sin) norm w`` (see the module doc)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: RopeOp, rewriter: PatternRewriter) -> None:
        norm = op.input.owner
        if op.norm is not None or not isinstance(norm, RmsNormOp) or not only_live_user_is(norm.result, op):
            return
        if any(v.type.element_type != f32 for v in (norm.input, norm.weight, op.cos, op.sin)):  # type: ignore[attr-defined]
            return
        fused = RopeOp(norm.input, op.cos, op.sin, norm.weight, norm.eps.value.data)
        fused.result.name_hint = op.result.name_hint
        operands = list(op.operands)
        rewriter.replace(op, fused)
        erase_dead_producers(operands, rewriter)


@dataclass(frozen=True)
class FuseRmsNormRopePass(ModulePass):
    """An RMS norm feeding only a rope runs inside it (`tg.rope` with ``norm``)."""

    name = "fuse-rms-norm-rope"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FuseRmsNormIntoRope()], dce_enabled=False)).rewrite_module(op)
