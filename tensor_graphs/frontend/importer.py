"""torch.export -> FX graph -> aten-level xDSL module, built directly (never through text).

```mlir
builtin.module {
  func.func @forward(%x: tensor<2x8xf32>) -> tensor<2x6xf32> {
    %p_fc_weight = tg.weight "fc.weight" : tensor<6x8xf32>
    %p_fc_bias = tg.weight "fc.bias" : tensor<6xf32>
    %linear = aten.linear %x, %p_fc_weight, %p_fc_bias : (...) -> tensor<2x6xf32>
    func.return %linear : tensor<2x6xf32>
  }
}
```

Parameters, persistent buffers and lifted tensor constants all become ``tg.weight "<fqn>"``; their
values go to :attr:`ImportedGraph.weights` as NumPy views of the torch tensors (no copies where the
tensor is a contiguous CPU float32 tensor), except integer and bool buffers and constants (index
tables, masks) and non-persistent buffers of any dtype (``register_buffer(..., persistent=False)``:
derived at construction, not in the state dict, e.g. RoPE's ``inv_freq``): those become inline
``tg.constant`` so that constant folding can evaluate what is built from them (the cos/sin tables).
Python scalars where a schema wants a Tensor become rank-0 ``tg.constant`` ops of the dtype torch
promotes them to (``int64_tensor + 1`` adds an i64 constant, ``float_tensor * 2`` an f32 one).
Inputs are float32 tensors, or int64/int32 tensors (token ids).

What cannot be compiled is reported all at once, after the whole graph is walked, in one
:class:`~tensor_graphs.frontend.unsupported.UnsupportedOpsError` that says where each is and
what to do: ops without a handler (imported as ``aten.unsupported``), control flow
(``torch.cond``, ``while_loop``: their branches are ``get_attr`` subgraphs), dynamic dimensions
(a program exported with ``dynamic_shapes``: imported at the example's sizes, so that the rest
of the graph is still checked) and masks or comparisons on run-time data (which only constant
folding can remove; the lowering says which, `run_time_mask_builders`).
"""

from __future__ import annotations

import dataclasses
import operator

import contextlib
import contextvars
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import sympy
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from xdsl.dialects import func
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from tensor_graphs import dtypes
from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import ConstantOp, WeightOp
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.symbolic import DYNAMIC_INDEX, Dim, format_expr, record_symbols, shaped, symbol
from tensor_graphs.frontend.handlers import HANDLERS, library_handler
from tensor_graphs.frontend.unsupported import (
    KNOWN,
    Unsupported,
    UnsupportedOpsError,
    data_dependent_shape,
    complex_values,
    mutation,
    random_op,
    run_time_mask,
    symbolic_argument,
    unbounded_dim,
    unsupported_target,
)
from tensor_graphs.lowering.aten_to_tensor.masks import RUN_TIME_MASK_FIX, run_time_mask_builders, run_time_mask_problem

_WEIGHT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)

#: (op, argument) whose sizes may be dynamic: the result type holds them, the argument marks each
#: such entry ``?`` (`symbolic.DYNAMIC_INDEX`; the aten verifiers read it from the result)
SYMBOLIC_SIZE_ARGS = {
    (torch.ops.aten.view.default, "size"),
    (torch.ops.aten.reshape.default, "shape"),
    (torch.ops.aten._unsafe_view.default, "size"),
    (torch.ops.aten.expand.default, "size"),
    (torch.ops.aten.slice.Tensor, "end"),
    (torch.ops.aten.arange.default, "end"),
    (torch.ops.aten.arange.start, "end"),
    (torch.ops.aten.arange.start_step, "end"),
    # splats of a symbolic shape (`torch.ones(x.shape)`: a mask of ones)
    (torch.ops.aten.full.default, "size"),
    (torch.ops.aten.ones.default, "size"),
    (torch.ops.aten.zeros.default, "size"),
    (torch.ops.aten.new_ones.default, "size"),
    (torch.ops.aten.new_zeros.default, "size"),
    (torch.ops.aten.new_full.default, "size"),
}

#: what a user input may be: a tensor of a dtype of the one table (`tensor_graphs.dtypes`)
INPUT_KINDS = "a tensor of " + ", ".join(d.name for d in dtypes.DTYPES)


@dataclass
class ImportedGraph:
    """An aten-level module plus what it needs to run."""

    module: ModuleOp
    #: weight name (state-dict FQN) -> float32 array sharing memory with the torch tensor where possible
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    input_names: list[str] = field(default_factory=list)
    num_outputs: int = 0
    #: how the tensor results sit in what the model returns (None: a tensor or a flat tuple)
    structure: object | None = None


# --------------------------------------------------------------------------- locations


