"""The core's arithmetic peak per precision, measured with an emitted microkernel for each unit.

    from tensor_graphs.codegen.llvm.peak_kernels import measure_peaks, precision_peaks
    precision_peaks(measure_peaks(Target.host(), threads=2))   # {"float32": Peak(...), "bf16": ..., "int8": ...}
    .venv/bin/python benchmarks/peaks.py      # the table, at 1 and 2 threads

Each kernel is one loop of independent accumulator chains over operands held in registers (or
AMX tiles) and nothing else: no loads, so it runs at the unit's issue rate, the ceiling a GEMM in
that precision can approach. One kernel per unit the target has (`UNITS`):

=================  ==========  ====================================================  ===========
unit               precision   one step of one chain                                 ops / step
=================  ==========  ====================================================  ===========
``fma``            float32     ``acc = fma(x, y, acc)`` over L float lanes           2 L
``avx512bf16``     bf16        ``vdpbf16ps``: 16 lanes += two bf16 products each     64
``vnni``           int8        ``vpdpbusd``: L int32 lanes += four u8 x s8 products  8 L
``amx-bf16``       bf16        ``tdpbf16ps`` on a 16 x 16 float32 tile, K = 32      16384
``amx-int8``       int8        ``tdpbssd`` on a 16 x 16 int32 tile, K = 64          32768
=================  ==========  ====================================================  ===========

(an operation is a multiply or an add, as GFLOP/s count them.) The vector kernels run
`vector_chains` chains: 3/4 of the target's vector registers, more than the FMA latency times its
ports on x86 cores (4-5 cycles x 2). The AMX kernel keeps 4 accumulator tiles and 4
operand tiles, loaded once. Every kernel ``k(ptr out, i64 steps)`` reads its starting
accumulators and operands from ``out`` and writes the chains' sums back, so the loop is neither
folded nor removed, and `Kernel.expected` says what the sums must be: a kernel that skipped or
repeated steps fails the check (`tests/test_peak_kernels.py`).

`measure_peak` runs the kernel on N threads at once (ctypes calls release the GIL), each for about
`CALL_SECONDS`, and reports the best of ``repeat`` runs: the machine's ceiling, as `tg-bench`
divides by it. A unit the target lacks has no peak here (its emulation runs on the FMA units: the
float32 peak is its ceiling).
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tensor_graphs.target import Target

#: Seconds one timed call of a kernel runs for (long enough that the call costs nothing).
CALL_SECONDS = 0.1
#: The AMX tile configuration (palette 1, 8 tiles of 16 rows of 64 bytes) as the kernel loads it.
AMX_TILES = 8
AMX_ROWS = 16
AMX_ROW_BYTES = 64



@dataclass(frozen=True)
class Kernel:
    """One unit's microkernel for one target: ``k(ptr out, i64 steps)`` and its buffer."""

    ir: str
    #: independent accumulator chains (each does one instruction per step)
    chains: int
    #: operations (multiplies and adds) of one instruction
    ops: int
    #: the starting contents of ``out`` (operands, then the accumulators at 0)
    initial: np.ndarray
    #: the chains' sums in ``out`` after a call, as numbers: ``sums(out)``
    sums: Callable[[np.ndarray], np.ndarray]
    #: what every sum is after ``steps`` steps from `initial`
    expected: Callable[[int], float]


@dataclass(frozen=True)
class Unit:
    """An arithmetic unit: its precision, when a target has it, and its kernel for a target."""

    name: str
    precision: str
    has: Callable[[Target], bool]
    kernel: Callable[[Target], Kernel]


def vector_chains(target: Target) -> int:
    """Independent accumulator chains of the vector kernels: 3/4 of the vector registers (24 of
    AVX-512's 32, 12 of AVX2's 16), the rest for the operands."""
    return target.vector_registers * 3 // 4


