"""`buf.matmul` through OpenBLAS: ``scipy_cblas_sgemm`` (row-major), or ``scipy_cblas_sgemv``
when the product has one output row or column (M = 1 after folding, or N = 1). Importing this
module registers the plain emitter into :data:`kernels.REGISTRY` (``convert_buffer_to_llvm``
imports it); `kernels_matmul_epilogue` then takes over the entry for a matmul with an
activation.

When the rhs has no batch dims (or only 1s) and the lhs is not transposed, the lhs batch dims
fold into M: one call. Otherwise a loop over the broadcast batch index makes one call per
batch. An accumulator with ``beta != 0`` is first broadcast-copied into the output, then sgemm
runs with that beta. Without the epilogue, an activation is a second sweep over the output.
:func:`_sgemm` and :func:`_sgemv` are the calls with run-time sizes (the matmul epilogue's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f32, f64, i32
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    SYMBOLIC_KERNELS,
    KernelContext,
    LoweringError,
    _scalar_errors,
    _shape,
    check_no_overlap,
    emit_elementwise,
)
from tensor_graphs.codegen.llvm.kernels_matmul_loop import emit_loop_matmul
from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder, Index, broadcast_strides, emit_if, emit_strided_nest, icmp
from tensor_graphs.codegen.llvm.scalar import emit_unary
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import contiguous_strides, numel

SGEMM = "scipy_cblas_sgemm"
SGEMM_TYPE = llvm.LLVMFunctionType(
    [i32, i32, i32, i32, i32, i32, f32, PTR, i32, PTR, i32, f32, PTR, i32]
)
SGEMV = "scipy_cblas_sgemv"
SGEMV_TYPE = llvm.LLVMFunctionType([i32, i32, i32, i32, f32, PTR, i32, PTR, i32, f32, PTR, i32])
#: element type -> (GEMM, its type, GEMV, its type): float32 and float64 products go to OpenBLAS
BLAS_ROUTINES = {
    f32: (SGEMM, SGEMM_TYPE, SGEMV, SGEMV_TYPE),
    f64: ("scipy_cblas_dgemm", llvm.LLVMFunctionType([i32, i32, i32, i32, i32, i32, f64, PTR, i32, PTR, i32, f64, PTR, i32]),
          "scipy_cblas_dgemv", llvm.LLVMFunctionType([i32, i32, i32, i32, f64, PTR, i32, PTR, i32, f64, PTR, i32])),
}
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112
_I32_MAX = 2**31 - 1


def emit_gemm(ctx: KernelContext, op: Operation) -> None:
    """The BLAS call(s) of a `buf.matmul` (alpha, beta, accumulator); ignores ``activation``."""
    assert isinstance(op, buf.MatmulOp)
    b = ctx.b
    ta, tb, alpha, beta = op.flags
    a, w = op.inputs[0], op.inputs[1]
    acc = op.inputs[2] if len(op.inputs) == 3 else None
    out = op.output
    el = out.type.element_type  # type: ignore[attr-defined]
    gemm_name, gemm_type, gemv_name, gemv_type = BLAS_ROUTINES[el]
    sa, sb, so = _shape(a), _shape(w), _shape(out)
    m, k = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    n = sb[-2] if tb else sb[-1]
    if numel(so) == 0:
        return

    check_no_overlap(ctx, op, out, [a, w], in_place_ok=False)
    if acc is not None and beta != 0.0:
        if not (ctx.same_bytes(acc, out) and _shape(acc) == so):
            check_no_overlap(ctx, op, out, [acc], in_place_ok=False)
            emit_elementwise(ctx, out, [acc], lambda b, v: v[0])
    else:
        beta = 0.0

    batch_a, batch_b, batch_o = sa[:-2], sb[:-2], so[:-2]
    fold = numel(batch_b) == 1 and not ta
    if fold:  # rows of every lhs batch stack into one M x K matrix
        m_total, batches = m * numel(batch_a), 1
    else:
        m_total, batches = m, numel(batch_o)
    lda, ldb, ldc = max(sa[-1], 1), max(sb[-1], 1), max(n, 1)
    # a symbolic M (`dialects.symbolic`): the rows of an untransposed A stacked over one B,
    # counted at run time; everything else static
    m_run: Index = m_total
    if not isinstance(m_total, int):
        if not fold or not all(isinstance(x, int) for x in (n, k, sa[-1], sb[-1])):
            raise LoweringError(f"{op.name}: {[str(d) for d in sa]} x {[str(d) for d in sb]}: a BLAS matmul takes a "
                                "symbolic size only in the rows of an untransposed A over one B, or in its batch dims")
        m_run, m_total = ctx.size(m_total), ctx.largest(m_total)
    elif not all(isinstance(x, int) for x in (*sa[-2:], *sb[-2:], *so[-2:])):
        raise LoweringError(f"{op.name}: {[str(d) for d in sa]} x {[str(d) for d in sb]}: a BLAS matmul over a batch "
                            "takes a symbolic size only in the batch dims")
    if max(m_total, n, k, lda, ldb, ldc) > _I32_MAX:
        raise LoweringError(f"{op.name}: dims {list(sa)} x {list(sb)} overflow the 32-bit BLAS interface")

    pa, pb, pc = ctx.ptr(a), ctx.ptr(w), ctx.ptr(out)

    def trans(flag: bool) -> SSAValue:
        return b.i32(CBLAS_TRANS if flag else CBLAS_NO_TRANS)

    def gemm(off_a: SSAValue | None, off_b: SSAValue | None, off_c: SSAValue | None) -> None:
        ctx.declare(gemm_name, gemm_type)
        b.add(
            llvm.CallOp(
                gemm_name,
                b.i32(CBLAS_ROW_MAJOR),
                trans(ta),
                trans(tb),
                _i32(b, m_run),
                b.i32(n),
                b.i32(k),
                b.constant(alpha, el),
                b.gep(pa, off_a, el),
                b.i32(lda),
                b.gep(pb, off_b, el),
                b.i32(ldb),
                b.constant(beta, el),
                b.gep(pc, off_c, el),
                b.i32(ldc),
            )
        )

    def gemv(off_a: SSAValue | None, off_b: SSAValue | None, off_c: SSAValue | None, one_row: bool | None = None) -> None:
        """A GEMM with one output row or column is a GEMV: sgemm's M=1 path packs the whole
        rhs on every call (10x slower for a 1024x1024 weight), sgemv streams it once."""
        ctx.declare(gemv_name, gemv_type)
        if one_row if one_row is not None else m_total == 1:  # out[1, N] = x[K] . op(B): the matrix is B, the vector a row of op(A)
            matrix, off_m, ld, vector, off_v = pb, off_b, ldb, pa, off_a
            rows, cols, t = (n, k, False) if tb else (k, n, True)
            inc = lda if ta else 1
        else:  # out[M, 1] = op(A) . y[K]: the matrix is A, the vector a column of op(B)
            matrix, off_m, ld, vector, off_v = pa, off_a, lda, pb, off_b
            rows, cols, t = (k, m_run, True) if ta else (m_run, k, False)
            inc = 1 if tb else ldb
        b.add(
            llvm.CallOp(
                gemv_name,
                b.i32(CBLAS_ROW_MAJOR),
                trans(t),
                _i32(b, rows),
                _i32(b, cols),
                b.constant(alpha, el),
                b.gep(matrix, off_m, el),
                b.i32(ld),
                b.gep(vector, off_v, el),
                b.i32(inc),
                b.constant(beta, el),
                b.gep(pc, off_c, el),
                b.i32(1),
            )
        )

    #: BLAS routine per problem shape: GEMV when the product is a matrix-vector one.
    def gemm_or_gemv(*offs) -> None:  # run-time rows: the GEMV for a call with one row
        emit_if(b, icmp(b, "eq", m_run, b.i64(1)), lambda: gemv(*offs, one_row=True), lambda: gemm(*offs))

    call = gemv if (m_total == 1 or n == 1) and k > 1 else gemm
    if not isinstance(m_run, int) and n > 1 and k > 1:
        call = gemm_or_gemv

    if fold or batches == 1:
        call(None, None, None)
        return
    per_batch(ctx, sa, sb, so, lambda offs: call(offs[1], offs[2], offs[0]))


def per_batch(
    ctx: KernelContext,
    sa: tuple[int, ...],
    sb: tuple[int, ...],
    so: tuple[int, ...],
    body: Callable[[list[SSAValue | None]], None],
    acc_batch_strides: Sequence[int] | None = None,
) -> None:
    """One ``body(offsets)`` per broadcast batch index: offsets of C, A, B (and the accumulator);
    a symbolic batch dim (a convolution's images) counted at run time, outermost only (the
    strides stay static)."""
    batch_o = so[:-2]
    mat_a, mat_b, mat_c = sa[-2] * sa[-1], sb[-2] * sb[-1], so[-2] * so[-1]
    strides = [
        tuple(s * mat_c for s in contiguous_strides(batch_o)),
        tuple(s * mat_a for s in broadcast_strides(sa[:-2], batch_o)),
        tuple(s * mat_b for s in broadcast_strides(sb[:-2], batch_o)),
    ]
    if acc_batch_strides is not None:
        strides.append(tuple(acc_batch_strides))
    if not all(isinstance(s, int) for st in strides for s in st):
        raise LoweringError(f"buf.matmul: batch {[str(d) for d in batch_o]}: a symbolic batch dim only outermost")
    emit_strided_nest(ctx.b, [ctx.size(d) for d in batch_o], strides, body)


def _emit_matmul(ctx: KernelContext, op: Operation) -> None:
    """GEMM, then the activation (if any) as a second sweep over the output.

    `kernels_matmul_epilogue` replaces this entry with an epilogue fused into the blocks the
    GEMM writes.
    """
    assert isinstance(op, buf.MatmulOp)
    if op.output.type.element_type not in BLAS_ROUTINES:  # type: ignore[attr-defined]
        emit_loop_matmul(ctx, op)
        return
    emit_gemm(ctx, op)
    act = op.activation.data
    if act != "none" and numel(_shape(op.output)):
        with _scalar_errors(op):
            emit_elementwise(ctx, op.output, [op.output], lambda b, v: emit_unary(b, act, v[0]))


def _i32(b: FunctionBuilder, x: Index) -> SSAValue:
    return b.i32(x) if isinstance(x, int) else b.add(llvm.TruncOp(x, i32))


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


# a symbolic M: the rows of an untransposed A over one B (`emit_gemm`), or a symbolic batch of
# static matrices (one call per batch index), then the activation's sweep
SYMBOLIC_KERNELS.add(buf.MatmulOp)
REGISTRY[buf.MatmulOp] = _emit_matmul
