"""The ``scalar`` dialect: scalar ops for the bodies of `tg.fused_elementwise` and
`buf.fused_elementwise` that MLIR has and xDSL's ``arith``/``math`` dialects lack. Bodies are
cloned unchanged from the tg level to the buf level, so these ops belong to neither.

```mlir
%m = scalar.remf %a, %b : f32     // MLIR's arith.remf: C's fmod (the sign of %a; NaN for %b = 0)
%c = scalar.erfc %a : f32         // 1 - erf(a) without the cancellation (C's erfc)
%g = scalar.lgamma %a : f32       // log |Gamma(a)| (C's lgamma)
%h = scalar.hypot %a, %b : f32    // sqrt(a^2 + b^2) without overflow (C's hypot)
%n = scalar.nextafter %a, %b : f32  // the next float after a toward b (C's nextafter)
%d = scalar.digamma %a : f32      // torch's digamma, erfinv and i0 (`transforms.special_functions`)
```
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloatConstr
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import IRDLOperation, VarConstraint, irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Pure


@irdl_op_definition
class RemFOp(arith.FloatingPointLikeBinaryOperation):
    """C's ``fmod`` of two floats: ``lhs - rhs * trunc(lhs / rhs)`` computed exactly, with the
    sign of ``lhs``; NaN for a zero ``rhs``, ``lhs`` for an infinite one (MLIR's ``arith.remf``).
    Evaluated by NumPy's ``fmod``, emitted as LLVM's ``frem``."""

    name = "scalar.remf"
    traits = traits_def(Pure())


@irdl_op_definition
class HypotOp(arith.FloatingPointLikeBinaryOperation):
    """C's ``hypot``: ``sqrt(lhs^2 + rhs^2)`` without intermediate overflow or underflow; inf
    when either is infinite, even with a NaN (``torch.hypot``)."""

    name = "scalar.hypot"
    traits = traits_def(Pure())


@irdl_op_definition
class NextafterOp(arith.FloatingPointLikeBinaryOperation):
    """C's ``nextafter``: the representable float next to ``lhs`` in the direction of ``rhs``
    (``rhs`` itself when they are equal; NaN when either is)."""

    name = "scalar.nextafter"
    traits = traits_def(Pure())


class _LibmUnary(IRDLOperation):
    """A float function of one float from the C math library, same type in and out."""

    T: ClassVar = VarConstraint("T", AnyFloatConstr)
    operand = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$operand attr-dict `:` type($result)"

    def __init__(self, operand: SSAValue):
        super().__init__(operands=[operand], result_types=[operand.type])


@irdl_op_definition
class ErfcOp(_LibmUnary):
    """C's ``erfc``: ``1 - erf(x)`` accurate where ``erf(x)`` is near 1 (MLIR's ``math.erfc``)."""

    name = "scalar.erfc"


@irdl_op_definition
class LgammaOp(_LibmUnary):
    """C's ``lgamma``: ``log |Gamma(x)|`` (inf at the poles 0, -1, -2, ...)."""

    name = "scalar.lgamma"


@irdl_op_definition
class DigammaOp(_LibmUnary):
    """``digamma(x) = d/dx log Gamma(x)`` (torch's algorithm: `transforms.special_functions`)."""

    name = "scalar.digamma"


@irdl_op_definition
class ErfinvOp(_LibmUnary):
    """The inverse of ``erf`` on [-1, 1] (+-inf at +-1, NaN beyond)."""

    name = "scalar.erfinv"


@irdl_op_definition
class I0Op(_LibmUnary):
    """The modified Bessel function of the first kind, order 0."""

    name = "scalar.i0"


SCALAR = Dialect("scalar", [RemFOp, HypotOp, NextafterOp, ErfcOp, LgammaOp, DigammaOp, ErfinvOp, I0Op])
