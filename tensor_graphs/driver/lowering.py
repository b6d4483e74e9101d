"""What every compile path shares: the levels, the phase timings (`CompileStats`), the named
pass pipelines run on one module (`Lowering`) and the target a module is compiled for."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp

from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline, tensor_pipeline
from tensor_graphs.target import Target

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

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds


def module_level(module: ModuleOp) -> str:
    """The lowest level present in ``module``: 'aten', 'tg', 'buf' or 'llvm'."""
    dialects = {op.name.split(".")[0] for op in module.walk()}
    for level in LEVELS:
        if level in dialects:
            return level
    if "func" in dialects:
        return "tg"  # a function of only moves/returns is a (trivial) tg function
    return "llvm"


def context():
    """A fresh xDSL Context with every dialect of tensor_graphs loaded."""
    from tensor_graphs.context import make_context

    return make_context()


@dataclass
class Lowering:
    """Named passes run on one module, each phase timed into ``stats``; with ``keep_ir`` the
    module's text kept at each level it reaches (``fn.ir(level)``)."""

    module: ModuleOp
    stats: CompileStats
    keep_ir: bool
    ir: dict[str, str] = field(default_factory=dict)
    ctx: object = field(default_factory=context)  # the xDSL Context of the passes

    def run(self, phase: str, passes: Sequence[str]) -> None:
        t0 = time.perf_counter()
        build_pipeline(passes).apply(self.ctx, self.module)
        self.stats.add(phase, time.perf_counter() - t0)

    def keep(self, level: str) -> None:
        if self.keep_ir:
            self.ir[level] = str(self.module)

    def to_tg(self, level: str, pack_weights: bool, optimize: bool, tg_passes: Sequence[str]) -> None:
        """An aten module to tg, optimised (a tg module: optimised unless ``optimize`` is off),
        then ``tg_passes``; the tg text kept after each step that ran."""
        if level == "aten":
            self.run("aten -> tg", tensor_pipeline(pack_weights))
            self.keep("tg")
        elif optimize:
            self.run("optimise tg", tensor_pipeline(pack_weights, TG_OPTIMIZE))
            self.keep("tg")
        if tg_passes:
            self.run("tg passes", tg_passes)
            self.keep("tg")


def set_target(module: ModuleOp, level: str, target: Target | str | None) -> None:
    """Record the target ``module`` is compiled for: ``target`` (resolved), or when none is given
    and the module records none, the default (``TG_TARGET``, else the host). A module already at
    the buf or llvm level was shaped for the target it records: another one is an error."""
    from tensor_graphs.target import TARGET_ATTR, of_module, record, resolve

    if target is None and TARGET_ATTR in module.attributes:
        return
    chosen = resolve(target)
    if level in ("buf", "llvm") and TARGET_ATTR in module.attributes:
        recorded = of_module(module)
        if recorded.name != chosen.name:
            raise ValueError(
                f"this module is already at the {level} level, lowered for target {recorded.name}; it cannot be "
                f"compiled for {chosen.name} (compile it from the aten or tg level for that target)"
            )
        return
    chosen.check_runs_here()  # before any work: code for a CPU this one is not cannot run here
    record(module, chosen)


def begin(module: ModuleOp, options, stats: CompileStats | None, verify: bool,
          static_only: str | None = None) -> tuple[Lowering, str]:
    """Every compile's first steps: ``module`` verified (when ``verify``); refused when it has
    dynamic sizes and ``static_only`` names the path that takes static sizes only
    (`refuse_symbolic`); its lowering (``options.keep_ir``: the text kept) and the level it
    starts at."""
    from tensor_graphs.diagnostics import verify_module

    if verify:
        verify_module(module)
    if static_only is not None:
        refuse_symbolic(module, static_only)
    return Lowering(module, stats if stats is not None else CompileStats(), options.keep_ir), module_level(module)


def refuse_symbolic(module: ModuleOp, what: str) -> None:
    """A `SymbolicShapeError` when ``module`` has dynamic sizes (`dialects.symbolic`), for
    ``what`` (a path that takes static sizes only: the GPU, the tuner)."""
    from tensor_graphs.dialects.symbolic import SymbolicShapeError, symbols_of

    symbols = symbols_of(module)
    dynamic = next((v.type for o in module.walk() for v in (*o.results, *(a for r in o.regions for b in r.blocks for a in b.args))
                    if DYNAMIC_INDEX in tuple(getattr(v.type, "get_shape", tuple)())), None)
    if not symbols and dynamic is None:
        return
    ranges = ", ".join(f"{k} in [{lo}, {hi}]" for k, (lo, hi) in symbols.items()) or f"a value of type {dynamic}"
    raise SymbolicShapeError(
        f"this graph has dynamic sizes ({ranges}); {what} takes static sizes only: compile it without "
        "dynamic_shapes, once per shape you run (the CPU compile without tuning takes them)")


def module_target(module: ModuleOp) -> Target:
    """The target ``module`` records."""
    from tensor_graphs.target import of_module

    return of_module(module)


def as_numpy(x) -> np.ndarray:
    """A NumPy array of ``x`` (a torch tensor is detached and copied to the CPU)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def as_torch(x):
    """A torch tensor of ``x`` (a NumPy array shares its memory)."""
    import torch

    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return x
