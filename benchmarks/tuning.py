"""Tuning a model from an empty timing database: how long it takes, what it chose, and the
whole graph's time tuned against the heuristic paths.

    .venv/bin/python benchmarks/tuning.py [--model gpt2] [--threads 2] [--seq 128] [--tolerance 1e-5]

GPT-2 small (random weights, transformers' config) at ids [1, seq], the logits only. The
database is a fresh file in a temporary directory (or ``--db``), and so is the compile cache
(`benchmarks/gpt2.py` sets ``TG_CACHE_DIR``): nothing measured or compiled before counts. Printed: the tuning wall time
(``tg.tune``: the evaluator run, every path compiled alone and timed), the number of paths, the
choices that differ from the heuristic, then ``tg.compile(..., tune="cached")`` and the tuned
and heuristic graphs' median time per call, interleaved call by call (``--calls``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers
from gpt2 import LogitsOnly  # benchmarks/gpt2.py (it also gives the run a fresh compile cache)

import tensor_graphs as tg
from tensor_graphs.target import Target, cpu_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--tolerance", type=float, default=1e-5)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = LogitsOnly(transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=args.layers)).eval()).eval()
    ids = torch.randint(0, 50257, (1, args.seq))
    db = args.db or str(Path(tempfile.mkdtemp()) / "tuning.sqlite")
    tg.set_num_threads(args.threads)
    print(f"{cpu_model()} ({Target.host().llvm_cpu}), {args.threads} thread(s), {platform.python_version()}; "
          f"GPT-2 small ({args.layers} layers) at [1, {args.seq}]; database {db}")
    t0 = time.perf_counter()
    report = tg.tune(model, (ids,), tolerance=args.tolerance, tuning_db=db)
    tune_s = time.perf_counter() - t0
    tuned = [c for c in report.choices if c.tuned]
    print(f"tuning: {tune_s:.1f} s wall, {report.measured} paths measured; {len(tuned)} kernel(s) differ from the heuristic")
    print(report.format(all_kernels=False))
    t0 = time.perf_counter()
    fn = tg.compile(model, (ids,), tune="cached", tolerance=args.tolerance, tuning_db=db)
    print(f"compile (tune='cached', with the whole-graph check): {time.perf_counter() - t0:.1f} s")
    heuristic = tg.compile(model, (ids,))
    times = {"tuned": [], "heuristic": []}
    for _ in range(args.calls):
        for name, g in (("tuned", fn), ("heuristic", heuristic)):
            t0 = time.perf_counter()
            g(ids)
            times[name].append(time.perf_counter() - t0)
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    print(f"whole graph, median of {args.calls} interleaved calls: tuned {med['tuned']:.2f} ms, heuristic "
          f"{med['heuristic']:.2f} ms, tuned/heuristic {med['tuned'] / med['heuristic']:.3f}")
    print(f"error of the tuned graph vs the fp32 heuristic path: {fn.tuning.graph_error}")


if __name__ == "__main__":
    main()
