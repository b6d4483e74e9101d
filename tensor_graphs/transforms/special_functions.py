"""Special functions torch computes and C's libm lacks: their algorithms (torch's, from Cephes), as
one table of coefficients and NumPy references in float64. The LLVM emitters
(`codegen.llvm.special_functions`) compute the same steps, branch-free, in float64.

- ``digamma``: reflection ``digamma(1 - x) - pi / tan(pi * x)`` below 0 (NaN at the poles, the
  negative integers; ``-+inf`` at ``+-0``), the recurrence ``digamma(x) = digamma(x + 1) - 1/x``
  up to 10, then the asymptotic series.
- ``erfinv``: a rational first guess (central and tail forms) and two Newton steps on ``erf``.
- ``i0``: the Chebyshev series of ``exp(-|x|) I0(|x|)`` on [0, 8] and on (8, inf).
"""

from __future__ import annotations

import math

import numpy as np

#: digamma's asymptotic series in ``1 / x^2`` (Cephes' ``A``, highest power first)
DIGAMMA_SERIES: tuple[float, ...] = (
    8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3, -4.16666666666666666667e-3,
    3.96825396825396825397e-3, -8.33333333333333333333e-3, 8.33333333333333333333e-2,
)
#: the recurrence lifts the argument to at least this before the series
DIGAMMA_SHIFT = 10

#: erfinv's first guess: central ``|y| <= 0.7`` numerator/denominator, tail numerator/denominator
ERFINV_A: tuple[float, ...] = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
ERFINV_B: tuple[float, ...] = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
ERFINV_C: tuple[float, ...] = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
ERFINV_D: tuple[float, ...] = (3.543889200, 1.637067800)


def _i0_tables() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Cephes' Chebyshev coefficients for ``i0`` (NumPy ships the same tables)."""
    from numpy.lib import _function_base_impl as impl

    return tuple(float(c) for c in impl._i0A), tuple(float(c) for c in impl._i0B)


I0_SMALL, I0_LARGE = _i0_tables()


def polevl(x: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """``c0 x^n + c1 x^(n-1) + ... + cn`` (Horner)."""
    acc = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        acc = acc * x + c
    return acc


def chbevl(x: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """Cephes' Chebyshev series evaluation."""
    b0, b1, b2 = np.full_like(x, coefficients[0]), np.zeros_like(x), np.zeros_like(x)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


def digamma(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        negative = x < 0
        y = np.where(negative, 1.0 - x, x)
        total = np.zeros_like(y)
        for _ in range(DIGAMMA_SHIFT):
            low = y < DIGAMMA_SHIFT
            total = total - np.where(low, 1.0 / y, 0.0)
            y = np.where(low, y + 1.0, y)
        z = 1.0 / (y * y)
        series = np.where(y < 1e17, z * polevl(z, DIGAMMA_SERIES), 0.0)
        result = total + np.log(y) - 0.5 / y - series
        reflection = math.pi / np.tan(math.pi * (x - np.trunc(x)))
        result = np.where(negative, result - reflection, result)
        result = np.where(negative & (x == np.trunc(x)), np.nan, result)
        return np.where(x == 0, np.copysign(np.inf, -x), result)


def erfinv(y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, np.float64)
    with np.errstate(all="ignore"):
        a = np.abs(y)
        z = y * y
        central = y * polevl(z, ERFINV_A[::-1]) / (polevl(z, ERFINV_B[::-1]) * z + 1.0)
        t = np.sqrt(-np.log((1.0 - a) / 2.0))
        tail = np.copysign(polevl(t, ERFINV_C[::-1]), y) / (polevl(t, ERFINV_D[::-1]) * t + 1.0)
        x = np.where(a <= 0.7, central, tail)
        erf = np.vectorize(math.erf, otypes=[np.float64])
        for _ in range(2):
            x = x - (erf(x) - y) / (2.0 / math.sqrt(math.pi) * np.exp(-x * x))
        x = np.where(a == 1.0, np.copysign(np.inf, y), x)
        return np.where(a > 1.0, np.nan, x)


def i0(x: np.ndarray) -> np.ndarray:
    x = np.abs(np.asarray(x, np.float64))
    with np.errstate(all="ignore"):
        small = np.exp(x) * chbevl(x / 2.0 - 2.0, I0_SMALL)
        large = np.exp(x) * chbevl(32.0 / x - 2.0, I0_LARGE) / np.sqrt(x)
        return np.where(x <= 8.0, small, large)
