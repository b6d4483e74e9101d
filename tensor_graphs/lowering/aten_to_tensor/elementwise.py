"""aten → tg: elementwise ops.

Binary arithmetic (add/sub/mul/div in Tensor and Scalar forms, maximum, minimum, max/min.other,
pow), ``clamp``/``hardtanh`` (max then min), ``sign``/``ceil``/``floor``/``floor_divide`` (scalar bodies), unary
functions (relu, tanh, exp, log, sqrt, rsqrt, neg, abs, sigmoid, silu, erf, cos, sin → the ``tg`` op of
that function name), ``gelu`` with its ``approximate`` form, ``where``/``masked_fill`` →
``tg.select``, and the dtype conversions (``to`` — ``to.device`` too: the device is dropped —, ``_to_copy``, ``type_as`` → ``tg.cast``, or
nothing when the dtype stays). Scalars become rank-0 ``tg.constant`` operands that broadcast;
operands whose element type differs from the result's (torch's type promotion) are cast first.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, f64, i1
from xdsl.ir import Block, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.scalar import RemFOp
from tensor_graphs.dialects.tensor import (
    UNARY_OPS,
    AddOp,
    CheckNonzeroOp,
    ConstantOp,
    DivOp,
    ElementwiseBinaryOp,
    GeluOp,
    MaxOp,
    MinOp,
    MulOp,
    PowOp,
    SelectOp,
    SubOp,
)
from tensor_graphs.lowering.aten_to_tensor.common import OpList, append, element_type, elementwise_body, notify_match_failure, scalar_constant
from tensor_graphs.transforms.evaluate import dense_to_array

#: aten binary op -> (tg op, whether its second operand is a Scalar property)
_BINARY: dict[type, tuple[type[ElementwiseBinaryOp], bool]] = {
    aten.AddTensorOp: (AddOp, False),
    aten.SubTensorOp: (SubOp, False),
    aten.MulTensorOp: (MulOp, False),
    aten.DivTensorOp: (DivOp, False),
    aten.MaximumOp: (MaxOp, False),
    aten.MinimumOp: (MinOp, False),
    aten.MaxOtherOp: (MaxOp, False),
    aten.MinOtherOp: (MinOp, False),
    aten.PowTensorTensorOp: (PowOp, False),
    aten.AddScalarOp: (AddOp, True),
    aten.SubScalarOp: (SubOp, True),
    aten.MulScalarOp: (MulOp, True),
    aten.DivScalarOp: (DivOp, True),
    aten.PowTensorScalarOp: (PowOp, True),
    aten.RsubTensorOp: (SubOp, False),
    aten.RsubScalarOp: (SubOp, True),
}

#: aten unary op -> key of tg.UNARY_OPS
_UNARY: dict[type, str] = {
    aten.ReluOp: "relu",
    aten.TanhOp: "tanh",
    aten.ExpOp: "exp",
    aten.LogOp: "log",
    aten.SqrtOp: "sqrt",
    aten.RsqrtOp: "rsqrt",
    aten.NegOp: "neg",
    aten.AbsOp: "abs",
    aten.SigmoidOp: "sigmoid",
    aten.SiluOp: "silu",
    aten.ErfOp: "erf",
    aten.CosOp: "cos",
    aten.SinOp: "sin",
}


class BinaryPattern(RewritePattern):
    """``self <op> alpha * other``; a Scalar ``other`` (times alpha) becomes a rank-0 constant.

    ```mlir
    %y = aten.sub.Tensor %a, %b {alpha = 2.0 : f64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %z = aten.mul.Scalar %y {other = 0.5 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %p = aten.pow.Tensor_Scalar %z {exponent = 3 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %c2 = tg.constant dense<2.0> : tensor<f32>
    %b2 = tg.mul %b, %c2 : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
    %y = tg.sub %a, %b2 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %c = tg.constant dense<0.5> : tensor<f32>
    %z = tg.mul %y, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    %c3 = tg.constant dense<3.0> : tensor<f32>
    %p = tg.pow %z, %c3 : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    ```
    ``rsub`` is ``other - alpha * self``; ``maximum``/``minimum`` become ``tg.max``/``tg.min``. An operand of another element type than
    the result (``int64 + float``) is ``tg.cast`` first.
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        entry = _BINARY.get(type(op))
        if entry is None:
            return
        tg_op, scalar_other = entry
        out_type = element_type(op.result)
        alpha = op.alpha.value.data if hasattr(op, "alpha") else 1
        reverse = isinstance(op, (aten.RsubTensorOp, aten.RsubScalarOp))  # other - alpha * self
        ops = OpList()

        def scaled(value):
            return value if alpha == 1 else ops.add(MulOp(value, ops.add(scalar_constant(alpha, out_type))))

        x = ops.cast(op.self, out_type)
        if scalar_other:
            scalar = (op.exponent if isinstance(op, aten.PowTensorScalarOp) else op.other).value.data
            other = ops.add(scalar_constant(scalar if reverse else scalar * alpha, out_type))
        else:
            other = scaled(ops.cast(op.operands[1], out_type)) if not reverse else ops.cast(op.operands[1], out_type)
        lhs, rhs = (other, scaled(x)) if reverse else (x, other)
        y = ops.add(tg_op(lhs, rhs, op.result.type))
        rewriter.replace(op, ops, [y])


