"""Emitters of the row kernels: softmax, layer norm and rms norm. Importing this module
registers them into :data:`kernels.REGISTRY` (``convert_buffer_to_llvm`` imports it). The
norms and softmax along the last dim split their rows among the threads when large
(`kernels.split_rows`).

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
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    _NEG_INF,
    REGISTRY,
    SYMBOLIC_KERNELS,
    KernelContext,
    _add_idx,
    _at,
    _fadd,
    _fmax,
    _fmul,
    _fsub,
    _load,
    _mul_idx,
    _require_f32,
    _shape,
    _store,
    check_no_overlap,
    split_rows,
    static_row,
)
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, Index, emit_for
from tensor_graphs.codegen.llvm.scalar import emit_unary
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import numel

#: Columns of the inner dims per tile when softmax runs along a dim that is not the last.
SOFTMAX_TILE = 256


def _entry_alloca(b: FunctionBuilder, count: int) -> SSAValue:
    """A stack buffer of ``count`` f32 in the entry block (so a loop never grows the stack)."""
    size = b.i64(count)
    op = llvm.AllocaOp(size, f32, alignment=64)
    b.entry.insert_op_after(op, size.owner)  # type: ignore[arg-type]
    return op.results[0]


# --------------------------------------------------------------------------- softmax


def _emit_softmax(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.SoftmaxOp)
    x, out = op.inputs[0], op.output
    _require_f32(op, [x, out])
    check_no_overlap(ctx, op, out, [x], in_place_ok=True)
    shape = _shape(out)
    dim, log = op.dim.value.data, bool(op.log.value.data)
    outer, n, inner = numel(shape[:dim]), shape[dim], numel(shape[dim + 1 :])
    static_row(op, n, inner)
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

    emit_for(b, 0, ctx.size(outer), per_outer)


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
    static_row(op, d)
    rows = numel(shape[:-1])
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
    static_row(op, d)
    rows = numel(shape[:-1])
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


# row kernels: their rows may be counted at run time (`split_rows`)
SYMBOLIC_KERNELS.update((buf.SoftmaxOp, buf.LayerNormOp, buf.RmsNormOp))
REGISTRY[buf.SoftmaxOp] = _emit_softmax
REGISTRY[buf.LayerNormOp] = _emit_layer_norm
REGISTRY[buf.RmsNormOp] = _emit_rms_norm
