"""The GPU path's mixture-of-experts kernels (issue 15) under Triton's interpreter: top-k and the
stable sort (`buf.argtopk`), running sums (`buf.cumsum`), gathers (`buf.take`), index_put with and
without accumulate (`buf.put`), the experts' grouped GEMM (`buf.grouped_matmul`, both its tiled
and its row-at-a-time form), their run-time checks (raised as on the CPU), and transformers'
MoE blocks and a Mixtral decoder end to end.

Exact wherever the result is chosen rather than computed (positions, sorted values, integer
sums, scattered values); the GEMMs to 1e-5 of the output's magnitude (float32 sums in another
order, IEEE ``tl.dot``); the float running sums to 2e-7 of the running sum of magnitudes.
"""

from __future__ import annotations

import pytest
import torch
from test_moe_ops import check, distinct, grouped_inputs, mixtral_block, tiny_mixtral
from test_ops_e2e import Fn
from test_triton import TOL, _check  # noqa: F401  (the module-level skip without a GPU or the interpreter)
from torch import nn

import tensor_graphs as tg


def exact(f, make_inputs):
    """`test_moe_ops.check` on the GPU path: equal to PyTorch (bitwise) on seeds 0 and 1."""
    return check(f, make_inputs, device="cuda")


@pytest.mark.parametrize("k, dim, largest", [(2, -1, True), (3, 0, True), (1, 1, False), (8, -1, True)])
def test_topk(k, dim, largest):
    fn = exact(lambda m, x: tuple(torch.topk(x * 1.0, k, dim=dim, largest=largest)), distinct(6, 8))
    assert "argtopk" in fn.ir("triton")


def test_topk_ties_nans_and_a_row_of_several_blocks():
    """Ties go to the lower position (the CPU's order); NaN ranks above every number; a row of
    150 (three blocks of pairs) sorted whole, stably, both ways."""
    fn = tg.compile(Fn(lambda m, x: torch.topk(x + 0, 4)[1]), (torch.zeros(2, 6),), device="cuda")
    x = torch.tensor([[1.0, 2, 2, 0, float("nan"), 1], [0, 0, 0, 0, 0, 0]])
    assert fn(x).cpu().tolist() == [[4, 1, 2, 0], [0, 1, 2, 3]]

    def ids(seed):
        return (torch.randint(0, 5, (150,), generator=torch.Generator().manual_seed(seed)),)

    for descending in (False, True):
        exact(lambda m, x: tuple(torch.sort(x + 0, stable=True, descending=descending)), ids)


def test_cumsum_and_gathers():
    """Running sums of floats and of integers along any dim (rows of several chunks); a gather
    (index tensors: `buf.take`) and its index check."""
    def ints(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(-9, 9, (2, 4500), generator=g), torch.randint(0, 2, (4,), generator=g))

    exact(lambda m, x, i: (torch.cumsum(x, 1), torch.cumsum(x[:, :5], 0), x[i, 7:9], x[:, i]), ints)
    # floats: within 2e-7 of the float64 running sum, relative to the running sum of magnitudes
    # (float32's own sequential sum: 6e-8 here; ours 9e-8, a chunk's scan plus the carry)
    model = Fn(lambda m, x: (torch.cumsum(x, 1), torch.cumsum(x[:, :64], 0))).eval()
    x = torch.randn(2, 4500, generator=torch.Generator().manual_seed(0))
    fn = tg.compile(model, (x,), device="cuda")
    for dim, got, part in zip((1, 0), fn(x), (x, x[:, :64])):
        want, scale = torch.cumsum(part.double(), dim), torch.cumsum(part.abs().double(), dim)
        assert ((got.cpu().double() - want).abs() / scale).max() <= 2e-7

    fn = tg.compile(Fn(lambda m, x, i: x[i]), (torch.randn(5, 3), torch.tensor([0, 4])), device="cuda")
    with pytest.raises(IndexError, match="index out of range"):
        fn(torch.randn(5, 3), torch.tensor([1, 5]))
    torch.testing.assert_close(fn(torch.ones(5, 3), torch.tensor([1, 4])).cpu(), torch.ones(2, 3))  # flag cleared


