"""How much work pays for a thread: where N threads start to beat one, per kernel family.

    .venv/bin/python benchmarks/thread_work.py                 # N = every CPU of this process
    .venv/bin/python benchmarks/thread_work.py --threads 2 4 8 16

A parallel kernel runs on at most ``max(flops / flops_per_thread, bytes / bytes_per_thread)``
threads (`tensor_graphs.target.ThreadWork`): each thread must bring enough work to pay for what
the parallel region costs (waking the team, sharing out the range, the join). This script
measures that crossover. For each family it compiles a one-kernel graph at doubling sizes with the
cap lifted (every kernel may take every thread) and times it at 1 thread and at N threads
(medians of alternating blocks, side by side): the smallest size at which N threads are at
least 10% faster than one, divided by N, is the work one thread must bring.

Families: a streaming elementwise kernel (``x * y + x``: bytes = 12 per element), a matrix-vector
product through the packed GEMM (one row: bytes = the weight, 4 K N), and a packed GEMM of 32
rows (flops = 2 M K N). The elementwise and matrix-vector crossovers give ``bytes_per_thread``
(the larger), the GEMM's gives ``flops_per_thread``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import numpy as np
import torch

import tensor_graphs as tg
from tensor_graphs.target import ThreadWork, resolve

#: a speed-up below this is noise, not a reason to wake threads
GAIN = 1.10


class Elementwise(torch.nn.Module):
    def forward(self, x, y):
        return x * y + x


def families(sizes: int) -> dict[str, list[tuple[torch.nn.Module, tuple, float, float]]]:
    """name -> [(model, inputs, flops, bytes)] at doubling sizes."""
    torch.manual_seed(0)
    out: dict[str, list] = {"elementwise": [], "matrix-vector": [], "gemm (32 rows)": []}
    for i in range(sizes):
        n = 1024 << i  # 1K .. floats
        out["elementwise"].append((Elementwise(), (torch.randn(n), torch.randn(n)), 2.0 * n, 12.0 * n))
        k = 32 << (i // 2)
        nn_ = 32 << ((i + 1) // 2)
        out["matrix-vector"].append((torch.nn.Linear(k, nn_, bias=False).eval(), (torch.randn(1, k),), 2.0 * k * nn_, 4.0 * k * nn_))
        out["gemm (32 rows)"].append((torch.nn.Linear(k, nn_, bias=False).eval(), (torch.randn(32, k),), 2.0 * 32 * k * nn_, 4.0 * k * nn_))
    return out


def timed(fn, inputs, threads: int, seconds: float = 0.05) -> float:
    tg.set_num_threads(threads)
    fn(*inputs)
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn(*inputs)
        calls += 1
    return (time.perf_counter() - t0) / calls


def crossover(rows, threads: int, target, rounds: int) -> tuple[list[tuple[float, float, float, float]], int | None]:
    """[(flops, bytes, t1, tN)] per size, and the index of the first size where N threads pay."""
    table, first = [], None
    for model, inputs, flops, nbytes in rows:
        fn = tg.compile(model, inputs, target=target)
        xs = [x.numpy() for x in inputs]
        t1, tn = [], []
        for _ in range(rounds):  # alternate, so that a slow moment hits both
            t1.append(timed(fn, xs, 1))
            tn.append(timed(fn, xs, threads))
        m1, mn = statistics.median(t1), statistics.median(tn)
        table.append((flops, nbytes, m1, mn))
        if first is None and m1 >= GAIN * mn:
            first = len(table) - 1
    return table, first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    ap.add_argument("--sizes", type=int, default=12, help="doubling sizes per family (default 12: 1K .. 2M elements)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target", default=None)
    args = ap.parse_args(argv)
    base = resolve(args.target)
    lifted = dataclasses.replace(base, thread_work=ThreadWork(1, 1))  # every kernel may take every thread
    print(f"target: {base.describe()}")
    print(f"current: {base.thread_work}")
    rows = families(args.sizes)
    for threads in args.threads:
        if threads < 2:
            continue
        need_bytes, need_flops = [], []
        print(f"\n## {threads} threads against 1 (speed-up >= {GAIN:.2f} pays)\n")
        print("| family | MFLOP | KiB | 1 thread us | N threads us | speed-up |")
        print("|---|--:|--:|--:|--:|--:|")
        for name, family in rows.items():
            table, first = crossover(family, threads, lifted, args.rounds)
            for i, (flops, nbytes, t1, tn) in enumerate(table):
                mark = " <- pays from here" if i == first else ""
                print(f"| {name} | {flops / 1e6:.3f} | {nbytes / 1024:.0f} | {t1 * 1e6:.1f} | {tn * 1e6:.1f} | {t1 / tn:.2f}{mark} |", flush=True)
            if first is None:
                print(f"| {name} | never pays at these sizes | | | | |")
                continue
            flops, nbytes = table[first][:2]
            (need_flops if name.startswith("gemm") else need_bytes).append((flops if name.startswith("gemm") else nbytes) / threads)
        if need_bytes and need_flops:
            work = ThreadWork(int(max(need_bytes)), int(max(need_flops)))
            print(f"\nwork per thread that pays at {threads} threads: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
