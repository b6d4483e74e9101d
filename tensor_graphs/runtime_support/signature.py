"""What the runtime must know about a compiled graph, and how a module records it.

The native ABI of every graph is::

    int32_t <entry>(uint8_t *arena, void **weights, void **inputs, void **outputs, int64_t *dims)

It returns a status: 0 when the graph ran, k >= 1 when a check in the generated code failed
(an embedding index out of range, say), with the message ``errors[k - 1]``; the outputs are
then incomplete. :meth:`GraphSignature.status_error` turns a status into the exception to raise.

``weights`` follows ``weight_table`` (model weights by name, then IR constants), ``inputs`` and
``outputs`` follow the function's arguments. ``dims`` is reserved for symbolic sizes (null for
now). Outputs are written in place (destination passing); the arena holds everything else.
Output buffers must not overlap the inputs, each other or the arena: the generated kernels
assume distinct graph buffers share no byte (``noalias``).

`convert-buffer-to-llvm` stores a :class:`GraphSignature` on the llvm-level module as
attributes (``tg.entry``, ``tg.arena_size``, ``tg.weight_table``, ``tg.constants``,
``tg.input_names``, ``tg.input_types``, ``tg.output_types``, ``tg.errors``) so that module is
self-describing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    i64,
)

from tensor_graphs.dialects.dense import dense_from_numpy, element_type_of, numpy_dtype_of, numpy_from_dense

#: element type <-> NumPy dtype and dense attributes <-> arrays: one definition, in dialects.dense
numpy_dtype = numpy_dtype_of
dense_to_numpy = numpy_from_dense


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one graph input or output."""

    shape: tuple[int, ...]
    dtype: np.dtype
    name: str = ""

    @staticmethod
    def of(type: MemRefType, name: str = "") -> TensorSpec:
        return TensorSpec(tuple(type.get_shape()), numpy_dtype(type.element_type), name)

    def __str__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"


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

    def status_error(self, status: int) -> Exception:
        """The exception for a nonzero status returned by the native function: an
        ``IndexError`` for an index out of range, a ``RuntimeError`` otherwise."""
        if 1 <= status <= len(self.errors):
            message = self.errors[status - 1]
            kind = IndexError if "index out of range" in message else RuntimeError
            return kind(f"{self.entry}: {message}")
        return RuntimeError(f"{self.entry}: the native function returned the unknown status {status}")

    # ------------------------------------------------------------------ module attributes

    def attach(self, module: ModuleOp) -> None:
        """Record this signature on ``module`` as ``tg.*`` attributes."""

        def memref(spec: TensorSpec) -> MemRefType:
            return MemRefType(element_type_of(spec.dtype), spec.shape)

        module.attributes["tg.entry"] = StringAttr(self.entry)
        module.attributes["tg.arena_size"] = IntegerAttr(self.arena_size, i64)
        module.attributes["tg.weight_table"] = ArrayAttr([StringAttr(n) for n in self.weight_table])
        module.attributes["tg.constants"] = DictionaryAttr({k: dense_from_numpy(v) for k, v in self.constants.items()})
        module.attributes["tg.input_names"] = ArrayAttr([StringAttr(s.name) for s in self.inputs])
        module.attributes["tg.input_types"] = ArrayAttr([memref(s) for s in self.inputs])
        module.attributes["tg.output_types"] = ArrayAttr([memref(s) for s in self.outputs])
        module.attributes["tg.errors"] = ArrayAttr([StringAttr(m) for m in self.errors])
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
        return GraphSignature(
            entry=a["tg.entry"].data,  # type: ignore[attr-defined]
            arena_size=a["tg.arena_size"].value.data,  # type: ignore[attr-defined]
            weight_table=tuple(s.data for s in a["tg.weight_table"].data),  # type: ignore[attr-defined]
            inputs=tuple(TensorSpec.of(t, n or f"input{i}") for i, (t, n) in enumerate(zip(in_types, names))),
            outputs=tuple(TensorSpec.of(t, f"output{i}") for i, t in enumerate(a["tg.output_types"].data)),  # type: ignore[attr-defined]
            constants={k: dense_to_numpy(v) for k, v in consts.data.items()} if consts is not None else {},  # type: ignore[attr-defined]
            errors=tuple(m.data for m in errors.data) if errors is not None else (),  # type: ignore[attr-defined]
            intermediate_bytes=a["tg.intermediate_bytes"].value.data if "tg.intermediate_bytes" in a else 0,  # type: ignore[attr-defined]
        )
