"""``torch.compile(model, backend="tensor_graphs")``: each graph TorchDynamo captures is compiled
by `tensor_graphs.compile`; a graph tensor_graphs cannot compile runs eagerly, with one warning
line naming why (the unsupported ops, or the reason).

Registered through the ``torch_dynamo_backends`` entry point (``pyproject.toml``), so installing
the package is enough; ``torch.compile(model, backend=tensor_graphs_backend)`` works too.

    model = torch.compile(model, backend="tensor_graphs")
    y = model(x)          # the first call compiles; a graph break gives several graphs

Dynamo's graphs take the model's parameters as inputs (it inlines ``nn.Module`` calls), so the
compiled code reads them where they are rather than packing copies; dynamic shapes (symbolic
sizes among the inputs) fall back to eager.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch


class EagerFallbackWarning(UserWarning):
    """A captured graph runs eagerly: tensor_graphs could not compile it (the message says why)."""


def tensor_graphs_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> Callable:
    """The backend: a callable computing ``gm`` with tensor_graphs, or ``gm.forward`` itself."""
    import tensor_graphs as tg
    from tensor_graphs.frontend.unsupported import UnsupportedOpsError

    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        return _eager(gm, "the graph takes symbolic sizes (dynamic shapes); tensor_graphs compiles static shapes")
    try:
        fn = tg.compile(gm, tuple(example_inputs), keep_ir=False, pack_weights=False)
    except UnsupportedOpsError as e:
        names = ", ".join(dict.fromkeys(target for target, _ in e.ops))
        return _eager(gm, f"unsupported: {names}")
    except (ValueError, TypeError, NotImplementedError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return _eager(gm, first)
    returns_sequence = _returns_sequence(gm)

    def run(*args):
        out = fn(*args)  # in the graph's own structure: a list for Dynamo's graphs
        return list(out) if returns_sequence and isinstance(out, tuple) else out

    return run


def _eager(gm: torch.fx.GraphModule, why: str) -> Callable:
    warnings.warn(f"tensor_graphs: a captured graph runs eagerly ({why})", EagerFallbackWarning, stacklevel=3)
    return gm.forward


def _returns_sequence(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` returns a tuple or list (Dynamo's graphs do), not one tensor."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return isinstance(output.args[0], (tuple, list))
