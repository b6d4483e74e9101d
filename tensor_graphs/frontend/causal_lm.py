"""A transformers causal language model as the graph a decoder compiles: one step of ``S`` tokens.

    step = CausalLMStep(model)
    logits = step(input_ids, position_ids, rows)   # [B, S], [B, S], [B] -> [B, V]

Only the rows whose logits are wanted go through the output projection: ``rows`` indexes the
``B * S`` final hidden states (row ``b * S + i`` is token ``i`` of sequence ``b``), gathered with
``F.embedding`` into a ``tg.embedding``; a prefill chunk asks for its last real token, whose
index is known only at run time (the last chunk may be padded). For a 151936-token vocabulary
and a 128-token chunk this skips 40 GFLOP of the 150 a full-logits step would do.

The step runs the model without its own cache (``use_cache=False``): `introduce-kv-cache` later
gives every attention a persistent cache, so the same traced graph serves any position. The
positions are an input, so position embeddings (GPT-2's ``wpe``, Qwen/Llama's RoPE tables) are
computed for the run-time positions. The attention mask is all ones (a constant), which keeps
transformers from inspecting ``position_ids`` for packed sequences (run-time ops that would not
fold) and lets the causal mask fold to ``causal = true``. Padding (a batch of left-padded prompts)
is not traced: ``introduce-kv-cache{padding_mask=true}`` gives the cached attentions a key-padding
mask over the cache's positions, and the decoder passes transformers' position ids for padded
rows (``cumsum(mask) - 1``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class CausalLMStep(torch.nn.Module):
    """``(input_ids, position_ids, rows) -> logits of the selected rows`` of a transformers
    ``*ForCausalLM`` whose logits are ``lm_head(final hidden states)`` (GPT-2, Qwen3, Llama, ...)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        base = getattr(model, "base_model", None)
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if base is None or base is model or head is None:
            raise TypeError(
                f"{type(model).__name__} is not a transformers causal LM with a base model and an "
                "output projection (lm_head); compile_decoder supports GPT-2, Qwen3, Llama and the like"
            )
        self.base = base
        self.head = head

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(input_ids.shape, dtype=torch.long, device=input_ids.device)
        out = self.base(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False)
        hidden = out.last_hidden_state
        b, s, h = hidden.shape
        return self.head(F.embedding(rows, hidden.reshape(b * s, h)))


def max_positions(model: torch.nn.Module) -> int | None:
    """The longest sequence ``model`` has positions for (None when its config does not say)."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def vocab_size(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    value = getattr(config, "vocab_size", None)
    return value if isinstance(value, int) else None
