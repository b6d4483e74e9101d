"""`fuse-layer-norm`: the mean/variance formula over the last dim becomes one `tg.layer_norm`.

    %m  = tg.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
    %d  = tg.sub %x, %m : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
    %sq = tg.pow %d, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>     // or tg.mul %d, %d
    %v  = tg.mean %sq {dims = array<i64: 1>, keepdim = true} : (tensor<2x8xf32>) -> tensor<2x1xf32>
    %ve = tg.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
    %r  = tg.rsqrt %ve : tensor<2x1xf32>                                           // or 1 / sqrt, pow -0.5
    %n  = tg.mul %d, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>    // or d / sqrt(ve)
    %y  = tg.mul %n, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>      // optional
    %z  = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>      // optional
    =>
    %z = tg.layer_norm %x, %w, %b {eps = 1.0e-05 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>

Products and sums match in either operand order; ``x - mean`` may be one op used twice or two
identical ops. Without the affine part the weight and bias are constant ones and zeros; a
weight/bias of shape ``[1, ..., D]`` is reshaped to ``[D]``. Every matched op other than the
root must have no live user outside the match. The walk goes from the last op backwards, so the
largest match (with the affine part) wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.tensor import (
    AddOp,
    ConstantOp,
    DivOp,
    LayerNormOp,
    MeanOp,
    MulOp,
    PowOp,
    ReshapeOp,
    RsqrtOp,
    SqrtOp,
    SubOp,
    shape_of,
)
from tensor_graphs.transforms.dce import erase_dead_producers
from tensor_graphs.transforms.evaluate import array_to_dense, scalar_constant
from tensor_graphs.transforms.fusion.common import float32_kernel, is_splat, used_only_inside


def _pairs(op: Operation) -> list[tuple[SSAValue, SSAValue]]:
    a, b = op.operands
    return [(a, b), (b, a)]


def _mean_of_last(value: SSAValue) -> SSAValue | None:
    """The input of ``mean(input, last dim, keepdim)`` defining ``value``, else None."""
    op = value.owner
    if not isinstance(op, MeanOp) or not op.keeps_dims:
        return None
    return op.input if op.reduce_dims == (len(shape_of(op.input)) - 1,) else None


@dataclass
class _Norm:
    x: SSAValue
    eps: float
    ops: list[Operation] = field(default_factory=list)


def _centered(d: SSAValue) -> tuple[SSAValue, list[Operation]] | None:
    """``(x, ops)`` when ``d`` is ``x - mean(x)`` over the last dim."""
    sub = d.owner
    if not isinstance(sub, SubOp) or sub.result.type != sub.lhs.type:
        return None
    if _mean_of_last(sub.rhs) is not sub.lhs:
        return None
    return sub.lhs, [sub, sub.rhs.owner]  # type: ignore[list-item]


def _variance_plus_eps(ve: SSAValue, x: SSAValue) -> tuple[float, list[Operation]] | None:
    """``(eps, ops)`` when ``ve`` is ``mean((x - mean(x))^2) + eps``."""
    add = ve.owner
    if not isinstance(add, AddOp):
        return None
    for v, e in _pairs(add):
        eps = scalar_constant(e)
        sq = _mean_of_last(v)
        if eps is None or sq is None or v.type != add.result.type:
            continue
        square = sq.owner
        if isinstance(square, PowOp) and is_splat(square.rhs, 2.0, rtol=0.0):
            bases = [square.lhs]
        elif isinstance(square, MulOp):
            bases = [square.lhs, square.rhs]
        else:
            continue
        ops: list[Operation] = [add, v.owner, square]  # type: ignore[list-item]
        centered = [_centered(b) for b in bases]
        if any(c is None or c[0] is not x for c in centered):
            continue
        for c in centered:
            ops += c[1]  # type: ignore[index]
        return eps, ops
    return None


def _inverse_std(r: SSAValue) -> tuple[SSAValue, list[Operation]] | None:
    """``(ve, ops)`` when ``r`` is ``rsqrt(ve)``, ``1 / sqrt(ve)`` or ``pow(ve, -0.5)``."""
    op = r.owner
    if isinstance(op, RsqrtOp):
        return op.input, [op]
    if isinstance(op, DivOp) and is_splat(op.lhs, 1.0, rtol=0.0) and isinstance(s := op.rhs.owner, SqrtOp):
        return s.input, [op, s]
    if isinstance(op, PowOp) and is_splat(op.rhs, -0.5, rtol=0.0):
        return op.lhs, [op]
    return None


def _normalized(value: SSAValue) -> _Norm | None:
    """``(x - mean) * rsqrt(var + eps)`` (or ``/ sqrt(var + eps)``) of some ``x``."""
    op = value.owner
    candidates: list[tuple[SSAValue, SSAValue, list[Operation]]] = []  # (d, ve, ops)
    if isinstance(op, MulOp):
        for d, r in _pairs(op):
            if (inv := _inverse_std(r)) is not None:
                candidates.append((d, inv[0], [op, *inv[1]]))
    elif isinstance(op, DivOp) and isinstance(s := op.rhs.owner, SqrtOp):
        candidates.append((op.lhs, s.input, [op, s]))
    for d, ve, ops in candidates:
        centered = _centered(d)
        if centered is None or op.results[0].type != centered[0].type:  # type: ignore[union-attr]
            continue
        x = centered[0]
        var = _variance_plus_eps(ve, x)
        if var is not None:
            return _Norm(x, var[0], ops + centered[1] + var[1])
    return None


def _is_param(p: SSAValue, d: int) -> bool:
    """``p`` is a vector of ``d`` f32 elements along the last dim (shape ``[1, ..., d]``)."""
    s = shape_of(p)
    return len(s) >= 1 and s[-1] == d and numel(s) == d and p.type.element_type == f32  # type: ignore[attr-defined]


@dataclass
class _LayerNorm:
    norm: _Norm
    weight: SSAValue | None = None
    bias: SSAValue | None = None


def _scaled(value: SSAValue, d: int) -> _LayerNorm | None:
    op = value.owner
    if isinstance(op, MulOp):
        for n, w in _pairs(op):
            if _is_param(w, d) and n.type == op.result.type and (norm := _normalized(n)) is not None:
                norm.ops.append(op)
                return _LayerNorm(norm, weight=w)
    norm = _normalized(value)
    return _LayerNorm(norm) if norm is not None else None


def match_layer_norm(root: Operation) -> _LayerNorm | None:
    """The layer norm that ``root`` (the last op of the formula) computes, or None."""
    if len(root.results) != 1 or not isinstance(root.results[0].type, TensorType):
        return None
    value = root.results[0]
    d = shape_of(value)[-1] if shape_of(value) else 0
    if isinstance(root, AddOp):
        for n, b in _pairs(root):
            if _is_param(b, d) and n.type == root.result.type and (ln := _scaled(n, d)) is not None:
                ln.norm.ops.append(root)
                ln.bias = b
                return ln
        return None
    if isinstance(root, MulOp | DivOp):
        return _scaled(value, d)
    return None


def _vector(value: SSAValue | None, d: int, fill: float) -> tuple[list[Operation], SSAValue]:
    """``value`` as a ``[d]`` tensor (reshaped if needed), or a constant of ``fill``s."""
    if value is None:
        const = ConstantOp(array_to_dense(np.full((d,), fill, np.float32), TensorType(f32, (d,))))
        return [const], const.result
    if shape_of(value) == (d,):
        return [], value
    reshape = ReshapeOp(value, (d,))
    return [reshape], reshape.result


class FuseLayerNormFormula(RewritePattern):
    """The last op of a decomposed layer norm becomes tg.layer_norm (see the module doc)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, AddOp | MulOp | DivOp):
            return
        ln = match_layer_norm(op)
        if ln is None or not used_only_inside(ln.norm.ops, op) or not float32_kernel(ln.norm.x):
            return
        d = shape_of(op.results[0])[-1]
        w_ops, w = _vector(ln.weight, d, 1.0)
        b_ops, b = _vector(ln.bias, d, 0.0)
        norm = LayerNormOp(ln.norm.x, w, b, ln.norm.eps)
        norm.result.name_hint = op.results[0].name_hint
        operands = list(op.operands)
        rewriter.replace(op, [*w_ops, *b_ops, norm], [norm.result])
        erase_dead_producers(operands, rewriter)


@dataclass(frozen=True)
class FuseLayerNormPass(ModulePass):
    """Recognises the decomposed layer norm (optionally with weight and bias) as tg.layer_norm."""

    name = "fuse-layer-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseLayerNormFormula()], dce_enabled=False), walk_reverse=True
        ).rewrite_module(op)