class UnaryPattern(RewritePattern):
    """Unary functions map one to one onto the tg op of that function name (an integer input of a
    float function cast to the result's type first).

    ```mlir
    %y = aten.tanh %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %y = tg.tanh %x : tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        fn = _UNARY.get(type(op))
        if fn is not None:  # an integer or bool input of a float function is cast first (torch.exp(int) is float)
            ops = OpList()
            ops.add(UNARY_OPS[fn](ops.cast(op.self, element_type(op.result))))
            rewriter.replace(op, ops, [ops[-1].results[0]])


class GeluPattern(RewritePattern):
    """```mlir
    %y = aten.gelu %x {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %y = tg.gelu %x {approximate = "tanh"} : tensor<2x3xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.GeluOp, rewriter: PatternRewriter) -> None:
        approximate = op.approximate.data
        if approximate not in ("none", "tanh"):
            return notify_match_failure(op, f"approximate must be 'none' or 'tanh', got '{approximate}'")
        rewriter.replace(op, GeluOp(op.self, approximate))


_WHERES = (aten.WhereSelfOp, aten.WhereScalarSelfOp, aten.WhereScalarOtherOp, aten.WhereScalarOp)
_SELECTS = (*_WHERES, aten.MaskedFillScalarOp, aten.MaskedFillTensorOp)


class WherePattern(RewritePattern):
    """``where(cond, a, b)`` is ``tg.select`` (a Scalar ``a``/``b`` a rank-0 constant);
    ``masked_fill(x, mask, v)`` is ``select(mask, v, x)``.

    ```mlir
    %y = aten.masked_fill.Scalar %x, %m {value = 0xFFF0000000000000 : f64} : (tensor<2x3xf32>, tensor<3xi1>) -> tensor<2x3xf32>
    // becomes
    %v = tg.constant dense<0xFF800000> : tensor<f32>
    %y = tg.select %m, %v, %x : (tensor<3xi1>, tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _SELECTS):
            return
        out_type = element_type(op.result)
        ops = OpList()

        def value(v):  # a Tensor operand (cast to the result's element type) or a Scalar property
            return ops.cast(v, out_type) if isinstance(v, SSAValue) else ops.add(scalar_constant(v.value.data, out_type))

        if isinstance(op, _WHERES):
            cond, on_true, on_false = op.condition, value(op.self), value(op.other)
        elif isinstance(op, aten.MaskedFillScalarOp):
            cond, on_true, on_false = op.mask, ops.add(scalar_constant(op.value.value.data, out_type)), op.self
        else:
            cond, on_true, on_false = op.mask, ops.cast(op.value, out_type), op.self
        y = ops.add(SelectOp(cond, on_true, on_false))
        rewriter.replace(op, ops, [y])


