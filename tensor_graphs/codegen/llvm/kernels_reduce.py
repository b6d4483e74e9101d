"""Emitters of `buf.reduce {kind, dims}` (sum, mean, max, min, prod, any: `reduction`), of
`buf.arg_reduce` (argmax, argmin) and of the scan `buf.cumsum {dim}`;
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
from xdsl.dialects.builtin import AnyFloat, IntegerType, i1, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    SYMBOLIC_KERNELS,
    Access,
    KernelContext,
    LoweringError,
    _element,
    _require_same_element,
    _shape,
    check_no_overlap,
    emit_pointwise,
)
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, collapse_dims, emit_carried_loop, emit_strided_nest, icmp
from tensor_graphs.codegen.llvm.loops import value as _val
from tensor_graphs.codegen.llvm.scalar import const, emit_binary, emit_convert, fabs, fadd, fcmp, fdiv, fmax, fmin, fsub, libm, select
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import contiguous_strides, numel

#: reduction kind -> its name in `scalar.emit_binary` for integers and bools (floats: `_FLOAT_COMBINE`)
_COMBINE = {"sum": "add", "mean": "add", "prod": "mul", "max": "max", "min": "min", "any": "max"}


def _float_combine(kind: str) -> Callable[[FunctionBuilder, SSAValue, SSAValue], SSAValue]:
    if kind == "max":
        return fmax
    if kind == "min":
        return fmin
    # reassoc lets the vectoriser keep vector partial results (a different, usually better, rounding)
    reassoc = llvm.FastMathAttr([llvm.FastMathFlag.REASSOC])
    if kind == "prod":
        return lambda b, acc, x: b.add(llvm.FMulOp(acc, x, reassoc))
    return lambda b, acc, x: b.add(llvm.FAddOp(acc, x, reassoc))


def reduction(kind: str, el) -> tuple[float | int, Callable[[FunctionBuilder, SSAValue, SSAValue], SSAValue]]:
    """The identity and the combining step of reduction ``kind`` over elements of ``el`` (float:
    NaN-propagating max/min; integers: signed; i1: or for any/max, and for min/prod)."""
    if isinstance(el, AnyFloat):
        identity = {"max": -math.inf, "min": math.inf, "prod": 1.0}.get(kind, 0.0)
        return identity, _float_combine(kind)
    if el == i1:
        if kind not in ("any", "max", "min", "prod"):
            raise LoweringError(f"buf.reduce: no {kind} of i1 elements (cast to a number type first)")
        return int(kind in ("min", "prod")), lambda b, acc, x: emit_binary(b, _COMBINE[kind], acc, x)
    if kind in ("mean", "any"):
        raise LoweringError(f"buf.reduce: no {kind} of {el} elements")
    width = el.width.data
    identity = {"max": -(1 << (width - 1)), "min": (1 << (width - 1)) - 1, "prod": 1}.get(kind, 0)
    return identity, lambda b, acc, x: emit_binary(b, _COMBINE[kind], acc, x)


def _emit_reduce(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.ReduceOp)
    x, out = op.inputs[0], op.output
    el = _require_same_element(op, [x, out])
    if not isinstance(el, AnyFloat | IntegerType):
        raise LoweringError(f"{op.name}: no codegen for {el} elements")
    check_no_overlap(ctx, op, out, [x], in_place_ok=False)
    kind = op.kind.data
    shape = _shape(x)
    dims = set(op.dims.get_values())
    count = numel([shape[d] for d in dims])
    if numel(_shape(out)) == 0:
        return
    b = ctx.b
    xp, outp = ctx.ptr(x), ctx.ptr(out)
    identity, combine = reduction(kind, el)
    in_st = contiguous_strides(shape)
    kept = [d for d in range(len(shape)) if d not in dims]
    kept_shape = [shape[d] for d in kept]
    out_st = contiguous_strides(kept_shape)

    # symbolic sizes (`dialects.symbolic`): every extent and stride below is counted at run time
    sized = lambda xs: [ctx.size(x) for x in xs]  # noqa: E731
    divisor = None if kind != "mean" else (
        b.constant(float(count), el) if isinstance(count, int) else emit_convert(b, _val(b, ctx.size(count)), el))

    def finish(b: FunctionBuilder, acc: SSAValue) -> SSAValue:
        return fdiv(b, acc, divisor) if kind == "mean" else acc

    big = [d for d in range(len(shape)) if shape[d] != 1]
    if not big or big[-1] in dims or count == 0:
        # register accumulation: for each output element, a loop nest over the reduced dims
        red = sorted(dims)
        red_shape, (red_st,) = collapse_dims([shape[d] for d in red], [[in_st[d] for d in red]])
        red_shape, red_st = sized(red_shape), sized(red_st)

        def nest(level: int, base: SSAValue | None, acc: list[SSAValue]) -> list[SSAValue]:
            if level == len(red_shape):
                return [combine(b, acc[0], b.load_element(xp, base, el))]
            return emit_carried_loop(
                b, red_shape[level], acc, lambda i, a: nest(level + 1, b.offset(base, i, red_st[level]), a)
            )

        def per_output(offs: list[SSAValue | None]) -> None:
            acc = nest(0, offs[1], [b.constant(identity, el)])[0]
            b.store_element(finish(b, acc), outp, offs[0], el)

        emit_strided_nest(b, sized(kept_shape), [sized(out_st), sized(in_st[d] for d in kept)], per_output)
        return

    # the innermost dim is kept: fill with the identity, accumulate along the input, scale
    n_out = ctx.size(numel(kept_shape))
    flat = Access(outp, (1,), el)
    emit_pointwise(b, (n_out,), flat, [], lambda b, v: b.constant(identity, el))
    acc_strides = [0] * len(shape)
    for j, d in enumerate(kept):
        acc_strides[d] = out_st[j]
    acc = Access(outp, tuple(sized(acc_strides)), el)
    emit_pointwise(b, sized(shape), acc, [acc, Access(xp, tuple(sized(in_st)), el)], lambda b, v: combine(b, v[0], v[1]),
                   hoist=False)
    if kind == "mean":
        emit_pointwise(b, (n_out,), flat, [flat], lambda b, v: finish(b, v[0]))


def _log_add_exp(b: FunctionBuilder, acc: SSAValue, x: SSAValue) -> SSAValue:
    """``log(exp(acc) + exp(x))`` as ``max + log1p(exp(-|acc - x|))`` (torch's logcumsumexp step);
    equal operands give ``max + log 2``, so two equal infinities stay themselves; NaN propagates."""
    gap = fsub(b, const(b, 0.0, x), fabs(b, fsub(b, acc, x)))
    gap = select(b, fcmp(b, "oeq", acc, x), const(b, 0.0, x), gap)
    return fadd(b, fmax(b, acc, x), libm(b, "log1p", libm(b, "exp", gap)))


#: `buf.cumsum`'s ``reduce`` -> the step ``(b, running, x) -> running'``
_SCAN_STEPS: dict[str, Callable[[FunctionBuilder, SSAValue, SSAValue], SSAValue]] = {
    "sum": lambda b, acc, x: emit_binary(b, "add", acc, x),
    "prod": lambda b, acc, x: emit_binary(b, "mul", acc, x),
    "max": lambda b, acc, x: emit_binary(b, "max", acc, x),
    "min": lambda b, acc, x: emit_binary(b, "min", acc, x),
    "logsumexp": _log_add_exp,
}


def _emit_cumsum(ctx: KernelContext, op: Operation) -> None:
    """As [outer, n, inner] (contiguous): row 0 is copied, then row i = reduce(row i-1, x row i),
    one pass over memory; the inner loop (the dims after ``dim``) vectorises, a scan along the
    last dim is a serial chain per outer row. Floats combine in order (torch's CPU scan does too)."""
    assert isinstance(op, buf.CumsumOp)
    x, out = op.inputs[0], op.output
    el = _require_same_element(op, [x, out])
    reduce = op.reduce.data
    if not isinstance(el, AnyFloat | IntegerType) or (el == i1 and reduce not in ("max", "min")):
        raise LoweringError(f"{op.name}: no codegen for {el} elements (cast to a number type first)")
    if reduce == "logsumexp" and not isinstance(el, AnyFloat):
        raise LoweringError(f"{op.name}: logsumexp of {el} elements (floats only)")
    step_fn = _SCAN_STEPS[reduce]
    check_no_overlap(ctx, op, out, [x], in_place_ok=False)
    shape, dim = _shape(x), op.dim.value.data
    outer, n, inner = numel(shape[:dim]), shape[dim], numel(shape[dim + 1 :])
    if outer * n * inner == 0:
        return
    b = ctx.b
    xp, outp = ctx.ptr(x), ctx.ptr(out)

    def copy(offs: list[SSAValue | None]) -> None:
        b.store_element(b.load_element(xp, offs[1], el), outp, offs[0], el)

    row = ctx.size(n * inner)
    emit_strided_nest(b, [ctx.size(outer), ctx.size(inner)], [[row, 1], [row, 1]], copy)
    if isinstance(n, int) and n == 1:
        return

    def step(offs: list[SSAValue | None]) -> None:  # out[o, i+1, j] = reduce(out[o, i, j], x[o, i+1, j])
        total = step_fn(b, b.load_element(outp, offs[1], el), b.load_element(xp, offs[2], el))
        b.store_element(total, outp, offs[0], el)

    if not isinstance(inner, int):
        raise LoweringError(f"{op.name}: a scan with the symbolic inner size {inner}: the dims after dim {dim} must be static")
    strides = [row, inner, 1]
    emit_strided_nest(b, [ctx.size(outer), ctx.size(n - 1), inner], [strides] * 3, step, collapse=False,
                      bases=[inner, 0, inner])


def _emit_arg_reduce(ctx: KernelContext, op: Operation) -> None:
    """Per output element, one pass along ``dim`` carrying the best value and its position: a
    strictly better element replaces it (so the first of equal ones stays), and for floats the
    first NaN replaces any number and is never replaced (torch's argmax/argmin)."""
    assert isinstance(op, buf.ArgReduceOp)
    x, out = op.inputs[0], op.output
    el = _element(x)
    if not isinstance(el, AnyFloat | IntegerType) or _element(out) != i64:
        raise LoweringError(f"{op.name}: positions (i64) of float or integer elements, got {x.type} -> {out.type}")
    check_no_overlap(ctx, op, out, [x], in_place_ok=False)
    shape, dim, largest = _shape(x), op.dim.value.data, op.kind.data == "max"
    kept = [d for d in range(len(shape)) if d != dim]
    kept_shape = [shape[d] for d in kept]
    in_st = contiguous_strides(shape)
    if numel(kept_shape) == 0:
        return
    b = ctx.b
    xp, outp = ctx.ptr(x), ctx.ptr(out)

    def better(v: SSAValue, best: SSAValue) -> SSAValue:
        if isinstance(el, IntegerType):
            return icmp(b, "sgt" if largest else "slt", v, best)
        beats = fcmp(b, "ogt" if largest else "olt", v, best)
        first_nan = b.add(llvm.AndOp(fcmp(b, "uno", v, v), fcmp(b, "ord", best, best)))
        return b.add(llvm.OrOp(beats, first_nan))

    def per_output(offs: list[SSAValue | None]) -> None:
        base = offs[1] if offs[1] is not None else b.i64(0)

        def step(i: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            v = b.load_element(xp, b.add_i64(base, b.mul_i64(i, _val(b, stride))), el)
            take = better(v, acc[0])
            return [select(b, take, v, acc[0]), select(b, take, i, acc[1])]

        _, position = emit_carried_loop(b, length, [b.load_element(xp, base, el), b.i64(0)], step)
        b.store_element(position, outp, offs[0], i64)

    stride, length = ctx.size(in_st[dim]), ctx.size(shape[dim])
    emit_strided_nest(b, [ctx.size(d) for d in kept_shape],
                      [[ctx.size(s) for s in contiguous_strides(kept_shape)], [ctx.size(in_st[d]) for d in kept]], per_output)


# serial loop nests: any extent or stride may be counted at run time
SYMBOLIC_KERNELS.update((buf.ReduceOp, buf.ArgReduceOp, buf.CumsumOp))
REGISTRY[buf.ReduceOp] = _emit_reduce
REGISTRY[buf.ArgReduceOp] = _emit_arg_reduce
REGISTRY[buf.CumsumOp] = _emit_cumsum
