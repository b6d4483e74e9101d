"""The elementwise functions of Core ATen lowered as scalar bodies (`lowering/aten_to_tensor/
math_functions.py`, emitters in `codegen/llvm/scalar_math.py`): each against a float64
reference, on values across its domain plus the edges (0, -0, ±1, ±inf, NaN, tiny and huge).

Tolerance: the error against float64 (relative to max(1, |reference|)) at most twice eager's
float32 error plus 2.5e-7 (about two float32 ulps: the polynomial exp/log under expm1, log1p and
the inverse hyperbolics add one or two); NaN exactly where eager has NaN; bool results exact.
"""

from __future__ import annotations

import math

import pytest
import torch

import tensor_graphs as tg

EDGES = [0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e20, -1e20,
         math.inf, -math.inf, math.nan]


def _inputs(lo: float, hi: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.empty(300).uniform_(lo, hi, generator=g), torch.tensor(EDGES)]).float()


#: name -> (function, input range)
FUNCTIONS = {
    "acos": (torch.acos, (-1.0, 1.0)),
    "asin": (torch.asin, (-1.0, 1.0)),
    "atan": (torch.atan, (-20.0, 20.0)),
    "tan": (torch.tan, (-1.5, 1.5)),
    "sinh": (torch.sinh, (-10.0, 10.0)),
    "cosh": (torch.cosh, (-10.0, 10.0)),
    "asinh": (torch.asinh, (-100.0, 100.0)),
    "acosh": (torch.acosh, (1.0, 100.0)),
    "atanh": (torch.atanh, (-1.0, 1.0)),
    "expm1": (torch.expm1, (-20.0, 20.0)),
    "log1p": (torch.log1p, (-1.0, 100.0)),
    "log2": (torch.log2, (0.0, 100.0)),
    "log10": (torch.log10, (0.0, 100.0)),
    "exp2": (torch.exp2, (-20.0, 20.0)),
    "reciprocal": (torch.reciprocal, (-10.0, 10.0)),
    "round": (torch.round, (-10.0, 10.0)),
    "round decimals=2": (lambda x: torch.round(x, decimals=2), (-10.0, 10.0)),
    "round decimals=-1": (lambda x: torch.round(x, decimals=-1), (-100.0, 100.0)),
    "trunc": (torch.trunc, (-10.0, 10.0)),
    "elu": (lambda x: torch.nn.functional.elu(x, alpha=0.7), (-10.0, 10.0)),
    "selu": (torch.nn.functional.selu, (-10.0, 10.0)),
    "leaky_relu": (lambda x: torch.nn.functional.leaky_relu(x, 0.02), (-10.0, 10.0)),
    "atan2": (lambda x: torch.atan2(x, x.roll(7) - 0.3), (-5.0, 5.0)),
    "pow.Scalar": (lambda x: torch.pow(1.7, x), (-10.0, 10.0)),
    "div trunc": (lambda x: torch.div(x, 0.7, rounding_mode="trunc"), (-10.0, 10.0)),
    "div floor": (lambda x: torch.div(x, x.roll(3) + 0.1, rounding_mode="floor"), (-10.0, 10.0)),
    "softplus (decomposed)": (torch.nn.functional.softplus, (-30.0, 30.0)),
    "mish (decomposed)": (torch.nn.functional.mish, (-30.0, 30.0)),
    "logit (decomposed)": (lambda x: torch.logit(x, eps=1e-6), (0.0, 1.0)),
    "erfc": (torch.erfc, (-10.0, 10.0)),
    "lgamma": (torch.lgamma, (-20.0, 40.0)),
    "remainder": (lambda x: torch.remainder(x, x.roll(5) - 0.3), (-10.0, 10.0)),
    "fmod": (lambda x: torch.fmod(x, 0.7), (-1e6, 1e6)),
    "mT (implicit composition)": (lambda x: x[None].mT * 2, (-10.0, 10.0)),
    "digamma": (torch.digamma, (-20.0, 20.0)),
    "polygamma order 0 (composition)": (lambda x: torch.polygamma(0, x), (-20.0, 20.0)),
    "erfinv": (torch.erfinv, (-1.0, 1.0)),
    "i0": (torch.i0, (-30.0, 30.0)),
}

