"""torch.export → aten dialect; weights → a safetensors side file.

    graph = import_model(model, (x,))          # ImportedGraph(module, weights, input_names, num_outputs)
    export_model(model, (x,), "model.mlir")    # + model.safetensors beside it

Names are imported lazily: ``tensor_graphs.dialects.dense`` (dense attributes from NumPy) is used
by passes that ``tg-opt`` runs, and must not pull in torch.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensor_graphs.frontend.importer import (
        ImportedGraph,
        import_exported_program,
        import_model,
        node_location,
    )
    from tensor_graphs.frontend.unsupported import Unsupported, UnsupportedOpsError
    from tensor_graphs.frontend.weights import WEIGHTS_FILE_ATTR, load_weights, save_weights

#: public name -> module that defines it
_LAZY = {
    "ImportedGraph": "importer",
    "Unsupported": "unsupported",
    "UnsupportedOpsError": "unsupported",
    "import_exported_program": "importer",
    "import_model": "importer",
    "node_location": "importer",
    "WEIGHTS_FILE_ATTR": "weights",
    "load_weights": "weights",
    "save_weights": "weights",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tensor_graphs.frontend' has no attribute '{name}'")
    return getattr(importlib.import_module(f"tensor_graphs.frontend.{module}"), name)


def export_model(model, example_inputs: tuple, path: str | Path, dynamic_shapes=None) -> ImportedGraph:
    """Import ``model`` (``dynamic_shapes`` as torch.export takes it: the module keeps the symbols
    and their ranges) and write ``path`` (aten-level MLIR text) plus ``<stem>.safetensors`` beside it."""
    from tensor_graphs.frontend.importer import import_model
    from tensor_graphs.frontend.weights import save_weights

    path = Path(path)
    graph = import_model(model, example_inputs, dynamic_shapes)
    save_weights(graph.module, graph.weights, path)
    path.write_text(str(graph.module) + "\n")
    return graph


__all__ = [
    "WEIGHTS_FILE_ATTR",
    "ImportedGraph",
    "Unsupported",
    "UnsupportedOpsError",
    "export_model",
    "import_exported_program",
    "import_model",
    "load_weights",
    "node_location",
    "save_weights",
]
