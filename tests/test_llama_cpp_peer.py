"""The llama.cpp peer's GGUF files (benchmarks/llama_cpp_peer.py): the benchmark models written
as llama.cpp's converter writes them, read back with ``gguf``'s reader: every tensor under its
llama.cpp name, llama.cpp's shape (GGML order: the innermost dimension first) and the model's
exact float32 values; the hyperparameters llama.cpp reads. The engine itself needs
``llama-cpp-python`` (the bench extra, built from source): benchmarks only."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")  # in the test extra; guarded for a bare checkout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import decode  # noqa: E402
import llama_cpp_peer  # noqa: E402


def _read(path):
    reader = gguf.GGUFReader(path)
    tensors = {t.name: np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)]) for t in reader.tensors}
    fields = {name: f.contents() for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    return tensors, fields


def test_a_qwen3_model_as_gguf(tmp_path):
    model = decode.build_qwen3(True)
    path = str(tmp_path / "q.gguf")
    llama_cpp_peer.write_gguf(model, path)
    tensors, fields = _read(path)
    cfg = model.config
    assert fields["general.architecture"] == "qwen3" and fields["tokenizer.ggml.model"] == "none"
    assert (fields["qwen3.block_count"], fields["qwen3.attention.head_count"], fields["qwen3.attention.head_count_kv"],
            fields["qwen3.attention.key_length"], fields["qwen3.vocab_size"]) == (
        cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    assert "output.weight" not in tensors  # tied: llama.cpp reads the embedding
    assert len(tensors) == len(sd) - 1
    assert np.array_equal(tensors["token_embd.weight"], sd["model.embed_tokens.weight"])
    assert np.array_equal(tensors["blk.1.attn_k.weight"], sd["model.layers.1.self_attn.k_proj.weight"])
    assert np.array_equal(tensors["blk.0.attn_q_norm.weight"], sd["model.layers.0.self_attn.q_norm.weight"])
    assert np.array_equal(tensors["blk.1.ffn_down.weight"], sd["model.layers.1.mlp.down_proj.weight"])
    assert all(t.dtype == np.float32 for t in tensors.values())


def test_a_gpt2_model_as_gguf_with_its_conv1d_weights_transposed(tmp_path):
    model = decode.build_gpt2(True)
    path = str(tmp_path / "g.gguf")
    llama_cpp_peer.write_gguf(model, path)
    tensors, fields = _read(path)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    assert fields["general.architecture"] == "gpt2"
    qkv = sd["transformer.h.0.attn.c_attn.weight"]  # Conv1D: [in, out]
    assert tensors["blk.0.attn_qkv.weight"].shape == qkv.T.shape and np.array_equal(tensors["blk.0.attn_qkv.weight"], qkv.T)
    assert np.array_equal(tensors["position_embd.weight"], sd["transformer.wpe.weight"])
    assert np.array_equal(tensors["blk.1.attn_qkv.bias"], sd["transformer.h.1.attn.c_attn.bias"])


def test_a_model_gguf_cannot_write_is_refused(tmp_path):
    import transformers

    model = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                           intermediate_size=64, vocab_size=50))
    with pytest.raises(ValueError, match="no GGUF writer for model type 'bert'"):
        llama_cpp_peer.write_gguf(model, str(tmp_path / "b.gguf"))
    with pytest.raises(ValueError, match="format must be one of F32, BF16, Q8_0, Q4_0, Q4_K_M"):
        llama_cpp_peer.gguf_file(model, "Q2_K")
