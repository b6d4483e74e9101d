"""What a GEMM's activation costs on top of the GEMM: ``Linear(k, n)`` alone and followed by each
activation, and the same GEMM without its bias (the row "none, no bias": what the bias costs),
every GEMM pinned to one variant, each kernel timed in the graph (``profile=True``).

    .venv/bin/python benchmarks/amx_epilogue.py [--variant matmul.packed_bf16] [--rows 128]
                                                [--k 768] [--n 3072] [--threads 1] [--rounds 7]
                                                [--separate-epilogue]

The activations run in the GEMM's epilogue (``--separate-epilogue``: in one sweep after it, the
tuner's ``separate_epilogue``). The graphs alternate round by round in one process; the table
gives each graph's median time of its kernels, and that time less the bare GEMM's: what the
activation costs. To compare two revisions, run the script from a worktree of each, in turn
(the shared host's speed drifts: compare the differences, never the absolute times, across runs).
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch
from xdsl.context import Context

import tensor_graphs as tg
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target, record
from tensor_graphs.tuning.paths import Candidate, kernel_paths, pin

#: name -> the activation after the GEMM (None: the bare GEMM)
ACTIVATIONS = {"none": None, "relu": torch.nn.ReLU(), "gelu": torch.nn.GELU(),
               "gelu_tanh": torch.nn.GELU(approximate="tanh"), "silu": torch.nn.SiLU()}


def build(linear: torch.nn.Linear, act, x: torch.Tensor, variant: str, params: dict):
    """The graph of ``linear`` (then ``act``) with its GEMM pinned to ``variant``, profiled."""
    model = torch.nn.Sequential(linear, *([act] if act is not None else [])).eval()
    graph = import_model(model, (x,))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    target = Target.host()
    record(graph.module, target)
    for p in kernel_paths(graph.module):
        if p.name == "tg.matmul":
            pin(p.op, Candidate(variant, params if act is not None else {}))
    return tg.compile_module(graph.module, graph.weights, target=target, profile=True)


def kernels_us(fn, x: torch.Tensor, repeat: int = 30) -> float:
    """The graph's time in its kernels per run, microseconds (`ProfileReport.measured_ns`)."""
    report = fn.profile(x, repeat=repeat)
    return report.measured_ns / report.runs / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="matmul.packed_bf16")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--k", type=int, default=768)
    ap.add_argument("--n", type=int, default=3072)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--separate-epilogue", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    linear, x = torch.nn.Linear(args.k, args.n), torch.randn(args.rows, args.k)
    params = {"separate_epilogue": 1} if args.separate_epilogue else {}
    tg.set_num_threads(args.threads)
    fns = {name: build(linear, act, x, args.variant, params) for name, act in ACTIVATIONS.items()}
    # the same GEMM without its bias: what the bias costs (the first row less this one)
    bare = torch.nn.Linear(args.k, args.n, bias=False)
    bare.weight = linear.weight
    fns["none, no bias"] = build(bare, None, x, args.variant, params)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            times[name].append(kernels_us(fn, x))
    print(f"CPU: {platform.processor() or platform.machine()}; target: {Target.host().describe()}")
    print(f"\n{args.variant}{' (separate epilogue)' if params else ''}, {args.rows} x {args.k} @ {args.k} x {args.n}, "
          f"{args.threads} thread(s), medians of {args.rounds} rounds\n")
    print("| activation | us | over the bare GEMM |\n|---|--:|--:|")
    bare = statistics.median(times["none"])
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.1f} | {statistics.median(ts) - bare:+.1f} |")


if __name__ == "__main__":
    main()
