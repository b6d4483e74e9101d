"""aten → tg: elementwise ops.

Binary arithmetic (add/sub/mul/div in Tensor and Scalar forms, maximum, minimum, max/min.other,
pow), ``clamp``/``hardtanh`` (max then min), ``sign``/``ceil``/``floor`` (scalar bodies), unary
functions (relu, tanh, exp, log, sqrt, rsqrt, neg, abs, sigmoid, silu, erf, cos, sin → the ``tg`` op of
that function name), ``gelu`` with its ``approximate`` form, ``where``/``masked_fill`` →
``tg.select``, and the dtype conversions (``to`` — ``to.device`` too: the device is dropped —, ``_to_copy``, ``type_as`` → ``tg.cast``, or
nothing when the dtype stays). Scalars become rank-0 ``tg.constant`` operands that broadcast;
operands whose element type differs from the result's (torch's type promotion) are cast first.
"""

from __future__ import annotations

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import FloatAttr, f64
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import (
    UNARY_OPS,
    AddOp,
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
    """Unary functions map one to one onto the tg op of that function name.

    ```mlir
    %y = aten.tanh %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %y = tg.tanh %x : tensor<2x3xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        fn = _UNARY.get(type(op))
        if fn is not None:
            rewriter.replace(op, UNARY_OPS[fn](op.self))


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
        if body is not None:
            rewriter.replace(op, elementwise_body([op.self], op.result.type, lambda block, args: body(block, args[0])))


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
    return [BinaryPattern(), UnaryPattern(), GeluPattern(), WherePattern(), ClampPattern(), ScalarBodyPattern(), CastPattern()]
