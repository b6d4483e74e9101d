"""Eval-mode batch norm folded into the convolution before it, while importing.

``batch_norm(conv(x, w, b), gamma, beta, mean, var, eps)`` with every one of those a weight of
the model is ``conv(x, w', b')`` with

    s  = gamma / sqrt(var + eps)           (per output channel)
    w' = w * s[:, None, ...]
    b' = (b - mean) * s + beta             (b = 0 when the conv has none)

computed once here, in float64, and bound as two new weights (a bfloat16 model's rounded to
bfloat16: its convolution stays one of bf16 operands, the error one rounding of each weight, the
same order as eager's rounding of the convolution's output before its batch norm) named after the conv's
(``<conv weight>.bn_folded``, ``<conv prefix>.bias.bn_folded``): the graph runs one GEMM with a
bias epilogue where PyTorch runs a convolution and a normalisation. ``tg.export`` writes the
folded weights. A batch norm that does not follow a convolution (or whose convolution has other
users) is imported as it is; ``convert-aten-to-tensor`` lowers it to a per-channel scale and
shift.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from xdsl.dialects.builtin import BFloat16Type
from xdsl.ir import SSAValue

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.packing import from_bf16, to_bf16
from tensor_graphs.dialects.tensor import WeightOp

if TYPE_CHECKING:
    from tensor_graphs.frontend.importer import GraphImporter

#: the convolutions a batch norm folds into
_CONVOLUTIONS = (torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default)
#: suffix of the folded weights' names
SUFFIX = ".bn_folded"


def _weight(importer: GraphImporter, value: object, bf16: bool = False) -> tuple[str, np.ndarray] | None:
    """(name, array) when the FX argument ``value`` is a float32 weight of the model (with
    ``bf16``, a bfloat16 one: its values as float32, exactly)."""
    if not isinstance(value, torch.fx.Node):
        return None
    v = importer.values.get(value)
    if not isinstance(v, SSAValue) or not isinstance(v.owner, WeightOp):
        return None
    name = v.owner.weight_name.data
    array = importer.weights.get(name)
    if array is None:
        return None
    if bf16:  # a bfloat16 weight is stored as its bits (`importer`)
        return (name, from_bf16(array)) if array.dtype == np.uint16 else None
    return (name, array) if array.dtype == np.float32 else None


def _stored(array: np.ndarray, bf16: bool) -> tuple[np.ndarray, torch.Tensor]:
    """A folded float64 ``array`` as the model stores it (float32, or a bf16 model's bits rounded
    to nearest even) and as a torch tensor of its dtype."""
    if not bf16:
        stored = array.astype(np.float32)
        return stored, torch.from_numpy(stored)
    bits = to_bf16(array.astype(np.float32))
    return bits, torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


def fold_into_convolution(importer: GraphImporter, node: torch.fx.Node, args: dict[str, object]) -> SSAValue | None:
    """The folded convolution's result, or None when ``node`` (a batch norm with schema
    arguments ``args``) cannot fold: no convolution before it, one with other users, training
    mode, or statistics and affine parameters that are not weights."""
    conv = args["input"]
    if not isinstance(conv, torch.fx.Node) or conv.target not in _CONVOLUTIONS or len(conv.users) != 1 or args.get("training"):
        return None
    conv_value = importer.values.get(conv)
    if not isinstance(conv_value, SSAValue) or not isinstance(conv_value.owner, aten.Conv1dOp | aten.Conv2dOp):
        return None
    conv_op = conv_value.owner
    bf16 = isinstance(conv_op.result.type.element_type, BFloat16Type)  # a bf16 model: its weights stay bf16
    w = _weight(importer, conv.args[1], bf16)
    b = _weight(importer, conv.args[2], bf16) if len(conv.args) > 2 and conv.args[2] is not None else None
    stats = [_weight(importer, args[k], bf16) for k in ("running_mean", "running_var")]
    affine = [_weight(importer, args[k], bf16) if args[k] is not None else None for k in ("weight", "bias")]
    if w is None or (len(conv.args) > 2 and conv.args[2] is not None and b is None) or None in stats:
        return None
    if any(args[k] is not None and a is None for k, a in zip(("weight", "bias"), affine)):
        return None
    (w_name, w_array), (_, mean), (_, var) = w, stats[0], stats[1]  # type: ignore[misc]
    cout = w_array.shape[0]
    gamma = affine[0][1].astype(np.float64) if affine[0] else np.ones(cout)
    beta = affine[1][1].astype(np.float64) if affine[1] else np.zeros(cout)
    bias = b[1].astype(np.float64) if b else np.zeros(cout)
    if not (mean.shape == var.shape == gamma.shape == beta.shape == (cout,)):
        return None
    scale = gamma / np.sqrt(var.astype(np.float64) + float(args["eps"]))  # type: ignore[arg-type]
    new_w = w_array.astype(np.float64) * scale.reshape((cout,) + (1,) * (w_array.ndim - 1))
    new_b = (bias - mean.astype(np.float64)) * scale + beta
    prefix = b[0] if b else w_name.rsplit(".", 1)[0] + ".bias"
    from tensor_graphs.frontend.importer import tensor_type

    values = []
    for name, array in ((w_name + SUFFIX, new_w), (prefix + SUFFIX, new_b)):
        stored, tensor = _stored(array, bf16)
        importer.weights[name] = stored
        op = importer.append(WeightOp(name, tensor_type(tensor, f"weight '{name}'")))
        values.append(op.results[0])
    props = {k: v for k, v in conv_op.properties.items() if k != "operandSegmentSizes"}
    folded = type(conv_op)(conv_op.input, values[0], values[1], result_type=conv_op.result.type, **{
        k: (tuple(v.get_values()) if hasattr(v, "get_values") else v.value.data) for k, v in props.items()
    })
    importer.append(folded)
    folded.result.name_hint = conv.name
    conv_op.detach()
    conv_op.erase()
    importer.values[conv] = folded.result
    return folded.result
