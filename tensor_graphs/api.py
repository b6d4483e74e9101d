"""The public Python surface: `compile`, `compile_module`, `export`, `set_num_threads`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.passes import BUFFER_PIPELINE, LLVM_PIPELINE, TENSOR_PIPELINE, build_pipeline
from tensor_graphs.runtime_support.executable import CompiledGraph

#: Levels in lowering order.
LEVELS: tuple[str, ...] = ("aten", "tg", "buf", "llvm")
#: The tg-level optimisation passes (the tensor pipeline without its conversion from aten).
TG_OPTIMIZE: tuple[str, ...] = tuple(p for p in TENSOR_PIPELINE if p != "convert-aten-to-tensor")


@dataclass
class CompileStats:
    """Wall-clock seconds spent in each phase of the last compilation."""

    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def module_level(module: ModuleOp) -> str:
    """The lowest level present in ``module``: 'aten', 'tg', 'buf' or 'llvm'."""
    dialects = {op.name.split(".")[0] for op in module.walk()}
    for level in LEVELS:
        if level in dialects:
            return level
    if "func" in dialects:
        return "tg"  # a function of only moves/returns is a (trivial) tg function
    return "llvm"


def compile_module(
    module: ModuleOp,
    weights: Mapping[str, np.ndarray] | None = None,
    *,
    keep_ir: bool = True,
    stats: CompileStats | None = None,
) -> CompiledGraph:
    """Lower ``module`` (at the aten, tg, buf or llvm level) to native code and bind ``weights``.

    The module is lowered in place. With ``keep_ir`` the text of every level it passes through
    is kept for ``fn.ir(level)``.
    """
    from tensor_graphs.codegen.llvm.jit import jit_compile

    stats = stats if stats is not None else CompileStats()
    ir: dict[str, str] = {}
    ctx = _context()

    def run(phase: str, passes: Sequence[str]) -> None:
        t0 = time.perf_counter()
        build_pipeline(passes).apply(ctx, module)
        stats.seconds[phase] = stats.seconds.get(phase, 0.0) + time.perf_counter() - t0

    def keep(level: str) -> None:
        if keep_ir:
            ir[level] = str(module)

    level = module_level(module)
    keep(level)
    if level == "aten":
        run("aten -> tg", TENSOR_PIPELINE)
        keep("tg")
    elif level == "tg":
        run("optimise tg", TG_OPTIMIZE)
        keep("tg")
    if level in ("aten", "tg"):
        run("tg -> buf", BUFFER_PIPELINE)
        keep("buf")
    elif level == "buf" and any(op.name == "buf.alloc" for op in module.walk()):
        run("plan memory", ("plan-memory",))
        keep("buf")
    if level != "llvm":
        run("buf -> llvm", LLVM_PIPELINE)
    t0 = time.perf_counter()
    native = jit_compile(module)
    stats.seconds["llvm jit"] = time.perf_counter() - t0
    if keep_ir:
        ir["llvm"] = native.llvm_ir
    return CompiledGraph(native, dict(weights or {}), ir)


def compile(
    model,
    example_inputs: Sequence,
    *,
    keep_ir: bool = True,
    stats: CompileStats | None = None,
) -> CompiledGraph:
    """Compile a ``torch.nn.Module`` for inputs shaped like ``example_inputs``.

    Returns a callable backed by ONE native function: ``fn(*inputs)`` takes NumPy arrays or
    torch tensors (all one kind) and returns the same kind.
    """
    from tensor_graphs.frontend import import_model

    stats = stats if stats is not None else CompileStats()
    t0 = time.perf_counter()
    graph = import_model(model, tuple(_as_torch(x) for x in example_inputs))
    stats.seconds["import"] = time.perf_counter() - t0
    return compile_module(graph.module, graph.weights, keep_ir=keep_ir, stats=stats)


def export(model, example_inputs: Sequence, path: str | Path):
    """Write ``path`` (.mlir at the aten level) and its weights to ``<stem>.safetensors`` beside it."""
    from tensor_graphs.frontend import export_model

    return export_model(model, tuple(_as_torch(x) for x in example_inputs), path)


def set_num_threads(n: int) -> None:
    """Threads used by BLAS calls inside compiled graphs."""
    from tensor_graphs.runtime_support.blas import set_num_threads as _set

    _set(n)


def _as_torch(x):
    import torch

    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return x


def _context():
    from tensor_graphs.context import make_context

    return make_context()
