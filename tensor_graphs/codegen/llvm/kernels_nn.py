"""Emitters for the neural-network kernels: softmax, layer norm, flash attention, and the
matmul activation epilogue. Importing this module registers them into
:data:`kernels.REGISTRY` (``convert_buffer_to_llvm`` imports it).

- `buf.softmax {dim, log}`: rows along ``dim``. Last dim: per row a max loop, an exp-sum loop
  that writes ``exp(x - max)``, and a scale loop (log-softmax: ``x - max - log(sum)``). Any
  other dim: tiles of up to :data:`SOFTMAX_TILE` contiguous columns of the inner dims, with the
  per-column max and sum in a stack buffer, so every inner loop runs over contiguous memory.
  Reductions carry ``reassoc`` (sums) or use ``llvm.maximum`` so LLVM vectorises them.
- `buf.layer_norm {eps}`: per row of the last dim, two passes in fp32 (the mean, as the row's
  first element plus the mean deviation from it, so a large common offset costs no digits;
  then the mean of squared deviations: no cancellation), then ``(x - mean) * rstd * w + b``.
- `buf.rms_norm {eps}`: per row of the last dim, the sum of squares (``reassoc``, so LLVM
  vectorises it), ``rstd = 1 / sqrt(sum / D + eps)``, then ``x * rstd * w``.
- `buf.attention {scale, causal}`: tiled, with an online softmax, never an Sq x Sk matrix::

      for each batch, kv head, query head of its group, query block [q0, q0 + Br):
          m = -inf, l = 0, acc = 0                     (scratch: [S Br*Bc | m Br | l Br | acc Br*Dv])
          for each key block [k0, k0 + Bc) not entirely above the causal diagonal:
              S = scale * Q_blk @ K_blk^T              (sgemm; sgemv when Sq == 1)
              S += mask tile
              per row i, over its visible columns j < vis_i (causal: key j <= i + Sk - Sq):
                  m' = max(m, max_j S); P = exp(S - m'); P = 0 for j >= vis_i
                  l = l * exp(m - m') + sum_j P;  acc_i = acc_i * exp(m - m')
              acc += P @ V_blk                          (sgemm with beta = 1; sgemv when Sq == 1)
          out rows = acc / l

  Key blocks entirely above the diagonal are skipped (the key-block loop ends early), and in
  a block on the diagonal the max and exp loops of each row stop at the diagonal, so causal
  attention does about half the work of the full one. A row whose every score is masked gives
  **0** (torch's SDPA gives NaN there): the running max is then taken as 0 so that no
  ``-inf - -inf`` appears, and ``1 / l`` is replaced by 0 when ``l == 0``. The scratch is
  the op's second output, planned in the arena (layout from
  `lowering.tensor_to_buffer.scratch.attention_tiles`).

  With ``kv_cache`` the keys are the first ``Sk' = past + Sq`` positions of caches with room
  for ``Sk`` (``past`` = ``dims[0]``, read at run time; the kernel first checks
  ``past <= Sk - Sq``): the heads of k and v keep their static stride ``Sk * D``, while the
  number of key blocks (``ceil(Sk' / Bc)``), the width of the last one (``min(Bc, Sk' - k0)``)
  and the causal diagonal (key j visible to query i when ``j <= i + past``) are run-time
  values. Without ``kv_cache`` all of them are constants, as before.
- `buf.matmul` with ``activation != "none"``: the GEMM runs per output tile of
  :data:`EPILOGUE_ROWS` x :data:`EPILOGUE_COLS` (sgemm on ``A[r0:r0+mb] x B[:, n0:n0+nb]`` into
  ``C[r0:r0+mb, n0:n0+nb]`` with ``ldc = N``), and the activation runs over each tile right
  after its sgemm, while the tile is still in cache; an accumulator (``beta != 0``) is copied
  into the tile just before. Matrix-vector products (one output row or column) stay one sgemv
  followed by the activation over the (small) output vector. Activation "none" goes to the
  plain matmul emitter of `kernels`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, f32, i32, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm import kernels as _kernels
from tensor_graphs.codegen.llvm import kernels_gemm as _gemm
from tensor_graphs.codegen.llvm.kernels import (
    CBLAS_NO_TRANS,
    CBLAS_ROW_MAJOR,
    CBLAS_TRANS,
    REGISTRY,
    SGEMM,
    SGEMM_TYPE,
    SGEMV,
    SGEMV_TYPE,
    KernelContext,
    LoweringError,
    check_no_overlap,
    emit_elementwise,
    split_rows,
)
from tensor_graphs.codegen.llvm.loops import (
    FunctionBuilder,
    Index,
    broadcast_strides,
    collapse_dims,
    emit_for,
    emit_strided_nest,
)
from tensor_graphs.codegen.llvm.loops import icmp as _icmp
from tensor_graphs.codegen.llvm.loops import max_i64 as _max_i64
from tensor_graphs.codegen.llvm.loops import min_i64 as _min_i64
from tensor_graphs.codegen.llvm.loops import value as _val
from tensor_graphs.codegen.llvm.scalar import emit_unary
from tensor_graphs.codegen.llvm.scalar import fmax as scalar_fmax
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import contiguous_strides, numel
from tensor_graphs.lowering.tensor_to_buffer.scratch import attention_tiles

#: Columns of the inner dims per tile when softmax runs along a dim that is not the last.
SOFTMAX_TILE = 256
#: Output tile of a matmul with an activation epilogue (rows x columns, 256 KiB of f32).
EPILOGUE_ROWS = 256
EPILOGUE_COLS = 256

_REASSOC = llvm.FastMathAttr((llvm.FastMathFlag.REASSOC, llvm.FastMathFlag.ALLOW_CONTRACT))
_NEG_INF = float("-inf")


# --------------------------------------------------------------------------- helpers


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


def _require_f32(op: Operation, values: Sequence[SSAValue]) -> None:
    bad = [str(v.type.element_type) for v in values if v.type.element_type != f32]  # type: ignore[attr-defined]
    if bad:
        raise LoweringError(f"{op.name}: codegen supports f32 buffers only, got {', '.join(bad)}")


def _i32(b: FunctionBuilder, x: Index) -> SSAValue:
    return b.i32(x) if isinstance(x, int) else b.add(llvm.TruncOp(x, i32))


def _fadd(b: FunctionBuilder, x: SSAValue, y: SSAValue, reassoc: bool = False) -> SSAValue:
    return b.add(llvm.FAddOp(x, y, _REASSOC if reassoc else None))


def _fsub(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.FSubOp(x, y))


def _fmul(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.FMulOp(x, y))


def _fmax(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    # llvm.maximum (NaN-propagating), a max reduction LLVM vectorises. Not llvm.maxnum: with a
    # small constant trip count (a row of 20, 21, 22 or 28 floats) LLVM 22's loop vectoriser
    # aborts on a maxnum reduction ("VPlan cost model and legacy cost model disagreed").
    return scalar_fmax(b, x, y)


def _at(b: FunctionBuilder, ptr: SSAValue, index: SSAValue | int | None) -> SSAValue:
    return b.gep(ptr, index, f32)


def _load(b: FunctionBuilder, ptr: SSAValue, index: SSAValue | int | None) -> SSAValue:
    return b.load(_at(b, ptr, index), f32)


def _store(b: FunctionBuilder, value: SSAValue, ptr: SSAValue, index: SSAValue | int | None) -> None:
    b.store(value, _at(b, ptr, index))


def _add_idx(b: FunctionBuilder, x: SSAValue | None, y: SSAValue | int | None) -> SSAValue | None:
    """``x + y`` for optional i64 offsets (None and 0 mean zero)."""
    if y is None or (isinstance(y, int) and y == 0):
        return x
    y = _val(b, y)
    return y if x is None else b.add_i64(x, y)


def _mul_idx(b: FunctionBuilder, x: SSAValue, c: int) -> SSAValue | None:
    if c == 0:
        return None
    return x if c == 1 else b.mul_i64(x, b.i64(c))


def _entry_alloca(b: FunctionBuilder, count: int) -> SSAValue:
    """A stack buffer of ``count`` f32 in the entry block (so a loop never grows the stack)."""
    size = b.i64(count)
    op = llvm.AllocaOp(size, f32, alignment=64)
    b.entry.insert_op_after(op, size.owner)  # type: ignore[arg-type]
    return op.results[0]


def _sgemm(
    ctx: KernelContext,
    ta: bool,
    tb: bool,
    m: Index,
    n: Index,
    k: Index,
    alpha: float,
    a: SSAValue,
    lda: int,
    bm: SSAValue,
    ldb: int,
    beta: float,
    c: SSAValue,
    ldc: int,
) -> None:
    b = ctx.b
    ctx.declare(SGEMM, SGEMM_TYPE)
    tr = lambda t: b.i32(CBLAS_TRANS if t else CBLAS_NO_TRANS)  # noqa: E731
    b.add(
        llvm.CallOp(
            SGEMM, b.i32(CBLAS_ROW_MAJOR), tr(ta), tr(tb), _i32(b, m), _i32(b, n), _i32(b, k),
            b.f32(alpha), a, b.i32(max(lda, 1)), bm, b.i32(max(ldb, 1)), b.f32(beta), c, b.i32(max(ldc, 1)),
        )
    )


def _sgemv(
    ctx: KernelContext, t: bool, rows: Index, cols: Index, alpha: float, a: SSAValue, lda: int,
    x: SSAValue, incx: int, beta: float, y: SSAValue,
) -> None:
    """``y = alpha * op(A) x + beta * y`` with A a row-major ``rows x cols`` matrix."""
    b = ctx.b
    ctx.declare(SGEMV, SGEMV_TYPE)
    b.add(
        llvm.CallOp(
            SGEMV, b.i32(CBLAS_ROW_MAJOR), b.i32(CBLAS_TRANS if t else CBLAS_NO_TRANS), _i32(b, rows),
            _i32(b, cols), b.f32(alpha), a, b.i32(max(lda, 1)), x, b.i32(max(incx, 1)), b.f32(beta), y, b.i32(1),
        )
    )


# --------------------------------------------------------------------------- softmax


def _emit_softmax(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.SoftmaxOp)
    x, out = op.inputs[0], op.output
    _require_f32(op, [x, out])
    check_no_overlap(ctx, op, out, [x], in_place_ok=True)
    shape = _shape(out)
    dim, log = op.dim.value.data, bool(op.log.value.data)
    outer, n, inner = numel(shape[:dim]), shape[dim], numel(shape[dim + 1 :])
    if numel(shape) == 0:
        return
    if inner == 1:

        def rows_range(b: FunctionBuilder, start: Index, stop: Index) -> None:
            px, po = ctx.ptr(x), ctx.ptr(out)

            def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                base = _mul_idx(b, r, n)
                xr, orow = _at(b, px, base), _at(b, po, base)
                (mx,) = emit_for(b, 0, n, lambda j, c: [_fmax(b, c[0], _load(b, xr, j))], [b.f32(_NEG_INF)])

                def exp_sum(j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
                    e = emit_unary(b, "exp", _fsub(b, _load(b, xr, j), mx))
                    if not log:
                        _store(b, e, orow, j)
                    return [_fadd(b, c[0], e, reassoc=True)]

                (total,) = emit_for(b, 0, n, exp_sum, [b.f32(0.0)])
                if log:
                    shift = _fadd(b, mx, emit_unary(b, "log", total))
                    emit_for(b, 0, n, lambda j, c: _store(b, _fsub(b, _load(b, xr, j), shift), orow, j) or [])
                else:
                    inv = b.add(llvm.FDivOp(b.f32(1.0), total))
                    emit_for(b, 0, n, lambda j, c: _store(b, _fmul(b, _load(b, orow, j), inv), orow, j) or [])
                return []

            emit_for(b, start, stop, row)

        split_rows(ctx, outer, numel(shape), rows_range)
        return

    b = ctx.b
    px, po = ctx.ptr(x), ctx.ptr(out)

    # softmax along a dim with inner dims: tiles of contiguous inner columns
    width = min(inner, SOFTMAX_TILE)
    mx_buf = _entry_alloca(b, 2 * width)
    sum_buf = _at(b, mx_buf, width)

    def tile(base: SSAValue | None, w: int) -> None:
        """Columns [base, base + w) of one outer index; element (j, t) is at base + j*inner + t."""

        def sweep(fn: Callable[[SSAValue | None, SSAValue], None]) -> None:
            def over_j(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                row = _add_idx(b, base, _mul_idx(b, j, inner))
                emit_for(b, 0, w, lambda t, _c: fn(_add_idx(b, row, t), t) or [])
                return []

            emit_for(b, 0, n, over_j)

        def init(t: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            _store(b, b.f32(_NEG_INF), mx_buf, t)
            _store(b, b.f32(0.0), sum_buf, t)
            return []

        emit_for(b, 0, w, init)
        sweep(lambda e, t: _store(b, _fmax(b, _load(b, mx_buf, t), _load(b, px, e)), mx_buf, t))

        def exp_sum(e: SSAValue | None, t: SSAValue) -> None:
            p = emit_unary(b, "exp", _fsub(b, _load(b, px, e), _load(b, mx_buf, t)))
            if not log:
                _store(b, p, po, e)
            _store(b, _fadd(b, _load(b, sum_buf, t), p), sum_buf, t)

        sweep(exp_sum)
        if log:
            emit_for(
                b, 0, w,
                lambda t, _c: _store(b, _fadd(b, _load(b, mx_buf, t), emit_unary(b, "log", _load(b, sum_buf, t))), mx_buf, t) or [],
            )
            sweep(lambda e, t: _store(b, _fsub(b, _load(b, px, e), _load(b, mx_buf, t)), po, e))
        else:
            emit_for(
                b, 0, w,
                lambda t, _c: _store(b, b.add(llvm.FDivOp(b.f32(1.0), _load(b, sum_buf, t))), sum_buf, t) or [],
            )
            sweep(lambda e, t: _store(b, _fmul(b, _load(b, po, e), _load(b, sum_buf, t)), po, e))

    full, rest = divmod(inner, width)

    def per_outer(o: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        base = _mul_idx(b, o, n * inner)
        emit_for(b, 0, full, lambda c, _c: tile(_add_idx(b, base, _mul_idx(b, c, width)), width) or [])
        if rest:
            tile(_add_idx(b, base, full * width), rest)
        return []

    emit_for(b, 0, outer, per_outer)


# --------------------------------------------------------------------------- layer norm


def _emit_layer_norm(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.LayerNormOp)
    x, w, bias = op.inputs
    out = op.output
    _require_f32(op, [x, w, bias, out])
    check_no_overlap(ctx, op, out, [x], in_place_ok=True)
    check_no_overlap(ctx, op, out, [w, bias], in_place_ok=False)
    shape = _shape(out)
    if numel(shape) == 0:
        return
    d = shape[-1]
    rows = numel(shape) // d
    eps = op.eps.value.data
    def rows_range(b: FunctionBuilder, start: Index, stop: Index) -> None:
        px, pw, pb, po = ctx.ptr(x), ctx.ptr(w), ctx.ptr(bias), ctx.ptr(out)
        inv_d = b.f32(1.0 / d)

        def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            base = _mul_idx(b, r, d)
            xr, orow = _at(b, px, base), _at(b, po, base)
            # deviations are taken around the row's first element, mean = x0 + shift, and never
            # rebuilt as one f32: a large common offset (|mean| >> std) then costs no digits
            x0 = _load(b, xr, None)
            (total,) = emit_for(
                b, 0, d, lambda j, c: [_fadd(b, c[0], _fsub(b, _load(b, xr, j), x0), reassoc=True)], [b.f32(0.0)]
            )
            shift = _fmul(b, total, inv_d)

            def dev(j: SSAValue) -> SSAValue:
                return _fsub(b, _fsub(b, _load(b, xr, j), x0), shift)

            def sq(j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
                e = dev(j)
                return [_fadd(b, c[0], _fmul(b, e, e), reassoc=True)]

            (ss,) = emit_for(b, 0, d, sq, [b.f32(0.0)])
            var = _fmul(b, ss, inv_d)
            rstd = b.add(llvm.FDivOp(b.f32(1.0), b.add(llvm.FSqrtOp(_fadd(b, var, b.f32(eps))))))

            def norm(j: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
                y = _fmul(b, _fmul(b, dev(j), rstd), _load(b, pw, j))
                _store(b, _fadd(b, y, _load(b, pb, j)), orow, j)
                return []

            emit_for(b, 0, d, norm)
            return []

        emit_for(b, start, stop, row)

    split_rows(ctx, rows, numel(shape), rows_range)


# --------------------------------------------------------------------------- rms norm


def _emit_rms_norm(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.RmsNormOp)
    x, w = op.inputs
    out = op.output
    _require_f32(op, [x, w, out])
    check_no_overlap(ctx, op, out, [x], in_place_ok=True)
    check_no_overlap(ctx, op, out, [w], in_place_ok=False)
    shape = _shape(out)
    if numel(shape) == 0:
        return
    d = shape[-1]
    rows = numel(shape) // d
    eps = op.eps.value.data
    def rows_range(b: FunctionBuilder, start: Index, stop: Index) -> None:
        px, pw, po = ctx.ptr(x), ctx.ptr(w), ctx.ptr(out)
        inv_d = b.f32(1.0 / d)

        def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            base = _mul_idx(b, r, d)
            xr, orow = _at(b, px, base), _at(b, po, base)

            def sq(j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
                e = _load(b, xr, j)
                return [_fadd(b, c[0], _fmul(b, e, e), reassoc=True)]

            (ss,) = emit_for(b, 0, d, sq, [b.f32(0.0)])
            ms = _fmul(b, ss, inv_d)
            rstd = b.add(llvm.FDivOp(b.f32(1.0), b.add(llvm.FSqrtOp(_fadd(b, ms, b.f32(eps))))))

            def norm(j: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
                _store(b, _fmul(b, _fmul(b, _load(b, xr, j), rstd), _load(b, pw, j)), orow, j)
                return []

            emit_for(b, 0, d, norm)
            return []

        emit_for(b, start, stop, row)

    split_rows(ctx, rows, numel(shape), rows_range)


# --------------------------------------------------------------------------- attention


def _transpose_into(b: FunctionBuilder, src: SSAValue, rows: Index, cols: int, dest: SSAValue, ld: int) -> None:
    """``dest[c * ld + r] = src[r * cols + c]`` for ``r < rows`` (a run-time count up to ``ld``),
    and zero for ``rows <= r < ld``: a key block transposed into the GEMM's B panel."""

    def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        base = _mul_idx(b, r, cols)
        emit_for(b, 0, cols, lambda c, _c: _store(b, _load(b, src, _add_idx(b, base, c)), dest, b.add_i64(_mul_idx(b, c, ld) or b.i64(0), r)) or [])
        return []

    emit_for(b, 0, rows, row)
    if not (isinstance(rows, int) and rows == ld):
        zero = b.f32(0.0)

        def zero_row(c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            line = _at(b, dest, _mul_idx(b, c, ld))
            emit_for(b, rows, ld, lambda r, _r: _store(b, zero, line, r) or [])
            return []

        emit_for(b, 0, cols, zero_row)


def _pad_rows_into(b: FunctionBuilder, src: SSAValue, rows: Index, cols: int, dest: SSAValue, ld: int) -> None:
    """``dest[r * ld + c] = src[r * cols + c]`` for ``r < rows``, zero for ``cols <= c < ld``."""
    zero = b.f32(0.0)

    def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        s_row, d_row = _at(b, src, _mul_idx(b, r, cols)), _at(b, dest, _mul_idx(b, r, ld))
        emit_for(b, 0, cols, lambda c, _c: _store(b, _load(b, s_row, c), d_row, c) or [])
        emit_for(b, cols, ld, lambda c, _c: _store(b, zero, d_row, c) or [])
        return []

    emit_for(b, 0, rows, row)


def _tile_gemm(
    b: FunctionBuilder,
    rows: int,
    k: Index,
    a: SSAValue,
    lda: int,
    bm: SSAValue,
    ldb: int,
    c: SSAValue,
    ldc: int,
    alpha: float = 1.0,
    accumulate: bool = False,
) -> None:
    """``C[rows, ldc] (+)= alpha * A[rows, k] @ B[k, ldc]`` with register tiles (`kernels_gemm`):
    ``ldc`` (a multiple of 16) columns in panels of up to 64, A and C row-major (row strides
    ``lda``, ``ldc``), B's rows ``ldb`` floats apart; ``k`` may be a run-time count."""
    for c0 in range(0, ldc, 64):
        vectors = min(64, ldc - c0) // 16
        mr = _gemm.rows_per_tile(vectors)

        def tile(r0: SSAValue | int, n: int) -> None:
            a_row = _at(b, a, _mul_idx(b, _val(b, r0), lda) if r0 != 0 else None)
            c_tile = _at(b, c, _add_idx(b, _mul_idx(b, _val(b, r0), ldc) if r0 != 0 else None, c0))
            init = _gemm.load_tile(b, n, vectors, c_tile, ldc) if accumulate else [_gemm.splat(b, b.f32(0.0))] * (n * vectors)
            acc = _gemm.register_tile(
                b, n, vectors, k,
                lambda i, kk: _at(b, a_row, b.add_i64(kk, b.i64(i * lda)) if i else kk),
                lambda kk: _at(b, bm, b.add_i64(_mul_idx(b, kk, ldb) or b.i64(0), b.i64(c0)) if c0 else _mul_idx(b, kk, ldb)),
                init, alpha=alpha, b_aligned=False,  # (the arena base is 64-byte aligned only in CompiledGraph)
            )
            _gemm.store_tile(b, acc, n, vectors, c_tile, ldc)

        full, rest = divmod(rows, mr)
        emit_for(b, 0, full, lambda r, _: tile(b.mul_i64(r, b.i64(mr)), mr) or [])
        if rest:
            tile(full * mr, rest)


def _emit_attention(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.AttentionOp)
    q, k, v = op.inputs[:3]
    mask = op.inputs[3] if len(op.inputs) == 4 else None
    out = op.output
    sq_, sk_, sv_, so = _shape(q), _shape(k), _shape(v), _shape(out)
    ins = [q, k, v] + ([mask] if mask is not None else [])
    _require_f32(op, [*ins, out])
    if numel(so) == 0:
        return
    b = ctx.b
    check_no_overlap(ctx, op, out, ins, in_place_ok=False)
    if sk_[-2] == 0:  # no keys at all: like a fully masked row, the result is 0
        emit_for(b, 0, numel(so), lambda i, _: _store(b, b.f32(0.0), ctx.ptr(out), i) or [])
        return
    tiles = attention_tiles(sq_, sk_, sv_)
    if len(op.outputs) < 2:
        raise LoweringError(
            f"{op.name}: no scratch buffer (the second output); the tiled kernel needs "
            f"memref<{tiles.elements}xf32> of scratch, planned by plan-memory"
        )
    scratch = op.outputs[1]
    if scratch.type.element_type != f32 or numel(_shape(scratch)) < tiles.elements:  # type: ignore[attr-defined]
        raise LoweringError(f"{op.name}: the scratch must hold at least {tiles.elements} f32, got {scratch.type}")
    check_no_overlap(ctx, op, scratch, [*ins, out], in_place_ok=False)
    slots = tiles.slots(numel(_shape(scratch)))  # one set of tiles per thread

    scale, causal = op.scale.value.data, bool(op.causal.value.data)
    batch = sq_[:-3]
    heads, seq_q, dim = sq_[-3], sq_[-2], sq_[-1]
    kv_heads, seq_k, dim_v = sk_[-3], sk_[-2], sv_[-1]
    group = heads // kv_heads
    br, bc = tiles.br, tiles.bc
    n_qblocks = -(-seq_q // br)
    last_rows = seq_q - (n_qblocks - 1) * br  # rows of the last query block
    bc_pad, dv_pad = tiles.bc_pad, tiles.dv_pad
    # keys in use (seq_k is also the head stride of k and v), key blocks, and the causal
    # diagonal (key j is visible to query i when j <= i + diag): run-time values over a KV cache
    if bool(op.kv_cache.value.data):
        if mask is not None:
            raise LoweringError(f"{op.name}: kv_cache attention takes no mask (keys past the run-time length are ignored)")
        if not causal and seq_q > 1:
            raise LoweringError(f"{op.name}: kv_cache attention with more than one query must be causal")
        if seq_q > seq_k:
            raise LoweringError(f"{op.name}: {seq_q} queries do not fit a cache of {seq_k} positions")
        past = ctx.dim(0)
        ule = IntegerAttr(llvm.ICmpPredicateFlag.ULE.to_int(), i64)
        ctx.check(
            b.add(llvm.ICmpOp(past, b.i64(seq_k - seq_q), ule)),
            f"attention over a kv cache: position {{past}} + {seq_q} queries exceed its {seq_k} positions",
        )
        run_time = [past]  # keys = past + Sq, ceil(keys / Bc) key blocks, the diagonal at past
    else:
        run_time = []
    items = numel(batch) * heads * n_qblocks  # (batch, head, query block): split among the threads

    def work(start: SSAValue, end: SSAValue, tid: SSAValue, values: list[SSAValue]) -> None:
        """Items ``[start, end)`` of (batch, head, query block), on scratch slot ``tid``."""
        b = ctx.b
        keys: Index
        n_kblocks: Index
        diag: Index
        if values:
            (past,) = values
            keys = b.add_i64(past, b.i64(seq_q))
            n_kblocks = b.add(llvm.SDivOp(b.add_i64(keys, b.i64(bc - 1)), b.i64(bc)))
            diag = past
        else:
            keys, n_kblocks, diag = seq_k, -(-seq_k // bc), seq_k - seq_q
        pq, pk, pv, po = ctx.ptr(q), ctx.ptr(k), ctx.ptr(v), ctx.ptr(out)
        ps = _at(b, ctx.ptr(scratch), _mul_idx(b, tid, tiles.slot_elements))
        pm = ctx.ptr(mask) if mask is not None else None
        p_scores, p_max, p_sum, p_acc, p_kt, p_vp = (
            _at(b, ps, off) for off in (tiles.scores, tiles.m, tiles.l, tiles.acc, tiles.kt, tiles.vp)
        )

        scores_shape = (*sq_[:-1], seq_k)
        ms = broadcast_strides(_shape(mask), scores_shape) if mask is not None else (0,) * len(scores_shape)
        ms_h, ms_q, ms_k = ms[-3], ms[-2], ms[-1]
        per_batch = [
            tuple(s * heads * seq_q * dim for s in contiguous_strides(batch)),
            tuple(s * kv_heads * seq_k * dim for s in contiguous_strides(batch)),
            tuple(s * kv_heads * seq_k * dim_v for s in contiguous_strides(batch)),
            tuple(s * heads * seq_q * dim_v for s in contiguous_strides(batch)),
            tuple(ms[: len(batch)]),
        ]
        neg_inf, zero = b.f32(_NEG_INF), b.f32(0.0)

        def rows_in_block(start: SSAValue, block: int, total: Index) -> Index:
            if isinstance(total, int) and total % block == 0:
                return block
            return _min_i64(b, b.i64(block), b.add(llvm.SubOp(_val(b, total), start)))

        def by_rows(qb: SSAValue, emit: Callable[[int], None]) -> None:
            """``emit(rows)`` for the query block's row count, a static one: Br, or for the last
            block of a sequence that Br does not divide, what is left."""
            if last_rows == br:
                emit(br)
                return
            last, other, after = b.new_block(), b.new_block(), b.new_block()
            b.add(llvm.CondBrOp(_icmp(b, "eq", qb, b.i64(n_qblocks - 1)), last, [], other, []))
            for block, n in ((last, last_rows), (other, br)):
                b.block = block
                emit(n)
                b.add(llvm.BrOp(after))
            b.block = after

        def query_block(offs: dict[str, SSAValue | None], qb: SSAValue) -> None:
            q0 = _mul_idx(b, qb, br) or b.i64(0)
            rows = rows_in_block(q0, br, seq_q)
            q_ptr = _at(b, pq, _add_idx(b, offs["q"], _mul_idx(b, q0, dim)))

            def init_row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                _store(b, neg_inf, p_max, r)
                _store(b, zero, p_sum, r)
                return []

            emit_for(b, 0, rows, init_row)
            acc_len = rows * dv_pad if isinstance(rows, int) else _mul_idx(b, rows, dv_pad)
            emit_for(b, 0, acc_len or 0, lambda i, _: _store(b, zero, p_acc, i) or [])

            if causal:  # key blocks past the last visible key of the block's last row are skipped
                if isinstance(diag, int):
                    last = b.add_i64(q0, b.i64(rows - 1 + diag)) if isinstance(rows, int) else b.add_i64(
                        b.add_i64(q0, rows), b.i64(diag - 1)
                    )
                else:
                    last = b.add_i64(q0, b.i64(rows - 1)) if isinstance(rows, int) else b.add_i64(
                        b.add_i64(q0, rows), b.i64(-1)
                    )
                    last = b.add_i64(last, diag)
                blocks = b.add_i64(b.add(llvm.SDivOp(last, b.i64(bc))), b.i64(1))
                blocks = _min_i64(b, blocks, _val(b, n_kblocks))
                kb_end: Index = b.add(llvm.SelectOp(_icmp(b, "slt", last, b.i64(0)), b.i64(0), blocks))
            else:
                kb_end = n_kblocks

            def key_block(kb: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                k0 = _mul_idx(b, kb, bc) or b.i64(0)
                cols = rows_in_block(k0, bc, keys)
                k_ptr = _at(b, pk, _add_idx(b, offs["k"], _mul_idx(b, k0, dim)))
                v_ptr = _at(b, pv, _add_idx(b, offs["v"], _mul_idx(b, k0, dim_v)))
                # kt = K_blk^T [D, Bc'] (zero past the block's keys), then S = scale * Q_blk @ kt
                _transpose_into(b, k_ptr, cols, dim, p_kt, bc_pad)
                by_rows(qb, lambda n: _tile_gemm(b, n, dim, q_ptr, dim, p_kt, bc_pad, p_scores, bc_pad, scale))

                def row(r: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
                    s_row = _at(b, p_scores, _mul_idx(b, r, bc_pad))
                    qi = b.add_i64(q0, r)
                    if pm is not None:
                        m_base = _add_idx(b, _add_idx(b, offs["mask"], _mul_idx(b, qi, ms_q)), _mul_idx(b, k0, ms_k))
                        m_row = _at(b, pm, m_base)
                    if causal:  # columns [vis, cols) lie above the diagonal: P = 0 there, no exp
                        if isinstance(diag, int):
                            first_hidden = b.add(llvm.SubOp(b.add_i64(qi, b.i64(diag + 1)), k0))
                        else:
                            first_hidden = b.add(llvm.SubOp(b.add_i64(b.add_i64(qi, diag), b.i64(1)), k0))
                        vis = _min_i64(b, _max_i64(b, first_hidden, b.i64(0)), _val(b, cols))
                        emit_for(b, vis, cols, lambda c, _z: _store(b, zero, s_row, c) or [])
                    else:
                        vis = cols

                    if pm is not None:  # its own loop: LLVM does not vectorise a max reduction that also stores

                        def add_mask(c: SSAValue, _a: list[SSAValue]) -> list[SSAValue]:
                            _store(b, _fadd(b, _load(b, s_row, c), _load(b, m_row, _mul_idx(b, c, ms_k))), s_row, c)
                            return []

                        emit_for(b, 0, vis, add_mask)
                    (mx,) = emit_for(b, 0, vis, lambda c, acc: [_fmax(b, acc[0], _load(b, s_row, c))], [neg_inf])
                    m_old = _load(b, p_max, r)
                    m_new = _fmax(b, m_old, mx)
                    # every score so far masked: use 0 as the max so that exp(-inf - 0) = 0, not NaN
                    all_masked = b.add(llvm.FCmpOp(m_new, neg_inf, "oeq"))
                    m_use = b.add(llvm.SelectOp(all_masked, zero, m_new))
                    alpha = emit_unary(b, "exp", _fsub(b, m_old, m_use))

                    def exp_sum(c: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                        p = emit_unary(b, "exp", _fsub(b, _load(b, s_row, c), m_use))
                        _store(b, p, s_row, c)
                        return [_fadd(b, acc[0], p, reassoc=True)]

                    (total,) = emit_for(b, 0, vis, exp_sum, [zero])
                    _store(b, _fadd(b, _fmul(b, _load(b, p_sum, r), alpha), total), p_sum, r)
                    _store(b, m_new, p_max, r)
                    acc_row = _at(b, p_acc, _mul_idx(b, r, dv_pad))
                    emit_for(b, 0, dim_v, lambda c, _a: _store(b, _fmul(b, _load(b, acc_row, c), alpha), acc_row, c) or [])
                    return []

                emit_for(b, 0, rows, row)
                # acc += P @ V_blk (the rows of V padded to whole vectors first when Dv is not)
                if tiles.pads_values:
                    _pad_rows_into(b, v_ptr, cols, dim_v, p_vp, dv_pad)
                    v_src, v_ld = p_vp, dv_pad
                else:
                    v_src, v_ld = v_ptr, dim_v
                by_rows(qb, lambda n: _tile_gemm(b, n, cols, p_scores, bc_pad, v_src, v_ld, p_acc, dv_pad, accumulate=True))
                return []

            emit_for(b, 0, kb_end, key_block)

            o_base = _add_idx(b, offs["out"], _mul_idx(b, q0, dim_v))

            def finish(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                l_r = _load(b, p_sum, r)
                inv = b.add(llvm.FDivOp(b.f32(1.0), l_r))
                inv = b.add(llvm.SelectOp(b.add(llvm.FCmpOp(l_r, zero, "ogt")), inv, zero))
                acc_row = _at(b, p_acc, _mul_idx(b, r, dv_pad))
                o_row = _at(b, po, _add_idx(b, o_base, _mul_idx(b, r, dim_v)))
                emit_for(b, 0, dim_v, lambda c, _a: _store(b, _fmul(b, _load(b, acc_row, c), inv), o_row, c) or [])
                return []

            emit_for(b, 0, rows, finish)

        def item(it: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            """Item ``it`` = ((batch index * heads) + head) * n_qblocks + query block."""
            qb = b.add(llvm.SRemOp(it, b.i64(n_qblocks))) if n_qblocks > 1 else b.i64(0)
            rest = b.add(llvm.SDivOp(it, b.i64(n_qblocks))) if n_qblocks > 1 else it
            h = b.add(llvm.SRemOp(rest, b.i64(heads)))
            rest = b.add(llvm.SDivOp(rest, b.i64(heads)))
            oq = ok = ov = oo = om = None
            for d in reversed(range(len(batch))):  # the batch index, innermost dim first
                idx = b.add(llvm.SRemOp(rest, b.i64(batch[d]))) if d else rest
                rest = b.add(llvm.SDivOp(rest, b.i64(batch[d]))) if d else rest
                oq, ok, ov, oo, om = (_add_idx(b, o, _mul_idx(b, idx, st[d])) for o, st in zip((oq, ok, ov, oo, om), per_batch))
            kh = b.add(llvm.SDivOp(h, b.i64(group))) if group > 1 else h
            offs = {
                "q": _add_idx(b, oq, _mul_idx(b, h, seq_q * dim)),
                "k": _add_idx(b, ok, _mul_idx(b, kh, seq_k * dim)),
                "v": _add_idx(b, ov, _mul_idx(b, kh, seq_k * dim_v)),
                "out": _add_idx(b, oo, _mul_idx(b, h, seq_q * dim_v)),
                "mask": _add_idx(b, om, _mul_idx(b, h, ms_h)),
            }
            query_block(offs, qb)
            return []

        emit_for(b, start, end, item)

    ctx.parallel(items, work, run_time, max_threads=slots)


# --------------------------------------------------------------------------- matmul epilogue


def _emit_matmul_epilogue(ctx: KernelContext, op: buf.MatmulOp) -> None:
    b = ctx.b
    act = op.activation.data
    ta, tb, alpha, beta = op.flags
    a, w = op.inputs[0], op.inputs[1]
    acc = op.inputs[2] if len(op.inputs) == 3 else None
    out = op.output
    _require_f32(op, [*op.inputs, out])
    sa, sb, so = _shape(a), _shape(w), _shape(out)
    m, k = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    n = sb[-2] if tb else sb[-1]
    if numel(so) == 0:
        return
    check_no_overlap(ctx, op, out, [a, w], in_place_ok=False)
    use_acc = acc is not None and beta != 0.0
    acc_in_place = use_acc and ctx.same_bytes(acc, out) and _shape(acc) == so  # type: ignore[arg-type]
    if use_acc and not acc_in_place:
        check_no_overlap(ctx, op, out, [acc], in_place_ok=False)  # type: ignore[list-item]
    if not use_acc:
        beta = 0.0
    copy_acc = use_acc and not acc_in_place

    batch_a, batch_b, batch_o = sa[:-2], sb[:-2], so[:-2]
    fold = numel(batch_b) == 1 and not ta
    m_total = m * numel(batch_a) if fold else m
    lda, ldb, ldc = max(sa[-1], 1), max(sb[-1], 1), max(n, 1)
    if max(m_total, n, k, lda, ldb, ldc) > _kernels._I32_MAX:
        raise LoweringError(f"{op.name}: dims {list(sa)} x {list(sb)} overflow the 32-bit BLAS interface")
    pa, pb, pc = ctx.ptr(a), ctx.ptr(w), ctx.ptr(out)
    pacc = ctx.ptr(acc) if copy_acc else None  # type: ignore[arg-type]
    acc_str = broadcast_strides(_shape(acc), so) if copy_acc else (0,) * len(so)  # type: ignore[arg-type]

    def activate(ptr: SSAValue, count: Index) -> None:
        emit_for(b, 0, count, lambda i, _: _store(b, emit_unary(b, act, _load(b, ptr, i)), ptr, i) or [])

    gemv = (m_total == 1 or n == 1) and k > 1
    if gemv:  # one sgemv per matrix, then the activation over the (small) output vector
        if copy_acc:
            emit_elementwise(ctx, out, [acc], lambda bb, vals: vals[0])  # type: ignore[list-item]

        def gemv_call(off_a: SSAValue | None, off_b: SSAValue | None, off_c: SSAValue | None) -> None:
            ma, mb_, c = _at(b, pa, off_a), _at(b, pb, off_b), _at(b, pc, off_c)
            if m_total == 1:  # out[1, N] = a[K] . op(B)
                rows, cols, t = (n, k, False) if tb else (k, n, True)
                _sgemv(ctx, t, rows, cols, alpha, mb_, ldb, ma, lda if ta else 1, beta, c)
            else:  # out[M, 1] = op(A) . b[K]
                rows, cols, t = (k, m_total, True) if ta else (m_total, k, False)
                _sgemv(ctx, t, rows, cols, alpha, ma, lda, mb_, 1 if tb else ldb, beta, c)

        if fold or numel(batch_o) == 1:
            gemv_call(None, None, None)
        else:
            _per_batch(b, sa, sb, so, lambda offs: gemv_call(offs[1], offs[2], offs[0]))
        activate(pc, numel(so))
        return

    # the rows of C (all batches stacked when folded) must have one stride in the accumulator
    if copy_acc:
        row_shape = so[:-1] if fold else so[-2:-1]
        out_rs = contiguous_strides(so)[:-1] if fold else (n,)
        acc_rs = acc_str[:-1] if fold else acc_str[-2:-1]
        cshape, cstrides = collapse_dims(row_shape, [out_rs, acc_rs])
        if len(cshape) > 1:  # an unusual broadcast: copy the whole accumulator up front
            emit_elementwise(ctx, out, [acc], lambda bb, vals: vals[0])  # type: ignore[list-item]
            copy_acc = False
            acc_row_stride = 0
        else:
            acc_row_stride = cstrides[1][0] if cshape else 0
    acc_col_stride = acc_str[-1]

    def tiles(off_a: SSAValue | None, off_b: SSAValue | None, off_c: SSAValue | None, off_acc: SSAValue | None) -> None:
        def tile(r0: SSAValue | None, mb: int, n0: SSAValue | None, nb: int) -> None:
            c_tile = _at(b, pc, _add_idx(b, _add_idx(b, off_c, _mul_idx(b, r0, ldc) if r0 is not None else None), n0))
            if copy_acc:
                acc_tile = _add_idx(
                    b,
                    _add_idx(b, off_acc, _mul_idx(b, r0, acc_row_stride) if r0 is not None else None),
                    _mul_idx(b, n0, acc_col_stride) if n0 is not None else None,
                )

                def copy_row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                    src = _at(b, pacc, _add_idx(b, acc_tile, _mul_idx(b, r, acc_row_stride)))  # type: ignore[arg-type]
                    dst = _at(b, c_tile, _mul_idx(b, r, ldc))
                    emit_for(b, 0, nb, lambda c, _c: _store(b, _load(b, src, _mul_idx(b, c, acc_col_stride)), dst, c) or [])
                    return []

                emit_for(b, 0, mb, copy_row)
            # A rows r0.. (op(A) = A^T: columns r0.. of the stored K x M matrix)
            row_off = (r0 if ta else _mul_idx(b, r0, lda)) if r0 is not None else None
            a_tile = _at(b, pa, _add_idx(b, off_a, row_off))
            col_off = (_mul_idx(b, n0, ldb) if tb else n0) if n0 is not None else None
            b_tile = _at(b, pb, _add_idx(b, off_b, col_off))
            _sgemm(ctx, ta, tb, mb, nb, k, alpha, a_tile, lda, b_tile, ldb, beta, c_tile, ldc)

            def act_row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                activate(_at(b, c_tile, _mul_idx(b, r, ldc)), nb)
                return []

            emit_for(b, 0, mb, act_row)

        def blocks(total: int, size: int, body: Callable[[SSAValue | None, int], None]) -> None:
            full, rest = divmod(total, size)
            if full == 1 and not rest:
                body(None, size)
                return
            emit_for(b, 0, full, lambda i, _: body(_mul_idx(b, i, size), size) or [])
            if rest:
                body(b.i64(full * size) if full else None, rest)

        blocks(n, EPILOGUE_COLS, lambda n0, nb: blocks(m_total, EPILOGUE_ROWS, lambda r0, mb: tile(r0, mb, n0, nb)))

    if fold or numel(batch_o) == 1:
        tiles(None, None, None, None)
    else:
        _per_batch(b, sa, sb, so, lambda offs: tiles(offs[1], offs[2], offs[0], offs[3]), acc_str[:-2])


def _per_batch(
    b: FunctionBuilder,
    sa: tuple[int, ...],
    sb: tuple[int, ...],
    so: tuple[int, ...],
    body: Callable[[list[SSAValue | None]], None],
    acc_batch_strides: Sequence[int] | None = None,
) -> None:
    """One ``body(offsets)`` per broadcast batch index: offsets of C, A, B (and the accumulator)."""
    batch_o = so[:-2]
    mat_a, mat_b, mat_c = sa[-2] * sa[-1], sb[-2] * sb[-1], so[-2] * so[-1]
    strides = [
        tuple(s * mat_c for s in contiguous_strides(batch_o)),
        tuple(s * mat_a for s in broadcast_strides(sa[:-2], batch_o)),
        tuple(s * mat_b for s in broadcast_strides(sb[:-2], batch_o)),
    ]
    if acc_batch_strides is not None:
        strides.append(tuple(acc_batch_strides))
    emit_strided_nest(b, batch_o, strides, body)


# --------------------------------------------------------------------------- registration

_PLAIN_MATMUL = getattr(REGISTRY.get(buf.MatmulOp), "plain", REGISTRY.get(buf.MatmulOp))


def _emit_matmul(ctx: KernelContext, op: Operation) -> None:
    """Activation "none": the plain emitter of `kernels`; otherwise the tiled epilogue."""
    assert isinstance(op, buf.MatmulOp)
    if op.activation.data == "none":
        assert _PLAIN_MATMUL is not None
        _PLAIN_MATMUL(ctx, op)
    else:
        _emit_matmul_epilogue(ctx, op)


_emit_matmul.plain = _PLAIN_MATMUL  # type: ignore[attr-defined]

REGISTRY[buf.SoftmaxOp] = _emit_softmax
REGISTRY[buf.LayerNormOp] = _emit_layer_norm
REGISTRY[buf.RmsNormOp] = _emit_rms_norm
REGISTRY[buf.AttentionOp] = _emit_attention
REGISTRY[buf.MatmulOp] = _emit_matmul
