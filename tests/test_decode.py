"""KV-cache decoding: `compile_decoder` / `generate` against transformers, one artifact for every length.

Models are small random-weight configs (seed 0, eval, fp32) of GPT-2, Qwen3 (GQA: 4 Q / 2 KV heads,
q/k norms, RoPE) and Llama. What is checked:

* greedy tokens are identical to ``model.generate(do_sample=False)`` of transformers, for prompt
  lengths that fit one prefill chunk, several chunks, and a padded last chunk;
* prefill logits and every decode step's logits match a full PyTorch forward over the whole
  sequence so far (max abs diff <= 5e-6; logits of magnitude ~1);
* the two native functions are compiled once (``jit_compile`` is counted) and then serve every
  prompt length and position;
* the KV cache is persistent state outside the arena, updated in place (its arrays keep their
  addresses across tokens), sized 2 x layers x kv heads x capacity x head dim x 4 bytes, as
  `estimate_memory` reports before anything is allocated; a cache that cannot fit the machine
  raises MemoryError before code generation;
* misuse (decode before prefill, more tokens than max_seq, a wrong batch) raises a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extra; absent only outside `make test`

import tensor_graphs as tg  # noqa: E402
import tensor_graphs.codegen.llvm.jit as jit  # noqa: E402
from conftest import SMALL_QWEN3  # noqa: E402

#: max |tg - torch| of logits (fp32 on both sides; logits |x| <= ~1.1): about 10x the largest
#: observed (2.4e-7 on an AVX2 Zen 3, AMD EPYC znver3); other CPUs' GEMM kernels sum in other
#: orders
MAX_ABS = 5e-6
CHUNK = 4
MAX_SEQ = 40

SMALL_GPT2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=120, n_positions=64, bos_token_id=0, eos_token_id=None)
QWEN3 = dict(SMALL_QWEN3, vocab_size=120, max_position_embeddings=64, bos_token_id=0, eos_token_id=None)
SMALL_LLAMA = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    intermediate_size=128, vocab_size=120, max_position_embeddings=64, bos_token_id=0, eos_token_id=None,
)


def _model(kind: str):
    torch.manual_seed(0)
    if kind == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SMALL_GPT2))
    elif kind == "qwen3":
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**QWEN3))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL_LLAMA))
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    return model.eval()


@pytest.fixture(scope="module", params=["gpt2", "qwen3", "llama"])
def compiled(request):
    """(model, decoder, number of jit compilations it took)."""
    model = _model(request.param)
    before = _jit_count()
    decoder = tg.compile_decoder(model, max_seq=MAX_SEQ, prefill_chunk=CHUNK)
    return model, decoder, _jit_count() - before


def _jit_count() -> int:
    return jit.COMPILATIONS  # native graphs JIT-compiled by this process


def _prompt(length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + length)
    return torch.randint(1, 120, (1, length), generator=g)


@pytest.mark.parametrize("length", [1, 3, 4, 9, 17])
def test_greedy_tokens_match_transformers(compiled, length):
    model, decoder, _ = compiled
    ids = _prompt(length)
    new = 12
    with torch.inference_mode():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False)
    got = decoder.generate(ids, new)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    assert got.tolist() == expected.tolist()


def test_generate_function_compiles_and_matches():
    model = _model("qwen3")
    ids = _prompt(6)
    with torch.inference_mode():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False)
    got = tg.generate(model, ids.numpy(), 5)
    assert isinstance(got, np.ndarray)
    assert got.tolist() == expected.tolist()


def test_logits_match_full_forward_at_every_position(compiled):
    model, decoder, _ = compiled
    ids = _prompt(10)
    with torch.inference_mode():
        logits = decoder.prefill(ids)
        ref = model(ids, use_cache=False).logits[:, -1]
        assert (logits - ref).abs().max().item() <= MAX_ABS
        seq = ids
        for step in range(6):
            token = torch.tensor([[(7 * step + 3) % 120]])
            seq = torch.cat([seq, token], dim=1)
            logits = decoder.decode(token)
            ref = model(seq, use_cache=False).logits[:, -1]
            assert (logits - ref).abs().max().item() <= MAX_ABS, f"decode step {step}"
        assert decoder.position == 16


def test_compiled_once_for_every_length_and_position(compiled):
    model, decoder, compilations = compiled
    assert compilations == 2  # the prefill chunk and the decode step, nothing else
    before = _jit_count()
    for length in (1, 2, 5, 8, 13, 30):
        decoder.generate(_prompt(length), 3)
    decoder.prefill(_prompt(MAX_SEQ - 1))
    decoder.decode(torch.tensor([[5]]))
    assert decoder.position == MAX_SEQ
    assert _jit_count() == before


def test_cache_is_persistent_state_updated_in_place(compiled):
    model, decoder, _ = compiled
    cfg = model.config
    layers = cfg.num_hidden_layers
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    states = decoder.states
    assert len(states) == 2 * layers
    capacity = MAX_SEQ  # the prefill graph runs exactly the tokens left (a size symbol): no padded chunk past max_seq
    assert decoder.prefill_graph.signature.symbols == (("tokens", 1, CHUNK),)
    assert decoder.explain().startswith(f"prefill: calls of up to {CHUNK} tokens, the last exactly what is left")
    for name, a in states.items():
        assert a.shape == (1, kv_heads, capacity, head_dim), name
    assert decoder.memory.state_bytes == 2 * layers * kv_heads * capacity * head_dim * 4
    # the cache is not in the arena, and both graphs bind the very same arrays
    assert decoder.decode_graph.states.keys() == states.keys()
    assert all(decoder.decode_graph.states[k] is states[k] for k in states)
    addresses = {k: a.ctypes.data for k, a in states.items()}
    decoder.prefill(_prompt(5))
    key0 = states["kv.0.key"][0, :, :5].copy()
    decoder.decode(torch.tensor([[9]]))
    assert {k: a.ctypes.data for k, a in states.items()} == addresses
    assert np.array_equal(states["kv.0.key"][0, :, :5], key0)  # old rows untouched
    assert np.abs(states["kv.0.key"][0, :, 5]).sum() > 0  # the new row written at position 5


def test_estimate_memory_matches_the_compiled_decoder(compiled):
    model, decoder, _ = compiled
    est = tg.estimate_memory(model, MAX_SEQ, prefill_chunk=CHUNK)
    got = decoder.memory
    assert est.state_bytes == got.state_bytes
    assert est.arena_bytes == got.arena_bytes
    assert est.weight_bytes == got.weight_bytes
    assert est.packed_bytes == got.packed_bytes > 0  # both graphs share one set of packed weights
    assert est.kv_cache_bytes > 0 and est.total_bytes >= est.state_bytes + est.weight_bytes + est.packed_bytes


def test_a_cache_larger_than_memory_fails_before_codegen():
    torch.manual_seed(0)
    cfg = dict(QWEN3, max_position_embeddings=1 << 30)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**cfg)).eval()
    before = _jit_count()
    with pytest.raises(MemoryError, match="KV cache"):
        tg.compile_decoder(model, max_seq=1 << 30, prefill_chunk=CHUNK)
    assert _jit_count() == before


def test_an_attention_that_cannot_read_a_cache_is_an_error():
    """Bloom's attention (alibi, baddbmm) is not turned into a tg.attention: a decoder would attend
    to each call's new tokens only and decode wrong tokens, so compile_decoder refuses it."""
    torch.manual_seed(0)
    model = transformers.BloomForCausalLM(transformers.BloomConfig(hidden_size=32, n_layer=2, n_head=4, vocab_size=64)).eval()
    with pytest.raises(ValueError, match="no attention of BloomForCausalLM can read a KV cache"):
        tg.compile_decoder(model, max_seq=16, prefill_chunk=CHUNK)


