"""The one dtype table of tensor_graphs: every dtype a model's tensors may have, with what each
level calls it.

A `DType` row names a dtype as torch does (``"float32"``) and says how every other layer holds
it: the xDSL element type of the IR, the NumPy dtype of its values (None for bfloat16, which
NumPy has no type for) and of its bytes (``storage``: bfloat16 as uint16 bits, bool as bool),
the safetensors name, the Triton type, its size, its kind, and the type arithmetic on it runs in
(``compute``: float16 and bfloat16 compute in float32 and round, as torch's CPU kernels do;
uint8 in int16 and wraps back to 8 bits, which is uint8's modular arithmetic; `widen-dtypes`).
Lookups go through `of_name`, `of_element`, `of_numpy`, `of_torch`, `of_safetensors`; nothing
else in the project keeps a mapping of its own.

=========  ===========  =========  =========  ============  =============  =======
name       element      numpy      storage    safetensors   triton         compute
=========  ===========  =========  =========  ============  =============  =======
float64    f64          float64    float64    F64           tl.float64     float64
float32    f32          float32    float32    F32           tl.float32     float32
float16    f16          float16    float16    F16           tl.float16     float32
bfloat16   bf16         --         uint16     BF16          tl.bfloat16    float32
int64      i64          int64      int64      I64           tl.int64       int64
int32      i32          int32      int32      I32           tl.int32       int32
int16      i16          int16      int16      I16           tl.int16       int16
int8       i8           int8       int8       I8            tl.int8        int8
uint8      ui8          uint8      uint8      U8            tl.uint8       int16
bool       i1           bool       bool       BOOL          tl.int1        bool
=========  ===========  =========  =========  ============  =============  =======
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type, IntegerType, Signedness
from xdsl.ir import Attribute


@dataclass(frozen=True)
class DType:
    """One dtype (module doc)."""

    #: torch's name: ``"float32"`` (``torch.float32``)
    name: str
    #: the xDSL element type of tensors, memrefs and scalar bodies
    element: Attribute
    #: NumPy dtype of the values; None where NumPy has none (bfloat16)
    numpy: np.dtype | None
    #: NumPy dtype of the bytes (bfloat16: uint16 bits)
    storage: np.dtype
    #: safetensors' name of the dtype
    safetensors: str
    #: Triton's type
    triton: str
    #: "float", "int" (signed), "uint" or "bool"
    kind: str
    #: the dtype arithmetic on values of this dtype runs in (float16, bfloat16: float32)
    compute: str

    @property
    def itemsize(self) -> int:
        return self.storage.itemsize

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        """Integer, signed or not (not bool)."""
        return self.kind in ("int", "uint")

    @property
    def computes_wider(self) -> bool:
        """float16, bfloat16 (computed in float32) and uint8 (in int16): `widen-dtypes`."""
        return self.compute != self.name

    @property
    def values(self) -> np.dtype:
        """NumPy dtype the values are held in by the evaluator and constant folding (bfloat16:
        float32, rounded to bfloat16 by `round_values`)."""
        return self.numpy if self.numpy is not None else np.dtype(np.float32)

    @property
    def torch(self) -> Any:
        """``torch.<name>`` (torch imported on first use)."""
        import torch

        return getattr(torch, self.name)

    def __str__(self) -> str:
        return self.name


def _row(name: str, element: Attribute, numpy: str | None, storage: str, st: str, triton: str, kind: str, compute: str | None = None) -> DType:
    return DType(name, element, np.dtype(numpy) if numpy else None, np.dtype(storage), st, triton, kind, compute or name)


#: every dtype, float64 first (torch's order of float precision, then integers, then bool)
DTYPES: tuple[DType, ...] = (
    _row("float64", Float64Type(), "float64", "float64", "F64", "tl.float64", "float"),
    _row("float32", Float32Type(), "float32", "float32", "F32", "tl.float32", "float"),
    _row("float16", Float16Type(), "float16", "float16", "F16", "tl.float16", "float", "float32"),
    _row("bfloat16", BFloat16Type(), None, "uint16", "BF16", "tl.bfloat16", "float", "float32"),
    _row("int64", IntegerType(64), "int64", "int64", "I64", "tl.int64", "int"),
    _row("int32", IntegerType(32), "int32", "int32", "I32", "tl.int32", "int"),
    _row("int16", IntegerType(16), "int16", "int16", "I16", "tl.int16", "int"),
    _row("int8", IntegerType(8), "int8", "int8", "I8", "tl.int8", "int"),
    _row("uint8", IntegerType(8, Signedness.UNSIGNED), "uint8", "uint8", "U8", "tl.uint8", "uint", "int16"),
    _row("bool", IntegerType(1), "bool", "bool", "BOOL", "tl.int1", "bool"),
)

_BY_NAME = {d.name: d for d in DTYPES}
_BY_ELEMENT = {d.element: d for d in DTYPES}
_BY_NUMPY = {d.numpy: d for d in DTYPES if d.numpy is not None}
_BY_SAFETENSORS = {d.safetensors: d for d in DTYPES}
_BY_STORAGE = {d.storage: d for d in DTYPES}
assert len(_BY_STORAGE) == len(DTYPES), "each dtype's bytes have a NumPy dtype of their own"


class DTypeError(TypeError):
    """A dtype tensor_graphs does not hold (complex, float8, ...); the message names it."""


def _unsupported(what: object) -> DTypeError:
    names = ", ".join(d.name for d in DTYPES)
    return DTypeError(f"dtype {what} is not one tensor_graphs holds ({names})")


def of_name(name: str) -> DType:
    """The row of torch's name (``"float32"``, also ``"torch.float32"``)."""
    try:
        return _BY_NAME[str(name).removeprefix("torch.")]
    except KeyError:
        raise _unsupported(name) from None


