"""aten → tg: the elementwise functions of Core ATen that have no named tg op.

Each becomes a one-op ``tg.fused_elementwise`` whose scalar body is `math`/`arith` ops (the
mechanism `sign`/`floor` use): inverse and hyperbolic trigonometry, ``tan``, ``expm1``,
``log1p``, ``log2``, ``log10``, ``reciprocal``, ``round`` (half to even, and to ``decimals``),
``trunc``, ``isnan``/``isinf``/``signbit``, ``angle`` (of a real number), ``elu``, ``leaky_relu``,
``atan2``, ``copysign``, ``hypot``, ``nextafter``, ``fmax``/``fmin`` (NaN-ignoring), the shifts,
``pow.Scalar`` (a number to a tensor's power) and ``div`` with a rounding mode. Each level below has one entry per body op:
an LLVM emitter (`codegen.llvm.scalar.ARITH`), a Triton expression
(`codegen.triton.expressions.ARITH`) and a NumPy reference (`transforms.evaluate`); fusion then
merges these bodies with their neighbours like any other.

```mlir
%y = aten.log1p %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// becomes
%y = tg.fused_elementwise %x : (tensor<2x3xf32>) -> tensor<2x3xf32> {
^bb0(%a: f32):
  %l = math.log1p %a : f32
  tg.yield %l : f32
}
```
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import BFloat16Type, Float16Type, FloatAttr, IntegerAttr, IntegerType, i1
from xdsl.ir import Block, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.scalar import DigammaOp, ErfcOp, ErfinvOp, HypotOp, I0Op, LgammaOp, NextafterOp
from tensor_graphs.lowering.aten_to_tensor.common import OpList, append, element_type, elementwise_body, notify_match_failure, scalar_constant
from tensor_graphs.lowering.aten_to_tensor.elementwise import ROUNDS_TO_INTEGER

#: body builder: ``(op, block, args) -> the value to yield``
Body = Callable[..., SSAValue]


def _float_const(block: Block, value: float, like: SSAValue) -> SSAValue:
    return append(block, arith.ConstantOp(FloatAttr(value, like.type)))


def _math(cls) -> Body:
    """A body of one `math` op."""
    return lambda op, block, x: append(block, cls(x))


def _reciprocal(op, block: Block, x: SSAValue) -> SSAValue:
    return append(block, arith.DivfOp(_float_const(block, 1.0, x), x))


def _round(op, block: Block, x: SSAValue) -> SSAValue:
    """torch.round: half to even (``round(2.5) = 2``); ``decimals``: scaled by a power of ten
    first and back after, as torch does (``x * 10^d``, or ``x / 10^-d`` for negative ``d``)."""
    decimals = op.decimals.value.data if isinstance(op, aten.RoundDecimalsOp) else 0
    if decimals == 0:
        return append(block, math.RoundEvenOp(x))
    scale = _float_const(block, 10.0 ** abs(decimals), x)
    there, back = (arith.MulfOp, arith.DivfOp) if decimals > 0 else (arith.DivfOp, arith.MulfOp)
    return append(block, back(append(block, math.RoundEvenOp(append(block, there(x, scale)))), scale))


def _is_nan(op, block: Block, x: SSAValue) -> SSAValue:
    if isinstance(x.type, IntegerType):
        return append(block, arith.ConstantOp(IntegerAttr(0, i1)))
    return append(block, arith.CmpfOp(x, x, "uno"))


def _is_inf(op, block: Block, x: SSAValue) -> SSAValue:
    if isinstance(x.type, IntegerType):
        return append(block, arith.ConstantOp(IntegerAttr(0, i1)))
    return append(block, arith.CmpfOp(append(block, math.AbsFOp(x)), _float_const(block, pymath.inf, x), "oeq"))


def _elu(op, block: Block, x: SSAValue) -> SSAValue:
    """``x > 0 ? scale * x : scale * alpha * expm1(input_scale * x)`` (NaN stays NaN)."""
    alpha, scale, input_scale = (float(p.value.data) for p in (op.alpha, op.scale, op.input_scale))
    negative = append(block, math.ExpM1Op(append(block, arith.MulfOp(x, _float_const(block, input_scale, x)))))
    negative = append(block, arith.MulfOp(negative, _float_const(block, alpha * scale, x)))
    positive = append(block, arith.MulfOp(x, _float_const(block, scale, x)))
    above = append(block, arith.CmpfOp(x, _float_const(block, 0.0, x), "ogt"))
    return append(block, arith.SelectOp(above, positive, negative))


def _leaky_relu(op, block: Block, x: SSAValue) -> SSAValue:
    """``x > 0 ? x : x * negative_slope`` (NaN stays NaN)."""
    slope = _float_const(block, float(op.negative_slope.value.data), x)
    above = append(block, arith.CmpfOp(x, _float_const(block, 0.0, x), "ogt"))
    return append(block, arith.SelectOp(above, x, append(block, arith.MulfOp(x, slope))))


def _signbit(op, block: Block, x: SSAValue) -> SSAValue:
    """Whether the sign bit is set: ``-0.0`` and ``-nan`` too (``copysign(1, x) < 0``)."""
    if x.type == i1:
        return append(block, arith.ConstantOp(IntegerAttr(0, i1)))
    if isinstance(x.type, IntegerType):
        zero = append(block, arith.ConstantOp(IntegerAttr(0, x.type)))
        return append(block, arith.CmpiOp(x, zero, "slt"))
    one = append(block, math.CopySignOp(_float_const(block, 1.0, x), x))
    return append(block, arith.CmpfOp(one, _float_const(block, 0.0, x), "olt"))


def _angle(op, block: Block, x: SSAValue) -> SSAValue:
    """The argument of a real number: ``pi`` below zero, else 0 (``-0.0`` too); NaN stays NaN."""
    below = append(block, arith.CmpfOp(x, _float_const(block, 0.0, x), "olt"))
    angle = append(block, arith.SelectOp(below, _float_const(block, pymath.pi, x), _float_const(block, 0.0, x)))
    return append(block, arith.SelectOp(append(block, arith.CmpfOp(x, x, "uno")), x, angle))


#: aten op -> body over its one tensor operand (``self``), in the result's element type
UNARY_BODIES: dict[type, Body] = {
    aten.AcosOp: _math(math.AcosOp),
    aten.AcoshOp: _math(math.AcoshOp),
    aten.AsinOp: _math(math.AsinOp),
    aten.AsinhOp: _math(math.AsinhOp),
    aten.AtanOp: _math(math.AtanOp),
    aten.AtanhOp: _math(math.AtanhOp),
    aten.CoshOp: _math(math.CoshOp),
    aten.SinhOp: _math(math.SinhOp),
    aten.TanOp: _math(math.TanOp),
    aten.Expm1Op: _math(math.ExpM1Op),
    aten.Log1pOp: _math(math.Log1pOp),
    aten.Log2Op: _math(math.Log2Op),
    aten.Log10Op: _math(math.Log10Op),
    aten.Exp2Op: _math(math.Exp2Op),
    aten.TruncOp: _math(math.TruncOp),
    aten.ErfcOp: _math(ErfcOp),
    aten.LgammaOp: _math(LgammaOp),
    aten.DigammaOp: _math(DigammaOp),
    aten.ErfinvOp: _math(ErfinvOp),
    aten.I0Op: _math(I0Op),
    aten.ReciprocalOp: _reciprocal,
    aten.RoundOp: _round,
    aten.RoundDecimalsOp: _round,
    aten.EluOp: _elu,
    aten.LeakyReluOp: _leaky_relu,
    aten.AngleOp: _angle,
}

#: aten ops whose result is bool over an operand of any type
PREDICATES: dict[type, Body] = {aten.IsnanOp: _is_nan, aten.IsinfOp: _is_inf, aten.SignbitOp: _signbit}


class MathFunctionPattern(RewritePattern):
    """A function of :data:`UNARY_BODIES` or :data:`PREDICATES`: one-op scalar body (above)."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        body = UNARY_BODIES.get(type(op))
        if body is not None and type(op) in ROUNDS_TO_INTEGER and isinstance(element_type(op.result), IntegerType):
            rewriter.replace(op, [], [op.self])  # trunc, round of an integer: itself, as in torch
            return
        if body is not None:
            ops = OpList()
            x = ops.cast(op.self, element_type(op.result))
            ops.add(elementwise_body([x], op.result.type, lambda block, args: body(op, block, args[0])))
            rewriter.replace(op, ops, [ops[-1].results[0]])
            return
        predicate = PREDICATES.get(type(op))
        if predicate is not None:
            rewriter.replace(op, elementwise_body([op.self], op.result.type, lambda block, args: predicate(op, block, args[0])))


