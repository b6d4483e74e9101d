"""The op registry (`frontend/decompositions.py`): which ATen ops are lowered, decomposed by
PyTorch's tables or unsupported, what ``tg-opt --list-ops`` prints, and that decomposed ops reach
the fusion passes and the right kernels.

Tolerance: float32 results against eager within 1e-6 absolute (0 observed: the decomposition is
eager's own arithmetic, fused back into the same kernels); float64 within 1e-12.
"""

from __future__ import annotations

import torch

import tensor_graphs as tg
from tensor_graphs.frontend.decompositions import format_routes, route
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
