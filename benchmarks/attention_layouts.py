"""What `absorb-attention-layouts` saves on the CPU: the benchmark models compiled with the pass
and without it (the pass replaced by one that does nothing), timed side by side in one process
(alternating blocks, `gpt2.bench`), with the transposes each graph runs.

    .venv/bin/python benchmarks/attention_layouts.py [--models gpt2 qwen3] [--seq 128] [--threads 2] [--repeat 15]

Rows: the forward of GPT-2 small and of the Qwen3-0.6B-shaped model (`decode.build_*`, random
weights, all logits) at ``--seq`` tokens, batch 1, float32. Both graphs' logits are compared with
each other and with PyTorch's.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from decode import build_gpt2, build_qwen3  # noqa: E402
from gpt2 import bench  # noqa: E402
from gpu import Logits  # noqa: E402

import tensor_graphs as tg  # noqa: E402
from tensor_graphs import passes  # noqa: E402
from tensor_graphs.transforms.absorb_attention_layouts import AbsorbAttentionLayoutsPass  # noqa: E402

BUILD = {"gpt2": build_gpt2, "qwen3": build_qwen3}
PASS = AbsorbAttentionLayoutsPass.name


class _Skip(AbsorbAttentionLayoutsPass):
    """The pass, doing nothing (the "without" graphs)."""

    def apply(self, ctx, op) -> None:
        return None


def compile_graph(model, ids, absorb: bool, profile: bool = False):
    """``model`` compiled with `absorb-attention-layouts` or without (the compile cache is off
    here: its key does not see a pass swapped at run time)."""
    os.environ["TG_CACHE"] = "off"
    saved = passes.PASSES[PASS]
    if not absorb:
        passes.PASSES[PASS] = lambda: _Skip
    try:
        return tg.compile(model, (ids,), profile=profile)
    finally:
        passes.PASSES[PASS] = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["gpt2", "qwen3"], choices=list(BUILD))
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    tg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, seq {args.seq}")
    rows = []
    for name in args.models:
        model = Logits(BUILD[name](False)).eval()
        ids = torch.randint(0, model.model.config.vocab_size, (1, args.seq), generator=torch.Generator().manual_seed(0))
        graphs = {absorb: compile_graph(model, ids, absorb) for absorb in (True, False)}
        print(f"{name}: target {graphs[True].target.llvm_cpu} ({graphs[True].target.level})", flush=True)
        outs = {k: np.asarray(f(ids)) for k, f in graphs.items()}
        with torch.no_grad():
            ref = model(ids).numpy()
        diff = float(np.abs(outs[True] - outs[False]).max())
        errors = {k: float(np.abs(v - ref).max()) for k, v in outs.items()}
        counts = {absorb: graphs[absorb].ir("buf").count(" buf.transpose ") for absorb in (True, False)}
        ms = bench({"with": lambda: graphs[True](ids), "without": lambda: graphs[False](ids)}, args.repeat)
        rows.append((name, ms["with"], ms["without"], counts[True], counts[False], diff))
        print(f"{name}: with {ms['with']:.2f} ms, without {ms['without']:.2f} ms; transposes {counts[True]} vs "
              f"{counts[False]}; max |logits difference| {diff:.1e}; against PyTorch (largest logit "
              f"{np.abs(ref).max():.2f}): with {errors[True]:.1e}, without {errors[False]:.1e}", flush=True)
    print("\n| model | forward | with the pass | without | with / without | transposes (with / without) |")
    print("|---|---|--:|--:|--:|--:|")
    for name, w, wo, cw, cwo, _ in rows:
        print(f"| {name} | {args.seq} tokens | {w:.2f} ms | {wo:.2f} ms | {w / wo:.3f} | {cw} / {cwo} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
