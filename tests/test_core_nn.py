"""Core ATen's general neural-network ops (issue 30; `lowering/aten_to_tensor/nn.py`):
``convolution`` direct and transposed (strides, padding, output padding, dilation, groups; 1-D,
2-D, unbatched), ``max_pool2d_with_indices`` (padding, ceil mode), the native normalisations
with their saved statistics (``instance_norm`` is batch norm with batch statistics), layer norm
over several trailing dims, ``cdist``/``pdist`` for several p.

Tolerance: each output's error against a float64 run, relative to its largest magnitude, at
most twice eager float32's plus 2e-7; integer outputs (pooling indices) exact.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tensor_graphs as tg

G = torch.Generator().manual_seed(0)
W = {name: torch.randn(*shape, generator=G) for name, shape in {
    "t": (4, 3, 3, 3), "tg": (4, 2, 3, 3), "tb": (4,), "t1": (4, 5, 4), "c": (5, 4, 3, 3), "c1": (5, 4, 3)}.items()}

CASES = {
    "conv_transpose2d stride 2 output_padding": lambda v, w: F.conv_transpose2d(v, w["t"], stride=2, padding=1, output_padding=1),
    "conv_transpose2d groups dilation bias": lambda v, w: F.conv_transpose2d(v, w["tg"], w["tb"], stride=(2, 1), padding=(0, 2),
                                                                           dilation=2, groups=2),
    "conv_transpose1d": lambda v, w: F.conv_transpose1d(v[:, :, 0], w["t1"], stride=3, padding=1),
    "conv2d unbatched": lambda v, w: F.conv2d(v[0], w["c"], padding=1),
    "conv1d unbatched": lambda v, w: F.conv1d(v[0, :, 0], w["c1"]),
    "max_pool2d indices": lambda v, w: F.max_pool2d(v, 2, return_indices=True),
    "max_pool2d indices padded": lambda v, w: F.max_pool2d(v, 3, stride=2, padding=1, return_indices=True),
    "max_pool2d indices ceil": lambda v, w: F.max_pool2d(v, 4, stride=3, ceil_mode=True, return_indices=True),
    "instance_norm": lambda v, w: F.instance_norm(v),
    "instance_norm affine": lambda v, w: F.instance_norm(v, weight=w["tb"], bias=w["tb"] * 0.5),
    "layer_norm over 2 dims": lambda v, w: F.layer_norm(v, (6, 6)),
    "native_layer_norm": lambda v, w: torch.native_layer_norm(v, (6,), None, None, 1e-5),
    "native_group_norm": lambda v, w: torch.native_group_norm(v, None, None, 2, 4, 36, 2, 1e-5),
    "cdist": lambda v, w: torch.cdist(v[0], v[1]),
    "cdist p=1": lambda v, w: torch.cdist(v[0], v[1], p=1.0),
    "cdist p=inf": lambda v, w: torch.cdist(v[0], v[1], p=float("inf")),
    "cdist p=3": lambda v, w: torch.cdist(v[0], v[1], p=3.0),
    "pdist": lambda v, w: F.pdist(v[0, 0]),
}


class Case(torch.nn.Module):
    def __init__(self, fn, weights):
        super().__init__()
        self.fn = fn
        for k, t in weights.items():
            self.register_buffer(k, t.clone())

    def forward(self, v):
        return self.fn(v, {k: getattr(self, k) for k in W})


def _leaves(x):
    return list(x) if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("name", CASES)
def test_nn_op_against_float64(name):
    x = torch.randn(2, 4, 6, 6, generator=torch.Generator().manual_seed(1))
    model = Case(CASES[name], W).eval()
    got, want = tg.compile(model, (x,))(x), model(x)
    ref = model.double()(x.double())
    for g, w, r in zip(_leaves(got), _leaves(want), _leaves(ref)):
        assert g.dtype == w.dtype and g.shape == w.shape
        if not w.is_floating_point():
            assert torch.equal(g, w)
            continue
        scale = r.abs().max().clamp_min(1.0)
        err = lambda a: ((a.double() - r).abs().max() / scale).item()  # noqa: E731
        assert err(g) <= 2 * err(w) + 2e-7
