"""`fuse-silu`: ``x * sigmoid(x)`` written out becomes one `tg.silu`.

Recognised (products and ``1 + e`` in either operand order)::

    x * sigmoid(x)
    x / (1 + exp(-x))
    x * (1 / (1 + exp(-x)))

    %s = tg.sigmoid %x : tensor<2x8xf32>
    %y = tg.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    =>
    %y = tg.silu %x : tensor<2x8xf32>

``-x`` is ``tg.neg x``. The result must have ``x``'s type (no broadcasting), and every matched op
other than the root must have no live user outside the match.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tensor_graphs.dialects.tensor import AddOp, DivOp, ExpOp, MulOp, NegOp, SigmoidOp, SiluOp
from tensor_graphs.transforms.dce import erase_dead_producers
from tensor_graphs.transforms.fusion.common import is_splat, used_only_inside


def _one_plus_exp_neg(value: SSAValue, x: SSAValue) -> list[Operation] | None:
    """The ops of ``1 + exp(-x)`` (either order) defining ``value``, else None."""
    add = value.owner
    if not isinstance(add, AddOp) or add.result.type != x.type:
        return None
    for one, e in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        exp = e.owner
        if is_splat(one, 1.0, rtol=0.0) and isinstance(exp, ExpOp) and isinstance(neg := exp.input.owner, NegOp):
            if neg.input is x:
                return [add, exp, neg]
    return None


def _sigmoid_of(value: SSAValue, x: SSAValue) -> list[Operation] | None:
    """The ops of ``sigmoid(x)`` or ``1 / (1 + exp(-x))`` defining ``value``, else None."""
    op = value.owner
    if isinstance(op, SigmoidOp):
        return [op] if op.input is x else None
    if isinstance(op, DivOp) and is_splat(op.lhs, 1.0, rtol=0.0) and (ops := _one_plus_exp_neg(op.rhs, x)) is not None:
        return [op, *ops]
    return None


def match_silu(root: Operation) -> tuple[SSAValue, list[Operation]] | None:
    """``(x, ops)`` when ``root`` computes ``silu(x)`` in one of the forms of the module doc."""
    if isinstance(root, MulOp):
        for x, s in ((root.lhs, root.rhs), (root.rhs, root.lhs)):
            if x.type == root.result.type and (ops := _sigmoid_of(s, x)) is not None:
                return x, [root, *ops]
    elif isinstance(root, DivOp) and root.lhs.type == root.result.type:
        if (ops := _one_plus_exp_neg(root.rhs, root.lhs)) is not None:
            return root.lhs, [root, *ops]
    return None


class FuseSiluFormula(RewritePattern):
    """The root of a SiLU formula becomes tg.silu (see the module doc)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, MulOp | DivOp):
            return
        match = match_silu(op)
        if match is None or not used_only_inside(match[1], op):
            return
        silu = SiluOp(match[0])
        silu.result.name_hint = op.results[0].name_hint
        operands = list(op.operands)
        rewriter.replace(op, silu)
        erase_dead_producers(operands, rewriter)


@dataclass(frozen=True)
class FuseSiluPass(ModulePass):
    """Recognises ``x * sigmoid(x)`` and its expanded forms as tg.silu."""

    name = "fuse-silu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FuseSiluFormula()], dce_enabled=False)).rewrite_module(op)