def of_element(element: Attribute) -> DType:
    """The row of an xDSL element type."""
    try:
        return _BY_ELEMENT[element]
    except (KeyError, TypeError):
        raise _unsupported(element) from None


def of_numpy(dtype: Any) -> DType:
    """The row of a NumPy dtype holding values (uint16 is uint16: bfloat16 bits are `of_name`'s)."""
    try:
        return _BY_NUMPY[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise _unsupported(dtype) from None


def of_storage(dtype: Any) -> DType:
    """The row whose bytes NumPy ``dtype`` holds (uint16: bfloat16's bits)."""
    try:
        return _BY_STORAGE[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise _unsupported(dtype) from None


def of_torch(dtype: Any) -> DType:
    """The row of a torch dtype (``torch.float32``)."""
    return of_name(str(dtype))


def of_safetensors(name: str) -> DType:
    """The row of a safetensors dtype name (``"F32"``)."""
    try:
        return _BY_SAFETENSORS[name]
    except KeyError:
        raise _unsupported(name) from None


def bf16_bits(values: Any) -> np.ndarray:
    """The bfloat16 bits (uint16) nearest to float32 ``values``, ties to even, NaN kept quiet (as
    torch's ``round_to_nearest_even``)."""
    bits = np.array(values, dtype=np.float32, order="C").view(np.uint32)  # (0-d stays 0-d)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    return np.where(nan, np.uint32(0x7FC0), rounded).astype(np.uint16)


def bf16_values(bits: Any) -> np.ndarray:
    """float32 values of bfloat16 ``bits`` (uint16)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_values(values: Any, dtype: DType) -> np.ndarray:
    """``values`` as a tensor of ``dtype`` holds them, in ``dtype.values`` (torch's conversion:
    floats to integers truncate, bfloat16 rounds to nearest even)."""
    array = np.asarray(values)
    if dtype.name == "bfloat16":
        return bf16_values(bf16_bits(array.astype(np.float32)))
    with np.errstate(invalid="ignore", over="ignore"):
        return array.astype(dtype.values)


def to_storage(values: Any, dtype: DType) -> np.ndarray:
    """The bytes of a ``dtype`` tensor holding ``values``, as a ``dtype.storage`` array."""
    if dtype.name == "bfloat16":
        return bf16_bits(np.asarray(values, dtype=np.float32))
    return np.asarray(values).astype(dtype.storage)


def from_storage(raw: Any, dtype: DType) -> np.ndarray:
    """The values of a ``dtype`` tensor whose bytes ``raw`` holds (a ``dtype.storage`` array)."""
    if dtype.name == "bfloat16":
        return bf16_values(raw)
    return np.asarray(raw).view(dtype.storage)


def holds(dtype: Any) -> bool:
    """Whether ``dtype`` (a torch dtype or a name) is one of the table's."""
    return str(dtype).removeprefix("torch.") in _BY_NAME


def holds_element(element: Attribute | None) -> bool:
    """Whether ``element`` is the element type of one of the table's dtypes."""
    try:
        return element in _BY_ELEMENT
    except TypeError:
        return False


#: significand bits (floats, with the implicit one) and value bits (integers, sign apart)
_PRECISION = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8, "int64": 63, "int32": 31,
              "int16": 15, "int8": 7, "uint8": 8, "bool": 1}
_EXPONENT = {"float64": 11, "float32": 8, "float16": 5, "bfloat16": 8}


def widens_exactly(source: Attribute, target: Attribute) -> bool:
    """Whether converting every value of element type ``source`` to ``target`` is exact (so that
    converting back gives the value again): bfloat16 -> float32, int8 -> int32, int16 -> float32."""
    try:
        a, b = of_element(source), of_element(target)
    except DTypeError:
        return False
    if a == b:
        return True
    if b.kind == "bool" or (a.is_float and not b.is_float):
        return False
    if a.is_float:
        return _PRECISION[a.name] <= _PRECISION[b.name] and _EXPONENT[a.name] <= _EXPONENT[b.name]
    if b.is_float:
        return _PRECISION[a.name] <= _PRECISION[b.name]
    if a.kind == "uint" and b.kind == "int" or a.kind == b.kind or a.kind == "bool":
        return _PRECISION[a.name] <= _PRECISION[b.name]
    return False


@functools.cache
def promote(a: str, b: str) -> DType:
    """torch's promotion of two tensor dtypes of equal standing (``torch.promote_types``)."""
    import torch

    return of_torch(torch.promote_types(of_name(a).torch, of_name(b).torch))