def _short_type(type_name: object) -> str:
    name = type_name if isinstance(type_name, str) else f"{type_name.__module__}.{type_name.__qualname__}"  # type: ignore[attr-defined]
    m = re.match(r"torch\.nn\.modules\.\w+\.(\w+)$", name)
    return f"torch.nn.{m.group(1)}" if m else name


_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def node_location(node: torch.fx.Node) -> str:
    """Where ``node`` came from: the innermost submodule and the last user-code frame.

    e.g. ``layers.1 (torch.nn.GELU), model.py:12 in forward: return F.gelu(x)``
    """
    parts: list[str] = []
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, type_name = list(stack.values())[-1]
        if path:
            parts.append(f"{path} ({_short_type(type_name)})")
    trace = node.meta.get("stack_trace") or ""
    lines = trace.splitlines()
    best = None
    for i, line in enumerate(lines):
        m = _FRAME_RE.search(line)
        if m and "/torch/" not in m.group(1).replace("\\", "/") and not m.group(1).startswith("<"):
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME_RE.search(lines[i + 1]) else ""
            best = f"{m.group(1)}:{m.group(2)} in {m.group(3)}" + (f": {code}" if code else "")
    if best:
        parts.append(best)
    return ", ".join(parts)


def source_location(node: torch.fx.Node) -> FileLineColLoc | None:
    """The last frame of user code in ``node``'s stack trace as an op location
    (``loc("model.py":12:1)``: `diagnostics.location_of` prints it), or None."""
    lines = (node.meta.get("stack_trace") or "").splitlines()
    found = None
    for line in lines:
        m = _FRAME_RE.search(line)
        if m and "/torch/" not in m.group(1).replace("\\", "/") and not m.group(1).startswith("<"):
            found = (m.group(1), int(m.group(2)))
    return FileLineColLoc(StringAttr(found[0]), IntAttr(found[1]), IntAttr(1)) if found else None


# --------------------------------------------------------------------------- the importer


def plain_sympy(expr: sympy.Expr) -> sympy.Expr:
    """A torch size expression in the sympy functions `dialects.symbolic` reads: torch's integer
    divisions and remainders (``FloorDiv``, ``CleanDiv``, ``CeilDiv``, ``ModularIndexing``,
    ``PythonMod``, ``Mod``; a pooling's output size ``(h - 2)//2 + 1``), ``Max``/``Min`` and
    ``PowByNatural`` become ``floor``, ``Mod``, ``Max``/``Min`` and ``Pow``."""
    from torch.utils._sympy import functions as tf

    rules = {
        tf.FloorDiv: lambda a, b: sympy.floor(a / b),
        tf.CleanDiv: lambda a, b: sympy.floor(a / b),
        tf.CeilDiv: lambda a, b: -sympy.floor(-a / b),
        tf.ModularIndexing: lambda x, d, m: sympy.Mod(sympy.floor(x / d), m),
        tf.PythonMod: sympy.Mod,
        tf.Mod: sympy.Mod,
        tf.Max: sympy.Max,
        tf.Min: sympy.Min,
        tf.PowByNatural: sympy.Pow,
    }
    for cls, make in rules.items():
        if expr.has(cls):
            expr = expr.replace(cls, make)
    return expr


