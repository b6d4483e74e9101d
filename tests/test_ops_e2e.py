"""Every op of issue 3 through every level (aten -> tg -> buf -> LLVM) in a tiny torch module.

Each case compiles with `tensor_graphs.compile`, runs twice (new data the second time, so the
arena and weights are reused) and matches PyTorch in fp32 at rtol 1e-4, atol 1e-5.

Mask-building ops (arange, full, ones, triu, comparisons, bitwise ops) must fold away when they
only see constants; issue 3 makes them fold-only, so one that depends on a runtime input must
make compile() fail with an error that names it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_graphs as tg

RTOL, ATOL = 1e-4, 1e-5


class Fn(nn.Module):
    """A module whose forward is ``f(*inputs)``; ``modules`` become submodules (their weights bind)."""

    def __init__(self, f, **modules: nn.Module):
        super().__init__()
        self.f = f
        for name, m in modules.items():
            self.add_module(name, m)

    def forward(self, *xs):
        return self.f(self, *xs)


def randn(*shape, seed=0, scale=1.0, positive=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * scale
    return x.abs() + 0.1 if positive else x


def check(model: nn.Module, make_inputs, rtol=RTOL, atol=ATOL):
    """Compile ``model`` for ``make_inputs(0)`` and match PyTorch on seeds 0 and 1."""
    model = model.eval()
    fn = tg.compile(model, make_inputs(0))
    for seed in (0, 1):
        inputs = make_inputs(seed)
        with torch.no_grad():
            expected = model(*inputs)
        got = fn(*inputs)
        if isinstance(expected, torch.Tensor):
            expected, got = (expected,), (got,)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert tuple(g.shape) == tuple(e.shape), (g.shape, e.shape)
            np.testing.assert_allclose(g.numpy(), e.numpy().astype(np.float32), rtol=rtol, atol=atol)
    return fn


def x_only(*shape, **kw):
    return lambda seed: (randn(*shape, seed=seed, **kw),)


def two(shape_a, shape_b, **kw):
    return lambda seed: (randn(*shape_a, seed=seed, **kw), randn(*shape_b, seed=seed + 100, **kw))


def causal_bool(s: int) -> torch.Tensor:
    return torch.triu(torch.ones(s, s), 1).bool()


# --------------------------------------------------------------------------- unary / elementwise

UNARY = [
    pytest.param(lambda m, x: torch.softmax(x, dim=-1), x_only(2, 5, 9, scale=3), id="softmax-last"),
    pytest.param(lambda m, x: F.softmax(x, dim=1), x_only(2, 5, 9, scale=3), id="softmax-dim1"),
    pytest.param(lambda m, x: x.softmax(0), x_only(4, 7), id="softmax-dim0"),
    pytest.param(lambda m, x: F.log_softmax(x, dim=-1), x_only(3, 11, scale=3), id="log_softmax-last"),
    pytest.param(lambda m, x: torch.log_softmax(x, dim=0), x_only(6, 4), id="log_softmax-dim0"),
    pytest.param(lambda m, x: F.gelu(x), x_only(3, 33, scale=3), id="gelu-erf"),
    pytest.param(lambda m, x: F.gelu(x, approximate="tanh"), x_only(3, 33, scale=3), id="gelu-tanh"),
    pytest.param(
        lambda m, x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))),
        x_only(4, 65, scale=3),
        id="gelu-tanh-by-hand",
    ),
    pytest.param(lambda m, x: x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))), x_only(4, 65, scale=3), id="gelu-erf-by-hand"),
    pytest.param(lambda m, x: torch.tanh(x), x_only(5, 17, scale=4), id="tanh"),
    pytest.param(lambda m, x: torch.exp(x), x_only(5, 17, scale=3), id="exp"),
    pytest.param(lambda m, x: x**2, x_only(5, 17), id="pow-2"),
    pytest.param(lambda m, x: torch.pow(x, 3.0), x_only(5, 17), id="pow-3"),
    pytest.param(lambda m, x: x**0.5, x_only(5, 17, positive=True), id="pow-half"),
    pytest.param(lambda m, x: torch.pow(x, -1.5), x_only(5, 17, positive=True), id="pow-neg-frac"),
    pytest.param(lambda m, x: torch.sqrt(x), x_only(5, 17, positive=True), id="sqrt"),
    pytest.param(lambda m, x: torch.rsqrt(x), x_only(5, 17, positive=True), id="rsqrt"),
    pytest.param(lambda m, x: -x, x_only(5, 17), id="neg"),
    pytest.param(lambda m, x: torch.neg(x) * torch.exp(-x) + torch.tanh(x) ** 2, x_only(3, 129), id="elementwise-chain"),
    pytest.param(lambda m, x: F.dropout(x, p=0.3, training=False) * 2, x_only(3, 8), id="dropout-functional-eval"),
    pytest.param(lambda m, x: m.drop(x) + 1, x_only(3, 8), id="dropout-module-eval"),
    pytest.param(lambda m, x: x.to(torch.float32) * 3, x_only(2, 6), id="to-same-dtype"),
    pytest.param(lambda m, x: x.float() - 1, x_only(2, 6), id="float"),
]


@pytest.mark.parametrize("f,inputs", UNARY)
def test_unary_and_elementwise(f, inputs):
    check(Fn(f, drop=nn.Dropout(0.5)), inputs)


# --------------------------------------------------------------------------- reductions

REDUCTIONS = [
    pytest.param(lambda m, x: x.mean(-1, keepdim=True), x_only(3, 4, 10), id="mean-last-keepdim"),
    pytest.param(lambda m, x: x.mean(dim=(0, 2)), x_only(3, 4, 10), id="mean-dims-0-2"),
    pytest.param(lambda m, x: torch.mean(x, dim=1), x_only(3, 4, 10), id="mean-dim1"),
    pytest.param(lambda m, x: x.sum(-1), x_only(3, 4, 10), id="sum-last"),
    pytest.param(lambda m, x: x.sum(dim=(1, 2), keepdim=True), x_only(3, 4, 10), id="sum-dims-keepdim"),
    pytest.param(lambda m, x: x.sum(0) * 2, x_only(3, 4, 10), id="sum-dim0"),
    pytest.param(lambda m, x: x.amax(-1), x_only(3, 4, 10), id="amax-last"),
    pytest.param(lambda m, x: torch.amax(x, dim=(0, 1), keepdim=True), x_only(3, 4, 10), id="amax-dims-keepdim"),
    pytest.param(lambda m, x: x - x.amax(1, keepdim=True), x_only(3, 4, 10), id="amax-keepdim-broadcast"),
    pytest.param(
        lambda m, x: (x - x.mean(-1, keepdim=True)) / torch.sqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + 1e-5),
        x_only(4, 7, 32),
        id="layer-norm-by-hand",
    ),
    pytest.param(lambda m, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), x_only(4, 32), id="rms-norm-by-hand"),
]


@pytest.mark.parametrize("f,inputs", REDUCTIONS)
def test_reductions(f, inputs):
    check(Fn(f), inputs)


# --------------------------------------------------------------------------- layer norm


@pytest.mark.parametrize(
    "module,shape",
    [
        pytest.param(nn.LayerNorm(16), (3, 16), id="affine-2d"),
        pytest.param(nn.LayerNorm(32, eps=1e-6), (2, 5, 32), id="affine-3d-eps1e-6"),
        pytest.param(nn.LayerNorm(24, elementwise_affine=False), (2, 3, 24), id="no-affine"),
        pytest.param(nn.LayerNorm(7, bias=False), (4, 7), id="no-bias"),
        pytest.param(nn.LayerNorm(768), (1, 128, 768), id="gpt2-width"),
    ],
)
def test_layer_norm(module, shape):
    torch.manual_seed(0)
    with torch.no_grad():
        if module.weight is not None:
            module.weight.normal_(1.0, 0.2)
        if module.bias is not None:
            module.bias.normal_(0.0, 0.2)
    check(Fn(lambda m, x: m.ln(x), ln=module), x_only(*shape, scale=2))


def test_functional_layer_norm_with_weight_and_bias_inputs():
    f = lambda m, x, w: F.layer_norm(x, (12,), w, w * 0.5, 1e-5)  # noqa: E731
    check(Fn(f), two((3, 12), (12,)))


# --------------------------------------------------------------------------- embedding


def ids_input(batch, seq, vocab):
    return lambda seed: (torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed)),)


@pytest.mark.parametrize(
    "vocab,dim,batch,seq",
    [pytest.param(10, 4, 1, 1, id="tiny"), pytest.param(100, 16, 2, 7, id="batch2"), pytest.param(1000, 64, 1, 33, id="vocab1000")],
)
def test_embedding(vocab, dim, batch, seq):
    torch.manual_seed(0)
    check(Fn(lambda m, ids: m.emb(ids), emb=nn.Embedding(vocab, dim)), ids_input(batch, seq, vocab))


def test_embedding_plus_positions():
    """GPT-2's input: token embedding + position embedding of arange(seq) (the arange folds)."""
    torch.manual_seed(0)

    def f(m, ids):
        pos = torch.arange(ids.shape[1], dtype=torch.long).unsqueeze(0)
        return m.wte(ids) + m.wpe(pos)

    check(Fn(f, wte=nn.Embedding(50, 8), wpe=nn.Embedding(16, 8)), ids_input(2, 11, 50))


