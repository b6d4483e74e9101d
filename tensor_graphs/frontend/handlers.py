"""One importer handler per ATen op: ``torch OpOverload -> handler(importer, node)``.

A handler turns one FX ``call_function`` node into aten-level IR and returns the SSA value(s) of
the node's result. Most ops need nothing beyond their schema, so their handler is built from the
generated op class (:func:`schema_handler`); ops that are no-ops at the value level (``detach``,
eval-mode ``dropout``, ...) forward their input; run-time assertions (``_assert_tensor_metadata``)
are dropped; size arithmetic on dynamic dims (``sym_size``, ``operator.mul``, ...) makes no op (its
users read the example's value; the importer reports the dynamic dim). ``embedding`` records the
table's name as the model wrote it (tied weights); eval-mode ``batch_norm`` after a convolution
folds into its weights (`fold_batch_norm`). Ops missing here become ``aten.unsupported``,
reported with what to do (`unsupported.py`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import SSAValue

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import TABLE_NAME
from tensor_graphs.frontend.fold_batch_norm import fold_into_convolution

if TYPE_CHECKING:
    from tensor_graphs.frontend.importer import GraphImporter

#: handler(importer, node) -> the node's value (one SSA value, or a tuple for multi-result nodes)
Handler = Callable[["GraphImporter", torch.fx.Node], "SSAValue | Sequence[SSAValue]"]

#: torch.memory_format -> the integer of c10::MemoryFormat (what the schema calls MemoryFormat)
_MEMORY_FORMATS = {
    torch.contiguous_format: 0,
    torch.preserve_format: 1,
    torch.channels_last: 2,
    torch.channels_last_3d: 3,
}


def schema_arguments(node: torch.fx.Node) -> list[Any]:
    """One value per schema argument of ``node.target``: positional, keyword, else the schema default."""
    schema = node.target._schema  # type: ignore[union-attr]
    values = []
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            values.append(node.args[i])
        elif arg.name in node.kwargs:
            values.append(node.kwargs[arg.name])
        elif arg.has_default_value():
            values.append(arg.default_value)
        else:
            raise ValueError(f"{schema.name}: argument '{arg.name}' is missing")
    return values


def _dtype_name(value: object) -> object:
    """``torch.float32`` -> ``"float32"`` (what a ``ScalarType`` property holds)."""
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value


def schema_handler(op_class: type[aten.AtenOp]) -> Handler:
    """The handler of an op whose generated class mirrors its schema one to one.

    Tensor arguments become operands (Python numbers in their place become rank-0 constants of
    the type torch would promote them to), ``Tensor[]``/``Tensor?[]`` lists variadic operands,
    dtypes their names; ``Layout``/``Device`` arguments are dropped. An op returning ``Tensor[]``
    (``split``, ``chunk``) gives the list of its results (for ``getitem``).
    """

    def handle(importer: GraphImporter, node: torch.fx.Node) -> SSAValue | list[SSAValue]:
        values = []
        for (name, kind), value in zip(op_class.ARGS, schema_arguments(node), strict=True):
            if kind in ("tensor", "tensor?"):
                values.append(None if value is None else importer.tensor_operand(value, node, name))
            elif kind in ("tensor[]", "tensor?[]"):
                values.append([None if v is None else importer.tensor_operand(v, node, name) for v in value])
            elif kind == "drop":
                values.append(None)
            elif isinstance(value, torch.memory_format):
                values.append(_MEMORY_FORMATS[value])
            else:
                values.append(_dtype_name(importer.static_value(value, node, name)))
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            types = [importer.value_type(v, f"result {i} of {node.name}") for i, v in enumerate(val)]
            op = op_class.from_values(values, types if len(op_class.get_irdl_definition().results) > 1 else [types])  # (values, indices), or one Tensor[]
            importer.append(op)
            return list(op.results)
        op = op_class.from_values(values, [importer.result_type(node)])
        importer.append(op)
        return op.results[0]

    return handle


def forward_input(importer: GraphImporter, node: torch.fx.Node) -> SSAValue:
    """Ops that do not change values (``detach``, ``alias``, ``lift_fresh_copy``): the input itself."""
    return importer.tensor_operand(node.args[0], node, "self")


def dropout(importer: GraphImporter, node: torch.fx.Node) -> SSAValue:
    """``aten.dropout(x, p, train)``: identity in inference (``train=False``); training dropout is unsupported."""
    _, _, train = schema_arguments(node)
    if train:
        return importer.unsupported(node)
    return forward_input(importer, node)


def drop(importer: GraphImporter, node: torch.fx.Node) -> list[SSAValue]:
    """Run-time assertions (``_assert_tensor_metadata``, ...): checked by torch.export already; no op."""
    return []


def symbolic_size(importer: GraphImporter, node: torch.fx.Node) -> list[SSAValue]:
    """A size computed from a dynamic dim (``sym_size``, arithmetic on sizes): no op; its users
    read its example value (``importer.static_value``), and the dynamic dim is reported."""
    return []


def embedding(importer: GraphImporter, node: torch.fx.Node) -> SSAValue:
    """``aten.embedding``, with the name of its table as the user wrote it when torch.export kept
    another name of the same tensor (a tied LM head: ``transformer.wte.weight`` is imported as
    ``lm_head.weight``): :data:`TABLE_NAME`, which the out-of-range index error names."""
    value = _embedding(importer, node)
    table = importer.table_name(node.args[0], node)
    if table is not None:
        value.owner.attributes[TABLE_NAME] = StringAttr(table)  # type: ignore[union-attr]
    return value


def batch_norm(importer: GraphImporter, node: torch.fx.Node) -> SSAValue | list[SSAValue | None]:
    """Eval-mode ``batch_norm`` (and its ``_native_batch_norm_legit_no_training`` form): folded
    into the convolution before it when it can be (`fold_batch_norm`), else imported as it is.
    The folded form has only the normalised output (its saved statistics must be unused)."""
    schema = node.target._schema  # type: ignore[union-attr]
    args = dict(zip((a.name for a in schema.arguments), schema_arguments(node)))
    multi = len(schema.returns) > 1
    if not multi or all(u.target is operator.getitem and u.args[1] == 0 for u in node.users):
        folded = fold_into_convolution(importer, node, args)
        if folded is not None:
            return [folded, None, None] if multi else folded
    return _BATCH_NORMS[node.target](importer, node)


def getitem(importer: GraphImporter, node: torch.fx.Node) -> SSAValue:
    """``operator.getitem(multi_result_node, i)``: the i-th result."""
    source, index = node.args
    values = importer.values[source]  # type: ignore[index]
    if isinstance(values, SSAValue):
        raise importer.error(node, "getitem on a single-result node")
    return values[index]  # type: ignore[index]


def grouped_mm_fallback(importer: GraphImporter, node: torch.fx.Node) -> SSAValue:
    """``transformers::grouped_mm_fallback(input [S, K], weight [E, K, N], offs [E])``: the grouped
    GEMM of transformers' experts (``experts_implementation="grouped_mm"``, its default), which
    torch.export keeps as this custom op: rows ``[offs[e-1], offs[e])`` of ``input`` times
    ``weight[e]``. The same product as ``aten._grouped_mm(input, weight, offs)``."""
    names = ("input", "weight", "offs")
    args = [node.args[i] if i < len(node.args) else node.kwargs[name] for i, name in enumerate(names)]
    x, w, offs = (importer.tensor_operand(a, node, name) for a, name in zip(args, names))
    op = aten.GroupedMmOp(x, w, offs, result_type=importer.result_type(node))
    importer.append(op)
    return op.result


#: ops of other libraries' ``torch.library`` namespaces, by name (they exist only once that
#: library is imported, so they are looked up by name, not by op object)
LIBRARY_HANDLERS: dict[str, Handler] = {"transformers::grouped_mm_fallback": grouped_mm_fallback}


def library_handler(target: object) -> Handler | None:
    """The handler of a library's custom op (:data:`LIBRARY_HANDLERS`), if ``target`` is one."""
    return LIBRARY_HANDLERS.get(target.name()) if isinstance(target, torch._ops.OpOverload) else None


