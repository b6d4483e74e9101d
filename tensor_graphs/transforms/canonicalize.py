"""`canonicalize`: local simplifications at the tg level that are always a win.

The rules are data: ``RULES`` lists ``(op class, rule)`` pairs; a rule looks at one op and returns
an existing value that already computes the op's result, a new op that computes it more cheaply,
or None. One pattern (``ApplyCanonicalizationRules``) applies them greedily to a fixpoint.

Producers a rewrite leaves dead (the inner reshape of a folded pair, a neutral constant) are
erased with it; dead ops the pass did not create stay for `dce`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
import numpy as np
from xdsl.dialects.builtin import IntegerType, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tensor_graphs import dtypes
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.tensor import (
    AddOp,
    BroadcastOp,
    CastOp,
    ConcatOp,
    ConstantOp,
    FusedElementwiseOp,
    DivOp,
    ElementwiseBinaryOp,
    MulOp,
    ReshapeOp,
    SelectOp,
    SliceOp,
    SubOp,
    TransposeOp,
    shape_of,
)
from tensor_graphs.transforms.dce import erase_dead_producers
from tensor_graphs.transforms.evaluate import splat_constant
from tensor_graphs.transforms.value_range import value_range

#: What a rule returns: the value to use instead, a new op (or ops, the last one's result the
#: value) to use instead, or None (no match).
RuleResult = SSAValue | Operation | list[Operation] | None
Rule = Callable[[Operation], RuleResult]


# --------------------------------------------------------------------------- data movement


def reshape_of_reshape(op: ReshapeOp) -> RuleResult:
    """Two reshapes in a row are one reshape (or none, when the shapes round-trip).

    %a = tg.reshape %x : (tensor<2x6xf32>) -> tensor<12xf32>
    %b = tg.reshape %a : (tensor<12xf32>) -> tensor<3x4xf32>
    =>
    %b = tg.reshape %x : (tensor<2x6xf32>) -> tensor<3x4xf32>
    """
    inner = op.input.owner
    if not isinstance(inner, ReshapeOp):
        return None
    if inner.input.type == op.result.type:
        return inner.input
    return ReshapeOp(inner.input, shape_of(op.result))


def identity_reshape(op: ReshapeOp) -> RuleResult:
    """A reshape to the type it already has is its input.

    %b = tg.reshape %x : (tensor<2x6xf32>) -> tensor<2x6xf32>   =>   uses of %b use %x
    """
    return op.input if op.input.type == op.result.type else None


def identity_transpose(op: TransposeOp) -> RuleResult:
    """A transpose by perm 0..n-1 is its input.

    %b = tg.transpose %x {perm = array<i64: 0, 1>} : ...   =>   uses of %b use %x
    """
    perm = op.permutation
    return op.input if perm == tuple(range(len(perm))) else None


def transpose_of_transpose(op: TransposeOp) -> RuleResult:
    """Two transposes compose into one (``perm[d] = inner[outer[d]]``); none when that is identity.

    %a = tg.transpose %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
    %b = tg.transpose %a {perm = array<i64: 0, 2, 1>} : (tensor<3x4x2xf32>) -> tensor<3x2x4xf32>
    =>
    %b = tg.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
    """
    inner = op.input.owner
    if not isinstance(inner, TransposeOp):
        return None
    inner_perm, outer_perm = inner.permutation, op.permutation
    perm = tuple(inner_perm[p] for p in outer_perm)
    if perm == tuple(range(len(perm))):
        return inner.input
    return TransposeOp(inner.input, perm)


def full_slice(op: SliceOp) -> RuleResult:
    """A slice that keeps every element of its dim is its input.

    %s = tg.slice %x {dim = 1 : i64, start = 0 : i64} : (tensor<2x6xf32>) -> tensor<2x6xf32>   =>   uses of %s use %x
    """
    dim, start, step = op.bounds
    size = shape_of(op.result)[dim]
    if start == 0 and (step == 1 or size <= 1) and size == shape_of(op.input)[dim] and op.input.type == op.result.type:
        return op.input
    return None


def identity_broadcast(op: BroadcastOp) -> RuleResult:
    """A broadcast to the shape the input already has is its input.

    %b = tg.broadcast %x : (tensor<2x6xf32>) -> tensor<2x6xf32>   =>   uses of %b use %x
    """
    return op.input if op.input.type == op.result.type else None


def identity_cast(op: CastOp) -> RuleResult:
    """A cast to the element type the input already has is its input.

    %c = tg.cast %x : (tensor<2xf32>) -> tensor<2xf32>   =>   uses of %c use %x
    """
    return op.input if op.input.type == op.result.type else None


def exact_round_trip(op: CastOp) -> RuleResult:
    """A cast back to the type of a value that was widened exactly (a float to a wider float, an
    integer to a wider integer, an integer to a float that holds all its values) is that value.

    %w = tg.cast %x : (tensor<2xbf16>) -> tensor<2xf32>
    %c = tg.cast %w : (tensor<2xf32>) -> tensor<2xbf16>   =>   uses of %c use %x

    (The other way round, ``cast(cast(v, bf16), f32)`` rounds: it stays.)
    """
    inner = op.input.owner
    if not isinstance(inner, CastOp) or inner.input.type != op.result.type:
        return None
    return inner.input if dtypes.widens_exactly(inner.input.type.element_type, inner.result.type.element_type) else None  # type: ignore[attr-defined]


def concat_of_one(op: ConcatOp) -> RuleResult:
    """A concat of a single input is that input.

    %c = tg.concat %x {dim = 0 : i64} : (tensor<2x6xf32>) -> tensor<2x6xf32>   =>   uses of %c use %x
    """
    if len(op.inputs) == 1 and op.inputs[0].type == op.result.type:
        return op.inputs[0]
    return None


# --------------------------------------------------------------------------- algebra


def select_of_splat_condition(op: SelectOp) -> RuleResult:
    """A select whose condition is the same constant everywhere is one of its branches
    (broadcast to the result shape when the branch is smaller).

    %t = tg.constant dense<true> : tensor<2x3xi1>
    %s = tg.select %t, %a, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>   =>   uses of %s use %a
    """
    cond = splat_constant(op.cond)
    if cond is None:
        return None
    branch = op.on_true if cond != 0.0 else op.on_false
    if branch.type == op.result.type:
        return branch
    return BroadcastOp(branch, shape_of(op.result))


def constant_over_ranges(op: FusedElementwiseOp) -> RuleResult:
    """An integer computation whose result is the same at every element, for every value its
    inputs can hold (`value_range`: an iota over a symbolic size, constants), is a splat: what
    constant-fold does for a static mask, for one of symbolic shape.

    %a = tg.iota {start = 0.0 : f64, step = 1.0 : f64} : tensor<?xi64, ["seq"]>
    %m = tg.fused_elementwise %a : (tensor<?xi64, ["seq"]>) -> tensor<?xi1, ["seq"]> { %a >= 0 }
    =>   %t = tg.constant dense<true> : tensor<i1>;  %m = tg.broadcast %t : (tensor<i1>) -> tensor<?xi1, ["seq"]>
    """
    if not isinstance(op.result.type.element_type, IntegerType):  # type: ignore[attr-defined]
        return None
    value = value_range(op.result)
    if value is None or value[0] != value[1]:
        return None
    el = op.result.type.element_type  # type: ignore[attr-defined]
    constant = ConstantOp(dense_from_numpy(np.array(value[0], dtype=dtypes.of_element(el).storage), el))
    return _splat_ops(constant, op.result)


def _splat_ops(constant: ConstantOp, like: SSAValue) -> list[Operation]:
    """``constant`` (rank 0) broadcast to ``like``'s shape: the ops, the broadcast last."""
    return [constant, BroadcastOp(constant.result, shape_of(like))]


