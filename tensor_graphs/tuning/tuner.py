"""Choosing each kernel's path: the fastest measured one within the user's tolerance.

For a `tg`-level graph (after the tg optimisation), `tune_graph` goes over every op the kernel
registry runs (`paths.kernel_paths`) and its candidates (`paths.candidates`: the applicable
variants and their parameters), looks each candidate up in the timing database
(`database.TuningDatabase`, this machine's records only) and, as ``tune`` says, measures what is
missing or everything (`measure.measure`: the op alone, its real operands, time and error
against the float64 evaluator). Then, per op:

- the fastest recorded candidate whose error (max relative to the largest reference magnitude)
  is within ``tolerance`` is pinned on the op (`paths.pin`: ``tg.kernel`` and its parameters),
  which `convert-tensor-to-buffer` honours, or
- with no record within the tolerance, the op is left to the heuristic (the registry's first
  applicable variant, the target's default parameters), exactly as without tuning.

``tune``: ``"cached"`` reads the database only; ``"missing"`` measures the candidates it has no
record of; ``"all"`` measures every candidate again; ``"off"`` uses no database (the report then
only says what the heuristic chose). Ops of the same form at the same shapes (a transformer's
layers) are measured once. Measuring is resumable: each record is stored as soon as it is made,
and ``max_seconds`` stops the measuring (what is left is measured by the next call; each call
measures one path at least, so that a run with any limit advances).

The `TuningReport` is what ``fn.explain()`` prints: per kernel, the path chosen and why, and the
alternatives' times and errors.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tensor_graphs.lowering.tensor_to_buffer.kernels import error_floor
from tensor_graphs.target import Target
from tensor_graphs.tuning.database import KernelSignature, Record, TuningDatabase
from tensor_graphs.tuning.measure import Standalone, measure, standalone
from tensor_graphs.tuning.paths import Candidate, OpPaths
from tensor_graphs.tuning.report import (
    TUNE_MODES,
    Choice,
    PathResult,
    PathSpace,
    ToleranceError,
    TuningReport,
    _label,
    op_candidates,
    unmeasured_choice,
)

#: the report's types are the tuner's too
__all__ = ["TUNE_MODES", "Choice", "PathResult", "PathSpace", "ToleranceError", "TuningReport", "evaluate_values",
           "tune_graph"]

def _signature(paths: OpPaths, alone: Standalone, candidate: Candidate) -> KernelSignature:
    values = [*paths.op.operands, *paths.op.results]
    return KernelSignature(
        paths.name, candidate.variant,
        tuple(tuple(v.type.get_shape()) for v in values),  # type: ignore[attr-defined]
        tuple(str(v.type.get_element_type()) for v in values),  # type: ignore[attr-defined]
        dict(candidate.params), alone.form,
    )


def _entry(module: ModuleOp) -> func.FuncOp:
    fns = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    if len(fns) != 1:
        raise ValueError(f"tuning needs a module of one function, got {len(fns)}")
    return fns[0]


def evaluate_values(module: ModuleOp, inputs: Sequence[np.ndarray], weights: Mapping[str, np.ndarray]) -> dict[SSAValue, np.ndarray]:
    """Every value of the module's function on ``inputs``, by the NumPy evaluator (float64
    inside each op, rounded to the value's type)."""
    from tensor_graphs.dialects.dense import numpy_dtype_of
    from tensor_graphs.transforms.evaluate import evaluate_op

    block = _entry(module).body.block
    if len(inputs) != len(block.args):
        raise ValueError(f"the graph takes {len(block.args)} input(s), got {len(inputs)}")
    env: dict[SSAValue, np.ndarray] = {
        a: np.asarray(x).astype(numpy_dtype_of(a.type.get_element_type()))  # type: ignore[attr-defined]
        for a, x in zip(block.args, inputs)
    }
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            break
        env[op.results[0]] = evaluate_op(op, [env[v] for v in op.operands], weights)
    return env


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="tuning kernel paths", unit="path", disable=not enabled or total == 0, leave=False)


