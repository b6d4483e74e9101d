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

Some lowered ops become kernels written for float32 (softmax, the norms, attention: their
kernels are tuned float32 code; float16/bfloat16 reach them widened, `widen-dtypes`).
For other dtypes (float64, integers) :data:`FLOAT32_KERNELS` routes them to their decomposition
instead: the table entry decomposes a call whose floating-point tensors are not all float32,
float16 or bfloat16 and keeps the op whole otherwise (``"lowered (float32)"`` in the table).
Ops neither lowered nor in PyTorch's tables may have a composition of tensor_graphs' own
(`compositions`: ``searchsorted``, ``median``, ``kthvalue``, ``addbmm``, ...), the last resort.

```text
aten::rms_norm        decomposed   -> pow, mean, add, rsqrt, mul (then fuse-rms-norm makes it one op)
aten::linear          lowered      (aten.linear -> tg.matmul with the weight packed)
aten::nonzero         unsupported  (a data-dependent shape)
```
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import _decomp

from tensor_graphs.frontend.compositions import PARTIAL, PREFERRED, compositions

Route = str  # "lowered" | "decomposed" | "unsupported"


def _name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return f"{schema.name}{'.' + schema.overload_name if schema.overload_name else ''}"


@functools.cache
def lowered_ops() -> frozenset[torch._ops.OpOverload]:
    """The ATen overloads tensor_graphs imports itself (an importer handler)."""
    from tensor_graphs.frontend.handlers import HANDLERS

    return frozenset(op for op in HANDLERS if isinstance(op, torch._ops.OpOverload))


#: lowered ops whose kernels compute float32 (float16/bfloat16 widened to it): decomposed when a
#: floating-point tensor of the call has another dtype (float64)
FLOAT32_KERNELS: tuple[str, ...] = (
    "softmax.int", "_softmax", "log_softmax.int", "_log_softmax", "layer_norm", "native_layer_norm",
    "group_norm", "native_group_norm", "scaled_dot_product_attention",
)
_KERNEL_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _overload(name: str) -> torch._ops.OpOverload:
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


@functools.cache
def float32_kernel_ops() -> frozenset[torch._ops.OpOverload]:
    return frozenset(_overload(n) for n in FLOAT32_KERNELS)


def kernel_dtypes_ok(args: object) -> bool:
    """Whether every floating-point tensor among ``args``, and a ``dtype`` argument (``softmax(x,
    dtype=torch.float64)``), is float32, float16 or bfloat16."""
    leaves = torch.utils._pytree.tree_leaves(args)
    tensors = all(t.dtype in _KERNEL_FLOATS for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point())
    return tensors and all(d in _KERNEL_FLOATS for d in leaves if isinstance(d, torch.dtype))


def keeps_whole(args: object) -> bool:
    """Whether a call of a :data:`FLOAT32_KERNELS` op with ``args`` stays whole: its dtypes are
    the kernels' and a ``dtype`` argument, if any, is its input's (``softmax(x, dtype=...)`` to
    another dtype converts ``x`` first, which its decomposition says: ``x.to(dtype)``, then the
    op; transformers' ``softmax(scores, dtype=torch.float32)`` of float32 scores stays whole)."""
    leaves = torch.utils._pytree.tree_leaves(args)
    tensors = [t.dtype for t in leaves if isinstance(t, torch.Tensor)]
    asked = [d for d in leaves if isinstance(d, torch.dtype)]
    return kernel_dtypes_ok(args) and all(tensors and d == tensors[0] for d in asked)


