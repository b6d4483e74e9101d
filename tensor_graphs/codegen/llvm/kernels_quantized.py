"""`buf.quantized_matvec`: a matrix-vector product over weight panels stored as bf16 or int8,
converted to float32 in registers as they stream (a decode step reads every weight once per
token: half or a quarter of the bytes of float32 panels).

Per panel ``p`` (``NR`` columns, one item of the parallel region) and per row ``m`` of ``a``::

    acc[u][v] = 0                                   U independent chains of V = NR / L vectors
    for k in 0 .. K step U:                         (L: the target's float lanes)
        for u < U:  x = splat(a[m, k + u])
                    w = float(panels[p, k + u, v*L : v*L + L])   bf16: words of two columns
                        (a vector of L words: the high halves masked are columns h*L.., the low
                        halves shifted up columns NR/2 + h*L..; `packing.FORMATS`)
                                                                  int8: sext, sitofp
                    acc[u][v] = fma(x, w, acc[u][v])
    sum[v] = (acc[0][v] + ... + acc[U-1][v]) (* scales[p, v*L : v*L + L] for int8)
    out[m, p*NR + j] = act(alpha * sum[j] + beta * bias[p*NR + j])     for the panel's columns < N

The U chains hide the FMA latency (a single chain of dependent FMAs would run at one per four
cycles); each iteration prefetches the lines `PREFETCH_LINES` ahead; the epilogue of a panel
goes through a stack tile of NR floats, so the last, partial panel needs no masked stores. The error of these paths is the weights' rounding (bf16: 2^-9
relative per weight; int8: half a scale step), which the tuner measures and holds to the
user's tolerance (`tensor_graphs.tuning`).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerType, VectorType, f32, i8, i16, i32, i64
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.bf16_dot import dot_pairs, int_splat, native_bf16_dot, pair_word
from tensor_graphs.codegen.llvm.kernels import REGISTRY, KernelContext, LoweringError, check_no_overlap
from tensor_graphs.codegen.llvm.kernels_gemm import _prefetch, _vector_at, splat, vector_type
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, emit_for, min_i64
from tensor_graphs.codegen.llvm.scalar import emit_unary, fma
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import numel

#: Independent accumulator chains per panel row (the FMA latency over its throughput).
CHAINS = 4
#: Each iteration prefetches the panel lines it will read this many cache lines ahead (4 KiB on
#: 64-byte lines). Cold GPT-2 GEMVs at 1 thread on Zen 1 (768x3072 and 3072x768): bf16 545 ->
#: 470 us, int8 370-440 -> 303-370 us; without it the hardware prefetcher leaves the stream
#: latency-bound at ~8 GB/s.
PREFETCH_LINES = 64


def _shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())  # type: ignore[attr-defined]


def _chained_sums(b: FunctionBuilder, count: int, vectors: int, lanes: int,
                  steps: Callable[[SSAValue, list[SSAValue], int], list[SSAValue]],
                  prefetch: Callable[[SSAValue], None]) -> list[SSAValue]:
    """The K loop shared by every format: ``count`` k steps in iterations of `CHAINS` (one per
    chain: ``steps(kk, acc, CHAINS)``, after ``prefetch(kk)``), the rest one step at a time on
    chain 0; returns each of the ``vectors`` column vectors summed over the chains."""
    zeros = [splat(b, b.f32(0.0), lanes)] * (CHAINS * vectors)
    main = count // CHAINS * CHAINS

    def iteration(it: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
        kk = b.mul_i64(it, b.i64(CHAINS))
        prefetch(kk)
        return steps(kk, c, CHAINS)

    acc = emit_for(b, 0, main // CHAINS, iteration, zeros) if main else zeros
    if main < count:
        acc = emit_for(b, main, count, lambda kk, c: steps(kk, c[:vectors], 1) + c[vectors:], acc)
    totals = []
    for v in range(vectors):
        total = acc[v]
        for u in range(1, CHAINS):
            total = b.add(llvm.FAddOp(total, acc[u * vectors + v]))
        totals.append(total)
    return totals


def _prefetcher(b: FunctionBuilder, panels: SSAValue, base: SSAValue, nr: int, line: int, element: IntegerType,
                per_iteration: int) -> Callable[[SSAValue], None]:
    """``prefetch(kk)``: the `PREFETCH_LINES`-ahead lines of the panel at ``base`` for an
    iteration from k step ``kk`` (rows of ``nr`` elements of ``element``, ``line`` per cache line)."""

    def prefetch(kk: SSAValue) -> None:
        if not PREFETCH_LINES:
            return
        ahead = b.add_i64(b.add_i64(base, b.mul_i64(kk, b.i64(nr))), b.i64(PREFETCH_LINES * line))
        for j in range(per_iteration):
            _prefetch(b, b.gep(panels, b.add_i64(ahead, b.i64(j * line)) if j else ahead, element))

    return prefetch


def _int8_weights(b: FunctionBuilder, ptr: SSAValue, lanes: int) -> SSAValue:
    """``lanes`` int8 weights at ``ptr`` as ``<lanes x float>`` (sign-extended, converted)."""
    raw = b.add(llvm.LoadOp(ptr, VectorType(i8, [lanes]), alignment=lanes))
    return b.add(llvm.SIToFPOp(b.add(llvm.SExtOp(raw, VectorType(i32, [lanes]))), vector_type(lanes)))


def _bf16_weight_pairs(b: FunctionBuilder, ptr: SSAValue, lanes: int, mask: SSAValue, sixteen: SSAValue) -> tuple[SSAValue, SSAValue]:
    """``lanes`` 32-bit words of bf16 pairs at ``ptr`` (`packing.FORMATS`) as two
    ``<lanes x float>``: the high halves (the words masked) and the low ones (shifted up)."""
    words = b.add(llvm.LoadOp(ptr, VectorType(i32, [lanes]), alignment=lanes * 4))
    high = b.add(llvm.BitcastOp(b.add(llvm.AndOp(words, mask)), vector_type(lanes)))
    low = b.add(llvm.BitcastOp(b.add(llvm.ShlOp(words, sixteen)), vector_type(lanes)))
    return high, low


def _store_columns(b: FunctionBuilder, op: buf.QuantizedMatvecOp, tile: SSAValue, nr: int, n: int, col0: SSAValue,
                   m: int, po: SSAValue, pbias: SSAValue | None) -> None:
    """The epilogue of one panel's row ``m``: ``out[m, col0 + j] = act(alpha * tile[j] + beta *
    acc[col0 + j])`` for the panel's columns below N (the last panel's padding stays behind),
    ``acc`` the bias, or row ``m`` of an accumulator of the output's shape (a residual)."""
    alpha, beta, act = op.alpha.value.data, op.beta.value.data, op.activation.data
    out_row = b.gep(po, m * n, f32)
    if pbias is not None and op.bias is not None and len(_shape(op.bias)) > 1:
        pbias = b.gep(pbias, m * n, f32)
    cols = min_i64(b, b.i64(nr), b.add(llvm.SubOp(b.i64(n), col0)))

    def column(j: SSAValue, _c) -> list:
        y = b.load(b.gep(tile, j, f32), f32)
        if alpha != 1.0:
            y = b.add(llvm.FMulOp(y, b.f32(alpha)))
        col = b.add_i64(col0, j)
        if pbias is not None:
            y = fma(b, b.load(b.gep(pbias, col, f32), f32), b.f32(beta), y)
        if act != "none":
            y = emit_unary(b, act, y)
        b.store(y, b.gep(out_row, col, f32))
        return []

    emit_for(b, 0, cols, column)


