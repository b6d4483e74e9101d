"""Triton expressions for the rest of Core ATen's elementwise functions: the `math` body ops of
`lowering.aten_to_tensor.math_functions`, registered into `expressions.ARITH`, their helpers
appended to `expressions.PRELUDE`. Built from ``tl`` primitives only (``tl.exp``, ``tl.log``,
``tl.sqrt``, ``tl.sin``, ...): libdevice functions do not run in Triton's interpreter. The forms
are those of `codegen.llvm.scalar_math` (Kahan's ``expm1``/``log1p``, ``log1p``-based inverse
hyperbolics) and Cephes ``atanf`` for the inverse trigonometry (~1e-7 relative).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.ir import Operation

MATH_PRELUDE = '''
@triton.jit
def _mul(a, b):
    # the combining function of a product (tl.reduce): Triton has no tl.prod
    return a * b


@triton.jit
def _expm1(x):
    u = tl.exp(x)
    um1 = u - 1.0
    y = um1 * x / tl.log(u)
    y = tl.where(um1 == -1.0, -1.0, y)
    y = tl.where(u == float('inf'), u, y)
    return tl.where(u == 1.0, x, y)


@triton.jit
def _log1p(x):
    u = x + 1.0
    y = tl.log(u) * (x / (u - 1.0))
    y = tl.where(u == float('inf'), u, y)
    y = tl.where(u == 0.0, float('-inf'), y)
    return tl.where(u == 1.0, x, y)


@triton.jit
def _atan(x):
    # Cephes atanf: |x| reduced below tan(pi/8), then an odd polynomial
    a = tl.abs(x)
    big = a > 2.414213562373095
    mid = a > 0.41421356237309503
    t = tl.where(big, -1.0 / a, tl.where(mid, (a - 1.0) / (a + 1.0), a))
    base = tl.where(big, 1.5707963267948966, tl.where(mid, 0.7853981633974483, 0.0))
    z = t * t
    y = base + (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
    return tl.where(x < 0, -y, y)


@triton.jit
def _atan2(y, x):
    a = _atan(y / x)
    pi = 3.141592653589793
    r = tl.where(x > 0, a, tl.where(x < 0, tl.where(y < 0, a - pi, a + pi),
                                     tl.where(y > 0, 0.5 * pi, tl.where(y < 0, -0.5 * pi, 0.0 * y))))
    return tl.where((x != x) | (y != y), x + y, r)


@triton.jit
def _asin(x):
    return tl.where(tl.abs(x) > 1.0, float('nan'), _atan2(x, tl.sqrt(1.0 - x * x)))


@triton.jit
def _acos(x):
    return tl.where(tl.abs(x) > 1.0, float('nan'), _atan2(tl.sqrt(1.0 - x * x), x))


@triton.jit
def _tan(x):
    return tl.sin(x) / tl.cos(x)


@triton.jit
def _sinh(x):
    e = _expm1(tl.abs(x))
    s = tl.where(e == float('inf'), e, 0.5 * (e + e / (e + 1.0)))
    return tl.where(x < 0, -s, s)


@triton.jit
def _cosh(x):
    e = tl.exp(tl.abs(x))
    return 0.5 * (e + 1.0 / e)


@triton.jit
def _asinh(x):
    a = tl.abs(x)
    a2 = a * a
    r = tl.where(a > 268435456.0, tl.log(a) + 0.6931471805599453, _log1p(a + a2 / (1.0 + tl.sqrt(1.0 + a2))))
    return tl.where(x < 0, -r, r)


@triton.jit
def _acosh(x):
    t = x - 1.0
    y = tl.where(x > 268435456.0, tl.log(x) + 0.6931471805599453, _log1p(t + tl.sqrt(t * t + 2.0 * t)))
    return tl.where(x < 1.0, float('nan'), y)


@triton.jit
def _atanh(x):
    a = tl.abs(x)
    r = 0.5 * _log1p((a + a) / (1.0 - a))
    return tl.where(x < 0, -r, r)


@triton.jit
def _trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def _round_even(x):
    f = tl.floor(x)
    d = x - f
    even = tl.floor(f * 0.5) * 2.0 == f
    return tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(even, f, f + 1.0)))


@triton.jit
def _round_away(x):
    r = tl.floor(tl.abs(x) + 0.5)
    return tl.where(x < 0, -r, r)
'''


def _helper(name: str) -> Callable[[Operation, Sequence[str]], str]:
    return lambda op, v: f"{name}({', '.join(v)})"


#: body op class -> expression, added to `expressions.ARITH`
MATH_ARITH: dict[type[Operation], Callable[[Operation, Sequence[str]], str]] = {
    mathd.ExpM1Op: _helper("_expm1"),
    mathd.Log1pOp: _helper("_log1p"),
    mathd.AtanOp: _helper("_atan"),
    mathd.Atan2Op: _helper("_atan2"),
    mathd.AsinOp: _helper("_asin"),
    mathd.AcosOp: _helper("_acos"),
    mathd.TanOp: _helper("_tan"),
    mathd.SinhOp: _helper("_sinh"),
    mathd.CoshOp: _helper("_cosh"),
    mathd.AsinhOp: _helper("_asinh"),
    mathd.AcoshOp: _helper("_acosh"),
    mathd.AtanhOp: _helper("_atanh"),
    mathd.TruncOp: _helper("_trunc"),
    mathd.RoundEvenOp: _helper("_round_even"),
    mathd.RoundOp: _helper("_round_away"),
    mathd.Exp2Op: lambda op, v: f"tl.exp2({v[0]})",
    arith.DivSIOp: lambda op, v: f"({v[0]} // {v[1]})",  # Triton divides integers toward zero, as C
}
