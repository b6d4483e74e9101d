"""The windows of a GEMM that packs its own panels (`fuse-panels-into-gemm`), a chunk at a time.

A `buf.packed_matmul` with a ``packing`` region holds the `buf.im2col` that writes its rhs
panels. The GEMM's threads write their panels a chunk at a time into a scratch on the stack
(`PanelPacker.emit`) and run the chunk's items from it: the chunk is at most a quarter of L2
(`CHUNK_L2_SHARE`: written, then read by every row block while it is still there), so the panels
never go to memory. Only panels larger than half of L2 in all are packed so (`SPILL_L2_SHARE`):
smaller ones stay in L2 between the standalone kernel and the GEMM anyway, and a chunk's planes
recompute the output rows it shares with the next. Each chunk's panels ``[p0, p1)`` are the output positions ``[p0 NR, p1 NR)``,
which lie on output rows ``[lo, hi)``; per row ``k = (c, i, j)`` of the windows matrix the
module's tap function (`kernels_movement._tap_function`) writes tap ``(i, j)`` of channel c over
those rows only into a plane on the stack, and the positions of the chunk go from there into
its panels (float32 rows, or bf16 pair rows two planes at a time: `write_pair_row`). A 1x1
window at stride 1 without padding reads the input row itself.

Over a batch of images (a batch of GEMMs) AMX packs each image's panels in turn: a thread's
items, GEMM by GEMM, each GEMM's share a chunk at a time (`kernels_amx.AmxGemm._packed_gemms`); the
register tiles write a batch's panels first.

Where a GEMM's blocking takes no chunks (A-stationary row blocks, AMX row groups), the panels
fit in L2, a chunk would span fewer than `MIN_CHUNK_ROWS` output rows, or one panel is larger
than the chunk, the standalone kernel writes every panel into the rhs buffer first
(`kernels_movement._emit_im2col`).
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import BFloat16Type, f32, i32
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.kernels import KernelContext, _shape
from tensor_graphs.codegen.llvm.kernels_movement import _tap_function, _tap_range, write_pair_row, write_panel_row
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, emit_for, emit_if, icmp, max_i64, min_i64
from tensor_graphs.dialects import buffer as buf

#: A chunk's panels take at most 1 / CHUNK_L2_SHARE of the target's L2 (a thread's stack holds them)
CHUNK_L2_SHARE = 4
#: ... and at most this many bytes: the stack of a thread of the team (libgomp's take the
#: process's default, 8 MiB on Linux) holds it and the planes
MAX_CHUNK_BYTES = 1 << 19
#: A chunk of windows spans at least this many output rows: its planes recompute the rows it
#: shares with the next chunk, one or two (ResNet-50's 3x3 convolutions over 28 x 28, at 7 rows a
#: chunk: 0.98-1.16 times the standalone packing and GEMM's time; at 8 rows over 56 x 56: 0.77-0.88;
#: Emerald Rapids, `benchmarks/panel_packing.py` and `kernel_profile.py`)
MIN_CHUNK_ROWS = 8
#: Panels of at most 1 / SPILL_L2_SHARE of L2 in all are written first, by the standalone kernel:
#: they stay in L2 for the GEMM, and a chunk's planes would recompute the rows chunks share
SPILL_L2_SHARE = 2


class PanelPacker:
    """The panels of one image's `buf.im2col {panels}` (a GEMM's ``packing``), written a range
    of them at a time by one thread (`emit`)."""

    def __init__(self, ctx: KernelContext, op: buf.Im2colOp, chunk: int):
        self.ctx, self.op, self.chunk = ctx, op, chunk
        x = op.inputs[0]
        self.el = x.type.element_type  # type: ignore[attr-defined]
        self.bits = isinstance(self.el, BFloat16Type)
        _, self.c, self.h, self.w = _shape(x)
        self.window = op.window
        (kh, kw), (sh, sw), (ph, pw), _ = op.window
        self.t_count = kh * kw
        self.oh, self.ow = op.positions(_shape(x))
        self.taps = self.oh * self.ow
        self.nr, self.pairs = op.panel_columns, op.pairs
        k_total = self.c * self.t_count
        self.panel_words = (-(-k_total // 2) if self.pairs else k_total) * self.nr
        self.panels = -(-self.taps // self.nr)
        self.last = self.taps % self.nr
        self.plain = (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0)

    @property
    def plane_rows(self) -> int:
        """Output rows a chunk's positions lie on, at most."""
        return min(self.oh, -(-self.chunk * self.nr // self.ow) + 1)

    @staticmethod
    def for_gemm(ctx: KernelContext, op: buf.PackedMatmulOp) -> PanelPacker | None:
        """The packer of ``op``'s ``packing``, chunks of as many panels as fit the share of L2;
        None without one, when an image's panels fit in half of L2 (`SPILL_L2_SHARE`), when a
        chunk would span fewer than `MIN_CHUNK_ROWS` output rows, or when one panel does not fit."""
        im2col = op.panel_packing
        if im2col is None:
            return None
        packer = PanelPacker(ctx, im2col, 1)
        l2, panel_bytes = ctx.target.caches.l2, 4 * packer.panel_words
        if packer.panels * panel_bytes <= l2 // SPILL_L2_SHARE:
            return None  # all of them stay in L2 between the standalone kernel and the GEMM
        packer.chunk = min(min(l2 // CHUNK_L2_SHARE, MAX_CHUNK_BYTES) // panel_bytes, packer.panels)
        short = not packer.plain and packer.chunk < packer.panels and packer.chunk * packer.nr < MIN_CHUNK_ROWS * packer.ow
        return None if packer.chunk < 1 or short else packer

    def scratch(self, b: FunctionBuilder) -> SSAValue:
        """A chunk's panels on this thread's stack (64-byte aligned)."""
        return b.stack(self.chunk * self.panel_words, i32)

    def chunks(self, b: FunctionBuilder, start: SSAValue, end: SSAValue, run, image: SSAValue | None = None) -> None:
        """``run(p0, p1, panels)`` for each chunk ``[p0, p1)`` of the panels ``[start, end)`` (of
        image ``image`` of a batch), after writing them into this thread's scratch (``panels``:
        where panel p0 starts)."""
        scratch = self.scratch(b)
        xp = self.ctx.ptr(self.op.inputs[0])
        if image is not None:
            xp = b.gep(xp, b.mul_i64(image, b.i64(self.c * self.h * self.w)), self.el)
        count = b.add(llvm.UDivOp(b.add_i64(b.add(llvm.SubOp(end, start)), b.i64(self.chunk - 1)), b.i64(self.chunk)))

        def one(ci: SSAValue, _c: list) -> list:
            p0 = b.add_i64(start, b.mul_i64(ci, b.i64(self.chunk)))
            p1 = min_i64(b, b.add_i64(p0, b.i64(self.chunk)), end)
            self.emit(b, xp, scratch, p0, p1)
            run(p0, p1, scratch)
            return []

        emit_for(b, 0, count, one)

    # one range of panels -------------------------------------------------------------

    def emit(self, b: FunctionBuilder, xp: SSAValue, dst: SSAValue, p0: SSAValue, p1: SSAValue) -> None:
        """Panels ``[p0, p1)`` (at most `chunk`) of the image at ``xp`` into ``dst`` (where panel
        p0 starts): each row of the windows matrix over the range's output rows, then into
        the panels (pairs of rows, for bf16 pairs)."""
        nr, ow = self.nr, self.ow
        t0 = b.mul_i64(p0, b.i64(nr))
        t_end = min_i64(b, b.mul_i64(p1, b.i64(nr)), b.i64(self.taps))
        lo = b.add(llvm.UDivOp(t0, b.i64(ow)))
        hi = b.add(llvm.UDivOp(b.add_i64(t_end, b.i64(ow - 1)), b.i64(ow)))
        rows = b.add(llvm.SubOp(hi, lo))
        skip = b.add(llvm.SubOp(t0, b.mul_i64(lo, b.i64(ow))))  # position t0 in a plane
        full = b.add(llvm.UDivOp(b.add(llvm.SubOp(t_end, t0)), b.i64(nr)))  # whole panels of the range
        has_last = icmp(b, "eq", p1, b.i64(self.panels)) if self.last else False
        planes = None if self.plain else [b.stack(self.plane_rows * ow, self.el) for _ in range(2)]

        def plane(channel: SSAValue, t: int, which: int) -> SSAValue:
            """Row (channel, t) of the windows matrix at position t0."""
            src_row = b.gep(xp, b.mul_i64(channel, b.i64(self.h * self.w)), self.el)
            if planes is None:
                return b.gep(src_row, t0, self.el)
            i, j = divmod(t, self.window[0][1])
            self._tap(b, src_row, i, j, planes[which], lo, rows)
            return b.gep(planes[which], skip, self.el)

        if self.pairs:
            self._pair_rows(b, dst, plane, full, has_last)
        else:
            self._float_rows(b, dst, plane, full, has_last)

    def _tap(self, b: FunctionBuilder, src_row: SSAValue, i: int, j: int, dst: SSAValue, lo: SSAValue, rows: SSAValue) -> None:
        """Tap ``(i, j)`` of one input channel over output rows ``[lo, lo + rows)`` into ``dst``
        (``rows x OW``): the tap function with its valid rows clipped to the range."""
        (_, _), (sh, sw), (ph, pw), (dh, dw) = self.window
        h, w = self.h, self.w
        y0, y1 = _tap_range(h, self.oh, i, sh, ph, dh)
        x0, x1 = _tap_range(w, self.ow, j, sw, pw, dw)
        zero = b.i64(0)
        if y1 > y0 and x1 > x0:
            first = min_i64(b, max_i64(b, lo, b.i64(y0)), b.i64(y1 - 1))  # the output row src is read for
            src = b.gep(src_row, b.add_i64(b.mul_i64(first, b.i64(sh * w)), b.i64((i * dh - ph) * w + x0 * sw + j * dw - pw)),
                        self.el)

            def clipped(y: int) -> SSAValue:
                return min_i64(b, max_i64(b, b.add(llvm.SubOp(b.i64(y), lo)), zero), rows)

            bounds = [rows, b.i64(self.ow), clipped(y0), clipped(y1), b.i64(x0), b.i64(x1)]
        else:  # the tap reads padding only
            src, bounds = src_row, [rows, b.i64(self.ow), zero, zero, zero, zero]
        pad = self.op.pad_value.value.data
        b.add(llvm.CallOp(_tap_function(self.ctx, self.el, pad, unit_columns=sw == 1), src, dst, *bounds, b.i64(sh * w), b.i64(sw)))

    def _float_rows(self, b: FunctionBuilder, dst: SSAValue, plane, full: SSAValue, has_last) -> None:
        """Each row ``k = (c, t)`` into the range's float32 panels (`write_panel_row`: NR positions
        a panel, zeros past the last position)."""
        nr = self.nr

        def channel(c: SSAValue, _c: list) -> list:
            for t in range(self.t_count):
                row = b.gep(dst, b.mul_i64(b.add_i64(b.mul_i64(c, b.i64(self.t_count)), b.i64(t)), b.i64(nr)), f32)
                write_panel_row(b, row, plane(c, t, 0), f32, (self.panel_words, nr), full, self.last, has_last)
            return []

        emit_for(b, 0, self.c, channel)

    def _pair_rows(self, b: FunctionBuilder, dst: SSAValue, plane, full: SSAValue, has_last) -> None:
        """The range's bf16 pair rows, a pair of channels at a time (their ``2 T`` rows are ``T``
        pair rows; an odd C's last channel alone, its last pair row's high halves zeros), as the
        standalone kernel pairs them (`kernels_movement._im2col_pairs`)."""
        t_count, nr = self.t_count, self.nr
        pairs = -(-self.c // 2)

        def rows(q: SSAValue, count: int, alone: bool) -> None:
            first = b.mul_i64(q, b.i64(2))
            words = b.gep(dst, b.mul_i64(q, b.i64(t_count * nr)), i32)
            for j in range(count):
                (ca, ta), (cb, tb) = divmod(2 * j, t_count), divmod(2 * j + 1, t_count)
                planes = [plane(b.add_i64(first, b.i64(ca)), ta, 0)]
                if not (alone and cb):
                    planes.append(plane(b.add_i64(first, b.i64(cb)), tb, 1))
                write_pair_row(b, b.gep(words, j * nr, i32), planes, self.bits, (self.panel_words, nr), full, self.last, has_last)

        def channel_pair(q: SSAValue, _c: list) -> list:
            if self.c % 2 == 0:
                rows(q, t_count, False)
            else:
                emit_if(b, icmp(b, "ult", q, b.i64(pairs - 1)), lambda: rows(q, t_count, False),
                        lambda: rows(q, -(-t_count // 2), True))
            return []

        emit_for(b, 0, pairs, channel_pair)