def _neutral_operand(op: ElementwiseBinaryOp, kept: SSAValue, other: SSAValue, neutral: float) -> RuleResult:
    """``kept`` when ``other`` is a splat constant equal to ``neutral`` and broadcasting leaves
    ``kept``'s type unchanged (so the result is element for element ``kept``)."""
    if op.result.type != kept.type:
        return None
    value = splat_constant(other)
    return kept if value is not None and value == neutral else None


def _first(*results: RuleResult) -> RuleResult:
    return next((r for r in results if r is not None), None)


def mul_by_one(op: MulOp) -> RuleResult:
    """``x * 1`` and ``1 * x`` are ``x`` (exact in IEEE arithmetic).

    %one = tg.constant dense<1.0> : tensor<f32>
    %y = tg.mul %x, %one : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>   =>   uses of %y use %x
    """
    return _first(_neutral_operand(op, op.lhs, op.rhs, 1.0), _neutral_operand(op, op.rhs, op.lhs, 1.0))


def div_by_one(op: DivOp) -> RuleResult:
    """``x / 1`` is ``x``.

    %y = tg.div %x, %one : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>   =>   uses of %y use %x
    """
    return _neutral_operand(op, op.lhs, op.rhs, 1.0)


def add_zero(op: AddOp) -> RuleResult:
    """``x + 0`` and ``0 + x`` are ``x`` (as values: ``-0.0 + 0.0`` is ``+0.0``, which equals ``-0.0``).

    %zero = tg.constant dense<0.0> : tensor<f32>
    %y = tg.add %x, %zero : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>   =>   uses of %y use %x
    """
    return _first(_neutral_operand(op, op.lhs, op.rhs, 0.0), _neutral_operand(op, op.rhs, op.lhs, 0.0))


