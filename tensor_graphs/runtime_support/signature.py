"""What the runtime must know about a compiled graph, and how a module records it.

The native ABI of every graph is::

    int32_t <entry>(uint8_t *arena, void **weights, void **inputs, void **outputs, int64_t *dims)

It returns a status: 0 when the graph ran, k >= 1 when a check in the generated code failed
(an embedding index out of range, say), with the message ``errors[k - 1]``; the outputs are
then incomplete. :meth:`GraphSignature.status_error` turns a status into the exception to raise.

``weights`` follows ``weight_table`` (model weights by name, then IR constants), then the
graph's persistent ``states`` (KV caches, `buf.state`): the state ``i`` is at slot
``len(weight_table) + i`` (:meth:`GraphSignature.state_slot`). ``inputs`` and ``outputs`` follow
the function's arguments. Outputs are written in place (destination passing); the arena holds
everything else. Output buffers must not overlap the inputs, each other or the arena: the
generated kernels assume distinct graph buffers share no byte (``noalias``).

``dims`` holds the run-time sizes as ``int64``. For a graph with states, ``dims[0]`` is ``past``:
the number of positions already cached, where `buf.cache_write` writes its new positions and
from which `buf.attention {kv_cache}` counts its queries; it must not be null then. A graph
compiled for dynamic shapes (``symbols``: its size symbols, sorted by name, each with its range)
reads symbol ``i`` from ``dims[1 + i]`` and checks it against its range on entry (an error
status); the Python runtime fills them from the inputs' shapes (`SizeBinder`). A graph without
states or symbols ignores ``dims`` (it may be null). States persist between calls: the caller
allocates them once (zeroed) and may share them between graphs (a prefill and a decode graph).

A graph compiled with profiling (``convert-buffer-to-llvm{profile=true}``, ``profile=True`` in
the Python API) has a ``profile`` (None otherwise): one label per kernel, in call order. Its
``weights`` table has one more slot, :meth:`GraphSignature.profile_slot` (after the weights,
constants and states): an ``int64_t *counters`` of ``2 * len(profile)`` entries that every call
adds to, ``counters[2 * k]`` the nanoseconds spent in kernel ``k`` (``CLOCK_MONOTONIC``, from the
previous reading: the time between two kernel calls goes to the later one) and
``counters[2 * k + 1]`` how many times it ran. A graph without profiling has no such slot and
reads nothing more: its code is exactly what it would be without the option.

An error message may contain ``{past}``, which :meth:`GraphSignature.status_error` replaces by
the ``past`` of the failing call ("kv cache 'kv.0.key': position {past} + 8 new tokens ..."),
and ``{bad_index:K:N}``, which it replaces by the first value of input ``K`` outside ``[0, N)``
and its position when it is given the call's inputs ("embedding 'wte.weight': index out of
range [0, 256): input 'ids' holds 300 at [0, 3]"), else by the input's name.

`convert-buffer-to-llvm` stores a :class:`GraphSignature` on the llvm-level module as
attributes (``tg.entry``, ``tg.arena_size``, ``tg.weight_table``, ``tg.constants``,
``tg.input_names``, ``tg.input_types``, ``tg.output_types``, ``tg.state_names``,
``tg.state_types``, ``tg.errors``, ``tg.packed_weights``, and ``tg.profile`` when profiled) so
that module is self-describing.

A weight read by `buf.packed_matmul` takes a slot named after its packed layout
(``"fc.weight@panels64t"``, listed in ``packed``): the caller binds there the weight ``fc.weight``
packed into column panels (`dialects.packing.PanelLayout.pack`), made once when the graph is
loaded; a weight only read that way is not bound as it is at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
    i64,
)

from tensor_graphs import dtypes
from tensor_graphs.dialects.dense import dense_from_numpy, numpy_dtype_of, numpy_from_dense
from tensor_graphs.dialects.symbolic import (
    SymbolicShapeError,
    dims_of,
    evaluator,
    format_expr,
    record_symbols,
    shaped_memref,
    symbols_of,
)

#: ``{bad_index:K:N}`` in an error message: an index of input K outside [0, N) (see status_error)
_BAD_INDEX = re.compile(r"\{bad_index:(\d+):(\d+)\}")

#: element type <-> NumPy dtype and dense attributes <-> arrays: one definition, in dialects.dense
numpy_dtype = numpy_dtype_of
dense_to_numpy = numpy_from_dense


def check_error(entry: str, message: str, input_names: Sequence[str], past: int | None = None,
                inputs: Sequence | None = None) -> Exception:
    """The exception for a failed run-time check of graph ``entry`` (an error status of the
    native function, a flag of a Triton kernel; `codegen.checks`): an ``IndexError`` for an
    index out of range, a ``RuntimeError`` otherwise. ``past`` (the call's ``dims[0]``) fills
    the ``{past}`` of a message; ``inputs`` (the call's arguments, arrays or tensors) the
    ``{bad_index:K:N}`` of one: the first value of input ``K`` outside ``[0, N)`` and where it
    is (without them, only which input holds it)."""
    message = message.replace("{past}", "past" if past is None else str(past))
    message = _BAD_INDEX.sub(lambda m: _bad_index(int(m[1]), int(m[2]), input_names, inputs), message)
    kind = IndexError if "index out of range" in message else RuntimeError
    return kind(f"{entry}: {message}")


def _bad_index(k: int, n: int, input_names: Sequence[str], inputs: Sequence | None) -> str:
    """What fills ``{bad_index:k:n}``: the offending value of input ``k`` and its position."""
    name = input_names[k] if k < len(input_names) and input_names[k] else f"#{k}"
    if inputs is not None and k < len(inputs):
        values = inputs[k]
        values = np.asarray(values.cpu() if hasattr(values, "cpu") else values)
        bad = np.argwhere((values < 0) | (values >= n))
        if len(bad):
            at = tuple(int(i) for i in bad[0])
            more = f" ({len(bad) - 1} more)" if len(bad) > 1 else ""
            return f": input '{name}' holds {values[at]} at {list(at)}{more}"
    return f" (an index in input '{name}')"


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one graph input, output or state; ``dtype`` is the NumPy dtype of its
    bytes (`dtypes.DType.storage`: bfloat16 as uint16 bits, as NumPy has no bfloat16). A dim of
    ``shape`` is an int, or a sympy expression of the graph's symbols (`dialects.symbolic`)."""

    shape: tuple
    dtype: np.dtype
    name: str = ""

    @staticmethod
    def of(type: MemRefType | TensorType, name: str = "") -> TensorSpec:
        return TensorSpec(dims_of(type), dtypes.of_element(type.element_type).storage, name)

    #: what an array bound to a buffer of ``type`` holds (the same: bfloat16 as its bits)
    bound = of

    @property
    def dt(self) -> dtypes.DType:
        """The row of the one dtype table."""
        return dtypes.of_storage(self.dtype)

    def bound_type(self) -> MemRefType:
        """The memref type `bound` reads this spec from (uint16: bfloat16)."""
        return shaped_memref(self.dt.element, self.shape)

    def __str__(self) -> str:
        return f"{self.dt.name}[{', '.join(format_expr(d) for d in self.shape)}]"


class SizeBinder:
    """The values of a graph's symbols read from the shapes of one call's inputs, checked: every
    static dim as compiled, each symbol in its range, the inputs agreeing on it (and on every
    dim that is an expression of the symbols). ``dims(shapes)`` gives the symbols' values in the
    order of ``symbols`` (the native function's ``dims[1:]``); a ValueError names the input, the
    dim, the symbol and its range. Built once per graph: a call evaluates closures, not sympy."""

    def __init__(self, symbols: Sequence[tuple[str, int, int]], inputs: Sequence[TensorSpec], entry: str = ""):
        self.symbols = tuple(symbols)
        self.inputs = tuple(inputs)
        names = [n for n, _, _ in self.symbols]
        #: per symbol, the first (input, dim) whose size it is
        self.sources: list[tuple[int, int]] = []
        for name in names:
            where = next(((i, d) for i, spec in enumerate(self.inputs) for d, x in enumerate(spec.shape)
                          if not isinstance(x, int) and getattr(x, "is_Symbol", False) and x.name == name), None)
            if where is None:
                raise SymbolicShapeError(
                    f"{entry}: the size symbol {name} is not the size of any input dim (the inputs are "
                    f"{', '.join(f'{s.name}: {s}' for s in self.inputs)}): a call could not tell its value")
            self.sources.append(where)
        self.checks = [[(d, x if isinstance(x, int) else evaluator(x, names), x) for d, x in enumerate(spec.shape)]
                       for spec in self.inputs]

    def dims(self, shapes: Sequence[Sequence[int]]) -> list[int]:
        values = []
        for (name, lo, hi), (i, d) in zip(self.symbols, self.sources):
            shape = shapes[i]
            if len(shape) != len(self.inputs[i].shape):
                raise self._mismatch(i, shape)
            v = int(shape[d])
            if not lo <= v <= hi:
                spec = self.inputs[i]
                raise ValueError(f"input {i} ('{spec.name}') dim {d} has size {v}, outside the range of its size "
                                 f"symbol {name}: [{lo}, {hi}] (shape {list(shape)}, compiled for {spec})")
            values.append(v)
        for i, (shape, checks) in enumerate(zip(shapes, self.checks)):
            if len(shape) != len(checks):
                raise self._mismatch(i, shape)
            for d, expected, x in checks:
                want = expected if isinstance(expected, int) else expected(values)
                if shape[d] != want:
                    raise self._disagree(i, d, shape, x, want, values)
        return values

    def _mismatch(self, i: int, shape) -> ValueError:
        spec = self.inputs[i]
        return ValueError(f"input {i} ('{spec.name}') has shape {list(shape)}, expected {spec}")

    def _disagree(self, i: int, d: int, shape, x, want: int, values: list[int]) -> ValueError:
        spec = self.inputs[i]
        if isinstance(x, int):
            return ValueError(f"input {i} ('{spec.name}') has shape {list(shape)}, expected {spec} (dim {d} is "
                              f"compiled as {x})")
        given = ", ".join(f"{n} = {v} (from input {j} ('{self.inputs[j].name}') dim {e}, range [{lo}, {hi}])"
                          for (n, lo, hi), v, (j, e) in zip(self.symbols, values, self.sources)
                          if n in {s.name for s in x.free_symbols})
        return ValueError(f"input {i} ('{spec.name}') dim {d} has size {shape[d]}, but its size {format_expr(x)} is "
                          f"{want} with {given}: the inputs disagree on a size symbol")

    def shape(self, spec: TensorSpec, values: Sequence[int]) -> tuple[int, ...]:
        """``spec``'s shape at the symbols' ``values`` (in the order of ``symbols``)."""
        return self.shaper(spec)(values)

    def shaper(self, spec: TensorSpec):
        """A function of the symbols' values giving ``spec``'s shape (built once: a call of a
        dynamic graph evaluates its outputs' shapes with it)."""
        names = [n for n, _, _ in self.symbols]
        dims = [(d, None) if isinstance(d, int) else (0, evaluator(d, names)) for d in spec.shape]
        return lambda values: tuple(d if f is None else f(values) for d, f in dims)


@dataclass(frozen=True)
class GraphSignature:
    entry: str
    arena_size: int
    weight_table: tuple[str, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    #: message of each error status (status k >= 1 is ``errors[k - 1]``)
    errors: tuple[str, ...] = ()
    #: sum of the sizes of every intermediate buffer before planning (``tg.intermediate_bytes``)
    intermediate_bytes: int = 0
    #: persistent buffers (`buf.state`, KV caches) by first appearance; table slots after the weights
    states: tuple[TensorSpec, ...] = ()
    #: per kernel, in call order, a label ("buf.matmul 128x768 @ 768x2304 (%qkv)") when the graph
    #: was compiled with profiling; None otherwise
    profile: tuple[str, ...] | None = None
    #: the weight-table slots holding a weight packed into panels (``"fc.weight@panels64t"``, see
    #: `dialects.packing.PanelLayout`): the runtime packs the named weight into them once
    packed: tuple[str, ...] = ()
    #: what the kernels read in each weight slot (the table's first ``len(weight_specs)``
    #: names; constants follow): the runtime checks every array it binds against it
    #: (`bound_weights.check_weights`). Empty for a module lowered before it was recorded.
    weight_specs: tuple[TensorSpec, ...] = ()
    #: the size symbols of a graph compiled for dynamic shapes, (name, min, max) sorted by name:
    #: ``dims[1 + i]`` holds the value of symbol ``i`` in a call (`SizeBinder` reads them from the
    #: inputs' shapes); empty for a static graph
    symbols: tuple[tuple[str, int, int], ...] = ()

    def packed_layout(self, slot: str):
        """The layout of a packed slot (`dialects.packing.layout_from_slot_name`: panels or a
        Winograd transform), or None for a weight bound as it is."""
        from tensor_graphs.dialects.packing import layout_from_slot_name

        return layout_from_slot_name(slot) if slot in self.packed else None

    def state_slot(self, index: int) -> int:
        """Slot of ``states[index]`` in the ``weights`` table (after the weights and constants)."""
        return len(self.weight_table) + index

    def profile_slot(self) -> int:
        """Slot of the profile counters in the ``weights`` table (after the weights, constants
        and states) of a graph compiled with profiling."""
        return len(self.weight_table) + len(self.states)

    def status_error(self, status: int, past: int | None = None, inputs: Sequence | None = None) -> Exception:
        """The exception for a nonzero status returned by the native function (`check_error`
        of its message), or a RuntimeError for an unknown status."""
        if 1 <= status <= len(self.errors):
            return check_error(self.entry, self.errors[status - 1], [s.name for s in self.inputs], past, inputs)
        return RuntimeError(f"{self.entry}: the native function returned the unknown status {status}")

    # ------------------------------------------------------------------ module attributes

    def attach(self, module: ModuleOp) -> None:
        """Record this signature on ``module`` as ``tg.*`` attributes."""

        def memref(spec: TensorSpec) -> MemRefType:
            return spec.bound_type()

        module.attributes["tg.entry"] = StringAttr(self.entry)
        module.attributes["tg.arena_size"] = IntegerAttr(self.arena_size, i64)
        module.attributes["tg.weight_table"] = ArrayAttr([StringAttr(n) for n in self.weight_table])
        module.attributes["tg.constants"] = DictionaryAttr({k: _constant_attr(v) for k, v in self.constants.items()})
        module.attributes["tg.input_names"] = ArrayAttr([StringAttr(s.name) for s in self.inputs])
        module.attributes["tg.input_types"] = ArrayAttr([memref(s) for s in self.inputs])
        module.attributes["tg.output_types"] = ArrayAttr([memref(s) for s in self.outputs])
        if self.states:
            module.attributes["tg.state_names"] = ArrayAttr([StringAttr(s.name) for s in self.states])
            module.attributes["tg.state_types"] = ArrayAttr([memref(s) for s in self.states])
        module.attributes["tg.errors"] = ArrayAttr([StringAttr(m) for m in self.errors])
        if self.profile is not None:
            module.attributes["tg.profile"] = ArrayAttr([StringAttr(label) for label in self.profile])
        if self.packed:
            module.attributes["tg.packed_weights"] = ArrayAttr([StringAttr(n) for n in self.packed])
        if self.weight_specs:
            module.attributes["tg.weight_types"] = ArrayAttr([s.bound_type() for s in self.weight_specs])
        module.attributes["tg.intermediate_bytes"] = IntegerAttr(self.intermediate_bytes, i64)
        if self.symbols:
            record_symbols(module, {n: (lo, hi) for n, lo, hi in self.symbols})

    def binder(self) -> SizeBinder:
        """The `SizeBinder` of this graph's inputs (a dynamic graph's)."""
        return SizeBinder(self.symbols, self.inputs, self.entry)

    @staticmethod
    def from_module(module: ModuleOp) -> GraphSignature:
        """Read the signature `convert-buffer-to-llvm` recorded on ``module``."""
        a = module.attributes
        missing = [
            k
            for k in ("tg.entry", "tg.arena_size", "tg.weight_table", "tg.input_types", "tg.output_types")
            if k not in a
        ]
        if missing:
            raise ValueError(
                "module carries no graph signature (missing " + ", ".join(missing) + "): "
                "lower it with convert-buffer-to-llvm first"
            )
        names = [s.data for s in a["tg.input_names"].data] if "tg.input_names" in a else []  # type: ignore[attr-defined]
        in_types = list(a["tg.input_types"].data)  # type: ignore[attr-defined]
        names += [""] * (len(in_types) - len(names))
        consts = a.get("tg.constants")
        errors = a.get("tg.errors")
        profile = a.get("tg.profile")
        packed = a.get("tg.packed_weights")
        state_names = [s.data for s in a["tg.state_names"].data] if "tg.state_names" in a else []  # type: ignore[attr-defined]
        state_types = list(a["tg.state_types"].data) if "tg.state_types" in a else []  # type: ignore[attr-defined]
        if len(state_names) != len(state_types):
            raise ValueError(
                f"module records {len(state_names)} state name(s) (tg.state_names) but "
                f"{len(state_types)} state type(s) (tg.state_types)"
            )
        return GraphSignature(
            entry=a["tg.entry"].data,  # type: ignore[attr-defined]
            arena_size=a["tg.arena_size"].value.data,  # type: ignore[attr-defined]
            weight_table=tuple(s.data for s in a["tg.weight_table"].data),  # type: ignore[attr-defined]
            inputs=tuple(TensorSpec.of(t, n or f"input{i}") for i, (t, n) in enumerate(zip(in_types, names))),
            outputs=tuple(TensorSpec.of(t, f"output{i}") for i, t in enumerate(a["tg.output_types"].data)),  # type: ignore[attr-defined]
            constants={k: _constant_array(v) for k, v in consts.data.items()} if consts is not None else {},  # type: ignore[attr-defined]
            errors=tuple(m.data for m in errors.data) if errors is not None else (),  # type: ignore[attr-defined]
            intermediate_bytes=a["tg.intermediate_bytes"].value.data if "tg.intermediate_bytes" in a else 0,  # type: ignore[attr-defined]
            states=tuple(TensorSpec.of(t, n) for n, t in zip(state_names, state_types)),
            profile=tuple(label.data for label in profile.data) if profile is not None else None,  # type: ignore[attr-defined]
            packed=tuple(n.data for n in packed.data) if packed is not None else (),  # type: ignore[attr-defined]
            weight_specs=_weight_specs(a),
            symbols=tuple((n, lo, hi) for n, (lo, hi) in sorted(symbols_of(module).items())),
        )


def _weight_specs(attributes) -> tuple[TensorSpec, ...]:
    """``tg.weight_types`` (one memref type per weight slot, in table order) as specs named by
    ``tg.weight_table``; a ValueError when they disagree."""
    types = attributes.get("tg.weight_types")
    if types is None:
        return ()
    names = [n.data for n in attributes["tg.weight_table"].data]
    if not isinstance(types, ArrayAttr) or len(types.data) > len(names) or not all(isinstance(t, MemRefType) for t in types.data):
        raise ValueError(f"module records tg.weight_types that are not one memref type per weight slot: {types}")
    return tuple(TensorSpec.bound(t, n) for n, t in zip(names, types.data))


_BF16 = dtypes.of_name("bfloat16")


def _constant_attr(stored: np.ndarray) -> DenseIntOrFPElementsAttr:
    """The module attribute of a constant the weight table binds as ``stored`` (its buffer's
    bytes: bfloat16 as uint16 bits, the only storage without an element type of its own)."""
    if stored.dtype == np.uint16:
        return dense_from_numpy(dtypes.bf16_values(stored), _BF16.element)
    return dense_from_numpy(stored)


def _constant_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The array a constant's module attribute binds (`_constant_attr`'s inverse)."""
    row = dtypes.of_element(attr.get_element_type())
    return dtypes.to_storage(dense_to_numpy(attr), row)
