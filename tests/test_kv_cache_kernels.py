"""KV-cache decoding at the kernel level: `tg.state` + `tg.cache_write` + `tg.attention {kv_cache}`.

Each test builds tg-level modules as text, compiles them, and runs them at a sequence of
run-time positions (``past``): a prefill graph writes a chunk of positions, a decode graph
sharing its caches (``states=prefill.states``) then writes one position per call. The
outputs are compared with torch's SDPA over the keys cached so far (a NumPy mirror of the
caches), with an explicit causal mask ``key j <= past + i``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import parse

from tensor_graphs.api import TG_OPTIMIZE
from tensor_graphs.codegen.llvm.jit import jit_compile
from tensor_graphs.context import make_context
from tensor_graphs.passes import BUFFER_PIPELINE, LLVM_PIPELINE, build_pipeline
from tensor_graphs.runtime_support.executable import CompiledGraph

HEADS, KV_HEADS, DIM = 4, 2, 16
SCALE = DIM**-0.5


def compile_text(text: str, states: dict[str, np.ndarray] | None = None) -> CompiledGraph:
    """A tg-level module compiled to a `CompiledGraph` bound to ``states`` (zeroed when None)."""
    module = parse(text)
    build_pipeline((*TG_OPTIMIZE, *BUFFER_PIPELINE, *LLVM_PIPELINE)).apply(make_context(), module)
    return CompiledGraph(jit_compile(module), {}, states=states)


def attention_module(seq_q: int, capacity: int, causal: bool = True, name: str = "step") -> str:
    """q [1, H, Sq, D], new k/v [1, Hkv, Sq, D] -> attention over the caches kv.0.{key,value}."""
    q = f"tensor<1x{HEADS}x{seq_q}x{DIM}xf32>"
    new = f"tensor<1x{KV_HEADS}x{seq_q}x{DIM}xf32>"
    cache = f"tensor<1x{KV_HEADS}x{capacity}x{DIM}xf32>"
    return f"""
builtin.module {{
  func.func @{name}(%q: {q}, %k: {new}, %v: {new}) -> {q} {{
    %ks = tg.state "kv.0.key" : {cache}
    %vs = tg.state "kv.0.value" : {cache}
    %kc = tg.cache_write %k into %ks {{axis = 2 : i64}} : ({cache}, {new}) -> {cache}
    %vc = tg.cache_write %v into %vs {{axis = 2 : i64}} : ({cache}, {new}) -> {cache}
    %o = tg.attention %q, %kc, %vc {{scale = {SCALE} : f32, causal = {str(causal).lower()}, kv_cache = true}} : ({q}, {cache}, {cache}) -> {q}
    func.return %o : {q}
  }}
}}
"""


class Reference:
    """NumPy mirror of the caches and torch's SDPA over the keys cached so far."""

    def __init__(self, capacity: int):
        self.k = np.zeros((1, KV_HEADS, capacity, DIM), np.float32)
        self.v = np.zeros_like(self.k)

    def step(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, past: int) -> np.ndarray:
        n = q.shape[2]
        self.k[:, :, past : past + n] = k
        self.v[:, :, past : past + n] = v
        keys = past + n
        rep = HEADS // KV_HEADS
        kk = torch.from_numpy(self.k[:, :, :keys]).repeat_interleave(rep, dim=1)
        vv = torch.from_numpy(self.v[:, :, :keys]).repeat_interleave(rep, dim=1)
        mask = torch.arange(keys)[None, :] <= (past + torch.arange(n))[:, None]
        out = torch.nn.functional.scaled_dot_product_attention(torch.from_numpy(q), kk, vv, attn_mask=mask, scale=SCALE)
        return out.numpy()


def inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        rng.standard_normal((1, HEADS, n, DIM), dtype=np.float32),
        rng.standard_normal((1, KV_HEADS, n, DIM), dtype=np.float32),
        rng.standard_normal((1, KV_HEADS, n, DIM), dtype=np.float32),
    )


