"""torch.export → aten dialect; weights → a safetensors side file.

    graph = import_model(model, (x,))          # ImportedGraph(module, weights, input_names, num_outputs)
    export_model(model, (x,), "model.mlir")    # + model.safetensors beside it
"""

from __future__ import annotations

from pathlib import Path

from tensor_graphs.frontend.importer import (
    ImportedGraph,
    UnsupportedOpsError,
    import_exported_program,
    import_model,
    node_location,
)
from tensor_graphs.frontend.weights import WEIGHTS_FILE_ATTR, load_weights, save_weights


def export_model(model, example_inputs: tuple, path: str | Path) -> ImportedGraph:
    """Import ``model`` and write ``path`` (aten-level MLIR text) plus ``<stem>.safetensors`` beside it."""
    path = Path(path)
    graph = import_model(model, example_inputs)
    save_weights(graph.module, graph.weights, path)
    path.write_text(str(graph.module) + "\n")
    return graph


__all__ = [
    "WEIGHTS_FILE_ATTR",
    "ImportedGraph",
    "UnsupportedOpsError",
    "export_model",
    "import_exported_program",
    "import_model",
    "load_weights",
    "node_location",
    "save_weights",
]
