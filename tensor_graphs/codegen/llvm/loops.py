"""Building blocks for emitting `llvm` dialect code: an insertion cursor and loop nests.

Loops are built from blocks and branches (``llvm.br``/``llvm.cond_br`` with block arguments,
which `xdsl.backend.llvm` turns into phis). Every loop emitted here has a static trip count
``n >= 1`` so it is emitted in rotated (do-while) form, which LLVM's vectoriser takes as is::

    ^pre:   ...                      llvm.br ^body(%c0)
    ^body(%i):  <body(%i)>           %next = add nsw %i, 1
                                     %more = icmp slt %next, n
                                     llvm.cond_br %more, ^body(%next), ^exit
    ^exit:  ...

Strided loop nests (:func:`emit_strided_nest`) walk an output shape with one stride vector
per operand (0 on broadcast dims); :func:`collapse_dims` first merges every pair of adjacent
dims that is contiguous for all operands, so an elementwise op on contiguous buffers is ONE
flat loop whatever its rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import llvm
from xdsl.dialects.builtin import BFloat16Type, FloatAttr, IntegerAttr, IntegerType, f32, i1, i8, i16, i32, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from tensor_graphs import dtypes

PTR = llvm.LLVMPointerType()
_NSW = llvm.OverflowAttr((llvm.OverflowFlag.NO_SIGNED_WRAP,))


class FunctionBuilder:
    """An insertion cursor over one `llvm.func` body.

    ``block`` is where the next op goes; loop helpers move it. Constants are hoisted to the
    top of the entry block (and cached), so they dominate every use.
    """

    def __init__(self, region: Region, arg_types: Sequence[Attribute], *, fma: bool = True):
        self.region = region
        #: whether the target has fused multiply-add instructions (`scalar.fma` emits ``llvm.fma``
        #: then, else a multiply and an add: a software ``fmaf`` call per element would cost more
        #: than the whole kernel)
        self.fma = fma
        self.entry = Block(arg_types=arg_types)
        region.add_block(self.entry)
        self.block = self.entry
        self._constants: dict[tuple[object, Attribute], SSAValue] = {}

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.entry.args)

    def add(self, op: Operation) -> SSAValue:
        """Append ``op`` at the cursor; return its single result (if any)."""
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def new_block(self, arg_types: Sequence[Attribute] = ()) -> Block:
        block = Block(arg_types=arg_types)
        self.region.add_block(block)
        return block

    # ------------------------------------------------------------------ constants

    def constant(self, value: int | float, type: Attribute) -> SSAValue:
        """The constant ``value`` of ``type``, made once per function at its entry; a bfloat16
        value as its i16 bits (bf16 is i16 in the LLVM IR: `jit`)."""
        if isinstance(type, BFloat16Type):
            value, type = int(dtypes.bf16_bits(np.float32(value))), i16
        key = (value, type)
        if key not in self._constants:
            attr = IntegerAttr(int(value), type) if isinstance(type, IntegerType) else FloatAttr(float(value), type)  # type: ignore[arg-type]
            op = llvm.ConstantOp(attr, type)
            first = self.entry.first_op
            if first is None:
                self.entry.add_op(op)
            else:
                self.entry.insert_op_before(op, first)
            self._constants[key] = op.result
        return self._constants[key]

    def i64(self, value: int) -> SSAValue:
        return self.constant(value, i64)

    def i32(self, value: int) -> SSAValue:
        return self.constant(value, i32)

    def f32(self, value: float) -> SSAValue:
        return self.constant(value, f32)

    # ------------------------------------------------------------------ integer helpers

    def add_i64(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(llvm.AddOp(a, b, overflow=_NSW))

    def mul_i64(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(llvm.MulOp(a, b, overflow=_NSW))

    def offset(self, base: SSAValue | None, index: SSAValue, stride: int | SSAValue) -> SSAValue | None:
        """``base + index * stride`` in elements, folding zeros and ones (None means 0); the
        stride may be a run-time i64."""
        if not isinstance(stride, int):
            term = self.mul_i64(index, stride)
            return term if base is None else self.add_i64(base, term)
        if stride == 0:
            return base
        term = index if stride == 1 else self.mul_i64(index, self.i64(stride))
        return term if base is None else self.add_i64(base, term)

    # ------------------------------------------------------------------ memory

    def stack(self, count: int, element_type: Attribute, alignment: int = 64) -> SSAValue:
        """``count`` elements of ``element_type`` on this function's stack: an ``alloca`` in the
        entry block (once per call of the function, wherever the cursor is: not in a loop)."""
        size = self.i64(count)
        alloca = llvm.AllocaOp(size, element_type, alignment=alignment)
        self.entry.insert_op_after(alloca, size.owner)  # type: ignore[arg-type]
        return alloca.results[0]

    def gep(self, ptr: SSAValue, index: SSAValue | int | None, element_type: Attribute) -> SSAValue:
        """``&ptr[index]`` for elements of ``element_type`` (``None``/0: ``ptr`` itself)."""
        if index is None or (isinstance(index, int) and index == 0):
            return ptr
        if isinstance(index, int):
            index = self.i64(index)
        return self.add(
            llvm.GEPOp(ptr, [llvm.GEP_USE_SSA_VAL], element_type, ssa_indices=[index], inbounds=True)
        )

    def load(self, ptr: SSAValue, type: Attribute) -> SSAValue:
        return self.add(llvm.LoadOp(ptr, type))

    def store(self, value: SSAValue, ptr: SSAValue) -> None:
        self.add(llvm.StoreOp(value, ptr))

    # i1 buffers hold one byte per element (NumPy's bool): they are read and written as i8,
    # never as i1 (a vector of i1 in memory is bit-packed, so the vectoriser would misread it).

    def load_element(self, ptr: SSAValue, index: SSAValue | int | None, element_type: Attribute) -> SSAValue:
        """``ptr[index]`` of a buffer of ``element_type`` (i1 is stored as one byte)."""
        if element_type == i1:
            byte = self.load(self.gep(ptr, index, i8), i8)
            return self.add(llvm.ICmpOp(byte, self.constant(0, i8), _icmp("ne")))
        return self.load(self.gep(ptr, index, element_type), element_type)

    def store_element(self, value: SSAValue, ptr: SSAValue, index: SSAValue | int | None, element_type: Attribute) -> None:
        """``ptr[index] = value`` for a buffer of ``element_type`` (i1 is stored as one byte 0/1)."""
        if element_type == i1:
            self.store(self.add(llvm.ZExtOp(value, i8)), self.gep(ptr, index, i8))
            return
        self.store(value, self.gep(ptr, index, element_type))


def _icmp(predicate: str) -> IntegerAttr:
    return IntegerAttr(llvm.ICmpPredicateFlag(predicate).to_int(), i64)


# --------------------------------------------------------------------------- loops


def emit_loop(b: FunctionBuilder, trip_count: int | SSAValue, body: Callable[[SSAValue], None]) -> None:
    """``for i in range(trip_count): body(i)`` (i is an i64); nothing when trip_count <= 0.

    ``body`` emits at ``b.block`` and may itself open loops (it leaves the cursor at the
    block where control continues); afterwards the cursor is the loop's exit block. A run-time
    ``trip_count`` (an i64) is a guarded `emit_for`.
    """
    if not isinstance(trip_count, int):
        emit_for(b, 0, trip_count, lambda i, _: body(i) or [])
        return
    if trip_count <= 0:
        return
    if trip_count == 1:
        body(b.i64(0))
        return
    loop = b.new_block([i64])
    b.add(llvm.BrOp(loop, b.i64(0)))
    b.block = loop
    i = loop.args[0]
    body(i)
    nxt = b.add_i64(i, b.i64(1))
    more = b.add(llvm.ICmpOp(nxt, b.i64(trip_count), IntegerAttr(llvm.ICmpPredicateFlag.SLT.to_int(), i64)))
    exit_ = b.new_block()  # created last so blocks print in control-flow order
    b.add(llvm.CondBrOp(more, loop, [nxt], exit_, []))
    b.block = exit_


def emit_carried_loop(
    b: FunctionBuilder,
    trip_count: int | SSAValue,
    init: Sequence[SSAValue],
    body: Callable[[SSAValue, list[SSAValue]], Sequence[SSAValue]],
) -> list[SSAValue]:
    """``acc = init; for i in range(trip_count): acc = body(i, acc)``; returns the final ``acc``.

    The loop-carried values become block arguments (phis), which is the form LLVM recognises
    as a reduction: an ``fadd`` chain with the ``reassoc`` flag (or ``llvm.maximum``)
    vectorises into vector accumulators. ``body`` may open loops itself. A run-time
    ``trip_count`` is a guarded `emit_for`.
    """
    init = list(init)
    if not isinstance(trip_count, int):
        return emit_for(b, 0, trip_count, lambda i, acc: list(body(i, acc)), init)
    if trip_count <= 0:
        return init
    if trip_count == 1:
        return list(body(b.i64(0), init))
    types = [v.type for v in init]
    loop = b.new_block([i64, *types])
    b.add(llvm.BrOp(loop, b.i64(0), *init))
    b.block = loop
    i, acc = loop.args[0], list(loop.args[1:])
    new = list(body(i, acc))
    nxt = b.add_i64(i, b.i64(1))
    more = b.add(llvm.ICmpOp(nxt, b.i64(trip_count), _icmp("slt")))
    exit_ = b.new_block(types)
    b.add(llvm.CondBrOp(more, loop, [nxt, *new], exit_, new))
    b.block = exit_
    return list(exit_.args)


#: A loop bound or index: an i64 value, or a Python int (a constant).
Index = SSAValue | int


def value(b: FunctionBuilder, x: Index) -> SSAValue:
    """An i64 value: ``x`` itself, or the constant ``x``."""
    return b.i64(x) if isinstance(x, int) else x


def emit_for(
    b: FunctionBuilder,
    start: Index,
    end: Index,
    body: Callable[[SSAValue, list[SSAValue]], Sequence[SSAValue]],
    init: Sequence[SSAValue] = (),
) -> list[SSAValue]:
    """``for i in range(start, end): carried = body(i, carried)``; returns the final values.

    ``start``/``end`` are i64 values or Python ints; with static bounds the loop is emitted
    rotated (no guard), otherwise a guard skips it when ``start >= end``. Loop-carried values
    (reductions) travel as block arguments, which become phis. ``body`` may open loops
    itself; it leaves the cursor where control continues.
    """
    init = list(init)
    if isinstance(start, int) and isinstance(end, int):
        if end <= start:
            return init
        if end - start == 1:
            return list(body(b.i64(start), init))
    types = [v.type for v in init]
    loop = Block(arg_types=[i64, *types])
    exit_ = Block(arg_types=types)
    b.region.add_block(loop)
    if isinstance(start, int) and isinstance(end, int):
        b.add(llvm.BrOp(loop, b.i64(start), *init))
    else:
        go = icmp(b, "slt", value(b, start), value(b, end))
        b.add(llvm.CondBrOp(go, loop, [value(b, start), *init], exit_, init))
    b.block = loop
    i, carried = loop.args[0], list(loop.args[1:])
    new = list(body(i, carried))
    nxt = b.add_i64(i, b.i64(1))
    more = icmp(b, "slt", nxt, value(b, end))
    b.region.add_block(exit_)  # added last so blocks print in control-flow order
    b.add(llvm.CondBrOp(more, loop, [nxt, *new], exit_, new))
    b.block = exit_
    return list(exit_.args)


def emit_if(b: FunctionBuilder, cond: SSAValue, then: Callable[[], None], otherwise: Callable[[], None] | None = None) -> None:
    """``if cond: then() else: otherwise()`` (each emitting at the cursor); the cursor continues
    after both."""
    run, after = b.new_block(), b.new_block()
    other = b.new_block() if otherwise is not None else after
    b.add(llvm.CondBrOp(cond, run, [], other, []))
    for block, emit in ((run, then), (other, otherwise)):
        if emit is None:
            continue
        b.block = block
        emit()
        b.add(llvm.BrOp(after))
    b.block = after


def icmp(b: FunctionBuilder, pred: str, x: SSAValue, y: SSAValue) -> SSAValue:
    flag = llvm.ICmpPredicateFlag(pred)
    return b.add(llvm.ICmpOp(x, y, IntegerAttr(flag.to_int(), i64)))


def min_i64(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.SelectOp(icmp(b, "slt", x, y), x, y))


def max_i64(b: FunctionBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.add(llvm.SelectOp(icmp(b, "sgt", x, y), x, y))


def collapse_dims(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Drop size-1 dims and merge adjacent dims that are contiguous for every stride vector.

    Dims ``d, d+1`` merge when ``stride[d] == stride[d+1] * shape[d+1]`` for all operands
    (a broadcast operand with stride 0 on both merges too). Returns the new shape and strides.
    """
    keep = [d for d, n in enumerate(shape) if n != 1]
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d in keep:
        if out_shape and all(s[-1] == st[d] * shape[d] for s, st in zip(out_strides, strides)):
            out_shape[-1] *= shape[d]
            for s, st in zip(out_strides, strides):
                s[-1] = st[d]
            continue
        out_shape.append(shape[d])
        for s, st in zip(out_strides, strides):
            s.append(st[d])
    return tuple(out_shape), [tuple(s) for s in out_strides]


