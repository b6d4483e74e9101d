"""Resident memory kept per compilation: compile, drop the result, repeat, watch RSS.

    .venv/bin/python benchmarks/compile_leak.py [--repeat 40] [--warmup 5] [--only NAME ...]

Every row compiles (or runs one stage of compiling) ``repeat`` times after ``warmup`` untimed
rounds and prints the growth of the process's resident set per round, in KB (see
`growth_per_round`; a one-time step after the first reading is shown apart). Before each reading
the script collects garbage and calls glibc's ``malloc_trim(0)``, so memory freed but kept by
malloc does not count: what remains is memory something still holds.

Rows: whole compiles (``tg.compile``) of a small MLP and of a 2-layer GPT-2, the GPT-2's import
(``torch.export`` and our importer), then the stages of one MLP compile taken apart: the xDSL
lowering to the llvm dialect, LLVM IR parsing, the LLVM optimisation pipeline, MCJIT code
generation (each parsing into an LLVMContext of its own, as ``jit_compile`` does), and the
GPT-2's optimised IR parsed into a context of its own and into llvmlite's global context, which
keeps the metadata of every module parsed into it (the loop vectoriser's distinct
``!llvm.loop`` nodes) for good.

Reading the numbers: the interpreter takes memory in 1 MiB pymalloc arenas, and one arena more
or less kept by fragmentation at the last reading moves a row by 1024 / ``repeat`` KB (25 KB
over 40 rounds), in either direction. A row of a few tens of KB over 40 rounds is that noise
unless a longer run (``--repeat 200``) keeps the slope; below ~5 KB a row is steady. The heap
column (bytes in live allocations, malloc's and pymalloc's, `heap_kb`) does not move with
fragmentation: it is the memory something still holds.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import re
import sys
import tempfile
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


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def heap_kb() -> float:
    """KB in live allocations: malloc's bytes in use (``mallinfo2``: native code's, and Python's
    objects over 512 bytes) plus pymalloc's bytes in allocated blocks (small Python objects).
    Unlike RSS this does not move with fragmentation; NaN where glibc has no ``mallinfo2``."""
    gc.collect()
    try:
        mallinfo2 = _LIBC.mallinfo2
    except AttributeError:
        return float("nan")
    mallinfo2.restype = _Mallinfo2
    info = mallinfo2()
    with tempfile.TemporaryFile() as out:  # sys._debugmallocstats writes to the C stderr
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        stats = out.read().decode()
    found = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", stats)
    pymalloc = int(found.group(1).replace(",", "")) if found else 0
    return (info.uordblks + info.hblkhd + pymalloc) / 1024


def growth_per_round(
    step: Callable[[], None], repeat: int, warmup: int, marks: int = 5
) -> tuple[float, float, float, float]:
    """(KB of RSS kept per call of ``step``, KB of the first interval's RSS step, KB of live
    allocations kept per call (`heap_kb`), seconds per call).

    RSS is read at ``marks`` evenly spaced points over ``repeat`` calls after ``warmup``. The
    growth per call is the slope from the first mark to the last: a leak grows it linearly. The
    first interval is reported apart: garbage that waits in the oldest GC generation between
    full collections raises the heap's high-water mark, and a few long-lived objects left among
    it keep pymalloc arenas and malloc pages from being returned, a step that does not repeat.
    The live allocations are read at the first mark and the last, outside the timing.
    """
    for _ in range(warmup):
        step()
    readings = [rss_kb()]
    heap = [heap_kb()]
    t0 = time.perf_counter()
    pause = 0.0
    for i in range(repeat):
        step()
        if (i + 1) % (repeat // marks) == 0:
            t1 = time.perf_counter()
            readings.append(rss_kb())
            if len(readings) == 2:
                heap.append(heap_kb())
            pause += time.perf_counter() - t1
    heap.append(heap_kb())
    seconds = (time.perf_counter() - t0 - pause) / repeat
    per_mark = repeat // marks
    rounds = per_mark * (len(readings) - 2)
    return (readings[-1] - readings[1]) / rounds, readings[1] - readings[0], (heap[-1] - heap[1]) / rounds, seconds


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
    from tensor_graphs.context import make_context as _context
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
    ir_text = jit.to_llvm_ir(lowered, triple=jit._triple(), data_layout=str(tm.target_data))
    optimised = str(jit.jit_compile(llvm_level(model, inputs)).llvm_ir)

    def parse(text: str = ir_text) -> tuple:
        """``text`` parsed into a fresh LLVMContext, as `jit.jit_compile` does."""
        context = llvm.create_context()
        return llvm.parse_assembly(text, context=context), context

    def parse_only(text: str = ir_text) -> None:
        mod, context = parse(text)
        mod.close()  # before its context
        context.close()

    def gpt2_parse(own_context: bool) -> Callable[[], Callable[[], None]]:
        """A GPT-2's optimised IR (~70 distinct ``!llvm.loop`` nodes) parsed and dropped."""

        def step() -> Callable[[], None]:
            text = tg.compile(*gpt2()).ir("llvm")
            if own_context:
                return lambda: parse_only(text)
            return lambda: llvm.parse_assembly(text)

        return step

    def optimise() -> None:
        mod, context = parse()
        jit._optimise(mod, tm, 3)
        mod.close()
        context.close()

    def mcjit() -> None:
        mod, context = parse(optimised)
        engine = jit._context_engine().take(llvm.create_mcjit_compiler(mod, jit._target_machine(3)), context)
        engine.finalize_object()
        assert engine.get_function_address(entry)

    def importer(make: Callable[[], tuple]) -> Callable[[], Callable[[], None]]:
        def step() -> Callable[[], None]:
            from tensor_graphs.frontend import import_model

            m, i = make()
            return lambda: import_model(m, i)

        return step

    def compiler(make: Callable[[], tuple]) -> Callable[[], Callable[[], None]]:
        def step() -> Callable[[], None]:
            m, i = make()
            return lambda: tg.compile(m, i)

        return step

    rows: dict[str, Callable[[], Callable[[], None]]] = {  # name -> () -> step
        "compile mlp": compiler(mlp),
        "compile gpt2 (2 layers)": compiler(gpt2),
        "gpt2: torch.export + import": importer(gpt2),
        "mlp: xdsl lowering to llvm dialect": lambda: lambda: llvm_level(model, inputs),
        "mlp: llvm parse_assembly": lambda: lambda: parse_only(),
        "mlp: llvm parse + O3 pipeline": lambda: optimise,
        "mlp: llvm parse + mcjit codegen": lambda: mcjit,
        "gpt2: parse optimised IR, own context": gpt2_parse(True),
        "gpt2: parse optimised IR, global ctx": gpt2_parse(False),
    }
    print(f"{'what':<36} {'RSS KB kept / round':>20} {'first-interval step KB':>23} {'heap KB kept / round':>21} {'ms / round':>11}")
    print(f"({args.repeat} rounds after {args.warmup}; 'kept' is the slope from the first mark to the last; heap: live allocations)")
    for name, step in rows.items():
        if args.only and not any(w in name for w in args.only):
            continue
        kb, first, heap, seconds = growth_per_round(step(), args.repeat, args.warmup)
        print(f"{name:<36} {kb:>20.1f} {first:>23.0f} {heap:>21.2f} {seconds * 1e3:>11.1f}", flush=True)


if __name__ == "__main__":
    main()
