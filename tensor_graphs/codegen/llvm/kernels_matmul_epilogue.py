"""`buf.matmul` with an activation: the activation fused into the blocks the GEMM writes.
Importing this module registers it into :data:`kernels.REGISTRY` in place of the plain emitter
of `kernels_blas` (``convert_buffer_to_llvm`` imports it).

The GEMM runs per output tile of :data:`EPILOGUE_ROWS` x :data:`EPILOGUE_COLS` (sgemm on
``A[r0:r0+mb] x B[:, n0:n0+nb]`` into ``C[r0:r0+mb, n0:n0+nb]`` with ``ldc = N``), and the
activation runs over each tile right after its sgemm, while the tile is still in cache; an
accumulator (``beta != 0``) is copied into the tile just before. OpenBLAS runs on one thread
(`runtime_support.threads`): when the GEMM's flops pay for more (`Target.thread_work`), the
tiles are spread over the graph's threads, one single-threaded sgemm each (a convolution's
GEMM, a product of two activations); such a GEMM takes this path even without an activation. Matrix-vector products (one
output row or column) stay one sgemv followed by the activation over the (small) output vector.
Activation "none" goes to the plain matmul emitter of `kernels_blas`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, f32, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    KernelContext,
    LoweringError,
    _add_idx,
    _at,
    _load,
    _mul_idx,
    _require_f32,
    _shape,
    _store,
    check_no_overlap,
    emit_elementwise,
)
from tensor_graphs.codegen.llvm.kernels_blas import _I32_MAX, _sgemm, _sgemv, per_batch
from tensor_graphs.codegen.llvm.kernels_gemm import separate_epilogue
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, Index, broadcast_strides, collapse_dims, emit_for
from tensor_graphs.codegen.llvm.scalar import emit_unary
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.symbolic import is_static
from tensor_graphs.dialects.shapes import contiguous_strides, numel

#: Output tile of a matmul with an activation epilogue (rows x columns, 256 KiB of f32).
EPILOGUE_ROWS = 256
EPILOGUE_COLS = 256


class _TiledMatmul:
    """One `buf.matmul` with an activation as code (`_emit_matmul_epilogue`; the module doc):
    the op read (`__init__`), then one sgemv per matrix (`_gemv`) or the output tiles
    (`_tiles`, `tile`), on the graph's threads when the flops pay for them."""

    def __init__(self, ctx: KernelContext, op: buf.MatmulOp):
        self.ctx, self.op = ctx, op
        self.act = op.activation.data
        self.ta, self.tb, self.alpha, self.beta = op.flags
        self.a, self.w = op.inputs[0], op.inputs[1]
        self.acc = op.inputs[2] if len(op.inputs) == 3 else None
        self.out = op.output
        _require_f32(op, [*op.inputs, self.out])
        self.sa, self.sb, self.so = _shape(self.a), _shape(self.w), _shape(self.out)
        self.m, self.k = (self.sa[-1], self.sa[-2]) if self.ta else (self.sa[-2], self.sa[-1])
        self.n = self.sb[-2] if self.tb else self.sb[-1]

    def emit(self) -> None:
        ctx, op, out, acc, sa, sb, so = self.ctx, self.op, self.out, self.acc, self.sa, self.sb, self.so
        if numel(so) == 0:
            return
        check_no_overlap(ctx, op, out, [self.a, self.w], in_place_ok=False)
        use_acc = acc is not None and self.beta != 0.0
        acc_in_place = use_acc and ctx.same_bytes(acc, out) and _shape(acc) == so  # type: ignore[arg-type]
        if use_acc and not acc_in_place:
            check_no_overlap(ctx, op, out, [acc], in_place_ok=False)  # type: ignore[list-item]
        if not use_acc:
            self.beta = 0.0
        self.copy_acc = use_acc and not acc_in_place
        self.batch_o = so[:-2]
        self.fold = numel(sb[:-2]) == 1 and not self.ta
        self.m_total = self.m * numel(sa[:-2]) if self.fold else self.m
        self.lda, self.ldb, self.ldc = max(sa[-1], 1), max(sb[-1], 1), max(self.n, 1)
        if max(self.m_total, self.n, self.k, self.lda, self.ldb, self.ldc) > _I32_MAX:
            raise LoweringError(f"{op.name}: dims {list(sa)} x {list(sb)} overflow the 32-bit BLAS interface")
        self.pa, self.pb, self.pc = ctx.ptr(self.a), ctx.ptr(self.w), ctx.ptr(out)
        self.pacc = ctx.ptr(acc) if self.copy_acc else None  # type: ignore[arg-type]
        self.acc_str = broadcast_strides(_shape(acc), so) if self.copy_acc else (0,) * len(so)  # type: ignore[arg-type]
        if (self.m_total == 1 or self.n == 1) and self.k > 1:
            self._gemv()
            return
        self._accumulator_strides()
        self._tiled()

    def activate(self, b: FunctionBuilder, ptr: SSAValue, count: Index) -> None:
        """The activation in place over ``count`` floats at ``ptr``."""
        act = self.act
        if act != "none":
            emit_for(b, 0, count, lambda i, _: _store(b, emit_unary(b, act, _load(b, ptr, i)), ptr, i) or [])

    def _gemv(self) -> None:
        """One sgemv per matrix, then the activation over the (small) output vector."""
        ctx, b = self.ctx, self.ctx.b
        ta, tb, alpha, beta, n, k, m_total = self.ta, self.tb, self.alpha, self.beta, self.n, self.k, self.m_total
        if self.copy_acc:
            emit_elementwise(ctx, self.out, [self.acc], lambda bb, vals: vals[0])  # type: ignore[list-item]

        def gemv_call(off_a: SSAValue | None, off_b: SSAValue | None, off_c: SSAValue | None) -> None:
            ma, mb_, c = _at(b, self.pa, off_a), _at(b, self.pb, off_b), _at(b, self.pc, off_c)
            if m_total == 1:  # out[1, N] = a[K] . op(B)
                rows, cols, t = (n, k, False) if tb else (k, n, True)
                _sgemv(ctx, t, rows, cols, alpha, mb_, self.ldb, ma, self.lda if ta else 1, beta, c)
            else:  # out[M, 1] = op(A) . b[K]
                rows, cols, t = (k, m_total, True) if ta else (m_total, k, False)
                _sgemv(ctx, t, rows, cols, alpha, ma, self.lda, mb_, 1 if tb else self.ldb, beta, c)

        if self.fold or numel(self.batch_o) == 1:
            gemv_call(None, None, None)
        else:
            per_batch(ctx, self.sa, self.sb, self.so, lambda offs: gemv_call(offs[1], offs[2], offs[0]))
        self.activate(b, self.pc, ctx.size(numel(self.so)))

    def _accumulator_strides(self) -> None:
        """The accumulator's row and column strides over the output's rows (all batches stacked
        when folded), which must be one stride; an unusual broadcast is copied whole up front."""
        so, n, acc_str = self.so, self.n, self.acc_str
        self.acc_row_stride = 0
        if self.copy_acc:
            row_shape = so[:-1] if self.fold else so[-2:-1]
            out_rs = contiguous_strides(so)[:-1] if self.fold else (n,)
            acc_rs = acc_str[:-1] if self.fold else acc_str[-2:-1]
            cshape, cstrides = collapse_dims(row_shape, [out_rs, acc_rs])
            if len(cshape) > 1:  # an unusual broadcast: copy the whole accumulator up front
                emit_elementwise(self.ctx, self.out, [self.acc], lambda bb, vals: vals[0])  # type: ignore[list-item]
                self.copy_acc = False
            else:
                self.acc_row_stride = cstrides[1][0] if cshape else 0
        self.acc_col_stride = acc_str[-1]

    def tile(self, b: FunctionBuilder, ptrs: _Pointers, offs: Sequence[SSAValue | None], r0: SSAValue | None, mb: Index,
             n0: SSAValue | None, nb: Index) -> None:
        """sgemm of the output tile at rows ``r0``, columns ``n0`` (None: 0), ``mb x nb``; the
        accumulator copied in first, the activation over it after."""
        ta, tb, lda, ldb, ldc = self.ta, self.tb, self.lda, self.ldb, self.ldc
        off_a, off_b, off_c, off_acc = offs
        c_tile = _at(b, ptrs.c, _add_idx(b, _add_idx(b, off_c, _mul_idx(b, r0, ldc) if r0 is not None else None), n0))
        if self.copy_acc:
            self._copy_accumulator(b, ptrs, off_acc, c_tile, r0, mb, n0, nb)
        # A rows r0.. (op(A) = A^T: columns r0.. of the stored K x M matrix)
        row_off = (r0 if ta else _mul_idx(b, r0, lda)) if r0 is not None else None
        a_tile = _at(b, ptrs.a, _add_idx(b, off_a, row_off))
        col_off = (_mul_idx(b, n0, ldb) if tb else n0) if n0 is not None else None
        b_tile = _at(b, ptrs.b, _add_idx(b, off_b, col_off))
        _sgemm(self.ctx, ta, tb, mb, nb, self.k, self.alpha, a_tile, lda, b_tile, ldb, self.beta, c_tile, ldc)
        if self.act != "none":
            emit_for(b, 0, mb, lambda r, _: self.activate(b, _at(b, c_tile, _mul_idx(b, r, ldc)), nb) or [])

    def _copy_accumulator(self, b: FunctionBuilder, ptrs: _Pointers, off_acc: SSAValue | None, c_tile: SSAValue,
                          r0: SSAValue | None, mb: Index, n0: SSAValue | None, nb: Index) -> None:
        """The accumulator's tile at rows ``r0``, columns ``n0`` copied into the output tile."""
        rs, cs, ldc = self.acc_row_stride, self.acc_col_stride, self.ldc
        acc_tile = _add_idx(b, _add_idx(b, off_acc, _mul_idx(b, r0, rs) if r0 is not None else None),
                            _mul_idx(b, n0, cs) if n0 is not None else None)

        def copy_row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            src = _at(b, ptrs.acc, _add_idx(b, acc_tile, _mul_idx(b, r, rs)))  # type: ignore[arg-type]
            dst = _at(b, c_tile, _mul_idx(b, r, ldc))
            emit_for(b, 0, nb, lambda c, _c: _store(b, _load(b, src, _mul_idx(b, c, cs)), dst, c) or [])
            return []

        emit_for(b, 0, mb, copy_row)

    def _tiled(self) -> None:
        """The output tiles of each batch's GEMM: spread over the threads when its flops (one
        parallel region per batch) pay for two or more, else in order on this one."""
        ctx, m_total, n = self.ctx, self.m_total, self.n
        self.work = (2.0 * m_total * n * self.k, 0.0)
        threads = min(ctx.target.thread_work.threads(*self.work), max(ctx.target.cores, 1))
        self.rows_per_tile = parallel_tile_rows(m_total, n, threads)
        row_tiles, col_tiles = -(-m_total // self.rows_per_tile), -(-n // EPILOGUE_COLS)
        self.parallel = threads >= 2 and row_tiles * col_tiles >= 2
        self.ptr_values = (self.a, self.w, self.out, self.acc if self.copy_acc else None)
        if self.fold or numel(self.batch_o) == 1:
            self._tiles((None, None, None, None))
        else:
            # per_batch's offsets are of C, A, B (and the accumulator)
            per_batch(ctx, self.sa, self.sb, self.so, lambda offs: self._tiles((offs[1], offs[2], offs[0], offs[3])),
                      self.acc_str[:-2])

    def _tiles(self, offs: Sequence[SSAValue | None]) -> None:
        """One batch's output tiles (``offs``: its offsets into A, B, C and the accumulator)."""
        ctx = self.ctx
        if self.parallel:
            _parallel_tiles(ctx, self.tile, self.ptr_values, offs, self.m_total, self.n, self.rows_per_tile, self.work)
            return
        b = ctx.b
        ptrs = _Pointers(self.pa, self.pb, self.pc, self.pacc)

        def blocks(total: int, size: int, body: Callable[[SSAValue | None, int], None]) -> None:
            full, rest = divmod(total, size)
            if full == 1 and not rest:
                body(None, size)
                return
            emit_for(b, 0, full, lambda i, _: body(_mul_idx(b, i, size), size) or [])
            if rest:
                body(b.i64(full * size) if full else None, rest)

        blocks(self.n, EPILOGUE_COLS,
               lambda n0, nb: blocks(self.m_total, EPILOGUE_ROWS, lambda r0, mb: self.tile(b, ptrs, offs, r0, mb, n0, nb)))


def _emit_matmul_epilogue(ctx: KernelContext, op: buf.MatmulOp) -> None:
    _TiledMatmul(ctx, op).emit()


@dataclass(frozen=True)
class _Pointers:
    """The buffers of a tiled GEMM, as pointers in the function being emitted."""

    a: SSAValue
    b: SSAValue
    c: SSAValue
    acc: SSAValue | None


def parallel_tile_rows(m: int, n: int, threads: int) -> int:
    """Rows of the output tiles a GEMM ``m x n`` is cut into: :data:`EPILOGUE_ROWS`, or fewer
    (a multiple of 16, at least 16) until there are two tiles per thread: a convolution's GEMM
    late in a ResNet (256 x 196) is one 256 x 256 tile, which one thread would run alone."""
    rows = EPILOGUE_ROWS
    col_tiles = -(-n // EPILOGUE_COLS)
    while threads >= 2 and rows > 16 and -(-m // rows) * col_tiles < 2 * threads:
        rows = max(16, (rows // 2 + 15) // 16 * 16)
    return rows


def _parallel_tiles(
    ctx: KernelContext,
    tile: Callable[..., None],
    buffers: tuple[SSAValue, SSAValue, SSAValue, SSAValue | None],
    offs: Sequence[SSAValue | None],
    m_total: int,
    n: int,
    rows_per_tile: int,
    work: tuple[float, float],
) -> None:
    """The output tiles (``rows_per_tile`` x :data:`EPILOGUE_COLS`) spread over the threads
    (tile ``t``: row block ``t % R``, column block ``t / R``; the last ones clipped to the
    matrix): one sgemm (single-threaded) per tile."""
    row_tiles = -(-m_total // rows_per_tile)
    count = row_tiles * -(-n // EPILOGUE_COLS)
    present = [i for i, o in enumerate(offs) if o is not None]
    values = [offs[i] for i in present]

    def body(start: SSAValue, end: SSAValue, _thread: SSAValue, vals: list[SSAValue]) -> None:
        b = ctx.b
        mine: list[SSAValue | None] = [None] * len(offs)
        for i, v in zip(present, vals):
            mine[i] = v
        ptrs = _Pointers(*(ctx.ptr(v) if v is not None else None for v in buffers))  # type: ignore[arg-type]

        def one(t: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            rb = b.add(llvm.URemOp(t, b.i64(row_tiles)))
            cb = b.add(llvm.UDivOp(t, b.i64(row_tiles)))
            r0, n0 = b.mul_i64(rb, b.i64(rows_per_tile)), b.mul_i64(cb, b.i64(EPILOGUE_COLS))
            mb = _clip(b, r0, rows_per_tile, m_total)
            nb = _clip(b, n0, EPILOGUE_COLS, n)
            tile(b, ptrs, mine, r0, mb, n0, nb)
            return []

        emit_for(b, start, end, one)

    ctx.parallel(count, body, values, work=work)


def _clip(b: FunctionBuilder, start: SSAValue, size: int, total: int) -> SSAValue:
    """``min(size, total - start)`` (an i64)."""
    rest = b.add(llvm.SubOp(b.i64(total), start))
    small = b.add(llvm.ICmpOp(rest, b.i64(size), IntegerAttr(llvm.ICmpPredicateFlag.SLT.to_int(), i64)))
    return b.add(llvm.SelectOp(small, rest, b.i64(size)))


# --------------------------------------------------------------------------- registration

_PLAIN_MATMUL = getattr(REGISTRY.get(buf.MatmulOp), "plain", REGISTRY.get(buf.MatmulOp))


def _emit_matmul(ctx: KernelContext, op: Operation) -> None:
    """Activation "none" on one thread, or a separate epilogue asked for
    (`kernels_gemm.SEPARATE_EPILOGUE_ATTR`): the plain emitter of `kernels_blas` (one sgemm on
    OpenBLAS's thread, the accumulator copied in before, the activation a sweep after);
    otherwise (an activation, or a GEMM whose work pays for threads) the tiled one, tiles
    spread over the threads."""
    assert isinstance(op, buf.MatmulOp)
    plain = op.output.type.element_type != f32  # type: ignore[attr-defined]  (float64: dgemm; integers: loops)
    if plain or _symbolic_rows(op) or separate_epilogue(op) or (op.activation.data == "none" and not _pays_for_threads(ctx, op)):
        assert _PLAIN_MATMUL is not None
        _PLAIN_MATMUL(ctx, op)
    else:
        _emit_matmul_epilogue(ctx, op)


def _symbolic_rows(op: buf.MatmulOp) -> bool:
    """Run-time rows (a symbolic M: the plain emitter's one sgemm, then the activation's sweep),
    rather than static matrices, each batch's spread over the threads, over a batch of run-time
    size (`kernels_blas.per_batch`)."""
    sa, sb, so = _shape(op.inputs[0]), _shape(op.inputs[1]), _shape(op.output)
    folds = is_static(sb[:-2]) and numel(sb[:-2]) == 1 and not op.flags[0]
    return not is_static((*sa[-2:], *sb[-2:], *so[-2:])) or (folds and not is_static(sa[:-2]))


def _pays_for_threads(ctx: KernelContext, op: buf.MatmulOp) -> bool:
    """A GEMM (not a GEMV) of two output tiles or more (per batch; all batches' rows when they
    fold into M) whose flops pay for two threads or more: `_emit_matmul_epilogue` spreads it."""
    ta, tb, _, _ = op.flags
    sa, sb = _shape(op.inputs[0]), _shape(op.inputs[1])
    m, k = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    n = sb[-2] if tb else sb[-1]
    m_total = m * numel(sa[:-2]) if numel(sb[:-2]) == 1 and not ta else m
    threads = min(ctx.target.thread_work.threads(2.0 * m_total * n * k, 0.0), max(ctx.target.cores, 1))
    if m_total == 1 or n == 1 or threads < 2:
        return False
    return -(-m_total // parallel_tile_rows(m_total, n, threads)) * -(-n // EPILOGUE_COLS) >= 2


_emit_matmul.plain = _PLAIN_MATMUL  # type: ignore[attr-defined]

REGISTRY[buf.MatmulOp] = _emit_matmul
