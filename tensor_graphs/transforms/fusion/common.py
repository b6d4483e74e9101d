"""Matching helpers shared by the fusion passes (reading constants, scalar scales, op sets)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from tensor_graphs.dialects.tensor import DivOp, MulOp
from tensor_graphs.transforms.dce import live_uses
from tensor_graphs.transforms.evaluate import scalar_constant, splat_constant

#: Relative tolerance for the constants of a recognised formula (``0.7978845608`` vs sqrt(2/pi)).
CONSTANT_RTOL = 1e-4


def near(value: float | None, expected: float, rtol: float = CONSTANT_RTOL) -> bool:
    return value is not None and math.isclose(value, expected, rel_tol=rtol)


def is_splat(value: SSAValue, expected: float, rtol: float = CONSTANT_RTOL) -> bool:
    """``value`` is a constant whose every element is ``expected`` (within ``rtol``)."""
    return near(splat_constant(value), expected, rtol)


def scalar_scale(value: SSAValue) -> tuple[SSAValue, float, Operation] | None:
    """``(x, c, op)`` when ``value`` is ``x * c``, ``c * x`` or ``x / c`` (``c`` then ``1 / c``) for
    a one-element constant ``c`` that leaves ``x``'s type unchanged; else None."""
    op = value.owner
    if not isinstance(op, MulOp | DivOp):
        return None
    candidates = [(op.lhs, op.rhs)] + ([(op.rhs, op.lhs)] if isinstance(op, MulOp) else [])
    for x, c in candidates:
        scale = scalar_constant(c)
        if scale is None or x.type != op.result.type:
            continue
        if isinstance(op, DivOp):
            if scale == 0.0:
                return None
            scale = 1.0 / scale
        return x, scale, op
    return None


def used_only_inside(ops: Iterable[Operation], root: Operation) -> bool:
    """Every live use of the results of ``ops`` (except ``root``'s) is by an op of ``ops``."""
    members = {id(o) for o in ops} | {id(root)}
    return all(
        id(use.operation) in members
        for o in ops
        if o is not root
        for r in o.results
        for use in live_uses(r)
    )


def float32_kernel(*values: SSAValue) -> bool:
    """Whether ``values`` are float32 tensors: the fused kernels (norms, attention, rope, the
    Winograd convolution) are float32 code; float16/bfloat16 reach them widened
    (`widen-dtypes`), other dtypes stay as primitive ops."""
    return all(getattr(v.type, "element_type", None) == f32 for v in values)
