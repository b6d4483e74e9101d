"""GEMMs that write bf16 (`narrow-gemm-output`) against the same graph writing float32, side by side.

    .venv/bin/python benchmarks/narrow_outputs.py [--threads 1,2] [--pairs 40] [--tolerance 1e-2]

ResNet-50 at 224 x 224, batch 1 (`suite.build_resnet50`, its batch norms folded), twice: as a
float32 model tuned within ``--tolerance`` (`tg.compile(tune="missing")`: its convolutions on bf16
panels, the tuner's database as usual), and as a bf16 model (``model.to(torch.bfloat16)``, the
heuristic's paths). Each is compiled with the pass (A) and with it doing nothing (B), in one
process; the calls then alternate A, B, A, B ... ``--pairs`` times, so that the host's drift
falls on both, and the report is each one's median time and the median of the pairwise ratios
A / B (below 1: the bf16 outputs are faster). The outputs of A and B must be equal bit for bit
(narrowing is exact), and the script says so. It prints how many GEMMs write bf16 in each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from suite import build_resnet50  # noqa: E402

import tensor_graphs as tg  # noqa: E402
import tensor_graphs.transforms.narrow_gemm_output as narrow_pass  # noqa: E402


def bf16_gemm_outputs(fn) -> int:
    """How many of the graph's GEMMs write bf16."""
    lines = [line for line in fn.ir("buf").splitlines() if "buf.packed_matmul" in line]
    return sum(1 for line in lines if "xbf16>" in line.split("outs(")[1].split(")")[0])


def compile_both(model: torch.nn.Module, x: torch.Tensor, **options):
    """(with the pass, without it): the second compiled with the pass a no-op and no compile
    cache (whose graph entries are keyed by the module a compile starts from)."""
    narrowed = tg.compile(model, (x,), **options)
    saved, switch = narrow_pass.NarrowGemmOutput.match_and_rewrite, os.environ.get("TG_CACHE")
    narrow_pass.NarrowGemmOutput.match_and_rewrite = lambda self, op, rewriter: None
    os.environ["TG_CACHE"] = "off"
    try:
        wide = tg.compile(model, (x,), **options)
    finally:
        narrow_pass.NarrowGemmOutput.match_and_rewrite = saved
        if switch is None:
            os.environ.pop("TG_CACHE")
        else:
            os.environ["TG_CACHE"] = switch
    return narrowed, wide


def paired(a, b, x, pairs: int) -> tuple[float, float, float]:
    """(median of A, median of B, median of A / B), in ms, over alternating calls."""
    for _ in range(3):
        a(x), b(x)
    ta, tb = [], []
    for _ in range(pairs):
        t = time.perf_counter()
        a(x)
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        b(x)
        tb.append(time.perf_counter() - t)
    return statistics.median(ta) * 1e3, statistics.median(tb) * 1e3, statistics.median(p / q for p, q in zip(ta, tb))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--tolerance", type=float, default=1e-2)
    args = ap.parse_args()
    model = build_resnet50(False).eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(224))
    cases = [(f"float32, tuned at {args.tolerance:g}", model, x.numpy(), dict(tune="missing", tolerance=args.tolerance)),
             ("bf16 model", build_resnet50(False).eval().to(torch.bfloat16), x.to(torch.bfloat16), {})]
    print("| ResNet-50, batch 1 | threads | bf16 outputs (A / B) | A: narrowed, ms | B: float32, ms | median A / B | equal |")
    print("|---|--:|--:|--:|--:|--:|---|")
    for threads in (int(t) for t in args.threads.split(",")):
        tg.set_num_threads(threads)
        for name, m, xi, options in cases:
            a, b = compile_both(m, xi, **options)
            ya, yb = (np.asarray(torch.as_tensor(y).float()) for y in (a(xi), b(xi)))
            ms_a, ms_b, ratio = paired(a, b, xi, args.pairs)
            print(f"| {name} | {threads} | {bf16_gemm_outputs(a)} / {bf16_gemm_outputs(b)} | {ms_a:.2f} | {ms_b:.2f} | "
                  f"{ratio:.3f} | {'yes' if np.array_equal(ya, yb) else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
