"""A stride-1 3x3 convolution (+ bias + ReLU) by Winograd F(2x2, 3x3) against the im2col GEMM.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/winograd.py
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/winograd.py --shapes 64x56 512x7 --rounds 5

Each shape ``CxS`` is ``Conv2d(C, C, 3, padding=1)`` + ReLU on one ``C x S x S`` image (the
default shapes: ResNet-50's four stages). tensor_graphs compiles it twice: as it does by default
(`winograd-convolution`: input transform, 16 packed GEMMs, output transform) and with that pass
left out (``winograd_convolution.MIN_CHANNELS`` raised: im2col written into the panels of one
packed GEMM). Both are checked against PyTorch, then timed alternately, ``--rounds`` rounds of the
median of 15 calls; the table gives the medians over rounds and GFLOP/s counted as the direct
convolution's ``2 * C * C * 9 * S * S``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import tensor_graphs as tg
from tensor_graphs.transforms import winograd_convolution


def _median_ms(fn, x, calls: int = 15) -> float:
    fn(x)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["64x56", "128x28", "256x14", "512x7"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"torch threads {torch.get_num_threads()}; medians of {args.rounds} rounds")
    print(f"{'shape':>8} {'im2col GEMM ms':>15} {'Winograd ms':>12} {'GEMM GF/s':>10} {'Winograd GF/s':>14} {'ratio':>6}")
    default = winograd_convolution.MIN_CHANNELS
    for spec in args.shapes:
        c, s = (int(v) for v in spec.split("x"))
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.ReLU()).eval()
        x = torch.randn(1, c, s, s)
        winograd = tg.compile(model, (x,))
        winograd_convolution.MIN_CHANNELS = 1 << 30
        try:
            gemm = tg.compile(model, (x,))
        finally:
            winograd_convolution.MIN_CHANNELS = default
        assert "winograd_input" in winograd.ir("buf") and "winograd_input" not in gemm.ir("buf")
        with torch.no_grad():
            expected = model(x)
        for fn in (winograd, gemm):
            err = (fn(x) - expected).abs().max().item()
            assert err <= 1e-4, f"{spec}: max abs error {err:.3g}"
        rounds = [(_median_ms(gemm, x), _median_ms(winograd, x)) for _ in range(args.rounds)]
        g, w = (float(np.median([r[i] for r in rounds])) for i in (0, 1))
        flops = 2.0 * c * c * 9 * s * s
        print(f"{spec:>8} {g:15.2f} {w:12.2f} {flops / g / 1e6:10.1f} {flops / w / 1e6:14.1f} {w / g:6.2f}", flush=True)


if __name__ == "__main__":
    main()
