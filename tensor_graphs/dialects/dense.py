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
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, TensorType, i1
from xdsl.ir import Attribute

from tensor_graphs import dtypes


def element_type_of(dtype: np.dtype | type) -> Attribute:
    """The element type that stores NumPy ``dtype`` (bool -> ``i1``; the table: `dtypes`)."""
    try:
        return dtypes.of_numpy(dtype).element
    except dtypes.DTypeError:
        raise TypeError(f"NumPy dtype {np.dtype(dtype)} has no tensor_graphs element type") from None


def numpy_dtype_of(element_type: Attribute) -> np.dtype:
    """The NumPy dtype ``element_type``'s values are held in (``i1`` -> bool, bf16 -> float32
    rounded to bf16: `dtypes.DType.values`)."""
    try:
        return dtypes.of_element(element_type).values
    except dtypes.DTypeError:
        raise TypeError(f"element type {element_type} has no NumPy equivalent") from None


def _storage(array: np.ndarray, element_type: Attribute) -> bytes:
    if element_type == i1:
        return (-np.asarray(array, dtype=bool).astype(np.int8)).tobytes()  # true is -1 (0xFF)
    dtype = dtypes.of_element(element_type)
    return np.ascontiguousarray(dtypes.to_storage(dtypes.round_values(array, dtype), dtype)).astype(dtype.storage.newbyteorder("<")).tobytes()


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
    dtype = dtypes.of_element(element_type)
    raw = attr.data.data
    if dtype.kind == "bool":
        flat = np.frombuffer(raw, dtype=np.int8) != 0
    else:
        flat = dtypes.from_storage(np.frombuffer(raw, dtype=dtype.storage.newbyteorder("<")).astype(dtype.storage), dtype)
    if flat.size == 1 and int(np.prod(shape)) != 1:
        return np.broadcast_to(flat.reshape(()), shape).copy()
    return flat.reshape(shape).copy()
