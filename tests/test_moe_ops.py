"""The ops of a mixture-of-experts layer, each through every level (aten -> tg -> buf -> LLVM) in a
tiny torch module, against PyTorch: topk and sort (`tg.argtopk` + `tg.take`), histc (bin masks
summed), floor_divide (scalar bodies), index_put and empty_like (`tg.put`), the grouped GEMM
(`tg.grouped_matmul`, packed and through BLAS), and the MoE blocks of transformers.

Exact wherever the result is chosen rather than computed (positions, sorted values, counts,
integer quotients, scattered values); the GEMMs to 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T
from torch import nn
from transformers.integrations import moe as tmoe

import tensor_graphs as tg
from tensor_graphs.dialects import tensor as tgd
from tensor_graphs.transforms.evaluate import evaluate_op
from tensor_graphs.dialects.dense import dense_from_numpy
from xdsl.dialects.builtin import TensorType, f32, i64

from test_ops_e2e import Fn


def check(f, make_inputs, exact=True, atol=1e-5, **compile_kw):
    """Compile ``Fn(f)`` for ``make_inputs(0)``; match PyTorch on seeds 0 and 1 (bitwise when ``exact``)."""
    model = f if isinstance(f, nn.Module) else Fn(f)
    model = model.eval()
    fn = tg.compile(model, make_inputs(0), **compile_kw)
    for seed in (0, 1):
        inputs = make_inputs(seed)
        with torch.no_grad():
            expected = model(*inputs)
        got = fn(*inputs)
        expected, got = (expected, got) if isinstance(expected, tuple) else ((expected,), (got,))
        for g, e in zip(got, expected, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
            g = g.cpu()  # device="cuda": the outputs stay on the GPU
            if exact:
                np.testing.assert_array_equal(g.numpy(), e.numpy())
            else:
                np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=atol)
    return fn


def distinct(*shape):
    """Floats without ties (so that every order is torch's), fresh per seed."""
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        n = int(np.prod(shape))
        return (torch.randperm(n, generator=g).float().reshape(shape) / n - 0.5,)
    return make


# --------------------------------------------------------------------------- topk and sort


@pytest.mark.parametrize("k, dim, largest", [(2, -1, True), (3, 0, True), (1, 1, False), (5, -1, False), (8, -1, True)])
def test_topk(k, dim, largest):
    fn = check(lambda m, x: tuple(torch.topk(x * 1.0, k, dim=dim, largest=largest)), distinct(6, 8))
    assert "tg.argtopk" in fn.ir("tg")


def test_topk_of_integers_and_of_the_router():
    """Integers, and the router's pattern: softmax, topk, renormalised weights."""
    def ints(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randperm(40, generator=g).reshape(5, 8) - 20,)

    check(lambda m, x: tuple(torch.topk(x + 0, 3)), ints)

    def route(m, x):
        p = torch.softmax(x, dim=-1)
        v, i = torch.topk(p, 2, dim=-1)
        return v / v.sum(-1, keepdim=True), i

    check(route, distinct(9, 4), exact=False, atol=1e-6)


def test_topk_ties_go_to_the_lower_position():
    """torch leaves the order of ties unspecified; tensor_graphs takes the lower position first."""
    fn = tg.compile(Fn(lambda m, x: torch.topk(x + 0, 3)[1]), (torch.zeros(2, 6),))
    x = torch.tensor([[1.0, 2, 2, 0, 2, 1], [0, 0, 0, 0, 0, 0]])
    assert fn(x).tolist() == [[1, 2, 4], [0, 1, 2]]


@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable(descending):
    """Expert ids with many repeats: equal values keep their order (torch's CPU sort, stable=True)."""
    def ids(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(0, 4, (37,), generator=g),)

    fn = check(lambda m, x: tuple(torch.sort(x + 0, stable=True, descending=descending)), ids)
    assert "tg.argtopk" in fn.ir("tg")
    # torch's default sort may order ties otherwise: the same values, positions that sort
    (x,) = ids(1)
    values, positions = tg.compile(Fn(lambda m, x: tuple(torch.sort(x + 0, descending=descending))), ids(0))(x)
    assert torch.equal(values, torch.sort(x, descending=descending).values) and torch.equal(x[positions], values)
    assert sorted(positions.tolist()) == list(range(37))


@pytest.mark.parametrize("descending", [False, True])
def test_sort_floats_with_nan_and_along_dim0(descending):
    """NaN sorts last ascending, first descending; -0.0 and 0.0 tie (stable)."""
    def values(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(-3, 4, (7, 3), generator=g).float()
        x[2, 0] = x[5, 1] = float("nan")
        x[1, 2], x[4, 2] = -0.0, 0.0
        return (x,)

    check(lambda m, x: tuple(torch.sort(x * 1.0, dim=0, descending=descending, stable=True)), values)


# --------------------------------------------------------------------------- histc


def test_histc_counts_like_torch():
    """Values on the edges, past both ends, NaN; expert ids as transformers counts them."""
    def values(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.rand(50, generator=g) * 5 - 1  # [-1, 4)
        x[:6] = torch.tensor([0.0, 3.0, 0.75, 1.5, 2.25, float("nan")])
        return (x,)

    fn = check(lambda m, x: torch.histc(x * 1.0, bins=4, min=0, max=3), values)
    assert "tg.sum" in fn.ir("tg")

    def ids(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(0, 8, (64,), generator=g),)

    check(lambda m, e: torch.histc(e.float(), bins=8, min=0, max=7), ids)
    check(lambda m, x: torch.histc(x * 1.0, bins=7, min=-0.3, max=0.9), distinct(5, 9))


def test_histc_with_the_data_range_is_an_error():
    with pytest.raises(Exception, match="histc with min 0.0 >= max 0.0"):
        tg.compile(Fn(lambda m, x: torch.histc(x * 1.0, bins=4)), (torch.randn(10),))


# --------------------------------------------------------------------------- floor_divide


def test_floor_divide_integers_round_toward_minus_infinity():
    def ints(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(-50, 50, (4, 9), generator=g),)

    fn = check(lambda m, x: (x // 4, x // -3, torch.floor_divide(x, torch.tensor([2, -5, 7])[:, None].repeat(1, 3).reshape(-1)[:9])), ints)
    assert "arith.floordivsi" in fn.ir("tg")
    check(lambda m, x: (x.int() // 3, torch.floor_divide(x, -1)), ints)


def test_floor_divide_floats_as_torch():
    """torch's div_floor_floating: 1 // 0.1 is 9, negative operands, zero divisors (inf, nan, -0.0)."""
    def values(seed):
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(40, generator=g) * 10
        b = torch.randn(40, generator=g)
        a[:8] = torch.tensor([1.0, -1.0, 7.5, -7.5, 0.0, 3.0, -0.0, 2.0])
        b[:8] = torch.tensor([0.1, 0.1, -2.0, 2.0, 0.0, 0.0, 5.0, -0.5])
        return a, b

    check(lambda m, a, b: (a // b, torch.floor_divide(a, 0.3), a // -2.5), values)


def test_integer_division_by_run_time_data_checks_for_zero():
    """An integer division by a divisor computed at run time (floor_divide, remainder, fmod, div
    with a rounding mode) is eager's exactly; a zero divisor is a run-time ZeroDivisionError (as
    in torch), a constant zero divisor a refusal by name."""
    g = torch.Generator().manual_seed(5)
    a, b = torch.randint(-9, 10, (6, 5), generator=g), torch.randint(1, 5, (6, 5), generator=g) * torch.tensor([1, -1, 1, -1, 1])
    model = Fn(lambda m, a, b: (a // b, a % b, torch.fmod(a, b), torch.div(a, b, rounding_mode="trunc"),
                                torch.div(a, b, rounding_mode="floor"), torch.remainder(7, b)))
    fn = tg.compile(model, (a, b))
    for got, want in zip(fn(a, b), model(a, b), strict=True):
        assert torch.equal(got, want)
    zero = b.clone()
    zero[2, 3] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError: an integer division by a divisor that is zero"):
        fn(a, zero)
    with pytest.raises(Exception, match="integer floor_divide by zero"):
        tg.compile(Fn(lambda m, a, b: a // torch.zeros_like(a)), (a, b))


# --------------------------------------------------------------------------- index_put and empty_like


def test_inverse_permutation():
    """transformers' ``inv = empty_like(perm); inv[perm] = arange(n)``: empty_like is zeros, the write a tg.put."""
    def perm(seed):
        return (torch.randperm(13, generator=torch.Generator().manual_seed(seed)),)

    def f(m, p):
        inv = torch.empty_like(p)
        inv[p] = torch.arange(p.size(0))
        return inv

    fn = check(f, perm)
    assert "tg.put" in fn.ir("tg")


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    """Rows and elements, negative indices, broadcast values; repeated indices add up with accumulate."""
    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(5, 4, generator=g)
        i = torch.randperm(5, generator=g)[:3] - 2  # distinct, some negative
        j = torch.randint(-4, 4, (3,), generator=g)
        return x, i, j, torch.randn(3, 4, generator=g)

    def f(m, x, i, j, v):
        a = x.index_put((i,), v, accumulate=accumulate)
        b = x.index_put((i, j), v[:, 0] * 2, accumulate=accumulate)
        c = x.index_put((torch.tensor([1, 1, 3]),), torch.tensor(2.0), accumulate=accumulate) if accumulate else x
        return a, b, c

    check(f, inputs)


def test_index_put_out_of_range_is_an_index_error():
    fn = tg.compile(Fn(lambda m, x, i: x.index_put((i,), torch.tensor(1.0))), (torch.zeros(4), torch.tensor([0, 1])))
    with pytest.raises(IndexError, match="index out of range"):
        fn(torch.zeros(4), torch.tensor([0, 4]))


# --------------------------------------------------------------------------- grouped GEMM


def grouped_inputs(groups, rows, k, n, empty=()):
    """x [rows, k], w [groups, k, n], offsets with the groups in ``empty`` holding no rows."""
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        counts = torch.randint(1, 5, (groups,), generator=g)
        for e in empty:
            counts[e] = 0
        counts = (counts.float() / counts.sum() * rows).floor().long()
        counts[-1 if groups - 1 not in empty else 0] += rows - counts.sum()
        offs = torch.cumsum(counts, 0).to(torch.int32)
        return torch.randn(rows, k, generator=g), offs
    return make


@pytest.mark.parametrize("pack_weights", [True, False])
@pytest.mark.parametrize("rows, k, n", [(23, 32, 40), (9, 70, 16), (1, 64, 130), (40, 300, 24)])
def test_grouped_mm_fallback(pack_weights, rows, k, n):
    """transformers' custom op, over weights stored [E, N, K] (read transposed) and [E, K, N];
    empty groups (experts no token chose), groups of one row (a decode step), tails of the
    register tile and of the last panel."""
    torch.manual_seed(0)
    w_nk = nn.Parameter(torch.randn(5, n, k))
    w_kn = nn.Parameter(torch.randn(5, k, n))

    def f(m, x, offs):
        a = torch.ops.transformers.grouped_mm_fallback(x, m.w_nk.transpose(-2, -1), offs=offs)
        b = torch.ops.transformers.grouped_mm_fallback(x, m.w_kn, offs)
        return a, b

    model = Fn(f)
    model.w_nk, model.w_kn = w_nk, w_kn
    fn = check(model, grouped_inputs(5, rows, k, n, empty=(1, 3)), exact=False, atol=1e-4, pack_weights=pack_weights)
    ir = fn.ir("buf")
    assert ("buf.packed_grouped_matmul" in ir) == pack_weights and ("buf.grouped_matmul" in ir) != pack_weights


def test_grouped_mm_rows_past_the_last_group_are_zero_and_bad_offsets_fail():
    torch.manual_seed(0)
    model = Fn(lambda m, x, offs: torch.ops.transformers.grouped_mm_fallback(x, m.w, offs))
    model.w = nn.Parameter(torch.randn(3, 16, 32))
    x = torch.randn(10, 16)
    fn = tg.compile(model, (x, torch.tensor([2, 5, 10], dtype=torch.int32)))
    got = fn(x, torch.tensor([2, 2, 7], dtype=torch.int32))
    with torch.no_grad():
        np.testing.assert_allclose(got.numpy(), model(x, torch.tensor([2, 2, 7], dtype=torch.int32)).numpy(), rtol=1e-5, atol=1e-5)
    assert not got[7:].any()
    for bad in ([3, 2, 7], [2, 5, 11]):
        with pytest.raises(RuntimeError, match="group offsets must be non-decreasing"):
            fn(x, torch.tensor(bad, dtype=torch.int32))


# --------------------------------------------------------------------------- the NumPy evaluator


def test_evaluator_matches_the_kernels_semantics():
    x = np.array([[3.0, np.nan, 3.0, -1.0]], np.float32)
    c = tgd.ConstantOp(dense_from_numpy(x, f32))
    assert evaluate_op(tgd.ArgTopkOp(c.result, 4, 1), [x]).tolist() == [[1, 0, 2, 3]]
    assert evaluate_op(tgd.ArgTopkOp(c.result, 4, 1, largest=False), [x]).tolist() == [[3, 0, 2, 1]]
    base = tgd.ConstantOp(dense_from_numpy(np.zeros(4, np.int64), i64))
    offs = tgd.ConstantOp(dense_from_numpy(np.array([1, 1, 3]), i64))
    put = tgd.PutOp(base.result, offs.result, offs.result, accumulate=True)
    assert evaluate_op(put, [np.zeros(4, np.int64), np.array([1, 1, 3]), np.array([1, 1, 3])]).tolist() == [0, 2, 0, 3]
    w = tgd.ConstantOp(dense_from_numpy(np.ones((2, 3, 2), np.float32), f32))
    o = tgd.ConstantOp(dense_from_numpy(np.array([1, 2]), i64))
    a = tgd.ConstantOp(dense_from_numpy(np.ones((3, 2), np.float32), f32))
    gm = tgd.GroupedMatmulOp(a.result, w.result, o.result, transpose_b=True)
    assert gm.result.type == TensorType(f32, (3, 3))
    assert evaluate_op(gm, [np.ones((3, 2), np.float32), np.ones((2, 3, 2), np.float32), np.array([1, 2])]).tolist() == [[2.0] * 3, [2.0] * 3, [0.0] * 3]


# --------------------------------------------------------------------------- the MoE blocks


def mixtral_block() -> nn.Module:
    """transformers' Mixtral MoE block (hidden 48, 8 experts, top-2, grouped_mm experts), weights N(0, 0.2)."""
    torch.manual_seed(0)
    config = T.MixtralConfig(hidden_size=48, intermediate_size=80, num_local_experts=8, num_experts_per_tok=2)
    config._experts_implementation = "grouped_mm"
    block = T.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock(config)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.2)
    return block.eval()


def tiny_mixtral(layers: int = 2) -> nn.Module:
    """A Mixtral causal LM of ``layers`` layers (vocab 100, hidden 32, 4 experts, top-2), random weights."""
    torch.manual_seed(0)
    config = T.MixtralConfig(vocab_size=100, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                             head_dim=8, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64)
    return T.MixtralForCausalLM(config).eval()


@pytest.mark.parametrize("seq", [1, 7])
def test_mixtral_moe_block_decode_and_prefill(seq):
    """The block alone (8 experts, top-2): one token (a decode step: two experts' GEMVs) and a few."""
    block = mixtral_block()
    fn = check(block, lambda seed: (torch.randn(1, seq, 48, generator=torch.Generator().manual_seed(seed)),), exact=False)
    assert fn.ir("tg").count("tg.grouped_matmul ") == 2 and "tg.argtopk" in fn.ir("tg")


def test_transformers_grouped_experts_are_the_ones_compiled():
    """The grouped_mm experts (transformers' default) are what torch.export sees: its custom op."""
    assert hasattr(torch.ops.transformers, "grouped_mm_fallback") and tmoe.ALL_EXPERTS_FUNCTIONS["grouped_mm"] is tmoe.grouped_mm_experts_forward


def test_mixtral_generates_the_same_tokens_with_a_kv_cache():
    """compile_decoder: the MoE layers in the prefill chunks (right-padded: the padding routes
    too, harmlessly, token by token) and in the one-token decode steps; greedy tokens as
    transformers' generate."""
    model = tiny_mixtral()
    ids = torch.randint(2, 100, (1, 7), generator=torch.Generator().manual_seed(0))
    decoder = tg.compile_decoder(model, max_seq=32, prefill_chunk=8)
    # the routing's kernels take static sizes: the padded chunks, and explain() says why
    assert decoder.explain().startswith("prefill in padded chunks of 8 tokens: a prefill of any length did not compile (")
    got = decoder.generate(ids, max_new_tokens=10)
    expected = model.generate(ids, max_new_tokens=10, do_sample=False)
    assert torch.equal(torch.as_tensor(got).reshape(1, -1), expected)
