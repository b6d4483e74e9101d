"""`fuse-gelu`: the GELU formulas written out elementwise become one `tg.gelu`.

Recognised (``x`` is any value, used by every marked place; products in any order and grouping,
``x * x * x`` or ``pow(x, 3)``, ``/ c`` as ``* (1 / c)``, constants within a relative 1e-4):

- tanh approximation (GPT-2's ``NewGELUActivation``, 8 ops, ``x`` used three times)::

      0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))   ->   tg.gelu {approximate = "tanh"}

- erf form::

      0.5 * x * (1 + erf(x / sqrt(2)))        (or x * 0.70710678)    ->   tg.gelu

The formula's constants are data (``TANH_FORM``, ``ERF_FORM``); every op of the match other than
the root must have no live user outside the match.

    %p = tg.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %a = tg.mul %p, %c0 : ...        // 0.044715
    %b = tg.add %x, %a : ...
    %c = tg.mul %b, %c1 : ...        // 0.7978845608
    %t = tg.tanh %c : tensor<2x8xf32>
    %d = tg.add %t, %one : ...
    %e = tg.mul %x, %half : ...
    %f = tg.mul %e, %d : ...
    =>
    %f = tg.gelu %x {approximate = "tanh"} : tensor<2x8xf32>
"""

from __future__ import annotations

import itertools
import math
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
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects.tensor import AddOp, ConstantOp, DivOp, ErfOp, GeluOp, MulOp, PowOp, TanhOp
from tensor_graphs.transforms.dce import erase_dead_producers
from tensor_graphs.transforms.evaluate import scalar_constant, splat_constant
from tensor_graphs.transforms.fusion.common import is_splat, near, used_only_inside


@dataclass(frozen=True)
class GeluForm:
    """``outer * x * (1 + fn(inner * <argument of x>))``."""

    fn: type[Operation]  # TanhOp or ErfOp
    approximate: str  # tg.gelu's `approximate`
    outer: float  # 0.5
    inner: float  # sqrt(2/pi) or 1/sqrt(2)
    cubic: float | None  # 0.044715 (tanh form: the argument is x + cubic * x^3), None: it is x


TANH_FORM = GeluForm(TanhOp, "tanh", 0.5, math.sqrt(2.0 / math.pi), 0.044715)
ERF_FORM = GeluForm(ErfOp, "none", 0.5, 1.0 / math.sqrt(2.0), None)
FORMS: tuple[GeluForm, ...] = (TANH_FORM, ERF_FORM)


@dataclass
class _Product:
    coefficient: float
    factors: list[SSAValue]
    ops: list[Operation]


def _product(value: SSAValue) -> _Product:
    """``value`` as ``coefficient * prod(factors)`` through tg.mul and division by constants."""
    op = value.owner
    if isinstance(op, MulOp):
        a, b = _product(op.lhs), _product(op.rhs)
        return _Product(a.coefficient * b.coefficient, a.factors + b.factors, a.ops + b.ops + [op])
    if isinstance(op, DivOp) and (c := scalar_constant(op.rhs)) not in (None, 0.0):
        a = _product(op.lhs)
        return _Product(a.coefficient / c, a.factors, a.ops + [op])  # type: ignore[operator]
    if isinstance(op, ConstantOp) and (c := splat_constant(value)) is not None:
        return _Product(c, [], [])
    return _Product(1.0, [value], [])


def _power_of(x: SSAValue, factors: list[SSAValue], ops: list[Operation]) -> float | None:
    """The power of ``x`` that ``prod(factors)`` is (``x`` or ``pow(x, c)`` each), appending the pows to ``ops``."""
    power = 0.0
    for f in factors:
        if f is x:
            power += 1
        elif isinstance(p := f.owner, PowOp) and p.lhs is x and (e := scalar_constant(p.rhs)) is not None:
            power += e
            ops.append(p)
        else:
            return None
    return power


def _one_plus(value: SSAValue, fn: type[Operation]) -> tuple[SSAValue, list[Operation]] | None:
    """``(argument, ops)`` when ``value`` is ``1 + fn(argument)`` (either order)."""
    add = value.owner
    if not isinstance(add, AddOp):
        return None
    for one, f in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        if is_splat(one, 1.0) and isinstance(f.owner, fn) and f.type == add.result.type:
            return f.owner.input, [add, f.owner]  # type: ignore[attr-defined]
    return None


def _argument_ops(x: SSAValue, argument: SSAValue, form: GeluForm) -> list[Operation] | None:
    """The ops of ``inner * x`` (erf) or ``inner * (x + cubic * x^3)`` (tanh), or None."""
    inner = _product(argument)
    if not near(inner.coefficient, form.inner) or len(inner.factors) != 1:
        return None
    ops = list(inner.ops)
    (term,) = inner.factors
    if form.cubic is None:
        return ops if term is x else None
    add = term.owner
    if not isinstance(add, AddOp):
        return None
    for lin, cub in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        if lin is not x:
            continue
        cubic = _product(cub)
        more = list(cubic.ops)
        if near(cubic.coefficient, form.cubic) and _power_of(x, cubic.factors, more) == 3:
            return ops + [add] + more
    return None


def match_gelu(root: MulOp) -> tuple[SSAValue, GeluForm, list[Operation]] | None:
    """``(x, form, ops)`` when ``root`` computes one of ``FORMS`` of ``x``."""
    outer = _product(root.result)
    if len(outer.factors) != 2:
        return None
    for form in FORMS:
        if not near(outer.coefficient, form.outer):
            continue
        for x, rest in itertools.permutations(outer.factors):
            one_plus = _one_plus(rest, form.fn)
            if one_plus is None or x.type != root.result.type:
                continue
            argument, fn_ops = one_plus
            arg_ops = _argument_ops(x, argument, form)
            if arg_ops is not None:
                return x, form, outer.ops + fn_ops + arg_ops
    return None


class FuseGeluFormula(RewritePattern):
    """A tg.mul that is the root of a GELU formula becomes tg.gelu (see the module doc)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MulOp, rewriter: PatternRewriter) -> None:
        match = match_gelu(op)
        if match is None:
            return
        x, form, ops = match
        if not used_only_inside(ops, op):
            return
        gelu = GeluOp(x, form.approximate)
        gelu.result.name_hint = op.result.name_hint
        operands = list(op.operands)
        rewriter.replace(op, gelu)
        erase_dead_producers(operands, rewriter)


@dataclass(frozen=True)
class FuseGeluPass(ModulePass):
    """Recognises the tanh and erf GELU formulas and replaces them by tg.gelu."""

    name = "fuse-gelu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FuseGeluFormula()], dce_enabled=False)).rewrite_module(op)
