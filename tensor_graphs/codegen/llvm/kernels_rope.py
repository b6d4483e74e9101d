"""Emitter for `buf.rope` (rotary embedding, rotate-half form); importing this module registers
it into :data:`kernels.REGISTRY` (``convert_buffer_to_llvm`` imports it).

For each row of the last dim ``D`` (``h = D / 2``), one loop over ``j < h``::

    out[j]     = x[j]     * cos[j]     - x[j + h] * sin[j]
    out[j + h] = x[j + h] * cos[j + h] + x[j]     * sin[j + h]

The rows are a strided nest over the leading dims (contiguous ones collapse; split among the
threads when the op is large, see `kernels.parallel_nest`; a symbolic count of rows, a prefill
of any length, counted at run time); cos and sin are
read through their broadcast strides, so a row of the tables is shared by every head without a
copy. The inner loop is straight-line loads, multiplies and stores at unit stride (or a
loop-invariant table element when the tables broadcast along the last dim), which LLVM
vectorises. ``x`` may be the output itself (each iteration reads ``x[j]`` and ``x[j + h]``
before writing them); the tables must not overlap the output.

With a norm weight ``w`` (``ins(x, cos, sin, w) {eps}``, `fuse-rms-norm-rope`) each row is
RMS-normalised on the way: a first loop sums its squares (``reassoc``, vectorised), ``rstd =
1 / sqrt(sum / D + eps)``, then the loop above reads ``x[j] * rstd * w[j]`` for ``x[j]`` (as
`buf.rms_norm` rounds it), the normalised row never written.
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    SYMBOLIC_KERNELS,
    Access,
    KernelContext,
    LoweringError,
    Operand,
    _fadd,
    _fmul,
    _require_f32,
    _require_float,
    _shape,
    check_no_overlap,
    parallel_nest,
)
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, broadcast_strides, emit_for, emit_loop, emit_strided_nest
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import contiguous_strides, numel


def _index(b: FunctionBuilder, j: SSAValue, stride: int) -> SSAValue | None:
    """``j * stride`` for a table's last-dim stride (1, or 0 when it broadcasts)."""
    return b.offset(None, j, stride)


def _emit_rope(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.RopeOp)
    x, cos, sin = op.inputs[:3]
    norm = op.inputs[3] if len(op.inputs) == 4 else None
    out = op.output
    el = _require_float(op, [x, cos, sin, out])
    if norm is not None:
        _require_f32(op, [x, cos, sin, norm, out])
    shape = _shape(out)
    if _shape(x) != shape or not shape or not isinstance(shape[-1], int) or shape[-1] % 2:
        raise LoweringError(f"{op.name}: input {x.type} and output {out.type} need one shape with an even last dim")
    check_no_overlap(ctx, op, out, [x], in_place_ok=True)
    check_no_overlap(ctx, op, out, [cos, sin, *([norm] if norm is not None else [])], in_place_ok=False)
    if numel(shape) == 0:
        return
    d = shape[-1]
    h = d // 2
    own = contiguous_strides(shape)
    cos_st, sin_st = broadcast_strides(_shape(cos), shape), broadcast_strides(_shape(sin), shape)
    cs, ss = cos_st[-1], sin_st[-1]
    eps = op.eps.value.data if norm is not None else 0.0  # type: ignore[union-attr]

    def rows(b: FunctionBuilder, sub: tuple[int, ...], acc: list[Access]) -> None:
        """The rows of ``sub`` from the accesses' first elements on."""
        po, px, pc, ps = (a.ptr for a in acc[:4])
        pw = acc[4].ptr if norm is not None else None

        def row(offsets: list[SSAValue | None]) -> None:
            o_row, x_row, c_row, s_row = offsets[:4]
            # pointers to the lower and upper half of this row of each buffer
            x_lo, o_lo = b.gep(px, x_row, el), b.gep(po, o_row, el)
            x_hi, o_hi = b.gep(x_lo, h, el), b.gep(o_lo, h, el)
            c_lo, s_lo = b.gep(pc, c_row, el), b.gep(ps, s_row, el)
            c_hi, s_hi = b.gep(c_lo, h * cs, el), b.gep(s_lo, h * ss, el)
            if pw is not None:  # the row's 1 / rms, then x * rstd * w in place of x below

                def squares(j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
                    e = b.load_element(x_lo, j, el)
                    return [_fadd(b, c[0], _fmul(b, e, e), reassoc=True)]

                (sq,) = emit_for(b, 0, d, squares, [b.f32(0.0)])
                rstd = b.add(llvm.FDivOp(b.f32(1.0), b.add(llvm.FSqrtOp(_fadd(b, _fmul(b, sq, b.f32(1.0 / d)), b.f32(eps))))))
                w_hi = b.gep(pw, h, el)

            def body(j: SSAValue) -> None:
                a, r = b.load_element(x_lo, j, el), b.load_element(x_hi, j, el)
                if pw is not None:
                    a = _fmul(b, _fmul(b, a, rstd), b.load_element(pw, j, el))
                    r = _fmul(b, _fmul(b, r, rstd), b.load_element(w_hi, j, el))
                jc, js = _index(b, j, cs), _index(b, j, ss)
                c0, c1 = b.load_element(c_lo, jc, el), b.load_element(c_hi, jc, el)
                s0, s1 = b.load_element(s_lo, js, el), b.load_element(s_hi, js, el)
                lo = b.add(llvm.FSubOp(b.add(llvm.FMulOp(a, c0)), b.add(llvm.FMulOp(r, s0))))
                hi = b.add(llvm.FAddOp(b.add(llvm.FMulOp(r, c1)), b.add(llvm.FMulOp(a, s1))))
                b.store_element(lo, o_lo, j, el)
                b.store_element(hi, o_hi, j, el)

            emit_loop(b, h, body)

        emit_strided_nest(b, sub, [a.strides for a in acc], row, collapse=False)

    # the rows (every dim but the last) split among the threads when there are many
    operands = [Operand(out, own[:-1]), Operand(x, own[:-1]), Operand(cos, cos_st[:-1]), Operand(sin, sin_st[:-1])]
    if norm is not None:  # the same weight for every row
        operands.append(Operand(norm, (0,) * (len(shape) - 1)))
    parallel_nest(ctx, shape[:-1], operands, rows, elements=numel(shape))


# a symbolic count of rows (a prefill of any length): `parallel_nest` counts them at run time
SYMBOLIC_KERNELS.add(buf.RopeOp)
REGISTRY[buf.RopeOp] = _emit_rope