#: assertion ops torch.export leaves in the graph; they have no value and are dropped
_ASSERTIONS = ("_assert_tensor_metadata", "_assert_scalar", "_assert_async", "sym_constrain_range", "sym_constrain_range_for_size")


def _overload(target: str) -> torch._ops.OpOverload:
    """``"aten::add.Tensor"`` -> ``torch.ops.aten.add.Tensor``."""
    name, _, overload = target.removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


_embedding = schema_handler(aten.EmbeddingOp)
_BATCH_NORMS = {
    torch.ops.aten.batch_norm.default: schema_handler(aten.BatchNormOp),
    torch.ops.aten._native_batch_norm_legit_no_training.default: schema_handler(aten.NativeBatchNormLegitNoTrainingOp),
}

#: size arithmetic torch.export records for dynamic dims (``x.shape[0] * 2``) and for the
#: range checks of data-dependent sizes (``u0 >= 0``, then asserted)
_SYMBOLIC_SIZES = (
    torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_stride.int,
    torch.ops.aten.sym_storage_offset.default,
    operator.add,
    operator.sub,
    operator.mul,
    operator.floordiv,
    operator.truediv,
    operator.mod,
    operator.neg,
    operator.pow,
    operator.eq,
    operator.ne,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
    torch.sym_max,
    torch.sym_min,
    torch.sym_int,
    torch.sym_float,
)

HANDLERS: dict[Any, Handler] = {
    **{_overload(target): schema_handler(cls) for target, cls in aten.ATEN_OPS.items()},
    torch.ops.aten.embedding.default: embedding,
    **{target: batch_norm for target in _BATCH_NORMS},
    torch.ops.aten.detach.default: forward_input,
    torch.ops.aten.detach_.default: forward_input,
    torch.ops.aten.alias.default: forward_input,
    torch.ops.aten.lift_fresh_copy.default: forward_input,
    torch.ops.aten.dropout.default: dropout,
    **{getattr(torch.ops.aten, name).default: drop for name in _ASSERTIONS if hasattr(torch.ops.aten, name)},
    **{target: symbolic_size for target in _SYMBOLIC_SIZES},
    operator.getitem: getitem,
}
