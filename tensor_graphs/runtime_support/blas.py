"""OpenBLAS from the `scipy-openblas32` wheel: locating it, making its symbols visible to the
JIT, and its thread count.

The wheel exports prefixed names (``scipy_cblas_sgemm``, ``scipy_openblas_set_num_threads``),
so it never clashes with another BLAS loaded in the same process (NumPy's, torch's MKL).
"""

from __future__ import annotations

import ctypes
import functools
import os


class BlasNotFoundError(RuntimeError):
    """scipy-openblas32 is not installed or its shared library is missing."""


@functools.cache
def library_path() -> str:
    """Absolute path of ``libscipy_openblas*.so`` (or the platform's equivalent)."""
    try:
        import scipy_openblas32
    except ImportError as e:
        raise BlasNotFoundError("tensor_graphs needs the 'scipy-openblas32' package: pip install scipy-openblas32") from e
    lib_dir = scipy_openblas32.get_lib_dir()
    suffixes = (".dll",) if os.name == "nt" else (".so", ".dylib")
    candidates = sorted(
        f
        for f in os.listdir(lib_dir)
        if f.startswith(("libscipy_openblas", "scipy_openblas")) and any(s in f for s in suffixes)
    )
    if not candidates:
        raise BlasNotFoundError(f"no scipy_openblas shared library in {lib_dir}")
    return os.path.join(lib_dir, candidates[0])


@functools.cache
def _cdll() -> ctypes.CDLL:
    return ctypes.CDLL(library_path(), mode=getattr(ctypes, "RTLD_GLOBAL", 0))


@functools.cache
def load() -> str:
    """Make the BLAS symbols resolvable by the JIT (idempotent); returns the library path."""
    import llvmlite.binding as llvm

    path = library_path()
    _cdll()
    llvm.load_library_permanently(path)
    return path


def sgemm_address() -> int:
    """Address of ``scipy_cblas_sgemm`` in this process."""
    return ctypes.cast(_cdll().scipy_cblas_sgemm, ctypes.c_void_p).value or 0


def set_num_threads(n: int) -> None:
    """Number of threads OpenBLAS uses for each GEMM (process wide)."""
    if n < 1:
        raise ValueError(f"set_num_threads: expected a positive thread count, got {n}")
    fn = _cdll().scipy_openblas_set_num_threads
    fn.argtypes, fn.restype = [ctypes.c_int], None
    fn(int(n))


def get_num_threads() -> int:
    fn = _cdll().scipy_openblas_get_num_threads
    fn.argtypes, fn.restype = [], ctypes.c_int
    return int(fn())