def tune_graph(
    module: ModuleOp,
    weights: Mapping[str, np.ndarray],
    inputs: Sequence[np.ndarray],
    *,
    tolerance: float,
    tune: str = "cached",
    target: Target,
    threads: int = 1,
    pack_weights: bool = True,
    db: TuningDatabase | None = None,
    max_seconds: float | None = None,
    progress: bool = True,
    device: str = "cpu",
) -> TuningReport:
    """Pin the chosen path on every op of ``module`` (a tg module after the tg optimisation,
    changed in place) and report the choices; see the module doc. ``device="cuda"``: the GPU's
    variants (`PathSpace.gpu`), measured on the GPU, recorded for it."""
    if tune not in TUNE_MODES:
        raise ValueError(f"tune must be one of {', '.join(map(repr, TUNE_MODES))}, got {tune!r}")
    if not (tolerance >= 0):
        raise ValueError(f"tolerance must be a non-negative number, got {tolerance!r}")
    space = PathSpace.cpu(target, threads, pack_weights) if device == "cpu" else PathSpace.gpu()
    machine = space.machine(threads)
    report = TuningReport(tune, float(tolerance), machine.cpu)
    start = time.perf_counter()
    ops: list[tuple[OpPaths, Standalone | None, list[Candidate]]] = []
    for paths in space.ops(module):
        cands = op_candidates(space, paths)
        alone = standalone(paths.op) if len(cands) > 1 and tune != "off" else None
        ops.append((paths, alone, cands))
    owned = db is None and tune != "off"
    if owned:
        db = TuningDatabase()
    try:
        records: dict[tuple, Record | None] = {}
        failed: dict[tuple, str] = {}
        todo: list[tuple[OpPaths, Standalone, Candidate]] = []
        for paths, alone, cands in ops:
            if alone is None:
                continue
            alone_applies = space.alone(alone.op)
            for c in cands:
                key = (alone.form, c.key)
                if key in records:
                    continue
                if (why := alone_applies.get(c.variant)) is not None:  # it depends on the rest of the graph
                    records[key], failed[key] = None, f"cannot be measured alone: {why}"
                    continue
                if (floor := error_floor(paths.op, c.variant)) > tolerance:  # bf16 / int8 under a tight tolerance
                    records[key], failed[key] = None, f"not measured: its arithmetic errs by {floor:g} or more, over the tolerance"
                    continue
                records[key] = db.get(_signature(paths, alone, c), machine) if tune != "all" else None  # type: ignore[union-attr]
                if records[key] is None and tune in ("missing", "all"):
                    todo.append((paths, alone, c))
        if todo:  # every op's variants at their defaults first, then the parameter sweeps: a time limit cuts the sweeps
            todo.sort(key=lambda t: bool(t[2].params))
            _measure_all(todo, module, weights, inputs, target, machine, db, records, failed, report, max_seconds, progress,  # type: ignore[arg-type]
                         space.device)
        for paths, alone, cands in ops:
            report.choices.append(_choose(paths, alone, cands, records, failed, tolerance, space))
    finally:
        if owned and db is not None:
            db.close()
    report.seconds = time.perf_counter() - start
    return report


def _measure_all(todo, module, weights, inputs, target, machine, db, records, failed, report, max_seconds, progress,
                 device: str = "cpu") -> None:
    """Measure each (op, form, candidate) of ``todo``, storing each record as it is made."""
    env = evaluate_values(module, inputs, weights)
    cold = sum(np.asarray(w).nbytes for w in weights.values()) > _last_cache_bytes(target, device)
    start = time.perf_counter()
    with _progress(len(todo), progress) as bar:
        for i, (paths, alone, c) in enumerate(todo):
            if i > 0 and max_seconds is not None and time.perf_counter() - start > max_seconds:  # one path at least: every run advances
                report.unmeasured = len(todo) - i
                break
            bar.set_postfix_str(f"{paths.name} {c}", refresh=False)
            key = (alone.form, c.key)
            try:
                m = measure(alone, c, [env[v] for v in alone.arguments], weights, env[paths.op.results[0]],
                            target=target, cold=cold, device=device)
            except Exception as e:  # noqa: BLE001 - a candidate that cannot be built is reported, not fatal
                failed[key] = " ".join(str(e).split())[:200]
            else:
                record = Record.of_times(_signature(paths, alone, c), machine, m.times_ns, m.max_abs_err, m.max_rel_err)
                db.put(record)
                records[key] = record
                report.measured += 1
            bar.update(1)


def _last_cache_bytes(target: Target, device: str) -> int:
    """The cache a graph's weights stream through: the CPU's L3, the GPU's L2 (none under
    Triton's interpreter: its times are not worth a flush)."""
    if device == "cpu":
        return target.caches.l3
    import torch

    from tensor_graphs.runtime_support.triton_graph import device_for

    where = device_for(device)
    return torch.cuda.get_device_properties(where).L2_cache_size if where != "cpu" else 1 << 62


def _choose(paths: OpPaths, alone: Standalone | None, cands: list[Candidate], records, failed, tolerance: float,
            space: PathSpace) -> Choice:
    if (unmeasured := unmeasured_choice(paths, cands, space, measuring=alone is not None)) is not None:
        return unmeasured
    heuristic = Candidate(paths.chosen)
    label = _label(paths.op)
    results = [PathResult(c, records.get((alone.form, c.key)), failed.get((alone.form, c.key))) for c in cands]
    if any(r.failed is not None and r.candidate.key == heuristic.key for r in results):
        return Choice(label, heuristic, heuristic, "heuristic: its path cannot be measured alone", results)
    measured = [r for r in results if r.record is not None]
    within = [r for r in measured if r.record.max_rel_err <= tolerance]  # type: ignore[union-attr]
    if not measured:
        return Choice(label, heuristic, heuristic, "heuristic: no record", results)
    if not within:
        return Choice(label, heuristic, heuristic, "heuristic: no measured path within the tolerance", results)
    best = min(within, key=lambda r: r.record.median_ns)  # type: ignore[union-attr]
    rejected = [r for r in measured if r.record.max_rel_err > tolerance]  # type: ignore[union-attr]
    reason = "fastest measured within the tolerance"
    if rejected:
        reason += "; rejected over it: " + ", ".join(f"{r.candidate} ({r.record.max_rel_err:.1e})" for r in rejected)  # type: ignore[union-attr]
    if len(within) < len(results):
        missing = len(results) - len(measured)
        if missing:
            reason += f"; {missing} path(s) without a record"
    if best.candidate.key != heuristic.key:
        space.pin(paths.op, best.candidate)
    return Choice(label, best.candidate, heuristic, reason, results)
