"""A transformers causal language model as the graph a decoder compiles: one step of ``S`` tokens.

    step = CausalLMStep(model)          # forward(input_ids [B, S], position_ids [B, S]) -> logits [B, S, V]

The step runs the model without its own cache (``use_cache=False``): `introduce-kv-cache` later
gives every attention a persistent cache, so the same traced graph serves any position. The
positions are an input, so position embeddings (GPT-2's ``wpe``, Qwen/Llama's RoPE tables) are
computed for the run-time positions. The attention mask is all ones (a constant), which keeps
transformers from inspecting ``position_ids`` for packed sequences (run-time ops that would not
fold) and lets the causal mask fold to ``causal = true``.
"""

from __future__ import annotations

import torch


class CausalLMStep(torch.nn.Module):
    """``(input_ids, position_ids) -> logits`` of a transformers ``*ForCausalLM`` (GPT-2, Qwen3, Llama, ...)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(input_ids.shape, dtype=torch.long)
        out = self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False)
        return out.logits


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
