"""One emitter per `buf` kernel op: ``REGISTRY[type(op)](ctx, op)`` appends llvm dialect code.

- `buf.matmul` calls OpenBLAS's ``scipy_cblas_sgemm`` (row-major), or ``scipy_cblas_sgemv`` when
  the product has one output row or column (M = 1 after folding, or N = 1). When the rhs has no batch
  dims (or only 1s) and the lhs is not transposed, the lhs batch dims fold into M: one call.
  Otherwise a loop over the broadcast batch index makes one call per batch. An accumulator
  with ``beta != 0`` is first broadcast-copied into the output, then sgemm runs with that beta.
- Elementwise ops (`add/sub/mul/div/relu/copy/bias_activation`) are strided loop nests over
  the output, with stride 0 on broadcast dims; contiguous dims collapse, so the common case
  is one flat loop that LLVM vectorises.
- `buf.transpose` is a copy whose input strides are permuted (cache-blocked in 16x16 tiles
  when the read is strided, see `loops.emit_tiled_nest`).
- Overlap checks: an elementwise input may be the output itself (same bytes); any partial
  overlap, or an output shared with a matmul/transpose operand, is a clear `LoweringError`.

Adding a kernel: write ``def _emit_foo(ctx, op)`` and register it in :data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from xdsl.dialects import llvm
from xdsl.dialects.builtin import AnyFloat, MemRefType, f32, i32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder, broadcast_strides, emit_strided_nest, emit_tiled_nest
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import broadcast_shapes, contiguous_strides, numel


class LoweringError(PassFailedException, ValueError):
    """A `buf` module cannot be lowered to llvm; the message names the op and the reason."""


class KernelContext(Protocol):
    """What an emitter needs from the pass: the cursor and the pointer of each buffer."""

    b: FunctionBuilder

    def ptr(self, value: SSAValue) -> SSAValue: ...

    def declare(self, name: str, type: llvm.LLVMFunctionType) -> None: ...

    def same_bytes(self, a: SSAValue, b: SSAValue) -> bool: ...

    def disjoint(self, a: SSAValue, b: SSAValue) -> bool: ...


Emitter = Callable[[KernelContext, Operation], None]

# --------------------------------------------------------------------------- helpers


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


def _element(value: SSAValue) -> Attribute:
    return value.type.element_type  # type: ignore[attr-defined]


def _require_float(op: Operation, values: Sequence[SSAValue]) -> Attribute:
    types = {_element(v) for v in values}
    t = types.pop()
    if types or not isinstance(t, AnyFloat):
        raise LoweringError(
            f"{op.name}: codegen supports float buffers of one element type, got "
            + ", ".join(str(_element(v)) for v in values)
        )
    return t


def check_no_overlap(ctx: KernelContext, op: Operation, out: SSAValue, inputs: Sequence[SSAValue], in_place_ok: bool) -> None:
    """An input may be the output itself (same bytes, same element count) when ``in_place_ok``;
    otherwise it must not share a byte with the output (a planner bug would corrupt results)."""
    for k, v in enumerate(inputs):
        if in_place_ok and ctx.same_bytes(v, out) and numel(_shape(v)) == numel(_shape(out)):
            continue
        if not ctx.disjoint(v, out):
            raise LoweringError(
                f"{op.name}: input #{k} {v.type} overlaps the output {out.type}"
                + ("" if in_place_ok else " (this kernel cannot run in place)")
            )


def emit_elementwise(
    ctx: KernelContext,
    out: SSAValue,
    inputs: Sequence[SSAValue],
    compute: Callable[[FunctionBuilder, list[SSAValue]], SSAValue],
    input_strides: Sequence[Sequence[int]] | None = None,
) -> None:
    """``out[idx] = compute(inputs[k][idx * strides_k])`` over the output shape.

    ``input_strides`` defaults to NumPy broadcasting of each input to the output shape.
    """
    b = ctx.b
    shape = _shape(out)
    if input_strides is None:
        input_strides = [broadcast_strides(_shape(v), shape) for v in inputs]
    el = _element(out)
    out_ptr = ctx.ptr(out)
    in_ptrs = [ctx.ptr(v) for v in inputs]
    in_types = [_element(v) for v in inputs]
    strides = [contiguous_strides(shape), *input_strides]

    # inputs read at one address throughout (scalars, full broadcasts) are loaded once, up front
    hoisted: dict[int, SSAValue] = {
        k: b.load(in_ptrs[k], in_types[k])
        for k, st in enumerate(input_strides)
        if numel(shape) > 1 and all(s == 0 or n == 1 for s, n in zip(st, shape))
    }

    def body(offsets: list[SSAValue | None]) -> None:
        vals = [
            hoisted[k] if k in hoisted else b.load(b.gep(p, off, t), t)
            for k, (p, off, t) in enumerate(zip(in_ptrs, offsets[1:], in_types))
        ]
        b.store(compute(b, vals), b.gep(out_ptr, offsets[0], el))

    emit_tiled_nest(b, shape, strides, body)


def _relu(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    # x < 0 ? 0 : x  (NaN propagates, like torch.relu)
    zero = b.constant(0.0, x.type)
    neg = b.add(llvm.FCmpOp(x, zero, "olt"))
    return b.add(llvm.SelectOp(neg, zero, x))


ACTIVATIONS: dict[str, Callable[[FunctionBuilder, SSAValue], SSAValue]] = {
    "none": lambda b, x: x,
    "relu": _relu,
}

# --------------------------------------------------------------------------- elementwise

_BINARY: dict[type[Operation], type[llvm.AbstractFloatArithOp]] = {
    buf.AddOp: llvm.FAddOp,
    buf.SubOp: llvm.FSubOp,
    buf.MulOp: llvm.FMulOp,
    buf.DivOp: llvm.FDivOp,
}


def _emit_binary(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.ElementwiseBinaryKernel)
    _require_float(op, [*op.inputs, op.output])
    arith = _BINARY[type(op)]
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: b.add(arith(v[0], v[1])))


def _emit_relu(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.ReluOp)
    _require_float(op, [*op.inputs, op.output])
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: _relu(b, v[0]))


def _emit_copy(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.CopyOp)
    if _element(op.inputs[0]) != _element(op.output):
        raise LoweringError(f"{op.name}: input and output element types differ")
    if ctx.same_bytes(op.inputs[0], op.output):
        return  # copying a buffer onto itself
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=False)
    emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: v[0])


def _emit_transpose(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.TransposeOp)
    src = op.inputs[0]
    if _element(src) != _element(op.output):
        raise LoweringError(f"{op.name}: input and output element types differ")
    check_no_overlap(ctx, op, op.output, [src], in_place_ok=False)
    own = contiguous_strides(_shape(src))
    strides = tuple(own[p] for p in op.permutation)
    emit_elementwise(ctx, op.output, [src], lambda b, v: v[0], input_strides=[strides])


def _emit_bias_activation(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.BiasActivationOp)
    _require_float(op, [*op.inputs, op.output])
    act = ACTIVATIONS.get(op.activation.data)
    if act is None:
        raise LoweringError(f"{op.name}: no codegen for activation '{op.activation.data}'")
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: act(b, b.add(llvm.FAddOp(v[0], v[1]))))


# --------------------------------------------------------------------------- matmul

SGEMM = "scipy_cblas_sgemm"
SGEMM_TYPE = llvm.LLVMFunctionType(
    [i32, i32, i32, i32, i32, i32, f32, PTR, i32, PTR, i32, f32, PTR, i32]
)
SGEMV = "scipy_cblas_sgemv"
SGEMV_TYPE = llvm.LLVMFunctionType([i32, i32, i32, i32, f32, PTR, i32, PTR, i32, f32, PTR, i32])
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112
_I32_MAX = 2**31 - 1


def _emit_matmul(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.MatmulOp)
    b = ctx.b
    ta, tb, alpha, beta = op.flags
    a, w = op.inputs[0], op.inputs[1]
    acc = op.inputs[2] if len(op.inputs) == 3 else None
    out = op.output
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
    if max(m_total, n, k, lda, ldb, ldc) > _I32_MAX:
        raise LoweringError(f"{op.name}: dims {list(sa)} x {list(sb)} overflow the 32-bit BLAS interface")

    pa, pb, pc = ctx.ptr(a), ctx.ptr(w), ctx.ptr(out)

    def trans(flag: bool) -> SSAValue:
        return b.i32(CBLAS_TRANS if flag else CBLAS_NO_TRANS)

    def gemm(off_a: SSAValue | None, off_b: SSAValue | None, off_c: SSAValue | None) -> None:
        ctx.declare(SGEMM, SGEMM_TYPE)
        b.add(
            llvm.CallOp(
                SGEMM,
                b.i32(CBLAS_ROW_MAJOR),
                trans(ta),
                trans(tb),
                b.i32(m_total),
                b.i32(n),
                b.i32(k),
                b.f32(alpha),
                b.gep(pa, off_a, f32),
                b.i32(lda),
                b.gep(pb, off_b, f32),
                b.i32(ldb),
                b.f32(beta),
                b.gep(pc, off_c, f32),
                b.i32(ldc),
            )
        )

    def gemv(off_a: SSAValue | None, off_b: SSAValue | None, off_c: SSAValue | None) -> None:
        """A GEMM with one output row or column is a GEMV: sgemm's M=1 path packs the whole
        rhs on every call (10x slower for a 1024x1024 weight), sgemv streams it once."""
        ctx.declare(SGEMV, SGEMV_TYPE)
        if m_total == 1:  # out[1, N] = x[K] . op(B): the matrix is B, the vector a row of op(A)
            matrix, off_m, ld, vector, off_v = pb, off_b, ldb, pa, off_a
            rows, cols, t = (n, k, False) if tb else (k, n, True)
            inc = lda if ta else 1
        else:  # out[M, 1] = op(A) . y[K]: the matrix is A, the vector a column of op(B)
            matrix, off_m, ld, vector, off_v = pa, off_a, lda, pb, off_b
            rows, cols, t = (k, m_total, True) if ta else (m_total, k, False)
            inc = 1 if tb else ldb
        b.add(
            llvm.CallOp(
                SGEMV,
                b.i32(CBLAS_ROW_MAJOR),
                trans(t),
                b.i32(rows),
                b.i32(cols),
                b.f32(alpha),
                b.gep(matrix, off_m, f32),
                b.i32(ld),
                b.gep(vector, off_v, f32),
                b.i32(inc),
                b.f32(beta),
                b.gep(pc, off_c, f32),
                b.i32(1),
            )
        )

    #: BLAS routine per problem shape: GEMV when the product is a matrix-vector one.
    call = gemv if (m_total == 1 or n == 1) and k > 1 else gemm

    if fold or batches == 1:
        call(None, None, None)
        return
    # one call per broadcast batch index: strides in elements, 0 on broadcast batch dims
    mat_a, mat_b, mat_c = sa[-2] * sa[-1], sb[-2] * sb[-1], so[-2] * so[-1]
    batch_o = broadcast_shapes(batch_a, batch_b)
    strides = [
        tuple(s * mat_c for s in contiguous_strides(batch_o)),
        tuple(s * mat_a for s in broadcast_strides(batch_a, batch_o)),
        tuple(s * mat_b for s in broadcast_strides(batch_b, batch_o)),
    ]
    emit_strided_nest(b, batch_o, strides, lambda offs: call(offs[1], offs[2], offs[0]))


#: buf kernel op -> emitter. Every `buf.KernelOp` subclass must appear here.
REGISTRY: dict[type[Operation], Emitter] = {
    buf.MatmulOp: _emit_matmul,
    buf.AddOp: _emit_binary,
    buf.SubOp: _emit_binary,
    buf.MulOp: _emit_binary,
    buf.DivOp: _emit_binary,
    buf.ReluOp: _emit_relu,
    buf.CopyOp: _emit_copy,
    buf.TransposeOp: _emit_transpose,
    buf.BiasActivationOp: _emit_bias_activation,
}


def check_memref(op: Operation, value: SSAValue) -> MemRefType:
    """Codegen handles contiguous, statically shaped memrefs only."""
    t = value.type
    if not isinstance(t, MemRefType):
        raise LoweringError(f"{op.name}: expected a memref, got {t}")
    from xdsl.dialects.builtin import NoneAttr

    if not isinstance(t.layout, NoneAttr):
        raise LoweringError(f"{op.name}: memref {t} has a layout; only contiguous buffers are supported")
    if any(d < 0 for d in t.get_shape()):
        raise LoweringError(f"{op.name}: memref {t} has dynamic dims; only static shapes are supported")
    return t
