"""`buf.packed_matmul`: a register-tiled GEMM over a weight packed into column panels.

    out[M, N] = act(alpha * A[M, K] @ B[K, N] + beta * acc)      B as `buf.packed_weight`: [P, K, NR]

(`dialects.packing`: panel ``p`` is columns ``[p NR, p NR + NR)`` of ``B``, a row-major ``K x NR``
block). The panels are split among the threads (`KernelContext.parallel`); each thread runs::

    for p in its panels:                                     NR = 16 V columns, V vectors
        for r0 in 0, MR, 2 MR, ... (then one block of the M % MR rows left):
            c[i][v] = 0                                      MR x V vectors of 16 floats (registers)
            for k in 0 .. K:
                b[v] = panel[p][k][16 v : 16 v + 16]          V aligned loads
                c[i][v] = fma(splat(A[r0 + i][k]), b[v], c[i][v])
            c *= alpha
            (the first row blocks also prefetch panel p + 1, a share of its lines per k step)
            store c into out[r0 : r0 + MR, p NR : p NR + NR]  (the last panel's padding columns
                                                              go to a stack tile, never to out)
            out tile = act(out tile + beta * acc tile)        one loop over the tile, still in L1

MR is chosen so that the accumulators fill the 32 vector registers: 6 rows for V = 4 (24
accumulators, 4 panel vectors, the broadcast folded into the FMA), 8 for V = 3, 12 for V = 2,
16 for V = 1. Every size is static: the row loop, the tail block and the last panel are
emitted for the shapes at hand. With M = 1 the same code is a matrix-vector product that
streams each panel once (the memory-bound decode step). ``A`` (batch dims folded into M) and
``out`` must be contiguous; ``acc`` (a bias ``[N]``, a residual ``[M, N]``, ...) must read as
one row stride and a column stride of 0 or 1 over the folded rows, and must not share bytes
with ``out`` (plan-memory never places a kernel's output over its inputs).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import DenseArrayBase, VectorType, f32, i32
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    Access,
    KernelContext,
    LoweringError,
    _scalar_errors,
    check_no_overlap,
    emit_pointwise,
)
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, broadcast_strides, collapse_dims, emit_for, icmp, min_i64
from tensor_graphs.codegen.llvm.loops import value as _val
from tensor_graphs.codegen.llvm.scalar import emit_unary
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import contiguous_strides, numel

#: floats per vector register (AVX-512)
LANES = 16
VEC = VectorType(f32, [LANES])
#: From this many rows on, each panel's first row blocks prefetch the next panel (so that the
#: weights stream from memory while the FMAs run; measured on a chain of weights larger than the
#: L3: +25% at M = 32, +5% at M = 128). Below it the kernel is a matrix-vector product bound by
#: the memory stream, which the hardware prefetcher serves better alone (-20% at M = 1 with it).
PREFETCH_MIN_ROWS = 4
#: At most this many k steps per loop iteration (one prefetch each; +8% at M = 128)
MAX_SPREAD = 8
#: rows per register tile, by vectors per panel row (NR / 16)
ROWS_PER_TILE: dict[int, int] = {1: 16, 2: 12, 3: 8, 4: 6}


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


def rows_per_tile(vectors: int) -> int:
    """Rows of the register tile for panels of ``vectors`` vectors (``MR``)."""
    return ROWS_PER_TILE.get(vectors, max(1, 24 // vectors))


def splat(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """``<16 x float>`` of ``x`` (insertelement + zero shuffle: a broadcast LLVM folds into the FMA)."""
    undef = b.add(llvm.UndefOp(VEC))
    one = b.add(llvm.InsertElementOp(undef, x, b.i64(0)))
    return b.add(llvm.ShuffleVectorOp(one, undef, DenseArrayBase.from_list(i32, [0] * LANES), VEC))


def _vector_at(b: FunctionBuilder, ptr: SSAValue, index: int) -> SSAValue:
    """``&ptr[index]`` (floats) typed as a vector pointer, so that a vector can be stored there."""
    return b.add(llvm.GEPOp(b.gep(ptr, index, f32), [llvm.GEP_USE_SSA_VAL], VEC, ssa_indices=[b.i64(0)], inbounds=True))


def _prefetch(b: FunctionBuilder, ptr: SSAValue) -> None:
    """``llvm.prefetch(ptr, read, locality 3, data)``: into L1 ahead of use (a hint: never faults,
    so running past the end of the weights is harmless)."""
    b.add(llvm.CallIntrinsicOp("llvm.prefetch.p0", [ptr, b.i32(0), b.i32(3), b.i32(1)], []))


def register_tile(
    b: FunctionBuilder,
    rows: int,
    vectors: int,
    k: int | SSAValue,
    a_at: Callable[[int, SSAValue], SSAValue],
    b_row: Callable[[SSAValue], SSAValue],
    init: list[SSAValue],
    *,
    alpha: float = 1.0,
    b_aligned: bool = True,
    spread: int = 1,
    prefetch: SSAValue | None = None,
    per_step: int = 0,
) -> list[SSAValue]:
    """The FMA loop of one register tile: ``c[i][v] = init + alpha * sum_k A[i][k] * B[k][16v : 16v + 16]``.

    ``a_at(i, k)`` is the address of A's element (broadcast to a vector), ``b_row(k)`` of the
    first of B's ``vectors`` vectors for step ``k`` (64-byte aligned when ``b_aligned``); ``init``
    the ``rows * vectors`` starting vectors (zeros, or a tile loaded from C to accumulate into).
    A static ``k`` runs ``spread`` steps per loop iteration, each iteration prefetching
    ``per_step`` lines from ``prefetch`` on (the next panel); a run-time ``k`` runs one step each.
    Returns the accumulators, row-major (``c[i * vectors + v]``).
    """
    align = 64 if b_aligned else 4

    def step(kk: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
        row = b_row(kk)
        bv = [b.add(llvm.LoadOp(b.gep(row, v * LANES, f32), VEC, alignment=align)) for v in range(vectors)]
        new = []
        for i in range(rows):
            x = splat(b, b.load(a_at(i, kk), f32))
            new += [b.add(llvm.FMAOp(x, bv[v], c[i * vectors + v])) for v in range(vectors)]
        return new

    if not isinstance(k, int):
        c = emit_for(b, 0, k, step, init)
    else:
        def steps(it: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            if prefetch is not None:
                line = b.gep(prefetch, b.mul_i64(it, b.i64(per_step * LANES)), f32)
                for j in range(per_step):
                    _prefetch(b, b.gep(line, j * LANES, f32))
            k0 = b.mul_i64(it, b.i64(spread)) if spread > 1 else it
            for j in range(spread):
                c = step(b.add_i64(k0, b.i64(j)) if j else k0, c)
            return c

        c = emit_for(b, 0, k // spread, steps, init)
        for kk in range(k // spread * spread, k):
            c = step(b.i64(kk), c)
    if alpha != 1.0:
        scale = splat(b, b.f32(alpha))
        c = [b.add(llvm.FMulOp(x, scale)) for x in c]
    return c


def store_tile(b: FunctionBuilder, c: list[SSAValue], rows: int, vectors: int, dest: SSAValue, ld: int | SSAValue) -> None:
    """``dest[i * ld + 16 v : ... + 16] = c[i * vectors + v]`` (unaligned stores)."""
    for i in range(rows):
        row = dest if i == 0 else b.gep(dest, i * ld if isinstance(ld, int) else b.mul_i64(b.i64(i), ld), f32)
        for v in range(vectors):
            b.add(llvm.StoreOp(c[i * vectors + v], _vector_at(b, row, v * LANES), alignment=4))


def load_tile(b: FunctionBuilder, rows: int, vectors: int, src: SSAValue, ld: int) -> list[SSAValue]:
    """The ``rows x vectors`` vectors of a tile at ``src`` (row stride ``ld`` floats)."""
    return [b.add(llvm.LoadOp(b.gep(src, i * ld + v * LANES, f32), VEC, alignment=4)) for i in range(rows) for v in range(vectors)]


def _acc_strides(op: Operation, acc: SSAValue, out_shape: tuple[int, ...]) -> tuple[int, int]:
    """(row stride, column stride) of ``acc`` broadcast to ``out`` with its rows folded into one dim."""
    st = broadcast_strides(_shape(acc), out_shape)
    rows, (out_rs, acc_rs) = collapse_dims(out_shape[:-1], [contiguous_strides(out_shape)[:-1], st[:-1]])
    if len(rows) > 1 or st[-1] not in (0, 1):
        raise LoweringError(
            f"{op.name}: the accumulator {list(_shape(acc))} does not read as one row stride over the "
            f"output {list(out_shape)}; use buf.matmul"
        )
    return (acc_rs[0] if rows else 0), st[-1]


def _emit_packed_matmul(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.PackedMatmulOp)
    a, packed = op.inputs[0], op.inputs[1]
    acc = op.inputs[2] if len(op.inputs) == 3 else None
    out = op.output
    alpha, beta = op.flags
    act = op.activation.data
    so = _shape(out)
    panels, k, nr = _shape(packed)
    n = so[-1]
    m = numel(so[:-1])
    if m == 0 or n == 0:
        return
    if nr % LANES:
        raise LoweringError(f"{op.name}: panels of {nr} columns are not whole vectors of {LANES}")
    check_no_overlap(ctx, op, out, [a, packed], in_place_ok=False)
    if acc is not None and beta != 0.0:
        check_no_overlap(ctx, op, out, [acc], in_place_ok=False)
        acc_rs, acc_cs = _acc_strides(op, acc, so)
    else:
        acc = None
    vectors = nr // LANES
    mr = rows_per_tile(vectors)
    full_panels, last_cols = divmod(n, nr)
    full_rows, rest = divmod(m, mr)
    # prefetching the next panel: its K x V cache lines are shared out among the first
    # `prefetching` row blocks of this one, `per_step` lines every `spread` k steps each: spread
    # over as many blocks as there are, so that the requests trickle instead of bursting
    blocks = full_rows + bool(rest)
    per_step, spread, prefetching = 0, 1, 0
    if m >= PREFETCH_MIN_ROWS:
        per_step = -(-vectors // blocks)
        spread = max(1, min(MAX_SPREAD, blocks // vectors, k))
        prefetching = min(blocks, -(-vectors * k // (per_step * (k // spread))))

    def panel_range(start: SSAValue, end: SSAValue, _thread: SSAValue, _values: list[SSAValue]) -> None:
        b = ctx.b
        pa, pb, po = ctx.ptr(a), ctx.ptr(packed), ctx.ptr(out)
        pacc = ctx.ptr(acc) if acc is not None else None
        stack = None  # a tile for the last panel's rows (its padding columns never reach out)
        if last_cols:
            size = b.i64(mr * nr)
            alloca = llvm.AllocaOp(size, f32, alignment=64)
            b.entry.insert_op_after(alloca, size.owner)  # type: ignore[arg-type]
            stack = alloca.results[0]

        def block(p: SSAValue, r0: SSAValue | int, rows: int, partial: bool, rb: SSAValue | int | None = None) -> None:
            """Rows ``[r0, r0 + rows)`` of panel ``p``: the register tile, then its epilogue.
            Block ``rb`` (one of the first `prefetching`) also prefetches its share of panel p + 1."""
            a_row = b.gep(pa, b.mul_i64(_val(b, r0), b.i64(k)) if r0 != 0 else None, f32)
            panel = b.gep(pb, b.mul_i64(p, b.i64(k * nr)), f32)
            zero = splat(b, b.f32(0.0))
            ahead = None
            if rb is not None:  # lines [rb, rb + 1) * per_step * (k // spread) of the next panel
                lines = per_step * (k // spread) * LANES
                ahead = b.gep(panel, b.add_i64(b.mul_i64(_val(b, rb), b.i64(lines)), b.i64(k * nr)), f32)
            c = register_tile(
                b, rows, vectors, k,
                lambda i, kk: b.gep(a_row, b.add_i64(kk, b.i64(i * k)) if i else kk, f32),
                lambda kk: b.gep(panel, b.mul_i64(kk, b.i64(nr)), f32),
                [zero] * (rows * vectors), alpha=alpha, spread=spread, prefetch=ahead, per_step=per_step,
            )
            col0 = b.mul_i64(p, b.i64(nr))
            out_tile = b.gep(po, b.add_i64(b.mul_i64(_val(b, r0), b.i64(n)), col0) if r0 != 0 else col0, f32)
            dest, ld = (stack, nr) if partial else (out_tile, n)
            assert dest is not None
            store_tile(b, c, rows, vectors, dest, ld)
            cols = last_cols if partial else nr
            if not (partial or acc is not None or act != "none"):
                return
            ins = [Access(dest, (ld, 1), f32)]
            if acc is not None:
                assert pacc is not None
                acc_off = b.add_i64(
                    b.mul_i64(_val(b, r0), b.i64(acc_rs)) if acc_rs and r0 != 0 else b.i64(0),
                    b.mul_i64(col0, b.i64(acc_cs)) if acc_cs else b.i64(0),
                )
                ins.append(Access(b.gep(pacc, acc_off, f32), (acc_rs, acc_cs), f32))

            def epilogue(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
                y = vals[0]
                if acc is not None:
                    t = vals[1] if beta == 1.0 else b.add(llvm.FMulOp(vals[1], b.f32(beta)))
                    y = b.add(llvm.FAddOp(y, t))
                return y if act == "none" else emit_unary(b, act, y)

            with _scalar_errors(op):
                emit_pointwise(b, (rows, cols), Access(out_tile, (n, 1), f32), ins, epilogue)

        def panel(p: SSAValue, partial: bool) -> None:
            ahead = min(prefetching, full_rows) if not partial else 0  # the last panel has no next one
            emit_for(b, 0, ahead, lambda r, _: block(p, b.mul_i64(r, b.i64(mr)), mr, partial, r) or [])
            emit_for(b, ahead, full_rows, lambda r, _: block(p, b.mul_i64(r, b.i64(mr)), mr, partial) or [])
            if rest:
                tail_prefetches = not partial and full_rows < prefetching
                block(p, full_rows * mr, rest, partial, full_rows if tail_prefetches else None)

        if full_panels:
            last = end if not last_cols else min_i64(b, end, b.i64(full_panels))
            emit_for(b, start, last, lambda p, _: panel(p, False) or [])
        if last_cols:  # the thread whose range ends at the last panel runs it
            has_last = icmp(b, "eq", end, b.i64(panels))
            run, after = b.new_block(), b.new_block()
            b.add(llvm.CondBrOp(has_last, run, [], after, []))
            b.block = run
            panel(b.i64(full_panels), True)
            b.add(llvm.BrOp(after))
            b.block = after

    ctx.parallel(panels, panel_range)


REGISTRY[buf.PackedMatmulOp] = _emit_packed_matmul