PREDICATES = {
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "isfinite (decomposed)": torch.isfinite,
    "isneginf (decomposed)": torch.isneginf,
}


class Elementwise(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _relative(a: torch.Tensor, ref: torch.Tensor) -> float:
    finite = torch.isfinite(ref)
    same_inf = ~finite & (a.double() == ref)
    err = ((a.double() - ref).abs() / ref.abs().clamp_min(1.0)).where(finite, torch.zeros_like(ref))
    bad_inf = ~finite & ~same_inf & ~ref.isnan()
    return math.inf if bad_inf.any() else err.max().item()


@pytest.mark.parametrize("name", FUNCTIONS)
def test_math_function_against_float64(name):
    fn, (lo, hi) = FUNCTIONS[name]
    x = _inputs(lo, hi)
    model = Elementwise(fn)
    got = tg.compile(model, (x,))(x)
    eager = model(x)
    ref = fn(x.double())
    assert got.dtype == eager.dtype and got.shape == eager.shape
    assert torch.equal(got.isnan(), eager.isnan()), "NaN where eager has none, or none where it has one"
    assert _relative(got, ref) <= 2 * _relative(eager, ref) + 2.5e-7


@pytest.mark.parametrize("name", PREDICATES)
def test_predicates_are_exact(name):
    x = _inputs(-1e30, 1e30)
    model = Elementwise(PREDICATES[name])
    assert torch.equal(tg.compile(model, (x,))(x), model(x))


def _specials(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two [6, 7] tensors with every pair of special values (+-0, +-inf, NaN, 1, -2.5) and randoms."""
    torch.manual_seed(0)
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -2.5])
    x, y = torch.randn(6, 7) * 3, torch.randn(6, 7) * 3
    x[0], y[1] = special, special
    x[2], y[2] = special, special.flip(0)
    return x.to(dtype), y.to(dtype)


class BinaryFunctions(torch.nn.Module):
    def __init__(self, floats: bool = True, nextafter: bool = True):
        super().__init__()
        self.floats, self.nextafter = floats, nextafter

    def forward(self, x, y):
        out = (torch.fmax(x, y), torch.fmin(x, y), torch.copysign(x, y), torch.signbit(x), torch.angle(x))
        out += (torch.hypot(x, y),) if self.floats else ()
        return out + ((torch.nextafter(x, y),) if self.floats and self.nextafter else ())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_binary_functions_as_eager(dtype):
    """fmax/fmin (NaN-ignoring), copysign, signbit (-0.0 and -NaN included), angle of a real
    number, hypot and nextafter (C's libm): exactly eager's results on every pair of special
    values, in each dtype that has them (bfloat16: computed in float32 and rounded; nextafter is
    refused there, below)."""
    x, y = _specials(dtype) if dtype.is_floating_point else ((_specials(torch.float32)[0].nan_to_num() * 2).to(dtype),
                                                             (_specials(torch.float32)[1].nan_to_num() * 2).to(dtype))
    model = BinaryFunctions(dtype.is_floating_point, dtype != torch.bfloat16)
    got, want = tg.compile(model, (x, y))(x, y), model(x, y)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


def test_nextafter_of_bfloat16_is_refused_by_name():
    """The next bfloat16 is one bfloat16 step away, which float32 arithmetic cannot give."""
    x, y = _specials(torch.bfloat16)
    with pytest.raises(Exception, match="nextafter of bf16"):
        tg.compile(BinaryFunctions(), (x, y))


def test_igamma_is_refused_by_name():
    """The regularized incomplete gamma (its continued fraction runs to convergence on data) is
    not composed yet: refused naming it (polygamma of any order compiles now:
    test_decompositions.py)."""
    x = _inputs(0.5, 5.0)
    with pytest.raises(Exception, match="aten::igamma"):
        tg.compile(Elementwise(lambda x: torch.igamma(x, x * 2)), (x,))
