"""A dynamic GEMM chain against static compiles at few rows, where the weights stream from memory.

    .venv/bin/python benchmarks/dynamic_small_rows.py [--rows 6 10 16 18 32] [--threads 1] [--rounds 11]

Eight pairs of ``Linear(768, 3072)`` / ``Linear(3072, 768)`` without bias (151 MB of float32
weights: more than any L3 here, so each GEMM streams its packed panels from memory, as BERT-base's
and GPT-2's do at a prefill of a few tokens), compiled once with ``Dim("rows", 1, 512)`` and once
per row count without; call by call alternately, medians of the rounds. Where the dynamic graph
is slower than the static one at few rows this shows it kernel family by kernel family: the packed
GEMM's run-time row tails and prefetch plans (`codegen.llvm.kernels_gemm`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TG_CACHE", "off")

import torch
from torch.export import Dim

import tensor_graphs as tg
from tensor_graphs.target import Target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[6, 10, 16, 18, 32])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    torch.manual_seed(0)
    tg.set_num_threads(args.threads)
    layers = [layer for _ in range(8) for layer in (torch.nn.Linear(768, 3072, bias=False), torch.nn.Linear(3072, 768, bias=False))]
    model = torch.nn.Sequential(*layers).eval()
    dynamic = tg.compile(model, (torch.randn(64, 768),), dynamic_shapes=({0: Dim("rows", min=1, max=512)},))
    print(f"{Target.host().describe()}; {args.threads} thread(s)")
    print("| rows | static ms | dynamic ms | dynamic / static |\n|--:|--:|--:|--:|")
    for rows in args.rows:
        x = torch.randn(rows, 768)
        static = tg.compile(model, (x,))
        with torch.no_grad():
            torch.testing.assert_close(dynamic(x), static(x), rtol=1e-5, atol=1e-5)
        times: dict[str, list[float]] = {"static": [], "dynamic": []}
        for _ in range(args.rounds):
            for name, fn in (("static", static), ("dynamic", dynamic)):
                fn(x)
                t0 = time.perf_counter()
                for _ in range(3):
                    fn(x)
                times[name].append((time.perf_counter() - t0) / 3 * 1e3)
        s, d = statistics.median(times["static"]), statistics.median(times["dynamic"])
        print(f"| {rows} | {s:.3f} | {d:.3f} | {d / s:.3f} |", flush=True)


if __name__ == "__main__":
    main()