def run_panels(ctx: KernelContext, op: buf.QuantizedMatvecOp, n_panels: int, nr: int, shared: list[SSAValue],
               work: tuple[float, float], panel_code: Callable[[FunctionBuilder, SSAValue, list[SSAValue]], object]) -> None:
    """The parallel region over the panels of a kernel whose panel code is its own (`kernels_int4`,
    `kernels_int4_dot`): ``panel_code(b, p, pointers)`` for panel ``p`` (``shared``: i64 addresses
    the threads share, as pointers) gives each row's sums over the panel (``.row(m)``: vectors),
    stored through a stack tile of ``nr`` floats and `_store_columns`."""
    out, bias, beta = op.output, op.bias, op.beta.value.data
    n, rows, lanes = _shape(out)[-1], numel(_shape(op.inputs[0])[:-1]), ctx.target.float_lanes

    def work_range(start: SSAValue, end: SSAValue, _thread: SSAValue, values: list[SSAValue]) -> None:
        b = ctx.b
        pointers = [b.add(llvm.IntToPtrOp(v)) for v in values]

        def panel(p: SSAValue, _c) -> list:
            code = panel_code(b, p, pointers)
            po = ctx.ptr(out)
            pbias = ctx.ptr(bias) if bias is not None and beta != 0.0 else None
            tile = b.stack(nr, f32)
            col0 = b.mul_i64(p, b.i64(nr))
            for m in range(rows):
                for v, total in enumerate(code.row(m)):  # type: ignore[attr-defined]
                    b.add(llvm.StoreOp(total, _vector_at(b, tile, v * lanes, lanes), alignment=4))
                _store_columns(b, op, tile, nr, n, col0, m, po, pbias)
            return []

        emit_for(b, start, end, panel)

    ctx.parallel(n_panels, work_range, values=shared, work=work)


#: format -> its emitter, for the formats with a kernel of their own (bf16dot below; the int4
#: schemes: `kernels_int4`); the others (bf16, int8) share `_emit_quantized_matvec`.
FORMAT_EMITTERS: dict[str, Callable[[KernelContext, buf.QuantizedMatvecOp], None]] = {}


