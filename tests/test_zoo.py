"""The model zoo: the architectures people run, tiny configs with random weights, real inputs
(padding masks included), each compiled once and compared with PyTorch.

Tolerance: 1e-4 absolute on hidden states / logits of these tiny models (what they reach is
about 1e-6: float32 sums in another order). Encoders compare every position, padded ones too
(their queries still attend to the real keys); decoders with left padding compare the real
positions only, as a user reads them (a padded query row has no key to attend to).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import transformers as T

import tensor_graphs as tg

ATOL = 1e-4
BATCH, SEQ, VOCAB = 2, 9, 100

#: a tiny transformer: 2 layers, d 32, 4 heads, FFN 64
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64, vocab_size=VOCAB)


@dataclass(frozen=True)
class Case:
    build: Callable[[], torch.nn.Module]
    #: "encoder" (ids, mask -> last_hidden_state), "decoder" (ids, left-padded mask -> logits)
    kind: str


class Encoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, token_types: bool = False):
        super().__init__()
        self.model, self.token_types = model, token_types

    def forward(self, ids, mask):
        kw = {"token_type_ids": (torch.arange(ids.shape[1]) >= ids.shape[1] // 2).long().expand_as(ids)} if self.token_types else {}
        return self.model(input_ids=ids, attention_mask=mask, **kw).last_hidden_state


class Decoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits


def _bert_with_token_types() -> torch.nn.Module:
    return Encoder(T.BertModel(T.BertConfig(**SMALL)), token_types=True)


ZOO: dict[str, Case] = {
    "bert": Case(_bert_with_token_types, "encoder"),
    "roberta": Case(lambda: Encoder(T.RobertaModel(T.RobertaConfig(**SMALL, pad_token_id=1))), "encoder"),
    "xlm-roberta": Case(lambda: Encoder(T.XLMRobertaModel(T.XLMRobertaConfig(**SMALL, pad_token_id=1))), "encoder"),
    "distilbert": Case(
        lambda: Encoder(T.DistilBertModel(T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64))),
        "encoder",
    ),
    "albert": Case(lambda: Encoder(T.AlbertModel(T.AlbertConfig(**SMALL, embedding_size=16))), "encoder"),
    "electra": Case(lambda: Encoder(T.ElectraModel(T.ElectraConfig(**SMALL, embedding_size=32))), "encoder"),
    "deberta-v2": Case(lambda: Encoder(T.DebertaV2Model(T.DebertaV2Config(**SMALL))), "encoder"),
    "t5-encoder": Case(
        lambda: Encoder(T.T5EncoderModel(T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4))), "encoder"
    ),
    "bart-encoder": Case(
        lambda: Encoder(
            T.BartModel(
                T.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
            ).get_encoder()
        ),
        "encoder",
    ),
    "llama": Case(lambda: Decoder(T.LlamaForCausalLM(T.LlamaConfig(**SMALL, num_key_value_heads=2))), "decoder"),
    "mistral": Case(lambda: Decoder(T.MistralForCausalLM(T.MistralConfig(**SMALL, num_key_value_heads=2))), "decoder"),
    "qwen2": Case(lambda: Decoder(T.Qwen2ForCausalLM(T.Qwen2Config(**SMALL, num_key_value_heads=2))), "decoder"),
    "qwen3": Case(lambda: Decoder(T.Qwen3ForCausalLM(T.Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=8))), "decoder"),
    "gemma": Case(lambda: Decoder(T.GemmaForCausalLM(T.GemmaConfig(**SMALL, num_key_value_heads=2, head_dim=8))), "decoder"),
    "gemma2": Case(lambda: Decoder(T.Gemma2ForCausalLM(T.Gemma2Config(**SMALL, num_key_value_heads=2, head_dim=8))), "decoder"),
    "phi": Case(lambda: Decoder(T.PhiForCausalLM(T.PhiConfig(**SMALL))), "decoder"),
    "phi3": Case(lambda: Decoder(T.Phi3ForCausalLM(T.Phi3Config(**SMALL, num_key_value_heads=2, pad_token_id=0))), "decoder"),
    "stablelm": Case(lambda: Decoder(T.StableLmForCausalLM(T.StableLmConfig(**SMALL, num_key_value_heads=2))), "decoder"),
    "olmo": Case(lambda: Decoder(T.OlmoForCausalLM(T.OlmoConfig(**SMALL, num_key_value_heads=2, pad_token_id=0))), "decoder"),
    "gpt2": Case(lambda: Decoder(T.GPT2LMHeadModel(T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64))), "decoder"),
    "gpt-neox": Case(lambda: Decoder(T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**SMALL))), "decoder"),
    "gpt-j": Case(lambda: Decoder(T.GPTJForCausalLM(T.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4))), "decoder"),
    "codegen": Case(lambda: Decoder(T.CodeGenForCausalLM(T.CodeGenConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4))), "decoder"),
    "opt": Case(lambda: Decoder(T.OPTForCausalLM(T.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, max_position_embeddings=64, word_embed_proj_dim=32))), "decoder"),
    "bloom": Case(lambda: Decoder(T.BloomForCausalLM(T.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4))), "decoder"),
    "falcon": Case(lambda: Decoder(T.FalconForCausalLM(T.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4))), "decoder"),
}


def inputs(kind: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and a 0/1 mask: row 1 padded (at the end for encoders, on the left for
    decoders, as transformers pads for generation)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    if kind == "encoder":
        mask[1, SEQ - 3 :] = 0
    else:
        mask[1, :3] = 0
    return ids, mask


_COMPILED: dict[str, tuple[torch.nn.Module, object]] = {}


def compiled(name: str):
    """The model and its compiled function, built once per test session."""
    if name not in _COMPILED:
        torch.manual_seed(0)
        model = ZOO[name].build().eval()
        _COMPILED[name] = (model, tg.compile(model, inputs(ZOO[name].kind, 0)))
    return _COMPILED[name]


@pytest.mark.parametrize("name", list(ZOO))
@pytest.mark.parametrize("seed", [0, 1])
def test_zoo_matches_pytorch(name, seed):
    model, fn = compiled(name)
    ids, mask = inputs(ZOO[name].kind, seed)
    with torch.no_grad():
        expected = model(ids, mask)
    got = fn(ids, mask)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    keep = torch.ones_like(mask, dtype=torch.bool) if ZOO[name].kind == "encoder" else mask.bool()
    diff = (got - expected).abs()[keep].max().item()
    assert diff <= ATOL, f"{name}: max abs diff {diff:.3g} > {ATOL}"


def test_zoo_attention_is_fused():
    """The padding mask reaches `tg.attention` as an operand: one attention op per layer."""
    for name in ("bert", "llama"):
        _, fn = compiled(name)
        assert fn.ir("tg").count("tg.attention ") == 2, name


def test_multihead_attention_and_encoder_layer():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0).eval()

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = mha

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    x = torch.randn(2, 5, 16)
    for model in (SelfAttention().eval(), layer):
        fn = tg.compile(model, (x,))
        with torch.no_grad():
            assert (fn(x) - model(x)).abs().max().item() <= 1e-5
        assert fn.ir("tg").count("tg.attention ") == 1


def test_in_place_ops_are_functionalised():
    class InPlace(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            y.add_(1.0)
            return torch.relu_(y) * 2

    torch.manual_seed(0)
    model, x = InPlace().eval(), torch.randn(3, 8)
    fn = tg.compile(model, (x,))
    with torch.no_grad():
        assert (fn(x) - model(x)).abs().max().item() <= 1e-6
