"""The weights side file: ``model.mlir`` names ``model.safetensors`` beside it.

Real weights never go into the IR as dense literals: the module carries
``tg.weights_file = "model.safetensors"`` (relative to the .mlir file) and every ``tg.weight "name"``
is looked up there.
"""

from __future__ import annotations

from pathlib import Path

import json
import struct

import numpy as np
from safetensors.numpy import load_file, save_file
from xdsl.dialects.builtin import ModuleOp, StringAttr

from tensor_graphs.dialects.tensor import WeightOp

#: module attribute naming the safetensors file, relative to the .mlir file
WEIGHTS_FILE_ATTR = "tg.weights_file"


def weight_names(module: ModuleOp) -> list[str]:
    """Names of every ``tg.weight`` in ``module``, in order of first appearance."""
    names: dict[str, None] = {}
    for op in module.walk():
        if isinstance(op, WeightOp):
            names[op.weight_name.data] = None
    return list(names)


def save_weights(module: ModuleOp, weights: dict[str, np.ndarray], mlir_path: str | Path) -> Path:
    """Write ``weights`` to ``<stem>.safetensors`` beside ``mlir_path`` and record it on ``module``."""
    mlir_path = Path(mlir_path)
    st_path = mlir_path.with_suffix(".safetensors")
    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(st_path), metadata={"format": "tensor_graphs"})
    module.attributes[WEIGHTS_FILE_ATTR] = StringAttr(st_path.name)
    return st_path


#: safetensors dtype names -> NumPy dtypes (the ones a tensor_graphs module holds)
_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
              "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def map_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of the safetensors file ``path`` as a read-only NumPy view into ONE memory map
    of the file: nothing is read until used, nothing is copied (``safetensors.numpy.load_file``
    reads every tensor into memory). The format: an 8-byte little-endian header length, a JSON
    header ``{name: {dtype, shape, data_offsets: [begin, end]}}``, then the data."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than its header length)")
        (n,) = struct.unpack("<Q", head)
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a safetensors file (its header is not JSON: {e})") from None
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n) if path.stat().st_size > 8 + n else np.zeros(0, np.uint8)
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _ST_DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise ValueError(f"{path}: tensor '{name}' has dtype {info.get('dtype')}, which tensor_graphs does not read")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if end - begin != int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize or end > data.size:
            raise ValueError(f"{path}: tensor '{name}' ({info['dtype']} {list(shape)}) does not fit its data range [{begin}, {end})")
        out[name] = data[begin:end].view(dtype).reshape(shape)
    return out


def load_weights(module: ModuleOp, mlir_path: str | Path, mmap: bool = False) -> dict[str, np.ndarray]:
    """The weights named by ``module``'s ``tg.weights_file`` attribute (relative to ``mlir_path``);
    with ``mmap``, read-only views into a memory map of the file (`map_safetensors`)."""
    mlir_path = Path(mlir_path)
    attr = module.attributes.get(WEIGHTS_FILE_ATTR)
    names = weight_names(module)
    if attr is None:
        if names:
            raise ValueError(f"{mlir_path}: the module uses weights but has no '{WEIGHTS_FILE_ATTR}' attribute")
        return {}
    assert isinstance(attr, StringAttr)
    st_path = mlir_path.parent / attr.data
    if not st_path.is_file():
        raise FileNotFoundError(f"weights file '{st_path}' (named by {WEIGHTS_FILE_ATTR} in {mlir_path}) does not exist")
    weights = map_safetensors(st_path) if mmap else load_file(str(st_path))
    missing = [n for n in names if n not in weights]
    if missing:
        raise ValueError(f"weights file '{st_path}' lacks {len(missing)} weight(s) the module uses: {', '.join(missing)}")
    return weights
