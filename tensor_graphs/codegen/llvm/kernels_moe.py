"""Emitters of the mixture-of-experts kernels; importing this module registers them into
:data:`kernels.REGISTRY` (``convert_buffer_to_llvm`` imports it).

- `buf.argtopk`: each row along ``dim`` is a bottom-up merge sort of its positions (stable:
  equal values keep their order) in the scratch's two rows, compared by value (NaN above every
  number); the first ``k`` positions are the result. ``n log n`` per row, ``log2 n`` passes
  unrolled (n is static).
- `buf.put`: a copy of the input, then one checked element write (or add) per offset, in order.
- `buf.packed_grouped_matmul` (the default): the offsets are checked (non-decreasing, at most
  S) and the rows past the last group zeroed; then the team takes ``panel x group`` items, panel
  major (any two chosen experts' panels are spread over the threads, not both in one thread's
  first chunk); an item runs its group's rows (a run-time count) through the packed GEMM's
  register tile over that expert's panels, packed at load time; an empty group (an expert no
  token chose) costs two loads, its weights are never read.
- `buf.grouped_matmul` (``pack-weights=false``): the same over BLAS, the weights read where they
  are: items ``column block x group``, each one ``cblas_sgemm`` of the group's rows by the block
  of its weight's columns, ``cblas_sgemv`` for a group of one row (a decode step).
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import AnyFloat, IntegerAttr, IntegerType, f32, i1, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.checks import grouped_offsets_message, put_message, zero_divisor_message
from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    Access,
    KernelContext,
    LoweringError,
    _element,
    _require_same_element,
    _shape,
    check_no_overlap,
    emit_pointwise,
)
from tensor_graphs.codegen.llvm.kernels_blas import _I32_MAX, _sgemm, _sgemv
from tensor_graphs.codegen.llvm.kernels_gemm import Tile, call_tile, k_block
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, emit_for, emit_if, emit_loop, emit_strided_nest, icmp, min_i64
from tensor_graphs.codegen.llvm.scalar import emit_binary, fcmp, select
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.tensor import PUT_REDUCTIONS

#: A grouped GEMM's columns are split into at most this many blocks (items for the threads) of
#: at least :data:`MIN_BLOCK_COLUMNS` columns each.
MAX_COLUMN_BLOCKS = 8
MIN_BLOCK_COLUMNS = 64
#: ... and of at least this many when the groups hold several rows each (GEMMs, not GEMVs: each
#: sgemm call packs its rows again)
MIN_GEMM_BLOCK_COLUMNS = 512


# --------------------------------------------------------------------------- argtopk


def _before(b: FunctionBuilder, x: SSAValue, y: SSAValue, largest: bool) -> SSAValue:
    """Whether value ``x`` ranks strictly before ``y``: larger (smaller) first, NaN above every number."""
    if isinstance(x.type, IntegerType):
        return icmp(b, "sgt" if largest else "slt", x, y)
    nan_x, nan_y = fcmp(b, "uno", x, x), fcmp(b, "uno", y, y)
    if largest:  # x > y, or x is NaN and y is not
        return b.add(llvm.OrOp(fcmp(b, "ogt", x, y), b.add(llvm.AndOp(nan_x, b.add(llvm.XOrOp(nan_y, b.constant(1, i1)))))))
    return b.add(llvm.OrOp(fcmp(b, "olt", x, y), b.add(llvm.AndOp(nan_y, b.add(llvm.XOrOp(nan_x, b.constant(1, i1)))))))


def _emit_argtopk(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.ArgTopkOp)
    (x,), (out, scratch) = op.inputs, op.outputs
    el = _element(x)
    if el == i1 or not isinstance(el, AnyFloat | IntegerType):
        raise LoweringError(f"{op.name}: no codegen for {el} elements")
    if _element(out) != i64 or _element(scratch) != i64:
        raise LoweringError(f"{op.name}: the positions and the scratch are i64 buffers")
    check_no_overlap(ctx, op, out, [x, scratch], in_place_ok=False)
    check_no_overlap(ctx, op, scratch, [x], in_place_ok=False)
    shape, dim, k = _shape(x), op.dim.value.data, op.k.value.data
    largest = bool(op.largest.value.data)
    outer, n, inner = numel(shape[:dim]), shape[dim], numel(shape[dim + 1 :])
    if outer * inner * k == 0:
        return
    b = ctx.b
    xp, outp, sp = ctx.ptr(x), ctx.ptr(out), ctx.ptr(scratch)
    rows = [sp, b.gep(sp, n, i64)]

    def row(offs: list[SSAValue | None]) -> None:
        base = offs[0] if offs[0] is not None else b.i64(0)

        def value(position: SSAValue) -> SSAValue:
            return b.load_element(xp, b.add_i64(base, b.mul_i64(position, b.i64(inner))), el)

        emit_loop(b, n, lambda i: b.store_element(i, rows[0], i, i64))
        src, dst, width = 0, 1, 1
        while width < n:  # one pass: merge each pair of sorted runs of `width` into dst
            w = width

            def merge(pair: SSAValue, _: list[SSAValue], w: int = w, s: SSAValue = rows[src], d: SSAValue = rows[dst]) -> list[SSAValue]:
                lo = b.mul_i64(pair, b.i64(2 * w))
                mid = min_i64(b, b.add_i64(lo, b.i64(w)), b.i64(n))
                hi = min_i64(b, b.add_i64(lo, b.i64(2 * w)), b.i64(n))

                def step(t: SSAValue, ij: list[SSAValue]) -> list[SSAValue]:
                    i, j = ij
                    pi = b.load_element(s, min_i64(b, i, b.i64(n - 1)), i64)
                    pj = b.load_element(s, min_i64(b, j, b.i64(n - 1)), i64)
                    right_first = b.add(llvm.AndOp(icmp(b, "slt", j, hi), _before(b, value(pj), value(pi), largest)))
                    left = b.add(llvm.AndOp(icmp(b, "slt", i, mid), b.add(llvm.XOrOp(right_first, b.constant(1, i1)))))
                    b.store_element(select(b, left, pi, pj), d, t, i64)
                    step_i = b.add(llvm.ZExtOp(left, i64))
                    return [b.add_i64(i, step_i), b.add_i64(j, b.add(llvm.SubOp(b.i64(1), step_i)))]

                emit_for(b, lo, hi, step, [lo, mid])
                return []

            emit_for(b, 0, -(-n // (2 * w)), merge)
            src, dst, width = dst, src, width * 2
        out_base = offs[1] if offs[1] is not None else b.i64(0)
        emit_loop(b, k, lambda t: b.store_element(
            b.load_element(rows[src], t, i64), outp, b.add_i64(out_base, b.mul_i64(t, b.i64(inner))), i64))

    emit_strided_nest(b, [outer, inner], [[n * inner, 1], [k * inner, 1]], row, collapse=False)


# --------------------------------------------------------------------------- put


def _emit_put(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.PutOp)
    (x, offsets, values), out = op.inputs, op.output
    el = _require_same_element(op, [x, values, out])
    if _element(offsets) != i64:
        raise LoweringError(f"{op.name}: offsets must be an i64 buffer, got {offsets.type}")
    accumulate = bool(op.accumulate.value.data)
    combine = PUT_REDUCTIONS[op.reduce.data]  # on i1: add and max are or, mul and min and (emit_binary)
    check_no_overlap(ctx, op, out, [x, offsets, values], in_place_ok=False)
    size = numel(_shape(x))
    if size == 0:
        return
    b = ctx.b
    xp, offp, vp, outp = ctx.ptr(x), ctx.ptr(offsets), ctx.ptr(values), ctx.ptr(out)
    emit_pointwise(b, (size,), Access(outp, (1,), el), [Access(xp, (1,), el)], lambda b, v: v[0])
    message = put_message(_shape(x))
    ult = IntegerAttr(llvm.ICmpPredicateFlag.ULT.to_int(), i64)

    def element(i: SSAValue) -> None:
        j = b.load_element(offp, i, i64)
        ctx.check(b.add(llvm.ICmpOp(j, b.i64(size), ult)), message)
        v = b.load_element(vp, i, el)
        if accumulate:
            v = emit_binary(b, combine, b.load_element(outp, j, el), v)
        b.store_element(v, outp, j, el)

    emit_loop(b, numel(_shape(offsets)), element)


def _emit_check_nonzero(ctx: KernelContext, op: Operation) -> None:
    """A copy of the integer input, then each element checked: a zero stops the graph with the
    division-by-zero error (`checks.zero_divisor_message`)."""
    assert isinstance(op, buf.CheckNonzeroOp)
    (x,), out = op.inputs, op.output
    el = _require_same_element(op, [x, out])
    if not isinstance(el, IntegerType):
        raise LoweringError(f"{op.name}: integer elements only, got {el}")
    size = numel(_shape(x))
    if size == 0:
        return
    b = ctx.b
    xp, outp = ctx.ptr(x), ctx.ptr(out)
    emit_pointwise(b, (size,), Access(outp, (1,), el), [Access(xp, (1,), el)], lambda b, v: v[0])
    message = zero_divisor_message()
    ne = IntegerAttr(llvm.ICmpPredicateFlag.NE.to_int(), i64)

    def element(i: SSAValue) -> None:
        ctx.check(b.add(llvm.ICmpOp(b.load_element(xp, i, el), b.constant(0, el), ne)), message)

    emit_loop(b, size, element)


# --------------------------------------------------------------------------- grouped matmul


def _check_offsets_zero_rest(ctx: KernelContext, offsets: SSAValue, out: SSAValue, groups: int, s: int, n: int) -> None:
    """Checks that the offsets are non-decreasing running row counts within [0, S] (else the
    graph's error status), then zeroes the output rows from the last offset on."""
    b = ctx.b
    offp, outp = ctx.ptr(offsets), ctx.ptr(out)
    message = grouped_offsets_message(s)

    def check(g: SSAValue, prev: list[SSAValue]) -> list[SSAValue]:
        end = b.load_element(offp, g, i64)
        ctx.check(b.add(llvm.AndOp(icmp(b, "sle", prev[0], end), icmp(b, "sle", end, b.i64(s)))), message)
        return [end]

    last = emit_for(b, 0, groups, check, [b.i64(0)])[0]
    emit_for(b, last, s, lambda r, _: emit_loop(b, n, lambda c: b.store(b.f32(0.0), b.gep(outp, b.add_i64(b.mul_i64(r, b.i64(n)), c), f32))) or [])


def _group_rows(b: FunctionBuilder, offp: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(first row, row count) of group ``g``."""
    first = select(b, icmp(b, "eq", g, b.i64(0)), b.i64(0), b.load_element(offp, b.add(llvm.SubOp(g, b.i64(1))), i64))
    return first, b.add(llvm.SubOp(b.load_element(offp, g, i64), first))


def _check_grouped(op: Operation, a: SSAValue, w: SSAValue, offsets: SSAValue, out: SSAValue) -> None:
    for v in (a, w, out):
        if _element(v) != f32:
            raise LoweringError(f"{op.name}: f32 buffers only, got {v.type}")
    if _element(offsets) != i64:
        raise LoweringError(f"{op.name}: offsets must be an i64 buffer, got {offsets.type}")


def _emit_grouped_matmul(ctx: KernelContext, op: Operation) -> None:
    """Through BLAS (weights read where they are, `pack-weights=false`)."""
    assert isinstance(op, buf.GroupedMatmulOp)
    (a, w, offsets), out = op.inputs, op.output
    _check_grouped(op, a, w, offsets, out)
    check_no_overlap(ctx, op, out, [a, w, offsets], in_place_ok=False)
    transposed = bool(op.transpose_b.value.data)
    (s, k), (groups, *_), (_, n) = _shape(a), _shape(w), _shape(out)
    if s * n == 0 or groups == 0:
        return
    if max(s, n, k) > _I32_MAX:
        raise LoweringError(f"{op.name}: dims {[s, k, n]} overflow the 32-bit BLAS interface")
    _check_offsets_zero_rest(ctx, offsets, out, groups, s, n)
    # a decode step (at most a row per group) splits the columns finely, for the threads to
    # share the few chosen groups; GEMMs keep wide blocks
    blocks = max(1, min(MAX_COLUMN_BLOCKS, n // (MIN_BLOCK_COLUMNS if s <= groups else MIN_GEMM_BLOCK_COLUMNS)))
    width = -(-n // blocks)
    blocks = -(-n // width)

    def items(start: SSAValue, end: SSAValue, _thread: SSAValue, _values: list[SSAValue]) -> None:
        b = ctx.b
        ap, wp, offp, cp = ctx.ptr(a), ctx.ptr(w), ctx.ptr(offsets), ctx.ptr(out)

        def item(i: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            g = b.add(llvm.SRemOp(i, b.i64(groups)))
            c0 = b.mul_i64(b.add(llvm.SDivOp(i, b.i64(groups))), b.i64(width))
            cols = min_i64(b, b.i64(width), b.add(llvm.SubOp(b.i64(n), c0)))
            first, rows = _group_rows(b, offp, g)
            a_rows = b.gep(ap, b.mul_i64(first, b.i64(k)), f32)
            c_rows = b.gep(cp, b.add_i64(b.mul_i64(first, b.i64(n)), c0), f32)
            # this block's columns of w[g]: rows c0.. of an [N, K] matrix, or columns c0.. of a [K, N] one
            w_block = b.gep(wp, b.add_i64(b.mul_i64(g, b.i64(n * k)), b.mul_i64(c0, b.i64(k)) if transposed else c0), f32)
            ldw = k if transposed else n

            def gemv() -> None:  # one row: out row = W_block a (or W_block^T a)
                if transposed:
                    _sgemv(ctx, False, cols, k, 1.0, w_block, ldw, a_rows, 1, 0.0, c_rows)
                else:
                    _sgemv(ctx, True, k, cols, 1.0, w_block, ldw, a_rows, 1, 0.0, c_rows)

            def gemm() -> None:
                _sgemm(ctx, False, transposed, rows, cols, k, 1.0, a_rows, k, w_block, ldw, 0.0, c_rows, n)

            emit_if(b, icmp(b, "eq", rows, b.i64(1)), gemv)
            emit_if(b, icmp(b, "sgt", rows, b.i64(1)), gemm)
            return []

        emit_for(b, start, end, item)

    used = min(groups, s)  # groups with rows: at most one per row
    ctx.parallel(blocks * groups, items, work=(2.0 * s * n * k, 4.0 * (used * n * k + s * k + s * n)))


def _emit_packed_grouped_matmul(ctx: KernelContext, op: Operation) -> None:
    """Items ``panel x group`` (panel major) on the team; an item runs its group's rows through
    the packed GEMM's register tile (`kernels_gemm.call_tile`): run-time many blocks of MR
    rows, then one tile of the 1 .. MR-1 rows left, per K block of the target's size (the last
    panel in one: its padding columns go to a stack tile, never to the output)."""
    assert isinstance(op, buf.PackedGroupedMatmulOp)
    (a, packed, offsets), out = op.inputs, op.output
    _check_grouped(op, a, packed, offsets, out)
    check_no_overlap(ctx, op, out, [a, packed, offsets], in_place_ok=False)
    (s, k), (groups, panels, _, nr), (_, n) = _shape(a), _shape(packed), _shape(out)
    if s * n == 0 or groups == 0:
        return
    lanes = ctx.target.float_lanes
    if nr % lanes or nr // lanes > ctx.target.gemm_tile()[1]:
        raise LoweringError(f"{op.name}: panels of {nr} columns were packed for another target than {ctx.target.name}; lower the tg module again")
    vectors = nr // lanes
    mr = ctx.target.gemm_tile(vectors)[0]
    full_panels, last_cols = divmod(n, nr)
    kc = k_block(ctx, op, 2 * mr, k, nr, mr)  # the target's K block (as for a GEMM of many rows)
    _check_offsets_zero_rest(ctx, offsets, out, groups, s, n)

    def items(start: SSAValue, end: SSAValue, _thread: SSAValue, _values: list[SSAValue]) -> None:
        b = ctx.b
        ap, pp, offp, cp = ctx.ptr(a), ctx.ptr(packed), ctx.ptr(offsets), ctx.ptr(out)
        stack = b.stack(mr * nr, f32) if last_cols else None

        def item(i: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            p, g = b.add(llvm.SDivOp(i, b.i64(groups))), b.add(llvm.SRemOp(i, b.i64(groups)))
            first, rows = _group_rows(b, offp, g)
            panel = b.gep(pp, b.mul_i64(b.add_i64(b.mul_i64(g, b.i64(panels)), p), b.i64(k * nr)), f32)
            col0 = b.mul_i64(p, b.i64(nr))

            def tile(r0: SSAValue, count: int, partial: bool, k0: int, steps: int) -> None:
                """Rows [r0, r0 + count) over k steps [k0, k0 + steps): from zeros for the
                first K block, else from the sums stored so far."""
                a_row = b.gep(ap, b.add_i64(b.mul_i64(r0, b.i64(k)), b.i64(k0)), f32)
                slice_ = b.gep(panel, k0 * nr, f32)
                out_tile = b.gep(cp, b.add_i64(b.mul_i64(r0, b.i64(n)), col0), f32)
                tile = Tile(count, vectors, lanes)
                if not partial:
                    call_tile(ctx, tile, a_row, k, slice_, nr, steps, out_tile, n, accumulate=k0 != 0)
                    return
                assert stack is not None and k0 == 0
                call_tile(ctx, tile, a_row, k, slice_, nr, steps, stack, nr)
                emit_pointwise(b, (count, last_cols), Access(out_tile, (n, 1), f32), [Access(stack, (nr, 1), f32)], lambda b, v: v[0])

            def run(partial: bool) -> None:
                blocks = b.add(llvm.SDivOp(rows, b.i64(mr)))
                rest_start = b.add_i64(first, b.mul_i64(blocks, b.i64(mr)))
                rest = b.add(llvm.SubOp(rows, b.mul_i64(blocks, b.i64(mr))))
                # K blocks (full panels): a block's panel slice stays in L1 while the group's
                # row blocks pass it; the last panel's stack tile holds one row block only
                ks = [(0, k)] if partial else [(k0, min(kc, k - k0)) for k0 in range(0, k, kc)]
                for k0, steps in ks:
                    emit_for(b, 0, blocks, lambda r, _, k0=k0, steps=steps: tile(b.add_i64(first, b.mul_i64(r, b.i64(mr))), mr, partial, k0, steps) or [])
                    for count in range(1, mr):
                        emit_if(b, icmp(b, "eq", rest, b.i64(count)), lambda count=count, k0=k0, steps=steps: tile(rest_start, count, partial, k0, steps))

            if not last_cols:
                run(False)
            elif not full_panels:
                run(True)
            else:
                is_last = icmp(b, "eq", p, b.i64(full_panels))
                emit_if(b, is_last, lambda: run(True))
                emit_if(b, b.add(llvm.XOrOp(is_last, b.constant(1, i1))), lambda: run(False))
            return []

        emit_for(b, start, end, item)

    used = min(groups, s)  # groups with rows: at most one per row
    ctx.parallel(panels * groups, items, work=(2.0 * s * n * k, 4.0 * (used * panels * k * nr + s * k + s * n)))


REGISTRY[buf.ArgTopkOp] = _emit_argtopk
REGISTRY[buf.PutOp] = _emit_put
REGISTRY[buf.CheckNonzeroOp] = _emit_check_nonzero
REGISTRY[buf.GroupedMatmulOp] = _emit_grouped_matmul
REGISTRY[buf.PackedGroupedMatmulOp] = _emit_packed_grouped_matmul
