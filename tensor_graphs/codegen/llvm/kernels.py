"""One emitter per `buf` kernel op: ``REGISTRY[type(op)](ctx, op)`` appends llvm dialect code.

- `buf.matmul` calls OpenBLAS's ``scipy_cblas_sgemm`` (row-major), or ``scipy_cblas_sgemv`` when
  the product has one output row or column (M = 1 after folding, or N = 1). When the rhs has no batch
  dims (or only 1s) and the lhs is not transposed, the lhs batch dims fold into M: one call.
  Otherwise a loop over the broadcast batch index makes one call per batch. An accumulator
  with ``beta != 0`` is first broadcast-copied into the output, then sgemm runs with that beta.
- Elementwise ops (`add/sub/mul/div/relu/copy/bias_activation/unary/binary/select/cast/
  broadcast/fused_elementwise`) are ONE strided loop nest over the output
  (:func:`emit_pointwise`), with stride 0 on broadcast dims: contiguous dims collapse, so the
  common case is one flat loop that LLVM vectorises, and an input that does not vary along the
  inner loops is loaded outside them. Scalar math comes from `scalar.py` (vectorisable
  polynomials, no libm calls for exp/tanh/erf/log). Splat IR constants become immediates.
- `buf.transpose`, `buf.slice`, `buf.concat` are strided copies (a transposed read is
  cache-blocked in 16x16 tiles, see `loops.emit_tiled_nest`).
- `buf.reduce`: when the innermost input dim is reduced, each output element accumulates in a
  register over a (vectorised, ``reassoc``) inner loop; otherwise the output is filled with
  the identity and accumulated in place by a loop nest whose inner loop runs along the output.
- `buf.embedding` (and `buf.packed_embedding`, from a table packed into column panels) checks
  every index against [0, V): an index out of range makes the graph function return an error
  status (see `KernelContext.check`) instead of reading out of bounds. The message names the
  table as the model does (a tied table by the name its embedding uses, ``tg.table_name``) and,
  when the indices are a graph input, asks the runtime for the offending value.
- `buf.cache_write {axis}` copies its update into the state (a KV cache) at positions
  ``[past, past + n)`` along ``axis``, ``past`` being the run-time ``dims[0]``
  (`KernelContext.dim`): one ``llvm.memcpy`` of ``n * inner`` elements per index of the dims
  before ``axis``. It first checks ``past + n <= capacity`` (an unsigned compare, which also
  rejects a negative ``past``) and otherwise returns an error status naming the cache.
- Overlap checks: an elementwise input may be the output itself (same bytes); any partial
  overlap, or an output shared with an operand of a kernel that cannot run in place, is a
  clear `LoweringError`.

Adding a kernel: write ``def _emit_foo(ctx, op)`` and register it in :data:`REGISTRY`
(`kernels_nn.py` registers softmax, layer norm and attention into the same dict).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from xdsl.dialects import llvm
from xdsl.dialects.builtin import AnyFloat, DenseIntOrFPElementsAttr, IntegerAttr, IntegerType, MemRefType, f32, i1, i32, i64
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.codegen.llvm.loops import (
    PTR,
    FunctionBuilder,
    broadcast_strides,
    collapse_dims,
    emit_carried_loop,
    emit_for,
    emit_loop,
    emit_strided_nest,
    emit_tiled_nest,
)
from tensor_graphs.codegen.llvm.loops import value as _value
from tensor_graphs.codegen.llvm.scalar import (
    ScalarCodegenError,
    emit_arith_body,
    emit_binary,
    emit_convert,
    emit_unary,
    fdiv,
    fmax,
    select,
)
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import broadcast_shapes, contiguous_strides, numel
from tensor_graphs.dialects.tensor import TABLE_NAME


class LoweringError(PassFailedException, ValueError):
    """A `buf` module cannot be lowered to llvm; the message names the op and the reason."""


class KernelContext(Protocol):
    """What an emitter needs from the pass: the cursor, the pointer of each buffer, where
    buffers live (for overlap checks), and run-time checks."""

    b: FunctionBuilder

    def ptr(self, value: SSAValue) -> SSAValue: ...

    def declare(self, name: str, type: llvm.LLVMFunctionType) -> None: ...

    def same_bytes(self, a: SSAValue, b: SSAValue) -> bool: ...

    def disjoint(self, a: SSAValue, b: SSAValue) -> bool: ...

    def extent(self, value: SSAValue) -> tuple[object, int, int] | None:
        """(what the buffer lives in, first byte, end byte), where known."""
        ...

    def check(self, ok: SSAValue, message: str) -> None:
        """Continue when the i1 ``ok`` holds; otherwise the graph function returns the status
        of ``message`` (recorded in the signature's ``errors``; ``{past}`` in it is filled
        in by the runtime). The cursor moves to the continuation block."""
        ...

    def dim(self, index: int) -> SSAValue:
        """The run-time size ``dims[index]`` as an i64 (``dims[0]`` is ``past``, the positions
        already in the KV caches); it dominates every block of the kernel."""
        ...

    def parallel(
        self,
        items: int | SSAValue,
        body: Callable[[SSAValue, SSAValue, SSAValue, list[SSAValue]], None],
        values: Sequence[SSAValue] = (),
        max_threads: int | None = None,
    ) -> None:
        """Run ``body(start, end, thread, values)`` on every thread (`runtime_support.threads`;
        at most ``max_threads``), over contiguous chunks of ``[0, items)`` (guided: a thread
        may run several, and ``thread`` is the same for them); the
        cursor is then in a worker function, where ``ptr()`` gives the worker's pointers and
        ``values`` (i64s computed before, in the kernel) arrive as ``values``. ``thread`` is the
        worker's index (for its own scratch). No run-time check or ``dim()`` inside ``body``."""
        ...


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


