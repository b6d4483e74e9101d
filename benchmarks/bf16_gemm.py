"""The bf16 and int8 GEMMs' engines against the float32 packed GEMM, on one pair of GEMMs.

    .venv/bin/python benchmarks/bf16_gemm.py [--rows 64,128] [--k 768] [--n 3072] [--threads 1,2]
                                             [--gelu] [--bf16-model]
                                             [--engines amx amx-swept avx512bf16 emulated int8 int8-vnni int8-emulated]

The model is ``Linear(k, n)`` then ``Linear(n, k)`` (biases; ``--gelu``: GELU between), every
GEMM pinned to a variant and compiled for a target: ``fp32`` (`matmul.packed`, this CPU), and
`matmul.packed_bf16` on each engine this CPU can run: ``amx`` (this CPU, when it has AMX-BF16;
``amx-swept``: its epilogue in one sweep after the tiles, not on each block),
``avx512bf16`` (a CPU with AVX512-BF16 and no AMX: ``cooperlake``), ``emulated`` (this CPU's ISA
level, no bf16 instructions: two FMAs a pair); and `matmul.packed_int8`: ``int8`` (this CPU, when
it has VNNI: AMX's ``tdpbusd`` where it has AMX-INT8, else ``vpdpbusd``), ``int8-vnni`` (a CPU with
AVX512-VNNI and no AMX: ``icelake-server``), ``int8-emulated`` (its ISA level: bytes widened to 32 bits, a
correctness path, not a fast one). Engines alternate call by call; medians of 7
rounds of 10 calls. GFLOP/s count 2 m k n per GEMM; the error is max |y - y32| / max |y32|
against the float32 graph. ``--bf16-model``: the same model in bfloat16 as well, compiled as the
heuristic does (``bf16-model``: its GEMMs on the bf16 operands) and as before that path
(``bf16-model widened``: sgemm over the weights widened to float32 every call).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import platform
import statistics
import time

import numpy as np
import torch
from xdsl.context import Context

import tensor_graphs as tg
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.lowering.tensor_to_buffer import kernels
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target, record
from tensor_graphs.tuning.paths import Candidate, kernel_paths, pin

#: engine -> (variant, target name: None for this CPU's, "level" for its ISA level without
#: extensions; its parameters)
ENGINES = {"fp32": ("matmul.packed", None, {}), "amx": ("matmul.packed_bf16", None, {}),
           "amx-swept": ("matmul.packed_bf16", None, {"separate_epilogue": 1}),
           "avx512bf16": ("matmul.packed_bf16", "cooperlake", {}), "emulated": ("matmul.packed_bf16", "level", {}),
           "int8": ("matmul.packed_int8", None, {}), "int8-vnni": ("matmul.packed_int8", "icelake-server", {}),
           "int8-emulated": ("matmul.packed_int8", "level", {})}
#: emulating engine -> the extension its target is told it has (so that the variant is offered; its code emulates it)
EMULATES = {"emulated": "avx512bf16", "int8-emulated": "avx512vnni"}


def runnable(engine: str) -> str | None:
    """Why ``engine`` cannot run on this CPU, or None."""
    host = Target.host()
    if engine.startswith("amx") and "amx-bf16" not in host.extensions:
        return "no AMX-BF16"
    if engine == "int8" and host.byte_dot_extension is None:
        return "no VNNI"
    if engine in EMULATES and Target.named(host.level).vector_bits < 256:
        return "an ISA level without 256-bit vectors"
    target = ENGINES[engine][1]
    if target not in (None, "level") and (missing := Target.named(target).missing_on_host()):
        return f"lacks {', '.join(missing)}"
    return None


def build(model: torch.nn.Module, x: torch.Tensor, engine: str):
    variant, name, params = ENGINES[engine]
    target = Target.host() if name is None else Target.named(Target.host().level if name == "level" else name)
    graph = import_model(model, (x,))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    record(graph.module, target)
    saved = kernels._target_of
    if engine in EMULATES:  # offered as if the target had the instructions; its code emulates them
        kernels._target_of = lambda op: dataclasses.replace(target, extensions=target.extensions | {EMULATES[engine], "avxvnni"})
    try:
        for p in kernel_paths(graph.module):
            if p.name == "tg.matmul":
                pin(p.op, Candidate(variant, params))
        return tg.compile_module(graph.module, graph.weights, target=target)
    finally:
        kernels._target_of = saved


def bf16_model(model: torch.nn.Module, x: torch.Tensor, widened: bool):
    """``model`` in bfloat16, compiled as the heuristic does (its GEMMs on bf16 operands,
    `matmul.bf16_operands`), or with ``widened`` as before it: each GEMM through sgemm on its
    weight widened to float32 every call (`matmul.blas` pinned)."""
    graph = import_model(copy.deepcopy(model).to(torch.bfloat16), (x.to(torch.bfloat16),))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    if widened:
        for p in kernel_paths(graph.module):
            if p.name == "tg.matmul":
                pin(p.op, "matmul.blas")
    fn = tg.compile_module(graph.module, graph.weights)
    xb = x.to(torch.bfloat16)
    return lambda _xn: fn(xb)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="64,128")
    ap.add_argument("--k", type=int, default=768)
    ap.add_argument("--n", type=int, default=3072)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--bf16-model", action="store_true",
                    help="also the model in bfloat16: its GEMMs on bf16 operands, and widened to float32 as before")
    ap.add_argument("--gelu", action="store_true", help="a GELU (tanh) after the first GEMM, in its epilogue")
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES), help="fp32 always runs")
    args = ap.parse_args(argv)
    engines = [e for e in ENGINES if runnable(e) is None and (e == "fp32" or e in args.engines)]
    for e in ENGINES:
        if (why := runnable(e)) is not None:
            print(f"{e}: not on this CPU ({why})")
    print(f"CPU: {platform.processor() or platform.machine()}; host target: {Target.host().describe()}")
    print(f"\nGEMMs {args.k} x {args.n} and {args.n} x {args.k}, ms per call (GFLOP/s, error against float32)\n")
    columns = engines + (["bf16-model widened", "bf16-model"] if args.bf16_model else [])
    print("| rows | threads | " + " | ".join(columns) + " |")
    print("|--:|--:|" + "--:|" * len(columns))
    torch.manual_seed(0)
    act = [torch.nn.GELU(approximate="tanh")] if args.gelu else []
    model = torch.nn.Sequential(torch.nn.Linear(args.k, args.n), *act, torch.nn.Linear(args.n, args.k)).eval()
    for m in (int(r) for r in args.rows.split(",")):
        x = torch.randn(m, args.k)
        fns = {e: build(model, x, e) for e in engines}
        if args.bf16_model:
            fns.update({"bf16-model widened": bf16_model(model, x, True), "bf16-model": bf16_model(model, x, False)})
        xn = x.numpy()
        y32 = fns["fp32"](xn)
        errors = {e: float(np.abs(np.asarray(torch.as_tensor(f(xn)).float()) - y32).max() / np.abs(y32).max())
                  for e, f in fns.items()}
        for threads in (int(t) for t in args.threads.split(",")):
            tg.set_num_threads(threads)
            times: dict[str, list[float]] = {e: [] for e in fns}
            for f in fns.values():
                f(xn)
            for _ in range(7):
                for e, f in fns.items():
                    t0 = time.perf_counter()
                    for _ in range(10):
                        f(xn)
                    times[e].append((time.perf_counter() - t0) / 10)
            flops = 2 * 2 * m * args.k * args.n
            cells = []
            for e in fns:
                t = statistics.median(times[e])
                cells.append(f"{t * 1e3:.3f} ({flops / t / 1e9:.0f}, {errors[e]:.1e})")
            print(f"| {m} | {threads} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
