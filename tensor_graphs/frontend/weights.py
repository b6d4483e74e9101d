"""The weights side file: ``model.mlir`` names ``model.safetensors`` beside it.

Real weights never go into the IR as dense literals: the module carries
``tg.weights_file = "model.safetensors"`` (a file in the .mlir file's own directory) and every
``tg.weight "name"`` is looked up there.

A pair from someone else is data: the file is checked as the safetensors library checks it
(`map_safetensors`) and every weight against the shape and dtype the module declares
(`load_weights`) before any code runs, and the module can name no file outside its directory
(`weights_path`).
"""

from __future__ import annotations

from pathlib import Path

import json
import math
import struct

import numpy as np
from safetensors import TensorSpec, serialize_file
from xdsl.dialects.builtin import ModuleOp, StringAttr

from tensor_graphs import dtypes
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
    arrays = {k: np.ascontiguousarray(v, dtype=np.asarray(v).dtype.newbyteorder("<")) for k, v in weights.items()}
    # a uint16 array holds bfloat16 bits (`dtypes`: bfloat16's storage), saved as BF16
    specs = {k: TensorSpec(dtype="bfloat16" if a.dtype == np.uint16 else a.dtype.name, shape=a.shape,
                           data_ptr=a.ctypes.data, data_len=a.nbytes) for k, a in arrays.items()}
    serialize_file(specs, str(st_path), metadata={"format": "tensor_graphs"})
    module.attributes[WEIGHTS_FILE_ATTR] = StringAttr(st_path.name)
    return st_path


#: The largest JSON header read (as the safetensors library: 100 MB)
MAX_HEADER_BYTES = 100_000_000


class WeightsFileError(ValueError):
    """A weights file that is not a well-formed safetensors file, or that a module may not name."""


