"""Attention over sequence-major buffers (`absorb-attention-layouts`): the transposes PyTorch
attention modules put around SDPA become the attention's layout flags, and both back ends read
q, k, v and write the output at those strides.

- the CPU kernel (`buf.attention`) at every combination of the four flags, against a float64
  reference, tolerance as the other attention kernel tests (`test_codegen_nn`: rtol 1e-5, atol
  1e-6);
- a self-attention module (projections, view, transpose, SDPA, transpose back), with grouped
  heads, a mask, a rotary embedding over lower-rank tables, compiled on the CPU and on the Triton
  path (interpreter): no transpose left, the flags set, outputs within 1e-5 of the largest output
  magnitude of PyTorch's (float32 sums in another order).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from tensor_graphs.dialects.shapes import heads_major
from test_codegen_llvm import compile_text, memref, run
from test_codegen_nn import ATOL, RTOL, attention_ref, rand
from tensor_graphs.lowering.tensor_to_buffer.scratch import attention_scratch_elements
from tensor_graphs.target import resolve as resolve_target

FLAGS = ("q_seq_major", "k_seq_major", "v_seq_major", "out_seq_major")


def _stored(shape: tuple[int, ...], seq_major: bool) -> tuple[int, ...]:
    return heads_major(shape, seq_major)  # the swap is its own inverse


def _attention_text(shapes, seq_major, scale, causal, mask_shape=None, ranges=(None, None, None), stored=None) -> str:
    """One buf.attention over buffers stored as ``seq_major`` says; ``shapes`` heads-major (the
    heads read); ``stored``: the buffers' shapes when they hold more heads (``ranges``)."""
    q, k, v = shapes
    out = (*q[:-1], v[-1])
    stored = list(stored) + [_stored(out, seq_major[3])] if stored else [_stored(s, f) for s, f in zip((q, k, v, out), seq_major)]
    ins = stored[:3] + ([mask_shape] if mask_shape is not None else [])
    names = ["%q", "%k", "%v", "%mask"][: len(ins)]
    n = attention_scratch_elements(q, k, v, resolve_target(), 1)
    size = (4 * n + 63) // 64 * 64
    args = ", ".join(f"{a}: {memref(s)}" for a, s in zip(names, ins)) + f", %o: {memref(stored[3])}"
    flags = "".join(f", {name} = true" for name, f in zip(FLAGS, seq_major) if f)
    flags += "".join(f", {name}_heads = array<i64: {r[0]}, {r[1]}>" for name, r in zip("qkv", ranges) if r is not None)
    return f"""
builtin.module attributes {{tg.arena_size = {size} : i64}} {{
  func.func @forward({args}) attributes {{tg.num_outputs = 1 : i64}} {{
    %arena = buf.arena : memref<{size}xi8>
    %s = buf.view %arena[0] : memref<{size}xi8> -> memref<{n}xf32>
    buf.attention ins({", ".join(names)} : {", ".join(memref(s) for s in ins)}) outs(%o, %s : {memref(stored[3])}, memref<{n}xf32>) {{scale = {scale} : f32, causal = {str(causal).lower()}{flags}}}
    func.return
  }}
}}"""


CASES = {
    # name: (B, H, Hkv, Sq, Sk, D, Dv, causal, masked)
    "gqa_causal_blocks": (2, 4, 2, 65, 65, 16, 16, True, False),
    "values_padded_masked": (1, 2, 2, 9, 70, 16, 8, False, True),
    "decode_gqa": (1, 4, 1, 1, 33, 8, 8, True, False),
}


