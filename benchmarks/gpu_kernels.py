"""What the GPU path's kernels ask of a GPU, without one (issue 15): the benchmark models' launch
plans (`benchmarks/gpu.py`'s forward at ``--seq`` and one decode step) compiled for a GPU's
compute capability by Triton's own compiler (`codegen.triton.offline_compile`), with what
``ptxas -v`` says each kernel uses: registers per thread, spilled bytes, shared memory; from
those and the GPU's limits, how many programs a multiprocessor holds at once and how many
"waves" a launch's grid makes. A static report: no timing, nothing run.

    .venv/bin/python benchmarks/gpu_kernels.py [--models gpt2 qwen3] [--seq 128] [--gpu h100-sxm]
                                               [--weight-format bf16] [--out FILE.md]
    .venv/bin/python benchmarks/gpu_kernels.py --attention 64 128 [--seq 128]   # every attention block

``--attention D...``: instead of the models, a causal attention over ``--seq`` queries and keys
(16 heads) at each head dim ``D``, lowered with each GPU variant at every query block, key block
and warps of the tuner's space (`codegen.triton.paths`): which blocks spill.

What to read in it: a kernel that spills (its registers go to local memory: on a GPU that is
slow), one whose grid is under one wave (fewer programs than multiprocessors: the GPU partly
idle), and the time the bytes a plan's Triton launches name take at the GPU's peak bandwidth
(`signatures.Launch.nbytes`: an upper bound on the bytes moved, e.g. an attention over a KV
cache is charged its capacity; a kernel moving them at peak takes this long; cuBLAS's GEMMs
are not in it).

The lowering runs under ``TRITON_INTERPRET=1`` (set here, before torch and Triton are imported:
``tg.compile(device="cuda")`` then binds on the CPU); the compile runs in a child process as for
a GPU.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # lowering only (see the module doc)

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import BUILD, LABEL, Logits  # noqa: E402

import tensor_graphs as tg  # noqa: E402
from tensor_graphs.codegen.triton.offline_compile import compile_programs  # noqa: E402
from tensor_graphs.codegen.triton.signatures import Launch, launches, program  # noqa: E402
from tensor_graphs.runtime_support.triton_graph import LIBRARY_CALLS  # noqa: E402


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's limits that decide occupancy (the CUDA C++ Programming Guide's table "Technical
    Specifications per Compute Capability") and its memory bandwidth (the vendor's datasheet)."""

    name: str
    capability: int
    multiprocessors: int
    registers_per_sm: int
    #: registers are given to a warp in units of this many
    register_unit: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm: int
    #: shared memory the runtime reserves per block
    shared_reserved_per_block: int
    bandwidth: float  # bytes/s

    def programs_per_sm(self, warps: int, registers: int, shared: int) -> int:
        """Programs (thread blocks) of ``warps`` warps, ``registers`` per thread and ``shared``
        bytes one multiprocessor holds at once."""
        per_warp = -(-registers * 32 // self.register_unit) * self.register_unit
        by_registers = self.registers_per_sm // max(per_warp * warps, 1)
        by_shared = self.shared_per_sm // (shared + self.shared_reserved_per_block)
        return max(0, min(self.max_blocks_per_sm, self.max_warps_per_sm // warps, by_registers, by_shared))


GPUS = {
    "h100-sxm": GpuSpec("NVIDIA H100 SXM (sm_90)", 90, 132, 65536, 256, 64, 32, 233472, 1024, 3.35e12),
    "h100-pcie": GpuSpec("NVIDIA H100 PCIe (sm_90)", 90, 114, 65536, 256, 64, 32, 233472, 1024, 2.0e12),
    "a100": GpuSpec("NVIDIA A100 SXM 80GB (sm_80)", 80, 108, 65536, 256, 64, 32, 167936, 1024, 2.04e12),
}


def plans(name: str, seq: int, weight_format: str | None, log) -> list[tuple[str, object]]:
    """(what, lowered module) for the model's forward over ``seq`` tokens and a decode step."""
    model = BUILD[name](False)
    ids = torch.randint(0, model.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    fwd = tg.compile(Logits(model), (ids,), device="cuda")
    log(f"  {name} forward lowered in {time.perf_counter() - t0:.1f} s ({fwd.launches} launches)")
    t0 = time.perf_counter()
    dec = tg.compile_decoder(model, max_seq=seq + 80, prefill_chunk=seq, device="cuda", weight_format=weight_format)
    log(f"  {name} decoder lowered in {time.perf_counter() - t0:.1f} s ({dec.decode_graph.launches} launches per step)")
    step = "decode step" + (f" ({weight_format})" if weight_format else "")
    return [(f"{LABEL[name]} forward {seq}", fwd._module), (f"{LABEL[name]} {step}", dec.decode_graph._module)]


def report(what: str, found: list[Launch], total_launches: int, results: dict, gpu: GpuSpec) -> str:
    """The plan's summary and one row per distinct (kernel, grid) of its Triton launches ``found``."""
    rows: dict[tuple, list[Launch]] = defaultdict(list)
    for launch in found:
        rows[(launch.key, launch.grid)].append(launch)
    lines = [f"## {what}", ""]
    at_peak = sum(x.nbytes for x in found) / gpu.bandwidth
    under, spilling = 0, set()
    table = []
    for (key, grid), group in rows.items():
        r = results[key]
        programs = 1
        for g in grid:
            programs *= g
        if not r["ok"]:
            table.append((0.0, f"| {key[0]} | {group[0].label} | {len(group)} | {programs} | — | compile failed: {r['error']} |||||"))
            continue
        per_sm = gpu.programs_per_sm(r["warps"], r["registers"], r["shared"])
        waves = programs / max(per_sm * gpu.multiprocessors, 1)
        if programs < gpu.multiprocessors:
            under += len(group)
        spills = r["spill_stores"] + r["spill_loads"]
        if spills:
            spilling.add(key[0])
        mb = group[0].nbytes / 1e6
        us = group[0].nbytes / gpu.bandwidth * 1e6
        table.append((us * len(group), f"| {key[0]} | {group[0].label} | {len(group)} | {programs} | {r['warps']} | {r['registers']} | "
                                       f"{r['spill_stores']}/{r['spill_loads']} | {r['shared']} | {per_sm} | {waves:.2f} | {mb:.3f} | {us:.2f} |"))
    lines += [
        f"- launches per call: {total_launches} ({len(found)} Triton kernels, {total_launches - len(found)} library GEMMs)",
        f"- the bytes the Triton launches name, at peak bandwidth: {at_peak * 1e3:.3f} ms at {gpu.bandwidth / 1e12:.2f} TB/s "
        "(each launch's buffers once, the parts gathers, slices and cache writes touch; an upper bound "
        "on the bytes; GEMMs in cuBLAS not counted)",
        f"- launches with fewer programs than the {gpu.multiprocessors} multiprocessors: {under} of {len(found)}",
        f"- kernels that spill registers: {', '.join(sorted(spilling)) or 'none'}",
        "",
        "| kernel | op | launches | programs | warps | registers | spill st/ld bytes | shared bytes | programs/SM | waves | MB named | us at peak |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    lines += [row for _, row in sorted(table, key=lambda t: -t[0])]
    return "\n".join(lines) + "\n"


def attention_blocks(head_dims: list[int], seq: int, gpu: GpuSpec, log) -> str:
    """Registers and spills of a causal attention (16 heads, ``seq`` queries and keys) at each
    head dim, GPU variant, query block, key block and warps."""
    from xdsl.parser import Parser

    from tensor_graphs.context import make_context as _context
    from tensor_graphs.codegen.triton import paths
    from tensor_graphs.passes import build_pipeline
    from tensor_graphs.tuning.paths import Candidate, gpu_kernel_paths, pin_gpu

    class Causal(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    ctx = _context()
    programs, rows = [], []
    for d in head_dims:
        q = torch.randn(1, 16, seq, d)
        base = Parser(ctx, tg.compile(Causal(), (q, q, q), device="cuda").ir("tg")).parse_module()
        for variant in ("attention.flash", "attention.flash_tf32"):
            defaults = paths.parameter_defaults(next(gpu_kernel_paths(base)).op, variant)
            default = (defaults["block_m"], defaults["block_n"])
            for bm in paths.ATTENTION_BLOCK_M:
                for bn in paths.ATTENTION_BLOCK_N:
                    for warps in sorted({paths.DEFAULT_WARPS, *paths.WARPS}):
                        module = base.clone()
                        for op_paths in gpu_kernel_paths(module):
                            pin_gpu(op_paths.op, Candidate(variant, {"block_m": bm, "block_n": bn, "warps": warps}))
                        build_pipeline(["convert-tensor-to-triton"]).apply(ctx, module)
                        found = [x for x in launches(module, LIBRARY_CALLS.keys()) if "attention" in x.kernel]
                        programs.append(program(module, f"{variant} d={d} {bm}x{bn} w{warps}", found[:1]))
                        rows.append((d, variant, bm, bn, warps, (bm, bn) == default and warps == defaults["warps"]))
    log(f"  compiling {len(programs)} attention kernels for sm_{gpu.capability}")
    results = compile_programs(programs, capability=gpu.capability, resources=True)
    lines = [f"## Attention blocks: causal, 16 heads, {seq} queries and keys", "",
             "| head dim | variant | block_m x block_n | warps | registers | spill st/ld bytes | shared bytes | programs/SM | default |",
             "|--:|---|---|--:|--:|--:|--:|--:|---|"]
    for (d, variant, bm, bn, warps, is_default), r in zip(rows, results):
        if not r["ok"]:
            lines.append(f"| {d} | {variant} | {bm} x {bn} | {warps} | compile failed: {r['error']} |||||")
            continue
        per_sm = gpu.programs_per_sm(r["warps"], r["registers"], r["shared"])
        lines.append(f"| {d} | {variant} | {bm} x {bn} | {warps} | {r['registers']} | {r['spill_stores']}/{r['spill_loads']} | "
                     f"{r['shared']} | {per_sm} | {'yes' if is_default else ''} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_kernels.py", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(BUILD), choices=list(BUILD))
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--gpu", default="h100-sxm", choices=list(GPUS))
    ap.add_argument("--weight-format", default=None, choices=["bf16", "int8"], help="the decoder's weight_format")
    ap.add_argument("--attention", nargs="+", type=int, default=None, metavar="HEAD_DIM",
                    help="every attention block at these head dims instead of the models")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    gpu = GPUS[args.gpu]
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    import triton

    header = (f"# Static kernel report for {gpu.name}: {gpu.multiprocessors} SMs, {gpu.bandwidth / 1e12:.2f} TB/s "
              f"(Triton {triton.__version__}, `benchmarks/gpu_kernels.py {' '.join(argv if argv is not None else sys.argv[1:])}`)\n")
    sections = [header]
    if args.attention:
        sections.append(attention_blocks(args.attention, args.seq, gpu, log))
    for name in args.models if not args.attention else ():
        for what, module in plans(name, args.seq, args.weight_format, log):
            found = launches(module, LIBRARY_CALLS.keys())
            kernels = program(module, what, found)
            t0 = time.perf_counter()
            results = compile_programs([kernels], capability=gpu.capability, resources=True)
            log(f"  {what}: {len(results)} distinct kernels compiled for sm_{gpu.capability} in {time.perf_counter() - t0:.1f} s")
            by_key = {(k[0], tuple(k[1]), k[2], tuple(k[3])): r for r, k in zip(results, kernels["launches"])}
            sections.append(report(what, found, len(launches(module)), by_key, gpu))
    text = "\n".join(sections)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
