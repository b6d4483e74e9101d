"""The op registry (`frontend/decompositions.py`): which ATen ops are lowered, decomposed by
PyTorch's tables or unsupported, what ``tg-opt --list-ops`` prints, and that decomposed ops reach
the fusion passes and the right kernels.

Tolerance: float32 results against eager within 1e-6 absolute (0 observed: the decomposition is
eager's own arithmetic, fused back into the same kernels); float64 within 1e-12.
"""

from __future__ import annotations

import math

import pytest
import torch

import tensor_graphs as tg
from tensor_graphs.frontend.compositions import compositions
from tensor_graphs.frontend.decompositions import format_routes, needs_decomposing, route
from tensor_graphs.tools.tg_opt import _main as tg_opt

aten = torch.ops.aten


def test_each_op_has_one_route():
    assert route(aten.linear.default) == "lowered"
    assert route(aten.rms_norm.default) == "decomposed"
    assert route(aten._softmax.default) == "lowered (float32)"
    assert route(aten.nonzero.default) == "unsupported"
    assert route(aten.addmv.default) == "decomposed"  # torch._decomp, outside the Core set
    assert route(aten.mT.default) == "decomposed"  # PyTorch's own composition (CompositeImplicitAutograd)


def test_list_ops_prints_the_registry(capsys):
    assert tg_opt(["--list-ops"]) == 0
    out = capsys.readouterr().out
    assert out == format_routes() + "\n"
    rows = dict(line.split(None, 1) for line in out.splitlines() if line.startswith("aten::"))
    assert rows["aten::linear"] == "lowered" and rows["aten::rms_norm"] == "decomposed"
    assert rows["aten::nonzero"] == "unsupported" and rows["aten::_softmax"] == "lowered (float32)"


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.RMSNorm(16)
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.softmax(self.fc(self.norm(x)), -1).mT + torch.addmv(x[0], x.mT, x[:, 0])


def test_decomposed_ops_reach_the_fused_kernels():
    """``torch.nn.RMSNorm`` arrives decomposed (pow, mean, rsqrt, mul) and `fuse-rms-norm` makes it
    one ``tg.rms_norm``; float32 softmax stays whole (``tg.softmax``); ``mT`` and ``addmv`` compile."""
    torch.manual_seed(0)
    model, x = _Block().eval(), torch.randn(16, 16)
    fn = tg.compile(model, (x,), keep_ir=True)
    ir = fn.ir("tg")
    assert "tg.rms_norm" in ir and "tg.softmax" in ir
    with torch.no_grad():
        assert (fn(x) - model(x)).abs().max().item() <= 1e-6


def test_float32_kernels_decompose_for_float64():
    """softmax's kernel is float32 code: a float64 softmax decomposes (exp, sum, div) and keeps
    float64's precision."""
    x = torch.randn(8, 32, dtype=torch.float64)
    model = torch.nn.Softmax(-1)
    fn = tg.compile(model, (x,), keep_ir=True)
    assert "tg.softmax" not in fn.ir("tg")
    assert (fn(x) - model(x)).abs().max().item() <= 1e-12


def test_softmax_with_a_dtype_converts_first():
    """``softmax(x, dtype=...)`` converts ``x`` first (its decomposition), also to float64 (then
    decomposed) and to float16 (the result rounded from float16 inputs, as eager)."""
    x = torch.randn(3, 5) * 4
    model = Elementwise(lambda x: (torch.softmax(x, -1, dtype=torch.float64), torch.log_softmax(x, 0, dtype=torch.float64),
                                   torch.softmax(x, -1, dtype=torch.float16)))
    got, want = tg.compile(model, (x,))(x), model(x)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert max((g.double() - w.double()).abs().max().item() for g, w in zip(got[:2], want[:2])) <= 1e-15
    assert torch.equal(got[2], want[2])


