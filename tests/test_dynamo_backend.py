"""``torch.compile(model, backend="tensor_graphs")``: captured graphs compile with tensor_graphs;
one it cannot compile runs eagerly with one warning naming the ops. Tolerance 1e-5 (float32
sums in another order)."""

from __future__ import annotations

import warnings

import pytest
import torch

from tensor_graphs.frontend.dynamo_backend import EagerFallbackWarning
from test_zoo import ZOO, inputs


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["bert", "llama", "gpt2"])
def test_zoo_models_through_torch_compile(name, monkeypatch):
    import tensor_graphs as tg

    compiles = []
    real = tg.compile
    monkeypatch.setattr(tg, "compile", lambda *a, **kw: compiles.append(1) or real(*a, **kw))
    torch.manual_seed(0)
    model = ZOO[name].build().eval()
    compiled = torch.compile(model, backend="tensor_graphs")
    for seed in (0, 1):
        ids, mask = inputs(ZOO[name].kind, seed)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", EagerFallbackWarning)  # every graph compiled, none eager
            got = compiled(ids, mask)
            expected = model(ids, mask)
        keep = mask.bool() if ZOO[name].kind == "decoder" else torch.ones_like(mask, dtype=torch.bool)
        assert (got - expected).abs()[keep].max().item() <= 1e-5
    assert compiles, "the backend never compiled a graph"


def test_a_graph_with_unsupported_ops_runs_eagerly_with_one_warning():
    class Special(torch.nn.Module):
        def forward(self, x):
            return torch.special.i1(torch.tanh(x) * 0.5) + 1

    model, x = Special(), torch.randn(4, 5)
    compiled = torch.compile(model, backend="tensor_graphs")
    with pytest.warns(EagerFallbackWarning, match=r"^tensor_graphs: a captured graph runs eagerly \(unsupported: aten::special_i1\)$"):
        got = compiled(x)
    torch.testing.assert_close(got, model(x))
