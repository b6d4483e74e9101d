"""Scalar math in the `llvm` dialect for the rest of Core ATen's elementwise functions: the
`math` body ops of `lowering.aten_to_tensor.math_functions`, registered into `scalar.ARITH`.

- ``tan``, ``asin``, ``acos``, ``atan``, ``atan2``, ``sinh``, ``cosh``: LLVM's intrinsics
  (``llvm.tan.f32``, ...), which call libm (correctly rounded or nearly; they do not vectorise:
  these functions are rare in models).
- ``expm1``, ``log1p``: Kahan's forms over the vectorised ``exp``/``log`` of `scalar`:
  ``expm1(x) = (u - 1) x / log(u)`` with ``u = exp(x)``, ``log1p(x) = log(u) x / (u - 1)`` with
  ``u = 1 + x`` (exact for tiny x: ``u == 1`` gives ``x``), so the cancellation in ``u - 1``
  cancels in the quotient; overflow gives inf.
- ``asinh``, ``acosh``, ``atanh``: through ``log1p`` (``asinh |x| = log1p(|x| + x^2 / (1 +
  sqrt(1 + x^2)))``, ``acosh x = log1p(t + sqrt(2t + t^2))`` with ``t = x - 1``, ``atanh |x| =
  log1p(2|x| / (1 - |x|)) / 2``), and ``log(2x)`` beyond 2^28, where ``x^2`` would overflow.
- ``round`` (half away from zero), ``roundeven`` (torch.round: half to even), ``trunc``,
  ``exp2``: LLVM's intrinsics, which are instructions on x86 (vectorise).
- ``scalar.erfc``, ``scalar.lgamma``, ``scalar.hypot``, ``scalar.nextafter``: the C math
  library's (`scalar.libm`; not vectorised).
- ``scalar.digamma``, ``scalar.erfinv``, ``scalar.i0``: torch's algorithms in float64
  (`special_functions`).
- ``scalar.remf``: ``frem`` (C's ``fmod``); ``arith.remsi``: ``srem`` with ``MIN % -1 = 0``.
- ``arith.divsi``: ``sdiv`` rounding toward zero, ``MIN / -1`` wrapping to ``MIN`` (torch's
  result; ``sdiv`` would trap) and a zero divisor dividing by 1 (lowerings allow constant,
  nonzero divisors only).
"""

from __future__ import annotations

import math

from xdsl.dialects import arith, llvm
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.loops import FunctionBuilder
from tensor_graphs.codegen.llvm.special_functions import emit_digamma, emit_erfinv, emit_i0
from tensor_graphs.dialects.scalar import DigammaOp, ErfcOp, ErfinvOp, HypotOp, I0Op, LgammaOp, NextafterOp, RemFOp
from tensor_graphs.codegen.llvm.scalar import (
    ArithEmitter,
    const,
    copysign,
    emit_exp,
    emit_log,
    emit_sqrt,
    fabs,
    fadd,
    fcmp,
    fdiv,
    fma,
    fmul,
    fsub,
    intrinsic,
    libm,
    select,
)

#: beyond this magnitude asinh/acosh use log(2|x|): x^2 would overflow, and 1/x^2 vanishes
_HUGE = 2.0**28


