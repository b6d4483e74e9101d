"""A compile whose kernel paths come from the timing database: the tuner pins each kernel's
fastest path within the tolerance (`tuner.tune_graph`), the driver compiles the graph
(`tensor_graphs.driver`), and the whole graph is checked on the example inputs against the fp32
heuristic graph, with stricter per-kernel tolerances while its error is over the user's
(`BACKOFF`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ModuleOp, UnitAttr, f32

from tensor_graphs.driver.cpu import begin_cpu, compile_module
from tensor_graphs.driver.lowering import CompileStats, as_numpy, module_target
from tensor_graphs.options import CompileOptions
from tensor_graphs.runtime_support.executable import CompiledGraph


@dataclass
class Tuning:
    """How a compile chooses kernel paths (`tensor_graphs.tuning.tuner`): ``tune`` is
    ``"off"`` (the heuristic), ``"cached"`` (the database's records), ``"missing"`` (measure
    what is not recorded) or ``"all"`` (measure everything again); a path is eligible when its
    recorded error (max relative to the largest reference magnitude) is at most ``tolerance``.
    ``inputs``: example inputs (measuring evaluates the graph on them; the tuned graph is
    checked on them). ``db``: a `TuningDatabase` (default: `database.default_path`);
    ``max_seconds``: stop measuring after this long; ``progress``: a tqdm bar while measuring;
    ``keep_faster``: time the tuned and the heuristic graph on the inputs and return the faster
    (``False``: always the tuned one)."""

    tune: str = "off"
    tolerance: float = 1e-5
    inputs: Sequence = ()
    db: object | None = None
    max_seconds: float | None = None
    progress: bool = True
    keep_faster: bool = True

    @staticmethod
    def of(options: CompileOptions, inputs: Sequence = (), db=None) -> Tuning:
        """The tuning ``options`` ask for, measured on ``inputs``, recorded in ``db`` (opened)."""
        return Tuning(options.tune, options.tolerance, tuple(inputs), db, options.max_tuning_seconds)

    @property
    def active(self) -> bool:
        return self.tune != "off"


#: Per-kernel tolerances tried in turn, as fractions of the user's, until the tuned graph's
#: accumulated error is within the user's tolerance (each kernel within it is no guarantee that
#: their sum is: GPT-2's int8 GEMVs, each ~6e-3, add up to 2.4e-2 on the logits).
BACKOFF = (1.0, 0.25, 1 / 16, 1 / 64)


def open_db(db):
    """A `TuningDatabase`: ``db`` itself, or opened at the path ``db`` (default path: None)."""
    from tensor_graphs.tuning.database import TuningDatabase

    return db if isinstance(db, TuningDatabase) else TuningDatabase(db)


@contextlib.contextmanager
def opened_db(db, needed: bool = True) -> Iterator[object | None]:
    """`open_db` for the duration (None when not ``needed``); a database opened here is closed
    on exit, one the caller passed stays open."""
    opened = open_db(db) if needed else None
    try:
        yield opened
    finally:
        if opened is not None and opened is not db:
            opened.close()


def compile_module_tuned(module: ModuleOp, weights: Mapping[str, np.ndarray] | None, options: CompileOptions,
                         tuning: Tuning, *, stats: CompileStats | None = None, tg_passes: Sequence[str] = (), states=None,
                         packed: dict | None = None, verify: bool = True, optimize: bool = True) -> CompiledGraph:
    """`driver.compile_module` with the kernel paths ``tuning`` chooses: a module at the aten or
    tg level lowered to the optimised tg level, then `compile_tuned`."""
    stats = stats if stats is not None else CompileStats()
    if options.device != "cpu":
        from tensor_graphs.driver.gpu import lower_for_gpu

        lowering, _ = lower_for_gpu(module, options, stats, tg_passes=tg_passes, verify=verify, optimize=optimize)
        packed = {} if packed is None else packed  # the heuristic and the tuned graph: one device copy of the weights
        fn = compile_tuned(module, weights or {}, tuning, options.but(pack_weights=False), states=states, packed=packed,
                           stats=stats)
    else:
        lowering, level = begin_cpu(module, options, stats, verify)
        lowering.keep(level)
        lowering.to_tg(level, options.pack_weights, optimize, tg_passes)
        fn = compile_tuned(module, weights or {}, tuning, options, states=states, packed=packed, stats=stats)
    for k, v in lowering.ir.items():  # the levels before tg (the aten module)
        fn._ir.setdefault(k, v)
    return fn


def compile_tuned(module: ModuleOp, weights, tuning: Tuning, options: CompileOptions, *, states=None, packed=None,
                  stats: CompileStats | None = None, heuristic_module=None) -> CompiledGraph:
    """``module`` (tg level, optimised) with the kernel paths ``tuning`` chooses, checked on its
    inputs against the fp32 heuristic graph (``heuristic_module``: that graph's module already
    lowered, else a copy of ``module``): the fastest paths within the tolerance per kernel, then,
    while the whole graph's error exceeds the tolerance, within a stricter one per kernel
    (`BACKOFF`); `ToleranceError` when even the strictest exceeds it. The faster of the tuned and
    the heuristic graph is returned (unless ``tuning.keep_faster`` is off). ``options.device``
    ``"cuda"``: the GPU's variants, measured and compiled for the GPU."""
    from tensor_graphs.tuning.tuner import ToleranceError

    stats = stats if stats is not None else CompileStats()
    if tuning.tune in ("missing", "all") and not tuning.inputs:
        raise ValueError(f"tune={tuning.tune!r} measures kernel paths on the example inputs: pass them")
    inputs = [np.array(as_numpy(x), order="C") for x in tuning.inputs]  # 0-d stays 0-d (not ascontiguousarray)
    lower = options.but(target=None)  # the module records its target
    pristine = module.clone()
    heuristic: CompiledGraph | None = None
    attempts: list[tuple[float, float]] = []
    for i, factor in enumerate(BACKOFF):
        candidate = pristine.clone()
        report = _tune(candidate, weights, inputs, tuning, options, factor, first=i == 0, stats=stats)
        if heuristic is None:
            heuristic = compile_module(heuristic_module if heuristic_module is not None else pristine.clone(), weights,
                                       lower, states=states, packed=packed, verify=False, optimize=False, stats=stats)
        if not any(c.tuned for c in report.choices):
            heuristic.tuning = report
            if attempts:
                report.note = _attempts_note(attempts) + f": over {tuning.tolerance:g}; the heuristic paths are left"
            return heuristic
        if not inputs:
            raise ValueError("compile with tuned kernel paths checks the whole graph on the example inputs: pass them")
        tuned = candidate.clone() if _may_round_activations(report, candidate, lower) else None  # (compiling lowers it in place)
        fn = compile_module(candidate, weights, lower, states=heuristic.states, packed=packed, verify=False,
                            optimize=False, stats=stats)
        call = {"past": 0} if fn.states else {}
        tuned_out, ref_out = fn(*inputs, **call), heuristic(*inputs, **call)
        ref_out = ref_out if isinstance(ref_out, tuple) else (ref_out,)
        error = _graph_error(tuned_out, ref_out)
        if error <= tuning.tolerance:
            report.graph_error = error
            if attempts:
                report.note = _attempts_note(attempts) + f": over {tuning.tolerance:g}, hence the stricter kernels"
            fn.tuning = report
            if tuning.keep_faster:
                if tuned is not None:
                    fn = _rounded_activations(fn, tuned, weights, tuning, lower, heuristic, ref_out, inputs, call, packed, stats)
                return _faster(fn, heuristic, inputs, call)
            return fn
        attempts.append((tuning.tolerance * factor, error))
    raise ToleranceError(
        f"the tuned graph's output differs from the fp32 path's by {min(e for _, e in attempts):.3g} (max error relative "
        f"to the largest magnitude) at best, over the tolerance {tuning.tolerance:g} ({_attempts_note(attempts)}): the "
        "kernels' errors accumulate; raise the tolerance, or compile with tune='off'"
    )


