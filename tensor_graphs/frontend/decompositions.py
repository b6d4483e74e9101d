"""Which ATen ops tensor_graphs lowers itself and which PyTorch's own tables decompose: one registry.

An exported program holds whatever ATen ops the model used (``rms_norm``, ``logsumexp``,
``hardswish``, ``var_mean``, ...). Before import, every op that tensor_graphs has no lowering for
is rewritten by PyTorch's decomposition tables (``torch.export.default_decompositions()``: the
Core ATen decompositions of ``torch._decomp`` and every CompositeImplicitAutograd op) into the
Core ATen opset (the ops tagged ``torch.Tag.core``), so that only that set must be lowered by
hand. An op that tensor_graphs lowers (one with an importer handler: ``linear``,
``scaled_dot_product_attention``, ``layer_norm``, convolutions, ``embedding``, ``softmax``, ...)
stays whole: its lowering knows more than its decomposition (a fused kernel, a packed weight).

:func:`route` says, per op, which way it goes: ``"lowered"`` (a handler), ``"decomposed"`` (by
PyTorch's table, into other ops that go their own way) or ``"unsupported"`` (neither; reported
by name). ``tg-opt --list-ops`` prints the table.

```text
aten::rms_norm        decomposed   -> pow, mean, add, rsqrt, mul (then fuse-rms-norm makes it one op)
aten::linear          lowered      (aten.linear -> tg.matmul with the weight packed)
aten::nonzero         unsupported  (a data-dependent shape)
```
"""

from __future__ import annotations

import functools
from typing import Any

import torch

Route = str  # "lowered" | "decomposed" | "unsupported"


def _name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return f"{schema.name}{'.' + schema.overload_name if schema.overload_name else ''}"


@functools.cache
def lowered_ops() -> frozenset[torch._ops.OpOverload]:
    """The ATen overloads tensor_graphs imports itself (an importer handler)."""
    from tensor_graphs.frontend.handlers import HANDLERS

    return frozenset(op for op in HANDLERS if isinstance(op, torch._ops.OpOverload))


@functools.cache
def _table() -> dict[torch._ops.OpOverload, Any]:
    """PyTorch's decompositions without the ops tensor_graphs lowers, nor those it refuses by
    name (`unsupported.KNOWN`: ``item``, training ``dropout``, ...), which are reported as the
    user wrote them rather than as what they decompose into."""
    from tensor_graphs.frontend.unsupported import KNOWN

    table = torch.export.default_decompositions()
    for op in (*lowered_ops(), *KNOWN):
        table.pop(op, None)
    return table


def decomposition_table() -> dict[torch._ops.OpOverload, Any]:
    """The table ``ExportedProgram.run_decompositions`` takes: a copy (torch may change it)."""
    return _table().copy()


def route(op: object) -> Route:
    """Which way ``op`` (an ``OpOverload``) goes: lowered, decomposed or unsupported."""
    if op in lowered_ops():
        return "lowered"
    if op in _table():
        return "decomposed"
    return "unsupported"


def needs_decomposing(program: torch.export.ExportedProgram) -> bool:
    """Whether ``program`` holds an op PyTorch's tables would rewrite (or a mutation, which the
    same pass functionalizes): when not, the program is imported as it is (no second trace)."""
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        schema = node.target._schema
        if schema.is_mutable or route(node.target) == "decomposed":
            return True
    return False


def decompose(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with every op that has no tensor_graphs lowering decomposed into Core ATen
    (and functionalized); unchanged when nothing needs it (:func:`needs_decomposing`)."""
    if not needs_decomposing(program):
        return program
    return program.run_decompositions(decomposition_table())


def routes() -> list[tuple[str, Route]]:
    """Every ATen overload tensor_graphs lowers or decomposes, and every Core ATen op, with its
    route, by name (what ``tg-opt --list-ops`` prints)."""
    ops = set(lowered_ops()) | set(_table()) | set(_core_ops())
    rows = {(_name(op), route(op)) for op in ops if isinstance(op, torch._ops.OpOverload) and op.namespace == "aten"}
    return sorted(rows)


def _core_ops() -> list[torch._ops.OpOverload]:
    """The Core ATen opset: every overload tagged ``torch.Tag.core``."""
    out = []
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                out.append(op)
    return out


def format_routes() -> str:
    """The registry as a text table, one op per line, with a count per route at the end."""
    rows = routes()
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {way}" for name, way in rows]
    counts = {way: sum(1 for _, w in rows if w == way) for way in ("lowered", "decomposed", "unsupported")}
    lines.append(", ".join(f"{n} {way}" for way, n in counts.items()))
    return "\n".join(lines)