def _integer_extremum(float_op: type, signed_op: type, bool_op: type) -> Callable[[Block, SSAValue, SSAValue], SSAValue]:
    """``fmax``/``fmin``: NaN-ignoring on floats (``maxnum``); on integers the plain extremum
    (bool: ``or``/``and``, as false < true)."""
    def body(block: Block, x: SSAValue, y: SSAValue) -> SSAValue:
        if x.type == i1:
            return append(block, bool_op(x, y))
        return append(block, (signed_op if isinstance(x.type, IntegerType) else float_op)(x, y))

    return body


def _shift(left: bool) -> Callable[[Block, SSAValue, SSAValue], SSAValue]:
    """``a << b`` / ``a >> b`` as torch's: a shift by ``b`` outside ``[0, bits)`` (negative too)
    gives 0 to the left and the sign (0 or -1) to the right, where LLVM's would be poison."""
    def body(block: Block, a: SSAValue, b: SSAValue) -> SSAValue:
        if not isinstance(a.type, IntegerType) or a.type == i1:
            raise ValueError("shifts of integers only")
        bits = a.type.width.data
        in_range = append(block, arith.CmpiOp(b, append(block, arith.ConstantOp(IntegerAttr(bits, a.type))), "ult"))
        if left:
            zero = append(block, arith.ConstantOp(IntegerAttr(0, a.type)))
            return append(block, arith.SelectOp(in_range, append(block, arith.ShLIOp(a, b)), zero))
        amount = append(block, arith.SelectOp(in_range, b, append(block, arith.ConstantOp(IntegerAttr(bits - 1, a.type)))))
        return append(block, arith.ShRSIOp(a, amount))

    return body


