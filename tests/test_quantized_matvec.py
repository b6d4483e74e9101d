"""Matrix-vector products over bf16 and int8 weight panels (`buf.quantized_matvec`, the variants
matmul.bf16_weights and matmul.int8_weights): the kernel must compute exactly the product of
the rounded weights, so it is checked against NumPy over those weights (float64) at 1e-5 of the
output's magnitude, on each target family, at 1 and 2 threads, with partial panels, K not a
multiple of the accumulator chains, a bias and activations. The rounding itself (the error
against the float32 weights) is what the tuner measures and holds to a tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.context import Context

import tensor_graphs as tg
from tensor_graphs.dialects.packing import PanelLayout, from_bf16, from_bf16_pairs, int8_scales, to_bf16
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.tuning.paths import kernel_paths, pin

ACTS = {"none": lambda y: y, "relu": lambda y: np.maximum(y, 0.0),
        "gelu_tanh": lambda y: 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))}
TORCH_ACTS = {"none": torch.nn.Identity(), "relu": torch.nn.ReLU(), "gelu_tanh": torch.nn.GELU(approximate="tanh")}


def rounded_weight(w: np.ndarray, fmt: str) -> np.ndarray:
    """The [N, K] weight as the panels hold it, in float64."""
    if fmt == "bf16":
        return from_bf16(to_bf16(w)).astype(np.float64)
    scales = int8_scales(w).astype(np.float64)
    q = np.clip(np.rint(w / scales[:, None]), -127, 127)
    return q * scales[:, None]


def _compile(model, x, variant):
    graph = import_model(model, (x,))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    gemms = [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"]
    assert gemms and all(variant in p.applicable for p in gemms)
    for p in gemms:
        pin(p.op, variant)
    return tg.compile_module(graph.module, graph.weights)


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
@pytest.mark.parametrize("rows,k,n,act,bias", [(1, 96, 200, "gelu_tanh", True), (3, 37, 64, "relu", False),
                                              (8, 130, 17, "none", True), (1, 768, 1000, "none", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_matvec_over_cheaper_weights(target, fmt, rows, k, n, act, bias, threads):
    torch.manual_seed(rows * 1000 + k)
    model = torch.nn.Sequential(torch.nn.Linear(k, n, bias=bias), TORCH_ACTS[act]).eval()
    x = torch.randn(rows, k)
    tg.set_num_threads(threads)
    try:
        fn = _compile(model, x, f"matmul.{fmt}_weights")
        got = fn(x.numpy())
    finally:
        tg.set_num_threads(1)
    assert "buf.quantized_matvec" in fn.ir("buf")
    w = model[0].weight.detach().numpy()
    y = x.numpy().astype(np.float64) @ rounded_weight(w, fmt).T
    if bias:
        y += model[0].bias.detach().numpy()
    expected = ACTS[act](y)
    scale = max(np.abs(expected).max(), 1.0)
    assert np.abs(got - expected).max() <= 1e-5 * scale
    # and the rounding error against the float32 weights is what these formats give
    with torch.no_grad():
        error = np.abs(got - model(x).numpy()).max() / np.abs(model(x).numpy()).max()
    assert error <= (2e-2 if fmt == "int8" else 5e-3)


def test_int8_panels_round_trip():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    w[3] = 0.0  # a zero row: scale 1, zeros
    q = PanelLayout("w", 16, True, "int8").pack(w)
    s = PanelLayout("w", 16, True, "int8scales").pack(w)
    assert q.dtype == np.int8 and q.shape == (3, 24, 16) and s.shape == (3, 16)
    dequant = (q.astype(np.float64) * s[:, None, :]).transpose(0, 2, 1).reshape(48, 24)[:40]
    assert np.array_equal(dequant, rounded_weight(w, "int8"))
    assert np.all(s.reshape(-1)[40:] == 0)
    b = PanelLayout("w", 16, False, "bf16").pack(w.T.copy())
    # each row of 16 as 8 words: column j in the high half, column j + 8 in the low half
    words = b.view(np.uint32)
    assert int(words[0, 5, 2]) >> 16 == int(to_bf16(w[2:3, 5])[0]) and int(words[0, 5, 2]) & 0xFFFF == int(to_bf16(w[10:11, 5])[0])
    rows = from_bf16(from_bf16_pairs(b))
    assert np.array_equal(rows.transpose(0, 2, 1).reshape(48, 24)[:40], from_bf16(to_bf16(w)))


def test_bf16_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, np.inf, np.nan], np.float32)
    got = from_bf16(to_bf16(x))
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == 1.0 + 2**-6 and got[3] == -2.5 and got[4] == np.inf
    assert np.isnan(got[5])
