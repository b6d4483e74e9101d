"""The weights side file: ``model.mlir`` names ``model.safetensors`` beside it.

Real weights never go into the IR as dense literals: the module carries
``tg.weights_file = "model.safetensors"`` (relative to the .mlir file) and every ``tg.weight "name"``
is looked up there.
"""

from __future__ import annotations

from pathlib import Path

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


def load_weights(module: ModuleOp, mlir_path: str | Path) -> dict[str, np.ndarray]:
    """The weights named by ``module``'s ``tg.weights_file`` attribute (relative to ``mlir_path``)."""
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
    weights = load_file(str(st_path))
    missing = [n for n in names if n not in weights]
    if missing:
        raise ValueError(f"weights file '{st_path}' lacks {len(missing)} weight(s) the module uses: {', '.join(missing)}")
    return weights
