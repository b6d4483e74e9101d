"""Resident memory kept per compilation: compile, drop the result, repeat, watch RSS.

    .venv/bin/python benchmarks/compile_leak.py [--repeat 40] [--warmup 5] [--only NAME ...]

Every row compiles (or runs one stage of compiling) ``repeat`` times after ``warmup`` untimed
rounds and prints the growth of the process's resident set per round, in KB (see
`growth_per_round`; a one-time step after the first reading is shown apart). Before each reading
the script collects garbage and calls glibc's ``malloc_trim(0)``, so memory freed but kept by
malloc does not count: what remains is memory something still holds.

Rows: whole compiles (``tg.compile``) of a small MLP and of a 2-layer GPT-2, then the stages of
one MLP compile taken apart: the xDSL lowering to the llvm dialect, LLVM IR parsing, the LLVM
optimisation pipeline, MCJIT code generation.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensor_graphs as tg  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")
_LIBC = ctypes.CDLL("libc.so.6")


def rss_kb() -> float:
    """Resident set in KB after a full collection and returning free malloc memory to the OS."""
    gc.collect()
    _LIBC.malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 1024


def growth_per_round(step: Callable[[], None], repeat: int, warmup: int, marks: int = 5) -> tuple[float, float, float]:
    """(KB kept per call of ``step``, KB of the first interval's step, seconds per call).

    RSS is read at ``marks`` evenly spaced points over ``repeat`` calls after ``warmup``. The
    growth per call is the slope from the first mark to the last: a leak grows it linearly. The
    first interval is reported apart: garbage that waits in the oldest GC generation between
    full collections raises the heap's high-water mark, and a few long-lived objects left among
    it keep pymalloc arenas and malloc pages from being returned, a step that does not repeat.
    """
    for _ in range(warmup):
        step()
    readings = [rss_kb()]
    t0 = time.perf_counter()
    for i in range(repeat):
        step()
        if (i + 1) % (repeat // marks) == 0:
            readings.append(rss_kb())
    seconds = (time.perf_counter() - t0) / repeat
    per_mark = repeat // marks
    return (readings[-1] - readings[1]) / (per_mark * (len(readings) - 2)), readings[1] - readings[0], seconds


def mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    return model, (torch.randn(4, 32),)


def gpt2() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    import transformers
    from gpt2 import LogitsOnly

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    return LogitsOnly(model).eval(), (torch.randint(0, 256, (1, 16)),)


def llvm_level(model: torch.nn.Module, inputs: tuple) -> object:
    """``model`` imported and lowered by the xDSL pipelines down to the llvm dialect."""
    from tensor_graphs.api import _context
    from tensor_graphs.frontend import import_model
    from tensor_graphs.passes import LLVM_PIPELINE, TENSOR_PIPELINE, buffer_pipeline, build_pipeline

    module = import_model(model, inputs).module
    build_pipeline((*TENSOR_PIPELINE, *buffer_pipeline(True), *LLVM_PIPELINE)).apply(_context(), module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="rows whose name contains one of these words")
    args = parser.parse_args()

    import llvmlite.binding as llvm

    from tensor_graphs.codegen.llvm import jit

    model, inputs = mlp()
    tm = jit._target_machine(3)
    lowered = llvm_level(model, inputs)
    entry = lowered.attributes["tg.entry"].data
    ir_text = jit.to_llvm_ir(lowered, triple=jit._host()[0], data_layout=str(tm.target_data))
    optimised = str(jit.jit_compile(llvm_level(model, inputs)).llvm_ir)

    def parse() -> None:
        llvm.parse_assembly(ir_text)

    def optimise() -> None:
        jit._optimise(llvm.parse_assembly(ir_text), tm, 3)

    def mcjit() -> None:
        mod = llvm.parse_assembly(optimised)
        engine = llvm.create_mcjit_compiler(mod, jit._target_machine(3))
        engine.finalize_object()
        assert engine.get_function_address(entry)

    def compiler(make: Callable[[], tuple]) -> Callable[[], Callable[[], None]]:
        def step() -> Callable[[], None]:
            m, i = make()
            return lambda: tg.compile(m, i)

        return step

    rows: dict[str, Callable[[], Callable[[], None]]] = {  # name -> () -> step
        "compile mlp": compiler(mlp),
        "compile gpt2 (2 layers)": compiler(gpt2),
        "mlp: xdsl lowering to llvm dialect": lambda: lambda: llvm_level(model, inputs),
        "mlp: llvm parse_assembly": lambda: parse,
        "mlp: llvm parse + O3 pipeline": lambda: optimise,
        "mlp: llvm parse + mcjit codegen": lambda: mcjit,
    }
    print(f"{'what':<36} {'KB kept / round':>16} {'first-interval step KB':>23} {'ms / round':>11}")
    print(f"({args.repeat} rounds after {args.warmup}; 'kept' is the slope from the first RSS mark to the last)")
    for name, step in rows.items():
        if args.only and not any(w in name for w in args.only):
            continue
        kb, first, seconds = growth_per_round(step(), args.repeat, args.warmup)
        print(f"{name:<36} {kb:>16.1f} {first:>23.0f} {seconds * 1e3:>11.1f}", flush=True)


if __name__ == "__main__":
    main()
