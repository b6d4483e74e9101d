"""`fuse-rms-norm`: the mean-square formula over the last dim becomes one `tg.rms_norm`.

    %sq = tg.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>     // or tg.mul %x, %x
    %ms = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
    %me = tg.add %ms, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
    %r  = tg.rsqrt %me : tensor<2x1xf32>                                           // or 1 / sqrt, pow -0.5
    %n  = tg.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>    // or x / sqrt(me)
    %y  = tg.mul %w, %n : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>      // optional
    =>
    %y = tg.rms_norm %x, %w {eps = 1.0e-06 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>

Products match in either operand order, and the weight may sit anywhere in the product:
``w * (x * r)``, ``(x * w) * r``, ``x * (r * w)`` (any order inside each). A cast round trip
(``x32 = cast(x)``, the formula on ``x32``, ``cast(n)`` back to ``x``'s type, as Hugging Face's
``LlamaRMSNorm`` / ``Qwen3RMSNorm`` write it) is absorbed into the match. Without a weight the
weight is a constant of ones; a weight of shape ``[1, ..., D]`` is reshaped to ``[D]``. Every
matched op other than the root must have no live user outside the match; the walk goes from the
last op backwards, so the largest match (with the weight) wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tensor_graphs.dialects.tensor import AddOp, CastOp, DivOp, MulOp, PowOp, RmsNormOp, SqrtOp, shape_of
from tensor_graphs.transforms.dce import erase_dead_producers
from tensor_graphs.transforms.evaluate import scalar_constant
from tensor_graphs.transforms.fusion.common import float32_kernel, is_splat, used_only_inside
from tensor_graphs.transforms.fusion.layer_norm import _inverse_std, _is_param, _mean_of_last, _pairs, _vector


@dataclass
class _Rms:
    x: SSAValue
    eps: float
    weight: SSAValue | None = None
    ops: list[Operation] = field(default_factory=list)


def _mean_square_plus_eps(ve: SSAValue, x: SSAValue) -> tuple[float, list[Operation]] | None:
    """``(eps, ops)`` when ``ve`` is ``mean(x^2, last dim, keepdim) + eps``."""
    add = ve.owner
    if not isinstance(add, AddOp):
        return None
    for v, e in _pairs(add):
        eps = scalar_constant(e)
        sq = _mean_of_last(v)
        if eps is None or sq is None or v.type != add.result.type:
            continue
        square = sq.owner
        if isinstance(square, PowOp) and is_splat(square.rhs, 2.0, rtol=0.0) and square.lhs is x:
            pass
        elif not (isinstance(square, MulOp) and square.lhs is x and square.rhs is x):
            continue
        return eps, [add, v.owner, square]  # type: ignore[list-item]
    return None


def _inv_rms(r: SSAValue, x: SSAValue) -> tuple[float, list[Operation]] | None:
    """``(eps, ops)`` when ``r`` is ``rsqrt(mean(x^2) + eps)`` (or ``1 / sqrt``, ``pow -0.5``)."""
    inv = _inverse_std(r)
    if inv is None:
        return None
    ms = _mean_square_plus_eps(inv[0], x)
    return (ms[0], inv[1] + ms[1]) if ms is not None else None


def _normalized(value: SSAValue) -> _Rms | None:
    """``x * rsqrt(mean(x^2) + eps)`` (either order) or ``x / sqrt(mean(x^2) + eps)``."""
    op = value.owner
    if isinstance(op, MulOp):
        for x, r in _pairs(op):
            if x.type == op.result.type and (m := _inv_rms(r, x)) is not None:
                return _Rms(x, m[0], ops=[op, *m[1]])
    elif isinstance(op, DivOp) and isinstance(s := op.rhs.owner, SqrtOp) and op.lhs.type == op.result.type:
        if (ms := _mean_square_plus_eps(s.input, op.lhs)) is not None:
            return _Rms(op.lhs, ms[0], ops=[op, s, *ms[1]])
    return None


def _normalized_or_round_trip(value: SSAValue) -> _Rms | None:
    """``_normalized(value)``, or ``cast(_normalized(cast(x)))`` back to ``x``'s type."""
    op = value.owner
    if isinstance(op, CastOp):
        rms = _normalized(op.input)
        if rms is None or not isinstance(fwd := rms.x.owner, CastOp) or fwd.input.type != op.result.type:
            return None
        if not float32_kernel(fwd.input):  # the kernel computes float32: the casts stay outside
            return None
        rms.ops += [op, fwd]
        rms.x = fwd.input
        return rms
    return _normalized(value)


def _weighted(root: MulOp, d: int) -> _Rms | None:
    """The product ``x * r * w`` in any grouping and order."""
    for p, q in _pairs(root):
        if q.type != root.result.type and p.type != root.result.type:
            continue
        # w * n, n the whole normalisation (possibly with the cast round trip)
        if _is_param(p, d) and q.type == root.result.type and (rms := _normalized_or_round_trip(q)) is not None:
            rms.weight = p
            rms.ops.append(root)
            return rms
        inner = q.owner
        if not isinstance(inner, MulOp) or q.type != root.result.type:
            continue
        for a, b in _pairs(inner):
            # r * (x * w): p = r, a = x, b = w;  x * (r * w): p = x, a = r, b = w
            if not _is_param(b, d):
                continue
            for x, r in ((a, p), (p, a)):
                if x.type == root.result.type and (m := _inv_rms(r, x)) is not None:
                    return _Rms(x, m[0], b, [root, inner, *m[1]])
    return None


def match_rms_norm(root: Operation) -> _Rms | None:
    """The RMS norm that ``root`` (the last op of the formula) computes, or None."""
    if len(root.results) != 1 or not isinstance(root.results[0].type, TensorType):
        return None
    value = root.results[0]
    shape = shape_of(value)
    if not shape:
        return None
    if isinstance(root, MulOp) and (rms := _weighted(root, shape[-1])) is not None:
        return rms
    if isinstance(root, MulOp | DivOp | CastOp):
        return _normalized_or_round_trip(value)
    return None


class FuseRmsNormFormula(RewritePattern):
    """The last op of a decomposed RMS norm becomes tg.rms_norm (see the module doc)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, MulOp | DivOp | CastOp):
            return
        rms = match_rms_norm(op)
        if rms is None or rms.x.type != op.results[0].type or not used_only_inside(rms.ops, op) or not float32_kernel(rms.x):
            return
        d = shape_of(op.results[0])[-1]
        w_ops, w = _vector(rms.weight, d, 1.0)
        norm = RmsNormOp(rms.x, w, rms.eps)
        norm.result.name_hint = op.results[0].name_hint
        operands = list(op.operands)
        rewriter.replace(op, [*w_ops, norm], [norm.result])
        erase_dead_producers(operands, rewriter)


@dataclass(frozen=True)
class FuseRmsNormPass(ModulePass):
    """Recognises the decomposed RMS norm (optionally with a weight) as tg.rms_norm."""

    name = "fuse-rms-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseRmsNormFormula()], dce_enabled=False), walk_reverse=True
        ).rewrite_module(op)
