"""bf16 attention's engines against the float32 flash-attention kernel and eager SDPA.

    .venv/bin/python benchmarks/bf16_attention.py [--shapes bert gpt2 qwen3 long] [--threads 1,2]
                                                  [--engines amx avx512bf16 emulated] [--in-model]

One ``scaled_dot_product_attention`` of q, k, v ``[B, H, S, D]``, compiled with the op pinned to a
variant for a target: ``fp32`` (`attention.flash`, this CPU), and `attention.flash_bf16` on each
engine this CPU can run: ``amx`` (this CPU, when it has AMX-BF16), ``avx512bf16`` (a CPU with
AVX512-BF16 and no AMX: ``cooperlake``), ``emulated`` (this CPU's ISA level: two FMAs a pair, a
correctness path); ``eager``: PyTorch's float32 SDPA. Engines alternate call by call; medians of
7 rounds of 10 calls. GFLOP/s count the two GEMMs' ``4 B H Sq Sk D`` (half of it causal); the
error is max |y - y32| / max |y32| against eager.

``--in-model``: instead, one BertLayer (d 768, 12 heads, seq 128: ``suite.EncoderBlock``) compiled
twice with ``tg.compile(tune="missing", tolerance=1e-2)`` from the same tuning database
(``TG_TUNING_DB``), once with `attention.flash_bf16` withdrawn from the tuner's paths; the two
alternate call by call (15 rounds of 3 calls, medians), each beside its error against eager.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import time

import sys
from pathlib import Path

import numpy as np
import torch
from xdsl.context import Context

import tensor_graphs as tg
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.lowering.tensor_to_buffer import kernels
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.dialects import tensor as tgd
from tensor_graphs.target import Target, record
from tensor_graphs.tuning.paths import kernel_paths, pin

#: engine -> (variant, target name: None for this CPU's, "level" for its ISA level without extensions)
ENGINES = {"fp32": ("attention.flash", None), "amx": ("attention.flash_bf16", None),
           "avx512bf16": ("attention.flash_bf16", "cooperlake"), "emulated": ("attention.flash_bf16", "level")}
#: name -> (B, H, S, D, causal): BertLayer d768, GPT-2 small's prefill, Qwen3-0.6B's (its 16 query heads), a long causal one
SHAPES = {"bert": (1, 12, 128, 64, False), "gpt2": (1, 12, 128, 64, True), "qwen3": (1, 16, 128, 128, True),
          "long": (1, 12, 512, 64, True)}


class _Sdpa(torch.nn.Module):
    def __init__(self, causal: bool):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


def runnable(engine: str) -> str | None:
    """Why ``engine`` cannot run on this CPU, or None."""
    host = Target.host()
    if engine == "amx" and "amx-bf16" not in host.extensions:
        return "no AMX-BF16"
    target = ENGINES[engine][1]
    if target not in (None, "level") and (missing := Target.named(target).missing_on_host()):
        return f"lacks {', '.join(missing)}"
    return None


def build(model: torch.nn.Module, inputs: tuple, engine: str):
    variant, name = ENGINES[engine]
    target = Target.host() if name is None else Target.named(Target.host().level if name == "level" else name)
    graph = import_model(model, inputs)
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    record(graph.module, target)
    saved = kernels._target_of
    if name == "level":  # offered as if the target had AVX512-BF16; its code emulates it
        kernels._target_of = lambda op: dataclasses.replace(target, extensions=target.extensions | {"avx512bf16"})
    try:
        for p in kernel_paths(graph.module, choices_only=False):
            if p.name == "tg.attention":
                pin(p.op, variant)
        return tg.compile_module(graph.module, graph.weights, target=target)
    finally:
        kernels._target_of = saved


def _row(shape: str, engines: list[str], threads_list: list[int]) -> None:
    b, h, s, d, causal = SHAPES[shape]
    torch.manual_seed(0)
    inputs = tuple(torch.randn(b, h, s, d) for _ in range(3))
    model = _Sdpa(causal)
    fns = {e: build(model, inputs, e) for e in engines}
    arrays = tuple(x.numpy() for x in inputs)
    with torch.no_grad():
        ref = model(*inputs).numpy()
    fns["eager"] = lambda *_: model(*inputs)
    errors = {e: float(np.abs(np.asarray(torch.as_tensor(f(*arrays))) - ref).max() / np.abs(ref).max()) for e, f in fns.items()}
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    for threads in threads_list:
        tg.set_num_threads(threads)
        torch.set_num_threads(threads)
        times: dict[str, list[float]] = {e: [] for e in fns}
        with torch.no_grad():
            for f in fns.values():
                f(*arrays)
            for _ in range(7):
                for e, f in fns.items():
                    t0 = time.perf_counter()
                    for _ in range(10):
                        f(*arrays)
                    times[e].append((time.perf_counter() - t0) / 10)
        cells = []
        for e in fns:
            t = statistics.median(times[e])
            cells.append(f"{t * 1e3:.3f} ({flops / t / 1e9:.0f}, {errors[e]:.1e})")
        print(f"| {shape} [{b}, {h}, {s}, {d}]{' causal' if causal else ''} | {threads} | " + " | ".join(cells) + " |",
              flush=True)


def in_model(threads_list: list[int]) -> None:
    """BertLayer tuned at 1e-2 with and without the bf16 attention path, alternating (module doc)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import suite

    torch.manual_seed(0)
    model = suite.EncoderBlock(768, 12, 3072).eval()
    x = torch.randn(1, 128, 768, generator=torch.Generator().manual_seed(128))
    with torch.no_grad():
        ref = model(x).numpy()
    print("| threads | without attention.flash_bf16 | with | with / without |\n|--:|--:|--:|--:|")
    for threads in threads_list:
        tg.set_num_threads(threads)
        with_bf16 = tg.compile(model, (x,), tune="missing", tolerance=1e-2)
        saved = list(kernels.KERNELS[tgd.AttentionOp])
        kernels.KERNELS[tgd.AttentionOp] = [v for v in saved if v.name != "attention.flash_bf16"]
        try:
            without = tg.compile(model, (x,), tune="missing", tolerance=1e-2)
        finally:
            kernels.KERNELS[tgd.AttentionOp] = saved
        fns, xn = {"without": without, "with": with_bf16}, x.numpy()
        times: dict[str, list[float]] = {name: [] for name in fns}
        for f in fns.values():
            f(xn)
        for _ in range(15):
            for name, f in fns.items():
                t0 = time.perf_counter()
                for _ in range(3):
                    f(xn)
                times[name].append((time.perf_counter() - t0) / 3)
        ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        err = {name: float(np.abs(f(xn) - ref).max() / np.abs(ref).max()) for name, f in fns.items()}
        print(f"| {threads} | {ms['without']:.2f} ms ({err['without']:.1e}) | {ms['with']:.2f} ms ({err['with']:.1e}) | "
              f"{ms['with'] / ms['without']:.3f} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["bert", "gpt2", "qwen3", "long"], choices=list(SHAPES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--engines", nargs="+", default=["amx", "avx512bf16"], choices=list(ENGINES)[1:],
                    help="fp32 and eager always run")
    ap.add_argument("--in-model", action="store_true", help="BertLayer tuned at 1e-2 with and without the bf16 attention")
    args = ap.parse_args(argv)
    if args.in_model:
        print(f"CPU: {platform.processor() or platform.machine()}; host target: {Target.host().describe()}\n")
        in_model([int(t) for t in args.threads.split(",")])
        return 0
    engines = [e for e in ENGINES if runnable(e) is None and (e == "fp32" or e in args.engines)]
    for e in args.engines:
        if (why := runnable(e)) is not None:
            print(f"{e}: not on this CPU ({why})")
    print(f"CPU: {platform.processor() or platform.machine()}; host target: {Target.host().describe()}")
    print("\nOne attention, ms per call (GFLOP/s, error against eager float32)\n")
    print("| shape | threads | " + " | ".join([*engines, "eager"]) + " |")
    print("|---|--:|" + "--:|" * (len(engines) + 1))
    for shape in args.shapes:
        _row(shape, engines, [int(t) for t in args.threads.split(",")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
