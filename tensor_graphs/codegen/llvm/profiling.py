"""Kernel profiling in `convert-buffer-to-llvm`: the clock readings and counters of a
profiled graph function, mixed into `convert_buffer_to_llvm._GraphLowering`, and the label of
each kernel (:func:`kernel_label`).

Profiling (``convert-buffer-to-llvm{profile=true}``): the entry also loads ``int64_t *counters``
from the weights table slot after the states (`GraphSignature.profile_slot`), reads the clock
(libc ``clock_gettime(CLOCK_MONOTONIC)`` into a timespec on its stack) before the first kernel
and after each, and adds the nanoseconds since the previous reading and one call to kernel
``k``'s counters ``counters[2k]`` and ``counters[2k + 1]``::

    %st = llvm.call @forward__0_matmul(%x, %w, %t)
    %now = <clock_gettime(1, %timespec); sec * 1000000000 + nsec>
    counters[0] += %now - %before;  counters[1] += 1

The module records one label per kernel (``tg.profile``, see :func:`kernel_label`). Without
the option nothing of this is emitted: the code is the same as before it existed.
"""

from __future__ import annotations

import time

from xdsl.dialects import llvm
from xdsl.dialects.builtin import StringAttr, i32, i64
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.loops import PTR
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.symbolic import dims_of, format_expr
from tensor_graphs.dialects.shapes import ATTENTION_OPERANDS

#: libc's clock, read by profiled graphs: ``int clock_gettime(clockid_t, struct timespec *)``
CLOCK_GETTIME = "clock_gettime"
CLOCK_GETTIME_TYPE = llvm.LLVMFunctionType([i32, PTR], i32)
#: ``CLOCK_MONOTONIC`` of this platform (1 on Linux)
CLOCK_MONOTONIC: int = getattr(time, "CLOCK_MONOTONIC", 1)


def _shape(value: SSAValue) -> list:
    """Ints, and a symbolic dim's expression (`dialects.symbolic`)."""
    return list(dims_of(value.type))


def _dims(shape: list) -> str:
    return "x".join(format_expr(d) for d in shape) if shape else "scalar"


def kernel_label(op: buf.KernelOp) -> str:
    """What a profile calls a kernel: its op, a short shape description, its variant, and the
    name of its output when it has one: ``buf.matmul 128x768 @ 768x2304 gelu (%h)``,
    ``buf.attention q 1x12x128x64 kv 1x12x128x64 causal``, ``buf.reduce 128x768 -> 128 sum``."""
    if isinstance(op, buf.MatmulOp):
        ta, tb, _, _ = op.flags
        a, b = _shape(op.inputs[0]), _shape(op.inputs[1])
        for shape, transposed in ((a, ta), (b, tb)):
            if transposed and len(shape) >= 2:
                shape[-2:] = shape[-1], shape[-2]
        what = f"{_dims(a)} @ {_dims(b)}"
    elif isinstance(op, buf.PackedMatmulOp):
        a = _shape(op.inputs[0])
        what = f"{_dims(a)} @ {a[-1]}x{_shape(op.output)[-1]}"
    elif isinstance(op, buf.AttentionOp):
        what = f"q {_dims(_shape(op.inputs[0]))} kv {_dims(_shape(op.inputs[1]))}"
        what += " causal" * bool(op.causal.value.data) + " kv_cache" * bool(op.kv_cache.value.data)
        seq_major = [name for name, flag in zip(ATTENTION_OPERANDS, op.seq_major) if flag]
        what += f" seq-major {','.join(seq_major)}" if seq_major else ""
        ranges = [f"{n}[{r[0]}:{r[0] + r[1]}]" for n, r in zip(ATTENTION_OPERANDS, op.head_ranges) if r is not None]
        what += f" heads {' '.join(ranges)}" if ranges else ""
    elif isinstance(op, buf.RopeOp) and len(op.inputs) == 4:  # fuse-rms-norm-rope
        what = f"{_dims(_shape(op.output))} after rms_norm"
    else:
        out = _shape(op.output)
        first = _shape(op.inputs[0]) if op.inputs else out
        what = _dims(out) if first == out else f"{_dims(first)} -> {_dims(out)}"
    if isinstance(op, buf.PackedMatmulOp) and op.epilogue_body is not None:
        what += " epilogue"
    for prop in ("fn", "kind", "activation"):
        variant = op.properties.get(prop)
        if isinstance(variant, StringAttr) and variant.data != "none":
            what += f" {variant.data}"
    name = op.output.name_hint
    return f"{op.name} {what}" + (f" (%{name})" if name else "")


class KernelProfiling:
    """The clock readings and counter updates of a profiled entry (a mixin of
    `convert_buffer_to_llvm._GraphLowering`, which calls them around each kernel call)."""

    def _clock(self) -> SSAValue:
        """Nanoseconds of ``CLOCK_MONOTONIC``, read into the entry's timespec."""
        b, ts = self.b, self._timespec
        assert ts is not None
        b.add(llvm.CallOp(CLOCK_GETTIME, b.i32(CLOCK_MONOTONIC), ts, return_type=i32))
        sec = b.load(ts, i64)
        nsec = b.load(b.gep(ts, 1, i64), i64)
        now = b.add_i64(b.mul_i64(sec, b.i64(1_000_000_000)), nsec)
        now.name_hint = "now"
        return now

    def _count(self, kernel: int) -> None:
        """After kernel ``kernel``'s call: add the time since the last reading and one call."""
        assert self._counters is not None and self._last_time is not None
        b = self.b
        now = self._clock()
        elapsed = b.add(llvm.SubOp(now, self._last_time))
        for slot, amount in ((2 * kernel, elapsed), (2 * kernel + 1, b.i64(1))):
            counter = b.gep(self._counters, slot, i64)
            b.store(b.add_i64(b.load(counter, i64), amount), counter)
        self._last_time = now
