"""What a compiled graph returns: its flat tensor outputs back in the structure the model returns.

A model may return one tensor, a tuple or a list of them, a named tuple (``torch.max(x, dim)``'s
``values, indices``, ``torch.sort``, ``torch.var_mean``), a dict, nested combinations, and Python
numbers or None among them. torch.export records that structure as a pytree spec (its
``out_spec``) over the flat list of leaves; the graph computes the tensor leaves, and
:class:`OutputStructure` puts every leaf back where the model put it: the tensors the graph
returned in order, the other leaves as torch.export recorded them (a Python number stays that
number).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: a leaf: the index of the graph output holding it, or ``("constant", value)``
Leaf = int | tuple[str, Any]


@dataclass(frozen=True)
class OutputStructure:
    """The model's output structure: a pytree spec (``torch.utils._pytree.TreeSpec``) and, per
    leaf, which graph output it is or the constant it was."""

    spec: Any
    leaves: tuple[Leaf, ...]
    #: (graph output, model input) pairs: the model writes that output into that input in place
    #: (``x.copy_(...)``, a batch norm's running statistics): the call writes it back after the run
    input_writes: tuple[tuple[int, int], ...] = ()

    @property
    def plain(self) -> bool:
        """Whether the graph's own return already is the structure: one tensor, or a tuple of
        two or more tensors (a graph returns ``outs[0]`` for one, a tuple for several)."""
        tensors = all(isinstance(leaf, int) for leaf in self.leaves) and not self.input_writes
        if self.spec.is_leaf():
            return tensors
        return tensors and self.spec.type is tuple and len(self.leaves) > 1 and all(
            self.spec.child(i).is_leaf() for i in range(self.spec.num_children))

    def build(self, outputs: Sequence[Any]) -> Any:
        """The model's structure of ``outputs`` (the graph's tensor outputs, in order)."""
        values = iter([outputs[leaf] if isinstance(leaf, int) else leaf[1] for leaf in self.leaves])
        return _unflatten(values, self.spec)


def _unflatten(values: Any, spec: Any) -> Any:
    """``tree_unflatten``, but a ``torch.Size`` stays one (pytree rebuilds it as a tuple; eager
    returns ``torch.broadcast_shapes``'s Size)."""
    import torch
    from torch.utils._pytree import SUPPORTED_NODES

    if spec.is_leaf():
        return next(values)
    children = [_unflatten(values, spec.child(i)) for i in range(spec.num_children)]
    if spec.type is torch.Size:
        return torch.Size(children)
    return SUPPORTED_NODES[spec.type].unflatten_fn(children, spec.context)


def write_back(structure: OutputStructure | None, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
    """Each input the model writes in place gets its new value (``copy_`` for a torch tensor,
    ``np.copyto`` for a NumPy array), as eager leaves it after the call."""
    if structure is None:
        return
    for out, i in structure.input_writes:
        target, value = inputs[i], outputs[out]
        if hasattr(target, "copy_"):
            import torch

            target.copy_(torch.as_tensor(value))
        else:
            import numpy as np

            np.copyto(target, np.asarray(value))


def returned(outputs: Sequence[Any], structure: OutputStructure | None) -> Any:
    """What a call returns: ``outputs`` in ``structure``, or, without one, the one output or a
    tuple of them."""
    if structure is not None and not structure.plain:
        return structure.build(outputs)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
