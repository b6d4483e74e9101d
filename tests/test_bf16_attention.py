"""bf16 attention (`attention.flash_bf16`): the flash-attention kernel with its two GEMMs over bf16
operands, float32 sums: ``q * scale``, k and v rounded to bf16 (nearest even) as each block is
moved into pairs, the probabilities of each key block rounded as they go into ``P V``; the
softmax (max, exp, sums, rescaling) stays float32. On AMX tiles (`kernels_amx.tile_gemm`),
AVX512-BF16 dot products or their emulation with FMAs, whichever the target has.

Each engine must compute exactly that: checked against the same online softmax simulated in
float64 over the kernel's key blocks (`_simulated`), with the roundings where the kernel makes
them. Float32 scores and exponentials put a probability on the other side of a bf16 rounding
now and then (about 2e-4 of them; each moves its row by up to 2^-8 of its weight), so: every
row within 2e-6 of the output's magnitude (observed <= 3e-7) but at most one in 20 (observed 1
of 256), and all within 1e-3 (observed 1.1e-4); and against float32 eager within what the
roundings give (1e-2 of the magnitude; observed 1.8-4e-3). A single query row (a decode step's) is left to the float32 kernel. The
emulation runs on every CPU; the native engines where the CPU has them, and each is compiled for
a CPU that has it, whatever this one is, its instructions checked in the assembly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.context import Context

import tensor_graphs as tg
from pinned_gemms import pinned_graph
from test_bf16_gemm import ENGINES, _emulating_target, _runnable, assembly
from tensor_graphs.dialects.packing import from_bf16, to_bf16
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.lowering.tensor_to_buffer.scratch import attention_block
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target, record
from tensor_graphs.tuning.paths import kernel_paths

VARIANT = "attention.flash_bf16"


class _Sdpa(torch.nn.Module):
    def __init__(self, causal: bool):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


class _SeqMajor(_Sdpa):
    """q, k, v and the output stored [B, S, H, D] (`absorb-attention-layouts`: read in place)."""

    def forward(self, q, k, v, mask=None):
        out = super().forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)


def _bf16(x: np.ndarray) -> np.ndarray:
    return from_bf16(to_bf16(np.asarray(x, np.float32))).astype(np.float64)


def _simulated(q, k, v, mask, causal: bool, block: int) -> np.ndarray:
    """The kernel's arithmetic in float64 (heads-major operands): per key block of ``block``,
    ``S = bf16(q * scale) @ bf16(k)^T + mask``, the running max, ``P = exp(S - max)``, the
    running sum of P, ``acc = acc * alpha + bf16(P) @ bf16(v)``; ``acc / sum`` (0 where every
    score is masked)."""
    r = _bf16
    scale = np.float32(1 / np.sqrt(q.shape[-1]))
    qq, kk, vv = r(q * scale), r(k), r(v)
    sq, sk = q.shape[-2], k.shape[-2]
    m = np.full((*q.shape[:-1], 1), -np.inf)
    total, acc = np.zeros_like(m), np.zeros((*q.shape[:-1], v.shape[-1]))
    for k0 in range(0, sk, block):
        s = qq @ np.swapaxes(kk[..., k0:k0 + block, :], -1, -2)
        if mask is not None:
            s = s + mask[..., k0:k0 + block]
        if causal:  # torch's: key j visible to query i when j <= i
            keys = np.arange(k0, min(k0 + block, sk))
            s = np.where(keys[None, :] <= np.arange(sq)[:, None], s, -np.inf)
        m_new = np.maximum(m, s.max(-1, keepdims=True))
        m_use = np.where(m_new == -np.inf, 0.0, m_new)
        alpha, p = np.exp(m - m_use), np.exp(s - m_use)
        total = total * alpha + p.sum(-1, keepdims=True)
        acc = acc * alpha + r(p) @ vv[..., k0:k0 + block, :]
        m = m_new
    return np.where(total > 0, acc / np.where(total > 0, total, 1.0), 0.0)


# name: (B, H, Sq, Sk, D, Dv, causal, masked)
CASES = {
    "bert": (1, 2, 128, 128, 64, 64, False, False),  # whole blocks of 64
    "causal_tails": (2, 3, 65, 65, 16, 16, True, False),  # a last query block of 1 row, of 1 key
    "masked_odd": (1, 2, 7, 71, 9, 24, False, True),  # odd D, Dv of 24, a last key block of 7 keys
    "wide_head": (1, 1, 33, 40, 80, 80, True, False),  # D = 80: 40 pairs padded to 48
    # whole vectors (D a multiple of 32, Dv of 16): q, v and out moved 16 x 16 through registers
    "vector_tails": (2, 2, 37, 45, 32, 32, True, False),  # 37 queries (a group of 5), 45 keys (odd)
    "vector_masked": (1, 2, 20, 33, 64, 16, False, True),
}


def _inputs(case: str):
    bsz, h, sq, sk, d, dv, causal, masked = CASES[case]
    torch.manual_seed(sq * 31 + sk + d)
    q, k, v = torch.randn(bsz, h, sq, d), torch.randn(bsz, h, sk, d), torch.randn(bsz, h, sk, dv)
    mask = None
    if masked:  # finite offsets and a few -inf, never a whole row
        mask = torch.randn(bsz, 1, sq, sk) * 2
        mask[..., 1::5] = -torch.inf
    return (q, k, v) + ((mask,) if mask is not None else ()), causal


def _compiled(model, inputs, target: str, monkeypatch, dynamic_shapes=None):
    emulated = frozenset({"avx512bf16"}) if target == _emulating_target() else frozenset()
    graph = pinned_graph(model, inputs, target, VARIANT, monkeypatch, emulated=emulated, dynamic_shapes=dynamic_shapes,
                         op="tg.attention")
    return tg.compile_module(graph.module, graph.weights, target=target)


def _check(got: np.ndarray, inputs, causal: bool, target: str, model) -> None:
    q, k, v = (x.numpy() for x in inputs[:3])
    mask = inputs[3].numpy() if len(inputs) > 3 else None
    block = attention_block(q.shape[-1], v.shape[-1], Target.named(target))
    expected = _simulated(q, k, v, mask, causal, block)
    scale, diff = np.abs(expected).max(), np.abs(got - expected)
    off = (diff > 2e-6 * scale).reshape(-1, diff.shape[-1]).any(-1)  # rows where a probability rounded the other way
    assert off.sum() <= 1 + off.size // 20 and diff.max() <= 1e-3 * scale
    with torch.no_grad():
        eager = model(*inputs).numpy()
    assert np.abs(got - eager).max() <= 1e-2 * np.abs(eager).max()


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_attention_computes_the_rounded_products(engine, case, threads, monkeypatch):
    inputs, causal = _inputs(case)
    target = _runnable(engine)
    model = _Sdpa(causal)
    fn = _compiled(model, inputs, target, monkeypatch)
    before = tg.get_num_threads()
    tg.set_num_threads(threads)
    try:
        got = fn(*(x.numpy() for x in inputs))
    finally:
        tg.set_num_threads(before)
    _check(got, inputs, causal, target, model)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_bf16_attention_reads_sequence_major_buffers(engine, monkeypatch):
    """q, k, v and the output [B, S, H, D]: the blocks are moved into pairs from their strides."""
    (q, k, v), causal = _inputs("causal_tails")
    seq_major = tuple(x.transpose(1, 2).contiguous() for x in (q, k, v))
    target = _runnable(engine)
    model = _SeqMajor(causal)
    fn = _compiled(model, seq_major, target, monkeypatch)
    assert "q_seq_major = true" in fn.ir("buf")
    got = np.swapaxes(fn(*(x.numpy() for x in seq_major)), 1, 2)
    _check(got, (q, k, v), causal, target, _Sdpa(causal))


@pytest.mark.parametrize("engine", list(ENGINES))
def test_bf16_attention_over_a_symbolic_length(engine, monkeypatch):
    """One compile for any sequence length: the last query block's rows are counted at run time
    (on AMX its row tiles are the largest block's)."""
    (q, k, v), causal = _inputs("causal_tails")
    seq = torch.export.Dim("seq", min=2, max=200)
    target = _runnable(engine)
    model = _Sdpa(causal)
    fn = _compiled(model, (q, k, v), target, monkeypatch, dynamic_shapes=({2: seq}, {2: seq}, {2: seq}))
    for length in (9, 65, 130):
        part = tuple(x[:, :, :length].contiguous() for x in (q, k, v))
        _check(fn(*(x.numpy() for x in part)), part, causal, target, model)


@pytest.mark.parametrize("engine", ["avx512bf16", "amx"])
def test_bf16_attention_compiles_to_its_instructions(engine, monkeypatch):
    """Compiled for a CPU with the engine's instructions (whatever this CPU is): AMX tile products
    under one configuration a thread, or ``vdpbf16ps`` on zmm registers; the key rows and the
    probabilities rounded to bf16 by ``vcvtne2ps2bf16``."""
    target, instruction = ENGINES[engine]
    inputs, causal = _inputs("bert")
    asm = assembly(pinned_graph(_Sdpa(causal), inputs, target, VARIANT, monkeypatch, op="tg.attention").module, target)
    ops = [line for line in asm.splitlines() if instruction in line]
    assert "vcvtne2ps2bf16" in asm
    if engine == "amx":
        assert len(ops) >= 8 and asm.count("ldtilecfg") == 1 and "tilerelease" in asm
    else:
        assert len(ops) >= 4 and all("zmm" in line for line in ops)
        assert "tdpbf16ps" not in asm


def test_bf16_attention_is_offered_where_the_target_has_bf16():
    """A path for the tuner (after the float32 kernel, never the heuristic's choice) on a target
    with AVX512-BF16 or AMX, refused with the reason elsewhere and for a single query row."""
    inputs, causal = _inputs("bert")
    for target, offered in (("sapphirerapids", True), ("znver4", True), ("x86-64-v4", False), ("haswell", False)):
        graph = import_model(_Sdpa(causal), inputs)
        build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
        record(graph.module, Target.named(target))
        paths = [p for p in kernel_paths(graph.module, choices_only=False) if p.name == "tg.attention"][0]
        assert paths.applicable[0] == "attention.flash" and paths.chosen == "attention.flash"
        assert (VARIANT in paths.applicable) == offered
        if not offered:
            assert dict(paths.rejected)[VARIANT] == f"the target ({target}) has no bf16 dot products (AVX512-BF16)"
    q, k, v = inputs
    graph = import_model(_Sdpa(False), (q[:, :, :1].contiguous(), k, v))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    record(graph.module, Target.named("sapphirerapids"))
    paths = [p for p in kernel_paths(graph.module, choices_only=False) if p.name == "tg.attention"][0]
    assert dict(paths.rejected)[VARIANT].startswith("one query row (a decode step)")


def test_bf16_attention_scratch_layout():
    """bf16 products' tiles (`scratch.AttentionTiles.pairs`): twice the queries where the L2
    holds them (not with a causal mask), rows and words in whole tiles of 16, every part 64-byte
    aligned and disjoint."""
    from dataclasses import replace

    from tensor_graphs.lowering.tensor_to_buffer.scratch import PAIR_TILE, attention_tiles

    host = Target.host()
    big, small = (replace(host, caches=replace(host.caches, l2=kib << 10)) for kib in (2048, 128))
    tiles = attention_tiles((1, 12, 128, 64), (1, 12, 128, 64), (1, 12, 128, 64), big, pairs=True)
    assert (tiles.br, tiles.bc, tiles.rows, tiles.d_words, tiles.key_words) == (128, 64, 128, 32, 32)
    causal = attention_tiles((1, 12, 128, 64), (1, 12, 128, 64), (1, 12, 128, 64), big, pairs=True, causal=True)
    assert (causal.br, causal.bc) == (64, 64)  # its key blocks above the diagonal skipped per 64 queries
    on_small = attention_tiles((1, 12, 128, 64), (1, 12, 128, 64), (1, 12, 128, 64), small, pairs=True)
    assert (on_small.br, on_small.bc) == (64, 32)
    odd = attention_tiles((1, 2, 7, 9), (1, 2, 71, 9), (1, 2, 71, 24), big, pairs=True)
    assert (odd.br, odd.rows, odd.d_words, odd.key_words, odd.dv_pad) == (7, 16, 16, 32, 32)
    for t in (tiles, odd):
        names = ("scores", "m", "l", "acc", "kt", "vp", "qt", "pt", "mu", "alpha")
        starts = [getattr(t, name) for name in names] + [t.elements]
        assert all(s % PAIR_TILE == 0 for s in starts) and starts == sorted(starts)
        sizes = dict(zip(names, (b - a for a, b in zip(starts, starts[1:]))))
        assert sizes["scores"] == t.bc_pad * t.rows and sizes["acc"] == t.dv_pad * t.rows
        assert sizes["kt"] == t.bc_pad * t.d_words and sizes["vp"] == t.dv_pad * t.key_words
        assert sizes["qt"] == t.d_words * t.rows and sizes["pt"] == t.key_words * t.rows and sizes["mu"] == t.rows


@pytest.mark.parametrize("engine", list(ENGINES))
def test_bf16_attention_over_a_kv_cache(engine, monkeypatch):
    """Prefill chunks of 30 queries over a cache of 100 (grouped heads): the keys in use, their
    blocks and the causal diagonal are run-time values (``past``); checked against the simulated
    kernel as above and against torch's float32 SDPA over the keys cached so far (1e-2; observed
    2.5e-3, 4.6e-3, 8.2e-3: 16-wide heads, a few keys for the first queries)."""
    import dataclasses

    from conftest import parse
    from test_kv_cache_kernels import Reference, attention_module, inputs

    from tensor_graphs.api import TG_OPTIMIZE
    from tensor_graphs.codegen.llvm.jit import jit_compile
    from tensor_graphs.context import make_context
    from tensor_graphs.dialects import tensor as tgd
    from tensor_graphs.lowering.tensor_to_buffer import kernels
    from tensor_graphs.passes import BUFFER_PIPELINE, LLVM_PIPELINE
    from tensor_graphs.runtime_support.executable import CompiledGraph
    from tensor_graphs.tuning.paths import pin

    target = Target.named(_runnable(engine))
    if engine == "emulated":
        monkeypatch.setattr(kernels, "_target_of", lambda op: dataclasses.replace(target, extensions=target.extensions | {"avx512bf16"}))
    module = parse(attention_module(30, 100))
    record(module, target)
    for op in module.walk():
        if isinstance(op, tgd.AttentionOp):
            pin(op, VARIANT)
    build_pipeline((*TG_OPTIMIZE, *BUFFER_PIPELINE)).apply(make_context(), module)
    assert "bf16_products = true" in str(module)
    build_pipeline(LLVM_PIPELINE).apply(make_context(), module)
    graph = CompiledGraph(jit_compile(module), {})
    ref, rng = Reference(100), np.random.default_rng(3)
    block = attention_block(q_dim := ref.k.shape[-1], q_dim, target)
    for past in (0, 30, 60):
        q, k, v = inputs(rng, 30)
        got, eager = graph(q, k, v, past=past), ref.step(q, k, v, past)
        keys, rep = past + 30, q.shape[1] // ref.k.shape[1]
        hidden = np.where(np.arange(keys)[None, :] <= past + np.arange(30)[:, None], 0.0, -np.inf)
        kk, vv = (np.repeat(c[:, :, :keys], rep, axis=1) for c in (ref.k, ref.v))
        expected = _simulated(q, kk, vv, hidden, False, block)
        diff = np.abs(got - expected)
        off = (diff > 2e-6 * np.abs(expected).max()).reshape(-1, diff.shape[-1]).any(-1)
        assert off.sum() <= 1 + off.size // 20 and diff.max() <= 1e-3 * np.abs(expected).max(), past
        assert np.abs(got - eager).max() <= 1e-2 * np.abs(eager).max(), past


# (causal, [B, H, S, D]): BertLayer's heads; causal with a query tail (70 rows); two images, a head
# dimension that is no multiple of 32 and a scale that is no power of two (1 / sqrt(80))
BF16_MODEL_CASES = [(False, (1, 12, 128, 64)), (True, (1, 4, 70, 64)), (False, (2, 3, 33, 80))]


@pytest.mark.parametrize("causal,shape", BF16_MODEL_CASES, ids=[str(c) for c in BF16_MODEL_CASES])
def test_a_bf16_models_attention_takes_the_bf16_kernel_on_amx(causal, shape):
    """A bf16 model's attention (`attention.bf16_operands`) is the heuristic's choice on a target
    with AMX-BF16: the flash_bf16 kernel, whose roundings are eager bfloat16's own (it rounds the
    unnormalised probabilities before ``P V`` too). Its error against the float64 attention of the
    same bf16 values is at most twice eager bfloat16's (observed 1.0-1.12 times)."""
    target = _runnable("amx")
    torch.manual_seed(sum(shape))
    q, k, v = (torch.randn(*shape).to(torch.bfloat16) for _ in range(3))
    model = _Sdpa(causal)
    fn = tg.compile(model, (q, k, v), target=target)
    assert "bf16_products" in fn.ir("buf")
    exact = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    ours = (fn(q, k, v).double() - exact).abs().max()
    theirs = (model(q, k, v).double() - exact).abs().max()
    assert ours <= 2 * theirs, f"error {ours:.3g} against float64, eager bfloat16's {theirs:.3g}"


def test_a_bf16_models_attention_stays_float32_without_amx():
    """Without AMX-BF16 (`vdpbf16ps` runs at half the FMAs' rate on Intel's cores) and for a
    float32 model, the heuristic keeps the float32 kernel, with the reason."""
    q, k, v = (torch.randn(1, 2, 40, 64) for _ in range(3))
    for inputs, target, why in (((q, k, v), "sapphirerapids", "q, k and v are not all bf16 values (a bf16 model's)"),
                                (tuple(t.to(torch.bfloat16) for t in (q, k, v)), "cooperlake",
                                 "the target (cooperlake) has no AMX-BF16 tiles")):
        graph = import_model(_Sdpa(False), inputs)
        build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
        record(graph.module, Target.named(target))
        paths = [p for p in kernel_paths(graph.module, choices_only=False) if p.name == "tg.attention"][0]
        assert paths.chosen == "attention.flash" and dict(paths.rejected)["attention.bf16_operands"] == why
