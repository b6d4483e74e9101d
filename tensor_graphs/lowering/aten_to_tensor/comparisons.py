"""aten → tg: comparisons and boolean logic on run-time data.

``eq``/``ne``/``lt``/``le``/``gt``/``ge`` (Tensor and Scalar forms), ``logical_and``/``or``/``xor``/``not``,
``bitwise_and``/``or``/``xor``/``not`` and ``&``/``|``/``^`` (Tensor and Scalar forms) become a
one-op `tg.fused_elementwise`:
a scalar body of `arith.cmpf`/`arith.cmpi`/`arith.andi`/`arith.ori`/`arith.xori`, which every
level already has (the evaluator, constant-fold, `fuse-elementwise`, the buf kernel). A mask or
a position computed from the inputs at run time (a padding ``attention_mask``, ``input_ids.ne(pad)``)
is data like any other; on constants, ``constant-fold`` still removes them before this pass.

Types follow torch: both sides of a comparison are cast to their promoted type first (a float
side makes it float, an int64 tensor compared with 0.5 compares as f32, a bool tensor with an
int scalar as i64); floats compare ordered except ``ne`` (NaN != NaN is true), bools unsigned
(false < true). Logical ops take any dtype (non-zero is true); bitwise ops on bools are the
logical ones, on integers bitwise in the result's type.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloat, FloatAttr, IntegerAttr, IntegerType, TensorType, f32, i1, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.symbolic import shaped
from tensor_graphs.dialects.tensor import shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, append, element_type, elementwise_body, notify_match_failure

#: comparison op -> (float predicate, signed-int predicate, bool predicate)
_PREDICATES: dict[str, tuple[str, str, str]] = {
    "eq": ("oeq", "eq", "eq"),
    "ne": ("une", "ne", "ne"),
    "lt": ("olt", "slt", "ult"),
    "le": ("ole", "sle", "ule"),
    "gt": ("ogt", "sgt", "ugt"),
    "ge": ("oge", "sge", "uge"),
}

#: aten comparison op -> (its name in `_PREDICATES`, whether ``other`` is a Scalar property)
COMPARISONS: dict[type[aten.AtenOp], tuple[str, bool]] = {
    aten.EqTensorOp: ("eq", False),
    aten.EqScalarOp: ("eq", True),
    aten.NeTensorOp: ("ne", False),
    aten.NeScalarOp: ("ne", True),
    aten.LtTensorOp: ("lt", False),
    aten.LtScalarOp: ("lt", True),
    aten.LeTensorOp: ("le", False),
    aten.LeScalarOp: ("le", True),
    aten.GtTensorOp: ("gt", False),
    aten.GtScalarOp: ("gt", True),
    aten.GeTensorOp: ("ge", False),
    aten.GeScalarOp: ("ge", True),
}

#: aten logical/bitwise op -> (the arith op combining two operands, None for "not"; logical: any
#: dtype in, bool out; else bitwise in the result's type). A Scalar ``other`` is a body constant.
LOGICAL: dict[type[aten.AtenOp], tuple[type[Operation] | None, bool]] = {
    aten.LogicalAndOp: (arith.AndIOp, True),
    aten.LogicalOrOp: (arith.OrIOp, True),
    aten.LogicalXorOp: (arith.XOrIOp, True),
    aten.LogicalNotOp: (None, True),
    aten.BitwiseNotOp: (None, False),
    **{cls: (arith.AndIOp, False) for cls in (aten.BitwiseAndTensorOp, aten.AndTensorOp, aten.BitwiseAndScalarOp, aten.AndScalarOp)},
    **{cls: (arith.OrIOp, False) for cls in (aten.BitwiseOrTensorOp, aten.OrTensorOp, aten.BitwiseOrScalarOp, aten.OrScalarOp)},
    **{cls: (arith.XOrIOp, False) for cls in (aten.BitwiseXorTensorOp, aten.XorTensorOp, aten.BitwiseXorScalarOp, aten.XorScalarOp)},
}


def _width(t: Attribute) -> int:
    return t.width.data if isinstance(t, IntegerType) else t.bitwidth  # type: ignore[attr-defined]


def promoted(a: Attribute, b: Attribute | float | int | bool) -> Attribute:
    """torch's result type of a binary op on a tensor of ``a`` and a tensor of ``b`` (an
    Attribute) or a Python scalar ``b``."""
    if not isinstance(b, Attribute):  # a Scalar: it only raises the category (bool < int < float)
        if isinstance(a, AnyFloat):
            return a
        if isinstance(b, float):
            return f32
        if a == i1 and not isinstance(b, bool):
            return i64
        return a
    if isinstance(a, AnyFloat) != isinstance(b, AnyFloat):
        return a if isinstance(a, AnyFloat) else b
    return a if _width(a) >= _width(b) else b


def _scalar(value: float | int | bool, t: Attribute) -> arith.ConstantOp:
    if isinstance(t, IntegerType):
        return arith.ConstantOp(IntegerAttr(int(value) if t != i1 else int(bool(value)), t))
    return arith.ConstantOp(FloatAttr(float(value), t))  # type: ignore[arg-type]


def _bool_result(op: Operation) -> TensorType:
    return shaped(i1, shape_of(op.results[0]))


class ComparePattern(RewritePattern):
    """A comparison on run-time data is a one-op scalar body, both sides in their promoted type.

    ```mlir
    %m = aten.ne.Scalar %ids {other = 1 : i64} : (tensor<2x7xi64>) -> tensor<2x7xi1>
    %g = aten.gt.Tensor %x, %y : (tensor<2x7xf32>, tensor<7xf32>) -> tensor<2x7xi1>
    // becomes
    %m = tg.fused_elementwise %ids : (tensor<2x7xi64>) -> tensor<2x7xi1> {
    ^bb0(%a: i64):
      %c = arith.constant 1 : i64
      %r = arith.cmpi ne, %a, %c : i64
      tg.yield %r : i1
    }
    %g = tg.fused_elementwise %x, %y : (tensor<2x7xf32>, tensor<7xf32>) -> tensor<2x7xi1> {
    ^bb0(%a: f32, %b: f32):
      %r = arith.cmpf ogt, %a, %b : f32
      tg.yield %r : i1
    }
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        entry = COMPARISONS.get(type(op))
        if entry is None:
            return
        name, scalar_other = entry
        ops = OpList()
        if scalar_other:
            other = op.other.value.data  # a bool scalar arrives as 0/1 (i64): the same comparison
            common = promoted(element_type(op.self), other)
        else:
            other = op.other
            common = promoted(element_type(op.self), element_type(other))
        if not isinstance(common, AnyFloat | IntegerType):
            return notify_match_failure(op, f"comparisons of {common} elements are not supported")
        inputs = [ops.cast(op.self, common)] + ([] if scalar_other else [ops.cast(other, common)])
        fpred, ipred, bpred = _PREDICATES[name]

        def body(block: Block, args: list[SSAValue]) -> SSAValue:
            rhs = args[1] if not scalar_other else append(block, _scalar(other, common))
            if isinstance(common, AnyFloat):
                return append(block, arith.CmpfOp(args[0], rhs, fpred))
            return append(block, arith.CmpiOp(args[0], rhs, bpred if common == i1 else ipred))

        y = ops.add(elementwise_body(inputs, _bool_result(op), body))
        rewriter.replace(op, ops, [y])


class LogicalPattern(RewritePattern):
    """Boolean logic is `arith.andi`/`ori` on i1 (``not``: ``xori`` with true); logical ops first
    make any input a bool (non-zero), bitwise ops on integers work on the integers.

    ```mlir
    %k = aten.__and__.Tensor %a, %b : (tensor<2x7xi1>, tensor<2x7xi1>) -> tensor<2x7xi1>
    %n = aten.logical_not %k : (tensor<2x7xi1>) -> tensor<2x7xi1>
    // becomes
    %k = tg.fused_elementwise %a, %b : (tensor<2x7xi1>, tensor<2x7xi1>) -> tensor<2x7xi1> {
    ^bb0(%x: i1, %y: i1):
      %r = arith.andi %x, %y : i1
      tg.yield %r : i1
    }
    %n = tg.fused_elementwise %k : (tensor<2x7xi1>) -> tensor<2x7xi1> {
    ^bb0(%x: i1):
      %t = arith.constant true
      %r = arith.xori %x, %t : i1
      tg.yield %r : i1
    }
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        entry = LOGICAL.get(type(op))
        if entry is None:
            return
        combine, logical = entry
        out = element_type(op.results[0])
        kind = i1 if logical else out
        if not isinstance(kind, IntegerType):
            return notify_match_failure(op, f"{op.name} needs bool or integer elements, got {kind}")
        ops = OpList()
        inputs = [ops.cast(v, kind) for v in op.operands]
        scalar = getattr(op, "other", None)
        scalar = None if scalar is None or isinstance(scalar, SSAValue) else scalar.value.data

        def body(block: Block, args: list[SSAValue]) -> SSAValue:
            if combine is None:
                ones = append(block, arith.ConstantOp(IntegerAttr(1 if kind == i1 else -1, kind)))
                return append(block, arith.XOrIOp(args[0], ones))
            other = args[1] if scalar is None else append(block, _scalar(scalar, kind))
            return append(block, combine(args[0], other))

        y = ops.add(elementwise_body(inputs, shaped(kind, shape_of(op.results[0])), body))
        y = ops.cast(y, out)  # logical ops on non-bool results (rare): torch gives the result's dtype
        rewriter.replace(op, ops, [y])


def populate_comparison_patterns() -> list[RewritePattern]:
    return [ComparePattern(), LogicalPattern()]