def tensor_type(value: object, what: str, symbolic_dim: Callable[[torch.SymInt], Dim] | None = None) -> TensorType:
    """The tensor type of a (fake) tensor; ``symbolic_dim`` gives the size of a symbolic dim (an
    int, or an expression of the graph's symbols: `dialects.symbolic`; without it, a symbolic
    dim is a TypeError)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} is a {type(value).__name__}, expected a tensor")
    if not dtypes.holds(value.dtype):
        raise dtypes.DTypeError(f"{what} has dtype {value.dtype}, which tensor_graphs cannot represent "
                                f"(it holds {', '.join(d.name for d in dtypes.DTYPES)})")
    shape = []
    for d in value.shape:
        if not isinstance(d, int):
            if symbolic_dim is None:
                raise TypeError(f"{what} has a symbolic dim {d}; only static shapes are supported")
            d = symbolic_dim(d)
        shape.append(d)
    return shaped(dtypes.of_torch(value.dtype).element, shape)


def weight_array(name: str, tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` as a NumPy array sharing its memory when it is a contiguous CPU tensor."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not dtypes.holds(t.dtype):
        raise dtypes.DTypeError(f"weight '{name}' has dtype {t.dtype}, which tensor_graphs cannot hold "
                                f"(it holds {', '.join(d.name for d in dtypes.DTYPES)})")
    array = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()
    if t.dtype == torch.bfloat16:
        array = array.view(np.uint16)  # bfloat16's bits: `dtypes` stores bfloat16 as uint16
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def values_of(tensor: torch.Tensor) -> np.ndarray:
    """The values of ``tensor`` as NumPy holds them (`dtypes.DType.values`: bfloat16 as float32)."""
    t = tensor.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


class GraphImporter:
    """Walks one exported FX graph and appends aten-level ops to a ``func.func @forward`` body."""

    def __init__(self, ep: ExportedProgram, name: str = "forward", dim_names: Mapping[tuple[int, int], str] | None = None):
        self.ep = ep
        self.name = name
        #: (user input index, dim) -> the name its torch.export.Dim gave the size there
        self.dim_names = dict(dim_names or {})
        #: torch's symbol of each dynamic input size -> the graph's symbol, and the graph's
        #: symbols' ranges (recorded on the module: `dialects.symbolic`)
        self._symbols: dict[str, sympy.Symbol] = {}
        self.symbols: dict[str, tuple[int, int]] = {}
        self.block = Block()
        self.values: dict[torch.fx.Node, SSAValue | list[SSAValue | None]] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.input_names: list[str] = []
        #: what cannot be compiled, with the position of its node in the graph (for the one error)
        self.unsupported_ops: list[tuple[int, Unsupported]] = []
        self._scalars: dict[tuple[object, str], SSAValue] = {}
        #: the node being imported, its position, and the node each op was imported from
        self._node: torch.fx.Node | None = None
        self._position = 0
        self._nodes: dict[Operation, torch.fx.Node] = {}
        #: symbols of sizes and numbers that depend on data (reported once, where they appear),
        #: and the nodes reported
        self._data_dependent: set[str] = set()
        self._reported: set[torch.fx.Node] = set()
        #: state-dict name -> every name of the same tensor (tied weights), made when first needed
        self._aliases: dict[str, list[str]] | None = None
        #: the model's output structure (`runtime_support.outputs.OutputStructure`), set by `_outputs`
        self.structure = None

    # --- helpers for handlers

    def append(self, op: Operation) -> Operation:
        self.block.add_op(op)
        if self._node is not None:
            self._nodes[op] = self._node
            if (where := source_location(self._node)) is not None:
                op.location = where  # the model's line: what an error about the op names
        return op

    def error(self, node: torch.fx.Node, message: str) -> ValueError:
        loc = node_location(node)
        return ValueError(f"{_target_name(node)}{f' at {loc}' if loc else ''}: {message}")

    def report(self, entry: Unsupported, position: int | None = None) -> None:
        """Record something that cannot be compiled, at the node being imported (or at the
        graph ``position`` given); all are raised together at the end, in graph order."""
        self.unsupported_ops.append((self._position if position is None else position, entry))
        if self._node is not None:
            self._reported.add(self._node)

    def result_type(self, node: torch.fx.Node) -> TensorType:
        return self.value_type(node.meta.get("val"), f"the result of {_target_name(node)}")

    def value_type(self, value: object, what: str) -> TensorType:
        return tensor_type(value, what, self._dim_size)

    def static_value(self, value: object, node: torch.fx.Node, arg: str) -> object:
        """A non-tensor argument: a symbolic size (a node computing a ``SymInt`` from a dynamic
        dim, anywhere in a list) becomes its example value; the dynamic dim is reported."""
        if isinstance(value, (list, tuple)):
            return type(value)(self.static_value(v, node, arg) for v in value)
        if not isinstance(value, torch.fx.Node):
            return value
        val = value.meta.get("val")
        if isinstance(val, torch.SymInt) and self.symbolic_expr(val) is not None:
            if (node.target, arg) in SYMBOLIC_SIZE_ARGS:
                return DYNAMIC_INDEX  # the size is the result type's: a reshape's, an expand's
            return self._refuse_symbolic_number(val, node, arg)
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self._example_value(val)
        raise self.error(node, f"argument '{arg}' is computed at run time, expected a constant")

    def table_name(self, table: object, node: torch.fx.Node) -> str | None:
        """The name the model gives the weight ``table`` where ``node`` reads it, when torch.export
        imported that tensor under another of its names (tied weights: GPT-2's ``transformer.wte``
        reads ``lm_head.weight``); None when the names agree."""
        value = self.values.get(table) if isinstance(table, torch.fx.Node) else None
        owner = value.owner if isinstance(value, SSAValue) else None
        if not isinstance(owner, WeightOp):
            return None
        name = owner.weight_name.data
        if self._aliases is None:
            groups: dict[tuple, list[str]] = {}
            for key, t in self.ep.state_dict.items():
                if isinstance(t, torch.Tensor):
                    groups.setdefault(_tensor_identity(t), []).append(key)
            self._aliases = {key: names for names in groups.values() for key in names}
        aliases = self._aliases.get(name, [name])
        for path, _ in reversed(list((node.meta.get("nn_module_stack") or {}).values())):
            for alias in aliases:
                if path and alias.startswith(f"{path}."):
                    return alias if alias != name else None
        return None

    def scalar_constant(self, value: bool | int | float, dtype: torch.dtype = torch.float32) -> SSAValue:
        """A rank-0 ``tg.constant`` of ``dtype`` (one per distinct value and dtype); a number
        against a half or bfloat16 tensor as float32, the precision torch computes it in (its
        kernels read such a scalar unrounded, and a bf16 constant has no NumPy form): a rank-0
        operand does not promote the tensor's dtype."""
        if dtype in (torch.float16, torch.bfloat16):
            dtype = torch.float32
        key = (value, str(dtype))
        if key not in self._scalars:
            if isinstance(value, int) and not isinstance(value, bool) and dtype not in (torch.bool, torch.int64) and not dtype.is_floating_point:
                array = torch.tensor(value, dtype=torch.int64).to(dtype).numpy()  # wraps, as torch converts it
            else:
                array = torch.tensor(value, dtype=dtype).numpy()
            self._scalars[key] = self.append(ConstantOp(dense_from_numpy(array, dtypes.of_torch(dtype).element))).results[0]
        return self._scalars[key]

    def tensor_operand(self, value: object, node: torch.fx.Node, arg: str) -> SSAValue:
        """The SSA value of a Tensor argument; Python numbers become rank-0 constants of the dtype
        torch promotes them to against the node's first tensor argument, and so do symbolic
        numbers (a size of a dynamic dim, an ``.item()``: reported) at their example value."""
        if isinstance(value, torch.fx.Node):
            v = self.values[value]
            if isinstance(v, SSAValue):
                return v
            val = value.meta.get("val")
            if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                symbolic = isinstance(val, torch.SymInt) and self.symbolic_expr(val) is not None
                number = self._refuse_symbolic_number(val, node, arg) if symbolic else self._example_value(val)
                return self.scalar_constant(number, _scalar_dtype(node, number))
            raise self.error(node, f"argument '{arg}' is not a tensor")
        if isinstance(value, (bool, int, float)):
            return self.scalar_constant(value, _scalar_dtype(node, value))
        raise self.error(node, f"argument '{arg}' is a {type(value).__name__}, expected a tensor")

    def unsupported(self, node: torch.fx.Node, entry: Unsupported | None = None) -> SSAValue | list[SSAValue | None]:
        """An ``aten.unsupported`` op standing for ``node``; recorded for the final error (as
        ``entry``, else as an op without a translation)."""
        inputs: list[SSAValue] = []

        def collect(a: object) -> None:
            if isinstance(a, torch.fx.Node) and isinstance(self.values.get(a), SSAValue):
                inputs.append(self.values[a])  # type: ignore[arg-type]
            elif isinstance(a, (list, tuple)):
                for x in a:
                    collect(x)

        collect(node.args)
        collect(list(node.kwargs.values()))
        val = node.meta.get("val")
        target, loc = _target_name(node), node_location(node)
        entry = entry if entry is not None else unsupported_target(node.target, target, loc)
        self.report(dataclasses.replace(entry, operands=_operand_summary(node)) if entry.is_op else entry)
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            self._explain(val)  # an .item(): what uses it is not reported again
        if isinstance(val, (list, tuple)):
            types = [self._try_type(v) for v in val]
            op = self.append(aten.UnsupportedOp(target, inputs, [t for t in types if t is not None], loc))
            results = iter(op.results)
            return [next(results) if t is not None else None for t in types]
        t = self._try_type(val)
        op = self.append(aten.UnsupportedOp(target, inputs, [t] if t is not None else [], loc))
        return op.results[0] if t is not None else []

    # --- symbolic sizes

    def _example_value(self, value: torch.SymInt | torch.SymFloat | torch.SymBool) -> bool | int | float:
        """The value a symbolic number had in the example (0 when it depends on data: reported)."""
        self._explain(value)
        hint = value.node.hint
        return 0 if hint is None else hint

    def _dim_size(self, d: torch.SymInt) -> Dim:
        """The size of a symbolic dim: an expression of the graph's symbols (the dynamic input
        sizes, `_name_dynamic_dims`) when it depends on those only; else (a size that depends on
        data: an unbacked size, reported where it first appears) the example's size."""
        expr = self.symbolic_expr(d)
        if expr is not None:
            return expr
        self._explain(d)
        return int(d.node.hint) if d.node.hint is not None else 1

    def _refuse_symbolic_number(self, value: torch.SymInt, node: torch.fx.Node, arg: str) -> int:
        """Report a dynamic size used as a number (an argument other than a reshape's sizes, or a
        tensor operand); the import goes on at the example's value."""
        expr = format_expr(self.symbolic_expr(value))  # type: ignore[arg-type]
        self.report(symbolic_argument(_target_name(node), node_location(node), arg, expr))
        return int(value.node.hint)

    def symbolic_expr(self, value: torch.SymInt) -> Dim | None:
        """``value`` as an expression of the graph's symbols; None when it depends on others."""
        expr = value.node.expr
        free = {str(s) for s in expr.free_symbols}
        if not free or not free <= set(self._symbols):
            return None
        out = plain_sympy(sympy.sympify(expr).xreplace({s: self._symbols[str(s)] for s in expr.free_symbols}))
        return int(out) if out.is_Integer else out

    def _explain(self, value: torch.SymInt | torch.SymFloat | torch.SymBool) -> None:
        """Report a symbolic number that depends on data (not on a dynamic input dim), once per
        symbol, at the node that makes it (unless that node is reported already)."""
        new = {str(s) for s in value.node.expr.free_symbols} - set(self._symbols) - self._data_dependent
        if not new:
            return
        self._data_dependent |= new
        node = self._node
        if node is not None and node not in self._reported:
            self.report(data_dependent_shape(_target_name(node), node_location(node)))

    def _try_type(self, value: object) -> TensorType | None:
        try:
            return tensor_type(value, "value", self._dim_size)
        except TypeError:
            return None

    # --- the walk

    def run(self) -> ImportedGraph:
        sig = self.ep.graph_signature
        specs = {spec.arg.name: spec for spec in sig.input_specs if hasattr(spec.arg, "name")}
        self._report_mutations()
        output_node = None
        for position, node in enumerate(self.ep.graph.nodes):
            self._node, self._position = node, position
            if node.op == "placeholder":
                self._placeholder(node, specs.get(node.name))
            elif node.op == "call_function":
                handler = HANDLERS.get(node.target) or library_handler(node.target)
                refused = self._refusal(node, handler is not None)
                value = handler(self, node) if handler and refused is None else self.unsupported(node, refused)
                if isinstance(value, SSAValue) and value.name_hint is None:
                    value.name_hint = node.name
                self.values[node] = value
            elif node.op == "get_attr" and isinstance(getattr(self.ep.graph_module, str(node.target), None), torch.nn.Module):
                self.values[node] = []  # a branch or body of control flow: the op using it is reported
            elif node.op == "output":
                output_node = node
            else:
                raise self.error(node, f"unexpected FX node kind '{node.op}'")
        self._node = None
        assert output_node is not None
        results = self._outputs(output_node)
        self._drop_unused_weights()
        arg_types = [a.type for a in self.block.args]
        self.append(func.ReturnOp(*results))
        fn = func.FuncOp(self.name, (arg_types, [r.type for r in results]), Region(self.block))
        module = ModuleOp([fn])
        record_symbols(module, self.symbols)
        graph = ImportedGraph(module, self.weights, self.input_names, len(results), self.structure)
        self._report_run_time_masks()
        if self.unsupported_ops:
            entries = [e for _, e in sorted(self.unsupported_ops, key=lambda pe: pe[0])]
            raise UnsupportedOpsError(entries, graph)
        try:
            module.verify()
        except DiagnosticException as e:
            raise ValueError(f"the imported aten module does not verify: {e}") from e
        return graph

    def _refusal(self, node: torch.fx.Node, handled: bool) -> Unsupported | None:
        """Why ``node`` is refused: its result holds a dtype tensor_graphs has no row for (complex),
        or it has no handler and draws random numbers (a handled op tagged so, SDPA or dropout,
        is deterministic in inference: its handler checks); None when it is not."""
        target, loc = _target_name(node), node_location(node)
        if not handled and node.target not in KNOWN and torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
            return random_op(target, loc)
        val = node.meta.get("val")
        for v in val if isinstance(val, (list, tuple)) else (val,):
            if isinstance(v, torch.Tensor) and not dtypes.holds(v.dtype):
                return complex_values(target, loc, v.dtype)
        return None

    def _report_mutations(self) -> None:
        """Each input or buffer the graph writes in place (a graph output of a kind other than the
        user's), and each side effect (a token), as an entry naming the op that does it."""
        outputs = next(n for n in reversed(self.ep.graph.nodes) if n.op == "output").args[0]
        positions = {node: i for i, node in enumerate(self.ep.graph.nodes)}
        for spec, out in zip(self.ep.graph_signature.output_specs, outputs):
            if spec.kind in (OutputKind.USER_OUTPUT, OutputKind.USER_INPUT_MUTATION):  # the latter: written back (_outputs)
                continue
            node = out if isinstance(out, torch.fx.Node) else None
            while node is not None and node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
                node = node.args[0]  # the op whose result it is: what the entry names
            target, loc = (_target_name(node), node_location(node)) if node is not None else (str(spec.target), "")
            what = (f"has a side effect (torch.export threads a {spec.kind.name.lower()} through it)" if spec.kind == OutputKind.TOKEN
                    else f"writes in place into the model's {'input' if spec.kind == OutputKind.USER_INPUT_MUTATION else 'buffer'} "
                         f"'{spec.target}' ({spec.kind.name})")
            entry = mutation(target, loc, what)
            self.report(dataclasses.replace(entry, operands=_operand_summary(node)) if node is not None else entry, positions.get(node, 0))

    def _drop_unused_weights(self) -> None:
        """Weights nothing reads any more (a convolution's, once a batch norm folded into new
        ones) leave the graph and its weight table."""
        for op in list(self.block.ops):
            if isinstance(op, WeightOp) and not op.results[0].uses:
                self.weights.pop(op.weight_name.data, None)
                self.block.erase_op(op)

    def _report_run_time_masks(self) -> None:
        """Masks and comparisons on run-time data: what convert-aten-to-tensor would reject after
        constant folding, found now so that they join the one error, with their place in the model."""
        positions = {node: i for i, node in enumerate(self.ep.graph.nodes)}
        for op, operand in run_time_mask_builders(self.block):
            node = self._nodes.get(op)
            target, loc = (_target_name(node), node_location(node)) if node is not None else (op.name, "")
            entry = run_time_mask(target, loc, run_time_mask_problem(op, operand), RUN_TIME_MASK_FIX)
            if node is not None:
                entry = dataclasses.replace(entry, operands=_operand_summary(node))
            self.report(entry, positions.get(node, len(positions)))  # type: ignore[arg-type]

    def _placeholder(self, node: torch.fx.Node, spec) -> None:
        kind = spec.kind if spec is not None else InputKind.USER_INPUT
        if kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or not dtypes.holds(val.dtype):
                what = f"a {type(val).__name__}" if not isinstance(val, torch.Tensor) else f"a {val.dtype} tensor"
                raise dtypes.DTypeError(f"input '{node.name}' is {what}; tensor_graphs takes {INPUT_KINDS}")
            self._name_dynamic_dims(node, val)
            arg = self.block.insert_arg(self.value_type(val, f"input '{node.name}'"), len(self.block.args))
            arg.name_hint = node.name
            self.values[node] = arg
            self.input_names.append(node.name)
        elif kind in _WEIGHT_KINDS:
            if not node.users:
                return
            name = spec.target
            tensor = self.ep.state_dict[name] if name in self.ep.state_dict else self.ep.constants[name]
            non_persistent = kind == InputKind.BUFFER and getattr(spec, "persistent", True) is False
            if non_persistent or (kind != InputKind.PARAMETER and not tensor.is_floating_point()):
                # an index table or a mask, or a buffer the model derives at construction and does not
                # save (RoPE's inv_freq): a constant, so that what is computed from it folds
                attr = dense_from_numpy(values_of(tensor), dtypes.of_torch(tensor.dtype).element)
                op = self.append(ConstantOp(attr))
                op.results[0].name_hint = node.name
                self.values[node] = op.results[0]
                return
            array = weight_array(name, tensor)
            self.weights[name] = array
            op = self.append(WeightOp(name, tensor_type(tensor, f"weight '{name}'")))
            op.results[0].name_hint = node.name
            self.values[node] = op.results[0]
        elif kind == InputKind.TOKEN:
            self.values[node] = []  # a side effect's token: the op with the effect is reported (_report_mutations)
        else:
            raise ValueError(f"input '{node.name}' of kind {kind.name} is not supported")

    def _name_dynamic_dims(self, node: torch.fx.Node, val: torch.Tensor) -> None:
        """Give each size of input ``node`` exported as dynamic its symbol in the graph: the name
        of the user's ``torch.export.Dim`` there, else ``s0``, ``s1``, ...; record its range. A
        range without a maximum is reported (memory is planned at each symbol's maximum)."""
        ranges = {str(k): v for k, v in self.ep.range_constraints.items()}
        index = len(self.input_names)
        for i, d in enumerate(val.shape):
            if isinstance(d, int) or not d.node.expr.is_Symbol or str(d.node.expr) in self._symbols:
                continue
            torch_name = str(d.node.expr)
            name = self.dim_names.get((index, i)) or f"s{len(self.symbols)}"
            while name in self.symbols and self._symbols.get(torch_name) is None:
                name = f"{name}_"
            self._symbols[torch_name] = symbol(name)
            r = ranges.get(torch_name)
            lo = _finite_int(r.lower) if r is not None else None
            hi = _finite_int(r.upper) if r is not None else None
            if hi is None:
                self.report(unbounded_dim(name, f"input '{node.name}' dim {i} (size {d.node.hint} in the example)"))
                hi = int(d.node.hint)
            self.symbols[name] = (lo if lo is not None else 0, hi)

    def _outputs(self, node: torch.fx.Node) -> list[SSAValue]:
        """The graph's results: every tensor leaf of the model's output, in order; the structure
        around them and the leaves that are not tensors (numbers, None) go to ``self.structure``
        (`runtime_support.outputs.OutputStructure`)."""
        from tensor_graphs.runtime_support.outputs import OutputStructure

        results: list[SSAValue] = []
        leaves: list = []
        writes: list[tuple[int, int]] = []
        specs = self.ep.graph_signature.output_specs
        for i, out in enumerate(node.args[0]):
            kind = specs[i].kind if i < len(specs) else OutputKind.USER_OUTPUT
            if kind == OutputKind.USER_INPUT_MUTATION and isinstance(self.values.get(out), SSAValue):
                writes.append((len(results), self.input_names.index(specs[i].target)))
                results.append(self.values[out])  # the new value of an input the model writes in place
                continue
            if kind != OutputKind.USER_OUTPUT:
                continue  # a buffer write or a token: reported by _report_mutations
            if not isinstance(out, torch.fx.Node):
                if out is not None and not isinstance(out, (bool, int, float, str)):
                    raise TypeError(f"output {i} is a {type(out).__name__}; the model must return tensors, numbers or None")
                leaves.append(("constant", out))
                continue
            value = self.values.get(out)
            if not isinstance(value, SSAValue):
                val = out.meta.get("val")
                if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):  # a size: its example value
                    leaves.append(("constant", self._example_value(val)))
                    continue
                if self.unsupported_ops:  # the op computing it is refused (a complex result): reported
                    leaves.append(("constant", None))
                    continue
                raise TypeError(f"output {i} is {out!r}, not a tensor; the model must return tensors")
            leaves.append(len(results))
            results.append(value)
        spec = self.ep.call_spec.out_spec
        self.structure = OutputStructure(spec, tuple(leaves), tuple(writes)) if spec is not None else None
        return results