def emit_expm1(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    u = emit_exp(b, x)
    one = const(b, 1.0, x)
    um1 = fsub(b, u, one)
    y = fdiv(b, fmul(b, um1, x), emit_log(b, u))
    y = select(b, fcmp(b, "oeq", um1, const(b, -1.0, x)), const(b, -1.0, x), y)  # exp(x) underflowed
    y = select(b, fcmp(b, "oeq", u, const(b, math.inf, x)), u, y)
    return select(b, fcmp(b, "oeq", u, one), x, y)  # |x| tiny (and NaN stays NaN through the rest)


def emit_log1p(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    one = const(b, 1.0, x)
    u = fadd(b, x, one)
    um1 = fsub(b, u, one)
    y = fmul(b, emit_log(b, u), fdiv(b, x, um1))
    y = select(b, fcmp(b, "oeq", u, const(b, math.inf, x)), u, y)
    y = select(b, fcmp(b, "oeq", u, const(b, 0.0, x)), const(b, -math.inf, x), y)  # x = -1
    return select(b, fcmp(b, "oeq", u, one), x, y)


def emit_asinh(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    a = fabs(b, x)
    one = const(b, 1.0, x)
    a2 = fmul(b, a, a)
    small = emit_log1p(b, fadd(b, a, fdiv(b, a2, fadd(b, one, emit_sqrt(b, fadd(b, one, a2))))))
    large = fadd(b, emit_log(b, a), const(b, math.log(2.0), x))
    return copysign(b, select(b, fcmp(b, "ogt", a, const(b, _HUGE, x)), large, small), x)


def emit_acosh(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    t = fsub(b, x, const(b, 1.0, x))  # x < 1: NaN from the sqrt of a negative
    small = emit_log1p(b, fadd(b, t, emit_sqrt(b, fma(b, t, t, fadd(b, t, t)))))
    large = fadd(b, emit_log(b, x), const(b, math.log(2.0), x))
    y = select(b, fcmp(b, "ogt", x, const(b, _HUGE, x)), large, small)
    return select(b, fcmp(b, "olt", x, const(b, 1.0, x)), const(b, math.nan, x), y)  # also -inf


def emit_atanh(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    a = fabs(b, x)
    y = fmul(b, emit_log1p(b, fdiv(b, fadd(b, a, a), fsub(b, const(b, 1.0, x), a))), const(b, 0.5, x))
    return copysign(b, y, x)  # |x| = 1: inf; |x| > 1: log1p(< -1) = NaN


def _divsi(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    x, y = v
    t = x.type
    width = t.width.data  # type: ignore[attr-defined]

    def cmp(p: str, a: SSAValue, c: int) -> SSAValue:
        return b.add(llvm.ICmpOp(a, b.constant(c, t), IntegerAttr(llvm.ICmpPredicateFlag(p).to_int(), i64)))

    overflow = b.add(llvm.AndOp(cmp("eq", y, -1), cmp("eq", x, -(1 << (width - 1)))))
    bad = b.add(llvm.OrOp(cmp("eq", y, 0), overflow))
    quotient = b.add(llvm.SDivOp(x, select(b, bad, b.constant(1, t), y)))
    return select(b, overflow, x, quotient)  # MIN / -1 wraps to MIN


def _remsi(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    """``srem`` (C's ``%``: the sign of the dividend); a divisor of -1 gives 0 (``MIN % -1``
    would trap) and a zero divisor divides by 1 (lowerings allow constant nonzero divisors only)."""
    x, y = v
    t = x.type

    def cmp(p: str, a: SSAValue, c: int) -> SSAValue:
        return b.add(llvm.ICmpOp(a, b.constant(c, t), IntegerAttr(llvm.ICmpPredicateFlag(p).to_int(), i64)))

    bad = b.add(llvm.OrOp(cmp("eq", y, 0), cmp("eq", y, -1)))
    rem = b.add(llvm.SRemOp(x, select(b, bad, b.constant(1, t), y)))
    return select(b, cmp("eq", y, -1), b.constant(0, t), rem)


def _remf(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    """``frem``: C's ``fmod`` (exact; NaN for a zero divisor, ``x`` for an infinite one)."""
    return b.add(llvm.FRemOp(*v))


def _unary(emitter) -> ArithEmitter:
    return lambda b, op, v: emitter(b, v[0])


def _intrinsic(name: str) -> ArithEmitter:
    return lambda b, op, v: intrinsic(b, name, *v)


#: body op class -> emitter, added to `scalar.ARITH`
MATH_ARITH: dict[type[Operation], ArithEmitter] = {
    mathd.TanOp: _intrinsic("tan"),
    mathd.AsinOp: _intrinsic("asin"),
    mathd.AcosOp: _intrinsic("acos"),
    mathd.AtanOp: _intrinsic("atan"),
    mathd.Atan2Op: _intrinsic("atan2"),
    mathd.SinhOp: _intrinsic("sinh"),
    mathd.CoshOp: _intrinsic("cosh"),
    mathd.ExpM1Op: _unary(emit_expm1),
    mathd.Log1pOp: _unary(emit_log1p),
    mathd.AsinhOp: _unary(emit_asinh),
    mathd.AcoshOp: _unary(emit_acosh),
    mathd.AtanhOp: _unary(emit_atanh),
    mathd.RoundOp: _intrinsic("round"),
    mathd.RoundEvenOp: _intrinsic("roundeven"),
    mathd.TruncOp: _intrinsic("trunc"),
    mathd.Exp2Op: _intrinsic("exp2"),
    arith.DivSIOp: _divsi,
    arith.RemSIOp: _remsi,
    RemFOp: _remf,
    ErfcOp: lambda b, op, v: libm(b, "erfc", v[0]),
    LgammaOp: lambda b, op, v: libm(b, "lgamma", v[0]),
    HypotOp: lambda b, op, v: libm(b, "hypot", v[0], v[1]),
    NextafterOp: lambda b, op, v: libm(b, "nextafter", v[0], v[1]),
    DigammaOp: lambda b, op, v: emit_digamma(b, v[0]),
    ErfinvOp: lambda b, op, v: emit_erfinv(b, v[0]),
    I0Op: lambda b, op, v: emit_i0(b, v[0]),
}