@pytest.mark.parametrize("seq_major", list(itertools.product([False, True], repeat=4)), ids=lambda f: "".join("ST"[x] for x in f))
@pytest.mark.parametrize("case", list(CASES))
def test_cpu_kernel_reads_and_writes_seq_major_buffers(case, seq_major):
    bsz, h, hkv, sq, sk, d, dv, causal, masked = CASES[case]
    q, k, v = rand(bsz, h, sq, d), rand(bsz, hkv, sk, d), rand(bsz, hkv, sk, dv)
    mask = rand(bsz, 1, sq, sk) if masked else None
    scale = 1.0 / np.sqrt(d)
    text = _attention_text((q.shape, k.shape, v.shape), seq_major, scale, causal, None if mask is None else mask.shape)
    stored = [np.ascontiguousarray(np.swapaxes(x, -3, -2)) if f else x for x, f in zip((q, k, v), seq_major)]
    out = run(compile_text(text), stored + ([mask] if mask is not None else []))[0]
    if seq_major[3]:
        out = np.swapaxes(out, -3, -2)
    np.testing.assert_allclose(out, attention_ref(q, k, v, mask, scale, causal), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("seq_major", [(True, True, True, True), (False, False, False, False), (True, False, True, False)],
                         ids=["seq-major", "heads-major", "mixed"])
@pytest.mark.parametrize("case", ["gqa_causal_blocks", "values_padded_masked", "decode_gqa"])
def test_cpu_kernel_reads_a_head_range(case, seq_major):
    """q, k and v each a range of the heads of a wider buffer (q, k, v side by side, as GPT-2's
    c_attn writes them): strides of the buffer, offset of the first head read."""
    bsz, h, hkv, sq, sk, d, dv, causal, masked = CASES[case]
    extra = 3  # heads in the buffers besides the ones read: q reads from head 1, k and v from 2
    ranges = ((1, h), (2, hkv), (2, hkv))
    wide = [rand(bsz, n + extra, s, e) for n, s, e in ((h, sq, d), (hkv, sk, d), (hkv, sk, dv))]
    q, k, v = (x[:, r[0]: r[0] + r[1]] for x, r in zip(wide, ranges))
    mask = rand(bsz, 1, sq, sk) if masked else None
    scale = 1.0 / np.sqrt(d)
    stored = [np.ascontiguousarray(np.swapaxes(x, -3, -2)) if f else x for x, f in zip(wide, seq_major)]
    text = _attention_text((q.shape, k.shape, v.shape), seq_major, scale, causal, None if mask is None else mask.shape,
                           ranges, [x.shape for x in stored])
    out = run(compile_text(text), stored + ([mask] if mask is not None else []))[0]
    if seq_major[3]:
        out = np.swapaxes(out, -3, -2)
    np.testing.assert_allclose(out, attention_ref(q, k, v, mask, scale, causal), rtol=RTOL, atol=ATOL)


def test_a_kv_cache_is_heads_major():
    """An attention over a KV cache with sequence-major keys is rejected by the verifier."""
    text = _attention_text(((1, 2, 1, 8), (1, 2, 16, 8), (1, 2, 16, 8)), (False, True, False, False), 0.3, True)
    text = text.replace("causal = true", "causal = true, kv_cache = true")
    with pytest.raises(Exception, match="heads-major"):
        compile_text(text)


def _rotate_half(x):
    return torch.cat([-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]], dim=-1)


class SelfAttention(torch.nn.Module):
    """The PyTorch way: project, view [B, S, H, D], transpose to [B, H, S, D], SDPA, transpose
    back, project; rope with [S, D] tables (broadcast over batch and heads)."""

    def __init__(self, heads=4, kv_heads=2, head_dim=8, rope=False, causal=True, masked=False, qk_norm=False, fused_qkv=False):
        super().__init__()
        self.fused_qkv = fused_qkv  # GPT-2's c_attn: one projection, split into q, k, v
        self.qkv = torch.nn.Linear(24, (heads + 2 * kv_heads) * head_dim)
        self.qk_norm = qk_norm  # Gemma-3's order: an RMS norm per head after the transpose, then the rope
        self.q_norm, self.k_norm = torch.nn.Parameter(torch.randn(head_dim)), torch.nn.Parameter(torch.randn(head_dim))
        dim = 24
        self.h, self.hkv, self.d = heads, kv_heads, head_dim
        self.rope, self.causal, self.masked = rope, causal, masked
        self.q = torch.nn.Linear(dim, heads * head_dim)
        self.k = torch.nn.Linear(dim, kv_heads * head_dim)
        self.v = torch.nn.Linear(dim, kv_heads * head_dim)
        self.o = torch.nn.Linear(heads * head_dim, dim)
        self.register_buffer("freq", torch.linspace(0.1, 1.0, head_dim), persistent=False)

    def forward(self, x, mask):
        b, s, _ = x.shape
        if self.fused_qkv:
            q, k, v = self.qkv(x).split([self.h * self.d, self.hkv * self.d, self.hkv * self.d], dim=2)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(b, s, self.h, self.d).transpose(1, 2)
        k = k.view(b, s, self.hkv, self.d).transpose(1, 2)
        v = v.view(b, s, self.hkv, self.d).transpose(1, 2)
        if self.qk_norm:
            q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * self.q_norm
            k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6) * self.k_norm
        if self.rope:
            angle = torch.arange(s, dtype=torch.float32)[:, None] * self.freq[None, :]
            cos, sin = torch.cos(angle), torch.sin(angle)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        y = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask if self.masked else None, is_causal=self.causal, enable_gqa=self.hkv != self.h)
        return self.o(y.transpose(1, 2).reshape(b, s, self.h * self.d))