def _softmax(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.ops.aten._softmax(x if dtype is None else x.to(dtype), dim, False)


def _log_softmax(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.ops.aten._log_softmax(x if dtype is None else x.to(dtype), dim, False)


def _layer_norm(x, shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True) -> torch.Tensor:
    return torch.ops.aten.native_layer_norm(x, shape, weight, bias, eps)[0]


def _group_norm(x, groups, weight=None, bias=None, eps=1e-5, cudnn_enable=True) -> torch.Tensor:
    n, c = x.shape[0], x.shape[1]
    return torch.ops.aten.native_group_norm(x, weight, bias, n, c, x.numel() // max(n * c, 1), groups, eps)[0]


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False) -> torch.Tensor:
    """The math of ``scaled_dot_product_attention`` (its documented reference), in aten ops."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        sq, sk = q.shape[-2], k.shape[-2]
        keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        scores = scores.masked_fill(keep.logical_not(), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask.logical_not(), float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return torch.matmul(torch.softmax(scores, -1), v)


#: the composite ops among FLOAT32_KERNELS as the non-composite ops they call (their C++ composite
#: kernels cannot be called from a table entry: export registers the entry as that kernel)
_COMPOSITES: dict[str, Any] = {
    "softmax.int": _softmax, "log_softmax.int": _log_softmax, "layer_norm": _layer_norm,
    "group_norm": _group_norm, "scaled_dot_product_attention": _sdpa,
}


def _float32_or_decomposed(op: torch._ops.OpOverload, decomposition: Any) -> Any:
    """A table entry keeping ``op`` whole for float32 calls (NotImplemented: torch leaves it) and
    decomposing the others by ``decomposition``."""
    def entry(*args: Any, **kwargs: Any) -> Any:
        if keeps_whole((args, kwargs)):
            return NotImplemented
        return decomposition(*args, **kwargs)

    return entry


#: the modules of torch._decomp's decompositions written with ATen ops: its own, and the
#: ``*_copy`` view ops (a view, then ``clone``). Its ``torch._refs`` entries reach ``prims`` ops,
#: which would be reported instead of the op the model used
_ATEN_DECOMPOSITIONS = ("torch._decomp.decompositions", "torch._ops.aten")


@functools.cache
def _table() -> dict[torch._ops.OpOverload, Any]:
    """PyTorch's decompositions (the export defaults, and ``torch._decomp``'s ATen-level ones for
    ops outside the Core set: ``addmv``, ``adaptive_max_pool2d``, ...) without the ops tensor_graphs lowers, nor those it refuses by
    name (`unsupported.KNOWN`: ``item``, training ``dropout``, ...), which are reported as the
    user wrote them rather than as what they decompose into; the float32 kernels' ops decompose
    for other dtypes (:data:`FLOAT32_KERNELS`)."""
    from tensor_graphs.frontend.unsupported import KNOWN

    table = torch.export.default_decompositions()
    for op, f in _decomp.decomposition_table.items():  # beyond the Core set: into ATen ops, not prims
        if isinstance(op, torch._ops.OpOverload) and op not in table and getattr(f, "__module__", "") in _ATEN_DECOMPOSITIONS:
            table[op] = f
    preferred = {_overload(name) for name in PREFERRED}
    for op, f in compositions().items():  # the last resort: tensor_graphs' own compositions
        if op not in table or op in preferred:  # (CustomDecompTable has no working setdefault)
            table[op] = f
    for op in (*lowered_ops(), *KNOWN):
        table.pop(op, None)
    base = torch.export.default_decompositions()
    assert float32_kernel_ops() <= lowered_ops(), "FLOAT32_KERNELS names lowered ops only"
    composites = {_overload(name): f for name, f in _COMPOSITES.items()}
    for op in float32_kernel_ops():
        table[op] = _float32_or_decomposed(op, composites.get(op) or base.get(op) or _decomp.decomposition_table[op])
    for op, (which, composition) in partial_ops().items():
        table[op] = _composed_when(which, composition)
    return table


@functools.cache
def partial_ops() -> dict[torch._ops.OpOverload, tuple[Any, Any]]:
    """Lowered ops composed for some calls (`compositions.PARTIAL`: a 3-D convolution, a
    training-mode batch norm)."""
    return {_overload(name): entry for name, entry in PARTIAL.items()}


def _composed_when(which: Any, composition: Any) -> Any:
    """A table entry composing the calls ``which`` picks and leaving the others whole."""
    def entry(*args: Any, **kwargs: Any) -> Any:
        return composition(*args, **kwargs) if which(args, kwargs) else NotImplemented

    return entry


def decomposition_table() -> dict[torch._ops.OpOverload, Any]:
    """The table ``ExportedProgram.run_decompositions`` takes: a copy (torch may change it)."""
    return _table().copy()


def route(op: object) -> Route:
    """Which way ``op`` (an ``OpOverload``) goes: lowered, decomposed or unsupported (``"lowered
    (float32)"``: lowered for float32, float16 and bfloat16, decomposed for other dtypes)."""
    if op in float32_kernel_ops():
        return "lowered (float32)"
    if op in lowered_ops():
        return "lowered"
    if op in _table() or _implicit(op) is not None:
        return "decomposed"
    return "unsupported"


@functools.cache
def _implicit(op: object) -> Any:
    """``op.decompose`` for an ATen op that is a composition in PyTorch itself (a
    CompositeImplicitAutograd kernel: ``mT``, ``broadcast_to``, ``cartesian_prod``, ...) and
    that tensor_graphs neither lowers nor refuses by name; None otherwise."""
    from tensor_graphs.frontend.unsupported import KNOWN

    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten" or op in lowered_ops() or op in KNOWN:
        return None
    if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return None
    return op.decompose


def needs_decomposing(program: torch.export.ExportedProgram) -> bool:
    """Whether ``program`` holds an op PyTorch's tables would rewrite (or a mutation, which the
    same pass functionalizes): when not, the program is imported as it is (no second trace)."""
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        schema = node.target._schema
        if schema.is_mutable or route(node.target) == "decomposed":
            return True
        if node.target in float32_kernel_ops() and not keeps_whole(([a.meta.get("val") for a in node.all_input_nodes], node.args, node.kwargs)):
            return True
        if node.target in partial_ops():
            vals = torch.utils._pytree.tree_map(lambda a: a.meta.get("val") if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs))
            if partial_ops()[node.target][0](*vals):
                return True
    return False


def decompose(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with every op that has no tensor_graphs lowering decomposed into Core ATen
    (and functionalized); unchanged when nothing needs it (:func:`needs_decomposing`)."""
    if not needs_decomposing(program):
        return program
    table = decomposition_table()
    for node in program.graph.nodes:  # PyTorch's own compositions of the ops this graph uses
        if node.op == "call_function" and node.target not in table and (f := _implicit(node.target)) is not None:
            table[node.target] = f
    return program.run_decompositions(table)


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
    counts = {way: sum(1 for _, w in rows if w == way) for way in ("lowered", "lowered (float32)", "decomposed", "unsupported")}
    lines.append(", ".join(f"{n} {way}" for way, n in counts.items()))
    return "\n".join(lines)