def run_sequence(capacity: int, chunks: list[tuple[int, int]], decode_causal: bool, rng) -> dict[str, np.ndarray]:
    """Runs (past, n) steps: n > 1 on a prefill graph (n = its Sq), n == 1 on a decode graph
    that shares the prefill graph's caches; checks every output and the caches."""
    prefill_sizes = {n for _, n in chunks if n > 1}
    assert len(prefill_sizes) <= 1
    graphs: dict[int, CompiledGraph] = {}
    states = None
    for n in sorted(prefill_sizes) + [1]:
        graphs[n] = compile_text(attention_module(n, capacity, causal=n > 1 or decode_causal), states)
        states = graphs[n].states
    assert graphs[1].states["kv.0.key"] is graphs[max(graphs)].states["kv.0.key"]
    ref = Reference(capacity)
    for past, n in chunks:
        q, k, v = inputs(rng, n)
        got = graphs[n](q, k, v, past=past)
        np.testing.assert_allclose(got, ref.step(q, k, v, past), rtol=1e-5, atol=1e-5, err_msg=f"past={past}, n={n}")
    assert states is not None
    np.testing.assert_array_equal(states["kv.0.key"], ref.k)
    np.testing.assert_array_equal(states["kv.0.value"], ref.v)
    return states


# --------------------------------------------------------------------------- correctness


@pytest.mark.parametrize("decode_causal", [True, False], ids=["decode_causal", "decode_noncausal"])
def test_prefill_then_decode_small_cache(decode_causal, rng):
    """Capacity 40 (< one 64-key block): an 8-token prefill, then single tokens up to the end."""
    run_sequence(40, [(0, 8), *((p, 1) for p in range(8, 14)), (14, 8), (22, 1), (39, 1)], decode_causal, rng)


@pytest.mark.parametrize("decode_causal", [True, False], ids=["decode_causal", "decode_noncausal"])
def test_multiple_key_blocks_and_partial_last_block(decode_causal, rng):
    """Capacity 200: 70-token chunks (two query blocks, the second partial), then decode steps
    whose keys span 3 and 4 blocks of 64 with partial last blocks (141, 191, 200 keys)."""
    chunks = [(0, 70), (70, 70), *((p, 1) for p in range(140, 144)), (190, 1), (199, 1)]
    run_sequence(200, chunks, decode_causal, rng)


@pytest.mark.parametrize("capacity", [20, 21, 22, 28])
def test_odd_capacity_compiles_and_matches(capacity, rng):
    """Key blocks of 20..28 keys: LLVM's loop vectoriser used to abort (a process crash) on the
    max reduction of such rows when it was an ``llvm.maxnum`` (see `kernels._fmax`)."""
    run_sequence(capacity, [(0, 11), *((p, 1) for p in range(11, capacity))], True, rng)


def test_decode_only_from_empty_cache(rng):
    """Decoding from position 0: the first query sees exactly one key."""
    fn = compile_text(attention_module(1, 40))
    ref = Reference(40)
    for past in range(5):
        q, k, v = inputs(rng, 1)
        np.testing.assert_allclose(fn(q, k, v, past=past), ref.step(q, k, v, past), rtol=1e-5, atol=1e-5)


def test_cache_write_along_a_middle_axis(rng):
    """`tg.cache_write` along axis 1 of a rank-3 state: one copy per index of the leading dim."""
    fn = compile_text("""
builtin.module {
  func.func @write(%u: tensor<2x4x3xf32>) -> tensor<2x10x3xf32> {
    %s = tg.state "cache" : tensor<2x10x3xf32>
    %c = tg.cache_write %u into %s {axis = 1 : i64} : (tensor<2x10x3xf32>, tensor<2x4x3xf32>) -> tensor<2x10x3xf32>
    func.return %c : tensor<2x10x3xf32>
  }
}
""")
    expected = np.zeros((2, 10, 3), np.float32)
    for past in (0, 4, 6):
        u = rng.standard_normal((2, 4, 3), dtype=np.float32)
        expected[:, past : past + 4] = u
        np.testing.assert_array_equal(fn(u, past=past), expected)
    np.testing.assert_array_equal(fn.states["cache"], expected)


# --------------------------------------------------------------------------- runtime contract


def test_signature_records_states_after_the_weight_table():
    fn = compile_text(attention_module(1, 40))
    sig = fn.signature
    assert [s.name for s in sig.states] == ["kv.0.key", "kv.0.value"]
    assert all(s.shape == (1, KV_HEADS, 40, DIM) and s.dtype == np.float32 for s in sig.states)
    assert sig.state_slot(0) == len(sig.weight_table)
    assert fn.memory.state_bytes == 2 * KV_HEADS * 40 * DIM * 4
    assert all(a.ctypes.data % 64 == 0 and not a.any() for a in fn.states.values())