def emit_strided_nest(
    b: FunctionBuilder,
    shape: Sequence[int],
    strides: Sequence[Sequence[int]],
    body: Callable[[list[SSAValue | None]], None],
    collapse: bool = True,
    bases: Sequence[int] | None = None,
) -> None:
    """Loop over ``shape`` calling ``body(offsets)`` with one element offset per stride vector.

    ``offsets[k]`` is ``bases[k] + sum(idx[d] * strides[k][d])`` as an i64 value, or ``None``
    for 0. Offsets are built incrementally (one multiply-add per loop level).
    """
    if any(isinstance(n, int) and n == 0 for n in shape):
        return
    if collapse and all(isinstance(x, int) for x in (*shape, *(s for st in strides for s in st))):
        shape, strides = collapse_dims(shape, strides)  # (run-time extents or strides: as they are)
    start = [b.i64(x) if x else None for x in (bases or [0] * len(strides))]

    def level(d: int, offsets: list[SSAValue | None]) -> None:
        if d == len(shape):
            body(offsets)
            return

        def inner(i: SSAValue) -> None:
            level(d + 1, [b.offset(off, i, st[d]) for off, st in zip(offsets, strides)])

        emit_loop(b, shape[d], inner)

    level(0, start)


def emit_tiled_nest(
    b: FunctionBuilder,
    shape: Sequence[int],
    strides: Sequence[Sequence[int]],
    body: Callable[[list[SSAValue | None]], None],
    tile: int = 16,
) -> None:
    """Like :func:`emit_strided_nest`, but cache-blocked when an operand walks the output's
    innermost dim with a large stride (a transposed read, say).

    After collapsing, let ``last`` be the innermost dim and ``d`` the dim along which that
    operand is contiguous; both are split into ``tile``-sized blocks (plus static remainders),
    and the loops run ``..., d_block, last_block, d_in_tile, last_in_tile``. Everything stays
    a static strided nest: a split dim is just two dims (``n // tile`` blocks of stride
    ``tile * s``, and ``tile`` of stride ``s``), and a remainder is a base offset.
    """
    if any(n == 0 for n in shape):
        return
    shape, strides = collapse_dims(shape, strides)
    rank = len(shape)
    d = None
    if rank >= 2:
        for st in strides:
            if st[-1] not in (0, 1) and 1 in st[:-1]:
                d = st[:-1].index(1)
                break
    if d is None or shape[d] < tile or shape[-1] < tile:
        emit_strided_nest(b, shape, strides, body, collapse=False)
        return
    last = rank - 1
    others = [x for x in range(rank) if x not in (d, last)]
    for d_full, last_full in ((True, True), (True, False), (False, True), (False, False)):
        dims: list[tuple[int, list[int]]] = [(shape[x], [st[x] for st in strides]) for x in others]
        inner: list[tuple[int, list[int]]] = []
        bases = [0] * len(strides)
        skip = False
        for x, full in ((d, d_full), (last, last_full)):
            q, r = divmod(shape[x], tile)
            if full:
                dims.append((q, [tile * st[x] for st in strides]))
                inner.append((tile, [st[x] for st in strides]))
            elif r:
                inner.append((r, [st[x] for st in strides]))
                bases = [base + q * tile * st[x] for base, st in zip(bases, strides)]
            else:
                skip = True
        if skip:
            continue
        dims += inner
        nest_shape = [n for n, _ in dims]
        nest_strides = [[s[k] for _, s in dims] for k in range(len(strides))]
        emit_strided_nest(b, nest_shape, nest_strides, body, collapse=False, bases=bases)


def broadcast_strides(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a contiguous ``shape`` read as ``target`` (NumPy broadcasting)."""
    from tensor_graphs.dialects.shapes import contiguous_strides

    own = contiguous_strides(shape)
    lead = len(target) - len(shape)
    out = [0] * lead
    for d, n in enumerate(shape):
        out.append(0 if n == 1 and target[lead + d] != 1 else own[d])
    return tuple(out)


def sum_i64(b: FunctionBuilder, *terms: SSAValue | int | None) -> SSAValue | None:
    """The i64 sum of ``terms``, leaving out absent ones (None, 0); None when none is left."""
    total = None
    for t in terms:
        if t is None or (isinstance(t, int) and t == 0):
            continue
        total = value(b, t) if total is None else b.add_i64(total, value(b, t))
    return total
