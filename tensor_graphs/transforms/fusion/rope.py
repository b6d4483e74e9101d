"""`fuse-rope`: rotary position embedding in rotate-half form becomes one `tg.rope`.

Hugging Face's ``apply_rotary_pos_emb`` (Llama, Qwen, Mistral, ...) computes
``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])``;
after `convert-aten-to-tensor` and `canonicalize` that reads::

    %c  = tg.mul %x, %cos : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
    %lo = tg.slice %x {dim = 3 : i64, start = 0 : i64} : (tensor<1x4x8x16xf32>) -> tensor<1x4x8x8xf32>
    %hi = tg.slice %x {dim = 3 : i64, start = 8 : i64} : (tensor<1x4x8x16xf32>) -> tensor<1x4x8x8xf32>
    %n  = tg.neg %hi : tensor<1x4x8x8xf32>                                  // or tg.mul %hi, -1
    %r  = tg.concat %n, %lo {dim = 3 : i64} : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x16xf32>
    %s  = tg.mul %r, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
    %y  = tg.add %c, %s : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
    =>
    %y = tg.rope %x, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>

When every position is 0 (one token at the start), ``cos`` is all ones and `canonicalize` has
already folded ``x * cos`` to ``x``; then ``x + rotate_half(x) * sin`` fuses with a scalar
``cos`` of 1::

    %y = tg.add %x, %s : ...
    =>
    %one = tg.constant dense<1.000000e+00> : tensor<f32>
    %y = tg.rope %x, %one, %sin : (tensor<1x4x1x16xf32>, tensor<f32>, tensor<1x1x1x16xf32>) -> tensor<1x4x1x16xf32>

The add and both products match in either operand order. Both slices must be unit-step halves of
the last dim of the same ``x`` (``[D/2, D)`` negated first, then ``[0, D/2)``), the concat must
run along the last dim, ``x``, both products and the sum must have ``x``'s type, and ``cos``/``sin``
(taken as the products' other operands, as they are: a reshape that adds size-1 dims already
broadcasts) must broadcast to it. Every matched op other than the root must have no live user
outside the match. This runs before `fuse-elementwise`, which would otherwise merge the products
and the sum into a loop body.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
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

from tensor_graphs.dialects.shapes import is_broadcastable_to
from tensor_graphs.dialects.tensor import AddOp, ConcatOp, ConstantOp, MulOp, NegOp, RopeOp, SliceOp, shape_of
from tensor_graphs.transforms.dce import erase_dead_producers
from tensor_graphs.transforms.evaluate import array_to_dense
from tensor_graphs.transforms.fusion.common import float32_kernel, is_splat, used_only_inside


def _pairs(op: AddOp | MulOp) -> Iterator[tuple[SSAValue, SSAValue]]:
    """Both operand orders of a commutative op."""
    yield op.lhs, op.rhs
    yield op.rhs, op.lhs


def _negated(value: SSAValue) -> tuple[SSAValue, list[Operation]] | None:
    """``(v, ops)`` when ``value`` is ``tg.neg v`` or ``v * -1`` (either order, same type)."""
    op = value.owner
    if isinstance(op, NegOp):
        return op.input, [op]
    if isinstance(op, MulOp):
        for v, c in _pairs(op):
            if v.type == op.result.type and is_splat(c, -1.0, rtol=0.0):
                return v, [op]
    return None


def _half_of(value: SSAValue, upper: bool) -> SliceOp | None:
    """The `tg.slice` defining ``value`` when it is the lower (``[0, D/2)``) or ``upper``
    (``[D/2, D)``) unit-step half of its input's last dim ``D``, else None."""
    op = value.owner
    if not isinstance(op, SliceOp):
        return None
    x = shape_of(op.input)
    dim, start, step = op.bounds
    if not x or dim != len(x) - 1 or step != 1 or x[-1] % 2:
        return None
    half = x[-1] // 2
    return op if start == (half if upper else 0) and shape_of(op.result)[-1] == half else None


def match_rotate_half(value: SSAValue) -> tuple[SSAValue, list[Operation]] | None:
    """``(x, ops)`` when ``value`` is ``concat(-x[..., D/2:], x[..., :D/2])`` along the last dim."""
    cat = value.owner
    if not isinstance(cat, ConcatOp) or len(cat.inputs) != 2:
        return None
    out = shape_of(cat.result)
    if not out or cat.dim.value.data != len(out) - 1 or out[-1] % 2:
        return None
    neg = _negated(cat.inputs[0])
    if neg is None:
        return None
    hi, lo = _half_of(neg[0], upper=True), _half_of(cat.inputs[1], upper=False)
    if hi is None or lo is None or hi.input is not lo.input or hi.input.type != cat.result.type:
        return None
    return hi.input, [cat, *neg[1], hi, lo]


@dataclass
class _Rope:
    x: SSAValue
    #: None: ``x * cos`` was folded to ``x`` (cos is all ones)
    cos: SSAValue | None
    sin: SSAValue
    ops: list[Operation]


def _scaled(value: SSAValue, x: SSAValue) -> SSAValue | None:
    """``t`` when ``value`` is ``x * t`` (either order) with ``x``'s type, else None."""
    op = value.owner
    if not isinstance(op, MulOp) or op.result.type != x.type:
        return None
    return next((t for v, t in _pairs(op) if v is x), None)


def _is_table(t: SSAValue, x: SSAValue) -> bool:
    """``t`` broadcasts to ``x`` and has its element type."""
    return is_broadcastable_to(shape_of(t), shape_of(x)) and t.type.element_type == x.type.element_type  # type: ignore[attr-defined]


def match_rope(root: Operation) -> _Rope | None:
    """The rotary embedding that the sum ``root`` computes (see the module doc), or None."""
    if not isinstance(root, AddOp):
        return None
    for c, s in _pairs(root):
        prod = s.owner
        if not isinstance(prod, MulOp) or prod.result.type != root.result.type:
            continue
        for r, sin in _pairs(prod):
            rot = match_rotate_half(r)
            if rot is None or rot[0].type != root.result.type:
                continue
            x = rot[0]
            cos = _scaled(c, x)
            if cos is None and c is not x:
                continue
            tables = (sin,) if cos is None else (cos, sin)
            if all(_is_table(t, x) for t in tables):
                ops = [root, prod, *rot[1]] if cos is None else [root, c.owner, prod, *rot[1]]
                return _Rope(x, cos, sin, ops)  # type: ignore[arg-type]
    return None


class FuseRopeFormula(RewritePattern):
    """The sum of a rotate-half RoPE becomes tg.rope (see the module doc)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, AddOp):
            return
        rope = match_rope(op)
        if rope is None or not used_only_inside(rope.ops, op):
            return
        if not float32_kernel(rope.x):
            return
        new_ops: list[Operation] = []
        cos = rope.cos
        if cos is None:
            one = ConstantOp(array_to_dense(np.ones(()), TensorType(rope.x.type.element_type, ())))  # type: ignore[attr-defined]
            one.result.name_hint = "one"
            new_ops.append(one)
            cos = one.result
        fused = RopeOp(rope.x, cos, rope.sin)
        fused.result.name_hint = op.result.name_hint
        operands = list(op.operands)
        rewriter.replace(op, [*new_ops, fused], [fused.result])
        erase_dead_producers(operands, rewriter)


@dataclass(frozen=True)
class FuseRopePass(ModulePass):
    """Recognises ``x * cos + rotate_half(x) * sin`` as tg.rope."""

    name = "fuse-rope"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FuseRopeFormula()], dce_enabled=False)).rewrite_module(op)