MODULES = {
    "gqa_causal": dict(),
    "rope_gqa_causal": dict(rope=True),
    "masked": dict(causal=False, masked=True, kv_heads=4),
    "norm_after_transpose_rope": dict(rope=True, qk_norm=True),  # Gemma-3: norm and rope fused, before the transpose
    "fused_qkv": dict(fused_qkv=True),  # q, k, v read in place in the projection's output: head ranges
    "fused_qkv_rope": dict(fused_qkv=True, rope=True),  # q, k copied by their ropes, v in place
}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", list(MODULES))
def test_module_transposes_become_layout_flags(name, device):
    if device == "cuda":
        pytest.importorskip("triton")
    torch.manual_seed(0)
    model = SelfAttention(**MODULES[name]).eval()
    x, mask = torch.randn(2, 11, 24), torch.randn(2, 1, 11, 11)
    fn = tg.compile(model, (x, mask), device=device)
    text = fn.ir("tg")
    (attention,) = [line for line in text.splitlines() if "tg.attention" in line]
    assert all(f"{flag} = true" in attention for flag in FLAGS), attention
    # no copy left: only views (a transpose moving size-1 dims: rope's tables)
    for line in text.splitlines():
        if "tg.transpose" in line:
            assert "tensor<11x1x8xf32>" in line or "tensor<1x11x1x8xf32>" in line, line
    assert ("tg.rope" in text) == MODULES[name].get("rope", False)
    if MODULES[name].get("fused_qkv"):  # no slice copied: a head range of the projection's output
        roped = MODULES[name].get("rope", False)  # (a rope reads its slice: q's and k's are copied)
        assert "v_heads = array<i64: 6, 2>" in attention and text.count("tg.slice") == 2 * roped, text
        assert ("q_heads = array<i64: 0, 4>" in attention) == (not roped), attention
    if MODULES[name].get("qk_norm"):  # both per-head norms inside the ropes (fuse-rms-norm-rope)
        assert text.count(" norm %") == 2 and "tg.rms_norm" not in text, text
    with torch.no_grad():
        ref = model(x, mask)
    got = fn(x, mask)
    got = got.cpu() if isinstance(got, torch.Tensor) else torch.as_tensor(got)
    assert (got - ref).abs().max().item() <= 1e-5 * max(ref.abs().max().item(), 1.0)


class Transposed(torch.nn.Module):
    """SDPA over inputs given sequence-major ([B, S, H, D]), its result transposed back."""

    def __init__(self, causal, masked):
        super().__init__()
        self.causal, self.masked = causal, masked

    def forward(self, q, k, v, mask):
        y = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask if self.masked else None,
            is_causal=self.causal, enable_gqa=True)
        return y.transpose(1, 2)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("queries,keys,causal,masked", [
    (3, 1024, False, True),   # Triton: a kv head's group packed in one block, keys split in ranges, a mask per head
    (19, 19, True, False),    # query blocks, causal
])
def test_seq_major_inputs_and_output(device, queries, keys, causal, masked):
    if device == "cuda":
        pytest.importorskip("triton")
    torch.manual_seed(0)
    model = Transposed(causal, masked).eval()
    q, k, v = torch.randn(2, queries, 8, 16), torch.randn(2, keys, 2, 16), torch.randn(2, keys, 2, 8)
    mask = torch.randn(2, 8, queries, keys)
    fn = tg.compile(model, (q, k, v, mask), device=device)
    assert "tg.transpose" not in fn.ir("tg") and all(f"{flag} = true" in fn.ir("tg") for flag in FLAGS)
    if device == "cuda":
        text = fn.ir("triton")
        assert ("attention_part" in text) == (keys == 1024) and ("hq = hk * 4 + rm // 3" in text) == (keys == 1024)
    with torch.no_grad():
        ref = model(q, k, v, mask)
    got = fn(q, k, v, mask)
    got = got.cpu() if isinstance(got, torch.Tensor) else torch.as_tensor(got)
    assert (got - ref).abs().max().item() <= 1e-5 * max(ref.abs().max().item(), 1.0)


