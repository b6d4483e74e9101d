"""A dynamic graph against static compiles of the same model, size by size: one ``tg.compile``
with ``dynamic_shapes`` serves every size; each static compile serves one. Both run in this
process, call by call alternately (ABAB...), medians of the rounds; the compile times too, with
the compile cache off (``TG_CACHE=off``: every compile runs the passes and LLVM).

    .venv/bin/python benchmarks/dynamic_vs_static.py [--models bert gpt2 mlp resnet50] [--threads 1,2]
                                                     [--rounds 10] [--quick] [--largest N] [--out FILE.md]

Models (random weights, ``torch.manual_seed(0)``): BERT-base (transformers ``BertConfig()``:
12 layers, d 768) ``ids -> last hidden state`` at batch 1 seq 16 / 128 / 512 and batch 8 seq 128
(``Dim("seq", 1, 512)``, the batch static per graph); GPT-2 small (``GPT2Config()``) ``ids ->
logits`` at seq 32 / 128 (``Dim("seq", 1, 1024)``); the MLP 256-1024-1024-256 of tg-bench at
batch 1 / 64 (``Dim("batch", 1, 256)``); transformers' ResNet-50 (the tg-bench model) at batch 1 / 8
(``Dim("batch", 1, 16)``, 224x224 images). ``--quick``: tiny configurations (a smoke test).
``--largest N``: the size symbol's range ends at N instead (rows past it are left out): what
planning the arena at the top of the range costs a call at a small size.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["TG_CACHE"] = "off"  # compile times of the passes and LLVM, never of a cache hit

import torch
from torch.export import Dim

import tensor_graphs as tg


class _Model(torch.nn.Module):
    def __init__(self, inner, run):
        super().__init__()
        self.inner, self.run = inner, run

    def forward(self, x):
        return self.run(self.inner, x)


def build(name: str, quick: bool):
    """(model, [(row label, example input)], dynamic_shapes spec)."""
    torch.manual_seed(0)
    if name == "bert":
        from transformers import BertConfig, BertModel

        cfg = BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=512) if quick \
            else BertConfig()
        model = _Model(BertModel(cfg).eval(), lambda m, ids: m(input_ids=ids).last_hidden_state)
        sizes = [(1, 16), (1, 128), (1, 512), (8, 128)]
        rows = [(f"batch {b}, seq {s}", torch.randint(0, cfg.vocab_size, (b, s))) for b, s in sizes]
        return "BERT-base" if not quick else "BERT (tiny)", model, rows, lambda x: {"x": {1: Dim("seq", min=1, max=512)}}
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4) if quick else GPT2Config()
        model = _Model(GPT2LMHeadModel(cfg).eval(), lambda m, ids: m(input_ids=ids, use_cache=False).logits)
        rows = [(f"prefill {s}", torch.randint(0, cfg.vocab_size, (1, s))) for s in (32, 128)]
        return "GPT-2 small" if not quick else "GPT-2 (tiny)", model, rows, lambda x: {"x": {1: Dim("seq", min=1, max=1024)}}
    if name == "mlp":
        sys.path.insert(0, str(Path(__file__).parent))
        import mlp

        model = _Model(mlp.build(), lambda m, x: m(x))
        rows = [(f"batch {b}", torch.randn(b, 256)) for b in (1, 64)]
        return "MLP 256-1024-1024-256", model, rows, lambda x: {"x": {0: Dim("batch", min=1, max=256)}}
    if name == "resnet50":
        sys.path.insert(0, str(Path(__file__).parent))
        from suite import build_resnet50

        model = _Model(build_resnet50(quick), lambda m, x: m(x))
        size = 64 if quick else 224
        rows = [(f"batch {b}", torch.randn(b, 3, size, size)) for b in (1, 8)]
        return "ResNet-50" if not quick else "ResNet (tiny)", model, rows, lambda x: {"x": {0: Dim("batch", min=1, max=16)}}
    raise SystemExit(f"unknown model {name!r} (bert, gpt2, mlp, resnet50)")


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def alternate(fns: list, x, rounds: int, warmup: int = 2) -> list[float]:
    """Median seconds per call of each of ``fns`` on ``x``, called alternately."""
    for _ in range(warmup):
        for f in fns:
            f(x)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for f, t in zip(fns, times):
            t0 = time.perf_counter()
            f(x)
            t.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def _with_largest(rows: list, spec, largest: int | None):
    """``rows`` and ``spec`` for a range ending at ``largest`` (None: as built): the rows past it
    left out, the spec's Dim with that max."""
    if largest is None:
        return rows, spec
    def narrowed(x):
        return {"x": {d: Dim(dim.__name__, min=dim.min, max=largest) for d, dim in spec(x)["x"].items()}}
    dim = next(iter(spec(rows[0][1])["x"]))
    return [(what, x) for what, x in rows if x.shape[dim] <= largest], narrowed


