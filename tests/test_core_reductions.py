"""Core ATen's reductions (issue 30): amin, max/min (all elements), mean, prod, any (all
decomposes into it), argmax, argmin (flattened or along a dim, keepdim), max.dim / min.dim
(values and indices), var (correction, unbiased, var_mean; std decomposes into it), vector
norms of every order over
float32 data holding a NaN and ties, and over int64.

Exact where eager is exact (integers, bools, positions, max and min: a NaN's position is the
first NaN's, ties go to the first position); float sums, products and variances within twice
eager's error against float64 plus 2e-7 of the result's magnitude (summation order differs).
"""

from __future__ import annotations

import pytest
import torch

import tensor_graphs as tg


def _floats() -> torch.Tensor:
    x = torch.randn(4, 7, generator=torch.Generator().manual_seed(0))
    x[1, 3] = float("nan")
    x[2, 2] = x[2, 5] = 9.0  # a tie for the max
    x[3, 1] = x[3, 6] = -9.0  # and for the min
    return x


def _ints() -> torch.Tensor:
    return torch.randint(-5, 5, (4, 7), generator=torch.Generator().manual_seed(1))


EXACT = {
    "amin": lambda v: v.amin(1),
    "amin all": lambda v: v.amin(),
    "max all": lambda v: v.max(),
    "min all": lambda v: v.min(),
    "any": lambda v: (v > 1).any(1),
    "any all": lambda v: (v > 1).any(),
    "all": lambda v: (v > -3).all(1),
    "argmax": lambda v: v.argmax(1),
    "argmin dim 0": lambda v: v.argmin(0),
    "argmax all": lambda v: v.argmax(),
    "argmin keepdim": lambda v: v.argmin(1, keepdim=True),
    "max.dim": lambda v: torch.max(v, 1),
    "min.dim keepdim": lambda v: torch.min(v, 0, keepdim=True),
    "aminmax": lambda v: torch.aminmax(v, dim=1),
    "prod of ints": lambda v: v.prod(1) if not v.is_floating_point() else v.round().clamp(-2, 2).prod(1),
}

FLOAT = {
    "mean": lambda v: v.mean(),
    "prod": lambda v: v.prod(1),
    "prod all": lambda v: (v * 0.5).prod(),
    "var": lambda v: v.var(1),
    "var all": lambda v: v.var(),
    "var correction 0 keepdim": lambda v: v.var(1, correction=0, keepdim=True),
    "var of one element": lambda v: v[:, :1].var(1),
    "std": lambda v: v.std(1),
    "var_mean": lambda v: torch.var_mean(v, 1),
    **{f"vector_norm ord={o}": (lambda v, o=o: (torch.linalg.vector_norm(v, ord=o, dim=1, keepdim=True), torch.linalg.vector_norm(v, ord=o)))
       for o in (2, 1, 3, float("inf"), float("-inf"), 0, 0.5)},
}


class Reduce(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, v):
        return self.fn(v)


def _leaves(x):
    return list(x) if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("name", EXACT)
def test_exact_reductions(name, dtype):
    x = _floats() if dtype == "float32" else _ints()
    model = Reduce(EXACT[name])
    got, want = tg.compile(model, (x,))(x), model(x)
    assert type(got) is type(want)
    for g, w in zip(_leaves(got), _leaves(want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g.nan_to_num(0.0), w.nan_to_num(0.0)) and torch.equal(g.isnan(), w.isnan())


@pytest.mark.parametrize("name", FLOAT)
def test_float_reductions_against_float64(name):
    x = _floats()
    x[1, 3] = 0.3  # NaN-free: the comparison is of values
    model = Reduce(FLOAT[name])
    got, want, ref = tg.compile(model, (x,))(x), model(x), FLOAT[name](x.double())
    for g, w, r in zip(_leaves(got), _leaves(want), _leaves(ref)):
        assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g.isnan(), w.isnan())
        scale = r.abs().nan_to_num(0.0).max().clamp_min(1.0)
        err = lambda a: ((a.double() - r).abs().nan_to_num(0.0).max() / scale).item()  # noqa: E731
        assert err(g) <= 2 * err(w) + 2e-7


class Scans(torch.nn.Module):
    def forward(self, x):
        out = (torch.cummax(x, 1), torch.cummin(x, 0), torch.cumprod(x, 1), torch.cumsum(x, 0))
        return out + ((torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0)) if x.is_floating_point() else ())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_scans_as_eager(dtype):
    """cumsum, cumprod, logcumsumexp and cummax/cummin (values and positions: a tie takes the later
    position, each NaN its own, as torch) along either dim: exactly eager's results, NaN, +-inf and
    ties included (float sums, products and logsumexp run in float64 and round once, as torch's CPU
    scans accumulate)."""
    inf, nan = float("inf"), float("nan")
    torch.manual_seed(0)
    x = torch.randn(4, 7)
    x[0] = torch.tensor([1.0, nan, 3, nan, 0.5, 2, 2])
    x[1] = torch.tensor([-inf, -inf, 1, inf, inf, nan, 2])
    x[2, :4] = 1.0
    x = x.to(dtype) if dtype.is_floating_point else (x.nan_to_num(0.0, 3.0, -3.0) * 2).to(dtype)
    model = Scans()
    for g, w in zip(_flat(tg.compile(model, (x,))(x)), _flat(model(x)), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


def _flat(results) -> list[torch.Tensor]:
    return [t for r in results for t in (r if isinstance(r, tuple) else (r,))]
