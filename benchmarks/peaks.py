"""The core's arithmetic peak per precision: one emitted microkernel per unit (`peak_kernels`).

    .venv/bin/python benchmarks/peaks.py [--threads 1 2] [--repeat 5] [--target NAME]

float32 FMAs, AVX512-BF16 dot products, VNNI int8 dot products, AMX tiles (bf16, int8): each
unit that the target has, on 1 and N threads at once, independent accumulator chains over
operands held in registers (tiles), no memory traffic. GOP/s count a multiply and an add as two
operations; each cell is the best of ``--repeat`` runs of ~0.1 s (every run listed). `tg-bench`
measures the same at its start and reports each row as a share of the peak of the precision it
ran in.
"""

from __future__ import annotations

import argparse
import os

from tensor_graphs.codegen.llvm.peak_kernels import UNITS, available_units, measure_peak, vector_chains
from tensor_graphs.target import Target, resolve


def per_cpu(unit: str, target: Target, repeat: int) -> dict:
    """CPU -> the unit's `Peak` on one thread pinned to that CPU (threads inherit the affinity)."""
    cpus = sorted(os.sched_getaffinity(0))
    out = {}
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            out[cpu] = measure_peak(unit, target, 1, repeat)
    finally:
        os.sched_setaffinity(0, cpus)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--target", default=None, help="a target name (default: TG_TARGET, else the host)")
    ap.add_argument("--per-cpu", action="store_true",
                    help="also one thread pinned to each CPU in turn (cores of one VM can differ: a busy sibling)")
    args = ap.parse_args(argv)
    target = resolve(args.target)
    print(f"host: {Target.host().describe()}\ntarget: {target.describe()}")
    print(f"vector kernels: {vector_chains(target)} chains; AMX: 4 accumulator tiles\n")
    print("| unit | precision | threads | GOP/s (best) | runs |\n|---|---|--:|--:|---|")
    for unit in available_units(target):
        for t in args.threads:
            p = measure_peak(unit.name, target, t, args.repeat)
            print(f"| {unit.name} | {unit.precision} | {t} | {p.gops:.0f} | {', '.join(f'{r:.0f}' for r in p.runs)} |")
        if args.per_cpu:
            for cpu, p in per_cpu(unit.name, target, args.repeat).items():
                print(f"| {unit.name} | {unit.precision} | 1 on CPU {cpu} | {p.gops:.0f} | {', '.join(f'{r:.0f}' for r in p.runs)} |")
    lacking = [u for u in UNITS if u not in {x.name for x in available_units(target)}]
    if lacking:
        print(f"\nnot on this target: {', '.join(lacking)} (its emulation runs on the FMA units: the float32 peak)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
