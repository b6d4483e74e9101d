"""A bf16 model's residual block end on AMX: the GEMM's epilogue with and without its addends'
prefetch (`kernels_amx.AmxGemm._prefetch_addends`), side by side.

    .venv/bin/python benchmarks/residual_epilogue.py [--cin 64] [--cout 256] [--hw 56]
                                                     [--threads 1] [--rounds 15] [--resnet50]

The graph is ``relu(conv1x1(x) + r)`` in bf16 (ResNet-50's first stage's last convolution by
default): one AMX GEMM writing bf16 whose epilogue body takes the bf16 residual, its block's
epilogue run during the next block's tile products. It is compiled twice in one process, the
prefetch on (A) and a no-op (B), and the two are profiled in turn ``--rounds`` times (the host's
drift falls on both); the report is each one's median kernel time and the median of the
pairwise ratios A / B. ``--resnet50``: the whole bf16 ResNet-50 (224 x 224, batch 1) instead,
its time per run. The outputs of A and B must be equal bit for bit (a prefetch is a hint), and
the script says so. Needs a host with AMX-BF16 (elsewhere the GEMM takes other tiles: it says so).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from suite import build_resnet50  # noqa: E402

import tensor_graphs as tg  # noqa: E402
import tensor_graphs.codegen.llvm.kernels_amx as kernels_amx  # noqa: E402
from tensor_graphs.target import Target  # noqa: E402


class ResidualEnd(torch.nn.Module):
    """A bottleneck block's end: ``relu(conv1x1(x) + r)``."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 1)

    def forward(self, x, r):
        return torch.relu(self.conv(x) + r)


def compile_both(model: torch.nn.Module, inputs: tuple):
    """(with the prefetch, without it): the second with `_prefetch_addends` a no-op and no
    compile cache (whose entries are keyed by the module a compile starts from)."""
    saved, switch = kernels_amx.AmxGemm._prefetch_addends, os.environ.get("TG_CACHE")
    os.environ["TG_CACHE"] = "off"
    try:
        fetched = tg.compile(model, inputs, profile=True)
        kernels_amx.AmxGemm._prefetch_addends = lambda self, *args: None
        plain = tg.compile(model, inputs, profile=True)
    finally:
        kernels_amx.AmxGemm._prefetch_addends = saved
        if switch is None:
            os.environ.pop("TG_CACHE")
        else:
            os.environ["TG_CACHE"] = switch
    return fetched, plain


def kernel_us(fn, inputs: tuple) -> float:
    """The graph's time in its kernels per run, microseconds."""
    report = fn.profile(*inputs, repeat=20, warmup=2)
    return report.measured_ns / report.runs / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cin", type=int, default=64)
    ap.add_argument("--cout", type=int, default=256)
    ap.add_argument("--hw", type=int, default=56)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--resnet50", action="store_true")
    args = ap.parse_args()
    target = Target.host()
    print(f"CPU: {platform.processor() or platform.machine()}; target: {target.describe()}")
    if not target.tiles_gemm(64, False):
        print("this host has no AMX-BF16: the GEMM is not AMX's, nothing to compare")
        return
    tg.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.resnet50:
        model = build_resnet50(False).eval().to(torch.bfloat16)
        inputs = (torch.randn(1, 3, 224, 224).to(torch.bfloat16),)
        what = "bf16 ResNet-50, 224 x 224, batch 1"
    else:
        model = ResidualEnd(args.cin, args.cout).eval().to(torch.bfloat16)
        inputs = (torch.randn(1, args.cin, args.hw, args.hw).to(torch.bfloat16),
                  torch.randn(1, args.cout, args.hw, args.hw).to(torch.bfloat16))
        what = f"relu(conv1x1 {args.cin} -> {args.cout} + residual) at {args.hw} x {args.hw}, bf16"
    fetched, plain = compile_both(model, inputs)
    print(f"{what}, {args.threads} thread(s); outputs equal: {torch.equal(fetched(*inputs), plain(*inputs))}")
    times: dict[str, list[float]] = {"prefetch": [], "none": []}
    for _ in range(args.rounds):
        times["prefetch"].append(kernel_us(fetched, inputs))
        times["none"].append(kernel_us(plain, inputs))
    ratio = statistics.median(a / b for a, b in zip(times["prefetch"], times["none"]))
    print(f"prefetch {statistics.median(times['prefetch']):.1f} us, none {statistics.median(times['none']):.1f} us, "
          f"median pairwise ratio {ratio:.3f} ({args.rounds} rounds)")


if __name__ == "__main__":
    main()
