"""Custom pre-LN transformer blocks match PyTorch in fp32 (rtol 1e-4, atol 1e-4).

The attention inside the block is written four ways that users actually write:

- ``naive``: ``q @ k.transpose(-2, -1) / sqrt(d)``, ``masked_fill`` with a causal mask built from
  ``torch.triu(torch.ones(S, S), 1).bool()``, ``torch.softmax``, ``@ v``;
- ``softmax_additive``: ``F.softmax`` over scores plus an additive ``-inf`` mask;
- ``sdpa_causal``: ``F.scaled_dot_product_attention(..., is_causal=True)``;
- ``sdpa_mask``: ``F.scaled_dot_product_attention(..., attn_mask=<bool causal mask>)``.

Each block is ``x + drop(attn(ln1(x)))`` then ``x + drop(mlp(ln2(x)))`` with ``nn.LayerNorm``,
``nn.GELU`` (erf or tanh), dropout (eval: identity). Every form must become one `tg.attention`
per block with no softmax left at the tg level.
"""

from __future__ import annotations

import functools
import math
import re
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_graphs as tg

RTOL, ATOL = 1e-4, 1e-4


def attention_naive(q, k, v):
    s = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.triu(torch.ones(s, s), 1).bool()
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention_softmax_additive(q, k, v):
    s = q.shape[-2]
    mask = torch.full((s, s), float("-inf")).triu(1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1])) + mask
    return torch.matmul(F.softmax(scores, dim=-1), v)


def attention_sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def attention_sdpa_mask(q, k, v):
    s = q.shape[-2]
    keep = torch.ones(s, s, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


ATTENTION = {
    "naive": attention_naive,
    "softmax_additive": attention_softmax_additive,
    "sdpa_causal": attention_sdpa_causal,
    "sdpa_mask": attention_sdpa_mask,
}


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, attention: str, gelu: str, fused_qkv: bool, dropout: float = 0.1):
        super().__init__()
        self.heads = heads
        self.attention = ATTENTION[attention]
        self.fused_qkv = fused_qkv
        self.ln1 = nn.LayerNorm(d_model)
        if fused_qkv:
            self.qkv = nn.Linear(d_model, 3 * d_model)
        else:
            self.q = nn.Linear(d_model, d_model)
            self.k = nn.Linear(d_model, d_model)
            self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(approximate=gelu),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def heads_first(self, t: torch.Tensor) -> torch.Tensor:
        b, s, d = t.shape
        return t.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.ln1(x)
        if self.fused_qkv:
            q, k, v = self.qkv(h).split(d, dim=-1)
        else:
            q, k, v = self.q(h), self.k(h), self.v(h)
        a = self.attention(self.heads_first(q), self.heads_first(k), self.heads_first(v))
        a = a.transpose(1, 2).contiguous().view(b, s, d)
        x = x + self.attn_drop(self.proj(a))
        return x + self.mlp(self.ln2(x))


class Stack(nn.Module):
    def __init__(self, depth: int, d_model: int, **kw):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d_model, **kw) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x)


#: (d_model, heads, seq, batch, gelu, depth, fused_qkv)
CONFIGS = {
    "d32-h2-s1-b1-erf": (32, 2, 1, 1, "none", 1, True),
    "d64-h4-s8-b2-tanh": (64, 4, 8, 2, "tanh", 2, False),
    "d128-h8-s33-b1-erf": (128, 8, 33, 1, "none", 1, True),
    "d256-h8-s128-b2-tanh": (256, 8, 128, 2, "tanh", 1, True),
    "d48-h3-s17-b3-erf": (48, 3, 17, 3, "none", 2, False),
}

CASES = [pytest.param(a, c, id=f"{a}-{c}") for a in ATTENTION for c in CONFIGS]


@functools.lru_cache(maxsize=None)
def compiled(attention: str, config: str):
    """(model, input, compiled fn) for one case; compiled once, shared by the tests below."""
    d, heads, seq, batch, gelu, depth, fused_qkv = CONFIGS[config]
    torch.manual_seed(zlib.crc32(f"{attention}/{config}".encode()))
    model = Stack(depth, d, heads=heads, attention=attention, gelu=gelu, fused_qkv=fused_qkv).eval()
    with torch.no_grad():  # non-trivial layer-norm parameters
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.1)
                m.bias.normal_(0.0, 0.1)
    x = torch.randn(batch, seq, d)
    return model, x, tg.compile(model, (x,)), depth


@pytest.mark.parametrize("attention,config", CASES)
def test_block_matches_pytorch(attention, config):
    model, x, fn, _ = compiled(attention, config)
    for inp in (x, torch.randn_like(x) * 2):
        with torch.no_grad():
            expected = model(inp).numpy()
        np.testing.assert_allclose(fn(inp).numpy(), expected, rtol=RTOL, atol=ATOL)


_OP_RE = re.compile(r'^\s*(?:%[^=\n]*=\s*)?"?(tg\.\w+)', re.M)


@pytest.mark.parametrize("attention,config", CASES)
def test_block_attention_is_fused(attention, config):
    _, _, fn, depth = compiled(attention, config)
    ops = _OP_RE.findall(fn.ir("tg"))
    assert ops.count("tg.attention") == depth, f"{ops.count('tg.attention')} tg.attention for {depth} blocks: {sorted(set(ops))}"
    assert "tg.softmax" not in ops, f"unfused softmax: {sorted(set(ops))}"
    assert "tg.gelu" not in ops and "tg.tanh" not in ops and "tg.erf" not in ops, f"GELU not fused: {sorted(set(ops))}"