def _tune(candidate: ModuleOp, weights, inputs, tuning: Tuning, options: CompileOptions, factor: float, *, first: bool,
          stats: CompileStats):
    """The paths of ``candidate`` pinned within ``factor`` of the tolerance (measuring only on
    the ``first`` attempt; the later ones read what it recorded)."""
    from tensor_graphs.runtime_support.threads import get_num_threads
    from tensor_graphs.tuning.tuner import tune_graph

    t0 = time.perf_counter()
    report = tune_graph(candidate, weights, inputs, tolerance=tuning.tolerance * factor,
                        tune=tuning.tune if first else "cached", target=module_target(candidate), threads=get_num_threads(),
                        pack_weights=options.pack_weights, db=tuning.db, max_seconds=tuning.max_seconds,  # type: ignore[arg-type]
                        progress=tuning.progress, device=options.device)
    report.tolerance = tuning.tolerance
    report.kernel_tolerance = tuning.tolerance * factor
    stats.add("tuning", time.perf_counter() - t0)
    return report


def _rounded_activations(fn: CompiledGraph, tuned: ModuleOp, weights, tuning: Tuning, options: CompileOptions,
                         heuristic: CompiledGraph, ref_out, inputs, call, packed, stats: CompileStats) -> CompiledGraph:
    """The tuned graph (``tuned``: its tg module) once more with the activations that residual
    adds read rounded to bf16 (`narrow_gemm_output.ROUND_ACTIVATIONS`: the GEMMs writing them
    write bf16, the adds widen them: the traffic of a ResNet's residual stream halved), where
    the target has AMX-BF16 and the tuner put a GEMM on bf16 panels: a path of the whole graph,
    measured as it: kept where its error against the fp32 heuristic graph is within the
    tolerance and it runs faster on the inputs (interleaved calls, medians), else the tuned
    graph; the report says which and why (`_may_round_activations` tells whether to try)."""
    from tensor_graphs.transforms.narrow_gemm_output import ROUND_ACTIVATIONS

    report = fn.tuning
    if _bf16_gemm_outputs(tuned, options, rounding=True) <= _bf16_gemm_outputs(tuned, options, rounding=False):
        return fn  # (no residual add reads an activation a GEMM on AMX could write as bf16)
    tuned.attributes[ROUND_ACTIVATIONS] = UnitAttr()
    rounded = compile_module(tuned, weights, options, states=heuristic.states, packed=packed, verify=False, optimize=False,
                             stats=stats)
    error = _graph_error(rounded(*inputs, **call), ref_out)
    what = f"activations residual adds read rounded to bf16: whole-graph error {error:.3g}"
    if error > tuning.tolerance:
        report.note = (report.note + "; " if report.note else "") + f"{what}, over {tuning.tolerance:g}: not taken"
        return fn
    rounded_ms, tuned_ms = _median_ms((rounded, fn), inputs, call)
    taken = rounded_ms < tuned_ms
    report.note = (report.note + "; " if report.note else "") + \
        f"{what}, {rounded_ms:.3f} ms against {tuned_ms:.3f} ms per call: {'taken' if taken else 'not taken'}"
    if not taken:
        return fn
    report.graph_error = error
    rounded.tuning = report
    return rounded