def _require_same_element(op: Operation, values: Sequence[SSAValue]) -> Attribute:
    types = {_element(v) for v in values}
    if len(types) != 1:
        raise LoweringError(f"{op.name}: operands must have one element type, got " + ", ".join(str(_element(v)) for v in values))
    return types.pop()


@contextlib.contextmanager
def _scalar_errors(op: Operation) -> Iterator[None]:
    """Turns a `ScalarCodegenError` into a `LoweringError` that names ``op``."""
    try:
        yield
    except ScalarCodegenError as e:
        raise LoweringError(f"{op.name}: {e}") from None


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


def splat_value(value: SSAValue) -> int | float | None:
    """The value of a `buf.constant` whose elements are all equal, else None."""
    owner = value.owner
    if not isinstance(owner, buf.ConstantOp):
        return None
    dense: DenseIntOrFPElementsAttr = owner.value
    if numel(_shape(value)) == 0 or not (numel(_shape(value)) == 1 or dense.is_splat()):
        return None
    v = dense.get_values()[0]
    return int(v) & 1 if _element(value) == i1 else v


# --------------------------------------------------------------------------- loop nests over memory


@dataclass(frozen=True)
class Access:
    """How a loop nest walks one buffer: its pointer (already at the first element), one
    element stride per loop dim (0: the same element along that dim), its element type."""

    ptr: SSAValue
    strides: tuple[int, ...]
    element: Attribute


def _needs_tiling(shape: Sequence[int], strides: Sequence[Sequence[int]], tile: int = 16) -> bool:
    """Same rule as `loops.emit_tiled_nest`: an operand reads the inner dim with a large stride."""
    if len(shape) < 2:
        return False
    for st in strides:
        if st[-1] not in (0, 1) and 1 in st[:-1]:
            return shape[st[:-1].index(1)] >= tile and shape[-1] >= tile
    return False