def _loop(chains: int, step: Callable[[int], list[str]]) -> list[str]:
    """The counted loop ``for i < steps`` whose body is ``step(c)`` for each chain (phis first:
    ``%acc{c}`` is a chain's value entering the step, ``%s{c}`` leaving it, ``%a{c}`` before the loop)."""
    lines = ["  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%n, %loop]"]
    body = [line for c in range(chains) for line in step(c)]
    lines += [line for line in body if " = phi " in line]
    lines += [line for line in body if " = phi " not in line]
    return lines + ["  %n = add i64 %i, 1", "  %d = icmp uge i64 %n, %steps", "  br i1 %d, label %done, label %loop", "done:"]


def _vector_ir(acc: str, operand: str, fn: str, chains: int) -> str:
    """``k(out, steps)``: ``acc{c} = fn(acc{c}, x, y)`` on ``chains`` chains, with ``x`` and ``y``
    the first two ``operand`` vectors at ``out`` and the chains' starting ``acc`` vectors after
    them, stored back there."""
    lines = [f"declare {acc} @{fn}({acc}, {operand}, {operand})", "define void @k(ptr %out, i64 %steps) {", "entry:",
             f"  %x = load {operand}, ptr %out, align 4", f"  %py = getelementptr {operand}, ptr %out, i64 1",
             f"  %y = load {operand}, ptr %py, align 4"]
    for c in range(chains):
        lines += [f"  %p{c} = getelementptr {acc}, ptr %out, i64 {c + 2}", f"  %a{c} = load {acc}, ptr %p{c}, align 4"]
    lines += _loop(chains, lambda c: [f"  %acc{c} = phi {acc} [%a{c}, %entry], [%s{c}, %loop]",
                                      f"  %s{c} = call {acc} @{fn}({acc} %acc{c}, {operand} %x, {operand} %y)"])
    lines += [f"  store {acc} %s{c}, ptr %p{c}, align 4" for c in range(chains)]
    return "\n".join(lines + ["  ret void", "}"])


def _vector_kernel(target: Target, lanes: int, kind: str, fn: str, ops: int, x, y, per_step: float) -> Kernel:
    """A vector unit's kernel: ``lanes`` 32-bit lanes of ``kind`` (``float`` or ``i32``)
    accumulators, operands of 32-bit words ``x`` and ``y`` (numpy scalars), each step adding
    ``per_step`` to every lane."""
    chains = vector_chains(target)
    acc = f"<{lanes} x {kind}>"
    operand = acc if fn.startswith("llvm.fma") else f"<{lanes} x i32>"
    dtype = np.float32 if kind == "float" else np.int32
    words = np.zeros((chains + 2) * lanes, np.uint32)
    words[:lanes] = np.asarray(x).view(np.uint32)
    words[lanes:2 * lanes] = np.asarray(y).view(np.uint32)
    return Kernel(_vector_ir(acc, operand, fn, chains), chains, ops, words.view(np.uint8),
                  lambda out: out.view(dtype)[2 * lanes:].astype(np.float64), lambda steps: per_step * steps)


def _fma(target: Target) -> Kernel:
    lanes = target.float_lanes
    return _vector_kernel(target, lanes, "float", f"llvm.fma.v{lanes}f32", 2 * lanes,
                          np.float32(1.0), np.float32(0.5), 0.5)


#: bf16 pairs of 1.0 and of 0.5 (high and low halves alike)
BF16_ONES, BF16_HALVES = np.uint32(0x3F803F80), np.uint32(0x3F003F00)
#: four int8 ones in a word
INT8_ONES = np.uint32(0x01010101)


def _bf16_dot(target: Target) -> Kernel:
    # the i32-vector form of the intrinsic that bf16_dot.py uses (LLVM upgrades it to bfloat)
    return _vector_kernel(target, 16, "float", "llvm.x86.avx512bf16.dpbf16ps.512", 64, BF16_ONES, BF16_HALVES, 1.0)


def vnni_lanes(target: Target) -> int:
    """int32 lanes of the VNNI kernel: 16 with AVX512-VNNI on a 512-bit target, else AVX-VNNI's 8."""
    return 16 if target.vector_bits == 512 and "avx512vnni" in target.extensions else 8


def _vnni(target: Target) -> Kernel:
    lanes = vnni_lanes(target)
    return _vector_kernel(target, lanes, "i32", f"llvm.x86.avx512.vpdpbusd.{32 * lanes}", 8 * lanes,
                          INT8_ONES, INT8_ONES, 4.0)


