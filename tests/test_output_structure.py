"""What a compiled model returns has eager's structure (issue 30, item 4): tuples (of one tensor
too), lists, dicts, nested ones, named tuples (``torch.sort``, ``torch.topk``), Python numbers and
None among them, and 0-d tensors with shape ``()``; the values exactly eager's (the inputs are
small integers, so that every sum and product is exact)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensor_graphs as tg


class Returns(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _same(got, want) -> None:
    """Same structure, types, shapes, dtypes and values."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.equal(got, want)
    elif isinstance(want, np.ndarray):
        assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        if hasattr(want, "_fields"):
            assert got._fields == want._fields
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


def _x() -> torch.Tensor:
    """Small distinct integers as floats: every sum and product here is exact."""
    return torch.randperm(12, generator=torch.Generator().manual_seed(0)).reshape(3, 4).float() - 6


CASES = {
    "one tensor": lambda x: x * 2,
    "a tuple of one": lambda x: (x * 2,),
    "a tuple": lambda x: (x * 2, x + 1),
    "a list": lambda x: [x * 2, x + 1],
    "a dict": lambda x: {"b": x * 2, "a": (x + 1, [x * 4])},
    "nested": lambda x: (x, (x * 2, (x + 1,)), [x * 0.5]),
    "numbers and None": lambda x: (x * 2, 3, 2.5, None, True),
    "sort": lambda x: torch.sort(x, dim=1),
    "topk": lambda x: torch.topk(x, 2, dim=1),
    "a 0-d sum": lambda x: x.sum(),
    "a 0-d constant": lambda x: (x * 2, torch.tensor(3)),
    "a torch.Size among tensors": lambda x: (x * 2, torch.broadcast_shapes(x.shape, (2, 1, 1))),
    "only numbers (no tensor at all)": lambda x: (torch.broadcast_shapes(x.shape, (2, 1, 1)), x.shape[0] * 2, None),
}


@pytest.mark.parametrize("name", CASES)
def test_outputs_come_back_in_eager_structure(name):
    x = _x()
    model = Returns(CASES[name])
    fn = tg.compile(model, (x,))
    want = model(x)
    _same(fn(x), want)


def test_numpy_calls_keep_the_structure():
    x = _x()
    model = Returns(lambda x: {"values": torch.sort(x, dim=1).values, "n": 2, "sum": x.sum()})
    got = tg.compile(model, (x,))(x.numpy())
    want = model(x)
    assert list(got) == ["values", "n", "sum"] and got["n"] == 2
    assert np.array_equal(got["values"], want["values"].numpy())
    assert got["sum"].shape == () and got["sum"] == want["sum"].item()


class WritesItsInputs(torch.nn.Module):
    """Writes two of its inputs in place: training-mode batch norm's running statistics (the
    functional batch_norm with them passed in) and an explicit ``add_``."""

    def forward(self, x, mean, var, acc):
        acc.add_(x.sum(0))
        return torch.nn.functional.batch_norm(x, mean, var, training=True, momentum=0.3), x.shape[0]


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_inputs_the_model_writes_in_place_are_written_back(kind):
    """An input the model writes in place (torch.export: USER_INPUT_MUTATION) gets its new value
    after the call, as eager leaves it, torch tensors and NumPy arrays alike; the result keeps
    the model's structure (the written values are not among the results). Batch statistics and
    the running update (unbiased variance, momentum): within 2 float32 ulps of eager's."""
    torch.manual_seed(0)
    model = WritesItsInputs()
    args = (torch.randn(8, 3), torch.zeros(3), torch.ones(3), torch.zeros(3))
    fn = tg.compile(model, tuple(a.clone() for a in args))
    mine = [a.clone() for a in args] if kind == "torch" else [a.numpy().copy() for a in args]
    eager = [a.clone() for a in args]
    got, want = fn(*mine), model(*eager)
    assert isinstance(got, tuple) and got[1] == want[1] == 8
    for g, w in zip([got[0], *mine], [want[0], *eager], strict=True):
        torch.testing.assert_close(torch.as_tensor(g), w, rtol=0, atol=2 * torch.finfo(torch.float32).eps * float(w.abs().max()))