def emit_pointwise(
    b: FunctionBuilder,
    shape: Sequence[int],
    out: Access,
    ins: Sequence[Access],
    compute: Callable[[FunctionBuilder, list[SSAValue]], SSAValue],
    hoist: bool = True,
) -> None:
    """``out[idx] = compute([in_k[idx] for k])`` for every index of ``shape``.

    Dims contiguous for every operand collapse (one flat loop for contiguous buffers); an
    input whose strides are 0 on the innermost loops is loaded once, outside them (with
    ``hoist``), so a broadcast bias or scalar costs nothing in the vectorised inner loop.
    A strided (transposed) read takes the cache-blocked nest instead.
    """
    if any(n == 0 for n in shape):
        return
    shape, strides = collapse_dims(shape, [out.strides, *(a.strides for a in ins)])
    rank = len(shape)

    def store(offsets: Sequence[SSAValue | None], vals: list[SSAValue]) -> None:
        b.store_element(compute(b, vals), out.ptr, offsets[0], out.element)

    if not hoist or _needs_tiling(shape, strides):
        def body(offsets: list[SSAValue | None]) -> None:
            store(offsets, [b.load_element(a.ptr, off, a.element) for a, off in zip(ins, offsets[1:])])

        if hoist:
            emit_tiled_nest(b, shape, strides, body)
        else:
            emit_strided_nest(b, shape, strides, body, collapse=False)
        return

    # the loop depth at which each input's address stops changing
    depth = [max((d + 1 for d in range(rank) if st[d] != 0), default=0) for st in strides[1:]]

    def level(d: int, offsets: list[SSAValue | None], loaded: dict[int, SSAValue]) -> None:
        loaded = dict(loaded)
        for k, dk in enumerate(depth):
            if dk == d:
                loaded[k] = b.load_element(ins[k].ptr, offsets[k + 1], ins[k].element)
        if d == rank:
            store(offsets, [loaded[k] for k in range(len(ins))])
            return

        def inner(i: SSAValue) -> None:
            level(d + 1, [b.offset(off, i, st[d]) for off, st in zip(offsets, strides)], loaded)

        emit_loop(b, shape[d], inner)

    level(0, [None] * len(strides), {})