class SlicedHeads(torch.nn.Module):
    """q the first heads of a wider input (16 columns more), k and v side by side in another
    (a cross-attention's fused kv projection), each viewed [B, S, H, D] and transposed."""

    def forward(self, qx, kv, mask):
        b, sq, sk = qx.shape[0], qx.shape[1], kv.shape[1]
        q = qx[:, :, : 8 * 16].view(b, sq, 8, 16).transpose(1, 2)
        k, v = kv.split([2 * 16, 2 * 16], dim=2)
        k, v = k.view(b, sk, 2, 16).transpose(1, 2), v.view(b, sk, 2, 16).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return y.transpose(1, 2)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("queries,keys", [(3, 1024), (19, 19)])
def test_head_ranges_of_wider_inputs(device, queries, keys):
    """Head ranges on both back ends; on Triton also with a kv head's group packed in one block
    and the keys split in ranges (3 queries over 1024 keys), a mask per head."""
    if device == "cuda":
        pytest.importorskip("triton")
    torch.manual_seed(0)
    model = SlicedHeads().eval()
    qx, kv, mask = torch.randn(2, queries, 8 * 16 + 16), torch.randn(2, keys, 4 * 16), torch.randn(2, 8, queries, keys)
    fn = tg.compile(model, (qx, kv, mask), device=device)
    text = fn.ir("tg")
    assert "tg.slice" not in text and "q_heads = array<i64: 0, 8>" in text and "v_heads = array<i64: 2, 2>" in text, text
    if device == "cuda":
        assert ("attention_part" in fn.ir("triton")) == (keys == 1024)
    with torch.no_grad():
        ref = model(qx, kv, mask)
    got = fn(qx, kv, mask)
    got = got.cpu() if isinstance(got, torch.Tensor) else torch.as_tensor(got)
    assert (got - ref).abs().max().item() <= 1e-5 * max(ref.abs().max().item(), 1.0)


class HeadsMajor(torch.nn.Module):
    """Causal SDPA over heads-major inputs, grouped kv heads."""

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


class FusedCausal(torch.nn.Module):
    """q, k and v sliced out of one projection's output (8, 2 and 2 heads side by side, as
    GPT-2's ``c_attn`` with grouped kv heads), each viewed [B, S, H, D] and transposed; causal
    SDPA, its result transposed back."""

    def forward(self, x):
        b, s = x.shape[:2]
        q, k, v = x.split([8 * 16, 2 * 16, 2 * 16], dim=2)
        q, k, v = (t.reshape(b, s, -1, 16).transpose(1, 2) for t in (q, k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2)


@pytest.mark.parametrize("name", ["heads_major", "seq_major", "fused_qkv"])
def test_library_attention_reads_each_layout(monkeypatch, name):
    """``attention.library`` (PyTorch's SDPA over views of the arena's buffers, the result copied
    into the output's place) on the Triton path, the heuristic made to take it: heads-major
    buffers, sequence-major q, k, v and output, and q, k, v read as head ranges of one fused
    projection's output; grouped kv heads in each. Within 1e-5 of PyTorch's output magnitude
    (a view at the wrong strides or heads would be far off)."""
    pytest.importorskip("triton")
    from tensor_graphs.codegen.triton import paths

    heuristic = paths.heuristic
    monkeypatch.setattr(paths, "heuristic", lambda op: "attention.library" if paths.op_kind(op) == "attention" else heuristic(op))
    torch.manual_seed(0)
    if name == "heads_major":
        model, inputs = HeadsMajor(), (torch.randn(2, 8, 19, 16), torch.randn(2, 2, 19, 16), torch.randn(2, 2, 19, 16))
    elif name == "seq_major":
        model = Transposed(True, False)
        inputs = (torch.randn(2, 19, 8, 16), torch.randn(2, 19, 2, 16), torch.randn(2, 19, 2, 8), torch.zeros(1))
    else:
        model, inputs = FusedCausal(), (torch.randn(2, 19, 12 * 16),)
    model = model.eval()
    fn = tg.compile(model, inputs, device="cuda")
    (attention,) = [line for line in fn.ir("tg").splitlines() if "tg.attention" in line]
    if name == "seq_major":
        assert all(f"{flag} = true" in attention for flag in FLAGS), attention
    if name == "fused_qkv":
        assert all(f"{x}_heads = array<i64: {r}>" in attention for x, r in zip("qkv", ("0, 8", "8, 2", "10, 2"))), attention
    text = fn.ir("triton")
    assert "torch.sdpa[(1,)](buf.attention)" in text and "_attention(" not in text  # no Triton attention kernel
    with torch.no_grad():
        ref = model(*inputs)
    got = fn(*inputs).cpu()
    assert (got - ref).abs().max().item() <= 1e-5 * max(ref.abs().max().item(), 1.0)