def _example(x: torch.Tensor, dim: int, largest: int | None) -> torch.Tensor:
    """The dynamic compile's example: ``x``, or two of it along ``dim`` when it has one there
    (torch.export specialises a size of 1) and the range reaches 2."""
    if x.shape[dim] == 1 and (largest is None or largest >= 2):
        return torch.cat([x, x], dim)
    return x


def bench(name: str, threads: list[int], rounds: int, quick: bool, largest: int | None = None) -> list[str]:
    label, model, rows, spec = build(name, quick)
    rows, spec = _with_largest(rows, spec, largest)
    dyn_inputs = {}
    lines = []
    with torch.no_grad():
        tg.compile(model, (rows[0][1],))  # warm: the first compile of a process loads and initialises what every later one reuses
        for batch in dict.fromkeys(x.shape[0] if name not in ("mlp", "resnet50") else 0 for _, x in rows):
            # the example: the row's largest (torch.export specialises a size of 1); the forward's
            # argument is "x": the spec names it
            example = max((x for _, x in rows if name in ("mlp", "resnet50") or x.shape[0] == batch), key=lambda x: x.numel())
            example = _example(example, next(iter(spec(example)["x"])), largest)
            dynamic, dyn_seconds = timed(lambda: tg.compile(model, (example,), dynamic_shapes=spec(example)))
            dyn_inputs[batch] = (dynamic, dyn_seconds)
            print(f"{label}: dynamic compile (batch {batch}): {dyn_seconds:.2f} s; {dynamic.memory}", flush=True)
        for what, x in rows:
            dynamic, dyn_seconds = dyn_inputs[x.shape[0] if name not in ("mlp", "resnet50") else 0]
            static, static_seconds = timed(lambda: tg.compile(model, (x,)))
            expected = model(x)
            for fn in (dynamic, static):
                torch.testing.assert_close(fn(x), expected, rtol=1e-4, atol=1e-4)
            for t in threads:
                tg.set_num_threads(t)
                torch.set_num_threads(t)
                d, s = alternate([dynamic, static], x, rounds)
                line = (f"| {label} | {what} | {t} | {s * 1e3:.3f} | {d * 1e3:.3f} | {d / s:.3f} | {static_seconds:.2f} | "
                        f"{dyn_seconds:.2f} | {dyn_seconds / static_seconds:.2f} |")
                print(line, flush=True)
                lines.append(line)
            del static
            gc.collect()
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["bert", "gpt2", "mlp"])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--largest", type=int, default=None, help="end each size symbol's range here (rows past it left out)")
    ap.add_argument("--out", default=None, help="write the table (markdown) here too")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    head = ["| model | row | threads | static ms | dynamic ms | dynamic / static | static compile s | "
            "dynamic compile s (once, every size) | dynamic / static compile |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    print("\n".join(head), flush=True)
    lines = []
    for name in args.models:
        lines += bench(name, threads, args.rounds, args.quick, args.largest)
    if args.out:
        from tensor_graphs.target import Target

        cpu = Target.host().describe()
        Path(args.out).write_text(
            f"# A dynamic graph against static compiles\n\n`{' '.join(['benchmarks/dynamic_vs_static.py', *(argv or sys.argv[1:])])}`, "
            f"{cpu}; medians of {args.rounds} alternating rounds.\n\n" + "\n".join(head + lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
