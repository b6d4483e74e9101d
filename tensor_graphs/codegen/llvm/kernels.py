"""The machinery every kernel emitter shares: ``REGISTRY[type(op)](ctx, op)`` appends llvm
dialect code for one `buf` kernel op.

- :class:`KernelContext`: what an emitter gets from the pass (`convert_buffer_to_llvm`): the
  cursor, the pointer of each buffer, where buffers live (for overlap checks), run-time checks,
  the run-time sizes ``dims`` and parallel regions.
- :data:`REGISTRY`: buf kernel op -> emitter. Each family of kernels registers its emitters
  into it when its module is imported (``convert_buffer_to_llvm`` imports them all)::

      kernels_elementwise       add, sub, mul, div, binary, relu, unary, bias_activation,
                                select, cast, fused_elementwise
      kernels_movement          copy, broadcast, transpose, slice, concat, embedding,
                                packed_embedding, cache_write
      kernels_reduce            reduce
      kernels_blas              matmul (OpenBLAS sgemm / sgemv)
      kernels_matmul_epilogue   matmul with an activation (the activation fused per tile)
      kernels_softmax_norm      softmax, layer_norm, rms_norm
      kernels_attention         attention (tiled, online softmax)
      kernels_gemm              packed_matmul (register-tiled GEMM)
      kernels_rope              rope

- Loop nests over memory: an elementwise op is ONE strided loop nest over the output
  (:func:`emit_pointwise`), with stride 0 on broadcast dims: contiguous dims collapse, so the
  common case is one flat loop that LLVM vectorises, and an input that does not vary along the
  inner loops is loaded outside them. Scalar math comes from `scalar.py` (vectorisable
  polynomials, no libm calls for exp/tanh/erf/log). Splat IR constants become immediates
  (:func:`emit_elementwise`). A strided copy is one ``llvm.memcpy`` per contiguous run
  (:func:`emit_copy_nest`); a transposed read is cache-blocked in 16x16 tiles (see
  `loops.emit_tiled_nest`).
- Threads: :func:`split_rows` and :func:`parallel_nest` split a kernel's outermost rows among
  the threads (`KernelContext.parallel`) when the bytes it moves pay for two threads or more
  (the target's `ThreadWork`), and on no more threads than they pay for.
- Overlap checks: an elementwise input may be the output itself (same bytes); any partial
  overlap, or an output shared with an operand of a kernel that cannot run in place, is a
  clear `LoweringError` (:func:`check_no_overlap`).
- f32 helpers of the row kernels (softmax, the norms, attention, the matmul epilogue):
  loads and stores at an f32 pointer, optional i64 offsets, ``reassoc`` sums, ``llvm.maximum``.

Adding a kernel: write ``def _emit_foo(ctx, op)`` in the module of its family and register it
there (``REGISTRY[buf.FooOp] = _emit_foo``); a new family module must be imported by
``convert_buffer_to_llvm``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import sympy

from xdsl.dialects import llvm
from xdsl.dialects.builtin import AnyFloat, DenseIntOrFPElementsAttr, MemRefType, f32, i1
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.codegen.llvm.loops import (
    FunctionBuilder,
    broadcast_strides,
    collapse_dims,
    emit_for,
    emit_loop,
    emit_strided_nest,
    emit_tiled_nest,
    icmp,
)
from tensor_graphs.codegen.llvm.loops import value as _value
from tensor_graphs.codegen.llvm.scalar import ScalarCodegenError
from tensor_graphs.codegen.llvm.scalar import fmax as scalar_fmax
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import contiguous_strides, numel
from tensor_graphs.dialects.symbolic import dims_of, is_static
from tensor_graphs.target import Target


class LoweringError(PassFailedException, ValueError):
    """A `buf` module cannot be lowered to llvm; the message names the op and the reason."""


class KernelContext(Protocol):
    """What an emitter needs from the pass: the cursor, the pointer of each buffer, where
    buffers live (for overlap checks), and run-time checks."""

    b: FunctionBuilder
    #: the machine compiled for: kernels take their vector width and tiles from it
    target: Target

    def ptr(self, value: SSAValue) -> SSAValue: ...

    def declare(self, name: str, type: llvm.LLVMFunctionType) -> None: ...

    def shared_function(
        self, name: str, arg_types: Sequence[Attribute], build: Callable[[FunctionBuilder], None]
    ) -> None:
        """Define the module's internal function ``name`` (``void``, of ``arg_types``) once:
        the first call builds its body with ``build(builder)`` (which adds the return), later
        calls with the same name do nothing. For code many kernels share, such as a GEMM's
        register tile (`kernels_gemm.tile_function`): one copy to build and optimise, not one
        per call site."""
        ...

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

    def size(self, extent) -> int | SSAValue:
        """``extent`` (an int, or an expression of the graph's size symbols) as an int, or as
        an i64 computed here from ``dims``; call it where the value dominates its uses (before
        ``parallel()``, whose body gets it as one of its ``values``)."""
        ...

    def largest(self, extent) -> int:
        """``extent`` at the top of its symbols' ranges (what a kernel decides tiles and threads
        by, for every size it runs at)."""
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
        work: tuple[float, float] | None = None,
        pays: SSAValue | None = None,
    ) -> None:
        """Run ``body(start, end, thread, values)`` on every thread (`runtime_support.threads`;
        at most ``max_threads``, and at most as many as ``work`` = (flops, bytes) of the whole
        kernel pays for: `Target.thread_work`), over contiguous chunks of ``[0, items)``
        (guided: a thread may run several, and ``thread`` is the same for them); the
        cursor is then in a worker function, where ``ptr()`` gives the worker's pointers and
        ``values`` (i64s computed before, in the kernel) arrive as ``values``. ``thread`` is the
        worker's index (for its own scratch). No run-time check or ``dim()`` inside ``body``.
        A kernel of run-time sizes passes ``work`` at its largest sizes and ``pays``, an i1: when
        false in a call, the body runs in the kernel without the team (`paying_rows`)."""
        ...


Emitter = Callable[[KernelContext, Operation], None]

#: buf kernel op -> emitter. The kernel family modules register their emitters here when they
#: are imported (see the module doc); once ``convert_buffer_to_llvm`` has imported them all,
#: every `buf.KernelOp` subclass appears here.
REGISTRY: dict[type[Operation], Emitter] = {}

# --------------------------------------------------------------------------- helpers


def _shape(value: SSAValue) -> tuple:
    """Ints, and an expression of the size symbols for each dynamic dim (`dialects.symbolic`):
    only the emitters of `SYMBOLIC_KERNELS` see those."""
    return dims_of(value.type)


def _element(value: SSAValue) -> Attribute:
    return value.type.element_type  # type: ignore[attr-defined]


def _element_bytes(value: SSAValue) -> int:
    """Bytes per element of a buffer (an i1 counts as one)."""
    el = _element(value)
    width = getattr(el, "bitwidth", None) or getattr(el, "width", None)
    width = width.data if hasattr(width, "data") else width
    return max(1, int(width or 32) // 8)


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


# --------------------------------------------------------------------------- f32 helpers

_REASSOC = llvm.FastMathAttr((llvm.FastMathFlag.REASSOC, llvm.FastMathFlag.ALLOW_CONTRACT))
_NEG_INF = float("-inf")


def _require_f32(op: Operation, values: Sequence[SSAValue]) -> None:
    bad = [str(v.type.element_type) for v in values if v.type.element_type != f32]  # type: ignore[attr-defined]
    if bad:
        raise LoweringError(f"{op.name}: codegen supports f32 buffers only, got {', '.join(bad)}")


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
    y = _value(b, y)
    return y if x is None else b.add_i64(x, y)


def _mul_idx(b: FunctionBuilder, x: SSAValue, c: int | SSAValue) -> SSAValue | None:
    """``x * c`` (None for 0); ``c`` may be a run-time i64."""
    if not isinstance(c, int):
        return b.mul_i64(x, c)
    if c == 0:
        return None
    return x if c == 1 else b.mul_i64(x, b.i64(c))


class RunTimeSizes:
    """Sizes a kernel's parallel body needs, by name, some of them expressions of the size
    symbols: those are computed in the kernel (`KernelContext.size`), passed to the team as
    ``values`` (``.values``) and read back inside (``.inside(values)``: name -> int or i64)."""

    def __init__(self, ctx: KernelContext, sizes: dict[str, object]):
        self.static = {k: v for k, v in sizes.items() if isinstance(v, int)}
        self.names = [k for k, v in sizes.items() if not isinstance(v, int)]
        self.values = [ctx.size(sizes[k]) for k in self.names]

    def inside(self, values: Sequence[SSAValue]) -> dict[str, int | SSAValue]:
        return {**self.static, **dict(zip(self.names, values))}


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
    if any(isinstance(n, int) and n == 0 for n in shape):
        return
    strides = [out.strides, *(a.strides for a in ins)]
    run_time = not is_static(shape) or not all(is_static(st) for st in strides)
    if not run_time:  # (run-time extents or strides: the nest as it is, no tiling)
        shape, strides = collapse_dims(shape, strides)
    rank = len(shape)

    def store(offsets: Sequence[SSAValue | None], vals: list[SSAValue]) -> None:
        b.store_element(compute(b, vals), out.ptr, offsets[0], out.element)

    if not hoist or (not run_time and _needs_tiling(shape, strides)):
        def body(offsets: list[SSAValue | None]) -> None:
            store(offsets, [b.load_element(a.ptr, off, a.element) for a, off in zip(ins, offsets[1:])])

        if hoist:
            emit_tiled_nest(b, shape, strides, body)
        else:
            emit_strided_nest(b, shape, strides, body, collapse=False)
        return

    # the loop depth at which each input's address stops changing
    depth = [max((d + 1 for d in range(rank) if not (isinstance(st[d], int) and st[d] == 0)), default=0) for st in strides[1:]]

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
    innermost dim with stride 1 (after collapsing; with run-time outer extents or strides, as
    they are), else an element loop nest (tiled when the read is transposed). The buffers must
    not overlap."""
    if any(isinstance(n, int) and n == 0 for n in shape):
        return
    if all(isinstance(x, int) for x in (*shape[:-1], *out.strides, *src.strides)):
        collapsed, (so, ss) = collapse_dims(shape, [out.strides, src.strides])
    else:  # run-time extents or strides: the dims as they are
        collapsed, so, ss = tuple(shape), out.strides, src.strides
    if not collapsed or so[-1] != 1 or ss[-1] != 1 or out.element != src.element:
        emit_pointwise(b, shape, out, [src], lambda b, v: v[0])
        return
    shape = collapsed
    width = max(out.element.bitwidth // 8, 1)  # type: ignore[attr-defined]
    length = shape[-1]  # a run-time count when the nest's rows are
    nbytes = b.i64(length * width) if isinstance(length, int) else b.mul_i64(length, b.i64(width))

    def run(offsets: list[SSAValue | None]) -> None:
        dst_ptr, src_ptr = b.gep(out.ptr, offsets[0], out.element), b.gep(src.ptr, offsets[1], src.element)
        b.add(llvm.CallIntrinsicOp("llvm.memcpy.p0.p0.i64", [dst_ptr, src_ptr, nbytes, b.constant(0, i1)], []))

    emit_strided_nest(b, shape[:-1], [so[:-1], ss[:-1]], run, collapse=False)


#: Elements per work item when a one-dimensional loop is split among the threads.
PARALLEL_CHUNK = 4096


def split_rows(
    ctx: KernelContext,
    rows,
    elements,
    body: Callable[[FunctionBuilder, SSAValue | int, SSAValue | int], None],
    bytes_per_element: int = 8,
) -> None:
    """``body(b, start, end)`` over the rows ``[0, rows)``: split among the graph's threads when the
    kernel's ``elements`` x ``bytes_per_element`` bytes (read and written) pay for two threads
    or more (`Target.thread_work`), on as many as they pay for; else once, in the kernel.
    ``body`` emits at ``b`` and takes its buffers from ``ctx.ptr`` (a worker has its own
    pointers). Symbolic ``rows`` (and ``elements``) are counted at run time, split when the
    rows of the call pay for two threads (`paying_rows`); the team's size is decided
    at the largest rows."""
    if not isinstance(rows, int):
        most = ctx.largest(rows)
        row_bytes = float(sympy.cancel(sympy.sympify(elements) / rows)) * bytes_per_element
        count = ctx.size(rows)
        if most < 2 or ctx.target.thread_work.threads(0.0, most * row_bytes) < 2:
            body(ctx.b, 0, count)
            return
        ctx.parallel(count, lambda start, end, _t, _v: body(ctx.b, start, end), work=(0.0, most * row_bytes),
                     pays=paying_rows(ctx, count, most, lambda r: (0.0, r * row_bytes)))
        return
    work = (0.0, float(elements * bytes_per_element))
    if rows < 2 or ctx.target.thread_work.threads(*work) < 2:
        body(ctx.b, 0, rows)
        return
    ctx.parallel(rows, lambda start, end, _t, _v: body(ctx.b, start, end), work=work)


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
    dim (after collapsing contiguous dims) split among the threads when the bytes the nest moves
    (``elements`` x the operands' element sizes; ``elements``: what one iteration of the nest
    touches in all, when its body is itself a loop) pay for two threads or more, on as many as
    they pay for (`Target.thread_work`): each work item is a block of rows (of 16 rows when the
    outermost dim is the one a transposed read is tiled along, so tiles stay whole; of
    `PARALLEL_CHUNK` elements when the nest is one flat loop), and the rows no whole block holds
    run in the kernel after the team is done."""
    shape = tuple(shape)
    cshape, cstrides = collapse_dims(shape, [op.strides for op in operands])
    if not is_static(cshape) or not all(is_static(st) for st in cstrides):
        _symbolic_nest(ctx, shape, cshape, cstrides, operands, emit, elements)
        return
    at = _nest_at(ctx, operands, emit)

    total = numel(shape) if elements is None else elements
    work = (0.0, float(total * sum(_element_bytes(op.value) for op in operands)))
    if not cshape or ctx.target.thread_work.threads(*work) < 2:
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

    def run_items(start: SSAValue, end: SSAValue, _t: SSAValue, _v: list[SSAValue]) -> None:
        b = ctx.b
        emit_for(b, start, end, lambda i, _c: at(b, i, step, sub, inner) or [])

    ctx.parallel(items, run_items, work=work)
    if rest:
        tail = (rest, *cshape[1:]) if len(cshape) > 1 else (rest,)
        at(ctx.b, items, step, tail, cstrides)


def _nest_at(ctx: KernelContext, operands: Sequence[Operand], emit, offsets: Sequence | None = None) -> Callable:
    """``at(b, first, step, sub, inner)``: ``emit`` over the sub-nest ``sub`` whose first row is
    ``first`` (None: 0; ``step[k]`` elements of operand k per row), each operand walked by its
    ``inner`` strides from its offset (``offsets[k]``, an int or an i64, when given)."""

    def at(b: FunctionBuilder, first, step: list[int], sub: tuple, inner: Sequence[tuple[int, ...]]) -> None:
        accesses = []
        for i, (op, k, st) in enumerate(zip(operands, step, inner)):
            el = _element(op.value)
            base = op.offset if offsets is None else offsets[i]
            start = base if first is None else b.add_i64(_value(b, first) if isinstance(k, int) and k == 1 else b.mul_i64(_value(b, first), _value(b, k)), _value(b, base))
            accesses.append(Access(b.gep(ctx.ptr(op.value), start, el), st, el))
        emit(b, sub, accesses)

    return at


def paying_rows(ctx: KernelContext, rows: SSAValue, most: int, work: Callable[[int], tuple[float, float]]) -> SSAValue:
    """The i1 ``rows >= r``, r the fewest rows whose ``work(r)`` (flops, bytes; growing with the
    rows) pays for a second thread (`Target.thread_work`): a kernel of run-time rows starts its
    team only then (`KernelContext.parallel`'s ``pays``)."""
    lo, hi = 1, max(most, 1)
    while lo < hi:  # the first r in [1, most] that pays (most when none does)
        mid = (lo + hi) // 2
        if ctx.target.thread_work.threads(*work(mid)) >= 2:
            hi = mid
        else:
            lo = mid + 1
    return icmp(ctx.b, "sge", rows, ctx.b.i64(lo))


def image_and_row(b: FunctionBuilder, r: SSAValue, images, rows: int) -> tuple[SSAValue | int, SSAValue]:
    """Row ``r`` of ``images`` x ``rows`` rows as (its image, its row in that image): a batch of
    images' rows numbered together (a convolution's channels or windows over a batch, a
    Winograd transform's images x channels)."""
    if images == 1:
        return 0, r
    image = b.add(llvm.UDivOp(r, b.i64(rows)))
    return image, b.add(llvm.SubOp(r, b.mul_i64(image, b.i64(rows))))


def static_row(op: Operation, *sizes) -> None:
    """A LoweringError unless every one of ``sizes`` (a row's length, its inner extent) is static:
    a row kernel counts only its rows at run time."""
    if not all(isinstance(n, int) for n in sizes):
        raise LoweringError(f"{op.name}: its rows have the symbolic length {[str(n) for n in sizes]}; this kernel "
                            "takes symbolic sizes in its outer dims (the number of rows) only")


def _symbolic_nest(ctx: KernelContext, shape, cshape, cstrides, operands: Sequence[Operand], emit, elements) -> None:
    """`parallel_nest` over a nest with symbolic sizes (`dialects.symbolic`): its outermost rows
    counted at run time (`KernelContext.size`) and split among the threads when the rows of this
    call pay for two (the team's size as at the largest rows); every other extent, stride and
    offset that depends on the symbols computed in the kernel and passed to the team
    (`RunTimeSizes`). Inner dims of run-time size run as a plain strided nest (`emit_pointwise`)."""
    op = getattr(ctx, "kernel_op", None)
    name = op.name if op is not None else "a kernel"
    if is_static(cshape[1:]) and all(is_static(st) for st in cstrides) and _needs_tiling(
            tuple(ctx.largest(d) for d in cshape), cstrides):
        raise LoweringError(f"{name}: a transposed read over a symbolic size {[str(d) for d in shape]} is not supported")
    max_rows = ctx.largest(cshape[0])
    per_row = ctx.largest(numel(cshape[1:]) if elements is None else sympy.cancel(sympy.sympify(elements) / cshape[0]))
    row_bytes = float(per_row * sum(_element_bytes(o.value) for o in operands))
    flat = len(cshape) == 1
    block = max(1, PARALLEL_CHUNK // max(per_row, 1)) if flat else 1
    rank, n_ops = len(cshape), len(operands)
    sizes = RunTimeSizes(ctx, {
        **{f"o{k}": o.offset for k, o in enumerate(operands)},
        **{f"d{d}": cshape[d] for d in range(rank)},
        **{f"s{k}_{d}": cstrides[k][d] for k in range(n_ops) for d in range(rank)},
        **{f"step{k}": block * cstrides[k][0] for k in range(n_ops)},
    })

    def nest(values: Sequence[SSAValue]):
        """(at, shape, strides, step) of the nest, as the code reading ``values`` sees them."""
        known = sizes.inside(values)
        at = _nest_at(ctx, operands, emit, [known[f"o{k}"] for k in range(n_ops)])
        dims = tuple(known[f"d{d}"] for d in range(rank))
        strides = [tuple(known[f"s{k}_{d}"] for d in range(rank)) for k in range(n_ops)]
        return at, dims, strides, [known[f"step{k}"] for k in range(n_ops)]

    at, dims, strides, step = nest(sizes.values)
    rows = dims[0]
    if ctx.target.thread_work.threads(0.0, max_rows * row_bytes) < 2 or max_rows // block < 2:
        at(ctx.b, None, [0] * n_ops, dims, strides)
        return
    b = ctx.b
    items = b.add(llvm.SDivOp(_value(b, rows), b.i64(block))) if block > 1 else rows

    def run_items(start: SSAValue, end: SSAValue, _t: SSAValue, values: list[SSAValue]) -> None:
        at, dims, strides, step = nest(values)
        sub, inner = ((block,), strides) if flat else (dims[1:], [st[1:] for st in strides])
        emit_for(ctx.b, start, end, lambda i, _c: at(ctx.b, i, step, sub, inner) or [])

    ctx.parallel(items, run_items, sizes.values, work=(0.0, max_rows * row_bytes),
                 pays=paying_rows(ctx, _value(b, rows), max_rows, lambda r: (0.0, r * row_bytes)))
    if block > 1:  # the rows no whole block holds
        b = ctx.b
        rest = b.add(llvm.SubOp(_value(b, rows), b.mul_i64(items, b.i64(block))))
        at(b, items, step, (rest,), strides)


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


#: the kernel ops whose emitters read symbolic sizes (`dialects.symbolic`) at run time
#: (`KernelContext.size`); a kernel family adds its ops when it does. Any other kernel with a
#: dynamic dim is a compile-time error naming it.
SYMBOLIC_KERNELS: set[type[Operation]] = set()


def check_memref(op: Operation, value: SSAValue) -> MemRefType:
    """Codegen handles contiguous memrefs; a dynamic dim only in the operands of the kernels of
    `SYMBOLIC_KERNELS` (and of the aliases and views, which need no code)."""
    t = value.type
    if not isinstance(t, MemRefType):
        raise LoweringError(f"{op.name}: expected a memref, got {t}")
    from xdsl.dialects.builtin import DYNAMIC_INDEX, NoneAttr

    if not isinstance(t.layout, NoneAttr):
        raise LoweringError(f"{op.name}: memref {t} has a layout; only contiguous buffers are supported")
    if DYNAMIC_INDEX in t.get_shape() and isinstance(op, buf.KernelOp) and type(op) not in SYMBOLIC_KERNELS:
        raise symbolic_refusal(op, value, "this kernel takes its sizes at compile time only")
    return t


def symbolic_refusal(op: Operation, value: SSAValue, why: str) -> LoweringError:
    """The compile-time error of a kernel that cannot take ``value``'s symbolic sizes: the op, where
    the model has it, each symbol and the input dim it comes from, ``why``, and the way out."""
    from tensor_graphs.diagnostics import location_of

    where = f" (at {loc})" if (loc := location_of(op)) else ""
    names = sorted({str(x) for d in dims_of(value.type) if not isinstance(d, int) for x in d.free_symbols})
    return LoweringError(
        f"{op.name}{where}: its operand {value.type} has a symbolic size ({', '.join(_symbol_sources(op, names))}), and "
        f"{why}; give those dims a static size (drop them from dynamic_shapes)")


def _symbol_sources(op: Operation, names: list[str]) -> list[str]:
    """For each size symbol of ``names``: where the graph's inputs take it ("seq: input 'x' dim 1")."""
    fn = op.parent_op()
    while fn is not None and not hasattr(fn, "function_type"):
        fn = fn.parent_op()
    args = list(fn.body.block.args) if fn is not None and fn.body.blocks else []
    out = []
    for name in names:
        places = [f"input '{a.name_hint or i}' dim {d}" for i, a in enumerate(args) if hasattr(a.type, "get_shape")
                  for d, x in enumerate(dims_of(a.type)) if not isinstance(x, int) and str(x) == name]
        out.append(f"{name}: {', '.join(places[:1]) or 'no input dim'}")
    return out