def test_functional_embedding_with_weight_input():
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, 9, (3, 4), generator=g), torch.randn(9, 5, generator=g)

    check(Fn(lambda m, ids, w: F.embedding(ids, w) * 2), make)


# --------------------------------------------------------------------------- views and data movement

DATA_MOVEMENT = [
    pytest.param(lambda m, x: x[:, 1:5] + 1, x_only(3, 8), id="slice-inner"),
    pytest.param(lambda m, x: x[1:3] * 2, x_only(4, 8), id="slice-outer-contiguous"),
    pytest.param(lambda m, x: x[..., 2:] - x[..., :-2], x_only(2, 3, 9), id="slice-last-two"),
    pytest.param(lambda m, x: x[:, ::2] + 0, x_only(3, 8), id="slice-step2"),
    pytest.param(lambda m, x: x[:, -3:] * 1.5, x_only(3, 8), id="slice-negative-start"),
    pytest.param(lambda m, x: x[:, 2] * 3, x_only(3, 5, 4), id="select-dim1"),
    pytest.param(lambda m, x: x.select(0, 1) + 1, x_only(3, 5, 4), id="select-dim0"),
    pytest.param(lambda m, x: x[..., -1] + 1, x_only(3, 5, 4), id="select-last-negative"),
    pytest.param(lambda m, x: x.narrow(1, 2, 3) * 2, x_only(3, 8, 2), id="narrow"),
    pytest.param(lambda m, x: x.narrow(0, 1, 2) + 1, x_only(3, 8, 2), id="narrow-outer"),
    pytest.param(
        lambda m, x: (lambda a, b, c: a * 2 + b - c)(*x.split(4, dim=-1)), x_only(2, 3, 12), id="split-last-equal"
    ),
    pytest.param(
        lambda m, x: (lambda a, b: torch.cat([b, a * 3], dim=1))(*torch.split(x, [2, 5], dim=1)),
        x_only(3, 7),
        id="split-sizes-then-cat",
    ),
    pytest.param(lambda m, x: sum(c * (i + 1) for i, c in enumerate(x.chunk(3, dim=0))), x_only(6, 5), id="chunk-dim0"),
    pytest.param(lambda m, x, y: torch.cat([x, y], dim=1), two((2, 3, 4), (2, 5, 4)), id="cat-dim1"),
    pytest.param(lambda m, x, y: torch.cat([x, y, x], dim=-1), two((2, 3), (2, 4)), id="cat-last-three"),
    pytest.param(lambda m, x, y: torch.cat((x, y), 0) * 2, two((1, 6), (3, 6)), id="cat-dim0"),
    pytest.param(lambda m, x, y: x.expand(4, -1, -1) + y, two((1, 3, 5), (4, 3, 5)), id="expand-leading"),
    pytest.param(lambda m, x, y: x.expand(2, 3, 5) * y, two((2, 1, 5), (2, 3, 5)), id="expand-middle"),
    pytest.param(lambda m, x, y: x.unsqueeze(1).expand(-1, 4, -1).reshape(8, 6) - y, two((2, 6), (8, 6)), id="expand-then-reshape"),
    pytest.param(lambda m, x, y: y.type_as(x) + x, two((3, 4), (3, 4)), id="type_as"),
]