def emit_copy_nest(b: FunctionBuilder, shape: Sequence[int], out: Access, src: Access) -> None:
    """``out[idx] = src[idx]``: one ``llvm.memcpy`` per contiguous inner run when both walk the
    innermost dim with stride 1 (after collapsing), else an element loop nest (tiled when
    the read is transposed). The buffers must not overlap."""
    if any(n == 0 for n in shape):
        return
    collapsed, (so, ss) = collapse_dims(shape, [out.strides, src.strides])
    if not collapsed or so[-1] != 1 or ss[-1] != 1 or out.element != src.element:
        emit_pointwise(b, shape, out, [src], lambda b, v: v[0])
        return
    shape = collapsed
    width = max(out.element.bitwidth // 8, 1)  # type: ignore[attr-defined]
    nbytes = b.i64(shape[-1] * width)

    def run(offsets: list[SSAValue | None]) -> None:
        dst_ptr, src_ptr = b.gep(out.ptr, offsets[0], out.element), b.gep(src.ptr, offsets[1], src.element)
        b.add(llvm.CallIntrinsicOp("llvm.memcpy.p0.p0.i64", [dst_ptr, src_ptr, nbytes, b.constant(0, i1)], []))

    emit_strided_nest(b, shape[:-1], [so[:-1], ss[:-1]], run, collapse=False)


#: A kernel over at least this many elements splits its outermost rows among the threads
#: (`split_rows`, `parallel_nest`); below it a parallel region costs more than it saves.
PARALLEL_MIN_ELEMENTS = 1 << 16
#: Elements per work item when a one-dimensional loop is split among the threads.
PARALLEL_CHUNK = 4096


def split_rows(
    ctx: KernelContext, rows: int, elements: int, body: Callable[[FunctionBuilder, SSAValue | int, SSAValue | int], None]
) -> None:
    """``body(b, start, end)`` over the rows ``[0, rows)``: split among the graph's threads when the
    kernel touches at least `PARALLEL_MIN_ELEMENTS` elements, else once, in the kernel. ``body``
    emits at ``b`` and takes its buffers from ``ctx.ptr`` (a worker has its own pointers)."""
    if rows < 2 or elements < PARALLEL_MIN_ELEMENTS:
        body(ctx.b, 0, rows)
        return
    ctx.parallel(rows, lambda start, end, _t, _v: body(ctx.b, start, end))


@dataclass(frozen=True)
class Operand:
    """A buffer a loop nest walks: element strides over the nest's shape, a first element."""

    value: SSAValue
    strides: tuple[int, ...]
    offset: int = 0


def parallel_nest(
    ctx: KernelContext,
    shape: Sequence[int],
    operands: Sequence[Operand],
    emit: Callable[[FunctionBuilder, tuple[int, ...], list[Access]], None],
    elements: int | None = None,
) -> None:
    """``emit(b, shape, accesses)`` over ``shape`` (one `Access` per operand), with the outermost
    dim (after collapsing contiguous dims) split among the threads when the nest has at least
    `PARALLEL_MIN_ELEMENTS` elements (``elements``: what one iteration of the nest touches in all,
    when its body is itself a loop): each work item is a block of rows (of 16 rows when the
    outermost dim is the one a transposed read is tiled along, so tiles stay whole; of
    `PARALLEL_CHUNK` elements when the nest is one flat loop), and the rows no whole block holds
    run in the kernel after the team is done."""
    shape = tuple(shape)
    cshape, cstrides = collapse_dims(shape, [op.strides for op in operands])

    def at(b: FunctionBuilder, first: SSAValue | int | None, step: list[int], sub: tuple[int, ...], inner: Sequence[tuple[int, ...]]) -> None:
        accesses = []
        for op, k, st in zip(operands, step, inner):
            el = _element(op.value)
            start = op.offset if first is None else b.add_i64(_value(b, first) if k == 1 else b.mul_i64(_value(b, first), b.i64(k)), b.i64(op.offset))
            accesses.append(Access(b.gep(ctx.ptr(op.value), start, el), st, el))
        emit(b, sub, accesses)

    total = numel(shape) if elements is None else elements
    if not cshape or total < PARALLEL_MIN_ELEMENTS:
        at(ctx.b, None, [0] * len(operands), shape, [op.strides for op in operands])
        return
    if len(cshape) == 1:  # chunks of about PARALLEL_CHUNK elements (rows, when the body is a loop)
        block = max(1, PARALLEL_CHUNK * cshape[0] // total)
        sub, inner = (block,), [st for st in cstrides]
    else:
        tiled = _needs_tiling(cshape, cstrides) and any(st[-1] not in (0, 1) and st[0] == 1 for st in cstrides)
        block = 16 if tiled else 1
        sub, inner = (block, *cshape[1:]) if tiled else cshape[1:], [st if tiled else st[1:] for st in cstrides]
    items, rest = divmod(cshape[0], block)
    step = [block * st[0] for st in cstrides]
    if items < 2:
        at(ctx.b, None, [0] * len(operands), shape, [op.strides for op in operands])
        return

    def work(start: SSAValue, end: SSAValue, _t: SSAValue, _v: list[SSAValue]) -> None:
        b = ctx.b
        emit_for(b, start, end, lambda i, _c: at(b, i, step, sub, inner) or [])

    ctx.parallel(items, work)
    if rest:
        tail = (rest, *cshape[1:]) if len(cshape) > 1 else (rest,)
        at(ctx.b, items, step, tail, cstrides)


def emit_elementwise(
    ctx: KernelContext,
    out: SSAValue,
    inputs: Sequence[SSAValue],
    compute: Callable[[FunctionBuilder, list[SSAValue]], SSAValue],
    input_strides: Sequence[Sequence[int]] | None = None,
    input_offsets: Sequence[int] | None = None,
) -> None:
    """``out[idx] = compute(inputs[k][offset_k + idx * strides_k])`` over the output shape (its
    rows split among the threads when large: `parallel_nest`).

    ``input_strides`` defaults to NumPy broadcasting of each input to the output shape,
    ``input_offsets`` (elements) to 0. Inputs that are splat `buf.constant`s are passed to
    ``compute`` as immediate constants (LLVM then folds ``x * 1.0``, ``pow(x, 2)``, ...).
    """
    shape = _shape(out)
    if input_strides is None:
        input_strides = [broadcast_strides(_shape(v), shape) for v in inputs]
    offsets = input_offsets or [0] * len(inputs)
    splats = {k: c for k, v in enumerate(inputs) if (c := splat_value(v)) is not None}
    operands = [Operand(out, contiguous_strides(shape))] + [
        Operand(v, tuple(st), off) for k, (v, st, off) in enumerate(zip(inputs, input_strides, offsets)) if k not in splats
    ]

    def full(b: FunctionBuilder, loaded: list[SSAValue]) -> SSAValue:
        it = iter(loaded)
        return compute(b, [b.constant(splats[k], _element(inputs[k])) if k in splats else next(it) for k in range(len(inputs))])

    parallel_nest(ctx, shape, operands, lambda b, sub, acc: emit_pointwise(b, sub, acc[0], acc[1:], full))


# --------------------------------------------------------------------------- elementwise

_BINARY: dict[type[Operation], str] = {buf.AddOp: "add", buf.SubOp: "sub", buf.MulOp: "mul", buf.DivOp: "div"}


def _emit_binary(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.ElementwiseBinaryKernel)
    el = _require_same_element(op, [*op.inputs, op.output])
    fn = op.fn.data if isinstance(op, buf.BinaryOp) else _BINARY[type(op)]
    if not isinstance(el, AnyFloat | IntegerType) or el == i1:
        raise LoweringError(f"{op.name}: no codegen for {el} elements")
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    with _scalar_errors(op):
        emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: emit_binary(b, fn, v[0], v[1]))


def _emit_unary(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.UnaryOp | buf.ReluOp)
    el = _require_float(op, [*op.inputs, op.output])
    fn = op.fn.data if isinstance(op, buf.UnaryOp) else "relu"
    if el != f32 and fn not in ("none", "relu", "neg", "abs", "sqrt", "rsqrt"):
        raise LoweringError(f"{op.name}: '{fn}' is emitted for f32 only, got {el}")
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    with _scalar_errors(op):
        emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: emit_unary(b, fn, v[0]))