def _binary(cls: type) -> Callable[[Block, SSAValue, SSAValue], SSAValue]:
    return lambda block, x, y: append(block, cls(x, y))


#: aten op -> (body over both operands cast to the result's element type, whether integer
#: results are allowed). torch computes ``hypot``/``nextafter`` on floats only; ``copysign`` and
#: ``atan2`` of integers promote to a float result (the cast happens first).
BINARY_BODIES: dict[type, tuple[Callable[[Block, SSAValue, SSAValue], SSAValue], bool]] = {
    aten.Atan2Op: (_binary(math.Atan2Op), False),
    aten.CopysignTensorOp: (_binary(math.CopySignOp), False),
    aten.HypotOp: (_binary(HypotOp), False),
    aten.NextafterOp: (_binary(NextafterOp), False),
    aten.FmaxOp: (_integer_extremum(arith.MaxnumfOp, arith.MaxSIOp, arith.OrIOp), True),
    aten.FminOp: (_integer_extremum(arith.MinnumfOp, arith.MinSIOp, arith.AndIOp), True),
    **{cls: (_shift(True), True) for cls in (aten.LshiftTensorOp, aten.BitwiseLeftShiftTensorOp)},
    **{cls: (_shift(False), True) for cls in (aten.RshiftTensorOp, aten.BitwiseRightShiftTensorOp)},
}

#: the integer-only ones among them
_INTEGER_ONLY = (aten.LshiftTensorOp, aten.BitwiseLeftShiftTensorOp, aten.RshiftTensorOp, aten.BitwiseRightShiftTensorOp)


