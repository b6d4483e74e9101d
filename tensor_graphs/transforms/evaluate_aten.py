"""Evaluate one aten-dialect op with PyTorch on the CPU: the reference `constant-fold` uses for aten ops.

    evaluate_aten_op(op, [array, ...]) -> [array, ...]      # one array per result

The op's arguments are rebuilt from its operands (one array per operand, in operand order) and its
properties, in schema order, and ``torch.ops.aten.<name>.<overload>`` runs them: the fold computes
exactly what PyTorch would. This is how the mask-building ops that only ever see constants
(``arange``, ``full``, ``triu``, comparisons, ``cumsum``, ``index``, ...) disappear before
convert-aten-to-tensor, e.g. GPT-2's whole causal-mask computation becomes one ``i1`` constant.

Arrays are converted to the element type the IR gives the operand (``i1`` as bool); results come
back with the shape and element type of the op's results. Anything that cannot be evaluated
(``aten.unsupported``, a torch error, a result that disagrees with the IR) raises
``NotImplementedError`` with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from xdsl.dialects.builtin import DenseArrayBase, FloatAttr, IntegerAttr, StringAttr, TensorType
from xdsl.ir import Operation

from tensor_graphs.dialects.aten import AtenOp
from tensor_graphs import dtypes

#: c10::MemoryFormat value -> torch.memory_format name
_MEMORY_FORMATS = {0: "contiguous_format", 1: "preserve_format", 2: "channels_last", 3: "channels_last_3d"}


def _torch_op(target: str):
    import torch

    name, _, overload = target.removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def _property(op: AtenOp, name: str, kind: str):
    import torch

    attr = op.properties.get(name)
    if attr is None:
        return None
    if isinstance(attr, IntegerAttr):
        value = attr.value.data
        if kind.startswith("bool"):
            return bool(value)
        if name == "memory_format":
            return getattr(torch, _MEMORY_FORMATS[value])
        return value
    if isinstance(attr, FloatAttr):
        return attr.value.data
    if isinstance(attr, DenseArrayBase):
        return list(attr.get_values())
    if isinstance(attr, StringAttr):
        return getattr(torch, attr.data) if kind.startswith("dtype") else attr.data
    raise NotImplementedError(f"{op.name}: property '{name}' holds {attr}, which has no torch equivalent")


def _arguments(op: AtenOp, tensors: Iterator) -> tuple[list, dict]:
    """Positional and keyword arguments for the torch op, in schema order."""
    import torch

    schema = _torch_op(op.TARGET)._schema
    positional, keyword = [], {}
    for (name, kind), schema_arg in zip(op.ARGS, schema.arguments, strict=True):
        if kind == "drop":  # device/layout: the CPU and strided defaults
            if schema_arg.has_default_value() or schema_arg.kwarg_only:
                continue
            value = torch.device("cpu") if "Device" in str(schema_arg.type) else torch.strided
            positional.append(value)
            continue
        if kind == "tensor":
            value = next(tensors)
        elif kind == "tensor?":
            value = next(tensors) if getattr(op, name) is not None else None
        elif kind == "tensor[]":
            value = [next(tensors) for _ in getattr(op, name)]
        elif kind == "tensor?[]":
            present = iter([next(tensors) for _ in getattr(op, name)])
            none = set(_property(op, f"{name}_none", "int[]") or [])
            count = len(getattr(op, name)) + len(none)
            value = [None if i in none else next(present) for i in range(count)]
        else:
            value = _property(op, name, kind)
            if value is None and not kind.endswith("?") and schema_arg.has_default_value():
                continue  # let torch apply its default
        if schema_arg.kwarg_only:
            keyword[name] = value
        else:
            positional.append(value)
    return positional, keyword


def evaluate_aten_op(op: Operation, inputs: Sequence[np.ndarray | object]) -> list[np.ndarray]:
    """Run ``op`` (an aten op) with torch on ``inputs`` (one array per operand, or a torch tensor
    where the operand's element type has no NumPy equivalent: bf16); one array per result."""
    out = []
    for result, t in zip(op.results, evaluate_aten_tensors(op, inputs)):
        dtype = dtypes.of_element(result.type.element_type)  # type: ignore[attr-defined]
        t = t.to(dtype.torch)  # the result's dtype (bfloat16 rounds), then its values as NumPy holds them
        out.append(np.array((t.float() if dtype.numpy is None else t).numpy(), dtype=dtype.values, order="C"))
    return out


def evaluate_aten_tensors(op: Operation, inputs: Sequence[np.ndarray | object]) -> list:
    """Run ``op`` (an aten op) with torch on ``inputs`` (as `evaluate_aten_op`'s); one torch
    tensor per result, of the shape the IR gives it (checked), in whatever dtype torch computed."""
    import torch

    if not isinstance(op, AtenOp):
        raise NotImplementedError(f"{op.name}: not an evaluable aten op")
    if len(inputs) != len(op.operands):
        raise NotImplementedError(f"{op.name}: {len(op.operands)} operands but {len(inputs)} arrays were given")
    tensors = []
    for value, array in zip(op.operands, inputs):
        if isinstance(array, torch.Tensor):
            tensors.append(array)
            continue
        row = dtypes.of_element(value.type.element_type)  # type: ignore[attr-defined]
        dtype = row.values
        array = np.asarray(array)
        array = (array != 0) if dtype == np.bool_ and array.dtype != np.bool_ else array.astype(dtype, copy=False)
        tensor = torch.from_numpy(np.require(array, requirements="C"))  # keeps rank 0 (ascontiguousarray would not)
        tensors.append(tensor.to(row.torch) if row.numpy is None else tensor)  # bfloat16 from its float32 values
    try:
        args, kwargs = _arguments(op, iter(tensors))
        with torch.no_grad():
            out = _torch_op(op.TARGET)(*args, **kwargs)
    except (RuntimeError, TypeError, ValueError, IndexError) as e:
        raise NotImplementedError(f"{op.name}: torch could not evaluate it: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(outs) != len(op.results):
        raise NotImplementedError(f"{op.name}: torch returned {len(outs)} tensors for {len(op.results)} results")
    for result, t in zip(op.results, outs):
        type_ = result.type
        assert isinstance(type_, TensorType)
        if tuple(t.shape) != tuple(type_.get_shape()):
            raise NotImplementedError(f"{op.name}: torch gives shape {list(t.shape)}, the IR says {list(type_.get_shape())}")
    return [t.detach().cpu() for t in outs]
