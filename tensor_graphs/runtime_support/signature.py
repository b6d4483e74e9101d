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
without states ignores ``dims`` (it may be null). States persist between calls: the caller
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
    bytes (`dtypes.DType.storage`: bfloat16 as uint16 bits, as NumPy has no bfloat16)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    name: str = ""

    @staticmethod
    def of(type: MemRefType | TensorType, name: str = "") -> TensorSpec:
        return TensorSpec(tuple(type.get_shape()), dtypes.of_element(type.element_type).storage, name)

    #: what an array bound to a buffer of ``type`` holds (the same: bfloat16 as its bits)
    bound = of

    @property
    def dt(self) -> dtypes.DType:
        """The row of the one dtype table."""
        return dtypes.of_storage(self.dtype)

    def bound_type(self) -> MemRefType:
        """The memref type `bound` reads this spec from (uint16: bfloat16)."""
        return MemRefType(self.dt.element, self.shape)

    def __str__(self) -> str:
        return f"{self.dt.name}{list(self.shape)}"


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
