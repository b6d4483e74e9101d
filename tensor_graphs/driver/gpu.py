"""A module lowered to Triton kernels and one replayed launch plan on an NVIDIA GPU (or Triton's
interpreter on the CPU under ``TRITON_INTERPRET=1``), its kernel paths the heuristic's."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.driver.lowering import CompileStats, Lowering, begin
from tensor_graphs.options import CompileOptions


def lower_for_gpu(module: ModuleOp, options: CompileOptions, stats: CompileStats | None, *, tg_passes: Sequence[str] = (),
                  verify: bool = True, optimize: bool = True) -> tuple[Lowering, str]:
    """``module`` verified and (from aten or tg) optimised at the tg level without load-time
    weight transforms; the lowering and the level it started at. No GPU (and no
    ``TRITON_INTERPRET=1``): a `DeviceError` before any work."""
    from tensor_graphs.runtime_support.triton_graph import device_for

    device_for(options.device)
    lowering, level = begin(module, options, stats, verify, static_only="the GPU compile")
    if level not in ("aten", "tg", "buf"):
        raise ValueError(f"device='cuda' compiles a module at the aten, tg or (planned) buf level, got one at the {level} level")
    lowering.keep(level)
    if level != "buf":
        lowering.to_tg(level, False, optimize, tg_passes)  # no load-time weight transforms on the GPU
    return lowering, level


def compile_for_gpu(module: ModuleOp, weights: Mapping[str, np.ndarray] | None, options: CompileOptions, *,
                    stats: CompileStats | None = None, tg_passes: Sequence[str] = (), states=None, verify: bool = True,
                    optimize: bool = True, bound: dict | None = None, lowered: Lowering | None = None):
    """`compile_module` for ``device="cuda"``: the tg-level optimisation (`lower_for_gpu`; or
    ``lowered``, already done), then `convert-tensor-to-triton` (buffers, the planned arena, one
    Triton kernel per buf kernel; a planned buf module goes straight to the kernels), bound by
    `runtime_support.triton_graph.TritonGraph` (``bound``: weights already on the device, by
    name, shared with another graph and filled with the ones uploaded here)."""
    from tensor_graphs.runtime_support.triton_graph import GpuCompiledGraph, TritonGraph, device_for

    torch_device = device_for(options.device)
    lowering = lowered if lowered is not None else lower_for_gpu(module, options, stats, tg_passes=tg_passes,
                                                                 verify=verify, optimize=optimize)[0]
    lowering.run("tg -> triton", ["convert-tensor-to-triton"])
    lowering.keep("buf")
    t0 = time.perf_counter()
    graph = TritonGraph(module, weights or {}, torch_device, states=states, bound=bound)
    lowering.stats.add("bind on the device", time.perf_counter() - t0)
    return GpuCompiledGraph(graph, lowering.ir, module, weights)
