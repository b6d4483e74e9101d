"""What a graph's kernels read from each weight, and the check that the arrays bound match it.

The generated kernels read a weight at the shape its module declares, with no bounds check: a
weights file whose ``0.bias`` is ``[1]`` for a module that declares ``[1024]`` would have them
read past the mapping (a crash, or neighbouring memory in the outputs), and a transposed
``[8, 16]`` for ``[16, 8]`` gives silently wrong numbers. So every array is checked against
the declaration before anything runs: `check_weights` raises one `WeightMismatchError` naming
the weight, both shapes (and dtypes) and where the array came from.

A declaration (`DeclaredWeight`) is one slot of the graph's weight table:

- a plain weight (``tg.weight`` at the aten and tg levels, ``buf.weight`` at the buf level, a
  slot of ``tg.weight_types`` at the llvm level): the array must have exactly its dtype and shape;
- a packed copy (``buf.packed_weight``, a ``tg.packed_weights`` slot): made from the weight
  ``layout.source`` when the graph is loaded (`dialects.packing.PanelLayout`,
  `dialects.winograd.WinogradLayout`). The weight must be float32 of the shape the packed
  weight was made from (``source_shape``, where the module says it) and packing it must give
  exactly the type the kernels read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.runtime_support.signature import GraphSignature, TensorSpec


class WeightMismatchError(ValueError):
    """A weight that is missing, or whose dtype or shape is not what the module declares."""


@dataclass(frozen=True)
class DeclaredWeight:
    """One weight-table slot: ``spec`` is what the kernels read (``spec.name`` the slot's name);
    ``layout`` the packing of a packed copy (None: the weight itself); ``source_shape`` the shape
    of the weight a packed copy is made from, where the module records it."""

    spec: TensorSpec
    layout: Any = None
    source_shape: tuple[int, ...] | None = None

    @property
    def source(self) -> str:
        """The name of the weight the array comes from (in the weights file or the model)."""
        return self.layout.source if self.layout is not None else self.spec.name


def declared_weights(module: ModuleOp) -> list[DeclaredWeight]:
    """Every weight ``module`` reads, at whatever level it is: its ``tg.weight`` / ``buf.weight`` /
    ``buf.packed_weight`` ops, or at the llvm level the signature `convert-buffer-to-llvm`
    recorded (``tg.weight_types``; a module lowered before it was recorded declares no shapes)."""
    from tensor_graphs.dialects import buffer as buf
    from tensor_graphs.dialects import tensor as tg

    found: dict[tuple, DeclaredWeight] = {}
    for op in module.walk():
        if isinstance(op, tg.WeightOp | buf.WeightOp):
            spec = TensorSpec.bound(op.result.type, op.weight_name.data)  # type: ignore[arg-type]
            found.setdefault((spec.name, spec), DeclaredWeight(spec))
        elif isinstance(op, buf.PackedWeightOp):
            spec = TensorSpec.bound(op.result.type, op.slot_name)  # type: ignore[arg-type]
            found.setdefault((spec.name, spec, op.source), DeclaredWeight(spec, op.packing, op.source))
    if found or "tg.weight_table" not in module.attributes:
        return list(found.values())
    return signature_weights(GraphSignature.from_module(module))


def signature_weights(sig: GraphSignature) -> list[DeclaredWeight]:
    """The weights a compiled graph's signature declares (none for one that records no types)."""
    from tensor_graphs.dialects.packing import layout_from_slot_name

    return [DeclaredWeight(spec, layout_from_slot_name(spec.name) if spec.name in sig.packed else None)
            for spec in sig.weight_specs]


def check_weights(declared: Iterable[DeclaredWeight], weights: Mapping[str, Any], where: str, *,
                  dtypes: bool = True) -> None:
    """`WeightMismatchError` unless every declared weight is in ``weights`` (NumPy arrays, or
    anything with ``shape`` and ``dtype``) as declared; ``where`` names their origin in the
    message ("weights file 'model.safetensors'"). ``dtypes=False``: shapes only (a binding that
    converts the dtype itself)."""
    declared = list(declared)
    missing = sorted({d.source for d in declared if d.source not in weights})
    if missing:
        raise WeightMismatchError(f"{where} lacks {len(missing)} weight(s) the module reads: {', '.join(missing)}")
    for d in declared:
        array = weights[d.source]
        if not hasattr(array, "shape") or not hasattr(array, "dtype"):
            raise WeightMismatchError(f"weight '{d.source}' in {where} is a {type(array).__name__}, not an array")
        shape, dtype = tuple(int(n) for n in array.shape), _dtype_name(array.dtype)
        if d.layout is None:
            _check_plain(d, shape, dtype, where, dtypes)
        else:
            _check_packed(d, shape, dtype, where)


def _dtype_name(dtype: Any) -> str:
    """``float32`` for a NumPy or a torch dtype."""
    return str(dtype).removeprefix("torch.")


def _described(shape: Sequence[int], dtype: str) -> str:
    return f"{list(shape)} ({dtype})"


def _check_plain(d: DeclaredWeight, shape: tuple[int, ...], dtype: str, where: str, dtypes: bool) -> None:
    want = d.spec.dtype.name
    if shape != d.spec.shape or (dtypes and dtype != want):
        raise WeightMismatchError(
            f"weight '{d.source}' in {where} is {_described(shape, dtype)}, but the module declares "
            f"{_described(d.spec.shape, want)}")


def _check_packed(d: DeclaredWeight, shape: tuple[int, ...], dtype: str, where: str) -> None:
    """The weight a packed copy is made from: float32 (or, for bf16 panels, a bf16 model's
    weight: its bits as uint16), of its recorded source shape, and packing it gives what the
    kernels read."""
    what = f"weight '{d.source}' in {where} is {_described(shape, dtype)}"
    slot = f"the module's kernels read it packed as '{d.spec.name}' {_described(d.spec.shape, d.spec.dtype.name)}"
    if dtype != "float32" and not (dtype == "uint16" and getattr(d.layout, "bf16_source", False)):
        raise WeightMismatchError(f"{what}, but {slot}, made from a float32 weight")
    if d.source_shape is not None and shape != d.source_shape:
        raise WeightMismatchError(f"{what}, but {slot}, made from a weight of {list(d.source_shape)}")
    if (needs := d.layout.packs(shape)) is not None:
        raise WeightMismatchError(f"{what}, but {slot}, made from {needs}")
    packed = tuple(d.layout.shape(shape))
    if packed != d.spec.shape:
        raise WeightMismatchError(f"{what}: packing it gives {list(packed)}, but {slot}")
