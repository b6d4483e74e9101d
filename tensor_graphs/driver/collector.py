"""Python's cyclic garbage collector paused while a graph compiles.

A compile builds and drops hundreds of thousands of IR objects (xDSL operations, attributes,
LLVM IR text); each generation-0 overflow starts a collection, and the full ones walk every
object the process holds (torch, the model, sympy's caches) again and again. Paused for the
compile and resumed after it (what the compile dropped is collected then, as it would have been
at the next collection), tensor_graphs' own part of a compile (`benchmarks/compile_time.py
--dynamic`, Zen 3) took 9.9 s instead of 13.0 s for BERT-base with a symbolic sequence length,
9.8 s instead of 11.1 s for GPT-2 small, 4.5 s instead of 5.8 s for a static BERT-base. Peak
memory stays about the same: the IR a pass drops is mostly freed by reference counting.

Compiles in several threads share one pause: the collector resumes when the last one ends, and
stays paused if the caller had paused it (`gc.disable`) before.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_active = 0  # compiles under way
_resume = False  # whether the collector ran before the first of them paused it


@contextmanager
def paused_collector() -> Iterator[None]:
    """Pause the cyclic collector for the ``with`` block (see the module doc)."""
    global _active, _resume
    with _lock:
        if _active == 0:
            _resume = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _resume:
                gc.enable()