def test_index_put_with_and_without_accumulate():
    """The inverse permutation (transformers' MoE), rows and elements with negative indices,
    repeated indices adding up with accumulate, the last write winning without it; an offset
    out of range is an IndexError."""
    def perm(seed):
        return (torch.randperm(130, generator=torch.Generator().manual_seed(seed)),)

    def inverse(m, p):
        inv = torch.empty_like(p)
        inv[p] = torch.arange(p.size(0))
        return inv

    assert "put" in exact(inverse, perm).ir("triton")

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(-50, 50, (5, 4), generator=g), torch.randperm(5, generator=g)[:3] - 2,
                torch.randint(-4, 4, (3,), generator=g), torch.randint(-50, 50, (3, 4), generator=g))

    def f(m, x, i, j, v):
        return (x.index_put((i,), v), x.index_put((i, j), v[:, 0] * 2, accumulate=True),
                x.index_put((torch.tensor([1, 1, 3, 1]),), torch.tensor(2), accumulate=True),
                x.index_put((torch.tensor([2, 0, 2]), torch.tensor([1, 1, 1])), torch.tensor([5, 6, 7])))

    exact(f, inputs)  # integers: the sums exact whatever their order; the last write of [2, 1] is 7

    fn = tg.compile(Fn(lambda m, x, i: x.index_put((i,), torch.tensor(1.0))), (torch.zeros(4), torch.tensor([0, 1])), device="cuda")
    with pytest.raises(IndexError, match="index out of range"):
        fn(torch.zeros(4), torch.tensor([0, 4]))


@pytest.mark.parametrize("rows, k, n", [(23, 32, 40), (9, 70, 16), (1, 64, 130)])
def test_grouped_matmul(rows, k, n):
    """transformers' grouped_mm over weights stored [E, N, K] (read transposed) and [E, K, N];
    empty groups; tiles (23 rows) and rows one at a time (9 and 1: a decode step)."""
    torch.manual_seed(0)
    model = Fn(lambda m, x, offs: (torch.ops.transformers.grouped_mm_fallback(x, m.w_nk.transpose(-2, -1), offs=offs),
                                   torch.ops.transformers.grouped_mm_fallback(x, m.w_kn, offs)))
    model.w_nk, model.w_kn = nn.Parameter(torch.randn(5, n, k)), nn.Parameter(torch.randn(5, k, n))
    make = grouped_inputs(5, rows, k, n, empty=(1, 3))
    fn = tg.compile(model.eval(), make(0), device="cuda")
    for seed in (0, 1):
        inputs = make(seed)
        with torch.no_grad():
            for got, want in zip(fn(*inputs), model(*inputs)):
                assert (got.cpu() - want).abs().max() <= TOL * max(want.abs().max().item(), 1.0)
    assert "grouped_matmul" in fn.ir("triton")


def test_grouped_matmul_zeroes_rows_past_the_last_group_and_checks_offsets():
    torch.manual_seed(0)
    model = Fn(lambda m, x, offs: torch.ops.transformers.grouped_mm_fallback(x, m.w, offs))
    model.w = nn.Parameter(torch.randn(3, 16, 32))
    x = torch.randn(20, 16)
    fn = tg.compile(model, (x, torch.tensor([2, 5, 20], dtype=torch.int32)), device="cuda")
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)
    got = fn(x, offs).cpu()
    with torch.no_grad():
        want = model(x, offs)
    assert (got - want).abs().max() <= TOL * want.abs().max() and not got[7:].any()
    for bad in ([3, 2, 7], [2, 5, 21]):
        with pytest.raises(RuntimeError, match="group offsets must be non-decreasing"):
            fn(x, torch.tensor(bad, dtype=torch.int32))


@pytest.mark.parametrize("seq", [1, 7])
def test_mixtral_moe_block(seq):
    """The block alone (8 experts, top-2): routing, sort, inverse permutation, grouped GEMMs."""
    fn = _check(mixtral_block(), torch.randn(1, seq, 48))
    assert "grouped_matmul" in fn.ir("triton") and "argtopk" in fn.ir("triton")


def test_mixtral_decoder_generates_transformers_tokens():
    """compile_decoder(device="cuda") of a 2-layer Mixtral: MoE layers in the prefill and in the
    one-token steps; greedy tokens as transformers' generate."""
    model = tiny_mixtral()
    ids = torch.randint(2, 100, (1, 7), generator=torch.Generator().manual_seed(0))
    got = tg.compile_decoder(model, max_seq=32, prefill_chunk=8, device="cuda").generate(ids, max_new_tokens=6)
    expected = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(torch.as_tensor(got).cpu().reshape(1, -1), expected)