def _operand_summary(node: torch.fx.Node) -> str:
    """``node``'s tensor arguments, dtype and shape each (``"float32 [4, 8], int64 [4]"``): what an
    error about the op shows."""
    shown: list[str] = []

    def visit(a: object) -> None:
        if isinstance(a, torch.fx.Node) and isinstance(val := a.meta.get("val"), torch.Tensor):
            shown.append(f"{str(val.dtype).removeprefix('torch.')} {list(val.shape)}")
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)

    visit(node.args)
    visit(list(node.kwargs.values()))
    return ", ".join(shown)


def _finite_int(value) -> int | None:
    """A sympy bound as an int; None when it is infinite (``int_oo``: a Dim without a maximum)."""
    return int(value) if isinstance(value, (int, sympy.Integer)) else None


def _target_name(node: torch.fx.Node) -> str:
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return f"{schema.name}{'.' + schema.overload_name if schema.overload_name else ''}"
    return getattr(target, "__name__", str(target))


def _tensor_identity(t: torch.Tensor) -> tuple:
    """Equal for two names of one tensor (tied weights), different for distinct tensors."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _scalar_dtype(node: torch.fx.Node, value: bool | int | float) -> torch.dtype:
    """The dtype torch computes ``node`` in for the Python number ``value``: promoted against the
    node's first tensor argument, else the number's own default dtype."""
    for a in node.args:
        for x in a if isinstance(a, (list, tuple)) else (a,):
            val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
            if isinstance(val, torch.Tensor):
                dtype = torch.result_type(val, value)
                return dtype if dtypes.holds(dtype) else torch.float32
    return torch.tensor(value).dtype if not isinstance(value, float) else torch.float32


# --------------------------------------------------------------------------- public API


def import_exported_program(ep: ExportedProgram, dim_names: Mapping[tuple[int, int], str] | None = None) -> ImportedGraph:
    """An :class:`ImportedGraph` from an already exported program (not decomposed: aten.linear
    stays). Its dynamic sizes become the graph's symbols, named ``dim_names[(input, dim)]``
    where given (`dim_names_of`), else ``s0``, ``s1``, ..."""
    return GraphImporter(ep, dim_names=dim_names).run()


def _check_inputs(example_inputs: object) -> tuple[torch.Tensor, ...]:
    if isinstance(example_inputs, (torch.Tensor, np.ndarray)):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise TypeError(f"example_inputs must be a tuple of tensors, got a {type(example_inputs).__name__}")
    out = []
    for i, x in enumerate(example_inputs):
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(x)
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"input {i} is a {type(x).__name__}; tensor_graphs takes {INPUT_KINDS}")
        if not dtypes.holds(x.dtype):
            raise dtypes.DTypeError(f"input {i} has dtype {x.dtype}; tensor_graphs takes {INPUT_KINDS}")
        out.append(x)
    return tuple(out)


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module):
    """``model.eval()`` for the duration, then every submodule's own training flag restored."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def export_program(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None) -> ExportedProgram:
    """``torch.export.export`` in eval mode without autograd (``dynamic_shapes``: torch.export's
    own spec, ``torch.export.Dim`` per input and dim); failures become a ValueError."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got a {type(model).__name__}")
    inputs = _check_inputs(example_inputs)
    with _eval_mode(model), torch.no_grad():
        try:
            # In a copy of the caller's context: each export calls torch's ``config.patch`` (of
            # torch._dynamo.config and torch._functorch.config), which makes a new ContextVar
            # and sets it in the current context, and a context never forgets a variable: two
            # per export would stay in the caller's thread for good (~0.4 KB per compile).
            return contextvars.copy_context().run(_export_functional, model, inputs, dynamic_shapes)
        except Exception as e:  # torch.export raises many kinds; all mean "cannot export"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"torch.export could not export {type(model).__name__}: {first}") from e
        finally:
            _forget_last_trace()


def _export_functional(model: torch.nn.Module, inputs: tuple, dynamic_shapes=None) -> ExportedProgram:
    """``torch.export.export``, then, when the graph holds an op tensor_graphs does not lower or
    mutates anything (``x.add_(y)``, ``relu_``: ResNet's and T5's in-place ops), PyTorch's
    decompositions of every such op into Core ATen, functionalized (`decompositions.decompose`:
    ``linear``, ``scaled_dot_product_attention`` and the other ops it lowers stay whole); complex
    values between real ones as pairs of reals (`complex_pairs.split_complex`)."""
    from tensor_graphs.frontend.complex_pairs import split_complex
    from tensor_graphs.frontend.decompositions import decompose

    return split_complex(decompose(torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)))


def dim_names_of(model: torch.nn.Module, dynamic_shapes) -> dict[tuple[int, int], str]:
    """(input index, dim) -> the name of the ``torch.export.Dim`` a ``dynamic_shapes`` spec gives
    it (torch.export keeps only its own symbols): the spec as torch.export takes it, a tuple in
    the order of ``forward``'s arguments or a dict by their names, each entry a dict
    ``{dim: Dim}`` or a sequence with a Dim or None per dim."""
    import inspect

    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, dict):
        params = list(inspect.signature(model.forward).parameters)
        entries = [dynamic_shapes.get(p) for p in params]
    else:
        entries = list(dynamic_shapes)
    names: dict[tuple[int, int], str] = {}
    for i, entry in enumerate(entries):
        dims = entry.items() if isinstance(entry, dict) else enumerate(entry) if isinstance(entry, (list, tuple)) else ()
        for d, dim in dims:
            name = getattr(dim, "__name__", None)
            if isinstance(name, str) and name.isidentifier() and name not in ("max", "min"):
                names[(i, int(d))] = name
    return names


def _forget_last_trace() -> None:
    """Drop torch's reference to the graph it traced last: export fills
    ``proxy_tensor._FAKE_TENSOR_ID_TO_PROXY_MAP_FOR_EXPORT`` (for its own fake-tensor leak check,
    made before it returns) and clears it only when the next export starts, so until then it
    keeps that whole trace alive (every node, its metadata and fake tensors, 0.6-0.8 MB for a
    2-layer GPT-2). Not per compile, but nothing needs it once export has returned."""
    from torch.fx.experimental import proxy_tensor

    getattr(proxy_tensor, "_FAKE_TENSOR_ID_TO_PROXY_MAP_FOR_EXPORT", {}).clear()


def import_model(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None) -> ImportedGraph:
    """Export ``model`` with ``torch.export`` (eval mode, no grad; ``dynamic_shapes`` as
    torch.export takes it) and import it at the aten level."""
    with _forget_generated_source():
        program = export_program(model, example_inputs, dynamic_shapes)
        return import_exported_program(program, dim_names_of(model, dynamic_shapes))


@contextlib.contextmanager
def _forget_generated_source():
    """Drop the source of the Python code torch.fx generates meanwhile (``forward`` of each graph
    module) when done: torch keeps it for good, in its loader's cache and in ``linecache``, with
    a copy of the code's globals (~80 KB for a 2-layer GPT-2), so a process compiling models on
    demand would grow by that with every compile. The code itself lives as long as its module."""
    import linecache

    from torch.fx.graph_module import _loader

    before = set(_loader.eval_cache)
    try:
        yield
    finally:
        for key in set(_loader.eval_cache) - before:
            del _loader.eval_cache[key]
            linecache.cache.pop(key, None)
