"""Core ATen's element gathers and scatters (issue 30; `lowering/aten_to_tensor/views.py`):
positions known while compiling (flip, diagonal, as_strided, unfold, the *_scatter ops) as
`tg.take`/`tg.put` by a constant offset table, run-time indices (index_select, scatter,
scatter_add, index_fill, masked_scatter) range-checked, the ops that make values (copy,
fill, empty), and triu/tril of run-time data. Every result exactly eager's (elements move,
nothing is computed, except the sums of scatter_add and index_add, exact here on integers)."""

from __future__ import annotations

import pytest
import torch

import tensor_graphs as tg

IDX = torch.tensor([3, 0, 2])
INDEX = torch.tensor([[[1, 1, 5]] * 5] * 4)


CASES = {
    "flip": lambda v: v.flip(0, 2),
    "fliplr": lambda v: torch.fliplr(v),
    "rot90": lambda v: torch.rot90(v, 1, (1, 2)),
    "diagonal": lambda v: v.diagonal(1, 0, 2),
    "diag_embed": lambda v: torch.diag_embed(v[0]),
    "diag": lambda v: torch.diag(v[0, :, :5]),
    "as_strided": lambda v: torch.as_strided(v, (3, 3), (2, 5), 1),
    "unfold": lambda v: v.unfold(2, 3, 2),
    "index_select": lambda v: v.index_select(1, IDX),
    "take": lambda v: torch.take(v, IDX),
    "scatter": lambda v: v.scatter(2, torch.tensor([[[1, 0, 5]] * 5] * 4), v[:, :, :4]),
    "scatter value": lambda v: v.scatter(1, torch.tensor([[[0], [2]]] * 4), 7.0),
    "scatter_add": lambda v: v.scatter_add(2, INDEX, v[:, :, :4]),
    "scatter_reduce sum": lambda v: v.scatter_reduce(2, INDEX, v[:, :, :3], "sum"),
    "slice_scatter": lambda v: torch.slice_scatter(v, v[:, :, ::3] * 2, 2, 0, 6, 3),
    "select_scatter": lambda v: torch.select_scatter(v, v[:, 1] * 3, 1, 1),
    "diagonal_scatter": lambda v: torch.diagonal_scatter(v, v.diagonal(0, 1, 2) * 2, 0, 1, 2),
    "index_fill": lambda v: v.index_fill(2, IDX, -1.0),
    "index_add": lambda v: v.index_add(1, IDX, v[:, :3]),
    "index_copy": lambda v: v.index_copy(1, IDX, v[:, :3] + 1),
    "masked_scatter": lambda v: v.masked_scatter(v > 0.5, torch.arange(200.0)),
    "copy": lambda v: v.clone().copy_(v[0]),
    "fill": lambda v: v.clone().fill_(3.0),
    "empty then fill": lambda v: torch.empty(2, 3).fill_(1.0) + v[0, :2, :3],
    "narrow_copy": lambda v: v.narrow_copy(1, 1, 2),
    "triu of run-time data": lambda v: v.triu(1),
    "tril of run-time data": lambda v: v.tril(-1),
}


class View(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, v):
        return self.fn(v)


@pytest.mark.parametrize("name", CASES)
def test_view_op_is_exact(name):
    x = torch.randint(-4, 5, (4, 5, 6), generator=torch.Generator().manual_seed(0)).float()
    model = View(CASES[name])
    got, want = tg.compile(model, (x,))(x), model(x)
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_as_strided_to_a_0d_result_stays_0d(dtype):
    """``resize_(())``/``as_strided(x, (), ())``: a 0-d offset table (NumPy's ascontiguousarray
    made it 1-d: a [1] result, and a cast of float16 of mismatched shapes, an internal error)."""
    x = torch.tensor(2.5, dtype=dtype)
    model = View(lambda v: torch.as_strided(v.clone(), (), ()) * 2)
    got = tg.compile(model, (x,))(x)
    assert got.shape == () and got.dtype == dtype and torch.equal(got, model(x))


def test_a_0d_input_is_tuned_as_0d(tmp_path):
    """The tuner's inputs keep their rank: a 0-d one was made 1-d, and the check of the tuned
    graph on them failed with a shape error."""

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 16)

        def forward(self, s, x):
            return self.fc(x) * s

    torch.manual_seed(0)
    model, s, x = Scaled().eval(), torch.tensor(1.5), torch.randn(4, 8)
    fn = tg.compile(model, (s, x), tune="missing", tolerance=1e-2, tuning_db=tmp_path / "db.sqlite")
    got, want = fn(s, x), model(s, x)
    assert got.shape == want.shape  # within the tolerance asked, as the tuner measures it:
    assert float((got - want).abs().max()) <= 1e-2 * float(want.abs().max())


def test_run_time_indices_out_of_range_raise():
    """An index beyond the dim (index_select) or more true mask elements than the source holds
    (masked_scatter): an IndexError at the call, as torch raises."""
    x = torch.zeros(4, 5)

    class Select(torch.nn.Module):
        def forward(self, v, i):
            return v.index_select(1, i)

    fn = tg.compile(Select(), (x, torch.tensor([0, 1])))
    assert torch.equal(fn(x, torch.tensor([4, 0])), x[:, [4, 0]])
    with pytest.raises(IndexError):
        fn(x, torch.tensor([5, 0]))

    class Scatter(torch.nn.Module):
        def forward(self, v, m):
            return v.masked_scatter(m > 0, torch.ones(3))

    fn = tg.compile(Scatter(), (x, x))
    assert torch.equal(fn(x, x), x)
    with pytest.raises(IndexError):
        fn(x, torch.ones(4, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce_every_reduction_as_eager(dtype):
    """scatter_reduce's sum, prod, mean, amax and amin, with and without include_self (a NaN in
    src propagates through each; integer means floor-divide), index_reduce and scatter(reduce=)
    (compositions of it): exactly eager's values, one compiled graph for all."""
    torch.manual_seed(0)
    x, src = torch.randn(4, 6) * 4, torch.randn(4, 5) * 4
    src[0, 1] = float("nan")
    x, src = (x, src) if dtype.is_floating_point else (x.long(), src.nan_to_num().long())
    index = torch.randint(0, 6, (4, 5))

    class Scatters(torch.nn.Module):
        def forward(self, x, src):
            out = [x.scatter_reduce(1, index, src, r, include_self=i)
                   for r in ("sum", "prod", "mean", "amax", "amin") for i in (True, False)]
            out += [x.index_reduce(0, torch.tensor([0, 2, 0]), x[1:] * 2, r, include_self=r != "mean")
                    for r in ("prod", "mean", "amax", "amin")]
            return (*out, x.scatter(1, index, src, reduce="add"), x.scatter(1, index, src, reduce="multiply"))

    got, want = tg.compile(Scatters(), (x, src))(x, src), Scatters()(x, src)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