class BinaryMathPattern(RewritePattern):
    """A function of two tensors in :data:`BINARY_BODIES`: its scalar body over both operands in
    the result's type (broadcast by `tg.fused_elementwise`).

    ```mlir
    %y = aten.atan2 %a, %b : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %y = tg.fused_elementwise %a, %b : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> {
    ^bb0(%x: f32, %z: f32):
      %t = math.atan2 %x, %z : f32
      tg.yield %t : f32
    }
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        entry = BINARY_BODIES.get(type(op))
        if entry is None:
            return
        body, integers = entry
        out = element_type(op.result)
        if isinstance(out, IntegerType) and not integers:
            return notify_match_failure(op, f"{op.name} to an integer result ({out}): float results only, as in torch")
        if isinstance(op, _INTEGER_ONLY) and (not isinstance(out, IntegerType) or out == i1):
            return notify_match_failure(op, f"{op.name} of {out}: integers only, as in torch")
        if isinstance(out, Float16Type | BFloat16Type):  # kept narrow by widen-dtypes (COMPUTES_IN_ITS_DTYPE)
            return notify_match_failure(op, f"{op.name} of {out}: the next value is one {out} step, which float32 cannot compute")
        ops = OpList()
        a, b = ops.cast(op.self, out), ops.cast(op.other, out)
        y = ops.add(elementwise_body([a, b], op.result.type, lambda block, args: body(block, args[0], args[1])))
        rewriter.replace(op, ops, [y])


class PowScalarPattern(RewritePattern):
    """``pow.Scalar(c, exponent)``: the number ``c`` to each element's power (``powf``; integers:
    square-and-multiply, as torch's ``powi``).

    ```mlir
    %y = aten.pow.Scalar %e {self = 2.0 : f64} : (tensor<3xf32>) -> tensor<3xf32>
    // becomes
    %c = tg.constant dense<2.0> : tensor<f32>
    %y = tg.pow %c, %e : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.PowScalarOp):
            return
        from tensor_graphs.dialects.tensor import PowOp

        out = element_type(op.result)
        if out == i1:
            return notify_match_failure(op, "pow.Scalar to a bool result")
        ops = OpList()
        base = ops.add(scalar_constant(op.self.value.data, out))
        y = ops.add(PowOp(base, ops.cast(op.exponent, out), op.result.type))
        rewriter.replace(op, ops, [y])


class DivModePattern(RewritePattern):
    """``div`` with a rounding mode (``torch.div(a, b, rounding_mode=...)``): none is ``a / b``
    (``tg.div``); ``"trunc"`` the quotient rounded toward zero (floats: ``trunc(a / b)``);
    ``"floor"`` is ``floor_divide`` (its pattern's bodies). An integer division by a divisor
    computed at run time checks it for zeros first (`tg.check_nonzero`: torch raises there).

    ```mlir
    %q = aten.div.Tensor_mode %a, %b {rounding_mode = "trunc"} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    // becomes
    %q = tg.fused_elementwise %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> {
    ^bb0(%x: f32, %y: f32):
      %d = arith.divf %x, %y : f32
      %t = math.trunc %d : f32
      tg.yield %t : f32
    }
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.DivTensorModeOp | aten.DivScalarModeOp):
            return
        from tensor_graphs.dialects.tensor import DivOp
        from tensor_graphs.lowering.aten_to_tensor.elementwise import checked_divisor, floor_divide_body, integer_divisor_problem

        mode = op.rounding_mode.data if op.rounding_mode is not None else None
        out = element_type(op.result)
        ops = OpList()
        a = ops.cast(op.self, out)
        b = ops.add(scalar_constant(op.other.value.data, out)) if isinstance(op, aten.DivScalarModeOp) else ops.cast(op.other, out)
        if mode is None:
            rewriter.replace(op, ops, [ops.add(DivOp(a, b, op.result.type))])
            return
        if mode not in ("trunc", "floor"):
            return notify_match_failure(op, f"rounding_mode must be None, 'trunc' or 'floor', got '{mode}'")
        if out == i1:
            return notify_match_failure(op, "div with a rounding mode to bool")
        if isinstance(out, IntegerType) and (problem := integer_divisor_problem(op, op.other)) is not None:
            return notify_match_failure(op, problem)
        if isinstance(out, IntegerType):
            b = checked_divisor(ops, b, op.other)
        if mode == "floor":
            body = floor_divide_body(out)
        elif isinstance(out, IntegerType):
            body = lambda block, x, y: append(block, arith.DivSIOp(x, y))  # noqa: E731 - rounds toward zero
        else:
            body = lambda block, x, y: append(block, math.TruncOp(append(block, arith.DivfOp(x, y))))  # noqa: E731
        y = ops.add(elementwise_body([a, b], op.result.type, lambda block, args: body(block, args[0], args[1])))
        rewriter.replace(op, ops, [y])


def populate_math_function_patterns() -> list[RewritePattern]:
    return [MathFunctionPattern(), BinaryMathPattern(), PowScalarPattern(), DivModePattern()]
