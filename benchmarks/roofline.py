"""The machine's ceilings for the benchmark rows: FLOPs counted from weight shapes, OpenBLAS sgemm GFLOP/s.

    .venv/bin/python benchmarks/roofline.py [--threads 1 2] [--size 2048]

FLOPs of a forward pass are counted, not measured: ``2*M*N*K`` for every weight GEMM (an
``nn.Linear`` or a transformers ``Conv1D``; ``M`` = the tokens, or the rows whose logits are
computed for the LM head), plus ``4 * heads * q_len * kv_len * head_dim`` per attention layer for
``Q K^T`` and ``P V``, over the full ``q_len x kv_len`` rectangle (causal masking is not
subtracted, as a dense GEMM computes it). Layer norms, softmax, activations and residual adds are
not counted. The same ``(M, K, N)`` list, run through OpenBLAS ``sgemm`` alone, gives the GEMM
time floor of the model at that shape.

sgemm is ``scipy_cblas_sgemm`` of the scipy-openblas32 wheel that tensor_graphs itself calls
(``tensor_graphs.runtime_support.blas``), with its thread count set like the engines'. Its kernel
set is OpenBLAS's choice for this CPU, unless ``OPENBLAS_CORETYPE`` (read when the library loads)
names another: ``tg-bench --target x86-64-v3`` sets ``Haswell`` on an AVX-512 host, so that the
ceiling is the AVX2 one the AVX2 code is held to.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

from tensor_graphs.runtime_support import blas

FLOPS_HOW = (
    "FLOPs per call = sum of 2*M*N*K over the weight GEMMs (nn.Linear / Conv1D weight shapes; M = tokens, "
    "the LM head's M = the rows whose logits are computed) + 4*heads*S_q*S_kv*head_dim per attention layer "
    "(QK^T and PV over the full S_q x S_kv rectangle: causal masking not subtracted); norms, softmax, "
    "activations and adds are not counted"
)


@dataclass(frozen=True)
class Gemm:
    """``C[M, N] = A[M, K] @ B``; ``B`` is the weight, stored ``[N, K]`` (``trans_b``) or ``[K, N]``."""

    m: int
    k: int
    n: int
    trans_b: bool = True

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


def weight_gemms(model: torch.nn.Module, tokens: int, *, lm_head: torch.nn.Module | None = None,
                 lm_rows: int | None = None) -> list[Gemm]:
    """The GEMM of every ``nn.Linear`` / transformers ``Conv1D`` in ``model`` for ``tokens`` rows.

    ``lm_head`` (when given) gets ``lm_rows`` rows instead (1 when only the last logits are computed).
    """
    out = []
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            k, n, trans_b = mod.in_features, mod.out_features, True
        elif type(mod).__name__ == "Conv1D" and getattr(mod, "weight", None) is not None and mod.weight.dim() == 2:
            (k, n), trans_b = mod.weight.shape, False  # transformers' Conv1D: y = x @ W[K, N] + b
        else:
            continue
        m = lm_rows if (lm_head is not None and mod is lm_head and lm_rows is not None) else tokens
        out.append(Gemm(m, k, n, trans_b))
    return out


def conv_gemms(model: torch.nn.Module, *inputs: torch.Tensor) -> list[Gemm]:
    """The GEMMs of a convolutional model on ``inputs``: every ``nn.Conv1d`` / ``nn.Conv2d`` as
    ``W[Cout/g, Cin/g * kh * kw] @ cols[., OH * OW]`` per group and image (the GEMM tensor_graphs
    runs), every ``nn.Linear`` over the rows it sees; found by running ``model`` once with hooks."""
    out: list[Gemm] = []

    def hook(mod: torch.nn.Module, args: tuple, result: torch.Tensor) -> None:
        if isinstance(mod, torch.nn.Linear):
            out.append(Gemm(args[0].numel() // mod.in_features, mod.in_features, mod.out_features))
            return
        g = mod.groups
        taps = mod.weight[0].numel()  # Cin/g * kernel
        positions = result[0, 0].numel()
        for _ in range(result.shape[0] * g):
            out.append(Gemm(mod.out_channels // g, taps, positions, trans_b=False))

    kinds = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear)
    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return out


def attention_flops(layers: int, heads: int, head_dim: int, q_len: int, kv_len: int) -> int:
    """``Q K^T`` and ``P V`` of ``layers`` attention layers (``heads`` = query heads)."""
    return layers * 2 * (2 * heads * q_len * kv_len * head_dim)


@functools.cache
def _sgemm():
    fn = ctypes.CDLL(blas.library_path()).scipy_cblas_sgemm
    P, I, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    fn.argtypes = [I, I, I, I, I, I, F, P, I, P, I, F, P, I]
    fn.restype = None
    return fn


def openblas_config() -> str:
    """OpenBLAS's build string (version, kernel, thread limit), e.g. ``OpenBLAS 0.3.30 DYNAMIC_ARCH ... Zen``."""
    lib = ctypes.CDLL(blas.library_path())
    try:
        get = lib.scipy_openblas_get_config
        get.restype = ctypes.c_char_p
        return f"{get().decode().strip()} (core {openblas_core()})"
    except AttributeError:
        return "OpenBLAS (version unknown)"


