"""The tuner's whole-graph path that rounds a float32 model's residual stream to bf16
(`narrow_gemm_output.ROUND_ACTIVATIONS`, `tuning.compile._rounded_activations`), side by side with
the tuned graph without it.

    .venv/bin/python benchmarks/rounded_activations.py [--threads 1,2] [--pairs 30] [--tolerance 1e-2]

ResNet-50 at 224 x 224, batch 1 (`suite.build_resnet50`, its batch norms folded), float32,
compiled twice per thread count with ``tg.compile(tune="missing", tolerance=...)``: as the tuner
does it (A: it tries the rounded activations and keeps them where the whole graph's error is
within the tolerance and they run faster; the script prints what ``fn.explain()`` says of it),
and with that step off (B). The calls then alternate A, B, ... ``--pairs`` times; the report is
each one's median time, the median of the pairwise ratios A / B, how many GEMMs write bf16 in
each, and each one's error against eager in float64 (max |y - y64| / max |y64|). Needs a CPU with
AMX-BF16 (elsewhere A is B: it says so).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from narrow_outputs import bf16_gemm_outputs  # noqa: E402
from suite import build_resnet50  # noqa: E402

import tensor_graphs as tg  # noqa: E402
import tensor_graphs.tuning.compile as tuned_compile  # noqa: E402
from tensor_graphs.target import Target  # noqa: E402


def compile_both(model: torch.nn.Module, x: torch.Tensor, tolerance: float):
    """(as the tuner does it, without the rounded activations)."""
    with_step = tg.compile(model, (x,), tune="missing", tolerance=tolerance)
    saved = tuned_compile._rounded_activations
    tuned_compile._rounded_activations = lambda fn, *args: fn
    try:
        without = tg.compile(model, (x,), tune="missing", tolerance=tolerance)
    finally:
        tuned_compile._rounded_activations = saved
    return with_step, without


def paired(a, b, x: np.ndarray, pairs: int) -> tuple[float, float, float]:
    """(median of A, median of B, median of A / B), in ms, over alternating calls."""
    for _ in range(3):
        a(x), b(x)
    ta, tb = [], []
    for _ in range(pairs):
        for fn, times in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - t0)
    return statistics.median(ta) * 1e3, statistics.median(tb) * 1e3, statistics.median(p / q for p, q in zip(ta, tb))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--tolerance", type=float, default=1e-2)
    args = ap.parse_args()
    print(f"CPU: {platform.processor() or platform.machine()}; target: {Target.host().describe()}")
    torch.manual_seed(0)
    model = build_resnet50(False).eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(224))
    with torch.no_grad():
        ref = model.double()(x.double()).numpy()
    model = model.float()
    xn = x.numpy()
    print("\n| ResNet-50, batch 1 | threads | bf16 outputs (A / B) | A ms | B ms | median A / B | error A | error B |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for threads in (int(t) for t in args.threads.split(",")):
        tg.set_num_threads(threads)
        a, b = compile_both(model, x, args.tolerance)
        said = [line for line in a.explain().splitlines() if "rounded to bf16" in line]
        print(f"  A: {said[0] if said else 'no rounded activations tried (no AMX-BF16, or no GEMM on bf16 panels)'}")
        ms_a, ms_b, ratio = paired(a, b, xn, args.pairs)
        err_a, err_b = (np.abs(f(xn) - ref).max() / np.abs(ref).max() for f in (a, b))
        print(f"| float32, tuned at {args.tolerance:g} | {threads} | {bf16_gemm_outputs(a)} / {bf16_gemm_outputs(b)} | "
              f"{ms_a:.2f} | {ms_b:.2f} | {ratio:.3f} | {err_a:.1e} | {err_b:.1e} |", flush=True)


if __name__ == "__main__":
    main()
