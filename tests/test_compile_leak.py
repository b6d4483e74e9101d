"""Compiling keeps no memory once the result is dropped (benchmarks/compile_leak.py measures more).

Resident memory is read after ``gc.collect()`` and glibc's ``malloc_trim(0)``, so memory freed
but still held by malloc does not count. After warm-up compiles the objects alive so far are
frozen (``gc.freeze()``): the full collection after each compile then only scans what that
compile made, which makes it cheap. Collecting after each compile matters: without it a
compile's cyclic garbage waits in the oldest generation, the interpreter takes a few more 1 MiB
pymalloc arenas, and the few long-lived objects placed in them keep the arenas from being
returned. That one-time 3-7 MB step is memory nothing holds, and this test does not count it.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
import time
import weakref

import pytest
import torch

import tensor_graphs as tg
from conftest import mlp

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm, calls glibc")


def rss_kb() -> float:
    """Resident set in KB, after a full collection and giving free malloc memory back to the OS."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024


def growth_kb(step, repeat: int, warmup: int) -> float:
    """RSS growth in KB over ``repeat`` calls of ``step`` after ``warmup``, collecting after
    each call. torch's structured-trace logger is muted meanwhile: under pytest it reaches
    pytest's log capture, which keeps every record (a few per compile, JSON payloads included)
    until the test ends, and it overrides ``isEnabledFor`` so ``logging.disable`` cannot."""
    trace_log = logging.getLogger("torch.__trace")
    was_disabled, trace_log.disabled = trace_log.disabled, True
    try:
        for _ in range(warmup):
            step()
        gc.collect()
        gc.freeze()
        before = rss_kb()
        for _ in range(repeat):
            step()
            gc.collect()
        return rss_kb() - before
    finally:
        gc.unfreeze()
        trace_log.disabled = was_disabled


def test_compiling_and_dropping_100_models_grows_rss_under_5_mb():
    """Tolerance: what still stays per compile is ~10 KB (torch.fx keeps the source of every
    ``forward`` it generates in ``torch.fx.graph_module._loader.eval_cache`` and ``linecache``,
    and llvmlite never frees the ``PassInstrumentationCallbacks`` of a ``PassBuilder``, ~2 KB),
    so ~1 MB per 100 (0.6 MB measured), plus up to a few 1 MiB pymalloc arenas kept by
    fragmentation. Before the fix, when llvmlite kept every LLVM pass manager, this measured
    8.5 MB. ~22 s on a 2-core machine."""
    model, x = mlp([16, 32, 32, 8]), torch.randn(2, 16)
    t0 = time.perf_counter()
    grown = growth_kb(lambda: tg.compile(model, (x,)), repeat=100, warmup=5)
    seconds = time.perf_counter() - t0
    assert grown < 5 * 1024, f"100 compiles kept {grown:.0f} KB of resident memory ({seconds:.0f} s)"


def test_llvm_optimisation_keeps_nothing_per_run():
    """The O3 pipeline run on its own: before the fix each run kept its ModulePassManager
    (llvmlite 0.50 never frees one), 7.1 MB over these 100 runs; now ~2 KB per run stays (see
    `jit._optimise`), 0.05-0.2 MB. Tolerance 1 MB."""
    import llvmlite.binding as llvm

    from tensor_graphs.codegen.llvm import jit

    model, x = mlp([16, 32, 32, 8]), torch.randn(2, 16)
    module = tg.compile(model, (x,)).ir("llvm")  # optimised IR text: still a fair pipeline input
    tm = jit._target_machine(3)
    grown = growth_kb(lambda: jit._optimise(llvm.parse_assembly(module), tm, 3), repeat=100, warmup=5)
    assert grown < 1024, f"100 runs of the LLVM pipeline kept {grown:.0f} KB of resident memory"


def test_dropped_compiled_graph_frees_its_execution_engine():
    """Nothing (a cache, a global list, a ctypes callback) keeps a dropped graph's MCJIT engine:
    once the llvmlite object is collected its ``__del__`` disposes of the engine, and with it
    the module and the code."""
    model, x = mlp([16, 32, 8]), torch.randn(2, 16)
    fn = tg.compile(model, (x,))
    fn(x)
    engine = weakref.ref(fn._native.engine)
    del fn
    gc.collect()
    assert engine() is None, gc.get_referrers(engine())