@pytest.mark.parametrize("f,inputs", DATA_MOVEMENT)
def test_data_movement(f, inputs):
    check(Fn(f), inputs)


def test_to_float_of_int64_input():
    def make(seed):
        return (torch.randint(-50, 50, (3, 7), generator=torch.Generator().manual_seed(seed)),)

    check(Fn(lambda m, ids: ids.to(torch.float32) * 0.5 + 1), make)


def test_split_with_several_outputs():
    check(Fn(lambda m, x: tuple(c * 2 for c in x.split(3, dim=1))), x_only(2, 9))


def test_contiguous_slice_is_a_zero_copy_view():
    """A contiguous slice of a computed tensor aliases it: no extra buffer, no copy kernel."""
    f = lambda m, x: torch.tanh(x)[1:3] * 2  # noqa: E731
    fn = check(Fn(f), x_only(4, 16))
    # the arena holds tanh(x) (4x16 f32 = 256 bytes) and nothing slice-sized besides
    assert fn.memory.arena_bytes <= 256, fn.ir("buf")


# --------------------------------------------------------------------------- where / masked_fill / mask folding

MASKS = [
    pytest.param(lambda m, x: x.masked_fill(causal_bool(x.shape[-1]), float("-inf")).softmax(-1), x_only(2, 6, 6), id="masked_fill-causal-softmax"),
    pytest.param(lambda m, x: x.masked_fill(causal_bool(x.shape[-1]), 0.0), x_only(6, 6), id="masked_fill-zero"),
    pytest.param(lambda m, x, y: torch.where(causal_bool(6), x, y), two((2, 6, 6), (2, 6, 6)), id="where-const-mask"),
    pytest.param(lambda m, x: torch.where(torch.tril(torch.ones(5, 5)) == 0, -1e9, x), x_only(5, 5), id="where-tril-eq-scalar"),
    pytest.param(
        lambda m, x: x + torch.full((7, 7), float("-inf")).triu(1),
        x_only(3, 7, 7),
        id="additive-mask-full-triu",
    ),
    pytest.param(
        lambda m, x: x.masked_fill(
            (torch.arange(8)[:, None] < torch.arange(8)[None, :]) | (torch.arange(8)[None, :] > 6), -5.0
        ),
        x_only(2, 8, 8),
        id="arange-compare-bitwise-or",
    ),
    pytest.param(
        lambda m, x: x * ((torch.arange(8)[None, :] <= torch.arange(8)[:, None]) & torch.ones(8, 8, dtype=torch.bool)).to(x.dtype),
        x_only(8, 8),
        id="arange-compare-bitwise-and-to-float",
    ),
    pytest.param(lambda m, x: x * causal_bool(4).type_as(x), x_only(3, 4, 4), id="bool-mask-type_as"),
]


