"""A pooling (`buf.Im2colOp` with ``reduce``: max, sum or mean over each window), each output
element computed from its window's taps as it is written.

For each channel plane of the input (rows ``[start, end)`` of ``N x C``)::

    plane[ph : ph + H, pw : pw + W] = x[n, c]            (its borders hold the pad value, written
                                                          once per thread; no copy without padding)
    sum, mean:  out[n, c, oy, ox] = sum(plane[oy sh + i dh, ox sw + j dw] for taps (i, j))
                                    (times 1 / (KH KW) for a mean)
    max:        rows[y, ox] = max(plane[y, ox sw + j dw] for j)          (every row y of the plane)
                out[n, c, oy, ox] = max(rows[oy sh + i dh, ox] for i)     (whole vectors)

A sum adds the taps in the order the tap-by-tap path (`kernels_movement._emit_im2col`) adds
their planes: the same bits. A max keeps the first of equal taps (-0.0 and +0.0) in the window's
row-major order, as torch.max_pool2d does (that path's ``llvm.maximum`` takes +0.0), and is NaN
where a tap is. The strided reads along a row are LLVM's interleaved loads. Before, each of the
KH x KW taps wrote its plane on the stack and a second pass combined it into the output.
`benchmarks/pooling.py`, 1 thread, a Xeon with AMX, kernel us before -> after: ResNet-50's stem
max pool (3 x 3, stride 2, padding 1 over 64 x 112 x 112) 423-431 -> 325-328; a 2 x 2 max pool
over 128 x 56 x 56 98-101 -> 60-66; a 3 x 3 average pool at stride 1 over 64 x 56 x 56 160-164
-> 72.

The padded plane is on the thread's stack; a plane larger than `MAX_PLANE_BYTES` (an image of
over ~360 x 360 float32) takes the tap-by-tap path.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import BFloat16Type, f32
from xdsl.ir import Attribute, Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import Access, KernelContext, emit_copy_nest, emit_pointwise
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, emit_for
from tensor_graphs.codegen.llvm.scalar import const, emit_convert, fcmp, high_half_bf16, select

#: The most bytes of a pooling's scratch (its padded plane, a max's rows) on a thread's stack
#: (libgomp's threads take the process's default stack, 8 MiB on Linux;
#: `panel_packing.MAX_CHUNK_BYTES` is the other user of it)
MAX_PLANE_BYTES = 1 << 19


def window_max(b: FunctionBuilder, taps: list[SSAValue]) -> SSAValue:
    """The largest of a window's taps as torch.max_pool2d takes it (a tap replaces the maximum so
    far where it is greater: the first of equal ones, -0.0 or +0.0, stays), NaN where any tap is
    NaN. The compare and select are one ``vmaxps`` each and the NaN test runs beside them, where
    ``llvm.maximum`` (`kernels._fmax`) took six instructions a tap in one dependent chain."""
    acc, nan = taps[0], fcmp(b, "uno", taps[0], taps[0])
    for v in taps[1:]:
        acc = select(b, fcmp(b, "ogt", v, acc), v, acc)
        nan = b.add(llvm.OrOp(nan, fcmp(b, "uno", v, v)))
    return select(b, nan, const(b, math.nan, acc), acc)


def window_sum(b: FunctionBuilder, taps: list[SSAValue]) -> SSAValue:
    """The taps added in order."""
    acc = taps[0]
    for v in taps[1:]:
        acc = b.add(llvm.FAddOp(acc, v))
    return acc


def on_floats(el: Attribute, window: Callable[[FunctionBuilder, list[SSAValue]], SSAValue],
              reduce: str) -> Callable[[FunctionBuilder, list[SSAValue]], SSAValue]:
    """``window`` over taps of ``el``: bf16 taps widened to float32 and the value narrowed back, a
    max's by its high half (it is one of the taps, or the quiet NaN), a sum's rounded to nearest
    (`narrow-gemm-output` gives a max pooling bf16 buffers)."""
    if not isinstance(el, BFloat16Type):
        return window

    def narrowed(b: FunctionBuilder, taps: list[SSAValue]) -> SSAValue:
        value = window(b, [emit_convert(b, t, f32) for t in taps])
        return high_half_bf16(b, value) if reduce == "max" else emit_convert(b, value, el)

    return narrowed


#: reduce -> a window's value from its taps (a mean: the sum, then scaled)
WINDOW: dict[str, Callable[[FunctionBuilder, list[SSAValue]], SSAValue]] = {
    "max": window_max,
    "sum": window_sum,
    "mean": window_sum,
}


def padded_plane(h: int, w: int, oh: int, ow: int, window) -> tuple[int, int]:
    """Rows and columns of an input plane padded so that every tap of every window reads inside
    it (``ph``/``pw`` before, at least as many after; a ceil-mode window's overhang too)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = window
    return max(h + 2 * ph, (oh - 1) * sh + (kh - 1) * dh + 1), max(w + 2 * pw, (ow - 1) * sw + (kw - 1) * dw + 1)


def fits(op: Operation, h: int, w: int, oh: int, ow: int, el: Attribute) -> bool:
    """Whether the stack scratch of ``op``'s windows fits `MAX_PLANE_BYTES`: the padded plane
    (none without padding) and a max's rows (`WindowReduce.rows_then_columns`)."""
    hp, wp = padded_plane(h, w, oh, ow, op.window)
    elements = (hp * wp if (hp, wp) != (h, w) else 0) + (hp * ow if op.reduce.data == "max" else 0)
    return elements * max(el.bitwidth // 8, 1) <= MAX_PLANE_BYTES  # type: ignore[attr-defined]


class WindowReduce:
    """The pooling of one `buf.Im2colOp` with ``reduce``: x ``[N, C, H, W]`` to out
    ``[N, C, OH, OW]``, emitted per thread over rows of ``N x C`` (`rows`)."""

    def __init__(self, ctx: KernelContext, op: Operation, shape: tuple[int, int, int, int], el: Attribute):
        self.ctx, self.op, self.el = ctx, op, el
        self.h, self.w, self.oh, self.ow = shape
        self.hp, self.wp = padded_plane(*shape, op.window)
        self.padded = (self.hp, self.wp) != (self.h, self.w)
        self.reduce = op.reduce.data
        self.rows_scratch: SSAValue | None = None

    def rows(self, b: FunctionBuilder, start: SSAValue | int, end: SSAValue | int) -> None:
        """Planes ``[start, end)``: the padded plane's borders filled once, then each plane."""
        (x,), out = self.op.inputs, self.op.output
        xp, outp = self.ctx.ptr(x), self.ctx.ptr(out)
        plane = b.stack(self.hp * self.wp, self.el) if self.padded else None
        if plane is not None:
            pad = b.constant(self.op.pad_value.value.data, self.el)
            emit_for(b, 0, self.hp * self.wp, lambda i, _: b.store_element(pad, plane, i, self.el) or [])

        def row(r: SSAValue, _c: list) -> list:
            src = b.gep(xp, b.mul_i64(r, b.i64(self.h * self.w)), self.el)
            dst = Access(b.gep(outp, b.mul_i64(r, b.i64(self.oh * self.ow)), self.el), (self.ow, 1), self.el)
            self.plane(b, src if plane is None else self.copied(b, src, plane), dst)
            return []

        emit_for(b, start, end, row)

    def copied(self, b: FunctionBuilder, src: SSAValue, plane: SSAValue) -> SSAValue:
        """The input plane at ``src`` copied inside the padded ``plane`` (a memcpy a row)."""
        (_, _), (_, _), (ph, pw), _ = self.op.window
        inside = Access(b.gep(plane, ph * self.wp + pw, self.el), (self.wp, 1), self.el)
        emit_copy_nest(b, (self.h, self.w), inside, Access(src, (self.w, 1), self.el))
        return plane

    def plane(self, b: FunctionBuilder, src: SSAValue, dst: Access) -> None:
        """One output plane from the (padded) input plane at ``src``: each element's window."""
        (kh, kw), (sh, sw), _, (dh, dw) = self.op.window
        wp = self.wp  # (the input's width where nothing pads it)
        if self.reduce == "max" and kh > 1 and kw > 1:
            self.rows_then_columns(b, src, dst, wp)
            return
        taps = [Access(b.gep(src, i * dh * wp + j * dw, self.el), (sh * wp, sw), self.el) for i in range(kh) for j in range(kw)]
        reduce = WINDOW[self.reduce]
        scale = b.constant(1.0 / (kh * kw), f32 if isinstance(self.el, BFloat16Type) else self.el) if self.reduce == "mean" else None

        def window(b: FunctionBuilder, values: list[SSAValue]) -> SSAValue:
            value = reduce(b, values)
            return value if scale is None else b.add(llvm.FMulOp(value, scale))

        emit_pointwise(b, (self.oh, self.ow), dst, taps, on_floats(self.el, window, self.reduce))

    def rows_then_columns(self, b: FunctionBuilder, src: SSAValue, dst: Access, wp: int) -> None:
        """A max as two passes: each input row's maximum over every output column's KW taps
        (strided) into a scratch of Hp x OW, then each output's KH taps down that scratch
        (contiguous: whole vectors). Row by row, then down, a tap replaces the maximum only where
        greater, as in one pass over the window in row-major order: the same first of equal taps."""
        (kh, kw), (sh, sw), _, (dh, dw) = self.op.window
        if self.rows_scratch is None:
            self.rows_scratch = b.stack(self.hp * self.ow, self.el)
        v = self.rows_scratch
        across = [Access(b.gep(src, j * dw, self.el), (wp, sw), self.el) for j in range(kw)]
        emit_pointwise(b, (self.hp, self.ow), Access(v, (self.ow, 1), self.el), across, on_floats(self.el, window_max, "max"))
        down = [Access(b.gep(v, i * dh * self.ow, self.el), (sh * self.ow, 1), self.el) for i in range(kh)]
        emit_pointwise(b, (self.oh, self.ow), dst, down, on_floats(self.el, window_max, "max"))
