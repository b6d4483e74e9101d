"""What a tuner decided, and what the heuristic decides without one: per kernel the path
chosen, why, and every candidate's record (`TuningReport`, what ``fn.explain()`` prints), over
the paths of the CPU's kernel registry or the GPU's variants (`PathSpace`). The driver builds the
heuristic's report here (`heuristic_report`) without measuring anything; `tuner.tune_graph`
measures and chooses."""

from __future__ import annotations

from tensor_graphs.dialects.symbolic import dims_of, format_expr

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from tensor_graphs.lowering.tensor_to_buffer.kernels import GPU_KERNEL_ATTR, GPU_PARAMETER_ATTRS, KERNEL_ATTR, variants_for
from tensor_graphs.target import Target
from tensor_graphs.tuning.database import Machine, Record
from tensor_graphs.tuning.paths import Candidate, OpPaths, candidates, gpu_candidates, gpu_kernel_paths, kernel_paths, pin, pin_gpu

#: The values of ``tune``.
TUNE_MODES = ("off", "cached", "missing", "all")


class ToleranceError(ValueError):
    """The tuned graph's output differs from the fp32 path's by more than the tolerance."""


@dataclass(frozen=True)
class PathSpace:
    """Where the paths come from: the CPU's kernel registry and target parameters, or the GPU's
    variants (`codegen.triton.paths`). ``ops(module)``: each op's paths; ``candidates(paths)``;
    ``alone(op)``: variant -> why it cannot run ``op`` (None: it can); ``pinned``: the attribute
    an op pins its path with; ``pin(op, candidate)``; ``device``: where a candidate runs."""

    ops: Callable[[ModuleOp], Iterator[OpPaths]]
    candidates: Callable[[OpPaths], list[Candidate]]
    alone: Callable[[Operation], dict[str, str | None]]
    pinned: str
    pin: Callable[[Operation, Candidate], None]
    device: str = "cpu"
    #: the other attributes that pin a path when an op carries one (its parameters)
    also_pinned: tuple[str, ...] = ()

    def is_pinned(self, op: Operation) -> bool:
        return any(a in op.attributes for a in (self.pinned, *self.also_pinned))

    @staticmethod
    def cpu(target: Target, threads: int, pack_weights: bool) -> PathSpace:
        return PathSpace(lambda m: kernel_paths(m, pack_weights=pack_weights, choices_only=False),
                         lambda p: candidates(p, target, threads), lambda op: {v.name: v.applies(op) for v in variants_for(op)},
                         KERNEL_ATTR, pin)

    @staticmethod
    def gpu() -> PathSpace:
        from tensor_graphs.codegen.triton.paths import variants as gpu_variants

        return PathSpace(gpu_kernel_paths, gpu_candidates, lambda op: {v.name: v.applies(op) for v in gpu_variants(op)},
                         GPU_KERNEL_ATTR, pin_gpu, "cuda", tuple(GPU_PARAMETER_ATTRS.values()))

    def machine(self, threads: int) -> Machine:
        """What the records are keyed by: this CPU at ``threads``, or the GPU (`Machine.gpu`)."""
        if self.device == "cpu":
            return Machine.this(threads)
        from tensor_graphs.runtime_support.triton_graph import device_for

        return Machine.gpu(device_for(self.device))


@dataclass
class PathResult:
    """One candidate of an op: its record (None: not measured on this machine), or why it
    could not be built."""

    candidate: Candidate
    record: Record | None = None
    failed: str | None = None


@dataclass
class Choice:
    """The path chosen for one op, why, and every candidate considered."""

    label: str
    chosen: Candidate
    heuristic: Candidate
    reason: str
    paths: list[PathResult] = field(default_factory=list)

    @property
    def tuned(self) -> bool:
        """Whether the choice differs from the heuristic's."""
        return self.chosen.key != self.heuristic.key