@pytest.mark.parametrize("f,inputs", MASKS)
def test_masks_fold_and_apply(f, inputs):
    fn = check(Fn(f), inputs)
    tg_ir = fn.ir("tg")
    assert "aten." not in tg_ir, tg_ir


def ids_and_mask(seed):
    """Token ids with 1 as padding at the ends of rows, a float tensor, and a 0/1 int mask."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 9, (3, 7), generator=g)
    ids[0, 5:] = 1
    ids[2, :2] = 1
    x = torch.randn(3, 7, generator=g)
    x[1, 3] = float("nan")
    return ids, x, (ids != 1).long()


#: comparisons and boolean logic on run-time data (issue 13): one scalar body each, or fused
RUN_TIME_MASKS = [
    pytest.param(lambda m, x: torch.where(x > 0, x, 0.1 * x), x_only(4, 5), id="where-on-compare-of-input"),
    pytest.param(lambda m, x: x.masked_fill(x < 0, 0.0), x_only(4, 5), id="masked_fill-on-compare-of-input"),
    # out of place, masked_fill broadcasts self and the mask together (Falcon's ALiBi: [1, H, 1, S] by [1, 1, S, S])
    pytest.param(lambda m, x, y: x.masked_fill(y > 0, -1.0), two((1, 4, 1, 7), (1, 1, 7, 7)), id="masked_fill-broadcasts-self"),
    pytest.param(lambda m, x: x * ((x > 0) & (x < 1)).float(), x_only(4, 5), id="bitwise-and-of-input"),
    pytest.param(lambda m, x, y: (x >= y) | (x <= -y), two((3, 5), (5,)), id="compare-tensors-broadcast-bool-out"),
    pytest.param(lambda m, x, y: torch.logical_not(x == torch.maximum(x, y)) ^ (x != x), two((3, 5), (3, 5)), id="eq-ne-not-xor"),
    pytest.param(lambda m, ids, x, mask: (ids.ne(1).long() * mask), ids_and_mask, id="int-ne-times-int"),
    pytest.param(lambda m, ids, x, mask: torch.where(ids >= 4.5, x, -x), ids_and_mask, id="int-vs-float-scalar"),
    pytest.param(lambda m, ids, x, mask: (x != x) | (x == 0.0), ids_and_mask, id="nan-ne-itself"),
    pytest.param(lambda m, ids, x, mask: x.masked_fill(~mask.bool(), -1e9), ids_and_mask, id="bitwise-not-bool"),
    pytest.param(lambda m, ids, x, mask: torch.logical_and(mask, ids - 5).float() + torch.logical_or(ids > 7, x > 0), ids_and_mask, id="logical-on-ints"),
    pytest.param(lambda m, ids, x, mask: ((ids & 6) | ~mask) ^ (ids ^ 3), ids_and_mask, id="bitwise-on-ints"),
    pytest.param(lambda m, ids, x, mask: torch.cumsum(ids.ne(1).int(), dim=1).type_as(mask) * mask + 1, ids_and_mask, id="roberta-position-ids"),
    pytest.param(lambda m, ids, x, mask: torch.cumsum(mask, 0), ids_and_mask, id="cumsum-int-dim0"),
    pytest.param(lambda m, ids, x, mask: torch.cumsum(ids > 4, -1), ids_and_mask, id="cumsum-bool-to-int64"),
    pytest.param(lambda m, ids, x, mask: torch.logical_xor(ids > 4, x) ^ (mask.bool() ^ True), ids_and_mask, id="xor-on-bools"),
    pytest.param(lambda m, ids, x, mask: torch.triu(x, 1) + torch.tril(ids, -1) * 2, ids_and_mask, id="triu-tril-of-input"),
]


@pytest.mark.parametrize("f,inputs", RUN_TIME_MASKS)
def test_masks_on_run_time_data(f, inputs):
    """Exact: a comparison or a boolean op either matches or it does not (NaN compares unequal)."""
    fn = check(Fn(f), inputs, rtol=0, atol=0)
    assert "aten." not in fn.ir("tg")
    with torch.no_grad():
        assert fn(*inputs(0)).dtype == Fn(f)(*inputs(0)).dtype


# --------------------------------------------------------------------------- scaled_dot_product_attention


def qkv(b, h, sq, sk, d, dv=None):
    dv = dv or d

    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(b, h, sq, d, generator=g), torch.randn(b, h, sk, d, generator=g), torch.randn(b, h, sk, dv, generator=g)

    return make


SDPA = [
    pytest.param(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v), qkv(1, 2, 5, 5, 8), id="plain"),
    pytest.param(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), qkv(2, 3, 9, 9, 16), id="causal"),
    pytest.param(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), qkv(1, 1, 1, 1, 4), id="causal-seq1"),
    pytest.param(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), qkv(1, 4, 130, 130, 32), id="causal-seq130-tiles"),
    pytest.param(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3), qkv(1, 2, 6, 6, 8), id="scale"),
    pytest.param(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125), qkv(1, 2, 7, 7, 8), id="causal-scale"),
    pytest.param(
        lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=causal_bool(q.shape[-2]).logical_not()),
        qkv(1, 2, 8, 8, 8),
        id="bool-mask",
    ),
    pytest.param(
        lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.full((8, 8), float("-inf")).triu(1)),
        qkv(2, 2, 8, 8, 8),
        id="float-mask",
    ),
    pytest.param(
        lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.arange(6.0)[None, :] * -0.5, scale=0.2),
        qkv(1, 3, 4, 6, 8, 5),
        id="float-mask-cross-attention-scale",
    ),
    pytest.param(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v), qkv(2, 2, 3, 11, 8, 4), id="cross-attention-dv"),
    pytest.param(
        lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m.bias.weight),
        qkv(1, 2, 5, 5, 8),
        id="mask-from-parameter",
    ),
]


class _Bias(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(3)), requires_grad=False)


@pytest.mark.parametrize("f,inputs", SDPA)
def test_scaled_dot_product_attention(f, inputs):
    fn = check(Fn(f, bias=_Bias()), inputs)
    tg_ir = fn.ir("tg")
    assert tg_ir.count("tg.attention") == 1 and "tg.softmax" not in tg_ir, tg_ir


def test_sdpa_long_causal_never_materialises_scores():
    """Flash-style attention: the arena holds no seq x seq score matrix (4 heads x 512 x 512 x 4 B = 4 MiB)."""
    fn = check(Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)), qkv(1, 4, 512, 512, 16), atol=1e-4)
    scores_bytes = 4 * 512 * 512 * 4
    assert fn.memory.arena_bytes < scores_bytes // 4, (fn.memory, fn.ir("buf"))


@pytest.mark.parametrize("shape,dim", [((5,), 0), ((3, 37), 1), ((4, 9, 33), 1), ((4, 9, 33), 0), ((2, 1, 3), 1)])
def test_cumsum_float(shape, dim):
    """f32 adds in order, like torch's CPU scan: 1e-5 relative covers the rest of the rounding."""
    fn = check(Fn(lambda m, x: torch.cumsum(x * 2, dim)), x_only(*shape), rtol=1e-5, atol=1e-5)
    assert "tg.cumsum" in fn.ir("tg")


