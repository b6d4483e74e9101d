"""``torch.compile(model, backend="tensor_graphs")``: each graph TorchDynamo captures is compiled
by `tensor_graphs.compile`; a graph tensor_graphs cannot compile runs eagerly, with one warning
line naming why (the unsupported ops, or the reason).

Registered through the ``torch_dynamo_backends`` entry point (``pyproject.toml``), so installing
the package is enough; ``torch.compile(model, backend=tensor_graphs_backend)`` works too.

    model = torch.compile(model, backend="tensor_graphs")
    y = model(x)          # the first call compiles; a graph break gives several graphs

Dynamo's graphs take the model's parameters as inputs (it inlines ``nn.Module`` calls), so the
compiled code reads them where they are rather than packing copies.

Dynamic shapes (``torch.compile(..., dynamic=True)``, or Dynamo's automatic dynamic after a
size changes) compile too: the graph's size symbols (its ``SymInt`` inputs, and the sizes of its
tensors' dims) become tensor_graphs size symbols, each with Dynamo's lower bound and an upper
bound of `DYNAMIC_MAX` (or the first call's size, if larger): one compiled graph serves every
size in range, planned at the largest. A call beyond the bound compiles once more with the bound
doubled past it; Dynamo's guards decide everything else (a size of 0 or 1, which Dynamo
specialises, is its own static graph).
"""

from __future__ import annotations

import threading
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
        return _symbolic_backend(gm, example_inputs)
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


#: The upper bound of a size symbol Dynamo leaves unbounded (its graphs' sizes are at least 2
#: and at most "infinity"): memory is planned at it, and a larger call compiles again
DYNAMIC_MAX = 4096


class _TensorsOnly(torch.nn.Module):
    """A Dynamo graph whose ``SymInt`` inputs are read from the sizes of its tensor inputs
    (``sources``: input position -> (tensor input position, dim)): what torch.export takes."""

    def __init__(self, gm: torch.fx.GraphModule, n_inputs: int, sources: dict[int, tuple[int, int]]):
        super().__init__()
        self.gm, self.n_inputs, self.sources = gm, n_inputs, sources
        self.tensor_positions = [i for i in range(n_inputs) if i not in sources]

    def forward(self, *tensors):
        by_position = dict(zip(self.tensor_positions, tensors))
        args = [by_position[i] if i in by_position else by_position[self.sources[i][0]].shape[self.sources[i][1]]
                for i in range(self.n_inputs)]
        return self.gm(*args)


def _symbolic_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> Callable:
    """A graph with size symbols (see the module doc): compiled for ranges of sizes."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    dims: dict[str, tuple[int, int]] = {}  # symbol -> its first (input, dim)
    ranges: dict[str, tuple[int, int]] = {}
    for i, node in enumerate(placeholders):
        value = node.meta.get("example_value")
        for d, size in enumerate(getattr(value, "shape", ())):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol and str(size.node.expr) not in dims:
                name = str(size.node.expr)
                dims[name] = (i, d)
                vr = size.node.shape_env.var_to_range.get(size.node.expr)
                lo = _finite(vr.lower) if vr is not None else None
                hi = _finite(vr.upper) if vr is not None else None
                lo = lo if lo is not None else 2
                ranges[name] = (lo, hi if hi is not None else max(DYNAMIC_MAX, int(example_inputs[i].shape[d])))
    sources = {}
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt):
            name = str(x.node.expr)
            if name not in dims:
                return _eager(gm, f"the size {name} is not the size of any tensor input's dim")
            sources[i] = dims[name]
        elif not isinstance(x, torch.Tensor):
            return _eager(gm, f"input {i} is a {type(x).__name__}")
    module = _TensorsOnly(gm, len(example_inputs), sources)
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    returns_sequence = _returns_sequence(gm)
    compiled: dict[tuple, Callable] = {}

    def compile_for(bounds: dict[str, tuple[int, int]]) -> Callable:
        import tensor_graphs as tg

        made = {name: torch.export.Dim(name, min=lo, max=hi) for name, (lo, hi) in bounds.items()}
        spec = [{d: made[name] for name, (j, d) in dims.items() if j == i} or None
                for i in range(len(example_inputs)) if i not in sources]
        # (forward takes *tensors: one argument, the tuple of them). On a thread of its own:
        # exporting with dynamic shapes inside Dynamo's compile of the caller's frame leaves
        # state in that thread that fails the frame's own guards
        result: list = []

        def export() -> None:
            try:
                result.append(tg.compile(module, tuple(tensors), dynamic_shapes=(tuple(spec),), keep_ir=False,
                                         pack_weights=False))
            except Exception as e:  # noqa: BLE001 (raised again on the caller's thread)
                result.append(e)

        thread = threading.Thread(target=export, name="tensor_graphs-dynamic-compile")
        thread.start()
        thread.join()
        if isinstance(result[0], Exception):
            raise result[0]
        return result[0]

    try:
        first = compile_for(ranges)
    except Exception as e:  # noqa: BLE001 (any refusal: the graph runs eagerly, as for static graphs)
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return _eager(gm, first_line)
    compiled[tuple(sorted(ranges.items()))] = first

    def run(*args):
        bounds = dict(ranges)
        for name, (i, d) in dims.items():  # a size past its bound: the bound doubled past it
            size = int(args[i].shape[d])
            while size > bounds[name][1]:
                bounds[name] = (bounds[name][0], bounds[name][1] * 2)
        key = tuple(sorted(bounds.items()))
        if key not in compiled:
            compiled[key] = compile_for(bounds)
        out = compiled[key](*(a for i, a in enumerate(args) if i not in sources))
        return list(out) if returns_sequence and isinstance(out, tuple) else out

    return run


def _finite(bound) -> int | None:
    """A range bound of Dynamo's as an int; None for its infinity."""
    try:
        value = int(bound)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None
    return value if abs(value) < 1 << 62 else None


def _eager(gm: torch.fx.GraphModule, why: str) -> Callable:
    warnings.warn(f"tensor_graphs: a captured graph runs eagerly ({why})", EagerFallbackWarning, stacklevel=3)
    return gm.forward


def _returns_sequence(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` returns a tuple or list (Dynamo's graphs do), not one tensor."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return isinstance(output.args[0], (tuple, list))