def _emit_quantized_matvec(ctx: KernelContext, op: buf.QuantizedMatvecOp) -> None:
    fmt = op.format.data
    if fmt in FORMAT_EMITTERS:
        FORMAT_EMITTERS[fmt](ctx, op)
        return
    if fmt not in ("bf16", "int8"):
        raise LoweringError(f"{op.name}: no kernel for format '{fmt}'")
    a, panels, out = op.inputs[0], op.inputs[1], op.output
    scales = op.inputs[2] if fmt == "int8" else None
    bias = op.bias
    n_panels, k, nr = _shape(panels)
    n = _shape(out)[-1]
    rows = numel(_shape(a)[:-1])
    lanes = ctx.target.float_lanes
    if nr % (2 * lanes):
        raise LoweringError(f"{op.name}: panels of {nr} columns are not an even number of vectors of {lanes} floats "
                            "for this target")
    if rows == 0 or n == 0:
        return
    check_no_overlap(ctx, op, out, list(op.inputs), in_place_ok=False)
    vectors = nr // lanes
    beta = op.beta.value.data
    element = 2 if fmt == "bf16" else 1

    def panel(b: FunctionBuilder, p: SSAValue) -> None:
        # the pointers as this thread sees them, and its own stack tile
        pa, pw, po = ctx.ptr(a), ctx.ptr(panels), ctx.ptr(out)
        ps = ctx.ptr(scales) if scales is not None else None
        pbias = ctx.ptr(bias) if bias is not None and beta != 0.0 else None
        tile = b.stack(nr, f32)
        mask = int_splat(b, -65536, i32, lanes)  # 0xFFFF0000: a word's high half
        sixteen = int_splat(b, 16, i32, lanes)
        base = b.mul_i64(p, b.i64(k * nr))  # elements
        col0 = b.mul_i64(p, b.i64(nr))
        for m in range(rows):
            row = b.gep(pa, m * k, f32)

            def steps(kk: SSAValue, acc: list[SSAValue], count: int) -> list[SSAValue]:
                new = list(acc)
                for u in range(count):
                    kx = b.add_i64(kk, b.i64(u)) if u else kk
                    x = splat(b, b.load(b.gep(row, kx, f32), f32), lanes)
                    at = b.add_i64(base, b.mul_i64(kx, b.i64(nr)))
                    weights: list[SSAValue] = [None] * vectors  # type: ignore[list-item]
                    if fmt == "bf16":  # vector h of words: columns h*L.. (high halves) and NR/2 + h*L.. (low)
                        for h in range(vectors // 2):
                            words = b.gep(pw, b.add_i64(at, b.i64(2 * h * lanes)), i16)
                            weights[h], weights[vectors // 2 + h] = _bf16_weight_pairs(b, words, lanes, mask, sixteen)
                    else:
                        for v in range(vectors):
                            weights[v] = _int8_weights(b, b.gep(pw, b.add_i64(at, b.i64(v * lanes)), i8), lanes)
                    for v in range(vectors):
                        new[u * vectors + v] = fma(b, x, weights[v], new[u * vectors + v])
                return new

            line = ctx.target.caches.line // element  # elements per cache line
            prefetch = _prefetcher(b, pw, base, nr, line, i16 if fmt == "bf16" else i8, max(1, CHAINS * nr // line))
            for v, total in enumerate(_chained_sums(b, k, vectors, lanes, steps, prefetch)):
                if ps is not None:
                    sv = b.add(llvm.LoadOp(b.gep(ps, b.add_i64(col0, b.i64(v * lanes)), f32), vector_type(lanes), alignment=4))
                    total = b.add(llvm.FMulOp(total, sv))
                b.add(llvm.StoreOp(total, _vector_at(b, tile, v * lanes, lanes), alignment=4))
            _store_columns(b, op, tile, nr, n, col0, m, po, pbias)

    def work_range(start: SSAValue, end: SSAValue, _thread: SSAValue, _values: list[SSAValue]) -> None:
        b = ctx.b
        emit_for(b, start, end, lambda p, _: panel(b, p) or [])

    # threads: as many as the bytes streamed pay for (`Target.thread_work`)
    work = (2.0 * rows * n * k, float(n_panels * k * nr * element + 4 * rows * (k + n)))
    ctx.parallel(n_panels, work_range, work=work)


def _emit_bf16_dot_matvec(ctx: KernelContext, op: buf.QuantizedMatvecOp) -> None:
    """The "bf16dot" format (for targets with AVX512-BF16; emulated elsewhere, `bf16_dot.dot_pairs`): the rows of ``a`` rounded to bf16 and
    paired along K once, on the kernel's stack (``x[m][kk] = bf16(a[m, 2kk]) | bf16(a[m, 2kk+1]) << 16``),
    then per panel and row, `CHAINS` chains of ``vdpbf16ps`` over the panel's K pairs (one
    broadcast word of x, one vector of 16 weight words per 16 columns)::

        acc[u][v] = dpbf16ps(acc[u][v], panels[p, kk + u, 32 v : 32 v + 32], splat(x[m][kk + u]))

    Each product of two bf16 is exact in float32; the error is the rounding of the weights and of
    the activations (2^-9 relative each), which the tuner measures like any other path's."""
    a, panels, out = op.inputs[0], op.inputs[1], op.output
    bias = op.bias
    n_panels, k2, nr2 = _shape(panels)
    nr = nr2 // 2
    k = _shape(a)[-1]
    n = _shape(out)[-1]
    rows = numel(_shape(a)[:-1])
    lanes = ctx.target.float_lanes
    native = native_bf16_dot(ctx.target, lanes)
    if nr % lanes:
        raise LoweringError(f"{op.name}: panels of {nr} columns are not whole vectors of {lanes} floats")
    if rows == 0 or n == 0:
        return
    check_no_overlap(ctx, op, out, list(op.inputs), in_place_ok=False)
    vectors = nr // lanes
    beta = op.beta.value.data
    b = ctx.b
    # the rows of a as bf16 pairs along K, once per call, shared by the threads
    pa = ctx.ptr(a)
    x = b.stack(max(rows * k2, 1), i32)
    for m in range(rows):
        row = b.gep(pa, m * k, f32)

        def pair(kk: SSAValue, _c, m=m, row=row) -> list:
            lo = b.load(b.gep(row, b.mul_i64(kk, b.i64(2)), f32), f32)
            hi = b.load(b.gep(row, b.add_i64(b.mul_i64(kk, b.i64(2)), b.i64(1)), f32), f32)
            b.store(pair_word(b, lo, hi), b.gep(x, b.add_i64(kk, b.i64(m * k2)), i32))
            return []

        emit_for(b, 0, k // 2, pair)
        if k % 2:  # the last word pairs a[m, K - 1] with a zero (the panels' zero row)
            b.store(pair_word(b, b.load(b.gep(row, k - 1, f32), f32), None), b.gep(x, m * k2 + k2 - 1, i32))
    shared_x = b.add(llvm.PtrToIntOp(x, i64))

    def panel(b: FunctionBuilder, p: SSAValue, px: SSAValue) -> None:
        pw, po = ctx.ptr(panels), ctx.ptr(out)
        pbias = ctx.ptr(bias) if bias is not None and beta != 0.0 else None
        tile = b.stack(nr, f32)
        base = b.mul_i64(p, b.i64(k2 * nr))  # words
        col0 = b.mul_i64(p, b.i64(nr))
        words_line = ctx.target.caches.line // 4
        per_iteration = max(1, CHAINS * nr // words_line)
        for m in range(rows):
            xrow = b.gep(px, m * k2, i32)

            def steps(kk: SSAValue, acc: list[SSAValue], count: int) -> list[SSAValue]:
                new = list(acc)
                for u in range(count):
                    kx = b.add_i64(kk, b.i64(u)) if u else kk
                    xs = int_splat(b, b.load(b.gep(xrow, kx, i32), i32), i32, lanes)
                    at = b.add_i64(base, b.mul_i64(kx, b.i64(nr)))
                    for v in range(vectors):
                        words = b.add(llvm.LoadOp(b.gep(pw, b.add_i64(at, b.i64(v * lanes)), i32), VectorType(i32, [lanes]),
                                                  alignment=lanes * 4))
                        j = u * vectors + v
                        new[j] = dot_pairs(b, new[j], words, xs, lanes, native)
                return new

            prefetch = _prefetcher(b, pw, base, nr, words_line, i32, per_iteration)
            for v, total in enumerate(_chained_sums(b, k2, vectors, lanes, steps, prefetch)):
                b.add(llvm.StoreOp(total, _vector_at(b, tile, v * lanes, lanes), alignment=4))
            _store_columns(b, op, tile, nr, n, col0, m, po, pbias)

    def work_range(start: SSAValue, end: SSAValue, _thread: SSAValue, values: list[SSAValue]) -> None:
        b = ctx.b
        px = b.add(llvm.IntToPtrOp(values[0]))
        emit_for(b, start, end, lambda p, _: panel(b, p, px) or [])

    work = (2.0 * rows * n * k, float(n_panels * k2 * nr2 * 2 + 4 * rows * (k + n)))
    ctx.parallel(n_panels, work_range, values=[shared_x], work=work)


FORMAT_EMITTERS["bf16dot"] = _emit_bf16_dot_matvec
REGISTRY[buf.QuantizedMatvecOp] = _emit_quantized_matvec