# --------------------------------------------------------------------------- indexing and gather by offsets (tg.take)


def table_and_ids(seed):
    """x [4, 6, 5]; i [3, 2] in [-6, 6) (dim 1, negatives wrap); j [3, 1] in [-4, 4) (dim 0); k [3, 2] in [0, 5) (dim 2)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 6, 5, generator=g)
    return x, torch.randint(-6, 6, (3, 2), generator=g), torch.randint(-4, 4, (3, 1), generator=g), torch.randint(0, 5, (3, 2), generator=g)


TAKES = [
    pytest.param(lambda m, x, i, j, k: x[:, i], table_and_ids, id="run-time-index-middle-dim-negative-wraps"),
    pytest.param(lambda m, x, i, j, k: x[j, i], table_and_ids, id="run-time-two-adjacent-indices"),
    pytest.param(lambda m, x, i, j, k: x[j, :, k], table_and_ids, id="run-time-non-adjacent-indices-go-first"),
    pytest.param(lambda m, x, i, j, k: x[torch.arange(4)[:, None], :, torch.tensor([4, 0, 2])], table_and_ids, id="constant-indices-on-run-time-data"),
    pytest.param(lambda m, x, i, j, k: torch.gather(x, 1, k[None, :, :1].expand(4, 3, 5)), table_and_ids, id="gather-dim1"),
    pytest.param(lambda m, x, i, j, k: torch.gather(x, -1, k[None].expand(4, 3, 2)), table_and_ids, id="gather-last-dim"),
]


@pytest.mark.parametrize("f,inputs", TAKES)
def test_take(f, inputs):
    """Exact: a gather copies elements."""
    fn = check(Fn(f), inputs, rtol=0, atol=0)
    assert "tg.take" in fn.ir("tg")


def test_padding_mask_read_by_arange_indices():
    """transformers' mask functions read ``mask[batch_idx, kv_idx]`` with arange indices, then
    combine it with other masks: every piece runs on the run-time mask."""

    def f(m, x, mask):
        b = torch.arange(2)[:, None, None, None]
        kv = torch.arange(7)[None, None, None, :]
        q = torch.arange(7)[None, None, :, None]
        allowed = mask.bool()[b, kv] & (kv <= q)
        return x.masked_fill(~allowed, -1e9).softmax(-1)

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        mask = torch.ones(2, 7, dtype=torch.long)
        mask[0, :3] = 0
        return torch.randn(2, 3, 7, 7, generator=g), mask

    fn = check(Fn(f), inputs, rtol=1e-6, atol=1e-6)
    assert "tg.take" in fn.ir("tg")


def test_index_out_of_range_at_run_time_is_an_error_not_a_read():
    x, i, _, _ = table_and_ids(0)
    fn = tg.compile(Fn(lambda m, x, i: x[:, i]).eval(), (x, i))
    for bad in (6, -7):  # 6 * 5 + ... would still land inside x: the offset is made out of range
        with pytest.raises(Exception, match="index out of range"):
            fn(x, torch.full_like(i, bad))
    np.testing.assert_array_equal(fn(x, i).numpy(), x[:, i].numpy())  # still fine afterwards
    gather = tg.compile(Fn(lambda m, x, k: torch.gather(x, 2, k)).eval(), (x, torch.zeros(4, 6, 2, dtype=torch.long)))
    with pytest.raises(Exception, match="index out of range"):  # torch.gather does not wrap negatives either
        gather(x, torch.full((4, 6, 2), -1))


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda m, x, y: torch.clamp(x, -0.5, 0.7) + torch.clamp(y, min=0.1), id="clamp-scalars"),
        pytest.param(lambda m, x, y: torch.clamp(x, max=y), id="clamp-tensor-max"),
        pytest.param(lambda m, x, y: torch.nn.functional.hardtanh(x) + torch.nn.functional.relu6(y * 4), id="hardtanh-relu6"),
        pytest.param(lambda m, x, y: torch.max(x, y) - torch.min(x, y), id="max-min-other"),
    ],
)
def test_clamps(f):
    check(Fn(f), two((3, 5), (3, 5)), rtol=0, atol=0)


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda m, x, y: x.repeat(2, 3) + 0, id="repeat"),
        pytest.param(lambda m, x, y: y.repeat(2, 1, 2), id="repeat-adds-a-dim"),
        pytest.param(lambda m, x, y: torch.repeat_interleave(x, 2, dim=1) * 2, id="repeat_interleave-dim"),
        pytest.param(lambda m, x, y: torch.repeat_interleave(x, 3), id="repeat_interleave-flat"),
        pytest.param(lambda m, x, y: torch.stack([x, y, x * y], dim=-1), id="stack-last"),
        pytest.param(lambda m, x, y: torch.stack([x, y], dim=0) + y.expand_as(x), id="stack-first-expand_as"),
        pytest.param(lambda m, x, y: torch.baddbmm(x[None], x[None], y[None].transpose(1, 2), beta=0.5, alpha=2.0), id="baddbmm"),
    ],
)
def test_tiling_and_stacking(f):
    check(Fn(f), two((3, 3), (3, 3)), rtol=1e-6, atol=1e-6)


def with_specials(seed):
    """Two [3, 5] inputs; x holds a zero, a NaN, halves (ceil/floor edge cases) and negatives."""
    x, y = two((3, 5), (3, 5))(seed)
    x[0, 0], x[0, 1], x[1, 2], x[2, 3] = 0.0, float("nan"), -2.5, 1.5
    return x, y


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda m, x, y: torch.sign(x) * 2, id="sign-of-zero-and-nan-is-zero"),
        pytest.param(lambda m, x, y: torch.ceil(x * 3) + torch.floor(y * 3), id="ceil-floor"),
        pytest.param(lambda m, x, y: x.T * 2 + y.T, id="numpy_T"),
        pytest.param(lambda m, x, y: torch.roll(x, 2, 1) + torch.roll(y, (-1, 7), (0, 1)), id="roll-dims"),
        pytest.param(lambda m, x, y: torch.roll(x, 4), id="roll-flat"),
        pytest.param(lambda m, x, y: torch.nn.functional.pad(x, (1, 2)) * 2, id="pad-last-dim"),
        pytest.param(lambda m, x, y: torch.nn.functional.pad(y, (0, 1, 2, 0), value=-3.0) + 1, id="pad-two-dims-value"),
        pytest.param(lambda m, x, y: torch.nn.functional.pad(y, (-1, 2)) + 1, id="pad-negative-crops"),
    ],
)
def test_sign_rounding_roll_pad(f):
    """Exact: these move or round values (NaN compares equal to NaN here)."""
    check(Fn(f), with_specials, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_that_repeat_the_input(mode):
    """Exact (more shapes in tests/test_vision_ops.py)."""
    check(Fn(lambda m, x, y: torch.nn.functional.pad(x, (1, 2), mode=mode)), with_specials, rtol=0, atol=0)


def test_normalize_is_a_2_norm_and_clamp_min():
    check(Fn(lambda m, x, y: torch.nn.functional.normalize(x, dim=1) + torch.linalg.vector_norm(y, dim=(0, 1), keepdim=True)), two((3, 5), (3, 5)), rtol=1e-6, atol=1e-6)