def sub_zero(op: SubOp) -> RuleResult:
    """``x - 0`` is ``x``.

    %y = tg.sub %x, %zero : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>   =>   uses of %y use %x
    """
    return _neutral_operand(op, op.lhs, op.rhs, 0.0)


#: (op class, rule) — tried in this order on every op of that class.
RULES: tuple[tuple[type[Operation], Rule], ...] = (
    (ReshapeOp, identity_reshape),
    (ReshapeOp, reshape_of_reshape),
    (TransposeOp, identity_transpose),
    (TransposeOp, transpose_of_transpose),
    (SliceOp, full_slice),
    (BroadcastOp, identity_broadcast),
    (CastOp, identity_cast),
    (CastOp, exact_round_trip),
    (ConcatOp, concat_of_one),
    (SelectOp, select_of_splat_condition),
    (FusedElementwiseOp, constant_over_ranges),
    (MulOp, mul_by_one),
    (DivOp, div_by_one),
    (AddOp, add_zero),
    (SubOp, sub_zero),
)


def _rules_by_op(rules: tuple[tuple[type[Operation], Rule], ...]) -> dict[type[Operation], list[Rule]]:
    index: dict[type[Operation], list[Rule]] = {}
    for op_type, rule in rules:
        index.setdefault(op_type, []).append(rule)
    return index


@dataclass
class ApplyCanonicalizationRules(RewritePattern):
    """Applies the first rule of ``RULES`` that matches the op (see each rule for its IR)."""

    rules: dict[type[Operation], list[Rule]]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        for rule in self.rules.get(type(op), ()):
            result = rule(op)
            if result is None:
                continue
            operands = list(op.operands)
            if isinstance(result, list):
                rewriter.replace(op, result, [result[-1].results[0]])
            elif isinstance(result, Operation):
                rewriter.replace(op, result)
            else:
                rewriter.replace(op, [], [result])
            erase_dead_producers(operands, rewriter)
            return


@dataclass(frozen=True)
class CanonicalizePass(ModulePass):
    """Folds reshape/transpose chains, no-op data movement (full slices, same-shape broadcasts,
    same-type casts, one-input concats), constant-condition selects and algebraic identities
    (``x*1``, ``x/1``, ``x+0``, ``x-0``)."""

    name = "canonicalize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([ApplyCanonicalizationRules(_rules_by_op(RULES))], dce_enabled=False)
        ).rewrite_module(op)