def _amx_ir(instruction: str) -> str:
    """``k(out, steps)``: ``out`` holds the tile configuration (64 bytes), then tiles 4-7 (A0 A1
    B0 B1, 1 KiB each), then tiles 0-3 (the accumulators); each step is 4 ``instruction`` over
    the 2 x 2 blocks; the accumulators are stored back."""
    tile = AMX_ROWS * AMX_ROW_BYTES
    lines = ["declare void @llvm.x86.ldtilecfg(ptr)", "declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)",
             f"declare void @llvm.x86.{instruction}(i8 immarg, i8 immarg, i8 immarg)",
             "declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)", "declare void @llvm.x86.tilerelease()",
             "define void @k(ptr %out, i64 %steps) {", "entry:", "  call void @llvm.x86.ldtilecfg(ptr %out)"]
    for slot, t in enumerate((4, 5, 6, 7, 0, 1, 2, 3)):
        lines += [f"  %t{t} = getelementptr i8, ptr %out, i64 {64 + slot * tile}",
                  f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %t{t}, i64 {AMX_ROW_BYTES})"]
    lines += _loop(4, lambda c: [f"  call void @llvm.x86.{instruction}(i8 {c}, i8 {4 + c // 2}, i8 {6 + c % 2})"])
    lines += [f"  call void @llvm.x86.tilestored64(i8 {t}, ptr %t{t}, i64 {AMX_ROW_BYTES})" for t in range(4)]
    return "\n".join(lines + ["  call void @llvm.x86.tilerelease()", "  ret void", "}"])


def _amx(instruction: str, x: np.uint32, y: np.uint32, k: int, per_step: float, kind: type):
    """An AMX unit's kernel: 4 chains of ``instruction`` on 16 x 16 accumulator tiles over
    operand tiles of ``k`` elements per row, filled with words ``x`` (A) and ``y`` (B)."""
    tile = AMX_ROWS * AMX_ROW_BYTES

    def kernel(_target: Target) -> Kernel:
        out = np.zeros(64 + AMX_TILES * tile, np.uint8)
        out[0] = 1  # palette 1; every tile 16 rows of 64 bytes
        out[16:16 + 2 * AMX_TILES].view(np.uint16)[:] = AMX_ROW_BYTES
        out[48:48 + AMX_TILES] = AMX_ROWS
        operands = out[64:64 + 4 * tile].view(np.uint32)
        operands[: len(operands) // 2], operands[len(operands) // 2:] = x, y
        return Kernel(_amx_ir(instruction), 4, 2 * AMX_ROWS * AMX_ROWS * k, out,
                      lambda o: o[64 + 4 * tile:].view(kind).astype(np.float64), lambda steps: per_step * steps)

    return kernel


def _has(*extensions: str) -> Callable[[Target], bool]:
    return lambda target: all(e in target.extensions for e in extensions)


#: Every unit a kernel measures, by name (the table in this module's docstring).
UNITS: dict[str, Unit] = {
    u.name: u
    for u in (
        Unit("fma", "float32", lambda target: target.fma, _fma),
        Unit("avx512bf16", "bf16", lambda t: t.vector_bits == 512 and "avx512bf16" in t.extensions, _bf16_dot),
        Unit("vnni", "int8", lambda t: ("avx512vnni" in t.extensions and t.vector_bits == 512) or "avxvnni" in t.extensions,
             _vnni),
        Unit("amx-bf16", "bf16", _has("amx-tile", "amx-bf16"),
             _amx("tdpbf16ps", BF16_ONES, BF16_HALVES, 32, 16.0, np.float32)),
        Unit("amx-int8", "int8", _has("amx-tile", "amx-int8"),
             _amx("tdpbssd", INT8_ONES, INT8_ONES, 64, 64.0, np.int32)),
    )
}


def available_units(target: Target) -> list[Unit]:
    """The units ``target`` has, in `UNITS` order."""
    return [u for u in UNITS.values() if u.has(target)]


def _parsed(name: str, target: Target):
    """Unit ``name``'s kernel for ``target`` as a verified llvmlite module, and the target machine."""
    import llvmlite.binding as llvm

    from tensor_graphs.codegen.llvm.jit import _target_machine

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(UNITS[name].kernel(target).ir)
    mod.verify()
    return mod, _target_machine(2, target)


@functools.cache
def _compiled(name: str, target: Target) -> tuple[Callable[[int, int], None], object]:
    """``(k(out_address, steps), engine)`` for unit ``name`` on ``target`` (the engine keeps the code alive)."""
    import llvmlite.binding as llvm

    mod, machine = _parsed(name, target)
    engine = llvm.create_mcjit_compiler(mod, machine)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("k"))
    return fn, engine


