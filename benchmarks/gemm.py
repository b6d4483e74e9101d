"""The packed GEMM against OpenBLAS sgemm, shape by shape, for a target.

    .venv/bin/python benchmarks/gemm.py                              # the host target, 1 thread
    .venv/bin/python benchmarks/gemm.py --target x86-64-v3 --threads 1 2
    .venv/bin/python benchmarks/gemm.py --shapes 128x768x3072 512x3072x768

Each shape ``MxKxN`` is ``y[M, N] = x[M, K] @ W[N, K]^T`` (an ``nn.Linear`` without bias):
tensor_graphs compiles it for ``--target`` (its weight packed into the target's panels), and
OpenBLAS runs the same product through ``scipy_cblas_sgemm`` (the library tensor_graphs links;
``OPENBLAS_CORETYPE`` picks its kernel). Both take the median of ``--repeat`` timings of calls
repeated for at least 0.2 s, side by side in one process, after a check that tensor_graphs'
output matches sgemm's (rtol 1e-4). The default shapes are the GEMMs of the benchmark rows: the
MLP at batch 64, BERT-base and GPT-2 small at 128 tokens (QKV, out-proj, FFN up and down), the
GPT-2 LM head, and a square 1024 GEMM.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import roofline  # noqa: E402

import tensor_graphs as tg  # noqa: E402
from tensor_graphs.runtime_support import blas  # noqa: E402
from tensor_graphs.target import resolve  # noqa: E402

#: each timing lasts at least this long (calls repeated)
MIN_SECONDS = 0.2
SHAPES = ["64x256x1024", "64x1024x1024", "128x768x2304", "128x768x768", "128x768x3072", "128x3072x768",
          "128x768x50257", "1024x1024x1024"]


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, k, n = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is MxKxN (three positive integers), got {text!r}") from None
    if min(m, k, n) < 1:
        raise argparse.ArgumentTypeError(f"a shape is MxKxN (three positive integers), got {text!r}")
    return m, k, n


def measure(m: int, k: int, n: int, threads: int, target: str, repeat: int) -> tuple[float, float]:
    """(tensor_graphs GFLOP/s, sgemm GFLOP/s) of one shape."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(k, n, bias=False).eval()
    x = torch.randn(m, k)
    fn = tg.compile(linear, (x,), target=target)
    xn = x.numpy()
    w = linear.weight.detach().numpy()
    c = np.empty((m, n), np.float32)
    sgemm = roofline._sgemm()

    def blas_call():
        sgemm(101, 111, 112, m, n, k, 1.0, xn.ctypes.data, k, w.ctypes.data, k, 0.0, c.ctypes.data, n)

    tg.set_num_threads(threads)
    blas.set_num_threads(threads)
    try:
        blas_call()
        np.testing.assert_allclose(fn(xn), c, rtol=1e-4, atol=1e-4 * np.sqrt(k))
        t_tg = roofline.median_seconds(lambda: fn(xn), repeat, MIN_SECONDS)
        t_blas = roofline.median_seconds(blas_call, repeat, MIN_SECONDS)
    finally:
        blas.set_num_threads(1)
    flops = 2.0 * m * n * k
    return flops / t_tg / 1e9, flops / t_blas / 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="host (default; TG_TARGET when set), an ISA level or a CPU name")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--shapes", type=parse_shape, nargs="+", default=[parse_shape(s) for s in SHAPES], metavar="MxKxN")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    target = resolve(args.target)
    target.check_runs_here()
    print(f"target: {target.describe()}")
    print(f"BLAS: {roofline.openblas_config()}")
    print()
    print("| M x K x N | threads | tensor_graphs GFLOP/s | sgemm GFLOP/s | tg / sgemm |")
    print("|---|--:|--:|--:|--:|")
    for threads in args.threads:
        for m, k, n in args.shapes:
            ours, theirs = measure(m, k, n, threads, target.name, args.repeat)
            print(f"| {m} x {k} x {n} | {threads} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