def test_errors(compiled):
    model, decoder, _ = compiled
    decoder.reset()
    with pytest.raises(ValueError, match="decode before prefill"):
        decoder.decode(torch.tensor([[1]]))
    with pytest.raises(ValueError, match="exceed max_seq"):
        decoder.prefill(_prompt(MAX_SEQ + 1))
    with pytest.raises(ValueError, match=r"shape \[1, tokens\]"):
        decoder.prefill(torch.zeros((2, 3), dtype=torch.int64))
    with pytest.raises(TypeError, match="integer token ids"):
        decoder.prefill(torch.zeros((1, 3)))
    decoder.prefill(_prompt(MAX_SEQ))
    with pytest.raises(ValueError, match="exceed max_seq"):
        decoder.decode(torch.tensor([[1]]))
    with pytest.raises(ValueError, match="exceeds the model's 64 positions"):
        tg.compile_decoder(model, max_seq=65)


def test_batch_of_two():
    model = _model("qwen3")
    decoder = tg.compile_decoder(model, max_seq=24, batch=2, prefill_chunk=CHUNK)
    ids = torch.cat([_prompt(7, seed=3), _prompt(7, seed=4)])
    with torch.inference_mode():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
    assert decoder.generate(ids, 6).tolist() == expected.tolist()


def test_eos_stops_rows_like_transformers():
    """A row that emits eos continues with pad tokens; generation stops when every row has."""
    model = _model("gpt2")
    ids = torch.cat([_prompt(5, seed=7), _prompt(5, seed=8)])
    with torch.inference_mode():
        free = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    eos = int(free[0, 7])  # row 0's third new token: row 0 stops there, row 1 goes on (unless it emits it too)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = 0
    with torch.inference_mode():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    decoder = tg.compile_decoder(model, max_seq=16, batch=2, prefill_chunk=CHUNK)
    got = decoder.generate(ids, 8, eos_token_id=eos, pad_token_id=0)
    assert got.tolist() == expected.tolist()
