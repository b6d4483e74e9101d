"""`buf.quantized_matvec` over int4 panels (`packing.Int4Scheme`: 4-bit codes in groups along K,
each group of a column with a bf16 scale and a zero point): a decode step's matrix-vector
product reading about an eighth of float32's bytes, the codes unpacked in registers.

``B[k, n] = (q[k, n] - z[g, n]) * s[g, n]`` for ``g = k // group``, so per row ``m`` of ``a``::

    xsum[m, g] = sum of a[m, k] over the group's k          once per call, on the stack
    per panel p (NR columns, one item of the parallel region):
      res[v] = 0                                            V = NR / L vectors
      for g:                                                the full groups, then the tail of K
        acc[u][v] = 0                                       `CHAINS` chains (kernels_quantized)
        for k in the group:  x = splat(a[m, k])
          bytes = panels[p, k, h*L : h*L + L]               a vector of L bytes, for h < V / 2:
          w[h] = float(bytes & 15); w[V/2 + h] = float(bytes >> 4)    columns h*L.. and NR/2 + h*L..
          acc[u][v] = fma(x, w[v], acc[u][v])
        res[v] += s[p, g, v*L..] * (sum_u acc[u][v] - z[p, g, v*L..] * xsum[m, g])
      out[m, p*NR + j] = act(alpha * res[j] + beta * bias[p*NR + j])

The codes stay in 0..15 as floats (exact), and the zero point comes out once per group through
``xsum``: one FMA per weight, as the int8 path. The error of the path is the weights' rounding
(half a scale step), which the tuner measures and holds to the user's tolerance; the kernel
itself computes the product of the dequantised weights within float32 rounding.
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import VectorType, f32, i8, i16, i32
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.bf16_dot import int_splat
from tensor_graphs.codegen.llvm.kernels import KernelContext, LoweringError, check_no_overlap
from tensor_graphs.codegen.llvm.kernels_gemm import splat, vector_type
from tensor_graphs.codegen.llvm.kernels_quantized import (
    CHAINS,
    FORMAT_EMITTERS,
    _chained_sums,
    _prefetcher,
    _shape,
    run_panels,
)
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, emit_for, min_i64
from tensor_graphs.codegen.llvm.scalar import fma
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.packing import INT4_SCHEMES, Int4Scheme
from tensor_graphs.dialects.shapes import numel


def _nibbles(b: FunctionBuilder, ptr: SSAValue, lanes: int, mask: SSAValue, four: SSAValue) -> tuple[SSAValue, SSAValue]:
    """``lanes`` bytes at ``ptr`` as two ``<lanes x float>``: their low nibbles and their high ones
    (zero-extended: small non-negative i32, so the signed conversion is exact)."""
    raw = b.add(llvm.LoadOp(ptr, VectorType(i8, [lanes]), alignment=lanes))
    wide = b.add(llvm.ZExtOp(raw, VectorType(i32, [lanes])))
    low = b.add(llvm.SIToFPOp(b.add(llvm.AndOp(wide, mask)), vector_type(lanes)))
    return low, b.add(llvm.SIToFPOp(b.add(llvm.LShrOp(wide, four)), vector_type(lanes)))


def _bf16_vector(b: FunctionBuilder, ptr: SSAValue, lanes: int) -> SSAValue:
    """``lanes`` bf16 at ``ptr`` as ``<lanes x float>`` (exact: the bits shifted up)."""
    raw = b.add(llvm.LoadOp(ptr, VectorType(i16, [lanes]), alignment=2))
    wide = b.add(llvm.ZExtOp(raw, VectorType(i32, [lanes])))
    return b.add(llvm.BitcastOp(b.add(llvm.ShlOp(wide, int_splat(b, 16, i32, lanes))), vector_type(lanes)))


def _group_sums(ctx: KernelContext, a: SSAValue, rows: int, k: int, group: int) -> SSAValue:
    """``xsum[m * G + g]``: each row's sum over each group of K, on the stack (float32)."""
    b = ctx.b
    groups = -(-k // group)
    sums = b.stack(max(rows * groups, 1), f32)
    pa = ctx.ptr(a)
    for m in range(rows):
        row = b.gep(pa, m * k, f32)

        def one_group(g: SSAValue, _c, m=m, row=row) -> list:
            first = b.mul_i64(g, b.i64(group))
            end = min_i64(b, b.add_i64(first, b.i64(group)), b.i64(k))
            total = emit_for(b, first, end, lambda kk, c: [b.add(llvm.FAddOp(c[0], b.load(b.gep(row, kk, f32), f32)))],
                             [b.f32(0.0)])[0]
            b.store(total, b.gep(sums, b.add_i64(g, b.i64(m * groups)), f32))
            return []

        emit_for(b, 0, groups, one_group)
    return sums


class _Int4Panel:
    """The code of one panel of an int4 `buf.quantized_matvec` (see the module docstring)."""

    def __init__(self, ctx: KernelContext, op: buf.QuantizedMatvecOp, scheme: Int4Scheme, b: FunctionBuilder,
                 p: SSAValue, sums: SSAValue):
        self.ctx, self.op, self.scheme, self.b, self.sums = ctx, op, scheme, b, sums
        a, codes = op.inputs[0], op.inputs[1]
        self.panels, self.k, self.half = _shape(codes)
        self.nr, self.lanes = 2 * self.half, ctx.target.float_lanes
        self.vectors = self.nr // self.lanes
        self.groups = -(-self.k // scheme.group)
        self.pa, self.pq, self.ps = ctx.ptr(a), ctx.ptr(codes), ctx.ptr(op.inputs[2])
        self.pz = ctx.ptr(op.inputs[3]) if scheme.zero_points else None
        self.mask, self.four = int_splat(b, 15, i32, self.lanes), int_splat(b, 4, i32, self.lanes)
        self.p = p
        self.base = b.mul_i64(p, b.i64(self.k * self.half))  # the panel's first byte

    def row(self, m: int) -> list[SSAValue]:
        """Row ``m``'s sums over the panel's columns, as ``vectors`` vectors."""
        b, group = self.b, self.scheme.group
        res = [splat(b, b.f32(0.0), self.lanes)] * self.vectors
        full = self.k // group
        if full:
            res = emit_for(b, 0, full, lambda g, r: self.group(m, g, b.mul_i64(g, b.i64(group)), group, r), res)
        if self.k % group:
            res = self.group(m, b.i64(full), b.i64(full * group), self.k % group, res)
        return res

    def group(self, m: int, g: SSAValue, first: SSAValue, count: int, res: list[SSAValue]) -> list[SSAValue]:
        """``res`` plus group ``g``'s contribution (its ``count`` rows of K from ``first``)."""
        b, lanes, vectors = self.b, self.lanes, self.vectors
        row = b.gep(self.pa, m * self.k, f32)
        start = b.add_i64(self.base, b.mul_i64(first, b.i64(self.half)))

        def steps(kk: SSAValue, acc: list[SSAValue], chains: int) -> list[SSAValue]:
            new = list(acc)
            for u in range(chains):
                kx = b.add_i64(kk, b.i64(u)) if u else kk
                x = splat(b, b.load(b.gep(row, b.add_i64(first, kx), f32), f32), lanes)
                at = b.add_i64(start, b.mul_i64(kx, b.i64(self.half)))
                weights: list[SSAValue] = [None] * vectors  # type: ignore[list-item]
                for h in range(vectors // 2):
                    ptr = b.gep(self.pq, b.add_i64(at, b.i64(h * lanes)), i8)
                    weights[h], weights[vectors // 2 + h] = _nibbles(b, ptr, lanes, self.mask, self.four)
                for v in range(vectors):
                    new[u * vectors + v] = fma(b, x, weights[v], new[u * vectors + v])
            return new

        line = self.ctx.target.caches.line
        prefetch = _prefetcher(b, self.pq, start, self.half, line, i8, max(1, CHAINS * self.half // line))
        totals = _chained_sums(b, count, vectors, lanes, steps, prefetch)
        xs = splat(b, b.load(b.gep(self.sums, b.add_i64(g, b.i64(m * self.groups)), f32), f32), lanes)
        at = b.mul_i64(b.add_i64(b.mul_i64(self.p, b.i64(self.groups)), g), b.i64(self.nr))  # [p, g, 0]
        out = []
        for v in range(vectors):
            col = b.add_i64(at, b.i64(v * lanes))
            scale = _bf16_vector(b, b.gep(self.ps, col, i16), lanes)
            if self.pz is not None:
                raw = b.add(llvm.LoadOp(b.gep(self.pz, col, i8), VectorType(i8, [lanes]), alignment=1))
                zero = b.add(llvm.SIToFPOp(b.add(llvm.ZExtOp(raw, VectorType(i32, [lanes]))), vector_type(lanes)))
            else:
                zero = splat(b, b.f32(8.0), lanes)
            centred = b.add(llvm.FSubOp(totals[v], b.add(llvm.FMulOp(zero, xs))))
            out.append(fma(b, scale, centred, res[v]))
        return out


def _emit_int4_matvec(ctx: KernelContext, op: buf.QuantizedMatvecOp) -> None:
    scheme = op.int4_scheme(op.format.data)
    a, codes, out = op.inputs[0], op.inputs[1], op.output
    n_panels, k, half = _shape(codes)
    nr, n, rows = 2 * half, _shape(out)[-1], numel(_shape(a)[:-1])
    lanes = ctx.target.float_lanes
    if nr % (2 * lanes):
        raise LoweringError(f"{op.name}: panels of {nr} columns are not an even number of vectors of {lanes} floats "
                            "for this target")
    if rows == 0 or n == 0:
        return
    check_no_overlap(ctx, op, out, list(op.inputs), in_place_ok=False)
    sums = ctx.b.add(llvm.PtrToIntOp(_group_sums(ctx, a, rows, k, scheme.group)))
    groups = -(-k // scheme.group)
    streamed = n_panels * (k * half + groups * nr * (3 if scheme.zero_points else 2))
    work = (2.0 * rows * n * k, float(streamed + 4 * rows * (k + n)))
    run_panels(ctx, op, n_panels, nr, [sums], work, lambda b, p, pointers: _Int4Panel(ctx, op, scheme, b, p, pointers[0]))


for _scheme in INT4_SCHEMES:
    FORMAT_EMITTERS[_scheme.name] = _emit_int4_matvec
