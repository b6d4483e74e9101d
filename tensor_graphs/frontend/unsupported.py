"""What the frontend cannot compile, and what a user can do instead: one error lists it all.

The importer walks the whole graph before it gives up: every ATen op with no translation, every
control-flow construct (``torch.cond``, ``while_loop``, ...), every dynamic dimension and every
mask or comparison on run-time data becomes one :class:`Unsupported` entry, with where it is in
the model and what to do, and :class:`UnsupportedOpsError` lists them all at once::

    2 unsupported ops and 1 unsupported construct:
      torch.cond at blocks.0 (model.Gate), model.py:12 in forward: return torch.cond(...)
          control flow: tensor_graphs compiles straight-line graphs only; compile each branch ...
      aten::erfinv at act (model.Erfinv), model.py:20 in forward: return torch.erfinv(x)
          no tensor_graphs translation for this ATen op yet; write it with supported ops ...

:data:`KNOWN` is the registry of the targets the frontend recognises but cannot compile, each
with its own problem and fix; any other op without a handler gets the generic advice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tensor_graphs.lowering.aten_to_tensor.convert import UNSUPPORTED_OP_FIX

if TYPE_CHECKING:
    from tensor_graphs.frontend.importer import ImportedGraph


@dataclass(frozen=True)
class Unsupported:
    """One thing in a model that tensor_graphs cannot compile."""

    #: what it is: ``"aten::erfinv"``, ``"torch.cond"``, ``"dynamic dim s77"``
    target: str
    #: where: module path and source line (``node_location``), or ``"input 'x' dim 0"``
    location: str = ""
    #: why it cannot be compiled
    problem: str = "no tensor_graphs translation for this ATen op yet"
    #: what to do instead
    fix: str = UNSUPPORTED_OP_FIX
    #: an ATen op tensor_graphs has no translation for (else: a construct, such as control flow)
    is_op: bool = True
    #: the op's tensor operands, dtype and shape each: ``"float32 [4, 8], int64 [4]"``
    operands: str = ""

    def __str__(self) -> str:
        where = f" at {self.location}" if self.location else ""
        on = f" ({self.operands})" if self.operands else ""
        return f"{self.target}{on}{where}\n      {self.problem}; {self.fix}"


def _plural(n: int, word: str) -> str:
    return f"{n} unsupported {word}{'s' if n != 1 else ''}"


class UnsupportedOpsError(ValueError):
    """The model uses ops or constructs tensor_graphs cannot compile; lists every one, each with
    its location and what to do.

    ``entries`` holds the :class:`Unsupported` entries, ``ops`` their ``(target, location)``
    pairs; ``graph`` the imported module with the ``aten.unsupported`` placeholders, for
    inspection.
    """

    def __init__(self, entries: Sequence[Unsupported | tuple[str, str]], graph: ImportedGraph | None = None):
        self.entries = [e if isinstance(e, Unsupported) else Unsupported(*e) for e in entries]
        self.ops = [(e.target, e.location) for e in self.entries]
        self.graph = graph
        ops = sum(e.is_op for e in self.entries)
        constructs = len(self.entries) - ops
        counts = [_plural(n, word) for n, word in ((ops, "op"), (constructs, "construct")) if n]
        listing = "\n".join(f"  {e}" for e in self.entries)
        super().__init__(f"{' and '.join(counts)}:\n{listing}")


_CONTROL_FLOW = "control flow: tensor_graphs compiles straight-line graphs only"

#: target -> (what the user wrote, problem, fix, is an op), for the targets the frontend
#: recognises but cannot compile
KNOWN: dict[object, tuple[str, str, str, bool]] = {}


def _known(namespace: object, name: str, shown: str, problem: str, fix: str, is_op: bool = False) -> None:
    target = getattr(namespace, name, None)
    if target is not None:
        KNOWN[target] = (shown, problem, fix, is_op)


_known(
    torch.ops.higher_order,
    "cond",
    "torch.cond",
    _CONTROL_FLOW,
    "compile each branch as its own model and choose between them in Python (with the predicate "
    "computed outside the model), or compute both branches and blend them with a constant or input mask",
)
_known(
    torch.ops.higher_order,
    "while_loop",
    "torch._higher_order_ops.while_loop",
    _CONTROL_FLOW,
    "unroll the loop a fixed number of times in forward, or compile the loop body and run the loop in Python",
)
for _name, _shown in (("scan", "scan"), ("associative_scan", "associative_scan"), ("map_impl", "map")):
    _known(
        torch.ops.higher_order,
        _name,
        f"torch._higher_order_ops.{_shown}",
        _CONTROL_FLOW,
        "unroll it over its fixed length in forward, or compile its body and loop in Python",
    )
_known(
    torch.ops.aten._local_scalar_dense,
    "default",
    "aten::_local_scalar_dense (.item(), int(t), float(t))",
    "reads a tensor's value in forward, which makes what follows depend on run-time data",
    "keep the value a tensor (use it in tensor ops), or compute it outside the model and pass it in",
)
_known(
    torch.ops.aten.item,
    "default",
    "aten::item (.item(), int(t), float(t))",
    "reads a tensor's value in forward, which makes what follows depend on run-time data",
    "keep the value a tensor (use it in tensor ops), or compute it outside the model and pass it in",
)
_known(
    torch.ops.aten.nonzero,
    "default",
    "aten::nonzero (or indexing with a boolean mask)",
    "its output shape depends on run-time data; tensor_graphs compiles static shapes only",
    "keep the shape fixed: select with torch.where against a constant or input mask instead of "
    "gathering the selected elements",
)
_known(
    torch.ops.aten.dropout,
    "default",
    "aten::dropout (training=True)",
    "training-mode dropout is random; tensor_graphs compiles inference graphs",
    "pass training=self.training to F.dropout (or use nn.Dropout): inference drops nothing",
    is_op=True,
)


def unsupported_target(target: object, name: str, location: str) -> Unsupported:
    """The entry for an FX call of ``target`` (shown as ``name``) that no handler translates."""
    known = KNOWN.get(target)
    if known is None:
        return Unsupported(name, location)
    shown, problem, fix, is_op = known
    return Unsupported(shown, location, problem, fix, is_op)


def unbounded_dim(symbol: str, location: str) -> Unsupported:
    """The entry for a dynamic size whose range has no maximum."""
    return Unsupported(
        f"dynamic dim {symbol}",
        location,
        "its torch.export.Dim has no maximum; tensor_graphs plans a graph's memory at each size's maximum",
        f"give it one: torch.export.Dim({symbol!r}, min=1, max=...)",
        is_op=False,
    )


def symbolic_argument(target: str, location: str, arg: str, expr: str) -> Unsupported:
    """The entry for a non-tensor argument (or a number used as a tensor) that is a dynamic size."""
    return Unsupported(
        target,
        location,
        f"its argument '{arg}' is the dynamic size {expr}; tensor_graphs takes dynamic sizes in tensor "
        "shapes (and a reshape's or expand's sizes), not yet here",
        "make this size static (export that input's dim without a Dim), or compute it from a tensor",
        is_op=False,
    )


def data_dependent_shape(target: str, location: str) -> Unsupported:
    """The entry for an op whose result shape depends on run-time data (an unbacked size)."""
    return Unsupported(
        target,
        location,
        "its result shape depends on run-time data; tensor_graphs compiles static shapes only",
        "keep the shape fixed (select with torch.where and a constant or input mask instead of gathering)",
        is_op=False,
    )


def complex_values(target: str, location: str, dtype: object) -> Unsupported:
    """The entry for an op whose result holds complex (or another unrepresentable dtype's) values."""
    return Unsupported(
        target,
        location,
        f"computes {str(dtype).removeprefix('torch.')} values, a dtype tensor_graphs does not hold (it holds "
        "float64, float32, float16, bfloat16, int64, int32, int16, int8, uint8 and bool)",
        "keep complex values as two real tensors (the real and imaginary parts), or compute this part "
        "outside the model",
    )


def random_op(target: str, location: str) -> Unsupported:
    """The entry for an op that draws random numbers (``torch.Tag.nondeterministic_seeded``)."""
    return Unsupported(
        target,
        location,
        "draws random numbers; tensor_graphs compiles deterministic inference graphs",
        "draw the numbers outside the model and pass them in as an input (or use eval mode, where "
        "dropout draws none)",
    )


def mutation(target: str, location: str, what: str) -> Unsupported:
    """The entry for an op that writes in place into an input or buffer of the model (``what``),
    or has a side effect torch.export records as a token."""
    return Unsupported(
        target,
        location,
        f"{what}; tensor_graphs compiles pure inference graphs",
        "return the new value instead of writing it in place (for batch norm's running statistics: "
        "call model.eval())",
    )


def run_time_mask(target: str, location: str, problem: str, fix: str) -> Unsupported:
    """The entry for a mask builder (comparison, triu, ...) on run-time data; ``problem`` and
    ``fix`` come from the lowering, which owns which ops only constant folding removes."""
    return Unsupported(target, location, problem, fix, is_op=False)
for _name, _layer in (("lstm", "LSTM"), ("gru", "GRU"), ("rnn_tanh", "RNN"), ("rnn_relu", "RNN")):
    _known(
        getattr(torch.ops.aten, _name),
        "input",
        f"aten::{_name} (torch.nn.{_layer})",
        f"recurrent layers ({_layer}) are not supported: their time loop is one fused ATen op with no tensor_graphs lowering",
        "write the recurrence as a cell (nn.LSTMCell / nn.GRUCell ops: linear layers and gates) unrolled over the "
        "fixed sequence length in forward, or run the recurrent layer outside the compiled model",
        is_op=True,
    )