def _emit_copy(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.CopyOp | buf.BroadcastOp | buf.CastOp)
    if _element(op.inputs[0]) != _element(op.output):
        raise LoweringError(f"{op.name}: input and output element types differ")
    if ctx.same_bytes(op.inputs[0], op.output) and numel(_shape(op.inputs[0])) == numel(_shape(op.output)):
        return  # copying a buffer onto itself
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=False)
    src = op.inputs[0]
    _emit_strided_copy(ctx, op.output, src, broadcast_strides(_shape(src), _shape(op.output)))


def _emit_strided_copy(ctx: KernelContext, out: SSAValue, src: SSAValue, strides: Sequence[int], offset: int = 0) -> None:
    """``out[idx] = src[offset + idx . strides]`` (memcpy per contiguous run, see `emit_copy_nest`;
    rows split among the threads when large)."""
    shape = _shape(out)
    if splat_value(src) is not None:
        emit_elementwise(ctx, out, [src], lambda b, v: v[0])
        return
    operands = [Operand(out, contiguous_strides(shape)), Operand(src, tuple(strides), offset)]
    parallel_nest(ctx, shape, operands, lambda b, sub, acc: emit_copy_nest(b, sub, acc[0], acc[1]))


def _emit_transpose(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.TransposeOp)
    src = op.inputs[0]
    if _element(src) != _element(op.output):
        raise LoweringError(f"{op.name}: input and output element types differ")
    check_no_overlap(ctx, op, op.output, [src], in_place_ok=False)
    own = contiguous_strides(_shape(src))
    _emit_strided_copy(ctx, op.output, src, tuple(own[p] for p in op.permutation))