class Elementwise(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def test_every_composition_is_routed_as_decomposed():
    assert all(route(op) == "decomposed" for op in compositions())


def _nan_rows() -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    x[1, 2], x[3, :3] = math.nan, 1.0  # a NaN, and ties
    return x


COMPOSED = {
    "searchsorted": lambda x: torch.searchsorted(torch.linspace(-2, 2, 7), x),
    "searchsorted right int32": lambda x: torch.searchsorted(torch.linspace(-2, 2, 7), x, right=True, out_int32=True),
    "searchsorted rows, sorter": lambda x: torch.searchsorted(x.nan_to_num(), x[:, :2], sorter=x.nan_to_num().argsort(-1)),
    "searchsorted scalar": lambda x: torch.searchsorted(torch.linspace(-2, 2, 7), 0.5),
    "bucketize": lambda x: torch.bucketize(x, torch.linspace(-2, 2, 7), right=True),
    "bucketize of run-time boundaries": lambda x: torch.bucketize(x, x[0].nan_to_num().sort().values, out_int32=True),
    "isin": lambda x: torch.isin(x, x[0, :3]),
    "addbmm": lambda x: torch.addbmm(x[:, :4], x.nan_to_num()[None, :, :5].expand(3, 4, 5), torch.ones(3, 5, 4), beta=0.5, alpha=2),
    "median": torch.median,
    "median dim": lambda x: torch.median(x, 1),
    "median int": lambda x: torch.median((x.nan_to_num() * 3).long(), 0),
    "nanmedian": torch.nanmedian,
    "nanmedian dim": lambda x: torch.nanmedian(x, 1, keepdim=True),
    "kthvalue": lambda x: torch.kthvalue(x, 3, 1),
    "put": lambda x: x.put(torch.tensor([0, -1, 7, 7]), torch.tensor([1.0, 2, 3, 4])),
    "put accumulate": lambda x: x.put(torch.tensor([0, -1, 7, 7]), torch.tensor([1.0, 2, 3, 4]), accumulate=True),
    "as_strided_scatter": lambda x: torch.as_strided_scatter(x, x[:2, :2] * 9, (2, 2), (1, 2), 3),
    "bilinear": lambda x: torch.nn.functional.bilinear(x, x[:, :5] * 2, torch.ones(3, 6, 5) / 7, torch.ones(3)),
    "adaptive_max_pool2d (bins of unequal width)": lambda x: torch.nn.functional.adaptive_max_pool2d(x[None, None], (3, 4), return_indices=True),
    "adaptive_max_pool1d": lambda x: torch.nn.functional.adaptive_max_pool1d(x.nan_to_num()[None], 4),
    "pad replicate, negative (a crop)": lambda x: torch.nn.functional.pad(x[None], [-1, 2, -2, 1], mode="replicate"),
    "floor_divide float64, histc float64": lambda x: (x.double() // 0.3, x.double() // (x.double() - 0.5), torch.histc(x.double(), 5, -2, 2)),
    "mode (ties take the smallest, NaN its own)": lambda x: torch.mode(torch.cat([x.round(), x[:, :1].nan_to_num().round()], 1), 1),
    "mode int, keepdim": lambda x: torch.mode((x.nan_to_num() * 2).long() % 3, 0, keepdim=True),
    "segment_reduce every reduction, initial, empty segments": lambda x: tuple(
        torch._segment_reduce(x[:, :5].T, r, lengths=torch.tensor([0, 1, 2, 2]), initial=init)
        for r in ("sum", "mean", "max", "min", "prod") for init in (None, 2.0)),
    "segment_reduce offsets": lambda x: torch._segment_reduce(x, "max", offsets=torch.tensor([0, 0, 2, 4])),
    "histogram: bins over min/max, a range, weights, density, given edges": lambda x: (
        *torch.histogram(x.nan_to_num(), 5), *torch.histogram(x.nan_to_num(), 4, range=(-1.0, 1.0), weight=x.nan_to_num().abs()),
        torch.histogram(x.nan_to_num(), 3, density=True).hist, torch.histogram(x.nan_to_num(), torch.tensor([-2.0, -0.5, 0.0, 1.0, 1.5])).hist),
    "nonzero_static": lambda x: (torch.nonzero_static(x.nan_to_num() > 0, size=30), torch.nonzero_static(x[0] > 0, size=2, fill_value=7)),
    "empty_permuted, filled": lambda x: torch.empty_permuted((4, 6), (1, 0)).copy_(x) * 2,
    "index_fill of a 0-d tensor": lambda x: x.sum().index_fill(0, torch.tensor([0]), 5.0),
    "frexp": lambda x: torch.frexp(torch.cat([x.flatten(), torch.tensor([0.0, -0.0, -3.5, 1e-40, math.inf, 2.0**-126, 2.0**127])])),
}


@pytest.mark.parametrize("name", COMPOSED)
def test_compositions_as_eager(name):
    """tensor_graphs' own compositions (`frontend.compositions`): exactly eager's values and
    positions, NaN and ties included (addbmm, bilinear and segment_reduce's sums: eager's order
    differs, within 4 float32 ulps of the result's magnitude)."""
    x, model = _nan_rows(), Elementwise(COMPOSED[name])
    got, want = tg.compile(model, (x,))(x), model(x)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        tol = 4 * torch.finfo(torch.float32).eps * w.nan_to_num().abs().max().item() if name in ("addbmm", "bilinear") or name.startswith("segment_reduce every") else 0
        torch.testing.assert_close(g, w, rtol=0, atol=tol, equal_nan=True)


SPATIAL_3D = {
    "conv3d strided, padded, dilated": lambda x, w, b: torch.nn.functional.conv3d(x, w[:, :4], b, stride=(2, 1, 2), padding=(1, 2, 0),
                                                                               dilation=(2, 1, 1)),
    "conv3d groups": lambda x, w, b: torch.nn.functional.conv3d(x, w[:4, :2, :2], groups=2),
    "conv_transpose3d": lambda x, w, b: torch.nn.functional.conv_transpose3d(x, w[:4, :3], b[:3], stride=(2, 1, 3), padding=(1, 0, 1),
                                                                             output_padding=(1, 0, 2), dilation=(2, 1, 1)),
    "conv_transpose3d groups": lambda x, w, b: torch.nn.functional.conv_transpose3d(x, w[:4, :2, :2], groups=2, stride=2),
    "avg_pool3d ceil, padding excluded": lambda x, w, b: torch.nn.functional.avg_pool3d(x, (3, 2, 3), (2, 2, 1), 1, ceil_mode=True,
                                                                                       count_include_pad=False),
    "avg_pool3d padding counted, divisor": lambda x, w, b: (torch.nn.functional.avg_pool3d(x, 3, 2, 1, ceil_mode=True),
                                                            torch.nn.functional.avg_pool3d(x, 2, divisor_override=3)),
    "adaptive_avg_pool3d": lambda x, w, b: torch.nn.functional.adaptive_avg_pool3d(x, (3, 4, 5)),
    "interpolate bilinear, antialiased (down and up)": lambda x, w, b: (
        torch.nn.functional.interpolate(x[:, :, 0], size=(4, 11), mode="bilinear", antialias=True),
        torch.nn.functional.interpolate(x[:, :, 0], size=(3, 3), mode="bilinear", antialias=True, align_corners=True)),
    "grid_sample 3-D: trilinear and nearest, zeros/border/reflection padding, align_corners": lambda x, w, b: tuple(
        torch.nn.functional.grid_sample(x, x[:, :3, :3, :2].permute(0, 2, 3, 4, 1) * 0.6, mode=mode, padding_mode=pad, align_corners=ac)
        for mode in ("bilinear", "nearest") for pad in ("zeros", "border", "reflection") for ac in (False, True)),
    "embedding_bag sum, weighted; mean; max; padding_idx": lambda x, w, b: (
        torch.nn.functional.embedding_bag(torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), x.reshape(-1, 7)[:10], torch.tensor([0, 3, 3]),
                                          mode="sum", per_sample_weights=x.reshape(-1)[:8]),
        torch.nn.functional.embedding_bag(torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), x.reshape(-1, 7)[:10], torch.tensor([0, 3, 3]), mode="mean"),
        torch.nn.functional.embedding_bag(torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), x.reshape(-1, 7)[:10], torch.tensor([0, 3, 8]),
                                          mode="max", include_last_offset=True),
        torch.nn.functional.embedding_bag(torch.tensor([[1, 2], [0, 0], [4, 0]]), x.reshape(-1, 7)[:10], padding_idx=0)),
}


