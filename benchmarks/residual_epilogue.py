"""bf16 activations on AMX: one of three mechanisms on (A) and off (B), side by side.

    .venv/bin/python benchmarks/residual_epilogue.py [--toggle prefetch|truncation|pool]
                                                     [--model block|resnet50|stem] [--threads 1]
                                                     [--rounds 15]

Toggles (each turned off for B only, in one process):

- ``prefetch``: an AMX GEMM writing bf16 fetches the addends its deferred epilogue reads as the
  block's K steps start (`kernels_amx.AmxGemm._prefetch_addends`);
- ``truncation``: a body's ``truncf`` of a value that is a bf16 already takes its high half
  instead of rounding (`scalar.bf16_exact`: a bf16 ReLU's);
- ``pool``: `narrow-gemm-output` follows a max pool whose readers take bf16 (`_pooled`).

Models: ``block``, a bf16 ResNet-50 bottleneck's end ``relu(conv1x1 64 -> 256 (x) + r)`` at
56 x 56 (one AMX GEMM writing bf16, its epilogue body taking the bf16 residual); ``resnet50``,
the bf16 ResNet-50 at 224 x 224, batch 1; ``stem``, ResNet-50's stem (7x7 convolution at stride 2,
ReLU, 3x3 max pool at stride 2, a 1x1 convolution) as a float32 model with its GEMMs pinned to
bf16 panels (what the tuner picks at a tolerance). The two graphs are profiled in turn
``--rounds`` times (the host's drift falls on both); the report is each one's median time in
kernels and the median of the pairwise ratios A / B. The outputs must be equal bit for bit (each
mechanism is exact), and the script says so. Needs a host with AMX-BF16.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys

import numpy as np
import torch
from xdsl.context import Context
from xdsl.dialects import arith

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from suite import build_resnet50  # noqa: E402

import tensor_graphs as tg  # noqa: E402
import tensor_graphs.codegen.llvm.kernels_amx as kernels_amx  # noqa: E402
import tensor_graphs.transforms.narrow_gemm_output as narrow_pass  # noqa: E402
from tensor_graphs.codegen.llvm import scalar  # noqa: E402
from tensor_graphs.frontend.importer import import_model  # noqa: E402
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline  # noqa: E402
from tensor_graphs.target import Target, record  # noqa: E402
from tensor_graphs.tuning.paths import Candidate, kernel_paths, pin  # noqa: E402


class ResidualEnd(torch.nn.Module):
    """A bottleneck block's end: ``relu(conv1x1(x) + r)``."""

    def __init__(self, cin: int = 64, cout: int = 256):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 1)

    def forward(self, x, r):
        return torch.relu(self.conv(x) + r)


class Stem(torch.nn.Module):
    """ResNet-50's stem and the first 1x1 convolution after its pool."""

    def __init__(self):
        super().__init__()
        self.stem, self.head = torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.Conv2d(64, 64, 1)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        return torch.relu(self.head(self.pool(torch.relu(self.stem(x)))))


@contextlib.contextmanager
def switched_off(toggle: str):
    """The mechanism ``toggle`` off for the compiles inside (and no compile cache, whose entries
    are keyed by the module a compile starts from)."""
    saved_env = os.environ.get("TG_CACHE")
    os.environ["TG_CACHE"] = "off"
    where, name, replacement = {
        "prefetch": (kernels_amx.AmxGemm, "_prefetch_addends", lambda self, *args: None),
        "truncation": (scalar.ARITH, arith.TruncFOp, scalar._convert),
        "pool": (narrow_pass, "_pooled", lambda reader, value: None),
    }[toggle]
    table = isinstance(where, dict)
    saved = where[name] if table else getattr(where, name)
    if table:
        where[name] = replacement
    else:
        setattr(where, name, replacement)
    try:
        yield
    finally:
        if table:
            where[name] = saved
        else:
            setattr(where, name, saved)
        if saved_env is None:
            os.environ.pop("TG_CACHE")
        else:
            os.environ["TG_CACHE"] = saved_env


def build(model_name: str):
    """(compile: a function making the profiled graph, its inputs, a description)."""
    torch.manual_seed(0)
    if model_name == "stem":
        model, x = Stem().eval(), torch.randn(1, 3, 224, 224)

        def compile_stem():
            graph = import_model(model, (x,))
            build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
            record(graph.module, Target.host())
            for p in kernel_paths(graph.module):
                if p.name == "tg.matmul":
                    pin(p.op, Candidate("matmul.packed_rhs_bf16"))
            return tg.compile_module(graph.module, graph.weights, target="host", profile=True)

        return compile_stem, (x.numpy(),), "ResNet-50's stem, pool and a 1x1 convolution, float32 on bf16 panels"
    if model_name == "resnet50":
        model = build_resnet50(False).eval().to(torch.bfloat16)
        inputs = (torch.randn(1, 3, 224, 224).to(torch.bfloat16),)
        return lambda: tg.compile(model, inputs, profile=True), inputs, "bf16 ResNet-50, 224 x 224, batch 1"
    model = ResidualEnd().eval().to(torch.bfloat16)
    inputs = (torch.randn(1, 64, 56, 56).to(torch.bfloat16), torch.randn(1, 256, 56, 56).to(torch.bfloat16))
    return lambda: tg.compile(model, inputs, profile=True), inputs, "relu(conv1x1 64 -> 256 + residual) at 56 x 56, bf16"


def kernel_us(fn, inputs: tuple) -> float:
    """The graph's time in its kernels per run, microseconds."""
    report = fn.profile(*inputs, repeat=20, warmup=2)
    return report.measured_ns / report.runs / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--toggle", choices=["prefetch", "truncation", "pool"], default="prefetch")
    ap.add_argument("--model", choices=["block", "resnet50", "stem"], default="block")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    target = Target.host()
    print(f"CPU: {platform.processor() or platform.machine()}; target: {target.describe()}")
    if not target.tiles_gemm(64, False):
        print("this host has no AMX-BF16: the GEMMs are not AMX's, nothing to compare")
        return
    tg.set_num_threads(args.threads)
    make, inputs, what = build(args.model)
    on = make()
    with switched_off(args.toggle):
        off = make()
    same = np.array_equal(np.asarray(torch.as_tensor(on(*inputs)).float()), np.asarray(torch.as_tensor(off(*inputs)).float()))
    print(f"{what}, {args.toggle} on (A) / off (B), {args.threads} thread(s); outputs equal: {same}")
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.rounds):
        times["on"].append(kernel_us(on, inputs))
        times["off"].append(kernel_us(off, inputs))
    ratio = statistics.median(a / b for a, b in zip(times["on"], times["off"]))
    print(f"A {statistics.median(times['on']):.1f} us, B {statistics.median(times['off']):.1f} us in kernels, "
          f"median pairwise ratio A / B {ratio:.3f} ({args.rounds} rounds)")


if __name__ == "__main__":
    main()
