"""Batched generation with an ``attention_mask``: prompts of different lengths, left-padded as
transformers pads them, through `compile_decoder` / `generate`, against ``model.generate``.

Models are tiny random-weight configs (seed 0, eval, fp32; ``initializer_range`` raised so that
greedy decoding does not repeat one token) of GPT-2, Llama (grouped-query attention, RoPE) and
Qwen3 (GQA, q/k norms, RoPE). What is checked:

* a batch of 3 prompts of 3, 7 and 5 tokens, left-padded, 8 new tokens: every row's greedy
  tokens are identical to ``model.generate(ids, attention_mask=mask, do_sample=False)``; the
  prompts span two prefill chunks (of 4), the last one padded;
* the prefill logits and each decode step's match a PyTorch forward with the same mask and
  transformers' position ids (``cumsum(mask) - 1``, 0 at padding), max abs diff <= 1e-4;
* a bool mask gives the same tokens as an int64 one; a mask of ones, or none, is the unpadded
  path; padding in every row's leading columns is dropped, also on a decoder compiled without
  a padding mask; right padding gives transformers' tokens (and its warning);
* a failed call on a padded batch leaves the decoder as it was (position ids included);
* bad masks (shape, dtype, values, a row of zeros, ragged padding on a decoder without a
  padding mask) raise clear errors.

Each model is compiled once for the file (a module-level cache).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extra; absent only outside `make test`

import tensor_graphs as tg  # noqa: E402

#: max |tg - torch| of logits (fp32 on both sides)
MAX_ABS = 1e-4
VOCAB = 100
CHUNK = 4
MAX_SEQ = 24
LENGTHS = (3, 7, 5)
NEW = 8

COMMON = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=None, initializer_range=0.2)
CONFIGS = {
    "gpt2": lambda: transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, **COMMON),
    "llama": lambda: transformers.LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=64, **COMMON,
    ),
    "qwen3": lambda: transformers.Qwen3Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        intermediate_size=64, max_position_embeddings=64, **COMMON,
    ),
}
MODELS = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM, "qwen3": transformers.Qwen3ForCausalLM}

_cache: dict[tuple, object] = {}


def _model(kind: str):
    if ("model", kind) not in _cache:
        torch.manual_seed(0)
        model = MODELS[kind](CONFIGS[kind]()).eval()
        model.generation_config.pad_token_id = 0
        model.generation_config.eos_token_id = None
        _cache[("model", kind)] = model
    return _cache[("model", kind)]


def _decoder(kind: str, **kwargs):
    key = ("decoder", kind, *sorted(kwargs.items()))
    if key not in _cache:
        _cache[key] = tg.compile_decoder(_model(kind), max_seq=MAX_SEQ, batch=len(LENGTHS), prefill_chunk=CHUNK, **kwargs)
    return _cache[key]


def _batch(lengths=LENGTHS, *, side: str = "left", seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of ``lengths`` random tokens (1 .. VOCAB-1) padded with 0 on ``side``, and their mask."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        cols = slice(width - n, width) if side == "left" else slice(0, n)
        ids[row, cols] = torch.randint(1, VOCAB, (n,), generator=g)
        mask[row, cols] = 1
    return ids, mask


def _expected(kind: str, ids: torch.Tensor, mask: torch.Tensor | None, new: int = NEW) -> torch.Tensor:
    with torch.no_grad():
        return _model(kind).generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """transformers' position ids for a padded prompt: cumsum(mask) - 1, 0 at padding."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen3"])
def test_left_padded_batch_matches_transformers(kind):
    ids, mask = _batch()
    expected = _expected(kind, ids, mask)
    got = _decoder(kind).generate(ids, NEW, attention_mask=mask)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    assert got.tolist() == expected.tolist()
    assert len(set(got[:, -NEW:].flatten().tolist())) > 3  # the rows generate varied tokens, not one repeated


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen3"])
def test_logits_match_a_masked_forward(kind):
    """Prefill and every decode step against PyTorch over the whole padded sequence so far."""
    model, dec = _model(kind), _decoder(kind)
    ids, mask = _batch(seed=2)
    logits = dec.prefill(ids, attention_mask=mask)
    for step in range(4):
        with torch.no_grad():
            ref = model(ids, attention_mask=mask, position_ids=_positions(mask)).logits[:, -1]
        assert logits.shape == ref.shape
        assert (logits - ref).abs().max().item() <= MAX_ABS
        token = ref.argmax(-1, keepdim=True)
        ids, mask = torch.cat([ids, token], 1), torch.cat([mask, torch.ones_like(token)], 1)
        logits = dec.decode(token)
    assert dec.position == ids.shape[1]  # the padded slots are cache positions too