def _may_round_activations(report, module: ModuleOp, options: CompileOptions) -> bool:
    """Whether `_rounded_activations` may apply: on a CPU with AMX-BF16, a GEMM tuned onto bf16."""
    from tensor_graphs.target import AMX_BF16

    return options.device == "cpu" and AMX_BF16 in module_target(module).extensions \
        and any("bf16" in c.chosen.variant for c in report.choices if c.tuned)


def _bf16_gemm_outputs(module: ModuleOp, options: CompileOptions, rounding: bool) -> int:
    """How many GEMMs of ``module`` (tg level) write bf16 once lowered to buf (a copy of it; with
    ``rounding``: `narrow_gemm_output.ROUND_ACTIVATIONS`), a fraction of a compile's time."""
    from xdsl.context import Context

    from tensor_graphs.dialects import buffer as buf
    from tensor_graphs.passes import buffer_pipeline, build_pipeline
    from tensor_graphs.transforms.narrow_gemm_output import ROUND_ACTIVATIONS

    copy = module.clone()
    if rounding:
        copy.attributes[ROUND_ACTIVATIONS] = UnitAttr()
    build_pipeline(buffer_pipeline(options.pack_weights)).apply(Context(), copy)
    return sum(1 for op in copy.walk() if isinstance(op, buf.PackedMatmulOp) and op.output.type.element_type != f32)


def _graph_error(out, ref_out: tuple) -> float:
    """The largest error of a graph's outputs ``out`` against ``ref_out`` (the fp32 heuristic
    graph's), each relative to its largest reference magnitude (`measure.errors`)."""
    from tensor_graphs.tuning.measure import errors

    return max((errors(a, b)[1] for a, b in zip(out if isinstance(out, tuple) else (out,), ref_out)), default=0.0)


def _attempts_note(attempts: list[tuple[float, float]]) -> str:
    return "whole-graph error " + ", ".join(f"{e:.3g} with each kernel within {k:g}" for k, e in attempts)


def _median_ms(graphs: Sequence[CompiledGraph], inputs, call, rounds: int = 5) -> list[float]:
    """Each graph's median milliseconds a call on ``inputs``, the graphs called in turn ``rounds`` times."""
    times: list[list[float]] = [[] for _ in graphs]
    for _ in range(rounds):
        for g, spent in zip(graphs, times):
            t0 = time.perf_counter()
            g(*inputs, **call)
            spent.append(time.perf_counter() - t0)
    return [1e3 * float(np.median(spent)) for spent in times]


def _faster(fn: CompiledGraph, heuristic: CompiledGraph, inputs, call) -> CompiledGraph:
    """The faster of the tuned graph and the heuristic one on ``inputs`` (interleaved calls,
    medians): each tuned path was faster alone, but a pinned path can cost a buf-level fusion."""
    tuned_ms, heuristic_ms = _median_ms((fn, heuristic), inputs, call)
    report = fn.tuning
    report.graph_ms = (tuned_ms, heuristic_ms)
    if tuned_ms <= heuristic_ms:
        return fn
    report.note = (report.note + "; " if report.note else "") + "the heuristic graph ran faster on the example inputs: it is the one returned"
    heuristic.tuning = report
    return heuristic
