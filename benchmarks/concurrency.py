"""Throughput of ONE compiled graph called from several Python threads at once (batch 1).

    .venv/bin/python benchmarks/concurrency.py                 # MLP 256-1024-1024-256 and GPT-2 small, seq 32
    .venv/bin/python benchmarks/concurrency.py --seconds 3 --only mlp

For each model it runs, in turns (round robin, ``--rounds`` times; the median of each
configuration is printed): ``callers`` Python threads calling the same ``fn`` in a loop for
``--seconds``, with ``tg.set_num_threads(kernel threads)`` per call, for callers x kernel
threads in (1 x 1, 1 x N, N x 1, N x N), N = the CPUs; and PyTorch eager the same way
(``torch.set_num_threads``). It prints calls per second and the speed-up over one caller with
one kernel thread. Each overlapping call runs on its own arena (``fn.memory.arenas`` is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensor_graphs as tg  # noqa: E402


def _models(only: set[str]):
    torch.manual_seed(0)
    if "mlp" in only:
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)
        ).eval()
        yield "MLP 256-1024-1024-256, batch 1", model, torch.randn(1, 256)
    if "gpt2" in only:
        from gpt2 import LogitsOnly
        from transformers import GPT2Config, GPT2LMHeadModel

        model = LogitsOnly(GPT2LMHeadModel(GPT2Config()).eval())
        yield "GPT-2 small, all logits, batch 1, seq 32", model, torch.randint(0, 50257, (1, 32))


def _throughput(call, callers: int, seconds: float) -> float:
    """Calls per second of ``callers`` threads each calling ``call()`` for ``seconds``."""
    start = threading.Barrier(callers + 1)
    counts = [0] * callers
    stop = threading.Event()

    def body(t: int) -> None:
        start.wait()
        n = 0
        while not stop.is_set():
            call()
            n += 1
        counts[t] = n

    threads = [threading.Thread(target=body, args=(t,)) for t in range(callers)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for th in threads:
        th.join()
    return sum(counts) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one measurement (default 2 s)")
    ap.add_argument("--rounds", type=int, default=5, help="measurements per configuration, in turns (default 5)")
    ap.add_argument("--only", nargs="*", default=["mlp", "gpt2"], choices=["mlp", "gpt2"])
    args = ap.parse_args(argv)
    n = max(1, len(os.sched_getaffinity(0)))
    configs = list(dict.fromkeys([(1, 1), (1, n), (n, 1), (n, n)]))
    print(f"{n} CPUs; {args.rounds} rounds of {args.seconds:g} s per configuration, medians")
    for title, model, x in _models(set(args.only)):
        fn = tg.compile(model, (x,))
        expected = fn(x)

        def run_tg(x=x, fn=fn, expected=expected):
            assert torch.equal(fn(x), expected)

        def run_eager(x=x, model=model):
            with torch.inference_mode():
                model(x)

        results: dict[tuple[str, int, int], list[float]] = {}
        for _ in range(args.rounds):
            for engine, call, set_threads in (("tensor_graphs", run_tg, tg.set_num_threads), ("eager", run_eager, torch.set_num_threads)):
                for callers, kernel_threads in configs:
                    set_threads(kernel_threads)
                    results.setdefault((engine, callers, kernel_threads), []).append(_throughput(call, callers, args.seconds))
        print(f"\n{title}  (tensor_graphs arenas in the pool after the run: {fn.memory.arenas})")
        print("| engine | caller threads | kernel threads | calls/s | vs 1 x 1 |\n|---|--:|--:|--:|--:|")
        for engine in ("tensor_graphs", "eager"):
            base = statistics.median(results[(engine, 1, 1)])
            for callers, kernel_threads in configs:
                rate = statistics.median(results[(engine, callers, kernel_threads)])
                print(f"| {engine} | {callers} | {kernel_threads} | {rate:.1f} | {rate / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
