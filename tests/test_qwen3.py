"""Qwen3 and Llama from `transformers` end to end: logits match PyTorch (fp32).

The models are randomly initialised (seed 0) and in eval mode; the compiled function is the
wrapper ``ids -> model(ids, use_cache=False).logits`` with int64 token ids.

* a small Qwen3 (hidden 64, 2 layers, 4 Q / 2 KV heads, head_dim 16, tied embeddings) at seq 1, 7,
  33 and batch 2 x seq 5: max abs logits diff <= 5e-6 (logits of magnitude ~1; observed 3.6e-7 on
  an AVX2 Zen 3, AMD EPYC znver3);
* Qwen3-0.6B's real dimensions (hidden 1024, 28 layers, 16 Q / 8 KV heads, head_dim 128,
  intermediate 3072, vocab 151936, tied embeddings; random init), built once for the module, at
  seq 1, 16 and 128: max abs logits diff <= 2e-4 (logits of magnitude ~3.5, 28 layers; observed
  1.1e-5 on an AVX2 Zen 3, AMD EPYC znver3);
* a small Llama (4 Q / 2 KV heads) at two sequence lengths, within the small models' bound;
* RoPE: the rotary ``inv_freq`` is a non-persistent buffer, imported as an inline ``tg.constant``,
  so the cos/sin tables fold: aten.cos/aten.sin reach the aten module, no tg.cos/tg.sin survive
  compilation, and ``inv_freq`` is not a weight.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extra; absent only outside `make test`

import tensor_graphs as tg  # noqa: E402
from conftest import SMALL_QWEN3, LogitsOnly, check_logits, op_counts  # noqa: E402
from tensor_graphs.frontend import import_model  # noqa: E402

#: small models: max |tg - torch| over all logits (fp32 on both sides; logits |x| <= ~1.3).
#: About 10x the largest observed (3.6e-7 on an AVX2 Zen 3, AMD EPYC znver3): other CPUs' GEMM
#: kernels sum in other orders.
SMALL_MAX_ABS = 5e-6
#: Qwen3-0.6B dimensions (28 layers, vocab 151936; logits |x| ~3.5): observed 1.1e-5, same CPU,
#: so about 20x (relative to the logits, 6e-5)
FULL_MAX_ABS = 2e-4

QWEN3_0_6B = dict(
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=2048,
)
SMALL_LLAMA = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=100,
)


def qwen3(seed: int = 0, **config) -> LogitsOnly:
    torch.manual_seed(seed)
    return LogitsOnly(transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**config)).eval()).eval()


def llama(seed: int = 0, **config) -> LogitsOnly:
    torch.manual_seed(seed)
    return LogitsOnly(transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()).eval()


def token_ids(batch: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq), generator=g, dtype=torch.int64)


# --------------------------------------------------------------------------- small Qwen3


@pytest.fixture(scope="module")
def small_qwen3() -> LogitsOnly:
    return qwen3(**SMALL_QWEN3)


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (1, 7), (1, 33), (2, 5)])
def test_small_qwen3_logits(small_qwen3, batch, seq):
    ids = token_ids(batch, seq, SMALL_QWEN3["vocab_size"], seed=seq)
    t0 = time.perf_counter()
    fn = tg.compile(small_qwen3, (ids,))
    compile_s = time.perf_counter() - t0
    diff = check_logits(small_qwen3, fn, ids, SMALL_MAX_ABS)
    print(f"small Qwen3 {batch}x{seq}: compile {compile_s:.2f} s, max abs diff {diff:.3g}")


def test_rope_tables_fold(small_qwen3):
    """inv_freq (non-persistent) is a constant, so cos/sin of position * inv_freq fold away."""
    ids = token_ids(1, 9, SMALL_QWEN3["vocab_size"], seed=1)
    imported = import_model(small_qwen3, (ids,))
    assert not any("inv_freq" in name for name in imported.weights), sorted(imported.weights)
    aten_ops = op_counts(str(imported.module))
    assert aten_ops["aten.cos"] >= 1 and aten_ops["aten.sin"] >= 1, aten_ops  # RoPE is in the graph

    fn = tg.compile(small_qwen3, (ids,))
    tg_ops = op_counts(fn.ir("tg"))
    assert tg_ops["tg.cos"] == 0 and tg_ops["tg.sin"] == 0, tg_ops  # folded to constant tables
    assert "aten." not in fn.ir("tg")
    check_logits(small_qwen3, fn, ids, SMALL_MAX_ABS)


def test_gqa_reads_shared_kv_heads(small_qwen3):
    """repeat_kv (expand of K/V per query group) is not materialised: the attention reads the
    KV heads (fewer than the query heads) directly."""
    ids = token_ids(1, 7, SMALL_QWEN3["vocab_size"], seed=2)
    fn = tg.compile(small_qwen3, (ids,))
    tg_ir = fn.ir("tg")
    assert op_counts(tg_ir)["tg.broadcast"] == 0, op_counts(tg_ir)
    heads, kv_heads = SMALL_QWEN3["num_attention_heads"], SMALL_QWEN3["num_key_value_heads"]
    attention = [line for line in tg_ir.splitlines() if "tg.attention" in line]
    # q, k, v read sequence-major from the projections (absorb-attention-layouts): [1, 7, heads, D]
    assert attention and all(f"tensor<1x7x{kv_heads}x" in line and f"tensor<1x7x{heads}x" in line
                             and "k_seq_major = true" in line for line in attention)
    check_logits(small_qwen3, fn, ids, SMALL_MAX_ABS)


def test_persistent_float_buffer_stays_a_weight():
    """Only non-persistent buffers become constants; persistent ones stay weights (in the state dict)."""

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.full((4,), 2.0))
            self.register_buffer("shift", torch.arange(4, dtype=torch.float32), persistent=False)

        def forward(self, x):
            return torch.cos(x * self.scale) + torch.sin(self.shift).to(device=x.device, dtype=torch.float32)

    x = torch.randn(3, 4)
    imported = import_model(M(), (x,))
    assert set(imported.weights) == {"scale"}
    fn = tg.compile(M(), (x,))
    np.testing.assert_allclose(fn(x).numpy(), M()(x).numpy(), rtol=1e-6, atol=1e-6)  # observed 6e-8


# --------------------------------------------------------------------------- small Llama


@pytest.fixture(scope="module")
def small_llama() -> LogitsOnly:
    return llama(**SMALL_LLAMA)


@pytest.mark.parametrize("seq", [1, 12])
def test_small_llama_logits(small_llama, seq):
    ids = token_ids(1, seq, SMALL_LLAMA["vocab_size"], seed=seq)
    t0 = time.perf_counter()
    fn = tg.compile(small_llama, (ids,))
    compile_s = time.perf_counter() - t0
    diff = check_logits(small_llama, fn, ids, SMALL_MAX_ABS)
    print(f"small Llama 1x{seq}: compile {compile_s:.2f} s, max abs diff {diff:.3g}")


# --------------------------------------------------------------------------- Qwen3-0.6B dimensions


@pytest.fixture(scope="module")
def qwen3_0_6b() -> LogitsOnly:
    """Qwen3-0.6B's dimensions, random init (seed 0), eval; built once for the module."""
    t0 = time.perf_counter()
    model = qwen3(**QWEN3_0_6B)
    print(f"Qwen3-0.6B build {time.perf_counter() - t0:.1f} s")
    return model


@pytest.mark.parametrize("seq", [1, 128])  # the decode-shaped GEMVs and a prefill of GEMMs
def test_qwen3_0_6b_logits(qwen3_0_6b, seq):
    ids = token_ids(1, seq, QWEN3_0_6B["vocab_size"], seed=seq)
    t0 = time.perf_counter()
    fn = tg.compile(qwen3_0_6b, (ids,))
    compile_s = time.perf_counter() - t0
    diff = check_logits(qwen3_0_6b, fn, ids, FULL_MAX_ABS)
    print(f"Qwen3-0.6B 1x{seq}: compile {compile_s:.1f} s, max abs diff {diff:.3g}")