def openblas_core() -> str | None:
    """The kernel set OpenBLAS chose at load time (``Haswell``, ``SkylakeX``, ``Zen``...; what
    ``OPENBLAS_CORETYPE`` forces), or None when the library does not say."""
    try:
        core = ctypes.CDLL(blas.library_path()).scipy_openblas_get_corename
    except AttributeError:
        return None
    core.restype = ctypes.c_char_p
    return core().decode()


def sgemm_gflops(gemms: list[Gemm], threads: int, *, repeat: int = 5, min_seconds: float = 0.0) -> float:
    """GFLOP/s of ``gemms`` run one after another through OpenBLAS sgemm (beta 0), median of ``repeat`` passes.

    Each distinct shape gets its own A, B, C (random, float32); a pass runs the whole list once.
    ``min_seconds``: repeat a pass inside one timing until it lasts that long (for tiny lists).
    """
    before = blas.get_num_threads()  # tensor_graphs holds OpenBLAS to one thread (runtime_support.threads)
    blas.set_num_threads(threads)
    try:
        return _sgemm_gflops(gemms, repeat, min_seconds)
    finally:
        blas.set_num_threads(before)


def _sgemm_gflops(gemms: list[Gemm], repeat: int, min_seconds: float) -> float:
    sgemm = _sgemm()
    rng = np.random.default_rng(0)
    buffers = {}
    for g in set(gemms):
        b = rng.standard_normal((g.n, g.k) if g.trans_b else (g.k, g.n), dtype=np.float32)
        buffers[g] = (rng.standard_normal((g.m, g.k), dtype=np.float32), b, np.empty((g.m, g.n), np.float32))
    calls = [(g, *buffers[g]) for g in gemms]

    def one_pass():
        for g, a, b, c in calls:
            # CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112
            sgemm(101, 111, 112 if g.trans_b else 111, g.m, g.n, g.k, 1.0, a.ctypes.data, g.k,
                  b.ctypes.data, g.k if g.trans_b else g.n, 0.0, c.ctypes.data, g.n)

    return sum(g.flops for g in gemms) / median_seconds(one_pass, repeat, min_seconds) / 1e9


def median_seconds(call, repeat: int, min_seconds: float = 0.0) -> float:
    """Seconds per ``call()``: the median of ``repeat`` timings, each of enough calls to last
    ``min_seconds`` (one at least), after one untimed warm-up call (pages faulted in, threads
    started) and one that sizes the timings."""
    call()
    t0 = time.perf_counter()
    call()
    inner = max(1, int(min_seconds / max(time.perf_counter() - t0, 1e-9)))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def square_gflops(size: int, threads: int, repeat: int = 5) -> float:
    """sgemm GFLOP/s of one ``size``-cubed GEMM (B transposed, as a weight is stored)."""
    return sgemm_gflops([Gemm(size, size, size)], threads, repeat=repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(openblas_config())
    for t in args.threads:
        print(f"sgemm {args.size}^3, {t} thread(s): {square_gflops(args.size, t, args.repeat):.1f} GFLOP/s")


if __name__ == "__main__":
    main()