def test_a_bool_mask_and_numpy_give_the_same_tokens():
    ids, mask = _batch(seed=3)
    dec = _decoder("llama")
    expected = _expected("llama", ids, mask).numpy()
    assert np.array_equal(dec.generate(ids.numpy(), NEW, attention_mask=mask.numpy().astype(bool)), expected)
    assert np.array_equal(dec.generate(ids.numpy(), NEW, attention_mask=mask.numpy()), expected)


def test_no_mask_and_a_mask_of_ones_after_a_padded_batch():
    """The padding of one call does not leak into the next (each call writes its own mask)."""
    dec = _decoder("qwen3")
    padded, mask = _batch(seed=4)
    dec.generate(padded, NEW, attention_mask=mask)
    ids, ones = _batch((6, 6, 6), seed=5)
    expected = _expected("qwen3", ids, ones).tolist()
    assert dec.generate(ids, NEW).tolist() == expected
    assert dec.generate(ids, NEW, attention_mask=ones).tolist() == expected


def test_padding_every_row_shares_is_dropped_without_a_padding_mask():
    """Leading columns that are padding in every row are dropped: a decoder compiled without a
    padding mask takes them (the output keeps them, as transformers' does)."""
    dec = _decoder("gpt2", padding=False)
    assert not dec.padding and _decoder("gpt2").padding
    ids, mask = _batch((4, 4, 4), seed=6)
    ids = torch.cat([torch.zeros((3, 2), dtype=torch.int64), ids], 1)
    mask = torch.cat([torch.zeros((3, 2), dtype=torch.int64), mask], 1)
    got = dec.generate(ids, NEW, attention_mask=mask)
    assert got.shape == (3, 6 + NEW)
    assert got.tolist() == _expected("gpt2", ids, mask).tolist()


def test_right_padding_matches_transformers_and_warns():
    """transformers generates after the pads (the next token from a pad's logits) and warns;
    the compiled decoder does the same, with a UserWarning."""
    ids, mask = _batch(side="right", seed=7)
    expected = _expected("gpt2", ids, mask)
    with pytest.warns(UserWarning, match="right padding"):
        got = _decoder("gpt2").generate(ids, NEW, attention_mask=mask)
    assert got.tolist() == expected.tolist()


def test_a_failed_call_leaves_the_padded_batch_as_it_was():
    dec = _decoder("llama")
    ids, mask = _batch(seed=8)
    expected = _expected("llama", ids, mask, new=4)
    logits = dec.prefill(ids, attention_mask=mask)
    position = dec.position
    bad = torch.ones((3, 6), dtype=torch.int64)
    bad[1, 5] = VOCAB  # out of range in the second chunk
    with pytest.raises(IndexError):
        dec.extend(bad)
    assert dec.position == position
    tokens = []
    for _ in range(4):
        token = logits.argmax(-1, keepdim=True)
        tokens.append(token)
        logits = dec.decode(token)
    assert torch.cat(tokens, 1).tolist() == expected[:, ids.shape[1]:].tolist()


def test_generate_function_takes_a_mask():
    ids, mask = _batch((2, 5, 4), seed=9)
    got = tg.generate(_decoder("gpt2"), ids, 5, attention_mask=mask)
    assert got.tolist() == _expected("gpt2", ids, mask, new=5).tolist()


def test_estimate_memory_counts_the_padding_mask():
    dec = _decoder("qwen3")
    est = tg.estimate_memory(_model("qwen3"), MAX_SEQ, batch=len(LENGTHS), prefill_chunk=CHUNK)
    assert est.state_bytes == dec.memory.state_bytes
    assert dec.states["kv.mask"].shape == (len(LENGTHS), 1, 1, dec.capacity)
    assert est.state_bytes == sum(a.nbytes for a in dec.states.values())


def test_mask_errors():
    dec = _decoder("gpt2")
    ids, mask = _batch()
    with pytest.raises(ValueError, match=r"attention_mask has shape \[3, 6\]; it must match input_ids \[3, 7\]"):
        dec.generate(ids, NEW, attention_mask=mask[:, 1:])
    with pytest.raises(ValueError, match="must match input_ids"):
        dec.generate(ids, NEW, attention_mask=mask[0])
    with pytest.raises(TypeError, match="0/1 as integers or bools"):
        dec.generate(ids, NEW, attention_mask=mask.float())
    with pytest.raises(TypeError, match="NumPy array or a torch.Tensor"):
        dec.generate(ids, NEW, attention_mask=mask.tolist())
    with pytest.raises(ValueError, match="only 0 .padding. and 1 .token."):
        dec.generate(ids, NEW, attention_mask=mask * 2)
    empty = mask.clone()
    empty[2] = 0
    with pytest.raises(ValueError, match="attention_mask row 2 is all zeros"):
        dec.prefill(ids, attention_mask=empty)
    with pytest.raises(ValueError, match=r"compiled without a padding mask; compile it with compile_decoder\(..., padding=True\)"):
        _decoder("gpt2", padding=False).generate(ids, NEW, attention_mask=mask)
    with pytest.raises(TypeError, match="padding must be a bool"):
        tg.compile_decoder(_model("gpt2"), max_seq=MAX_SEQ, padding="yes")


