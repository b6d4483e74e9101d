"""LLVM emitters of the special functions (`scalar.digamma`, `scalar.erfinv`, `scalar.i0`): the
algorithms and coefficients of `transforms.special_functions` (torch's, from Cephes), branch-free
(selects, no loops: every step runs for every element), in float64 whatever the element type, then
rounded once; libm's ``log``, ``tan``, ``erf`` and ``exp`` where they need one.
"""

from __future__ import annotations

import math

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f64
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.loops import FunctionBuilder
from tensor_graphs.codegen.llvm.scalar import (
    const,
    copysign,
    emit_convert,
    fabs,
    fadd,
    fcmp,
    fdiv,
    fmul,
    fsub,
    intrinsic,
    libm,
    select,
)
from tensor_graphs.transforms import special_functions as ref


def _polevl(b: FunctionBuilder, x: SSAValue, coefficients: tuple[float, ...]) -> SSAValue:
    acc = const(b, coefficients[0], x)
    for c in coefficients[1:]:
        acc = fadd(b, fmul(b, acc, x), const(b, c, x))
    return acc


def _chbevl(b: FunctionBuilder, x: SSAValue, coefficients: tuple[float, ...]) -> SSAValue:
    b0, b1, b2 = const(b, coefficients[0], x), const(b, 0.0, x), const(b, 0.0, x)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = fadd(b, fsub(b, fmul(b, x, b1), b2), const(b, c, x))
    return fmul(b, const(b, 0.5, x), fsub(b, b0, b2))


def _in_f64(emit):
    """``emit`` (a float64 emitter) for any float element: widened, computed, rounded once."""
    def wrapped(b: FunctionBuilder, x: SSAValue) -> SSAValue:
        return emit_convert(b, emit(b, emit_convert(b, x, f64)), x.type)

    return wrapped


def _digamma(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    zero, one = const(b, 0.0, x), const(b, 1.0, x)
    negative = fcmp(b, "olt", x, zero)
    y = select(b, negative, fsub(b, one, x), x)
    total = zero
    shift = const(b, float(ref.DIGAMMA_SHIFT), x)
    for _ in range(ref.DIGAMMA_SHIFT):
        low = fcmp(b, "olt", y, shift)
        total = fsub(b, total, select(b, low, fdiv(b, one, y), zero))
        y = select(b, low, fadd(b, y, one), y)
    z = fdiv(b, one, fmul(b, y, y))
    series = select(b, fcmp(b, "olt", y, const(b, 1e17, x)), fmul(b, z, _polevl(b, z, ref.DIGAMMA_SERIES)), zero)
    result = fsub(b, fsub(b, fadd(b, total, libm(b, "log", y)), fdiv(b, const(b, 0.5, x), y)), series)
    whole = intrinsic(b, "trunc", x)
    angle = fmul(b, const(b, math.pi, x), fsub(b, x, whole))  # pi * frac(x): tan's argument, exactly reduced
    reflection = fdiv(b, const(b, math.pi, x), libm(b, "tan", angle))
    result = select(b, negative, fsub(b, result, reflection), result)
    pole = b.add(llvm.AndOp(negative, fcmp(b, "oeq", x, whole)))  # the negative integers (and -inf)
    result = select(b, pole, const(b, math.nan, x), result)
    at_zero = copysign(b, const(b, math.inf, x), fmul(b, x, const(b, -1.0, x)))  # -(+0) is -0: -inf at +0
    return select(b, fcmp(b, "oeq", x, zero), at_zero, result)


def _erfinv(b: FunctionBuilder, y: SSAValue) -> SSAValue:
    one = const(b, 1.0, y)
    a = fabs(b, y)
    z = fmul(b, y, y)
    central = fdiv(b, fmul(b, y, _polevl(b, z, ref.ERFINV_A[::-1])), fadd(b, fmul(b, _polevl(b, z, ref.ERFINV_B[::-1]), z), one))
    t = intrinsic(b, "sqrt", fsub(b, const(b, 0.0, y), libm(b, "log", fdiv(b, fsub(b, one, a), const(b, 2.0, y)))))
    tail = fdiv(b, copysign(b, _polevl(b, t, ref.ERFINV_C[::-1]), y), fadd(b, fmul(b, _polevl(b, t, ref.ERFINV_D[::-1]), t), one))
    x = select(b, fcmp(b, "ole", a, const(b, 0.7, y)), central, tail)
    slope = const(b, 2.0 / math.sqrt(math.pi), y)
    for _ in range(2):  # Newton on erf(x) = y
        step = fdiv(b, fsub(b, libm(b, "erf", x), y), fmul(b, slope, libm(b, "exp", fsub(b, const(b, 0.0, y), fmul(b, x, x)))))
        x = fsub(b, x, step)
    x = select(b, fcmp(b, "oeq", a, one), copysign(b, const(b, math.inf, y), y), x)
    return select(b, fcmp(b, "ogt", a, one), const(b, math.nan, y), x)


def _i0(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    a = fabs(b, x)
    grows = libm(b, "exp", a)
    small = fmul(b, grows, _chbevl(b, fsub(b, fmul(b, a, const(b, 0.5, x)), const(b, 2.0, x)), ref.I0_SMALL))
    tail = _chbevl(b, fsub(b, fdiv(b, const(b, 32.0, x), a), const(b, 2.0, x)), ref.I0_LARGE)
    large = fdiv(b, fmul(b, grows, tail), intrinsic(b, "sqrt", a))
    return select(b, fcmp(b, "ole", a, const(b, 8.0, x)), small, large)


emit_digamma = _in_f64(_digamma)
emit_erfinv = _in_f64(_erfinv)
emit_i0 = _in_f64(_i0)
