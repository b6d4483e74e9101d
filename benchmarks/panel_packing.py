"""A convolution whose GEMM packs its own panels a chunk at a time (`fuse-panels-into-gemm`)
against the same convolution with its panels written first by the standalone `buf.im2col`.

    .venv/bin/python benchmarks/panel_packing.py [--dtype bf16|f32|both] [--threads 1] [--rounds 9] [--images 1]

ResNet-50's convolutions (224 x 224, batch 1; ``--images``: more) that pack panels, each compiled twice by the
heuristic (a bf16 model: its bf16 pairs; a float32 model: float32 panels, its 3x3 convolutions at
stride 1 being Winograd's and so left out): with the pass, and without it. The two graphs of a
shape alternate call by call in one process; the table gives the median wall time of a call of
each and their ratio (below 1: the fused packing is faster). The host's speed drifts: compare
ratios, not times across runs.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

import tensor_graphs as tg
from tensor_graphs.driver import cpu
from tensor_graphs.target import Target

#: (channels, size, out channels, kernel, stride, padding, how many in ResNet-50)
RESNET_CONVS = [
    (3, 224, 64, 7, 2, 3, 1),      # the stem
    (64, 56, 64, 1, 1, 0, 1), (64, 56, 64, 3, 1, 1, 3), (64, 56, 256, 1, 1, 0, 4), (256, 56, 64, 1, 1, 0, 2),
    (256, 56, 128, 1, 1, 0, 1), (128, 56, 128, 3, 2, 1, 1), (256, 56, 512, 1, 2, 0, 1),
    (128, 28, 128, 3, 1, 1, 3), (128, 28, 512, 1, 1, 0, 4), (512, 28, 128, 1, 1, 0, 3),
    (512, 28, 256, 1, 1, 0, 1), (256, 28, 256, 3, 2, 1, 1),
    (256, 14, 256, 3, 1, 1, 5), (256, 14, 1024, 1, 1, 0, 6), (1024, 14, 256, 1, 1, 0, 5),
]


def compile_pair(shape: tuple, dtype: torch.dtype, images: int = 1):
    """(fused graph, plain graph, input) of one convolution + ReLU over ``images``."""
    c, h, cout, k, stride, pad, _ = shape
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(c, cout, k, stride, pad), torch.nn.ReLU()).eval().to(dtype)
    x = torch.randn(images, c, h, h).to(dtype)
    fused = tg.compile(model, (x,))
    original = cpu.buffer_pipeline
    cpu.buffer_pipeline = lambda *a: tuple(p for p in original(*a) if p != "fuse-panels-into-gemm")
    try:
        plain = tg.compile(model, (x,))
    finally:
        cpu.buffer_pipeline = original
    return fused, plain, x


def median_times(fns: list, x: torch.Tensor, rounds: int, calls: int = 5) -> list[float]:
    """Median seconds of a call of each of ``fns``, alternating round by round."""
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn(x)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(x)
            times[i].append((time.perf_counter() - t0) / calls)
    return [statistics.median(t) for t in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=["bf16", "f32", "both"], default="both")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--images", type=int, default=1)
    args = ap.parse_args()
    tg.set_num_threads(args.threads)
    import os

    os.environ["TG_CACHE"] = "off"  # (the graph cache would hand the fused graph back for the plain one)
    print(f"# {platform.processor() or platform.machine()}, {args.threads} thread(s), {args.images} image(s), "
          f"target {Target.host().name}")
    print("| dtype | conv (C, H, Cout, k, s, p) x count | fused us | plain us | fused / plain |")
    print("|---|---|--:|--:|--:|")
    dtypes = {"bf16": [torch.bfloat16], "f32": [torch.float32], "both": [torch.bfloat16, torch.float32]}[args.dtype]
    for dtype in dtypes:
        total = [0.0, 0.0]
        for shape in RESNET_CONVS:
            if dtype == torch.float32 and shape[3] == 3 and shape[4] == 1:
                continue  # a Winograd convolution
            fused, plain, x = compile_pair(shape, dtype, args.images)
            if "packing {" not in fused.ir("buf"):
                continue
            a, b = median_times([fused, plain], x, args.rounds)
            total[0] += a * shape[-1]
            total[1] += b * shape[-1]
            name = "bf16" if dtype == torch.bfloat16 else "f32"
            print(f"| {name} | {shape[:-1]} x {shape[-1]} | {a * 1e6:.0f} | {b * 1e6:.0f} | {a / b:.2f} |", flush=True)
        print(f"| {'bf16' if dtype == torch.bfloat16 else 'f32'} | all, weighted by count | {total[0] * 1e6:.0f} | "
              f"{total[1] * 1e6:.0f} | {total[0] / total[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