# --------------------------------------------------------------------------- the kernel


def _masked_attention_module(seq_q: int, capacity: int, batch: int, heads: int, kv_heads: int, dim: int) -> str:
    """q [B, H, Sq, D], new k/v -> attention over the caches and the padding mask state kv.mask."""
    q = f"tensor<{batch}x{heads}x{seq_q}x{dim}xf32>"
    new = f"tensor<{batch}x{kv_heads}x{seq_q}x{dim}xf32>"
    cache = f"tensor<{batch}x{kv_heads}x{capacity}x{dim}xf32>"
    mask = f"tensor<{batch}x1x1x{capacity}xf32>"
    return f"""
builtin.module {{
  func.func @step(%q: {q}, %k: {new}, %v: {new}) -> {q} {{
    %ks = tg.state "kv.0.key" : {cache}
    %vs = tg.state "kv.0.value" : {cache}
    %m = tg.state "kv.mask" : {mask}
    %kc = tg.cache_write %k into %ks {{axis = 2 : i64}} : ({cache}, {new}) -> {cache}
    %vc = tg.cache_write %v into %vs {{axis = 2 : i64}} : ({cache}, {new}) -> {cache}
    %o = tg.attention %q, %kc, %vc mask %m {{scale = 0.25 : f32, causal = true, kv_cache = true}} : ({q}, {cache}, {cache}, {mask}) -> {q}
    func.return %o : {q}
  }}
}}
"""


def test_kv_cache_attention_reads_a_padding_mask_over_several_key_blocks():
    """Capacity 200 (key blocks of 64): row 0's first 100 positions are padding (a whole block
    masked, then part of one), row 1 has holes; a 70-token prefill chunk, then decode steps,
    each checked against torch's SDPA with the same mask and the causal diagonal. Padding
    queries whose every key is masked give 0 (torch: NaN); they are not compared."""
    from test_kv_cache_kernels import compile_text

    batch, heads, kv_heads, dim, capacity = 2, 4, 2, 16, 200
    rng = np.random.default_rng(0)
    prefill = compile_text(_masked_attention_module(70, capacity, batch, heads, kv_heads, dim))
    decode = compile_text(_masked_attention_module(1, capacity, batch, heads, kv_heads, dim), prefill.states)
    real = np.ones((batch, capacity), bool)
    real[0, :100] = False
    real[1, [3, 64, 65, 130]] = False
    prefill.states["kv.mask"][:, 0, 0, :] = np.where(real, 0.0, -np.inf)
    k_all = np.zeros((batch, kv_heads, capacity, dim), np.float32)
    v_all = np.zeros_like(k_all)
    for past, n in [(0, 70), (70, 70), (140, 1), (141, 1), (150, 1), (199, 1)]:
        q = rng.standard_normal((batch, heads, n, dim), dtype=np.float32)
        k = rng.standard_normal((batch, kv_heads, n, dim), dtype=np.float32)
        v = rng.standard_normal((batch, kv_heads, n, dim), dtype=np.float32)
        got = (prefill if n > 1 else decode)(q, k, v, past=past)
        k_all[:, :, past : past + n], v_all[:, :, past : past + n] = k, v
        keys = past + n
        visible = (np.arange(keys)[None, :] <= past + np.arange(n)[:, None])[None, None] & real[:, None, None, :keys]
        ref = torch.nn.functional.scaled_dot_product_attention(
            torch.from_numpy(q), torch.from_numpy(k_all[:, :, :keys]).repeat_interleave(2, 1),
            torch.from_numpy(v_all[:, :, :keys]).repeat_interleave(2, 1), attn_mask=torch.from_numpy(visible), scale=0.25,
        ).numpy()
        seen = visible.any(-1, keepdims=True).repeat(heads, 1)  # [B, H, Sq, 1]: queries with a visible key
        assert (got[~seen.squeeze(-1)] == 0).all()
        np.testing.assert_allclose(np.where(seen, got, 0), np.where(seen, ref, 0), rtol=1e-5, atol=1e-5, err_msg=f"past={past}")