class ClampPattern(RewritePattern):
    """``clamp`` (Scalar or Tensor bounds, either may be absent), ``clamp_min``, ``hardtanh`` and ``relu6`` are ``tg.max``
    with the lower bound, then ``tg.min`` with the upper one (NaN stays NaN, as in torch).

    ```mlir
    %y = aten.hardtanh %x {min_val = 0.0 : f64, max_val = 6.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %lo = tg.constant dense<0.0> : tensor<f32>
    %a = tg.max %x, %lo : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    %hi = tg.constant dense<6.0> : tensor<f32>
    %y = tg.min %a, %hi : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, aten.HardtanhOp):
            bounds = (op.min_val, op.max_val)
        elif isinstance(op, aten.Relu6Op):
            bounds = (FloatAttr(0.0, f64), FloatAttr(6.0, f64))
        elif isinstance(op, aten.ClampOp | aten.ClampTensorOp):
            bounds = (op.min, op.max)
        elif isinstance(op, aten.ClampMinOp):
            bounds = (op.min, None)
        else:
            return
        out_type = element_type(op.result)
        ops = OpList()
        y = ops.cast(op.self, out_type)
        for bound, tg_op in zip(bounds, (MaxOp, MinOp)):
            if bound is None:
                continue
            other = ops.cast(bound, out_type) if isinstance(bound, SSAValue) else ops.add(scalar_constant(bound.value.data, out_type))
            y = ops.add(tg_op(y, other, op.result.type))
        rewriter.replace(op, ops, [y])


def _sign(block, x):
    """``x > 0 ? 1 : (x < 0 ? -1 : 0)``: NaN gives 0, as torch's sign does."""
    zero, one, minus = (append(block, arith.ConstantOp(FloatAttr(v, x.type))) for v in (0.0, 1.0, -1.0))
    negative = append(block, arith.SelectOp(append(block, arith.CmpfOp(x, zero, "olt")), minus, zero))
    return append(block, arith.SelectOp(append(block, arith.CmpfOp(x, zero, "ogt")), one, negative))


def _sign_int(block, x):
    """``x > 0 ? 1 : (x < 0 ? -1 : 0)`` on integers (``x > 0`` for bool)."""
    zero = append(block, arith.ConstantOp(IntegerAttr(0, x.type)))
    if x.type.width.data == 1:
        return x
    one, minus = (append(block, arith.ConstantOp(IntegerAttr(v, x.type))) for v in (1, -1))
    negative = append(block, arith.SelectOp(append(block, arith.CmpiOp(x, zero, "slt")), minus, zero))
    return append(block, arith.SelectOp(append(block, arith.CmpiOp(x, zero, "sgt")), one, negative))


#: rounding functions, the identity on integers (torch returns the integer tensor unchanged)
ROUNDS_TO_INTEGER: frozenset[type] = frozenset({aten.CeilOp, aten.FloorOp, aten.TruncOp, aten.RoundOp})

#: aten op -> scalar body of an elementwise function with no named tg op
_BODIES = {
    aten.SignOp: _sign,
    aten.CeilOp: lambda block, x: append(block, math.CeilOp(x)),
    aten.FloorOp: lambda block, x: append(block, math.FloorOp(x)),
}