@pytest.mark.parametrize("name", SPATIAL_3D)
def test_3d_convolution_and_pooling_as_eager(name):
    """3-D convolutions by 2-D ones over the depth taps, 3-D average pooling by separable window
    matrices (`frontend.spatial_compositions`): within 1e-6 of eager's float32 relative to the
    largest value (sums in another order; observed 2.6e-7 on a Zen 3), the 3-D grid sampler
    within 2e-6 (its source coordinates rounded otherwise than eager's, times the input's slope:
    observed 1.3e-6); a 2-D convolution still imported whole."""
    tol = 2e-6 if name.startswith("grid_sample") else 1e-6
    torch.manual_seed(0)
    args = (torch.randn(2, 4, 5, 6, 7), torch.randn(6, 4, 3, 2, 3), torch.randn(6))
    model = Elementwise(SPATIAL_3D[name])
    got, want = tg.compile(model, args)(*args), model(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert float((g - w).abs().max()) <= tol * max(1.0, float(w.abs().max()))
    conv2d = Elementwise(lambda x, w, b: torch.nn.functional.conv2d(x[:, :, 0], w[:, :, 0], b))
    assert not needs_decomposing(torch.export.export(conv2d, args))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_polygamma_of_any_order_is_rounded_once_from_float64(n):
    """polygamma(n >= 1): torch's trigamma and Cephes' Hurwitz zeta (a fixed count of terms,
    masked) composed in float64 and rounded once to float32: within half an ulp of torch's
    float64 result, negative arguments, poles (inf) and NaN included."""
    torch.manual_seed(0)
    x = torch.cat([torch.rand(40) * 18 - 9, torch.tensor([-3.0, 0.0, 1.0, -2.5, 1e-3, 30.0])])
    model = Elementwise(lambda x: torch.polygamma(n, x))
    got, ref = tg.compile(model, (x,))(x), torch.polygamma(n, x.double())
    assert got.dtype == torch.float32
    finite = torch.isfinite(ref) & (ref.abs() < torch.finfo(torch.float32).max)
    assert torch.equal(torch.isnan(got), torch.isnan(ref))
    err = (got.double() - ref)[finite].abs() / ref[finite].abs().clamp(min=torch.finfo(torch.float32).tiny)
    assert float(err.max()) <= 2.0**-24 * (1 + 1e-6)


def test_linear_cross_entropy_of_torch_nn_is_composed_whole():
    """``F.linear_cross_entropy`` (its chunked custom ops, torch_nn::) in inference: one linear
    and a cross entropy, as eager's chunks compute them (ignore_index, class weights, label
    smoothing, no reduction): within 4 float32 ulps of the loss."""
    torch.manual_seed(0)
    x, w, b, t = torch.randn(6, 5), torch.randn(7, 5), torch.randn(7), torch.tensor([0, 3, 6, 2, 2, 1])
    cw = torch.rand(7)
    lce = torch.nn.functional.linear_cross_entropy
    model = Elementwise(lambda x, w, b, t, cw: (lce(x, w, t, linear_bias=b, ignore_index=2, label_smoothing=0.1),
                                               lce(x, w, t, weight=cw, reduction="sum"), lce(x, w, t, reduction="none")))
    with torch.no_grad():
        got, want = tg.compile(model, (x, w, b, t, cw))(x, w, b, t, cw), model(x, w, b, t, cw)
    for g, e in zip(got, want, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=0, atol=4 * torch.finfo(torch.float32).eps * float(e.abs().max()))


def test_diff_of_run_time_values_is_lowered():
    """``torch.diff`` on run-time values (it was constant-fold only): slices and a difference,
    n times, with prepend/append, bool as ``!=``, n past the length empty: eager's exactly."""
    x, b = _nan_rows(), _nan_rows() > 0
    model = Elementwise(lambda x, b: (torch.diff(x, n=2, dim=0, prepend=x[:1] * 2, append=x[-1:]), torch.diff(b, dim=1),
                                      torch.diff(x, n=9, dim=1)))
    for g, e in zip(tg.compile(model, (x, b))(x, b), model(x, b), strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=0, atol=0, equal_nan=True)


def test_integer_avg_pool3d_divides_toward_zero_as_eager():
    """avg_pool3d of int64: exact window sums divided toward zero by torch's count (padding
    excluded or counted, an override), eager's values exactly (the float path's 1/count matrices
    in int64 gave zeros: a wrong answer the sweep found)."""
    torch.manual_seed(0)
    x = torch.randint(-50, 50, (2, 3, 5, 6, 7))
    pool = torch.nn.functional.avg_pool3d
    model = Elementwise(lambda x: (pool(x, (3, 2, 3), (2, 2, 1), 1, ceil_mode=True, count_include_pad=False),
                                   pool(x, 3, 2, 1, ceil_mode=True), pool(x, 2, divisor_override=3)))
    for g, e in zip(tg.compile(model, (x,))(x), model(x), strict=True):
        assert g.dtype == e.dtype == torch.int64 and torch.equal(g, e)