def test_cache_overflow_is_a_clear_error_and_the_graph_keeps_working(rng):
    fn = compile_text(attention_module(8, 40))
    q, k, v = inputs(rng, 8)
    with pytest.raises(RuntimeError, match=r"kv cache 'kv.0.key': position 33 \+ 8 new tokens exceed its 40 positions"):
        fn(q, k, v, past=33)
    before = fn.states["kv.0.key"].copy()
    with pytest.raises(RuntimeError, match="position 1000000"):
        fn(q, k, v, past=1_000_000)
    np.testing.assert_array_equal(fn.states["kv.0.key"], before)  # nothing written
    ref = Reference(40)
    np.testing.assert_allclose(fn(q, k, v, past=32), ref.step(q, k, v, 32), rtol=1e-5, atol=1e-5)


def test_past_is_required_and_checked(rng):
    fn = compile_text(attention_module(1, 40))
    q, k, v = inputs(rng, 1)
    with pytest.raises(TypeError, match="past="):
        fn(q, k, v)
    with pytest.raises(ValueError, match="past must be >= 0"):
        fn(q, k, v, past=-1)
    with pytest.raises(TypeError, match="past must be an int"):
        fn(q, k, v, past=1.5)
    fn(q, k, v, past=np.int64(3))


def test_bound_states_are_validated():
    text = attention_module(1, 40)
    good = np.zeros((1, KV_HEADS, 40, DIM), np.float32)
    with pytest.raises(ValueError, match=r"state 'kv.0.key' has shape \[1, 2, 20, 16\]"):
        compile_text(text, {"kv.0.key": np.zeros((1, KV_HEADS, 20, DIM), np.float32)})
    with pytest.raises(TypeError, match="state 'kv.0.value' has dtype float64"):
        compile_text(text, {"kv.0.value": good.astype(np.float64)})
    with pytest.raises(ValueError, match="state 'kv.0.key' must be C-contiguous"):
        compile_text(text, {"kv.0.key": np.zeros((1, KV_HEADS, DIM, 40), np.float32).transpose(0, 1, 3, 2)})
    fn = compile_text(text, {"kv.0.key": good, "unused": np.zeros(3)})
    assert fn.states["kv.0.key"] is good


def test_graph_without_state_ignores_past():
    fn = compile_text("""
builtin.module {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = tg.relu %x : tensor<4xf32>
    func.return %y : tensor<4xf32>
  }
}
""")
    x = np.array([-1, 2, -3, 4], np.float32)
    assert fn.signature.states == () and fn.states == {} and fn.memory.state_bytes == 0
    np.testing.assert_array_equal(fn(x), np.maximum(x, 0))
    np.testing.assert_array_equal(fn(x, past=None), np.maximum(x, 0))
    np.testing.assert_array_equal(fn(x, past=7), np.maximum(x, 0))


def test_graph_without_state_reads_past_for_an_attention_over_caches_passed_in(rng):
    """The tuner's standalone attention over a KV cache (the caches are inputs, the graph keeps no
    state) reads ``past`` as a decoder's does: the first past + Sq keys (0 when not given), so
    that it can be timed over a full cache."""
    q_t, kv_t = f"tensor<1x{HEADS}x2x{DIM}xf32>", f"tensor<1x{KV_HEADS}x24x{DIM}xf32>"
    fn = compile_text(f"""
builtin.module {{
  func.func @attend(%q: {q_t}, %k: {kv_t}, %v: {kv_t}) -> {q_t} {{
    %o = tg.attention %q, %k, %v {{scale = {SCALE} : f32, causal = true, kv_cache = true}} : ({q_t}, {kv_t}, {kv_t}) -> {q_t}
    func.return %o : {q_t}
  }}
}}
""")
    q = rng.standard_normal((1, HEADS, 2, DIM)).astype(np.float32)
    k, v = (rng.standard_normal((1, KV_HEADS, 24, DIM)).astype(np.float32) for _ in range(2))

    def expected(past):
        keys = past + 2
        kk, vv = (torch.from_numpy(t[:, :, :keys]).repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
        mask = torch.arange(keys)[None, :] <= past + torch.arange(2)[:, None]
        return torch.nn.functional.scaled_dot_product_attention(torch.from_numpy(q), kk, vv, attn_mask=mask, scale=SCALE).numpy()

    for past in (None, 0, 9, 22):
        np.testing.assert_allclose(fn(q, k, v, past=past), expected(past or 0), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="past must be >= 0"):
        fn(q, k, v, past=-1)
