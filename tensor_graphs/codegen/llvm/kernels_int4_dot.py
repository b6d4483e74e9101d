"""`buf.quantized_matvec` of format ``int4dot``: Q4_0's int4 weights (`packing.INT4_DOT_SCHEME`)
times the rows of ``a`` quantised to int8 per group of 32 (Q8_0's), by integer dot products, as
llama.cpp multiplies its Q4_0 weights: a 64-byte load is 128 weights, unpacked by two masks and
a shift, multiplied by two ``vpdpbusd`` (four unsigned bytes of a column times four signed
bytes of ``a`` added to each 32-bit lane), where the float path (`kernels_int4`) converts and
multiplies every weight on its own.

Per row ``m`` of ``a``, once per call, on the stack: per group ``g`` of 32 along K the scale
``sx[m, g] = max |a[m, g]| / 127`` (NaN when the group holds a NaN, so that it reaches the
output), the codes ``xq[m, k] = round(a[m, k] / sx)`` (int8, K padded
with zeros to a multiple of 8) and their sum ``xsum[m, g]``. Then per panel ``p`` (NR columns, an
item of the parallel region)::

    res[v] = 0                                               V = NR / L vectors of L lanes
    for g:                                                   the full groups, then K's tail
      lo[v] = hi[v] = 0                                      int32
      for octet o of the group (K rows 8o .. 8o + 7):
        w = panels[p, o, 4 v L : 4 v L + 4 L]                L lanes of 4 bytes: a column each
        lo[v] = dot(lo[v], w & 0x0F0F0F0F, splat(xq[m, 8o .. 8o + 3]))
        hi[v] = dot(hi[v], (w >> 4) & 0x0F0F0F0F, splat(xq[m, 8o + 4 .. 8o + 7]))
      res[v] += s[p, g, v L ..] * sx[m, g] * (float(lo[v] + hi[v]) - 8 xsum[m, g])
    out[m, p NR + j] = act(alpha * res[j] + beta * acc[...])  (kernels_quantized._store_columns)

``dot`` is ``vpdpbusd`` where the target has it (AVX512-VNNI on 16 lanes, AVX-VNNI on 8), else
``pmaddubsw`` then ``pmaddwd`` by ones: the same sum exactly (codes <= 15 times |xq| <= 127,
two products a pair: no saturation), so the emulation is tested on every CPU with SSSE3. The
integer sums are exact; the error of the path is the weights' rounding (Q4_0's) and the
activations' (half an int8 step of their group), which the tuner measures.
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import VectorType, f32, i8, i16, i32
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.bf16_dot import int_splat
from tensor_graphs.codegen.llvm.byte_dot import byte_dot, native_byte_dot
from tensor_graphs.codegen.llvm.kernels import KernelContext, LoweringError, check_no_overlap
from tensor_graphs.codegen.llvm.kernels_gemm import _prefetch, splat, vector_type
from tensor_graphs.codegen.llvm.kernels_int4 import _bf16_vector
from tensor_graphs.codegen.llvm.kernels_quantized import FORMAT_EMITTERS, PREFETCH_LINES, _shape, run_panels
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, emit_for, icmp, min_i64
from tensor_graphs.codegen.llvm.scalar import fma
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.packing import INT4_DOT_SCHEME
from tensor_graphs.dialects.shapes import numel

#: K rows per row of the packed codes (a column's 4 bytes hold 8 codes)
OCTET = 8
GROUP = INT4_DOT_SCHEME.group

def _quantize_rows(ctx: KernelContext, a: SSAValue, rows: int, k: int) -> tuple[SSAValue, SSAValue, SSAValue]:
    """The rows of ``a`` as int8 per group of 32 (this module's docstring), on the stack:
    (``xq`` bytes ``[rows, ceil(K / 8) * 8]``, ``sx`` and ``xsum`` floats ``[rows, G]``)."""
    b = ctx.b
    width, groups = -(-k // OCTET) * OCTET, -(-k // GROUP)
    xq = b.stack(max(rows * width, 1), i8)
    sx, xsum = b.stack(max(rows * groups, 1), f32), b.stack(max(rows * groups, 1), f32)
    pa = ctx.ptr(a)
    for m in range(rows):
        row = b.gep(pa, m * k, f32)
        for kk in range(k, width):  # the padding of K: zero codes
            b.store(b.constant(0, i8), b.gep(xq, m * width + kk, i8))

        def group(g: SSAValue, _c, m=m, row=row) -> list:
            first = b.mul_i64(g, b.i64(GROUP))
            end = min_i64(b, b.add_i64(first, b.i64(GROUP)), b.i64(k))
            absmax = emit_for(b, first, end, lambda kk, c: [b.add(llvm.CallIntrinsicOp(
                "llvm.maximum.f32", [c[0], b.add(llvm.CallIntrinsicOp("llvm.fabs.f32", [b.load(b.gep(row, kk, f32), f32)],
                                                                    [f32]))], [f32]))], [b.f32(0.0)])[0]
            positive = b.add(llvm.FCmpOp(absmax, b.f32(0.0), "ogt"))
            inverse = b.add(llvm.SelectOp(positive, b.add(llvm.FDivOp(b.f32(127.0), absmax)), b.f32(0.0)))
            at = b.add_i64(g, b.i64(m * groups))
            b.store(b.add(llvm.FMulOp(absmax, b.f32(1.0 / 127.0))), b.gep(sx, at, f32))

            def code(kk: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
                scaled = b.add(llvm.FMulOp(b.load(b.gep(row, kk, f32), f32), inverse))
                rounded = b.add(llvm.CallIntrinsicOp("llvm.roundeven.f32", [scaled], [f32]))
                q = b.add(llvm.CallIntrinsicOp("llvm.fptosi.sat.i32.f32", [rounded], [i32]))
                q = b.add(llvm.SelectOp(icmp(b, "sgt", q, b.i32(127)), b.i32(127), q))
                q = b.add(llvm.SelectOp(icmp(b, "slt", q, b.i32(-127)), b.i32(-127), q))
                b.store(b.add(llvm.TruncOp(q, i8)), b.gep(xq, b.add_i64(kk, b.i64(m * width)), i8))
                return [b.add(llvm.AddOp(c[0], q))]

            total = emit_for(b, first, end, code, [b.i32(0)])[0]
            b.store(b.add(llvm.SIToFPOp(total, f32)), b.gep(xsum, at, f32))
            return []

        emit_for(b, 0, groups, group)
    return xq, sx, xsum


class _DotPanel:
    """The code of one panel of an ``int4dot`` `buf.quantized_matvec` (the module docstring)."""

    def __init__(self, ctx: KernelContext, op: buf.QuantizedMatvecOp, b: FunctionBuilder, p: SSAValue,
                 rows_q: tuple[SSAValue, SSAValue, SSAValue]):
        self.ctx, self.b, self.p = ctx, b, p
        self.xq, self.sx, self.xsum = rows_q
        a, codes = op.inputs[0], op.inputs[1]
        self.k = _shape(a)[-1]
        _, self.octets, row_bytes = _shape(codes)
        self.nr, self.lanes = row_bytes // 4, ctx.target.float_lanes
        self.vectors, self.groups = self.nr // self.lanes, -(-self.k // GROUP)
        self.native = native_byte_dot(ctx.target)
        self.pq, self.ps = ctx.ptr(codes), ctx.ptr(op.inputs[2])
        self.nibbles = int_splat(b, 0x0F0F0F0F, i32, self.lanes)
        self.four = int_splat(b, 4, i32, self.lanes)
        self.base = b.mul_i64(p, b.i64(self.octets * row_bytes))  # the panel's first byte

    def row(self, m: int) -> list[SSAValue]:
        """Row ``m``'s sums over the panel's columns, as ``vectors`` float vectors."""
        b = self.b
        res = [splat(b, b.f32(0.0), self.lanes)] * self.vectors
        full = self.k // GROUP
        if full:
            res = emit_for(b, 0, full, lambda g, r: self.group(m, g, GROUP // OCTET, r), res)
        if self.k % GROUP:
            res = self.group(m, b.i64(full), -(-(self.k % GROUP) // OCTET), res)
        return res

    def group(self, m: int, g: SSAValue, octets: int, res: list[SSAValue]) -> list[SSAValue]:
        """``res`` plus group ``g``'s contribution (its ``octets`` rows of codes)."""
        b, lanes, vectors = self.b, self.lanes, self.vectors
        words = VectorType(i32, [lanes])
        zero = int_splat(b, 0, i32, lanes)
        lo, hi = [zero] * vectors, [zero] * vectors
        width = self.octets * OCTET
        first = b.mul_i64(g, b.i64(GROUP // OCTET))  # the group's first octet
        for o in range(octets):
            octet = b.add_i64(first, b.i64(o))
            at = b.add_i64(self.base, b.mul_i64(octet, b.i64(4 * self.nr)))
            line = self.ctx.target.caches.line
            for j in range(max(1, 4 * self.nr // line)):
                _prefetch(b, b.gep(self.pq, b.add_i64(at, b.i64(PREFETCH_LINES * line + j * line)), i8))
            xword = b.add_i64(b.i64(m * width), b.mul_i64(octet, b.i64(OCTET)))  # byte of a's first code
            x_lo = int_splat(b, b.load(b.gep(self.xq, xword, i8), i32), i32, lanes)
            x_hi = int_splat(b, b.load(b.gep(self.xq, b.add_i64(xword, b.i64(4)), i8), i32), i32, lanes)
            for v in range(vectors):
                w = b.add(llvm.LoadOp(b.gep(self.pq, b.add_i64(at, b.i64(4 * v * lanes)), i8), words, alignment=4))
                low = b.add(llvm.AndOp(w, self.nibbles))
                high = b.add(llvm.AndOp(b.add(llvm.LShrOp(w, self.four)), self.nibbles))
                lo[v] = byte_dot(b, lo[v], low, x_lo, lanes, self.native)
                hi[v] = byte_dot(b, hi[v], high, x_hi, lanes, self.native)
        at = b.add_i64(g, b.i64(m * self.groups))
        sx = b.load(b.gep(self.sx, at, f32), f32)
        offset = splat(b, b.add(llvm.FMulOp(b.load(b.gep(self.xsum, at, f32), f32), b.f32(8.0))), lanes)
        scales = b.mul_i64(b.add_i64(b.mul_i64(self.p, b.i64(self.groups)), g), b.i64(self.nr))  # [p, g, 0]
        out = []
        for v in range(vectors):
            total = b.add(llvm.SIToFPOp(b.add(llvm.AddOp(lo[v], hi[v])), vector_type(lanes)))
            scale = b.add(llvm.FMulOp(_bf16_vector(b, b.gep(self.ps, b.add_i64(scales, b.i64(v * lanes)), i16), lanes),
                                      splat(b, sx, lanes)))
            out.append(fma(b, scale, b.add(llvm.FSubOp(total, offset)), res[v]))
        return out


def _emit_int4_dot_matvec(ctx: KernelContext, op: buf.QuantizedMatvecOp) -> None:
    a, codes, out = op.inputs[0], op.inputs[1], op.output
    n_panels, octets, row_bytes = _shape(codes)
    nr, n, rows, k = row_bytes // 4, _shape(out)[-1], numel(_shape(a)[:-1]), _shape(a)[-1]
    lanes = ctx.target.float_lanes
    if nr % lanes:
        raise LoweringError(f"{op.name}: panels of {nr} columns are not whole vectors of {lanes} lanes")
    if ctx.target.level == "x86-64":
        raise LoweringError(f"{op.name}: the target ({ctx.target.name}) has no byte dot products (SSSE3's pmaddubsw)")
    if rows == 0 or n == 0:
        return
    check_no_overlap(ctx, op, out, list(op.inputs), in_place_ok=False)
    rows_q = [ctx.b.add(llvm.PtrToIntOp(v)) for v in _quantize_rows(ctx, a, rows, k)]
    groups = -(-k // GROUP)
    work = (2.0 * rows * n * k, float(n_panels * (octets * row_bytes + groups * nr * 2) + 4 * rows * (k + n)))
    run_panels(ctx, op, n_panels, nr, rows_q, work, lambda b, p, pointers: _DotPanel(ctx, op, b, p, tuple(pointers)))


FORMAT_EMITTERS["int4dot"] = _emit_int4_dot_matvec
