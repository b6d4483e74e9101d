"""Helpers shared by the aten → tg pattern files: scalar constants, op lists, match-failure reasons."""

from __future__ import annotations

from contextvars import ContextVar

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32
from xdsl.ir import Operation, SSAValue

from tensor_graphs.dialects.tensor import ConstantOp, ReshapeOp, shape_of

#: op -> why no pattern could convert it; set by the pass around its walk (None outside a pass)
MATCH_FAILURES: ContextVar[dict[int, tuple[Operation, str]] | None] = ContextVar("aten_match_failures", default=None)


def notify_match_failure(op: Operation, reason: str) -> None:
    """Record why ``op`` was left alone (reported by the pass if the op is still there at the end)."""
    failures = MATCH_FAILURES.get()
    if failures is not None:
        failures[id(op)] = (op, reason)


def scalar_constant(value: float) -> ConstantOp:
    """``tg.constant dense<value> : tensor<f32>``."""
    return ConstantOp(DenseIntOrFPElementsAttr.from_list(TensorType(f32, []), [float(value)]))


class OpList(list[Operation]):
    """The new ops of one rewrite, in order; ``add`` returns the op's (first) result."""

    def add(self, op: Operation) -> SSAValue:
        self.append(op)
        return op.results[0]

    def reshape(self, value: SSAValue, shape: tuple[int, ...]) -> SSAValue:
        """``value`` reshaped to ``shape`` (no op when it already has that shape)."""
        return value if shape_of(value) == tuple(shape) else self.add(ReshapeOp(value, tuple(shape)))