def _emit_bias_activation(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.BiasActivationOp)
    _require_float(op, [*op.inputs, op.output])
    act = op.activation.data
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    with _scalar_errors(op):
        emit_elementwise(
            ctx, op.output, list(op.inputs), lambda b, v: emit_unary(b, act, b.add(llvm.FAddOp(v[0], v[1])))
        )


def _emit_select(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.SelectOp)
    cond, a, c = op.inputs
    if _element(cond) != i1:
        raise LoweringError(f"{op.name}: the condition must be an i1 buffer, got {cond.type}")
    _require_same_element(op, [a, c, op.output])
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: select(b, v[0], v[1], v[2]))


def _emit_cast(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.CastOp)
    to = _element(op.output)
    if to == _element(op.inputs[0]):
        _emit_copy(ctx, op)  # type: ignore[arg-type]
        return
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    with _scalar_errors(op):
        emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: emit_convert(b, v[0], to))


def _emit_fused_elementwise(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.FusedElementwiseOp)
    block = op.body.block
    for k, (arg, v) in enumerate(zip(block.args, op.inputs)):
        if arg.type != _element(v):
            raise LoweringError(f"{op.name}: body argument {k} is {arg.type}, input {k} holds {_element(v)}")
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    el = _element(op.output)

    def body(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
        result = emit_arith_body(b, block, vals)
        if result.type != el:
            raise LoweringError(f"{op.name}: the body yields {result.type}, the output holds {el}")
        return result

    with _scalar_errors(op):
        emit_elementwise(ctx, op.output, list(op.inputs), body)


# --------------------------------------------------------------------------- data movement


def _emit_slice(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.SliceOp)
    src = op.inputs[0]
    dim, start, step = op.dim.value.data, op.start.value.data, op.step.value.data
    if _element(src) != _element(op.output):
        raise LoweringError(f"{op.name}: input and output element types differ")
    if step <= 0:
        raise LoweringError(f"{op.name}: step must be positive, got {step}")
    check_no_overlap(ctx, op, op.output, [src], in_place_ok=False)
    own = contiguous_strides(_shape(src))
    strides = tuple(s * step if d == dim else s for d, s in enumerate(own))
    _emit_strided_copy(ctx, op.output, src, strides, start * own[dim])


def _emit_concat(ctx: KernelContext, op: Operation) -> None:
    """One copy per input: input k is an ``outer x (size_k * inner)`` block of the output."""
    assert isinstance(op, buf.ConcatOp)
    out = op.output
    el = _require_same_element(op, [*op.inputs, out])
    so, dim = _shape(out), op.dim.value.data
    outer, inner = numel(so[:dim]), numel(so[dim + 1 :])
    row = so[dim] * inner
    width = max(el.bitwidth // 8, 1)  # type: ignore[attr-defined]
    out_extent = ctx.extent(out)
    b = ctx.b
    at = 0
    for v in op.inputs:
        size = _shape(v)[dim] * inner
        slab = None if out_extent is None else (out_extent[0], out_extent[1] + at * width, out_extent[1] + (at + size) * width)
        if not (outer == 1 and slab is not None and ctx.extent(v) == slab):  # already in place
            check_no_overlap(ctx, op, out, [v], in_place_ok=False)
            emit_copy_nest(b, (outer, size), Access(b.gep(ctx.ptr(out), at, el), (row, 1), el), Access(ctx.ptr(v), (size, 1), el))
        at += size


def _table_description(op: Operation) -> str:
    """The embedding table as the model names it: ``'wte.weight'``, or for a tied table imported
    under its other name (``tg.table_name``, from the frontend) ``'transformer.wte.weight' (tied
    to 'lm_head.weight')``; an unnamed table by its type."""
    table = op.inputs[0]  # type: ignore[attr-defined]
    owner = table.owner
    if not isinstance(owner, buf.WeightOp | buf.PackedWeightOp):
        return f"of a {table.type}"
    weight = owner.weight_name.data
    wrote = op.attributes.get(TABLE_NAME)
    return f"'{wrote.data}' (tied to '{weight}')" if wrote is not None and wrote.data != weight else f"'{weight}'"  # type: ignore[attr-defined]


def _bad_index_field(idx: SSAValue, vocab: int) -> str:
    """``{bad_index:K:V}`` when the indices are graph input ``K`` (or a reshape of it): the
    runtime fills in the offending value and where it is (`GraphSignature.status_error`)."""
    while isinstance(idx.owner, buf.ReshapeOp):
        idx = idx.owner.input
    return f"{{bad_index:{idx.index}:{vocab}}}" if isinstance(idx, BlockArgument) else ""


def _emit_embedding(ctx: KernelContext, op: Operation) -> None:
    """``out[i, :] = table[idx[i], :]``, each index checked against [0, V) first. From a packed
    table (`buf.packed_embedding`), row ``j`` starts at ``(j / NR) * D * NR + j % NR`` and its
    elements are ``NR`` apart."""
    assert isinstance(op, buf.EmbeddingOp | buf.PackedEmbeddingOp)
    table, idx = op.inputs
    out = op.output
    el = _require_same_element(op, [table, out])
    ie = _element(idx)
    if not isinstance(ie, IntegerType) or ie == i1:
        raise LoweringError(f"{op.name}: indices must be an integer buffer, got {idx.type}")
    check_no_overlap(ctx, op, out, [table, idx], in_place_ok=False)
    if isinstance(op, buf.PackedEmbeddingOp):
        _, dim, nr = _shape(table)
        vocab = op.rows.value.data
    else:
        (vocab, dim), nr = _shape(table), 1
    message = f"embedding {_table_description(op)}: index out of range [0, {vocab}){_bad_index_field(idx, vocab)}"
    b = ctx.b
    tp, ip, op_ = ctx.ptr(table), ctx.ptr(idx), ctx.ptr(out)
    ult = IntegerAttr(llvm.ICmpPredicateFlag.ULT.to_int(), i64)

    def row(i: SSAValue) -> None:
        j = b.load_element(ip, i, ie)
        if ie != i64:
            j = b.add(llvm.SExtOp(j, i64))
        ctx.check(b.add(llvm.ICmpOp(j, b.i64(vocab), ult)), message)  # also rejects j < 0
        if nr == 1:
            start = b.mul_i64(j, b.i64(dim))
        else:
            panel = b.add(llvm.UDivOp(j, b.i64(nr)))
            start = b.add_i64(b.mul_i64(panel, b.i64(dim * nr)), b.add(llvm.URemOp(j, b.i64(nr))))
        src = b.gep(tp, start, el)
        dst = b.gep(op_, b.offset(None, i, dim), el)
        emit_copy_nest(b, (dim,), Access(dst, (1,), el), Access(src, (nr,), el))

    emit_loop(b, numel(_shape(idx)), row)


def state_name(value: SSAValue) -> str | None:
    """The name of the `buf.state` that ``value`` is (or aliases), else None."""
    owner = value.owner
    while isinstance(owner, buf.ReshapeOp | buf.SubviewOp):
        owner = owner.input.owner
    return owner.state_name.data if isinstance(owner, buf.StateOp) else None


def _emit_cache_write(ctx: KernelContext, op: Operation) -> None:
    """``state[..., past : past + n, ...] = update`` along ``axis`` (``past`` = ``dims[0]``)."""
    assert isinstance(op, buf.CacheWriteOp)
    (update,), state = op.inputs, op.output
    el = _require_same_element(op, [update, state])
    check_no_overlap(ctx, op, state, [update], in_place_ok=False)
    axis = op.axis.value.data
    shape, n = _shape(state), _shape(update)[axis]
    cap, outer, inner = shape[axis], numel(shape[:axis]), numel(shape[axis + 1 :])
    name = state_name(state)
    what = f"kv cache '{name}'" if name is not None else f"cache {state.type}"
    b = ctx.b
    past = ctx.dim(0)
    # unsigned: a negative past is a huge number, so one compare checks 0 <= past <= cap - n
    fits = b.add(llvm.ICmpOp(past, b.i64(cap - n), IntegerAttr(llvm.ICmpPredicateFlag.ULE.to_int(), i64)))
    ctx.check(fits, f"{what}: position {{past}} + {n} new tokens exceed its {cap} positions")
    if n == 0 or outer == 0 or inner == 0:
        return
    dst = b.gep(ctx.ptr(state), b.mul_i64(past, b.i64(inner)) if inner != 1 else past, el)
    emit_copy_nest(b, (outer, n * inner), Access(dst, (cap * inner, 1), el), Access(ctx.ptr(update), (n * inner, 1), el))


# --------------------------------------------------------------------------- reductions


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


# --------------------------------------------------------------------------- matmul

SGEMM = "scipy_cblas_sgemm"
SGEMM_TYPE = llvm.LLVMFunctionType(
    [i32, i32, i32, i32, i32, i32, f32, PTR, i32, PTR, i32, f32, PTR, i32]
)
SGEMV = "scipy_cblas_sgemv"
SGEMV_TYPE = llvm.LLVMFunctionType([i32, i32, i32, i32, f32, PTR, i32, PTR, i32, f32, PTR, i32])
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


def _emit_matmul(ctx: KernelContext, op: Operation) -> None:
    """GEMM, then the activation (if any) as a second sweep over the output.

    `kernels_nn` replaces this entry with an epilogue fused into the blocks the GEMM writes.
    """
    assert isinstance(op, buf.MatmulOp)
    emit_gemm(ctx, op)
    act = op.activation.data
    if act != "none" and numel(_shape(op.output)):
        with _scalar_errors(op):
            emit_elementwise(ctx, op.output, [op.output], lambda b, v: emit_unary(b, act, v[0]))


#: buf kernel op -> emitter. Every `buf.KernelOp` subclass must appear here (softmax,
#: layer_norm and attention are registered by `kernels_nn`, imported by the pass).
REGISTRY: dict[type[Operation], Emitter] = {
    buf.MatmulOp: _emit_matmul,
    buf.AddOp: _emit_binary,
    buf.SubOp: _emit_binary,
    buf.MulOp: _emit_binary,
    buf.DivOp: _emit_binary,
    buf.BinaryOp: _emit_binary,
    buf.ReluOp: _emit_unary,
    buf.UnaryOp: _emit_unary,
    buf.CopyOp: _emit_copy,
    buf.BroadcastOp: _emit_copy,
    buf.TransposeOp: _emit_transpose,
    buf.BiasActivationOp: _emit_bias_activation,
    buf.SelectOp: _emit_select,
    buf.CastOp: _emit_cast,
    buf.FusedElementwiseOp: _emit_fused_elementwise,
    buf.SliceOp: _emit_slice,
    buf.ConcatOp: _emit_concat,
    buf.EmbeddingOp: _emit_embedding,
    buf.PackedEmbeddingOp: _emit_embedding,
    buf.ReduceOp: _emit_reduce,
    buf.CacheWriteOp: _emit_cache_write,
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
