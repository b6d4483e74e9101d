"""MLP 256 -> 1024 -> 1024 -> 256: tensor_graphs against PyTorch eager, one thread, same process.

    .venv/bin/python benchmarks/mlp.py [--repeat 200]

Engines alternate call by call (ABAB...) so that machine noise hits both alike; the table shows
medians in microseconds and eager / tensor_graphs (above 1 means tensor_graphs is faster).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import tensor_graphs as tg


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 256),
    ).eval()


def bench(engines: dict, repeat: int, warmup: int = 20) -> dict[str, float]:
    for f in engines.values():
        for _ in range(warmup):
            f()
    times: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(repeat):
        for name, f in engines.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200, help="timed calls per engine (median; at least 50)")
    args = ap.parse_args()
    repeat = max(args.repeat, 50)
    torch.set_num_threads(1)
    tg.set_num_threads(1)
    model = build()
    rows = []
    for batch in (1, 64):
        x = torch.randn(batch, 256)
        xn = x.numpy()
        fn = tg.compile(model, (x,))
        with torch.no_grad():
            np.testing.assert_allclose(fn(xn), model(x).numpy(), rtol=1e-4, atol=1e-4)

        def eager():
            with torch.no_grad():
                return model(x)

        med = bench({"eager": eager, "tg (numpy)": lambda: fn(xn), "tg (torch)": lambda: fn(x)}, repeat)
        rows.append((batch, med))

    print(f"MLP 256->1024->1024->256, 1 thread, median of {repeat} calls (us)")
    print("| batch | PyTorch eager | tensor_graphs (numpy in/out) | tensor_graphs (torch in/out) | eager / tg |")
    print("|------:|--------------:|-----------------------------:|-----------------------------:|-----------:|")
    for batch, med in rows:
        print(
            f"| {batch:5d} | {med['eager']:13.1f} | {med['tg (numpy)']:28.1f} | {med['tg (torch)']:28.1f} "
            f"| {med['eager'] / med['tg (numpy)']:9.2f}x |"
        )


if __name__ == "__main__":
    main()
