"""NumPy arrays <-> ``dense<...>`` attributes (the payload of ``tg.constant``), fast and for every dtype.

    attr = dense_from_numpy(np.tril(np.ones((4, 4), bool)))   # dense<...> : tensor<4x4xi1>
    array = numpy_from_dense(attr)                             # bool array again

The bytes go straight into the attribute (``DenseIntOrFPElementsAttr(type, BytesAttr(...))``);
building it from a Python list (``from_list``) costs ~1 s per million elements, this ~20 ms.

Storage follows xDSL's own layout, so that an attribute built here equals the one the parser
makes from the same text: little-endian, one element after the other, ``i1`` one byte per
element holding ``-1`` (0xFF) for true and 0 for false (xDSL normalises signless ``i1`` 1 to -1).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    Signedness,
    TensorType,
    f16,
    f32,
    f64,
    i1,
    i8,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute

#: NumPy dtype -> element type
_ELEMENT_TYPES: dict[np.dtype, Attribute] = {
    np.dtype(np.float32): f32,
    np.dtype(np.float64): f64,
    np.dtype(np.float16): f16,
    np.dtype(np.int64): i64,
    np.dtype(np.int32): i32,
    np.dtype(np.int16): i16,
    np.dtype(np.int8): i8,
    np.dtype(np.uint8): IntegerType(8, Signedness.UNSIGNED),
    np.dtype(np.bool_): i1,
}


def element_type_of(dtype: np.dtype | type) -> Attribute:
    """The element type that stores NumPy ``dtype`` (bool -> ``i1``)."""
    dtype = np.dtype(dtype)
    try:
        return _ELEMENT_TYPES[dtype]
    except KeyError:
        raise TypeError(f"NumPy dtype {dtype} has no tensor_graphs element type") from None


def numpy_dtype_of(element_type: Attribute) -> np.dtype:
    """The NumPy dtype of ``element_type``'s values (``i1`` -> bool; bf16 is not supported)."""
    if isinstance(element_type, Float32Type):
        return np.dtype(np.float32)
    if isinstance(element_type, Float64Type):
        return np.dtype(np.float64)
    if isinstance(element_type, Float16Type):
        return np.dtype(np.float16)
    if isinstance(element_type, IntegerType):
        width = element_type.width.data
        if width == 1:
            return np.dtype(np.bool_)
        if width in (8, 16, 32, 64):
            unsigned = element_type.signedness.data == Signedness.UNSIGNED
            return np.dtype(f"{'u' if unsigned else 'i'}{width // 8}")
    if isinstance(element_type, BFloat16Type):
        raise TypeError("bf16 constants are not supported; convert the model with model.float()")
    raise TypeError(f"element type {element_type} has no NumPy equivalent")


def _storage(array: np.ndarray, element_type: Attribute) -> bytes:
    if element_type == i1:
        return (-np.asarray(array, dtype=bool).astype(np.int8)).tobytes()  # true is -1 (0xFF)
    dtype = numpy_dtype_of(element_type).newbyteorder("<")
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def dense_from_numpy(array: np.ndarray, element_type: Attribute | None = None) -> DenseIntOrFPElementsAttr:
    """``dense<...> : tensor<shape x element_type>`` holding ``array`` (cast to ``element_type``,
    default: the element type of the array's dtype)."""
    array = np.asarray(array)
    if element_type is None:
        element_type = element_type_of(array.dtype)
    type = TensorType(element_type, array.shape)
    return DenseIntOrFPElementsAttr(type, BytesAttr(_storage(array, element_type)))


def numpy_from_dense(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The elements of ``attr`` as a new array of its shape (splats expanded; ``i1`` as bool)."""
    shape = tuple(attr.get_shape())
    element_type = attr.get_element_type()
    dtype = numpy_dtype_of(element_type)
    raw = attr.data.data
    if dtype == np.bool_:
        flat = np.frombuffer(raw, dtype=np.int8) != 0
    else:
        flat = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)
    if flat.size == 1 and int(np.prod(shape)) != 1:
        return np.broadcast_to(flat.reshape(()), shape).copy()
    return flat.reshape(shape).copy()
