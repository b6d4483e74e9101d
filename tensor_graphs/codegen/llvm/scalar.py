"""Scalar math in the `llvm` dialect: one emitter per elementwise function, by name.

    emit_unary(b, "gelu", x)          every key of `functions.UNARY_FUNCTIONS`
    emit_binary(b, "pow", x, y)       every key of `functions.BINARY_FUNCTIONS`
    emit_arith_body(b, block, args)   the arith/math body of a `fused_elementwise`, op by op

Everything a loop body calls here is straight-line code of plain ``fmul``/``fadd``/``fma``/
``select``/``bitcast``/integer ops, so LLVM's loop vectoriser turns it into vectors of the
target's width (`tensor_graphs.target`). ``llvm.intr.exp`` and friends would be scalar libm
calls that block vectorisation; they are used only for ``sin``, ``cos`` and ``pow`` with a non-constant
exponent. The approximations (f32, max relative error against float64, measured over the
ranges in `tests/test_codegen_kernels.py`):

- ``exp``: Cody-Waite reduction by ln 2, degree-6 polynomial (Cephes ``expf``), scaling by
  2^n built in the exponent bits. ~1.5e-7. Results below ~1.7e-38 flush to 0, overflow gives inf.
- ``log``: mantissa/exponent split in the bits, degree-9 polynomial (Cephes ``logf``). ~1.5e-7.
- ``tanh``: odd polynomial for |x| < 0.625 (exact near 0), ``1 - 2 / (exp(2|x|) + 1)`` above. ~3e-7.
- ``sigmoid(x)`` = ``(x >= 0 ? 1 : e) / (1 + e)``, ``e = exp(-|x|)`` (no overflow, accurate
  tails), ``silu`` = ``x sigmoid(x)``, ``gelu_tanh`` = ``x sigmoid(2u)`` (the same as
  ``0.5 x (1 + tanh u)``, without the cancellation for negative x). ~3e-7.
- ``erf``: Taylor series for |x| < 0.5, ``1 - erfc(|x|)`` above with the Numerical Recipes
  ``erfcc`` Chebyshev fit (fractional error < 1.2e-7 for all x >= 0). ``gelu`` uses ``erfc``
  directly for negative x, so its relative error stays ~1e-6 in the left tail too.
- ``max``/``min`` propagate NaN (``llvm.maximum``), like ``torch.maximum``.

Emitters take and return SSA values of the cursor ``b``; constants go through ``b.constant``
(hoisted to the entry block). Adding a function: write ``def _foo(b, x)`` and register it in
:data:`UNARY`, :data:`BINARY` or, for a body op, :data:`ARITH`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence

from xdsl.dialects import arith, llvm
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    f32,
    f64,
    i1,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from tensor_graphs.codegen.llvm.loops import FunctionBuilder
from tensor_graphs.dialects.functions import INTEGER_UNARY


class ScalarCodegenError(ValueError):
    """A scalar function or body op has no emitter for the given types; the message says which."""


# --------------------------------------------------------------------------- primitives


def const(b: FunctionBuilder, value: float, like: SSAValue | Attribute) -> SSAValue:
    """A constant of the type of ``like`` (a value or a type)."""
    return b.constant(value, like.type if isinstance(like, SSAValue) else like)


def fadd(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.FAddOp(x, y))


def fsub(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.FSubOp(x, y))


def fmul(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.FMulOp(x, y))


def fdiv(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.FDivOp(x, y))


def fma(b: FunctionBuilder, x: SSAValue, y: SSAValue, z: SSAValue, *, exact: bool = False) -> SSAValue:
    """``x * y + z``: with one rounding (``llvm.fma``, one instruction) on a target with FMA;
    without (SSE2, SSE4.2) a multiply and an add, two roundings, unless ``exact`` (where the
    single rounding carries the result: then ``llvm.fma``, which LLVM calls libm's ``fmaf`` for)."""
    if b.fma or exact:
        return b.add(llvm.FMAOp(x, y, z))
    return b.add(llvm.FAddOp(b.add(llvm.FMulOp(x, y)), z))


def fcmp(b: FunctionBuilder, predicate: str, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.FCmpOp(x, y, predicate))


def select(b: FunctionBuilder, cond: SSAValue, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.SelectOp(cond, x, y))


def fabs(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """``|x|``: ``llvm.fabs.<type>`` named with its type (xDSL's export of ``llvm.FAbsOp``
    declares one ``llvm.fabs`` per function, whatever the types: f32 and f64 in one body clash)."""
    return intrinsic(b, "fabs", x)


def copysign(b: FunctionBuilder, magnitude: SSAValue, sign: SSAValue) -> SSAValue:
    return b.add(llvm.FCopySignOp(magnitude, sign))


def intrinsic(b: FunctionBuilder, name: str, *args: SSAValue) -> SSAValue:
    """``llvm.<name>.f32(args)`` (the type suffix comes from the first argument)."""
    t = args[0].type
    if isinstance(t, IntegerType):
        raise ScalarCodegenError(f"no llvm.{name} for {t}")
    return b.add(llvm.CallIntrinsicOp(f"llvm.{name}.{_float_name(t)}", list(args), [t]))


#: C math library functions a kernel may call, for float64 (float32: the ``f``-suffixed name);
#: `convert-buffer-to-llvm` declares those a module calls (`libm_declarations`)
LIBM: tuple[str, ...] = ("tanh", "erf", "erfc", "expm1", "log1p", "exp", "log", "lgamma", "hypot", "nextafter", "tan")


def libm(b: FunctionBuilder, name: str, *args: SSAValue) -> SSAValue:
    """``name(args)`` from the C math library (``erf`` for f64, ``erff`` for f32): correctly
    rounded or nearly, not vectorised; for dtypes the vectorised polynomials do not cover."""
    t = args[0].type
    return b.add(llvm.CallOp(name if t == f64 else f"{name}f", *args, return_type=t))


def libm_declarations(module_ops: Sequence[Operation]) -> list[llvm.FuncOp]:
    """External declarations of the `LIBM` functions that ``module_ops`` call."""
    found: dict[str, tuple[Attribute, int]] = {}
    for top in module_ops:
        for op in top.walk():
            if isinstance(op, llvm.CallOp) and op.callee is not None:
                name = op.callee.string_value()
                if name.removesuffix("f") in LIBM or name in LIBM:
                    found[name] = (op.results[0].type, len(op.args))
    return [llvm.FuncOp(n, llvm.LLVMFunctionType([t] * arity, t), linkage=llvm.LinkageAttr("external"))
            for n, (t, arity) in found.items()]


def fmax(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    """NaN-propagating maximum (``torch.maximum``); vectorises, also as a reduction."""
    return intrinsic(b, "maximum", x, y)


def fmin(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return intrinsic(b, "minimum", x, y)


def clamp(b: FunctionBuilder, x: SSAValue, lo: float, hi: float) -> SSAValue:
    """``min(max(x, lo), hi)`` that keeps NaN (compare-and-select, not minnum/maxnum)."""
    x = select(b, fcmp(b, "olt", x, const(b, lo, x)), const(b, lo, x), x)
    return select(b, fcmp(b, "ogt", x, const(b, hi, x)), const(b, hi, x), x)


def polynomial(b: FunctionBuilder, x: SSAValue, coefficients: Sequence[float]) -> SSAValue:
    """Horner's rule, highest degree first: ``((c0 x + c1) x + c2) ...``."""
    acc = const(b, coefficients[0], x)
    for c in coefficients[1:]:
        acc = fma(b, acc, x, const(b, c, x))
    return acc


def _bitcast(b: FunctionBuilder, x: SSAValue, type: Attribute) -> SSAValue:
    return b.add(llvm.BitcastOp(x, type))


def _i32_op(b: FunctionBuilder, cls: type[Operation], x: SSAValue, y: int) -> SSAValue:
    return b.add(cls(x, b.i32(y)))


def _require_f32(fn: str, x: SSAValue) -> None:
    if x.type != f32:
        raise ScalarCodegenError(f"'{fn}' is emitted for f32 only, got {x.type}")


# --------------------------------------------------------------------------- exp / log

_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = HI + LO; n * HI is exact for |n| < 2^15
_ROUND_MAGIC = 12582912.0  # 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits
#: Cephes expf: exp(r) = 1 + r + r^2 P(r) for |r| <= ln(2) / 2
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


def emit_exp(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """``exp(x)`` for f32, vectorisable.

    n = round(x / ln 2), r = x - n ln 2 (two-constant Cody-Waite), exp(x) = 2^n exp(r).
    The polynomial computes 2 exp(r) (doubled coefficients, exact) and the scale is
    2^(n-1), built as the exponent field (n - 1 + 127) << 23: that covers n in [-126, 128]
    without a second scaling. The input is clamped to [-87.5, 88.8] first: below, the
    field is 0 (result 0, so exp(-inf) = 0); above, the product overflows to inf.
    NaN survives the clamp and the polynomial.
    """
    if x.type != f32:
        return b.add(llvm.FExpOp(x))
    xc = clamp(b, x, -87.5, 88.8)
    t = fma(b, xc, const(b, _LOG2E, x), const(b, _ROUND_MAGIC, x))
    n = fsub(b, t, const(b, _ROUND_MAGIC, x))  # round(x / ln 2), exactly
    r = fma(b, n, const(b, -_LN2_HI, x), xc)
    r = fma(b, n, const(b, -_LN2_LO, x), r)
    p = polynomial(b, r, [2.0 * c for c in _EXP_P])
    two = const(b, 2.0, x)
    e2 = fma(b, fmul(b, r, r), p, fma(b, r, two, two))  # 2 exp(r)
    bits = _i32_op(b, llvm.AddOp, _bitcast(b, t, i32), 126)  # low bits of t hold n: n + 126
    scale = _bitcast(b, _i32_op(b, llvm.ShlOp, bits, 23), f32)  # 2^(n - 1)
    return fmul(b, e2, scale)


#: Cephes logf: log(1 + m) = m - m^2/2 + m^3 P(m) for 1 + m in [sqrt(1/2), sqrt(2))
_LOG_P = (
    7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
    -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
)


def emit_log(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """``log(x)`` for f32, vectorisable: x = m 2^e from the bits, then a polynomial in m - 1.

    Subnormal inputs are scaled by 2^23 first; log(0) = -inf, log(x < 0) = NaN,
    log(inf) = inf, NaN stays NaN.
    """
    if x.type != f32:
        return b.add(llvm.FLogOp(x))
    tiny = fcmp(b, "olt", x, const(b, 1.1754943508222875e-38, x))
    xs = select(b, tiny, fmul(b, x, const(b, 8388608.0, x)), x)  # * 2^23
    bits = _bitcast(b, xs, i32)
    # exponent e such that m = x / 2^e lies in [0.5, 1)
    e_int = _i32_op(b, llvm.SubOp, _i32_op(b, llvm.LShrOp, bits, 23), 126)
    m_bits = _i32_op(b, llvm.OrOp, _i32_op(b, llvm.AndOp, bits, 0x007FFFFF), 0x3F000000)
    m = _bitcast(b, m_bits, f32)
    e = b.add(llvm.SIToFPOp(e_int, f32))
    e = fsub(b, e, select(b, tiny, const(b, 23.0, x), const(b, 0.0, x)))
    # m < sqrt(1/2): use 2m - 1 and e - 1, so the polynomial argument stays in [-0.29, 0.41]
    low = fcmp(b, "olt", m, const(b, 0.707106781186547524, x))
    one = const(b, 1.0, x)
    mm = fsub(b, select(b, low, fadd(b, m, m), m), one)
    e = fsub(b, e, select(b, low, one, const(b, 0.0, x)))
    z = fmul(b, mm, mm)
    y = fmul(b, fmul(b, polynomial(b, mm, _LOG_P), mm), z)
    y = fma(b, e, const(b, _LN2_LO, x), y)
    y = fma(b, z, const(b, -0.5, x), y)
    y = fadd(b, mm, y)
    y = fma(b, e, const(b, _LN2_HI, x), y)
    # special cases: x == 0 -> -inf, x < 0 or NaN -> NaN, x == inf -> inf
    y = select(b, fcmp(b, "oeq", x, const(b, math.inf, x)), const(b, math.inf, x), y)
    y = select(b, fcmp(b, "oeq", x, const(b, 0.0, x)), const(b, -math.inf, x), y)
    return select(b, fcmp(b, "oge", x, const(b, 0.0, x)), y, const(b, math.nan, x))


# --------------------------------------------------------------------------- tanh, sigmoid, erf

#: Cephes tanhf: tanh(x) = x + x z P(z), z = x^2, for |x| < 0.625
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)


def emit_tanh(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    if x.type == f64:
        return libm(b, "tanh", x)
    _require_f32("tanh", x)
    z = fmul(b, x, x)
    small = fma(b, fmul(b, x, z), polynomial(b, z, _TANH_P), x)
    a = fabs(b, x)
    e = emit_exp(b, fadd(b, a, a))
    one = const(b, 1.0, x)
    large = copysign(b, fsub(b, one, fdiv(b, const(b, 2.0, x), fadd(b, e, one))), x)
    return select(b, fcmp(b, "olt", a, const(b, 0.625, x)), small, large)


def _logistic(b: FunctionBuilder, t: SSAValue) -> SSAValue:
    """``1 / (1 + exp(-t))`` as ``(t >= 0 ? 1 : e) / (1 + e)`` with ``e = exp(-|t|)``:
    exp never overflows, so the left tail keeps its relative accuracy."""
    e = emit_exp(b, b.add(llvm.FNegOp(fabs(b, t))))
    one = const(b, 1.0, t)
    num = select(b, fcmp(b, "oge", t, const(b, 0.0, t)), one, e)
    return fdiv(b, num, fadd(b, one, e))


def emit_sigmoid(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    if x.type != f64:
        _require_f32("sigmoid", x)
    return _logistic(b, x)


def emit_silu(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    if x.type != f64:
        _require_f32("silu", x)
    return fmul(b, x, _logistic(b, x))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def emit_gelu_tanh(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """``0.5 x (1 + tanh(u))``, u = sqrt(2/pi) (x + 0.044715 x^3), as ``x sigmoid(2u)``
    (the same function, without the cancellation of ``1 + tanh(u)`` for negative x)."""
    if x.type != f64:
        _require_f32("gelu_tanh", x)
    inner = fma(b, fmul(b, x, x), const(b, 0.044715, x), const(b, 1.0, x))
    two_u = fmul(b, fmul(b, x, const(b, 2.0 * _SQRT_2_OVER_PI, x)), inner)
    return fmul(b, x, _logistic(b, two_u))


#: erfc(a) = t exp(-a^2 + P(t)), t = 1 / (1 + a/2), a >= 0 (Numerical Recipes erfcc, |rel err| < 1.2e-7)
_ERFC_P = (
    0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
    -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223,
)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
#: erf(x) = x Q(x^2) for |x| < 0.5: the Taylor series to x^13 (next term < 1e-9 relative)
_ERF_Q = tuple(
    _TWO_OVER_SQRT_PI * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(6, -1, -1)
)
_ERF_SMALL = 0.5


def _erfc_nonneg(b: FunctionBuilder, a: SSAValue, neg_a_squared: Callable[[SSAValue], SSAValue] | None = None) -> SSAValue:
    """``erfc(a)`` for ``a >= 0`` with small relative error (also in the tail).

    ``neg_a_squared(p)`` returns ``p - a^2`` with one rounding (an fma); the default uses
    ``a`` itself, `emit_gelu` passes the exact ``x`` to avoid the rounding of ``x / sqrt 2``.
    """
    one = const(b, 1.0, a)
    t = fdiv(b, one, fma(b, a, const(b, 0.5, a), one))
    p = polynomial(b, t, _ERFC_P)
    arg = neg_a_squared(p) if neg_a_squared else fma(b, b.add(llvm.FNegOp(a)), a, p, exact=True)
    return fmul(b, t, emit_exp(b, arg))


def emit_erf(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    if x.type == f64:
        return libm(b, "erf", x)
    _require_f32("erf", x)
    a = fabs(b, x)
    small = fmul(b, x, polynomial(b, fmul(b, x, x), _ERF_Q))
    large = copysign(b, fsub(b, const(b, 1.0, x), _erfc_nonneg(b, a)), x)
    return select(b, fcmp(b, "olt", a, const(b, _ERF_SMALL, x)), small, large)


def emit_gelu(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """``0.5 x (1 + erf(x / sqrt 2))``; for x < 0, ``1 + erf`` is computed as ``erfc(|z|)``
    (float64: ``0.5 x erfc(-x / sqrt 2)`` by libm)."""
    if x.type == f64:
        return fmul(b, fmul(b, x, const(b, 0.5, x)), libm(b, "erfc", fmul(b, x, const(b, -1.0 / math.sqrt(2.0), x))))
    _require_f32("gelu", x)
    z = fmul(b, x, const(b, 1.0 / math.sqrt(2.0), x))
    a = fabs(b, z)
    one = const(b, 1.0, x)
    small = fma(b, z, polynomial(b, fmul(b, z, z), _ERF_Q), one)  # 1 + erf(z), |z| < 0.5
    minus_half_x = fmul(b, x, const(b, -0.5, x))
    c = _erfc_nonneg(b, a, lambda p: fma(b, minus_half_x, x, p, exact=True))  # p - x^2 / 2, one rounding
    large = select(b, fcmp(b, "olt", x, const(b, 0.0, x)), c, fsub(b, const(b, 2.0, x), c))
    factor = select(b, fcmp(b, "olt", a, const(b, _ERF_SMALL, x)), small, large)
    return fmul(b, fmul(b, x, const(b, 0.5, x)), factor)


# --------------------------------------------------------------------------- unary table


def emit_relu(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """``x < 0 ? 0 : x`` (NaN propagates, like torch.relu)."""
    zero = const(b, 0.0, x)
    return select(b, fcmp(b, "olt", x, zero), zero, x)


def emit_sqrt(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    return b.add(llvm.FSqrtOp(x))  # llvm.sqrt: one vsqrtps per vector


def emit_rsqrt(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    return fdiv(b, const(b, 1.0, x), emit_sqrt(b, x))


#: function name -> emitter ``(b, x) -> y``; keys are those of `functions.UNARY_FUNCTIONS`.
UNARY: dict[str, Callable[[FunctionBuilder, SSAValue], SSAValue]] = {
    "none": lambda b, x: x,
    "relu": emit_relu,
    "gelu": emit_gelu,
    "gelu_tanh": emit_gelu_tanh,
    "silu": emit_silu,
    "sigmoid": emit_sigmoid,
    "tanh": emit_tanh,
    "exp": emit_exp,
    "log": emit_log,
    "neg": lambda b, x: b.add(llvm.FNegOp(x)),
    "sqrt": emit_sqrt,
    "rsqrt": emit_rsqrt,
    "erf": emit_erf,
    "cos": lambda b, x: b.add(llvm.FCosOp(x)),  # libm: does not vectorise
    "sin": lambda b, x: b.add(llvm.FSinOp(x)),  # libm: does not vectorise
    "abs": fabs,
}


def _iabs(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    zero = b.constant(0, x.type)
    return select(b, b.add(llvm.ICmpOp(x, zero, IntegerAttr(llvm.ICmpPredicateFlag.SLT.to_int(), i64))), b.add(llvm.SubOp(zero, x)), x)


#: the functions of integer elements (torch's: relu is max(x, 0), neg and abs wrap at the minimum)
INT_UNARY: dict[str, Callable[[FunctionBuilder, SSAValue], SSAValue]] = {
    "none": lambda b, x: x,
    "relu": lambda b, x: _imax(b, x, b.constant(0, x.type), "sgt"),
    "neg": lambda b, x: b.add(llvm.SubOp(b.constant(0, x.type), x)),
    "abs": _iabs,
}
assert tuple(INT_UNARY) == INTEGER_UNARY, "functions.INTEGER_UNARY names the integer functions"


def emit_unary(b: FunctionBuilder, fn: str, x: SSAValue) -> SSAValue:
    """``fn(x)`` for a key of `functions.UNARY_FUNCTIONS` (x a float, or an integer for
    `INT_UNARY`'s functions)."""
    try:
        emitter = (INT_UNARY if isinstance(x.type, IntegerType) else UNARY)[fn]
    except KeyError:
        raise ScalarCodegenError(f"no codegen for the elementwise function '{fn}'") from None
    return emitter(b, x)


# --------------------------------------------------------------------------- binary table


def constant_value(v: SSAValue) -> float | int | None:
    """The value of ``v`` when it is an ``llvm.mlir.constant``, else None."""
    owner = v.owner
    if isinstance(owner, llvm.ConstantOp) and isinstance(owner.value, FloatAttr | IntegerAttr):
        return owner.value.value.data
    return None


def emit_pow(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    """``x ** y``: multiplications for a constant exponent in {-1, 0, 1, 2, 3, 4}, else libm ``powf``."""
    c = constant_value(y)
    if c is not None and float(c).is_integer() and -1 <= c <= 4:
        n = int(c)
        if n == 0:
            return const(b, 1.0, x)
        if n == -1:
            return fdiv(b, const(b, 1.0, x), x)
        acc = x
        for _ in range(n - 1):
            acc = fmul(b, acc, x)
        return acc
    return b.add(llvm.FPowOp(x, y))


def _imax(b: FunctionBuilder, x: SSAValue, y: SSAValue, predicate: str) -> SSAValue:
    gt = b.add(llvm.ICmpOp(x, y, IntegerAttr(llvm.ICmpPredicateFlag(predicate).to_int(), i64)))
    return select(b, gt, x, y)


_FLOAT_BINARY: dict[str, Callable[[FunctionBuilder, SSAValue, SSAValue], SSAValue]] = {
    "add": fadd,
    "sub": fsub,
    "mul": fmul,
    "div": fdiv,
    "pow": emit_pow,
    "max": fmax,
    "min": fmin,
}

def _icmp(b: FunctionBuilder, predicate: str, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.ICmpOp(x, y, IntegerAttr(llvm.ICmpPredicateFlag(predicate).to_int(), i64)))


def _ipow(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    """``x ** y`` on integers as torch's ``powi``: square-and-multiply over every bit of ``y``,
    wrapping as the element type does (so ``x ** y`` is exact modulo 2^bits); a negative ``y``
    gives 1 for ``x = 1``, +-1 for ``x = -1`` by parity, and 0 otherwise. A constant ``y`` in
    [0, 4] is that many multiplications."""
    c = constant_value(y)
    if c is not None and 0 <= c <= 4:
        acc = b.constant(1, x.type)
        for _ in range(int(c)):
            acc = b.add(llvm.MulOp(acc, x))
        return acc
    one, zero = b.constant(1, x.type), b.constant(0, x.type)
    acc, base, e = one, x, y
    for _ in range(x.type.width.data):  # type: ignore[attr-defined]
        bit = _icmp(b, "ne", b.add(llvm.AndOp(e, one)), zero)
        acc = select(b, bit, b.add(llvm.MulOp(acc, base)), acc)
        base, e = b.add(llvm.MulOp(base, base)), b.add(llvm.LShrOp(e, one))
    odd = _icmp(b, "ne", b.add(llvm.AndOp(y, one)), zero)
    minus_one = b.constant(-1, x.type)
    negative = select(b, _icmp(b, "eq", x, one), one,
                      select(b, _icmp(b, "eq", x, minus_one), select(b, odd, minus_one, one), zero))
    return select(b, _icmp(b, "slt", y, zero), negative, acc)


_INT_BINARY: dict[str, Callable[[FunctionBuilder, SSAValue, SSAValue], SSAValue]] = {
    "pow": _ipow,
    "add": lambda b, x, y: b.add(llvm.AddOp(x, y)),
    "sub": lambda b, x, y: b.add(llvm.SubOp(x, y)),
    "mul": lambda b, x, y: b.add(llvm.MulOp(x, y)),
    "max": lambda b, x, y: _imax(b, x, y, "sgt"),
    "min": lambda b, x, y: _imax(b, x, y, "slt"),
}

#: function name -> emitter, for float operands (keys of `functions.BINARY_FUNCTIONS`).
BINARY = _FLOAT_BINARY


#: bool (``i1``) operands, as torch computes them: ``*`` and ``min`` are and, ``+`` and ``max`` or
_BOOL_BINARY: dict[str, Callable[[FunctionBuilder, SSAValue, SSAValue], SSAValue]] = {
    "mul": lambda b, x, y: b.add(llvm.AndOp(x, y)),
    "min": lambda b, x, y: b.add(llvm.AndOp(x, y)),
    "add": lambda b, x, y: b.add(llvm.OrOp(x, y)),
    "max": lambda b, x, y: b.add(llvm.OrOp(x, y)),
}


def emit_binary(b: FunctionBuilder, fn: str, x: SSAValue, y: SSAValue) -> SSAValue:
    """``fn(x, y)`` for a key of `functions.BINARY_FUNCTIONS`; integers support add/sub/mul/pow/max/min,
    bools mul/min (and) and add/max (or)."""
    table = _BOOL_BINARY if x.type == i1 else _INT_BINARY if isinstance(x.type, IntegerType) else _FLOAT_BINARY
    try:
        emitter = table[fn]
    except KeyError:
        raise ScalarCodegenError(f"no codegen for the binary function '{fn}' on {x.type}") from None
    return emitter(b, x, y)


# --------------------------------------------------------------------------- conversions


def emit_convert(b: FunctionBuilder, x: SSAValue, to: Attribute) -> SSAValue:
    """Converts a scalar to the type ``to`` (any element type of `tensor_graphs.dtypes`), with
    torch's semantics: float -> int truncates toward zero (as eager on x86: `_float_to_int`), anything -> i1
    is ``!= 0`` (NaN -> true), i1 -> number is 0/1; float16 and bfloat16 convert through float32
    (as c10's Half and BFloat16 do), bfloat16 by integer arithmetic (`_to_bf16`, `_from_bf16`:
    no target needs AVX512-BF16 or a library call for it)."""
    src = x.type
    if src == to:
        return x
    if isinstance(src, BFloat16Type):
        return emit_convert(b, _from_bf16(b, x), to)
    if isinstance(to, BFloat16Type):
        return _to_bf16(b, emit_convert(b, x, f32))
    if isinstance(src, Float16Type) and to != f32:
        return emit_convert(b, b.add(llvm.FPExtOp(x, f32)), to)
    if isinstance(to, Float16Type) and src != f32:
        return b.add(llvm.FPTruncOp(emit_convert(b, x, f32), to))
    src_int, dst_int = isinstance(src, IntegerType), isinstance(to, IntegerType)
    if dst_int and to == i1:
        if src_int:
            return b.add(llvm.ICmpOp(x, b.constant(0, src), IntegerAttr(llvm.ICmpPredicateFlag.NE.to_int(), i64)))
        return fcmp(b, "une", x, const(b, 0.0, x))
    if src == i1:
        if dst_int:
            return b.add(llvm.ZExtOp(x, to))
        return select(b, x, const(b, 1.0, to), const(b, 0.0, to))
    unsigned = src_int and src.signedness.data == Signedness.UNSIGNED  # type: ignore[attr-defined]  (uint8)
    if src_int and dst_int:
        if src.width.data > to.width.data:  # type: ignore[attr-defined]
            return b.add(llvm.TruncOp(x, to))
        return b.add(llvm.ZExtOp(x, to) if unsigned else llvm.SExtOp(x, to))
    if src_int:
        return b.add(llvm.SIToFPOp(b.add(llvm.ZExtOp(x, i64)) if unsigned else x, to))
    if dst_int:
        return _float_to_int(b, x, to)
    if _bits(src) < _bits(to):
        return b.add(llvm.FPExtOp(x, to))
    return b.add(llvm.FPTruncOp(x, to))


def _float_to_int(b: FunctionBuilder, x: SSAValue, to: Attribute) -> SSAValue:
    """Float ``x`` truncated toward zero to the integer type ``to`` as eager torch gets it on x86
    (``static_cast`` compiled to ``cvttss2si``): to 32 or 64 bits, a value out of range or NaN
    gives the minimum ("integer indefinite"); narrower types take the low bits of the 32-bit
    result (65504.0 to uint8 is 224)."""
    width = max(to.width.data, 32)  # type: ignore[attr-defined]
    wide = IntegerType(width)
    bound = float(2 ** (width - 1))
    inside = b.add(llvm.AndOp(fcmp(b, "oge", x, const(b, -bound, x)), fcmp(b, "olt", x, const(b, bound, x))))
    value = b.add(llvm.CallIntrinsicOp(f"llvm.fptosi.sat.i{width}.{_float_name(x.type)}", [x], [wide]))
    value = select(b, inside, value, b.constant(-(2 ** (width - 1)), wide))
    return value if width == to.width.data else b.add(llvm.TruncOp(value, to))  # type: ignore[attr-defined]


def _to_bf16(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """float32 ``x`` rounded to the nearest bfloat16, ties to even, a NaN made the quiet NaN
    0x7FC0 (c10's ``round_to_nearest_even``): ``(bits + 0x7FFF + bit16) >> 16``."""
    bits = _bitcast(b, x, i32)
    lsb = _i32_op(b, llvm.AndOp, _i32_op(b, llvm.LShrOp, bits, 16), 1)
    rounded = _i32_op(b, llvm.LShrOp, b.add(llvm.AddOp(b.add(llvm.AddOp(bits, b.i32(0x7FFF))), lsb)), 16)
    half = b.add(llvm.TruncOp(rounded, i16))
    word = select(b, fcmp(b, "uno", x, x), b.constant(0x7FC0, i16), half)
    return _bitcast(b, word, BFloat16Type())


def _from_bf16(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """bfloat16 ``x`` as the float32 of the same value (its bits in the high half)."""
    word = b.add(llvm.ZExtOp(_bitcast(b, x, i16), i32))
    return _bitcast(b, _i32_op(b, llvm.ShlOp, word, 16), f32)


def _float_name(t: Attribute) -> str:
    return str(t)  # "f32", "f64", "f16"


def _bits(t: Attribute) -> int:
    return t.bitwidth  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- fused bodies

ArithEmitter = Callable[[FunctionBuilder, Operation, list[SSAValue]], SSAValue]

_CMPF = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true"]
_CMPI = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]


def _arith_constant(b: FunctionBuilder, op: Operation, _: list[SSAValue]) -> SSAValue:
    assert isinstance(op, arith.ConstantOp)
    value, t = op.value, op.result.type
    if isinstance(value, DenseIntOrFPElementsAttr):
        values = value.get_values()
        if len(set(values)) != 1:
            raise ScalarCodegenError(f"arith.constant in a fused body must be a scalar, got {value}")
        raw = values[0]
    elif isinstance(value, FloatAttr | IntegerAttr):
        raw = value.value.data
    else:
        raise ScalarCodegenError(f"unsupported arith.constant value {value}")
    if t == i1:
        raw = int(raw) & 1
    return b.constant(raw, t)


def _cmpf(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    pred = _CMPF[op.predicate.value.data]  # type: ignore[attr-defined]
    if pred in ("false", "true"):
        return b.constant(int(pred == "true"), i1)
    return fcmp(b, pred, v[0], v[1])


def _cmpi(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    pred = _CMPI[op.predicate.value.data]  # type: ignore[attr-defined]
    return b.add(llvm.ICmpOp(v[0], v[1], IntegerAttr(llvm.ICmpPredicateFlag(pred).to_int(), i64)))


def _unary(fn: str) -> ArithEmitter:
    return lambda b, op, v: emit_unary(b, fn, v[0])


def _binary(fn: str) -> ArithEmitter:
    return lambda b, op, v: emit_binary(b, fn, v[0], v[1])


def _convert(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    return emit_convert(b, v[0], op.results[0].type)


#: body ops whose result is one of their float operands (or its sign flipped or cleared): bf16
#: values in, a bf16 value out (a NaN among them: that NaN, or the quiet NaN, its low bits zero)
_BF16_CLOSED: dict[type[Operation], slice] = {
    arith.MaximumfOp: slice(0, 2), arith.MinimumfOp: slice(0, 2), arith.MaxnumfOp: slice(0, 2),
    arith.MinnumfOp: slice(0, 2), arith.NegfOp: slice(0, 1), mathd.AbsFOp: slice(0, 1),
    arith.SelectOp: slice(1, 3),
}


def bf16_exact(value: SSAValue) -> bool:
    """Whether a body's float32 ``value`` is always a bf16 value (its low 16 bits zero): a bf16
    widened (``extf``), a constant that is one, or what `_BF16_CLOSED` makes of such values
    (a bf16 model's ReLU: ``max(extf(x), 0)``)."""
    owner = value.owner
    if isinstance(owner, arith.ExtFOp):
        return isinstance(owner.operands[0].type, BFloat16Type)
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, FloatAttr):
        bits = struct.unpack("<I", struct.pack("<f", owner.value.value.data))[0]
        return not bits & 0xFFFF
    operands = _BF16_CLOSED.get(type(owner))
    return operands is not None and all(bf16_exact(v) for v in owner.operands[operands])


def _truncf(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    """``arith.truncf``: to bf16 by rounding (`emit_convert`), or by taking the high half of a
    value that is a bf16 already (`bf16_exact`), which rounding would return unchanged: 2 vector
    instructions where rounding takes 8 (the rounding bias, the NaN test and select). A bf16
    ResNet-50 block's end (its ReLU last) 0.88-0.90x, the model 0.89-0.91x (a Xeon with AMX,
    `benchmarks/residual_epilogue.py --toggle truncation`)."""
    if isinstance(op.results[0].type, BFloat16Type) and v[0].type == f32 and bf16_exact(op.operands[0]):
        return high_half_bf16(b, v[0])
    return _convert(b, op, v)


def high_half_bf16(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """float32 ``x`` that is a bf16 value (its low 16 bits zero) as that bf16: its high half."""
    return _bitcast(b, b.add(llvm.TruncOp(_i32_op(b, llvm.LShrOp, _bitcast(b, x, i32), 16), i16)), BFloat16Type())


def _uitofp(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    if v[0].type != i1:
        raise ScalarCodegenError(f"arith.uitofp is supported from i1 only, got {v[0].type}")
    return emit_convert(b, v[0], op.results[0].type)


def _extui(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    return b.add(llvm.ZExtOp(v[0], op.results[0].type))


def _int_binop(cls: type[Operation]) -> ArithEmitter:
    return lambda b, op, v: b.add(cls(v[0], v[1]))


def _log_base(base: float) -> ArithEmitter:
    return lambda b, op, v: fmul(b, emit_log(b, v[0]), const(b, 1.0 / math.log(base), v[0]))


def _floordivsi(b: FunctionBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    """``floor(x / y)`` on signed integers: ``sdiv``, minus one where the remainder is nonzero and
    its sign differs from ``y``'s. ``y = 0`` and ``MIN / -1`` would trap in ``sdiv``: those divide
    by 1 instead (``floor_divide`` lowers only constant nonzero divisors; MIN / -1 wraps to MIN)."""
    x, y = v
    t = x.type
    one, zero = b.constant(1, t), b.constant(0, t)
    pred = lambda p: IntegerAttr(llvm.ICmpPredicateFlag(p).to_int(), i64)  # noqa: E731
    width = t.width.data  # type: ignore[attr-defined]
    overflow = b.add(llvm.AndOp(b.add(llvm.ICmpOp(y, b.constant(-1, t), pred("eq"))), b.add(llvm.ICmpOp(x, b.constant(-(1 << (width - 1)), t), pred("eq")))))
    bad = b.add(llvm.OrOp(b.add(llvm.ICmpOp(y, zero, pred("eq"))), overflow))
    d = select(b, bad, one, y)
    q, r = b.add(llvm.SDivOp(x, d)), b.add(llvm.SRemOp(x, d))
    differ = b.add(llvm.XOrOp(b.add(llvm.ICmpOp(r, zero, pred("slt"))), b.add(llvm.ICmpOp(d, zero, pred("slt")))))
    adjust = b.add(llvm.AndOp(b.add(llvm.ICmpOp(r, zero, pred("ne"))), differ))
    return select(b, adjust, b.add(llvm.SubOp(q, one)), q)


#: body op class -> emitter ``(b, op, operands) -> result``.
ARITH: dict[type[Operation], ArithEmitter] = {
    arith.ConstantOp: _arith_constant,
    arith.AddfOp: _binary("add"),
    arith.SubfOp: _binary("sub"),
    arith.MulfOp: _binary("mul"),
    arith.DivfOp: _binary("div"),
    arith.MaximumfOp: _binary("max"),
    arith.MinimumfOp: _binary("min"),
    arith.MaxnumfOp: lambda b, op, v: intrinsic(b, "maxnum", v[0], v[1]),
    arith.MinnumfOp: lambda b, op, v: intrinsic(b, "minnum", v[0], v[1]),
    arith.NegfOp: _unary("neg"),
    arith.CmpfOp: _cmpf,
    arith.CmpiOp: _cmpi,
    arith.SelectOp: lambda b, op, v: select(b, v[0], v[1], v[2]),
    arith.SIToFPOp: _convert,
    arith.UIToFPOp: _uitofp,
    arith.FPToSIOp: _convert,
    arith.ExtFOp: _convert,
    arith.TruncFOp: _truncf,
    arith.ExtSIOp: _convert,
    arith.ExtUIOp: _extui,
    arith.TruncIOp: _convert,
    arith.AddiOp: _binary("add"),
    arith.SubiOp: _binary("sub"),
    arith.MuliOp: _binary("mul"),
    arith.MaxSIOp: _binary("max"),
    arith.MinSIOp: _binary("min"),
    arith.FloorDivSIOp: _floordivsi,
    arith.AndIOp: _int_binop(llvm.AndOp),
    arith.OrIOp: _int_binop(llvm.OrOp),
    arith.XOrIOp: _int_binop(llvm.XOrOp),
    arith.ShLIOp: _int_binop(llvm.ShlOp),
    arith.ShRSIOp: _int_binop(llvm.AShrOp),
    mathd.ExpOp: _unary("exp"),
    mathd.LogOp: _unary("log"),
    mathd.Log2Op: _log_base(2.0),
    mathd.Log10Op: _log_base(10.0),
    mathd.TanhOp: _unary("tanh"),
    mathd.ErfOp: _unary("erf"),
    mathd.SqrtOp: _unary("sqrt"),
    mathd.RsqrtOp: _unary("rsqrt"),
    mathd.AbsFOp: _unary("abs"),
    mathd.SinOp: _unary("sin"),
    mathd.CosOp: _unary("cos"),
    mathd.PowFOp: _binary("pow"),
    mathd.FmaOp: lambda b, op, v: fma(b, v[0], v[1], v[2], exact=True),
    mathd.FloorOp: lambda b, op, v: b.add(llvm.FFloorOp(v[0])),
    mathd.CeilOp: lambda b, op, v: b.add(llvm.FCeilOp(v[0])),
    mathd.CopySignOp: lambda b, op, v: copysign(b, v[0], v[1]),
}


def emit_arith_body(b: FunctionBuilder, body: Block, args: Sequence[SSAValue]) -> SSAValue:
    """Emit the scalar body of a `fused_elementwise` (block argument i = ``args[i]``) and
    return the value its terminator (``buf.yield``/``tg.yield``) yields."""
    if len(body.args) != len(args):
        raise ScalarCodegenError(f"the body takes {len(body.args)} arguments, {len(args)} given")
    values: dict[SSAValue, SSAValue] = dict(zip(body.args, args))
    term = body.last_op
    for op in body.ops:
        if op is term:
            break
        emitter = ARITH.get(type(op))
        if emitter is None:
            raise ScalarCodegenError(f"no codegen for {op.name} in a fused elementwise body")
        try:
            operands = [values[v] for v in op.operands]
        except KeyError:
            raise ScalarCodegenError(f"{op.name} in a fused body uses a value defined outside it") from None
        values[op.results[0]] = emitter(b, op, operands)
    if term is None or len(term.operands) != 1:
        raise ScalarCodegenError("a fused body must end with a terminator yielding one value")
    return values[term.operands[0]]


# the rest of Core ATen's elementwise functions (inverse and hyperbolic trigonometry, expm1,
# log1p, rounding, ...) live in their own file and join the table here
from tensor_graphs.codegen.llvm.scalar_math import MATH_ARITH  # noqa: E402

ARITH.update(MATH_ARITH)