class ScalarBodyPattern(RewritePattern):
    """``sign``, ``ceil``, ``floor``: a one-op `tg.fused_elementwise` of `math`/`arith` ops.

    ```mlir
    %y = aten.floor %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %y = tg.fused_elementwise %x : (tensor<2x3xf32>) -> tensor<2x3xf32> {
    ^bb0(%a: f32):
      %f = math.floor %a : f32
      tg.yield %f : f32
    }
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        body = _BODIES.get(type(op))
        if body is None:
            return
        if isinstance(element_type(op.result), IntegerType) and type(op) in ROUNDS_TO_INTEGER:
            rewriter.replace(op, [], [op.self])  # an integer is its own ceil and floor, as in torch
            return
        if isinstance(element_type(op.result), IntegerType):
            rewriter.replace(op, elementwise_body([op.self], op.result.type, lambda block, args: _sign_int(block, args[0])))
            return
        rewriter.replace(op, elementwise_body([op.self], op.result.type, lambda block, args: body(block, args[0])))


def _floor_divide_int(block: Block, a: SSAValue, b: SSAValue) -> SSAValue:
    """``floor(a / b)`` on integers (arith.floordivsi: torch's rounding toward -inf)."""
    return append(block, arith.FloorDivSIOp(a, b))


def _floor_divide_float(block: Block, a: SSAValue, b: SSAValue) -> SSAValue:
    """torch's ``div_floor_floating``, in ``a``'s float type: ``b == 0`` gives ``a / b``; else,
    with ``m = fmod(a, b)`` (`scalar.remf`: exact), ``d = (a - m) / b``, minus one where
    ``m != 0`` has the other sign than ``b``, then floored (rounded up when ``d - floor(d) >
    0.5``), and ``d == 0`` gives ``copysign(0, a / b)``."""

    def emit(op):
        return append(block, op)

    def c(v):
        return emit(arith.ConstantOp(FloatAttr(v, a.type)))

    mod = emit(RemFOp(a, b))
    zero, one = c(0.0), c(1.0)
    div = emit(arith.DivfOp(emit(arith.SubfOp(a, mod)), b))
    other_sign = emit(arith.XOrIOp(emit(arith.CmpfOp(b, zero, "olt")), emit(arith.CmpfOp(mod, zero, "olt"))))
    lower = emit(arith.AndIOp(emit(arith.CmpfOp(mod, zero, "une")), other_sign))
    div = emit(arith.SelectOp(lower, emit(arith.SubfOp(div, one)), div))
    floor = emit(math.FloorOp(div))
    up = emit(arith.CmpfOp(emit(arith.SubfOp(div, floor)), c(0.5), "ogt"))
    floor = emit(arith.SelectOp(up, emit(arith.AddfOp(floor, one)), floor))
    quotient = emit(arith.DivfOp(a, b))
    floor = emit(arith.SelectOp(emit(arith.CmpfOp(div, zero, "une")), floor, emit(math.CopySignOp(zero, quotient))))
    return emit(arith.SelectOp(emit(arith.CmpfOp(b, zero, "oeq")), quotient, floor))


class FloorDividePattern(RewritePattern):
    """``floor_divide`` (Tensor and Scalar forms; ``//``): a scalar body in torch's result type,
    both sides cast to it. Integers round toward -inf (``-7 // 2 = -4``); a divisor computed at
    run time is checked for zeros first (`tg.check_nonzero`: torch raises ZeroDivisionError), a
    constant one holding a zero is refused by name. Floats follow torch's ``div_floor_floating`` (``1 // 0.1 = 9``, not
    ``floor(1 / 0.1) = 10``; a zero divisor gives ``a / b``).

    ```mlir
    %q = aten.floor_divide %perm, %k : (tensor<36xi64>, tensor<i64>) -> tensor<36xi64>
    // (%k the constant 2) becomes
    %q = tg.fused_elementwise %perm, %k : (tensor<36xi64>, tensor<i64>) -> tensor<36xi64> {
    ^bb0(%a: i64, %b: i64):
      %d = arith.floordivsi %a, %b : i64
      tg.yield %d : i64
    }
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.FloorDivideOp | aten.FloorDivideScalarOp):
            return
        out = element_type(op.result)
        if out == i1:
            return notify_match_failure(op, "floor_divide to bool")
        ops = OpList()
        a = ops.cast(op.self, out)
        b = ops.add(scalar_constant(op.other.value.data, out)) if isinstance(op, aten.FloorDivideScalarOp) else ops.cast(op.other, out)
        if isinstance(out, IntegerType) and (problem := integer_divisor_problem(op, op.other)) is not None:
            return notify_match_failure(op, problem)
        if isinstance(out, IntegerType):
            b = checked_divisor(ops, b, op.other)
        build = floor_divide_body(out)
        y = ops.add(elementwise_body([a, b], op.result.type, lambda block, args: build(block, args[0], args[1])))
        rewriter.replace(op, ops, [y])


def _remainder_body(block: Block, a: SSAValue, b: SSAValue, floored: bool) -> SSAValue:
    """``fmod(a, b)`` (C's: the sign of ``a``; ``scalar.remf``/``arith.remsi``); with ``floored``
    torch's ``remainder``: plus ``b`` where the result is nonzero and its sign is not ``b``'s."""
    floats = not isinstance(a.type, IntegerType)
    r = append(block, RemFOp(a, b) if floats else arith.RemSIOp(a, b))
    if not floored:
        return r
    if floats:
        zero = append(block, arith.ConstantOp(FloatAttr(0.0, a.type)))
        nonzero = append(block, arith.CmpfOp(r, zero, "une"))
        other = append(block, arith.XOrIOp(append(block, arith.CmpfOp(r, zero, "olt")), append(block, arith.CmpfOp(b, zero, "olt"))))
        shifted = append(block, arith.AddfOp(r, b))
    else:
        zero = append(block, arith.ConstantOp(IntegerAttr(0, a.type)))
        nonzero = append(block, arith.CmpiOp(r, zero, "ne"))
        other = append(block, arith.XOrIOp(append(block, arith.CmpiOp(r, zero, "slt")), append(block, arith.CmpiOp(b, zero, "slt"))))
        shifted = append(block, arith.AddiOp(r, b))
    return append(block, arith.SelectOp(append(block, arith.AndIOp(nonzero, other)), shifted, r))


_REMAINDERS = (aten.RemainderTensorOp, aten.RemainderScalarOp, aten.RemainderScalarTensorOp, aten.FmodTensorOp, aten.FmodScalarOp)


class RemainderPattern(RewritePattern):
    """``remainder`` (``%``: the sign of the divisor) and ``fmod`` (the sign of the dividend),
    Tensor, Scalar and Scalar_Tensor (``7.5 % x``) forms: a scalar body in torch's result type, both sides cast to it.
    An integer divisor computed at run time is checked for zeros first (`tg.check_nonzero`: torch
    raises ZeroDivisionError there; a constant one holding a zero is refused by name); floats
    follow C's ``fmod`` (a zero divisor gives NaN, as in torch).

    ```mlir
    %r = aten.remainder.Scalar %x {other = 3 : i64} : (tensor<4xi64>) -> tensor<4xi64>
    // becomes
    %r = tg.fused_elementwise %x, %c3 : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64> {
    ^bb0(%a: i64, %b: i64):
      %m = arith.remsi %a, %b : i64     // floats: scalar.remf
      ...                       // + %b where %m != 0 and its sign differs from %b's
      tg.yield %y : i64
    }
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _REMAINDERS):
            return
        out = element_type(op.result)
        if out == i1:
            return notify_match_failure(op, f"{op.name} of bool")
        if isinstance(out, IntegerType) and (problem := integer_divisor_problem(op, op.other)) is not None:
            return notify_match_failure(op, problem)
        ops = OpList()

        def side(v):  # an operand, or a Scalar property: in the result type
            return ops.cast(v, out) if isinstance(v, SSAValue) else ops.add(scalar_constant(v.value.data, out))

        a, b = side(op.self), side(op.other)
        if isinstance(out, IntegerType):
            b = checked_divisor(ops, b, op.other)
        floored = not isinstance(op, aten.FmodTensorOp | aten.FmodScalarOp)
        y = ops.add(elementwise_body([a, b], op.result.type, lambda block, args: _remainder_body(block, args[0], args[1], floored)))
        rewriter.replace(op, ops, [y])


def floor_divide_body(out) -> object:
    """The body builder ``(block, a, b) -> floor(a / b)`` for element type ``out``."""
    return _floor_divide_int if isinstance(out, IntegerType) else _floor_divide_float


def integer_divisor_problem(op, divisor) -> str | None:
    """Why an integer division of ``op`` by ``divisor`` (a Scalar property or a tensor operand)
    cannot be compiled, or None: a constant divisor holding a zero (torch raises
    ZeroDivisionError). A divisor computed at run time is checked then (`checked_divisor`)."""
    if not isinstance(divisor, SSAValue):
        known = np.asarray(divisor.value.data)
    else:
        owner = divisor.owner
        known = dense_to_array(owner.value) if isinstance(owner, ConstantOp) else None
    if known is not None and (known == 0).any():
        return f"integer {op.name.removeprefix('aten.')} by zero (torch raises ZeroDivisionError)"
    return None


def checked_divisor(ops: OpList, value: SSAValue, divisor) -> SSAValue:
    """``value`` (the integer divisor in the result's type), behind a run-time zero check
    (`tg.check_nonzero`) when ``divisor`` is not a constant."""
    if isinstance(divisor, SSAValue) and not isinstance(divisor.owner, ConstantOp):
        return ops.add(CheckNonzeroOp(value))
    return value


class CastPattern(RewritePattern):
    """``to``, ``_to_copy`` and ``type_as``: nothing when the element type stays, else ``tg.cast``.

    ```mlir
    %y = aten.to.dtype %x {dtype = "float32"} : (tensor<2x3xi64>) -> tensor<2x3xf32>
    %z = aten.to.dtype %y {dtype = "float32"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %y = tg.cast %x : (tensor<2x3xi64>) -> tensor<2x3xf32>    // and %z is %y
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.ToDtypeOp, aten.ToDtypeLayoutOp, aten.ToDeviceOp, aten.ToCopyOp, aten.TypeAsOp)):
            return
        ops = OpList()
        y = ops.cast(op.self, element_type(op.result))
        rewriter.replace(op, ops, [y])


def populate_elementwise_patterns() -> list[RewritePattern]:
    return [BinaryPattern(), UnaryPattern(), GeluPattern(), WherePattern(), ClampPattern(), ScalarBodyPattern(), FloorDividePattern(), RemainderPattern(), CastPattern()]
