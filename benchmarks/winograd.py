"""A stride-1 3x3 convolution (+ bias + ReLU) on each path of `tg.winograd_conv`.

    .venv/bin/python benchmarks/winograd.py [--shapes 64x56 512x7] [--threads 1,2] [--rounds 9]

Each shape ``CxS`` is ``Conv2d(C, C, 3, padding=1)`` + ReLU on one ``C x S x S`` image (the
default shapes: ResNet-50's four stages). tensor_graphs compiles it once per path of the
convolution (`tuning.paths.pin`): ``winograd_conv.packed`` (the heuristic's: Winograd F(2x2, 3x3),
input transform, 16 packed GEMMs, output transform), ``winograd_conv.direct`` (no Winograd: the
windows packed by `buf.im2col` into the panels of one float32 GEMM) and, where this CPU has bf16
dot products (AVX512-BF16 or AMX), ``winograd_conv.direct_bf16`` (the same in bf16: the windows
rounded as they are packed, the weight's bf16 rows, float32 sums). The paths alternate call by
call; medians of ``--rounds`` rounds of 5 calls; GFLOP/s counted as the direct convolution's
``2 * C * C * 9 * S * S``; the error is max |y - y64| / max |y64| against PyTorch in float64.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch
from xdsl.context import Context

import tensor_graphs as tg
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target, record
from tensor_graphs.tuning.paths import kernel_paths, pin

PATHS = ("winograd_conv.packed", "winograd_conv.direct", "winograd_conv.direct_bf16")


def compiled(model: torch.nn.Module, x: torch.Tensor, path: str):
    """``model`` with its convolution pinned to ``path``, or None where the host cannot run it."""
    graph = import_model(model, (x,))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    record(graph.module, Target.host())
    (conv,) = [p for p in kernel_paths(graph.module) if p.name == "tg.winograd_conv"]
    if path not in conv.applicable:
        print(f"  {path}: not on this CPU ({dict(conv.rejected)[path]})")
        return None
    pin(conv.op, path)
    return tg.compile_module(graph.module, graph.weights)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["64x56", "128x28", "256x14", "512x7"])
    parser.add_argument("--threads", default="1")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(f"CPU: {platform.processor() or platform.machine()}; host target: {Target.host().describe()}")
    print("\n| shape | threads | " + " | ".join(f"{p} ms (GFLOP/s, error)" for p in PATHS) + " |")
    print("|---|--:|" + "--:|" * len(PATHS))
    for spec in args.shapes:
        c, s = (int(v) for v in spec.split("x"))
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.ReLU()).eval()
        x = torch.randn(1, c, s, s)
        with torch.no_grad():
            expected = model.double()(x.double()).numpy()
        model.float()
        fns = {p: f for p in PATHS if (f := compiled(model, x, p)) is not None}
        xn = x.numpy()
        errors = {p: float(np.abs(f(xn) - expected).max() / np.abs(expected).max()) for p, f in fns.items()}
        flops = 2.0 * c * c * 9 * s * s
        for threads in (int(t) for t in args.threads.split(",")):
            tg.set_num_threads(threads)
            times: dict[str, list[float]] = {p: [] for p in fns}
            for f in fns.values():
                f(xn)
            for _ in range(args.rounds):
                for p, f in fns.items():
                    t0 = time.perf_counter()
                    for _ in range(5):
                        f(xn)
                    times[p].append((time.perf_counter() - t0) / 5)
            cells = []
            for p in PATHS:
                if p not in fns:
                    cells.append("n/a")
                    continue
                t = statistics.median(times[p])
                cells.append(f"{t * 1e3:.3f} ({flops / t / 1e9:.0f}, {errors[p]:.1e})")
            print(f"| {spec} | {threads} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
