"""Helpers shared by the aten → tg pattern files: constants, casts, op lists, match-failure reasons."""

from __future__ import annotations

from contextvars import ContextVar

import numpy as np
from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from tensor_graphs.dialects.tensor import CastOp, ConstantOp, FusedElementwiseOp, ReshapeOp, YieldOp, shape_of
from tensor_graphs.dialects.dense import dense_from_numpy, numpy_dtype_of

#: op -> why no pattern could convert it; set by the pass around its walk (None outside a pass)
MATCH_FAILURES: ContextVar[dict[int, tuple[Operation, str]] | None] = ContextVar("aten_match_failures", default=None)


def notify_match_failure(op: Operation, reason: str) -> None:
    """Record why ``op`` was left alone (reported by the pass if the op is still there at the end)."""
    failures = MATCH_FAILURES.get()
    if failures is not None:
        failures[id(op)] = (op, reason)


def element_type(value: SSAValue) -> Attribute:
    return value.type.element_type  # type: ignore[attr-defined]


def constant(value: float | int | bool, shape: tuple[int, ...] = (), element_type: Attribute = f32) -> ConstantOp:
    """``tg.constant dense<value> : tensor<shape x element_type>`` (every element equal)."""
    return ConstantOp(dense_from_numpy(np.full(shape, value, dtype=numpy_dtype_of(element_type)), element_type))


def scalar_constant(value: float | int | bool, element_type: Attribute = f32) -> ConstantOp:
    """``tg.constant dense<value> : tensor<element_type>`` (rank 0, broadcasts against anything)."""
    return constant(value, (), element_type)


class OpList(list[Operation]):
    """The new ops of one rewrite, in order; ``add`` returns the op's (first) result."""

    def add(self, op: Operation) -> SSAValue:
        self.append(op)
        return op.results[0]

    def reshape(self, value: SSAValue, shape: tuple[int, ...]) -> SSAValue:
        """``value`` reshaped to ``shape`` (no op when it already has that shape)."""
        return value if shape_of(value) == tuple(shape) else self.add(ReshapeOp(value, tuple(shape)))

    def cast(self, value: SSAValue, to: Attribute) -> SSAValue:
        """``value`` with element type ``to`` (no op when it has it already)."""
        return value if element_type(value) == to else self.add(CastOp(value, to))


def append(block: Block, op: Operation) -> SSAValue:
    """Append ``op`` to a scalar body's ``block``; its (first) result."""
    block.add_op(op)
    return op.results[0]


def elementwise_body(inputs: list[SSAValue], result_type: TensorType, build) -> FusedElementwiseOp:
    """A one-op `tg.fused_elementwise` over ``inputs`` whose scalar body is ``build(block, args)``
    (it appends its ops to ``block`` and returns the value to yield): how an elementwise function
    with no named tg op (a comparison, sign, floor) reaches every level below."""
    block = Block(arg_types=[element_type(v) for v in inputs])
    result = build(block, list(block.args))
    block.add_op(YieldOp(result))
    return FusedElementwiseOp(inputs, result_type, Region([block]))
