"""Emitters of `buf.reduce {kind, dims}` (sum, mean, max) and of the scan `buf.cumsum {dim}`;
importing this module registers them into :data:`kernels.REGISTRY` (``convert_buffer_to_llvm``
imports it).

When the innermost input dim is reduced, each output element accumulates in a register over a
(vectorised, ``reassoc``) inner loop; otherwise the output is filled with the identity and
accumulated in place by a loop nest whose inner loop runs along the output.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import AnyFloat, IntegerType, i1
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    Access,
    KernelContext,
    LoweringError,
    _require_float,
    _require_same_element,
    _shape,
    check_no_overlap,
    emit_pointwise,
)
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, collapse_dims, emit_carried_loop, emit_strided_nest
from tensor_graphs.codegen.llvm.scalar import emit_binary, fdiv, fmax
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import contiguous_strides, numel

def _combine(kind: str) -> Callable[[FunctionBuilder, SSAValue, SSAValue], SSAValue]:
    if kind == "max":
        return fmax
    # reassoc lets the vectoriser keep vector partial sums (a different, usually better, rounding)
    reassoc = llvm.FastMathAttr([llvm.FastMathFlag.REASSOC])
    return lambda b, acc, x: b.add(llvm.FAddOp(acc, x, reassoc))


def _emit_reduce(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.ReduceOp)
    x, out = op.inputs[0], op.output
    el = _require_float(op, [x, out])
    check_no_overlap(ctx, op, out, [x], in_place_ok=False)
    kind = op.kind.data
    shape = _shape(x)
    dims = set(op.dims.get_values())
    count = numel([shape[d] for d in dims])
    if numel(_shape(out)) == 0:
        return
    b = ctx.b
    xp, outp = ctx.ptr(x), ctx.ptr(out)
    combine = _combine(kind)
    identity = -math.inf if kind == "max" else 0.0
    in_st = contiguous_strides(shape)
    kept = [d for d in range(len(shape)) if d not in dims]
    kept_shape = [shape[d] for d in kept]
    out_st = contiguous_strides(kept_shape)

    def finish(b: FunctionBuilder, acc: SSAValue) -> SSAValue:
        return fdiv(b, acc, b.constant(float(count), el)) if kind == "mean" else acc

    big = [d for d in range(len(shape)) if shape[d] != 1]
    if not big or big[-1] in dims or count == 0:
        # register accumulation: for each output element, a loop nest over the reduced dims
        red = sorted(dims)
        red_shape, (red_st,) = collapse_dims([shape[d] for d in red], [[in_st[d] for d in red]])

        def nest(level: int, base: SSAValue | None, acc: list[SSAValue]) -> list[SSAValue]:
            if level == len(red_shape):
                return [combine(b, acc[0], b.load_element(xp, base, el))]
            return emit_carried_loop(
                b, red_shape[level], acc, lambda i, a: nest(level + 1, b.offset(base, i, red_st[level]), a)
            )

        def per_output(offs: list[SSAValue | None]) -> None:
            acc = nest(0, offs[1], [b.constant(identity, el)])[0]
            b.store_element(finish(b, acc), outp, offs[0], el)

        emit_strided_nest(b, kept_shape, [out_st, [in_st[d] for d in kept]], per_output)
        return

    # the innermost dim is kept: fill with the identity, accumulate along the input, scale
    n_out = numel(kept_shape)
    flat = Access(outp, (1,), el)
    emit_pointwise(b, (n_out,), flat, [], lambda b, v: b.constant(identity, el))
    acc_strides = [0] * len(shape)
    for j, d in enumerate(kept):
        acc_strides[d] = out_st[j]
    acc = Access(outp, tuple(acc_strides), el)
    emit_pointwise(b, shape, acc, [acc, Access(xp, in_st, el)], lambda b, v: combine(b, v[0], v[1]), hoist=False)
    if kind == "mean":
        emit_pointwise(b, (n_out,), flat, [flat], lambda b, v: finish(b, v[0]))


def _emit_cumsum(ctx: KernelContext, op: Operation) -> None:
    """As [outer, n, inner] (contiguous): row 0 is copied, then row i = row i-1 + x row i, one
    pass over memory; the inner loop (the dims after ``dim``) vectorises, a scan along the last
    dim is a serial chain per outer row. Floats add in order (torch's CPU scan does too)."""
    assert isinstance(op, buf.CumsumOp)
    x, out = op.inputs[0], op.output
    el = _require_same_element(op, [x, out])
    if not isinstance(el, AnyFloat | IntegerType) or el == i1:
        raise LoweringError(f"{op.name}: no codegen for {el} elements (cast to a number type first)")
    check_no_overlap(ctx, op, out, [x], in_place_ok=False)
    shape, dim = _shape(x), op.dim.value.data
    outer, n, inner = numel(shape[:dim]), shape[dim], numel(shape[dim + 1 :])
    if outer * n * inner == 0:
        return
    b = ctx.b
    xp, outp = ctx.ptr(x), ctx.ptr(out)

    def copy(offs: list[SSAValue | None]) -> None:
        b.store_element(b.load_element(xp, offs[1], el), outp, offs[0], el)

    emit_strided_nest(b, [outer, inner], [[n * inner, 1], [n * inner, 1]], copy)
    if n == 1:
        return

    def step(offs: list[SSAValue | None]) -> None:  # out[o, i+1, j] = out[o, i, j] + x[o, i+1, j]
        total = emit_binary(b, "add", b.load_element(outp, offs[1], el), b.load_element(xp, offs[2], el))
        b.store_element(total, outp, offs[0], el)

    strides = [n * inner, inner, 1]
    emit_strided_nest(b, [outer, n - 1, inner], [strides] * 3, step, collapse=False, bases=[inner, 0, inner])


REGISTRY[buf.ReduceOp] = _emit_reduce
REGISTRY[buf.CumsumOp] = _emit_cumsum
