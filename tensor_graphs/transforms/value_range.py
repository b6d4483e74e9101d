"""Integer value ranges of tg values, for folds that a symbolic size keeps constant-fold from
doing: a mask built from ``torch.arange(seq)`` (``arange(seq) >= 0``, transformers' all-true
padding mask) has a symbolic shape, so it is never a ``tg.constant``, yet every element is the
same; `canonicalize` replaces such a computation by a splat (`constant_over_ranges`).

`value_range` follows a value back through the ops that only move or select elements (reshape,
broadcast, transpose, slice, take, widening casts) to an iota (its start, step and the largest
length its size symbols allow) or an integer constant, and through the integer body of a
``tg.fused_elementwise`` (`interval_of_body`: interval arithmetic over ``arith`` ops). Only
integers and booleans: a float body (NaN, rounding) is never folded this way.

    %a = tg.iota {start = 0.0 : f64, step = 1.0 : f64} : tensor<?xi64, ["seq"]>          [0, 511]
    %m = tg.fused_elementwise %a : ... -> tensor<?xi1, ["seq"]> { x >= 0 }                [1, 1]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, i1
from xdsl.ir import Block, SSAValue

from tensor_graphs.dialects.symbolic import symbols_of, upper_bound
from tensor_graphs.dialects.tensor import (
    BroadcastOp,
    CastOp,
    ConstantOp,
    ElementwiseBinaryOp,
    ElementwiseUnaryOp,
    FusedElementwiseOp,
    IotaOp,
    ReshapeOp,
    SelectOp,
    SliceOp,
    TakeOp,
    TransposeOp,
    shape_of,
)
from tensor_graphs.transforms.evaluate import dense_to_array

Interval = tuple[int, int]

#: ops whose elements are some of their first operand's
_MOVES = (ReshapeOp, BroadcastOp, TransposeOp, SliceOp, TakeOp)


def _integer(value: SSAValue) -> bool:
    element = getattr(value.type, "element_type", value.type)
    return isinstance(element, IntegerType)


def value_range(value: SSAValue, depth: int = 32) -> Interval | None:
    """[lo, hi] holding every element of the integer tensor ``value`` at every size in range;
    None when unknown."""
    if depth == 0 or not _integer(value):
        return None
    op = value.owner
    if isinstance(op, ConstantOp):
        array = dense_to_array(op.value)
        return (int(array.min()), int(array.max())) if array.size else None
    if isinstance(op, IotaOp):
        start, step = op.start.value.data, op.step.value.data
        if start != int(start) or step != int(step):
            return None
        (n,) = shape_of(op.result)
        longest = n if isinstance(n, int) else upper_bound([n], symbols_of(op))[0]
        last = int(start) + int(step) * max(longest - 1, 0)
        return (min(int(start), last), max(int(start), last))
    if isinstance(op, _MOVES):
        return value_range(op.operands[0], depth - 1)
    if isinstance(op, CastOp) and _integer(op.input):
        inner = value_range(op.input, depth - 1)
        width = op.result.type.element_type.width.data  # type: ignore[attr-defined]
        return inner if inner is not None and -(1 << (width - 1)) <= inner[0] and inner[1] < (1 << (width - 1)) else None
    if isinstance(op, FusedElementwiseOp):
        ranges = [value_range(v, depth - 1) for v in op.inputs]
        if any(r is None for r in ranges):
            return None
        return interval_of_body(op.body.block, ranges)  # type: ignore[arg-type]
    return None


def interval_of_body(block: Block, inputs: list[Interval]) -> Interval | None:
    """The interval of what ``block`` (a fused_elementwise body) yields when its arguments lie in
    ``inputs``; None when an op is not integer ``arith`` this knows."""
    env: dict[SSAValue, Interval] = dict(zip(block.args, inputs))
    for op in block.ops:
        if op.name in ("tg.yield", "buf.yield"):
            return env.get(op.operands[0])
        got = _interval_op(op, env)
        if got is None:
            return None
        env[op.results[0]] = got
    return None


def _interval_op(op, env: Mapping[SSAValue, Interval]) -> Interval | None:
    if isinstance(op, arith.ConstantOp):
        v = getattr(op.value, "value", None)
        data = getattr(v, "data", None)
        if not isinstance(data, (int, bool, np.integer)):
            return None
        data = int(data != 0) if op.result.type == i1 else int(data)  # (an i1 true may print as -1)
        return data, data
    args = [env.get(v) for v in op.operands]
    if any(a is None for a in args):
        return None
    if isinstance(op, arith.CmpiOp):
        return _compare(op.predicate.value.data, *args)  # type: ignore[arg-type]
    if isinstance(op, arith.SelectOp):
        c, x, y = args
        return x if c == (1, 1) else y if c == (0, 0) else (min(x[0], y[0]), max(x[1], y[1]))  # type: ignore[index]
    (a, b) = args if len(args) == 2 else (args[0], None)
    if b is None:
        return None
    if isinstance(op, arith.AddiOp):
        return a[0] + b[0], a[1] + b[1]  # type: ignore[index]
    if isinstance(op, arith.SubiOp):
        return a[0] - b[1], a[1] - b[0]  # type: ignore[index]
    if isinstance(op, arith.MuliOp):
        corners = [x * y for x in a for y in b]  # type: ignore[union-attr]
        return min(corners), max(corners)
    if isinstance(op, (arith.AndIOp, arith.OrIOp)) and all(0 <= v[0] <= v[1] <= 1 for v in (a, b)):  # booleans
        f = min if isinstance(op, arith.AndIOp) else max
        return f(a[0], b[0]), f(a[1], b[1])  # type: ignore[index]
    return None


#: arith.cmpi predicates (MLIR's numbering) -> (always true, always false) tests on the intervals
_PREDICATES = {
    0: (lambda a, b: a[0] == a[1] == b[0] == b[1], lambda a, b: a[1] < b[0] or b[1] < a[0]),  # eq
    1: (lambda a, b: a[1] < b[0] or b[1] < a[0], lambda a, b: a[0] == a[1] == b[0] == b[1]),  # ne
    2: (lambda a, b: a[1] < b[0], lambda a, b: a[0] >= b[1]),  # slt
    3: (lambda a, b: a[1] <= b[0], lambda a, b: a[0] > b[1]),  # sle
    4: (lambda a, b: a[0] > b[1], lambda a, b: a[1] <= b[0]),  # sgt
    5: (lambda a, b: a[0] >= b[1], lambda a, b: a[1] < b[0]),  # sge
}


def _compare(predicate: int, a: Interval, b: Interval) -> Interval | None:
    tests = _PREDICATES.get(predicate)
    if tests is None:
        return None  # unsigned predicates: not decided here
    always, never = tests
    return (1, 1) if always(a, b) else (0, 0) if never(a, b) else (0, 1)


# --------------------------------------------------------------------------- index-local masks


#: the most elements `index_local_array` evaluates (a 2048 x 2048 mask; a larger one stays a mask)
INDEX_LOCAL_ELEMENTS = 1 << 22


def index_local_array(value: SSAValue, depth: int = 32) -> np.ndarray | None:
    """``value`` evaluated at the largest sizes its symbols allow, when every element depends on
    its own coordinates only (never on the sizes themselves): then the array at any smaller
    size is this one's leading corner, and what holds for this array (a causal pattern, all
    zeros) holds at every size. Followed: iotas and constants, broadcasts, reshapes that only add
    or drop dims of 1, takes from a splat, elementwise ops (selects, casts, comparisons, ...) and
    elementwise bodies (`tg.fused_elementwise`); None
    for anything else (a `tg.size`, a reduction, a function argument).

        %i = tg.iota : tensor<?xi64, ["seq"]>;  %q = tg.reshape %i : ... tensor<?x1xi64, ["seq"]>
        %k = tg.reshape %i : ... tensor<1x?xi64, ["seq"]>
        %m = tg.fused_elementwise %k, %q { select(k <= q, 0.0, -inf) } : tensor<?x?xf32, ["seq", "seq"]>
        -> the 512 x 512 causal mask (seq in [1, 512])"""
    from tensor_graphs.transforms.evaluate import evaluate_op, fused_elementwise_at

    if depth == 0:
        return None
    op = value.owner
    symbols = symbols_of(op) if op is not None and not isinstance(op, Block) else {}
    shape = upper_bound(shape_of(value), symbols) if symbols else shape_of(value)
    if not all(isinstance(d, int) for d in shape) or int(np.prod(shape)) > INDEX_LOCAL_ELEMENTS:
        return None
    if isinstance(op, ConstantOp):
        return dense_to_array(op.value)
    if isinstance(op, IotaOp):
        return (op.start.value.data + np.arange(shape[0], dtype=np.float64) * op.step.value.data).astype(
            dense_dtype(value))
    if isinstance(op, TakeOp):  # from a splat: the splat, whatever the offsets
        x = index_local_array(op.operands[0], depth - 1)
        return np.full(shape, x.flat[0], x.dtype) if x is not None and x.size and np.all(x == x.flat[0]) else None
    if isinstance(op, (BroadcastOp, ReshapeOp)):
        x = index_local_array(op.operands[0], depth - 1)
        if x is None:
            return None
        if isinstance(op, ReshapeOp):
            if [d for d in shape_of(op.operands[0]) if d != 1] != [d for d in shape_of(value) if d != 1]:
                return None  # a reshape that merges or splits dims moves elements by the sizes
            return x.reshape(shape)
        return np.broadcast_to(x, shape).copy()
    if isinstance(op, (FusedElementwiseOp, CastOp, SelectOp, ElementwiseBinaryOp, ElementwiseUnaryOp)):
        inputs = [index_local_array(v, depth - 1) for v in op.operands]
        if any(x is None for x in inputs):
            return None
        if isinstance(op, FusedElementwiseOp):
            return fused_elementwise_at(op, inputs, shape)  # type: ignore[arg-type]
        return np.broadcast_to(evaluate_op(op, inputs), shape).copy()  # type: ignore[arg-type]  (NumPy's broadcasting)
    return None


def dense_dtype(value: SSAValue) -> np.dtype:
    """The NumPy dtype of ``value``'s elements."""
    from tensor_graphs import dtypes

    return dtypes.of_element(value.type.element_type).storage  # type: ignore[attr-defined]
