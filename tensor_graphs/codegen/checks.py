"""The run-time checks' messages, one text for both back ends: what a graph raises when an index
it reads is out of range, whatever runs it (the LLVM function's error status,
`runtime_support.signature.GraphSignature.status_error`; a Triton kernel's flag in ``dims``,
`runtime_support.triton_graph`). ``index out of range`` in a message makes it an IndexError;
``{bad_index:K:N}`` is filled in by the runtime with the offending value of graph input ``K``.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import BlockArgument, Operation, SSAValue

from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.tensor import TABLE_NAME


def table_description(op: Operation) -> str:
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


def bad_index_field(idx: SSAValue, vocab: int) -> str:
    """``{bad_index:K:V}`` when the indices are graph input ``K`` (or a reshape of it): the
    runtime fills in the offending value and where it is (`GraphSignature.status_error`)."""
    while isinstance(idx.owner, buf.ReshapeOp):
        idx = idx.owner.input
    return f"{{bad_index:{idx.index}:{vocab}}}" if isinstance(idx, BlockArgument) else ""


def embedding_message(op: Operation, vocab) -> str:
    """An embedding's index outside ``[0, vocab)`` (``vocab`` a symbolic size's expression when the
    table's rows are: the message then names it, without the offending value)."""
    if not isinstance(vocab, int):
        from tensor_graphs.dialects.symbolic import format_expr

        return f"embedding {table_description(op)}: index out of range [0, {format_expr(vocab)})"
    return f"embedding {table_description(op)}: index out of range [0, {vocab}){bad_index_field(op.inputs[1], vocab)}"  # type: ignore[attr-defined]


def take_message(shape: Sequence[int]) -> str:
    """A `buf.take` offset outside the flat source of ``shape``."""
    size = 1
    for d in shape:
        size *= d
    return f"index out of range: an element offset outside [0, {size}) (a gather or tensor index into {list(shape)})"


def zero_divisor_message() -> str:
    """A `buf.check_nonzero` element that is zero: an integer division by zero."""
    return "ZeroDivisionError: an integer division by a divisor that is zero (torch raises here too)"


def put_message(shape: Sequence[int]) -> str:
    """A `buf.put` offset outside the flat destination of ``shape``."""
    size = 1
    for d in shape:
        size *= d
    return f"index out of range: an element offset outside [0, {size}) (a tensor index written into {list(shape)})"


def grouped_offsets_message(rows: int) -> str:
    """A grouped matmul's offsets that are not running row counts of its ``rows``."""
    return f"grouped matmul: the group offsets must be non-decreasing running row counts within [0, {rows}]"