def assembly(name: str, target: Target) -> str:
    """The kernel of unit ``name`` for ``target`` as assembly (any target, from any host)."""
    mod, machine = _parsed(name, target)
    return machine.emit_assembly(mod)


def run_kernel(name: str, target: Target, steps: int) -> np.ndarray:
    """Run unit ``name``'s kernel once for ``steps`` steps from its starting buffer; its chains' sums."""
    if steps < 1:
        raise ValueError(f"peak kernel {name}: steps must be at least 1, not {steps}")
    target.check_runs_here()
    kernel = UNITS[name].kernel(target)
    _prepare(name)
    fn, _ = _compiled(name, target)
    out = kernel.initial.copy()
    fn(out.ctypes.data, steps)
    return kernel.sums(out)


def _prepare(name: str) -> None:
    """AMX: Linux's permission for the tile state (`kernels_amx.request_amx`), once per process."""
    if name.startswith("amx"):
        from tensor_graphs.codegen.llvm.kernels_amx import request_amx

        request_amx()


@dataclass(frozen=True)
class Peak:
    """A unit's measured peak on some threads: the best of the runs, and every run's GOP/s."""

    unit: str
    precision: str
    threads: int
    gops: float
    runs: tuple[float, ...]


def _timed(fn: Callable[[int, int], None], buffers: list[np.ndarray], steps: int) -> float:
    """Seconds for every thread to run ``steps`` steps on its own buffer, started together."""
    start = threading.Barrier(len(buffers) + 1)

    def work(out: np.ndarray) -> None:
        start.wait()
        fn(out.ctypes.data, steps)

    team = [threading.Thread(target=work, args=(b,)) for b in buffers]
    for t in team:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in team:
        t.join()
    return time.perf_counter() - t0


def measure_peak(name: str, target: Target, threads: int = 1, repeat: int = 3, seconds: float = CALL_SECONDS) -> Peak:
    """Unit ``name``'s operations per second on ``threads`` threads at once (best of ``repeat``)."""
    unit = UNITS[name]
    kernel = unit.kernel(target)
    target.check_runs_here()
    _prepare(name)
    fn, _ = _compiled(name, target)
    buffers = [kernel.initial.copy() for _ in range(threads)]
    steps = 1 << 12
    while (elapsed := _timed(fn, buffers[:1], steps)) < seconds / 4:  # calibrate on one thread
        steps *= 4
    steps = max(1, int(steps * seconds / elapsed))
    per_call = threads * steps * kernel.chains * kernel.ops
    runs = tuple(per_call / _timed(fn, buffers, steps) / 1e9 for _ in range(repeat))
    return Peak(name, unit.precision, threads, max(runs), runs)


def measure_peaks(target: Target, threads: int = 1, repeat: int = 3) -> dict[str, Peak]:
    """Every unit ``target`` has, measured on ``threads`` threads: unit name -> `Peak`."""
    return {u.name: measure_peak(u.name, target, threads, repeat) for u in available_units(target)}


def precision_peaks(peaks: dict[str, Peak]) -> dict[str, Peak]:
    """The fastest unit per precision (bf16: AMX over ``vdpbf16ps`` where both): precision -> `Peak`."""
    best: dict[str, Peak] = {}
    for p in peaks.values():
        if p.precision not in best or p.gops > best[p.precision].gops:
            best[p.precision] = p
    return best
