"""Arena bytes of static compiles at several sequence lengths: what planning a dynamic graph's
memory at its symbols' maximum would cost against planning each size exactly.

    .venv/bin/python benchmarks/arena_by_size.py [--models bert gpt2] [--seqs 16 128 512]

Each model (random weights from its transformers config: BERT base, GPT-2 small with the logits
only) is compiled once per sequence length at batch 1 (``tg.compile``, no compile cache) and its
``fn.memory`` printed: the arena (every intermediate, planned by `transforms/plan_memory`), the
weights and their packed copies. A graph planned at the maximum holds the last row's arena at
every size; the difference to a smaller row is what an exact plan per size would save.
"""

from __future__ import annotations

import argparse
import os
import platform

os.environ.setdefault("TG_CACHE", "off")

import torch  # noqa: E402
import transformers  # noqa: E402

import tensor_graphs as tg  # noqa: E402


class Hidden(torch.nn.Module):
    """One output of a transformers model as a plain tensor."""

    def __init__(self, model, key: str):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, ids):
        return getattr(self.model(ids, use_cache=False) if self.key == "logits" else self.model(ids), self.key)


MODELS = {
    "bert": lambda: Hidden(transformers.BertModel(transformers.BertConfig()).eval(), "last_hidden_state"),
    "gpt2": lambda: Hidden(transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval(), "logits"),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--seqs", nargs="+", type=int, default=[16, 128, 512])
    args = p.parse_args()
    torch.manual_seed(0)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}")
    print("| model | seq | arena MiB | weights MiB | packed MiB | arena / weights+packed |")
    print("|---|--:|--:|--:|--:|--:|")
    mib = 1 << 20
    for name in args.models:
        model = MODELS[name]()
        for seq in args.seqs:
            fn = tg.compile(model, (torch.randint(0, 1000, (1, seq)),), keep_ir=False)
            m = fn.memory
            print(f"| {name} | {seq} | {m.arena_bytes / mib:.2f} | {m.weight_bytes / mib:.1f} | {m.packed_bytes / mib:.1f} | "
                  f"{m.arena_bytes / (m.weight_bytes + m.packed_bytes):.4f} |", flush=True)
            del fn


if __name__ == "__main__":
    main()
