"""A pooling's kernel alone: ResNet-50's stem max pool (3 x 3, stride 2, padding 1 over
64 x 112 x 112) and others, tensor_graphs' kernel time (``profile=True``) beside PyTorch eager's.

    .venv/bin/python benchmarks/pooling.py [--threads 1] [--repeat 50]

Medians over ``--repeat`` calls, microseconds. To compare two revisions, run it from a worktree of
each in turn (``PYTHONPATH=<worktree>``) and compare the ratios to eager.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

import tensor_graphs as tg
from tensor_graphs.target import Target

#: label -> (the pooling, its input's shape)
POOLS = {
    "max 3x3 s2 p1, 64 x 112 x 112 (ResNet-50's stem)": (torch.nn.MaxPool2d(3, 2, 1), (1, 64, 112, 112)),
    "max 2x2 s2, 128 x 56 x 56": (torch.nn.MaxPool2d(2), (1, 128, 56, 56)),
    "avg 3x3 s1 p1, 64 x 56 x 56": (torch.nn.AvgPool2d(3, 1, 1), (1, 64, 56, 56)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    tg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"CPU: {platform.processor() or platform.machine()}; target: {Target.host().describe()}; {args.threads} thread(s)\n")
    print("| pooling | tensor_graphs us (kernels) | eager us |\n|---|--:|--:|")
    for label, (pool, shape) in POOLS.items():
        x = torch.randn(*shape)
        fn = tg.compile(pool.eval(), (x,), profile=True)
        report = fn.profile(x, repeat=args.repeat)
        ours = report.measured_ns / report.runs / 1e3
        eager = []
        with torch.no_grad():
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                pool(x)
                eager.append(time.perf_counter() - t0)
        print(f"| {label} | {ours:.1f} | {statistics.median(eager) * 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
