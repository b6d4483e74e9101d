"""Threads inside compiled graphs: ONE setting for every parallel kernel.

Parallel kernels (the packed GEMM, ...) split their work with libgomp's ``GOMP_parallel``, the
OpenMP runtime PyTorch ships (``torch/lib/libgomp.so.1``; the system's ``libgomp.so.1`` when torch
is not installed): the team is kept between calls, so a parallel region costs microseconds. The
generated code reads how many threads to use from the process-wide ``int32``
:data:`NUM_THREADS_SYMBOL`, which :func:`set_num_threads` sets; with 1 it calls the work
directly, without entering libgomp.

OpenBLAS (still called for GEMMs of two activations outside attention, and by graphs compiled
with ``pack_weights=False``) is held to one thread: two thread pools would otherwise compete for
the cores (OpenBLAS's idle threads keep spinning after each call).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import os

#: The generated code's ``external global i32``: threads per parallel kernel.
NUM_THREADS_SYMBOL = "tg_num_threads"
#: libgomp entry points the generated code calls.
GOMP_PARALLEL = "GOMP_parallel"
OMP_GET_THREAD_NUM = "omp_get_thread_num"
OMP_GET_NUM_THREADS = "omp_get_num_threads"
#: libgomp's guided loop schedule (what gcc emits for ``schedule(guided, chunk)``): threads take
#: shrinking chunks of a range from a shared counter, so that a core slowed by something else
#: takes fewer.
GOMP_LOOP_GUIDED_START = "GOMP_loop_guided_start"
GOMP_LOOP_GUIDED_NEXT = "GOMP_loop_guided_next"
GOMP_LOOP_END_NOWAIT = "GOMP_loop_end_nowait"

_num_threads = ctypes.c_int32(0)


class OpenMPNotFoundError(RuntimeError):
    """No libgomp to run parallel kernels with."""


@functools.cache
def libgomp_path() -> str:
    """torch's bundled ``libgomp.so.1`` (the same runtime torch's own kernels use), else the system's."""
    spec = importlib.util.find_spec("torch")
    for root in spec.submodule_search_locations or () if spec is not None else ():
        candidate = os.path.join(root, "lib", "libgomp.so.1")
        if os.path.isfile(candidate):
            return candidate
    found = ctypes.util.find_library("gomp")
    if found is None:
        raise OpenMPNotFoundError("parallel kernels need libgomp (libgomp.so.1): install torch or gcc's libgomp1")
    return found


@functools.cache
def load() -> None:
    """Make libgomp and :data:`NUM_THREADS_SYMBOL` resolvable by the JIT (idempotent)."""
    import llvmlite.binding as llvm

    path = libgomp_path()
    ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
    llvm.load_library_permanently(path)
    llvm.add_symbol(NUM_THREADS_SYMBOL, ctypes.addressof(_num_threads))
    if _num_threads.value == 0:
        set_num_threads(default_num_threads())


def default_num_threads() -> int:
    """``OMP_NUM_THREADS`` when set, else the CPUs this process may run on."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def set_num_threads(n: int) -> None:
    """Threads for every parallel kernel of every compiled graph (process wide)."""
    from tensor_graphs.runtime_support import blas

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive thread count, got {n!r}")
    _num_threads.value = n
    blas.set_num_threads(1)


def get_num_threads() -> int:
    if _num_threads.value == 0:
        load()
    return int(_num_threads.value)
