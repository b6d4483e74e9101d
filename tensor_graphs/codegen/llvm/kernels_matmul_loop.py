"""`buf.matmul` of integers: a loop nest, as torch's CPU matmul computes them.

Products of float32 and float64 go to OpenBLAS (`kernels_blas`); integer products (torch's
``matmul``/``mm``/``bmm``/``addmm`` on int8 ... int64, uint8) have no BLAS routine. For every
output element (batch, m, n) the kernel sums ``a[b, m, k] * w[b, k, n]`` over k in the element
type, wrapping on overflow as torch's integer arithmetic does, then applies the accumulator and
the scale: ``out = beta * acc + alpha * sum`` (alpha and beta are integers here: torch refuses
float ones on integer tensors). Transposed operands are strides; broadcast batch dims stride 0.

    for (b, m, n): out[b, m, n] = beta * acc[b, m, n] + alpha * sum_k a[b, m, k] * w[b, k, n]
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.kernels import KernelContext, LoweringError, _shape, check_no_overlap
from tensor_graphs.codegen.llvm.loops import broadcast_strides, emit_carried_loop, emit_strided_nest
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import contiguous_strides


def _matrix_strides(shape: tuple[int, ...], transposed: bool) -> tuple[int, int]:
    """(row, column) element strides of the last two dims of a contiguous ``shape``, as the
    operand is read (``transposed``: the stored matrix is the transpose)."""
    rows, cols = shape[-1], 1
    return (cols, rows) if transposed else (rows, cols)


def emit_loop_matmul(ctx: KernelContext, op: buf.MatmulOp) -> None:
    """The loop nest of an integer `buf.matmul` (module doc)."""
    b = ctx.b
    ta, tb, alpha, beta = op.flags
    if op.activation.data != "none" or alpha != int(alpha) or beta != int(beta):
        raise LoweringError(f"{op.name}: an integer product takes integer alpha and beta and no activation")
    a, w, out = op.inputs[0], op.inputs[1], op.output
    acc = op.inputs[2] if len(op.inputs) == 3 and beta != 0 else None
    el = out.type.element_type  # type: ignore[attr-defined]
    sa, sb, so = _shape(a), _shape(w), _shape(out)
    m, k = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    check_no_overlap(ctx, op, out, [a, w], in_place_ok=False)
    batch = so[:-2]
    (am, ak), (wk, wn) = _matrix_strides(sa, ta), _matrix_strides(sb, tb)
    a_batch = tuple(s * sa[-2] * sa[-1] for s in broadcast_strides(sa[:-2], batch))
    w_batch = tuple(s * sb[-2] * sb[-1] for s in broadcast_strides(sb[:-2], batch))
    o_strides = contiguous_strides(so)
    strides = [o_strides, (*a_batch, am, 0), (*w_batch, 0, wn)]
    if acc is not None:
        strides.append(broadcast_strides(_shape(acc), so))
    pa, pw, po = ctx.ptr(a), ctx.ptr(w), ctx.ptr(out)
    pc = ctx.ptr(acc) if acc is not None else None
    assert m == so[-2]

    def element(offsets: list[SSAValue | None]) -> None:
        def step(i: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
            x = b.load_element(pa, b.offset(offsets[1], i, ak), el)
            y = b.load_element(pw, b.offset(offsets[2], i, wk), el)
            return [b.add(llvm.AddOp(carried[0], b.add(llvm.MulOp(x, y))))]

        (total,) = emit_carried_loop(b, k, [b.constant(0, el)], step)
        if alpha != 1:
            total = b.add(llvm.MulOp(total, b.constant(int(alpha), el)))
        if pc is not None:
            c = b.load_element(pc, offsets[3], el)
            c = c if beta == 1 else b.add(llvm.MulOp(c, b.constant(int(beta), el)))
            total = b.add(llvm.AddOp(total, c))
        b.store_element(total, po, offsets[0], el)

    emit_strided_nest(b, so, strides, element, collapse=False)
