"""Where GPT-2's time goes: the compiled graph against the same GEMMs called alone.

    .venv/bin/python benchmarks/gpt2_gemm_share.py [--seqs 32 128] [--threads 1]

For GPT-2 small (batch 1) it times tensor_graphs' compiled logits function, then the model's
GEMMs alone — per layer [S,768]x[768,2304], [S,768]x[768,768], [S,768]x[768,3072],
[S,3072]x[3072,768], and the LM head [S,768]x[50257,768]^T — through the same OpenBLAS
``cblas_sgemm`` with beta = 0 and no epilogue. The difference is everything that is not a
GEMM (attention, layer norms, epilogues, copies, call overhead). FLOPs are counted as 2*M*N*K
per GEMM.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import numpy as np
import torch

import tensor_graphs as tg
from tensor_graphs.runtime_support import blas


def median_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()

    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(ids, use_cache=False).logits

    torch.set_num_threads(args.threads)
    tg.set_num_threads(args.threads)
    blas.load()
    lib = ctypes.CDLL(blas.library_path())
    sgemm = lib.scipy_cblas_sgemm
    P, I, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    sgemm.argtypes = [I, I, I, I, I, I, F, P, I, P, I, F, P, I]
    rng = np.random.default_rng(0)

    print(f"GPT-2 small, batch 1, {args.threads} thread(s), median of {args.repeat} calls")
    print("| seq | tensor_graphs ms | GEMMs alone ms | GEMM GFLOP/s | non-GEMM share |")
    print("|----:|-----------------:|---------------:|-------------:|---------------:|")
    for s in args.seqs:
        ids = torch.randint(0, 50257, (1, s))
        fn = tg.compile(Logits(model), (ids,))
        x = ids.numpy()
        ours = median_ms(lambda: fn(x), args.repeat)

        shapes = [(s, 768, 2304, False), (s, 768, 768, False), (s, 768, 3072, False), (s, 3072, 768, False)] * 12
        shapes.append((s, 768, 50257, True))
        buffers = {}
        for m, k, n, tb in set(shapes):
            b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
            buffers[(m, k, n, tb)] = (rng.standard_normal((m, k), dtype=np.float32), b, np.empty((m, n), np.float32))

        def gemms():
            for m, k, n, tb in shapes:
                a, b, c = buffers[(m, k, n, tb)]
                sgemm(101, 111, 112 if tb else 111, m, n, k, 1.0, a.ctypes.data, k, b.ctypes.data, k if tb else n, 0.0, c.ctypes.data, n)

        alone = median_ms(gemms, args.repeat)
        flops = sum(2 * m * k * n for m, k, n, _ in shapes)
        print(f"| {s:3d} | {ours:16.1f} | {alone:14.1f} | {flops / alone / 1e6:12.1f} | {max(ours - alone, 0) / ours * 100:13.0f}% |")


if __name__ == "__main__":
    main()
