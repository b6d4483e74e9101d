"""A model lowered to tg with every GEMM pinned to one variant, for a target: the harness of the
reduced-precision GEMM tests (`test_bf16_gemm`, `test_int8_gemm`, `test_bf16_conv`).

    from pinned_gemms import pinned_graph      # tests/ on sys.path
"""

from __future__ import annotations

import dataclasses

import torch
from xdsl.context import Context

from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target, record
from tensor_graphs.tuning.paths import Candidate, kernel_paths, pin


def pinned_graph(model: torch.nn.Module, inputs: tuple, target: str, variant: str, monkeypatch, *,
                 emulated: frozenset[str] = frozenset(), dynamic_shapes=None, params: dict | None = None,
                 op: str = "tg.matmul"):
    """``model`` imported and lowered to tg for ``target``, every ``op`` (a GEMM, or another
    op's name: ``tg.winograd_conv``) pinned to ``variant`` (with ``params``), which must be
    offered to each. ``emulated``: extensions the
    target is told it has while the variants are chosen, so that a variant needing them is
    offered; the code, compiled for the target as it is, emulates their instructions."""
    from tensor_graphs.lowering.tensor_to_buffer import kernels

    named = Target.named(target)
    if emulated:
        monkeypatch.setattr(kernels, "_target_of", lambda op: dataclasses.replace(named, extensions=named.extensions | emulated))
    graph = import_model(model, inputs, dynamic_shapes)
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    record(graph.module, named)
    gemms = [p for p in kernel_paths(graph.module) if p.name == op]
    assert gemms and all(variant in p.applicable for p in gemms), [p.rejected for p in gemms]
    for p in gemms:
        pin(p.op, Candidate(variant, params or {}))
    return graph