def _header(path: Path) -> tuple[dict, int]:
    """The JSON header of the safetensors file ``path`` and the size of its data part, checked
    as the safetensors library checks it (a size cap, an object of entries)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise WeightsFileError(f"{path}: not a safetensors file (shorter than its header length, 8 bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES:
            raise WeightsFileError(f"{path}: not a safetensors file (a header of {n} bytes, over the {MAX_HEADER_BYTES} allowed)")
        if n > size - 8:
            raise WeightsFileError(f"{path}: not a safetensors file (a header of {n} bytes in a file of {size}: truncated?)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise WeightsFileError(f"{path}: not a safetensors file (its header is not JSON: {' '.join(str(e).split())})") from None
    if not isinstance(header, dict):
        raise WeightsFileError(f"{path}: not a safetensors file (its header is a JSON {type(header).__name__}, not an object)")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise WeightsFileError(f"{path}: its __metadata__ is not an object of strings")
    return header, size - 8 - n


def _entry(path: Path, name: str, info) -> tuple[np.dtype, tuple[int, ...], int, int]:
    """One tensor's (dtype, shape, begin, end), each field of the form the format requires."""
    def bad(what: str) -> WeightsFileError:
        return WeightsFileError(f"{path}: tensor '{name}' {what}")

    if not isinstance(info, dict):
        raise bad(f"is described by a JSON {type(info).__name__}, not an object with dtype, shape and data_offsets")
    if missing := [k for k in ("dtype", "shape", "data_offsets") if k not in info]:
        raise bad(f"has no {', '.join(missing)}")
    try:
        dtype = dtypes.of_safetensors(info["dtype"]).storage  # bfloat16: its bits, as uint16
    except (dtypes.DTypeError, TypeError):
        names = ", ".join(d.safetensors for d in dtypes.DTYPES)
        raise bad(f"has dtype {info['dtype']!r}, which tensor_graphs does not read ({names})") from None
    shape, offsets = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad(f"has shape {shape!r}: expected a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        raise bad(f"has data_offsets {offsets!r}: expected [begin, end], two integers")
    return np.dtype(dtype), tuple(shape), offsets[0], offsets[1]


def map_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of the safetensors file ``path`` as a read-only NumPy view into ONE memory map
    of the file: nothing is read until used, nothing is copied (``safetensors.numpy.load_file``
    reads every tensor into memory). The format: an 8-byte little-endian header length, a JSON
    header ``{name: {dtype, shape, data_offsets: [begin, end]}}``, then the data. Checked as the
    safetensors library checks it before anything is mapped (`WeightsFileError` naming what is
    wrong): the header at most `MAX_HEADER_BYTES`, every entry of the schema, every tensor's
    bytes exactly its shape times its dtype's size, the tensors one after another from the data's
    first byte to its last, never overlapping, nothing past the end of the file."""
    path = Path(path)
    header, data_size = _header(path)
    entries = sorted(((*_entry(path, name, info), name) for name, info in header.items() if name != "__metadata__"),
                     key=lambda e: (e[2], e[3]))
    expected_begin = 0
    for dtype, shape, begin, end, name in entries:
        nbytes = math.prod(shape) * dtype.itemsize
        where = f"{path}: tensor '{name}' ({dtype.name} {list(shape)}, {nbytes} bytes) at data_offsets [{begin}, {end})"
        problem = ("has a negative offset" if begin < 0 else "ends before it begins" if end < begin
                   else "overlaps the tensor before it" if begin < expected_begin
                   else "leaves a gap after the tensor before it" if begin > expected_begin
                   else f"holds {end - begin} bytes, not {nbytes}" if end - begin != nbytes else None)
        if problem is not None:
            raise WeightsFileError(f"{where}: {problem}")
        expected_begin = end
    if expected_begin != data_size:
        raise WeightsFileError(f"{path}: the tensors cover {expected_begin} bytes of its {data_size} data bytes (truncated, or bytes nothing describes)")
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=path.stat().st_size - data_size) if data_size else np.zeros(0, np.uint8)
    return {name: data[begin:end].view(dtype).reshape(shape) for dtype, shape, begin, end, name in entries}


def weights_path(module: ModuleOp, mlir_path: str | Path) -> Path | None:
    """The weights file ``module`` names (``tg.weights_file``), beside ``mlir_path``; None when it
    names none. The name must be a file of the module's own directory (no directory part, not
    absolute, no ``..``, no link leading out of it): a module from someone else must not map the
    user's other files as its weights. Another file is the caller's to name (``tg.load(path,
    weights=...)``, ``tg-run --weights``)."""
    mlir_path = Path(mlir_path)
    attr = module.attributes.get(WEIGHTS_FILE_ATTR)
    if attr is None:
        return None
    if not isinstance(attr, StringAttr):
        raise WeightsFileError(f"{mlir_path}: {WEIGHTS_FILE_ATTR} must be a string naming the weights file, got {attr}")
    name = attr.data
    if not name or name in (".", "..") or Path(name).name != name or "\\" in name or "\0" in name:
        raise WeightsFileError(
            f"{mlir_path}: {WEIGHTS_FILE_ATTR} = {name!r} is not a file name in the module's own directory: tensor_graphs "
            "reads only that (pass the weights explicitly to use another file: tg.load(path, weights=...), tg-run --weights)")
    path = mlir_path.parent / name
    if path.exists() and path.resolve().parent != mlir_path.parent.resolve():
        raise WeightsFileError(
            f"{mlir_path}: the weights file {name!r} is a link to {path.resolve()}, outside the module's directory "
            "(pass the weights explicitly to use it: tg.load(path, weights=...), tg-run --weights)")
    return path


def load_weights(module: ModuleOp, mlir_path: str | Path, mmap: bool = False, path: str | Path | None = None) -> dict[str, np.ndarray]:
    """The weights of ``module`` from ``path``, else from the file its ``tg.weights_file`` names
    beside ``mlir_path`` (`weights_path`), checked against what the module declares
    (`bound_weights.check_weights`: every weight it reads, of exactly its dtype and shape) before
    anything runs; with ``mmap``, read-only views into a memory map of the file
    (`map_safetensors`), else copies."""
    from tensor_graphs.runtime_support.bound_weights import check_weights, declared_weights

    mlir_path = Path(mlir_path)
    declared = declared_weights(module)
    st_path = Path(path) if path is not None else weights_path(module, mlir_path)
    if st_path is None:
        if declared:
            raise WeightsFileError(f"{mlir_path}: the module uses weights but has no '{WEIGHTS_FILE_ATTR}' attribute")
        return {}
    if not st_path.is_file():
        named = "" if path is not None else f" (named by {WEIGHTS_FILE_ATTR} in {mlir_path})"
        raise FileNotFoundError(f"weights file '{st_path}'{named} does not exist")
    weights = map_safetensors(st_path)
    check_weights(declared, weights, f"weights file '{st_path}'")
    return weights if mmap else {k: np.array(v) for k, v in weights.items()}