@dataclass
class TuningReport:
    """What `tune_graph` decided, per kernel (``choices``, in program order); the whole-graph
    check of `tensor_graphs.compile` fills ``graph_error`` and the two graphs' times."""

    tune: str
    tolerance: float
    machine: str
    choices: list[Choice] = field(default_factory=list)
    measured: int = 0
    unmeasured: int = 0
    seconds: float = 0.0
    graph_error: float | None = None
    graph_ms: tuple[float, float] | None = None  # (tuned, heuristic) median ms per call
    note: str = ""
    #: the tolerance each kernel was held to (below ``tolerance`` when the whole graph needed it)
    kernel_tolerance: float | None = None

    def __str__(self) -> str:
        return self.format()

    def format(self, all_kernels: bool = True) -> str:
        lines = [f"kernel paths (tune={self.tune!r}, tolerance {self.tolerance:g} max error relative to the "
                 f"largest reference magnitude) on {self.machine}"]
        if self.measured or self.unmeasured:
            lines.append(f"measured {self.measured} path(s) in {self.seconds:.1f} s"
                         + (f"; {self.unmeasured} left unmeasured (time limit)" if self.unmeasured else ""))
        if self.kernel_tolerance is not None and self.kernel_tolerance != self.tolerance:
            lines.append(f"each kernel held to {self.kernel_tolerance:g}, so that the whole graph stays within {self.tolerance:g}")
        if self.graph_error is not None:
            lines.append(f"whole graph vs the fp32 heuristic path: max error {self.graph_error:.3g} (relative)")
        if self.graph_ms is not None:
            lines.append(f"whole graph: tuned {self.graph_ms[0]:.3f} ms, heuristic {self.graph_ms[1]:.3f} ms per call")
        if self.note:
            lines.append(self.note)
        for c in self.choices:
            if not all_kernels and len(c.paths) < 2:
                continue
            lines.append(f"{c.label}: {c.chosen}  ({c.reason})")
            for p in c.paths:
                mark = "*" if p.candidate.key == c.chosen.key else " "
                if p.failed is not None:
                    lines.append(f"   {mark} {str(p.candidate):32s} cannot run: {p.failed}")
                elif p.record is None:
                    lines.append(f"   {mark} {str(p.candidate):32s} no record")
                else:
                    r = p.record
                    within = "" if r.max_rel_err <= (self.kernel_tolerance or self.tolerance) else "  over tolerance"
                    lines.append(f"   {mark} {str(p.candidate):32s} {r.median_ns / 1e3:10.1f} us "
                                 f"(p20 {r.p20_ns / 1e3:.1f}, p80 {r.p80_ns / 1e3:.1f})  "
                                 f"err {r.max_abs_err:.2e} abs, {r.max_rel_err:.2e} rel{within}")
        return "\n".join(lines)


def _label(op: Operation) -> str:
    shapes = " , ".join("x".join(format_expr(d) for d in dims_of(v.type)) for v in op.operands)
    name = op.results[0].name_hint if op.results else None
    return f"{op.name} {shapes}" + (f" (%{name})" if name else "")



def unmeasured_choice(paths: OpPaths, cands: list[Candidate], space: PathSpace, measuring: bool) -> Choice | None:
    """The heuristic's choice for an op whose paths are not compared (pinned in the IR, one path
    only, or nothing measured: ``measuring`` off); None when they are to be compared."""
    heuristic = Candidate(paths.chosen)
    label = _label(paths.op)
    if space.is_pinned(paths.op):
        return Choice(label, heuristic, heuristic, f"pinned in the IR ({space.pinned} or its parameters)")
    if len(cands) < 2:
        return Choice(label, heuristic, heuristic, "only one path", [PathResult(c) for c in cands])
    if not measuring:
        return Choice(label, heuristic, heuristic, "heuristic: tune='off'", [PathResult(c) for c in cands])
    return None


def op_candidates(space: PathSpace, paths: OpPaths) -> list[Candidate]:
    """The candidates of an op that are to be considered (none when the IR pins its path)."""
    return space.candidates(paths) if not space.is_pinned(paths.op) else []


def heuristic_report(module: ModuleOp, target: Target, pack_weights: bool, device: str = "cpu") -> TuningReport:
    """The kernel paths the heuristic takes in ``module`` (tg level, optimised): ``fn.explain()``
    of an untuned graph. Measures nothing, opens no database."""
    from tensor_graphs.runtime_support.threads import get_num_threads

    threads = get_num_threads()
    space = PathSpace.cpu(target, threads, pack_weights) if device == "cpu" else PathSpace.gpu()
    report = TuningReport("off", 0.0, space.machine(threads).cpu)
    for paths in space.ops(module):
        report.choices.append(unmeasured_choice(paths, op_candidates(space, paths), space, measuring=False))  # type: ignore[arg-type]
    return report

