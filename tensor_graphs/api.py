"""The public Python surface: `compile`, `compile_module`, `export`, `set_num_threads`,
`profile`, and for token-by-token generation with a KV cache `compile_decoder`, `generate`,
`estimate_memory`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.passes import (
    LLVM_PIPELINE,
    PROFILED_LLVM_PIPELINE,
    BUFFER_PIPELINE,
    TENSOR_PIPELINE,
    buffer_pipeline,
    tensor_pipeline,
    build_pipeline,
)
from tensor_graphs.runtime_support.executable import CompiledGraph
from tensor_graphs.runtime_support.profile import ProfileReport
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
    tg_passes: Sequence[str] = (),
    states: Mapping[str, np.ndarray] | None = None,
    profile: bool = False,
    pack_weights: bool = True,
    packed: dict[str, np.ndarray] | None = None,
    verify: bool = True,
    target: Target | str | None = None,
    optimize: bool = True,
    tuning: Tuning | None = None,
    device: str = "cpu",
) -> CompiledGraph:
    """Lower ``module`` (at the aten, tg, buf or llvm level) to native code and bind ``weights``.

    The module is lowered in place. With ``keep_ir`` the text of every level it passes through
    is kept for ``fn.ir(level)``. ``tg_passes`` run after the tg-level optimisation (e.g.
    ``introduce-kv-cache{capacity=256}``); ``states`` binds persistent state arrays by name
    (missing ones are allocated zeroed). ``profile`` times every kernel call
    (``convert-buffer-to-llvm{profile=true}``) for ``fn.profile(...)``. ``pack_weights``: GEMMs
    by a weight read a copy packed into column panels when the graph is loaded (the fast
    path; ``False`` reads every weight where it is, through BLAS). ``packed``: packed weights
    already made for another graph of the same weights (filled with the ones made here).
    ``verify``: check the module first (every op's verifier and SSA dominance; a failure raises
    `diagnostics.IRError` naming the op and where it is); `compile` skips it for the modules its
    importer builds. ``target``: the machine to compile for (`tensor_graphs.target`: a `Target`
    or a name such as ``"x86-64-v3"``, ``"znver3"``; default ``TG_TARGET``, else this CPU); a
    module already lowered to buf or llvm keeps the target it was lowered for. ``optimize``:
    run the tg-level optimisation on a tg module (``False``: lower its ops as they are, as
    the tuner does to time one kernel path). ``tuning``: choose each kernel's path from the
    timing database within a tolerance (`Tuning`; a module at the aten or tg level), checked on
    the example inputs against the fp32 heuristic path; ``fn.explain()`` says what was chosen.
    ``device``: ``"cpu"`` (the default) or ``"cuda"``: Triton kernels and one replayed launch
    plan on an NVIDIA GPU (`_compile_for_gpu`; a module at the aten or tg level, or planned
    buf); there ``packed`` holds the weights' device copies, shared the same way.
    """
    from tensor_graphs.codegen.llvm.jit import jit_compile
    from tensor_graphs.diagnostics import verify_module

    if device != "cpu":
        return _compile_for_gpu(module, weights, device, keep_ir=keep_ir, stats=stats, tg_passes=tg_passes,
                                states=states, verify=verify, optimize=optimize, tuning=tuning, profile=profile,
                                bound=packed)
    if verify:
        verify_module(module)

    stats = stats if stats is not None else CompileStats()
    lowering = _Lowering(module, stats, keep_ir)
    ir, run, keep = lowering.ir, lowering.run, lowering.keep
    level = module_level(module)
    _set_target(module, level, target)
    cached = _from_cache(module, level, weights, states, packed, keep_ir, stats, tg_passes, profile, pack_weights, optimize, tuning)
    if isinstance(cached, CompiledGraph):
        return cached
    if profile and level == "llvm" and "tg.profile" not in module.attributes:
        raise ValueError(
            "compile_module(profile=True): this module is already at the llvm level, lowered without "
            "profiling; pass a module at the aten, tg or buf level (or lower it with convert-buffer-to-llvm{profile=true})"
        )
    keep(level)
    if level in ("aten", "tg"):
        lowering.to_tg(level, pack_weights, optimize, tg_passes)
    report = None
    if level in ("aten", "tg") and tuning is not None and tuning.tune != "off":
        fn = _compile_tuned(module, weights or {}, tuning, states=states, packed=packed, keep_ir=keep_ir,
                            profile=profile, pack_weights=pack_weights, stats=stats)
        for k, v in ir.items():  # the levels before tg (the aten module)
            fn._ir.setdefault(k, v)
        return fn
    if level in ("aten", "tg"):
        t0 = time.perf_counter()
        report = _heuristic_report(module, pack_weights)
        stats.seconds["kernel paths"] = time.perf_counter() - t0
        run("tg -> buf", buffer_pipeline(pack_weights))
        keep("buf")
    elif level == "buf" and any(op.name == "buf.alloc" for op in module.walk()):
        run("plan memory", BUFFER_PIPELINE[1:])
        keep("buf")
    if level != "llvm":
        run("buf -> llvm", PROFILED_LLVM_PIPELINE if profile else LLVM_PIPELINE)
    t0 = time.perf_counter()
    native = jit_compile(module)
    stats.seconds["llvm jit"] = time.perf_counter() - t0
    if keep_ir:
        ir["llvm"] = native.ir_text
    fn = CompiledGraph(native, dict(weights or {}), ir, states=states, packed=packed)
    fn.tuning = report
    if cached is not None and fn._native.object_code is not None:
        from tensor_graphs.codegen.llvm.object_cache import Entry, LazyText

        cache, key = cached
        cache.put(key, Entry(fn._native.object_code, LazyText.of(fn._native.ir_text), fn.signature,
                             {k: LazyText.of(v) for k, v in ir.items()}, report))
    return fn


def _compile_for_gpu(module: ModuleOp, weights, device: str, *, keep_ir: bool, stats: CompileStats | None,
                     tg_passes: Sequence[str], states, verify: bool, optimize: bool, tuning: Tuning | None, profile: bool,
                     bound: dict | None = None):
    """`compile_module` for ``device="cuda"``: the tg-level optimisation without load-time weight
    transforms, then `convert-tensor-to-triton` (buffers, the planned arena, one Triton kernel per
    buf kernel; a planned buf module goes straight to the kernels), bound by
    `runtime_support.triton_graph.TritonGraph` (``bound``: weights already on the device, by
    name, shared with another graph and filled with the ones uploaded here). Without a GPU (and
    without ``TRITON_INTERPRET=1``) a `DeviceError` says so before any work."""
    from tensor_graphs.diagnostics import verify_module
    from tensor_graphs.runtime_support.triton_graph import GpuCompiledGraph, TritonGraph, device_for

    torch_device = device_for(device)
    if verify:
        verify_module(module)
    level = module_level(module)
    if level not in ("aten", "tg", "buf"):
        raise ValueError(f"device='cuda' compiles a module at the aten, tg or (planned) buf level, got one at the {level} level")
    stats = stats if stats is not None else CompileStats()
    lowering = _Lowering(module, stats, keep_ir)
    lowering.keep(level)
    if level != "buf":
        lowering.to_tg(level, False, optimize, tg_passes)  # no load-time weight transforms on the GPU
    if level != "buf" and tuning is not None and tuning.tune != "off":
        bound = {} if bound is None else bound  # the heuristic and the tuned graph: one device copy of the weights
        fn = _compile_tuned(module, weights or {}, tuning, states=states, packed=bound, keep_ir=keep_ir, profile=profile,
                            pack_weights=False, stats=stats, device=device)
        for k, v in lowering.ir.items():  # the levels before tg (the aten module)
            fn._ir.setdefault(k, v)
        return fn
    lowering.run("tg -> triton", ["convert-tensor-to-triton"])
    lowering.keep("buf")
    t0 = time.perf_counter()
    graph = TritonGraph(module, weights or {}, torch_device, states=states, bound=bound)
    stats.seconds["bind on the device"] = stats.seconds.get("bind on the device", 0.0) + time.perf_counter() - t0
    return GpuCompiledGraph(graph, lowering.ir, module, weights)  # type: ignore[return-value]


@dataclass
class _Lowering:
    """Named passes run on one module, each phase timed into ``stats``; with ``keep_ir`` the
    module's text kept at each level it reaches (``fn.ir(level)``)."""

    module: ModuleOp
    stats: CompileStats
    keep_ir: bool
    ir: dict[str, str] = field(default_factory=dict)
    ctx: object = field(default_factory=lambda: _context())  # the xDSL Context of the passes

    def run(self, phase: str, passes: Sequence[str]) -> None:
        t0 = time.perf_counter()
        build_pipeline(passes).apply(self.ctx, self.module)
        self.stats.seconds[phase] = self.stats.seconds.get(phase, 0.0) + time.perf_counter() - t0

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


def _from_cache(module, level, weights, states, packed, keep_ir, stats, tg_passes, profile, pack_weights, optimize, tuning):
    """A graph compiled before from the same module and options (`object_cache`, graph
    entries): the `CompiledGraph` on a hit; on a miss (cache, key) to store the result under;
    None when the cache is off or does not apply (a module at the buf or llvm level, or kernel
    paths tuned from the database, which can change between compiles)."""
    from tensor_graphs.codegen.llvm.object_cache import CompileCache, digest

    if level not in ("aten", "tg") or (tuning is not None and tuning.tune != "off"):
        return None
    cache = CompileCache.default()
    if cache is None:
        return None
    t0 = time.perf_counter()
    options = repr((level, tuple(tg_passes), profile, pack_weights, optimize, keep_ir))
    key = digest("graph", str(module), options)
    entry = cache.get(key)
    if entry is None or entry.signature is None:
        stats.seconds["cache lookup"] = time.perf_counter() - t0
        return cache, key
    from tensor_graphs.codegen.llvm.jit import load_native
    from tensor_graphs.target import of_module

    native = load_native(entry.object_code, entry.signature, entry.llvm_ir, of_module(module))
    fn = CompiledGraph(native, dict(weights or {}), dict(entry.ir) if keep_ir else {}, states=states, packed=packed)
    fn.tuning = entry.report
    stats.seconds["from cache"] = time.perf_counter() - t0
    return fn


@dataclass
class Tuning:
    """How `compile_module` chooses kernel paths (`tensor_graphs.tuning.tuner`): ``tune`` is
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


#: Per-kernel tolerances tried in turn, as fractions of the user's, until the tuned graph's
#: accumulated error is within the user's tolerance (each kernel within it is no guarantee that
#: their sum is: GPT-2's int8 GEMVs, each ~6e-3, add up to 2.4e-2 on the logits).
BACKOFF = (1.0, 0.25, 1 / 16, 1 / 64)


def _heuristic_report(module: ModuleOp, pack_weights: bool):
    """The kernel paths the heuristic takes (``fn.explain()`` of an untuned graph)."""
    from tensor_graphs.runtime_support.threads import get_num_threads
    from tensor_graphs.tuning.tuner import tune_graph

    return tune_graph(module, {}, [], tolerance=0.0, tune="off", target=_module_target(module),
                      threads=get_num_threads(), pack_weights=pack_weights, progress=False)


def _compile_tuned(module: ModuleOp, weights, tuning: Tuning, *, states=None, packed=None, keep_ir=True, profile=False,
                   pack_weights=True, stats: CompileStats | None = None, ir=None, heuristic_module=None,
                   device: str = "cpu") -> CompiledGraph:
    """``module`` (tg level, optimised) with the kernel paths ``tuning`` chooses, checked on its
    inputs against the fp32 heuristic graph (``heuristic_module``: that graph's module already
    lowered, else a copy of ``module``): the fastest paths within the tolerance per kernel, then,
    while the whole graph's error exceeds the tolerance, within a stricter one per kernel
    (`BACKOFF`); `ToleranceError` when even the strictest exceeds it. The faster of the tuned and
    the heuristic graph is returned (unless ``tuning.keep_faster`` is off). ``device="cuda"``:
    the GPU's variants, measured and compiled for the GPU."""
    from tensor_graphs.runtime_support.threads import get_num_threads
    from tensor_graphs.tuning.measure import errors
    from tensor_graphs.tuning.tuner import ToleranceError, tune_graph

    stats = stats if stats is not None else CompileStats()
    if tuning.tune in ("missing", "all") and not tuning.inputs:
        raise ValueError(f"tune={tuning.tune!r} measures kernel paths on the example inputs: pass them")
    inputs = [np.ascontiguousarray(np.asarray(_as_numpy(x))) for x in tuning.inputs]
    target = _module_target(module)
    lower = dict(keep_ir=keep_ir, profile=profile, pack_weights=pack_weights, packed=packed, verify=False, optimize=False,
                 stats=stats, device=device)
    pristine = module.clone()
    heuristic: CompiledGraph | None = None
    attempts: list[tuple[float, float]] = []
    for i, factor in enumerate(BACKOFF):
        candidate = pristine.clone()
        t0 = time.perf_counter()
        report = tune_graph(candidate, weights, inputs, tolerance=tuning.tolerance * factor,
                            tune=tuning.tune if i == 0 else "cached", target=target, threads=get_num_threads(),
                            pack_weights=pack_weights, db=tuning.db, max_seconds=tuning.max_seconds,  # type: ignore[arg-type]
                            progress=tuning.progress, device=device)
        report.tolerance = tuning.tolerance
        report.kernel_tolerance = tuning.tolerance * factor
        stats.seconds["tuning"] = stats.seconds.get("tuning", 0.0) + time.perf_counter() - t0
        if heuristic is None:
            heuristic = compile_module(heuristic_module if heuristic_module is not None else pristine.clone(), weights,
                                       states=states, **lower)
        if not any(c.tuned for c in report.choices):
            heuristic.tuning = report
            if attempts:
                report.note = _attempts_note(attempts) + f": over {tuning.tolerance:g}; the heuristic paths are left"
            return heuristic
        if not inputs:
            raise ValueError("compile with tuned kernel paths checks the whole graph on the example inputs: pass them")
        fn = compile_module(candidate, weights, states=heuristic.states, **lower)
        call = {"past": 0} if fn.states else {}
        tuned_out, ref_out = fn(*inputs, **call), heuristic(*inputs, **call)
        tuned_out = tuned_out if isinstance(tuned_out, tuple) else (tuned_out,)
        ref_out = ref_out if isinstance(ref_out, tuple) else (ref_out,)
        error = max((errors(a, b)[1] for a, b in zip(tuned_out, ref_out)), default=0.0)
        if error <= tuning.tolerance:
            report.graph_error = error
            if attempts:
                report.note = _attempts_note(attempts) + f": over {tuning.tolerance:g}, hence the stricter kernels"
            fn.tuning = report
            return _faster(fn, heuristic, inputs, call) if tuning.keep_faster else fn
        attempts.append((tuning.tolerance * factor, error))
    raise ToleranceError(
        f"the tuned graph's output differs from the fp32 path's by {min(e for _, e in attempts):.3g} (max error relative "
        f"to the largest magnitude) at best, over the tolerance {tuning.tolerance:g} ({_attempts_note(attempts)}): the "
        "kernels' errors accumulate; raise the tolerance, or compile with tune='off'"
    )


def _attempts_note(attempts: list[tuple[float, float]]) -> str:
    return "whole-graph error " + ", ".join(f"{e:.3g} with each kernel within {k:g}" for k, e in attempts)


def _faster(fn: CompiledGraph, heuristic: CompiledGraph, inputs, call) -> CompiledGraph:
    """The faster of the tuned graph and the heuristic one on ``inputs`` (interleaved calls,
    medians): each tuned path was faster alone, but a pinned path can cost a buf-level fusion."""
    times: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(5):
        for k, g in enumerate((fn, heuristic)):
            t0 = time.perf_counter()
            g(*inputs, **call)
            times[k].append(time.perf_counter() - t0)
    tuned_ms, heuristic_ms = (1e3 * float(np.median(times[k])) for k in (0, 1))
    report = fn.tuning
    report.graph_ms = (tuned_ms, heuristic_ms)
    if tuned_ms <= heuristic_ms:
        return fn
    report.note = (report.note + "; " if report.note else "") + "the heuristic graph ran faster on the example inputs: it is the one returned"
    heuristic.tuning = report
    return heuristic


def compile(
    model,
    example_inputs: Sequence,
    *,
    keep_ir: bool = True,
    stats: CompileStats | None = None,
    profile: bool = False,
    pack_weights: bool = True,
    target: Target | str | None = None,
    tolerance: float = 1e-5,
    tune: str = "off",
    tuning_db=None,
    max_tuning_seconds: float | None = None,
    device: str = "cpu",
) -> CompiledGraph:
    """Compile a ``torch.nn.Module`` for inputs shaped like ``example_inputs``.

    Returns a callable backed by ONE native function: ``fn(*inputs)`` takes NumPy arrays or
    torch tensors (all one kind) and returns the same kind. With ``profile`` every kernel call
    is timed: ``print(fn.profile(*inputs))`` shows where the time goes. With ``pack_weights``
    (the default) the weights of GEMMs are packed into column panels once, here: the graph
    then reads those copies (``fn.repack()`` after changing the parameters in place); with
    ``False`` it reads the model's parameter memory itself. ``target``: the machine to compile
    for (see `compile_module`; ``tg.compile(model, (x,), target="x86-64-v3")``).

    Kernel paths (`tensor_graphs.tuning`): per kernel, the fastest path measured on this machine
    whose error is within ``tolerance`` (max error relative to the largest reference
    magnitude), from the timing database (``tuning_db``: a path or `TuningDatabase`; default
    ``TG_TUNING_DB`` or the user cache). ``tune``: ``"off"`` (default: the heuristic paths),
    ``"cached"`` (recorded paths only; no record: the heuristic), ``"missing"`` (measure the
    paths not recorded, at most ``max_tuning_seconds``), ``"all"`` (measure every path again).
    A tuned graph is checked on ``example_inputs`` against the fp32 heuristic graph and
    `ToleranceError` raised beyond the tolerance. ``fn.explain()`` prints each kernel's path,
    why, and the alternatives' times and errors.

    ``device="cuda"``: Triton kernels on an NVIDIA GPU, the call one CUDA-graph replay
    (``fn.ir("triton")``: the kernels); without a GPU a `DeviceError` (or, with
    ``TRITON_INTERPRET=1``, Triton's interpreter on the CPU: slow, for tests).
    """
    from tensor_graphs.frontend.importer import _forget_generated_source, export_program, import_exported_program

    if device != "cpu":
        from tensor_graphs.runtime_support.triton_graph import device_for

        device_for(device)  # no GPU: say so before exporting anything
    stats = stats if stats is not None else CompileStats()
    with _forget_generated_source():  # as import_model, timed in two: torch's part and ours
        t0 = time.perf_counter()
        program = export_program(model, tuple(_as_torch(x) for x in example_inputs))
        t1 = time.perf_counter()
        graph = import_exported_program(program)
    stats.seconds["torch.export"] = t1 - t0
    stats.seconds["import"] = time.perf_counter() - t1
    db = _open_db(tuning_db) if tune != "off" else None
    try:
        fn = compile_module(
            graph.module, graph.weights, keep_ir=keep_ir, stats=stats, profile=profile, pack_weights=pack_weights,
            verify=False, target=target,
            tuning=Tuning(tune, tolerance, tuple(example_inputs), db, max_tuning_seconds), device=device,
        )
        fn.output_structure = graph.structure  # tuples, lists, named tuples, dicts, numbers: as the model returns them
        return fn
    finally:
        if db is not None and db is not tuning_db:
            db.close()


def _open_db(db):
    """A `TuningDatabase`: ``db`` itself, or opened at the path ``db`` (default path: None)."""
    from tensor_graphs.tuning.database import TuningDatabase

    return db if isinstance(db, TuningDatabase) else TuningDatabase(db)


def tune(
    model,
    example_inputs: Sequence,
    *,
    tolerance: float = 1e-5,
    tune: str = "missing",
    tuning_db=None,
    max_seconds: float | None = None,
    pack_weights: bool = True,
    target: Target | str | None = None,
    progress: bool = True,
):
    """Measure the kernel paths of a ``torch.nn.Module`` (`tune_module`: of a module at the aten
    or tg level) on ``example_inputs``: time and error of each path, into the timing database;
    returns the report (`tuning.tuner.TuningReport`: print it).
    ``tune="missing"`` measures what is not recorded (resumable: run it again after a stop or
    ``max_seconds``), ``"all"`` everything again. Later ``tg.compile(model, inputs,
    tune="cached", tolerance=...)`` runs the fastest paths within the tolerance."""
    from tensor_graphs.frontend import import_model

    graph = import_model(model, tuple(_as_torch(x) for x in example_inputs))
    return tune_module(graph.module, graph.weights, [_as_numpy(x) for x in example_inputs], tolerance=tolerance,
                       tune=tune, tuning_db=tuning_db, max_seconds=max_seconds, pack_weights=pack_weights,
                       target=target, progress=progress)


def tune_module(
    module: ModuleOp,
    weights: Mapping[str, np.ndarray],
    example_inputs: Sequence[np.ndarray],
    *,
    tolerance: float = 1e-5,
    tune: str = "missing",
    tuning_db=None,
    max_seconds: float | None = None,
    pack_weights: bool = True,
    target: Target | str | None = None,
    progress: bool = True,
):
    """`tune` for a module at the aten or tg level (changed in place: optimised, paths pinned)."""
    from tensor_graphs.runtime_support.threads import get_num_threads
    from tensor_graphs.tuning.tuner import tune_graph

    level = module_level(module)
    if level not in ("aten", "tg"):
        raise ValueError(f"tuning chooses kernel paths at the tg level: this module is at the {level} level")
    _set_target(module, level, target)
    build_pipeline(tensor_pipeline(pack_weights, TENSOR_PIPELINE if level == "aten" else TG_OPTIMIZE)).apply(_context(), module)
    db = _open_db(tuning_db)
    try:
        return tune_graph(module, weights, [np.asarray(x) for x in example_inputs], tolerance=tolerance, tune=tune,
                          target=_module_target(module), threads=get_num_threads(), pack_weights=pack_weights, db=db,
                          max_seconds=max_seconds, progress=progress)
    finally:
        if db is not tuning_db:
            db.close()


def export(model, example_inputs: Sequence, path: str | Path):
    """Write ``path`` (.mlir at the aten level) and its weights to ``<stem>.safetensors`` beside it."""
    from tensor_graphs.frontend import export_model

    return export_model(model, tuple(_as_torch(x) for x in example_inputs), path)


def load(
    path: str | Path,
    *,
    weights: str | Path | None = None,
    trust_native_code: bool = False,
    keep_ir: bool = True,
    profile: bool = False,
    pack_weights: bool = True,
    target: Target | str | None = None,
) -> CompiledGraph:
    """Compile the module ``tg.export`` wrote to ``path`` (text at the aten, tg or buf level), its
    weights memory-mapped from the safetensors file beside it (the module's ``tg.weights_file``,
    a file of the module's own directory) or from ``weights``: a weight that no GEMM packs is
    read where it lies in the file, never copied; packed ones are copied once into their panels.
    The map lives as long as the returned function.

    The files are data (`frontend.untrusted`): the module is verified, the weights file checked
    as the safetensors library checks it and every weight against the dtype and shape the module
    declares, before anything runs. A module holding native code (the llvm level) is refused
    (`NativeCodeError`) unless ``trust_native_code=True``: its functions would run as they are."""
    from tensor_graphs.diagnostics import parse_module, verify_module
    from tensor_graphs.frontend.untrusted import check_trusted
    from tensor_graphs.frontend.weights import load_weights

    path = Path(path)
    module = parse_module(path.read_bytes(), str(path))
    check_trusted(module, str(path), trust_native_code)
    verify_module(module)
    bound = load_weights(module, path, mmap=True, path=weights)
    return compile_module(module, bound, keep_ir=keep_ir, profile=profile, pack_weights=pack_weights, target=target)


# --------------------------------------------------------------------------- decoding


def _decoder_modules(model, max_seq, batch, prefill_chunk, stats, pack_weights=True, target=None, padding=None, tuning=None,
                     weight_format=None, device="cpu"):
    """Import ``model``'s step at the chunk length and at 1, optimise, add the KV cache (with a
    key-padding mask when ``padding``; None: when ``batch > 1``) and plan memory; returns
    (buf-level modules, weights, chunk, capacity, max_seq, max_position, tuned). With
    ``tuning`` (`Tuning`, its inputs unused: each step gets random token ids) ``tuned`` holds per
    module (its tg-level module before the buffer lowering, the step's `Tuning`), else None; the
    buf-level modules are the heuristic paths (the memory estimate, the tuned graphs' twins)."""
    import torch

    from tensor_graphs.frontend import import_model
    from tensor_graphs.frontend.causal_lm import CausalLMStep, max_positions

    limit = max_positions(model)
    if max_seq is None:
        if limit is None:
            raise ValueError("max_seq is required: the model's config gives no max_position_embeddings")
        max_seq = limit
    if not isinstance(max_seq, int) or max_seq < 1:
        raise ValueError(f"max_seq must be a positive int, got {max_seq!r}")
    if limit is not None and max_seq > limit:
        raise ValueError(f"max_seq = {max_seq} exceeds the model's {limit} positions (max_position_embeddings)")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    if not isinstance(prefill_chunk, int) or prefill_chunk < 1:
        raise ValueError(f"prefill_chunk must be a positive int, got {prefill_chunk!r}")
    if padding is None:
        padding = batch > 1
    if not isinstance(padding, bool):
        raise TypeError(f"padding must be a bool or None, got {padding!r}")
    chunk = min(prefill_chunk, max_seq)
    # a padded last chunk may write up to chunk - 1 rows past the last real position
    capacity = max_seq + chunk - 1
    step = CausalLMStep(model).eval()
    modules, weights, tuned = [], {}, []
    ctx = _context()
    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 2
    # the examples on the model's device (a model already on a GPU exports there)
    where = next((p.device for p in model.parameters()), torch.device("cpu"))
    for length in dict.fromkeys((chunk, 1)):
        ids = torch.zeros((batch, length), dtype=torch.int64, device=where)
        pos = torch.arange(length, dtype=torch.int64, device=where).expand(batch, length).contiguous()
        rows = torch.arange(batch, dtype=torch.int64, device=where) * length + length - 1
        t0 = time.perf_counter()
        graph = import_model(step, (ids, pos, rows))
        stats.seconds["import"] = stats.seconds.get("import", 0.0) + time.perf_counter() - t0
        t0 = time.perf_counter()
        _set_target(graph.module, "aten", target)
        kv = f"introduce-kv-cache{{capacity={capacity}{' padding_mask=true' if padding else ''}}}"
        build_pipeline((*tensor_pipeline(pack_weights), kv)).apply(ctx, graph.module)
        _check_every_layer_cached(graph.module, model)
        if weight_format is not None:
            _pin_weight_format(graph.module, weight_format, pack_weights, device)
        if tuning is not None and tuning.tune != "off":  # tuned later (`_compile_tuned`) from the tg module
            example = (torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(length)), pos.cpu(), rows.cpu())
            step_tuning = Tuning(tuning.tune, tuning.tolerance, example, tuning.db, tuning.max_seconds, tuning.progress,
                                 tuning.keep_faster)
            tuned.append((graph.module.clone(), step_tuning))
        else:
            tuned.append(None)
        build_pipeline(buffer_pipeline(pack_weights)).apply(ctx, graph.module)
        stats.seconds["aten -> buf"] = stats.seconds.get("aten -> buf", 0.0) + time.perf_counter() - t0
        modules.append(graph.module)
        weights.update(graph.weights)
    return modules, weights, chunk, capacity, max_seq, limit, tuned


def _check_every_layer_cached(module: ModuleOp, model) -> None:
    """A ValueError unless `introduce-kv-cache` gave every layer a key and a value cache: an
    attention that no pass turned into a `tg.attention` (a form `fuse-attention` does not know)
    would see only the new tokens of each call, and decode wrong tokens without a word."""
    from tensor_graphs.dialects.tensor import StateOp

    caches = sum(1 for op in module.walk() if isinstance(op, StateOp) and op.state_name.data.startswith("kv.")
                 and op.state_name.data.endswith((".key", ".value")))
    layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    name = type(model).__name__
    if caches == 0:
        raise ValueError(
            f"compile_decoder: no attention of {name} can read a KV cache: none became a tg.attention "
            "(its attention is written in a form fuse-attention does not recognise), so every call would "
            "attend to its new tokens only. Compile its forward with tg.compile instead, or write the "
            "attention with torch.nn.functional.scaled_dot_product_attention")
    if isinstance(layers, int) and caches != 2 * layers:
        raise ValueError(
            f"compile_decoder: {name} has {layers} layers but {caches // 2} of its attentions read a KV cache: "
            "the others (a form fuse-attention does not recognise) would attend to each call's new tokens only")


#: ``compile_decoder(weight_format=...)`` -> the variant its matrix-vector products are pinned to
WEIGHT_FORMATS = {"bf16": "matmul.bf16_weights", "int8": "matmul.int8_weights", "bf16dot": "matmul.bf16_dot"}


def _pin_weight_format(module: ModuleOp, weight_format: str, pack_weights: bool, device: str = "cpu") -> None:
    """Pin every matrix-vector product of ``module`` that the format's variant can run to it
    (on the GPU: `codegen.triton.paths.WEIGHT_FORMATS`)."""
    from tensor_graphs.tuning.paths import gpu_kernel_paths, kernel_paths, pin, pin_gpu

    if device != "cpu":
        from tensor_graphs.codegen.triton.paths import WEIGHT_FORMATS as GPU_FORMATS

        if weight_format not in GPU_FORMATS:
            raise ValueError(f"weight_format={weight_format!r} is not on the GPU path (there: "
                             f"{', '.join(map(repr, GPU_FORMATS))}; on the CPU: {', '.join(map(repr, WEIGHT_FORMATS))})")
        for p in gpu_kernel_paths(module):  # the GEMMs the heuristic runs as matrix-vector products
            if p.chosen == "matmul.gemv" and GPU_FORMATS[weight_format] in p.applicable:
                pin_gpu(p.op, GPU_FORMATS[weight_format])
        return
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format must be one of {', '.join(map(repr, WEIGHT_FORMATS))} or None, got {weight_format!r}")
    if not pack_weights:
        raise ValueError(f"weight_format={weight_format!r} packs the weights at load time: it needs pack_weights=True")
    variant = WEIGHT_FORMATS[weight_format]
    pinned, reasons = 0, []
    for p in kernel_paths(module, choices_only=False):
        if variant in p.applicable:
            pin(p.op, variant)
            pinned += 1
        reasons += [why for name, why in p.rejected if name == variant and "target" in why]
    if not pinned and reasons:  # a format this machine cannot run: say so rather than run float32
        raise ValueError(f"weight_format={weight_format!r}: {reasons[0]}")


def _estimate(modules) -> "DecoderMemory":
    from tensor_graphs.dialects import buffer as buf
    from tensor_graphs.runtime_support.decoder import DecoderMemory

    arena = sum(int(m.attributes["tg.arena_size"].value.data) for m in modules)  # type: ignore[attr-defined]
    states: dict[str, int] = {}
    outputs = 0
    for m in modules:
        for op in m.walk():
            if isinstance(op, buf.StateOp):
                states[op.state_name.data] = buf.nbytes(op.result.type)
        fn = next(op for op in m.walk() if "tg.num_outputs" in op.attributes)
        n_out = fn.attributes["tg.num_outputs"].value.data
        outputs += sum(buf.nbytes(t) for t in fn.function_type.inputs.data[len(fn.function_type.inputs.data) - n_out :])
    # weights (plain or packed) are shared by both graphs; each graph binds its own IR constants
    constants = sum(buf.nbytes(op.result.type) for m in modules for op in m.walk() if isinstance(op, buf.ConstantOp))
    plain: dict[str, int] = {}
    packed: dict[tuple[str, str], int] = {}
    for m in modules:
        for op in m.walk():
            if isinstance(op, buf.WeightOp):
                plain[op.weight_name.data] = buf.nbytes(op.result.type)
            elif isinstance(op, buf.PackedWeightOp):
                packed[(op.weight_name.data, str(op.result.type))] = buf.nbytes(op.result.type)
    return DecoderMemory(
        arena_bytes=arena,
        weight_bytes=sum(plain.values()) + constants,
        state_bytes=sum(states.values()),
        output_bytes=outputs,
        packed_bytes=sum(packed.values()),
    )


def available_memory() -> int | None:
    """Bytes the OS says can still be allocated (Linux ``MemAvailable``), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def estimate_memory(
    model, max_seq: int | None = None, *, batch: int = 1, prefill_chunk: int = 32, pack_weights: bool = True,
    target: Target | str | None = None, padding: bool | None = None,
):
    """Bytes `compile_decoder` with these arguments would hold: arena, weights (the packed
    copies included), KV cache (and its padding mask), outputs.

    Plans memory without generating code or allocating anything (it imports and optimises the
    model: seconds for a large one).
    """
    modules, *_ = _decoder_modules(model, max_seq, batch, prefill_chunk, CompileStats(), pack_weights, target, padding)
    return _estimate(modules)


def compile_decoder(
    model,
    *,
    max_seq: int | None = None,
    batch: int = 1,
    prefill_chunk: int = 32,
    keep_ir: bool = False,
    stats: CompileStats | None = None,
    profile: bool = False,
    pack_weights: bool = True,
    target: Target | str | None = None,
    padding: bool | None = None,
    tolerance: float = 1e-5,
    tune: str = "off",
    tuning_db=None,
    max_tuning_seconds: float | None = None,
    weight_format: str | None = None,
    device: str = "cpu",
):
    """Compile a transformers causal LM for generation with a KV cache: a prefill function for
    chunks of ``prefill_chunk`` tokens and a decode function for one token, compiled once and
    sharing one cache of ``max_seq`` positions (default: the model's maximum). Every prompt
    length up to ``max_seq`` and every position run on these two functions.

    ``padding``: the attentions also read a key-padding mask over the cached positions, so that
    ``generate``/``prefill`` take an ``attention_mask`` (a batch of left-padded prompts of
    different lengths, as transformers pads them). Default (None): when ``batch > 1``. Without
    it a decoder runs exactly as before (no mask operand at all); it still accepts a mask whose
    padding is only whole leading columns (dropped), e.g. one left-padded prompt.

    Raises ``MemoryError`` before generating code or allocating the cache when the arenas, the
    KV cache and the outputs would not fit the memory the OS reports as available. With
    ``profile`` both graphs time their kernels (``dec.decode_graph.profile(..., past=n)``);
    ``pack_weights`` and ``target`` as in `compile` (both graphs share the packed copies).
    ``tolerance``, ``tune``, ``tuning_db``, ``max_tuning_seconds``: kernel paths as in `compile`,
    for each graph (on random token ids; each tuned graph checked against its fp32 heuristic
    twin at ``past = 0``); the decode graph's matrix-vector products may then run over bf16 or
    int8 weights where their error is within the tolerance. ``dec.explain()`` says what ran.
    ``weight_format``: ``"bf16"`` or ``"int8"`` runs every matrix-vector product (the decode
    graph's GEMMs, the prefill graph's LM head over the last token) over weights stored in that
    format, whatever the tolerance (the prefill graph's GEMMs of a chunk of tokens stay float32):
    half or a quarter of the bytes per token, with the error of the rounded weights;
    ``"bf16dot"``: bf16 weights times activations rounded to bf16 by AVX512-BF16 dot products
    (a ValueError on a target without them).
    ``device="cuda"``: both graphs as Triton kernels on an NVIDIA GPU, the KV cache (and the
    padding mask) device tensors shared by both (see `compile`); ``weight_format="bf16"`` runs
    the decode step's matrix-vector products over bfloat16 copies of their weights (made once on
    the device; ``"int8"`` over int8 copies with a scale per output column; `codegen.triton.paths`); ``tune`` chooses each graph's GPU variants (cuBLAS or
    Triton, TF32, bf16 weights for the matrix-vector products...) within the tolerance, measured
    on the GPU. Either graph of a GPU decoder can be profiled (``profile`` or not).
    """
    if device != "cpu":
        from tensor_graphs.runtime_support.triton_graph import device_for

        device_for(device)  # no GPU: say so before importing anything
        pack_weights = False
    stats = stats if stats is not None else CompileStats()
    db = _open_db(tuning_db) if tune != "off" else None
    try:
        return _compile_decoder(model, max_seq, batch, prefill_chunk, keep_ir, stats, profile, pack_weights, target,
                                padding, Tuning(tune, tolerance, (), db, max_tuning_seconds), weight_format, device)
    finally:
        if db is not None and db is not tuning_db:
            db.close()


def _compile_decoder(model, max_seq, batch, prefill_chunk, keep_ir, stats, profile, pack_weights, target, padding, tuning,
                     weight_format, device="cpu"):
    """`compile_decoder` with its database open (``tuning.db``)."""
    from tensor_graphs.runtime_support.decoder import CompiledDecoder

    modules, weights, chunk, capacity, max_seq, limit, tuned = _decoder_modules(
        model, max_seq, batch, prefill_chunk, stats, pack_weights, target, padding, tuning, weight_format, device,
    )
    if device != "cpu":
        return CompiledDecoder(_gpu_decoder_graphs(modules, weights, device, keep_ir, stats, tuned), chunk=chunk, max_seq=max_seq,
                               capacity=capacity, batch=batch, max_position=limit)
    need = _estimate(modules)
    free = available_memory()
    if free is not None and need.new_bytes > free:
        gib = 1 << 30
        raise MemoryError(
            f"compile_decoder(max_seq={max_seq}, batch={batch}) needs {need.new_bytes / gib:.2f} GiB beyond the weights "
            f"(KV cache {need.state_bytes / gib:.2f} GiB, arenas {need.arena_bytes / gib:.2f} GiB, packed weights "
            f"{need.packed_bytes / gib:.2f} GiB, outputs {need.output_bytes / gib:.2f} GiB) but only "
            f"{free / gib:.2f} GiB is available; lower max_seq or batch (or pack_weights=False)"
        )
    graphs = []
    states: dict[str, np.ndarray] | None = None
    packed: dict[str, np.ndarray] = {}  # both graphs read the same packed weights
    for module, tuning in zip(modules, tuned):
        if tuning is None:
            fn = compile_module(
                module, weights, keep_ir=keep_ir, stats=stats, states=states, profile=profile, packed=packed, verify=False
            )
        else:
            tg_module, step_tuning = tuning
            fn = _compile_tuned(tg_module, weights, step_tuning, states=states, packed=packed, keep_ir=keep_ir,
                                profile=profile, pack_weights=pack_weights, stats=stats, heuristic_module=module)
        states = fn.states  # the decode graph binds the prefill graph's cache
        graphs.append(fn)
    return CompiledDecoder(graphs, chunk=chunk, max_seq=max_seq, capacity=capacity, batch=batch, max_position=limit)


def _gpu_decoder_graphs(modules, weights, device: str, keep_ir: bool, stats: CompileStats, tuned=None) -> list:
    """The planned prefill and decode modules as Triton graphs on ``device``, sharing the
    weights and the KV cache on the device; with ``tuned`` (`_decoder_modules`), each graph's
    GPU variants chosen within its tolerance (`_compile_tuned`, its heuristic twin ``module``)."""
    graphs: list = []
    states = None
    bound: dict = {}
    for module, tuning in zip(modules, tuned or [None] * len(modules)):
        if tuning is None:
            fn = compile_module(module, weights, keep_ir=keep_ir, stats=stats, states=states, packed=bound, verify=False,
                                device=device)
        else:
            tg_module, step_tuning = tuning
            fn = _compile_tuned(tg_module, weights, step_tuning, states=states, packed=bound, keep_ir=keep_ir, stats=stats,
                                heuristic_module=module, pack_weights=False, device=device)
        states = fn.states  # the decode graph binds the prefill graph's cache
        graphs.append(fn)
    return graphs


def generate(
    model, input_ids, max_new_tokens: int, *, attention_mask=None, eos_token_id=None, max_seq: int | None = None,
    prefill_chunk: int = 32,
):
    """Greedy generation (``transformers``' ``generate(do_sample=False)``) with a compiled decoder.

    ``model`` is a transformers causal LM (compiled here, for ``max_seq`` positions, default
    prompt + new tokens, with a padding mask when ``input_ids`` holds several rows) or a
    `CompiledDecoder` (reused). ``attention_mask`` [B, P] (1 = token, 0 = padding) as for
    transformers: a batch of left-padded prompts. ``eos_token_id`` defaults to the model's
    generation config.
    """
    from tensor_graphs.runtime_support.decoder import CompiledDecoder

    pad_token_id = None
    if isinstance(model, CompiledDecoder):
        decoder = model
    else:
        config = getattr(model, "generation_config", None)
        if eos_token_id is None:
            eos_token_id = getattr(config, "eos_token_id", None)
        pad_token_id = getattr(config, "pad_token_id", None)
        length = int(input_ids.shape[1]) + max_new_tokens
        padded = attention_mask is not None and not bool(np.all(np.asarray(attention_mask) != 0))
        decoder = compile_decoder(
            model, max_seq=max_seq or length, batch=int(input_ids.shape[0]), prefill_chunk=prefill_chunk,
            padding=True if padded else None,
        )
    return decoder.generate(
        input_ids, max_new_tokens, attention_mask=attention_mask, eos_token_id=eos_token_id, pad_token_id=pad_token_id
    )


def profile(fn: CompiledGraph, *inputs, repeat: int = 10, warmup: int = 1, **call_kwargs) -> ProfileReport:
    """Where ``fn`` (compiled with ``profile=True``) spends its time: ``fn.profile(...)``."""
    return fn.profile(*inputs, repeat=repeat, warmup=warmup, **call_kwargs)


def set_num_threads(n: int) -> None:
    """Threads every parallel kernel of every compiled graph uses (process wide; the default is
    ``OMP_NUM_THREADS`` or the CPUs this process may run on). See `runtime_support.threads`."""
    from tensor_graphs.runtime_support import threads

    threads.load()
    threads.set_num_threads(n)


def get_num_threads() -> int:
    """The thread count `set_num_threads` set."""
    from tensor_graphs.runtime_support import threads

    return threads.get_num_threads()


def _set_target(module: ModuleOp, level: str, target: Target | str | None) -> None:
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


def _module_target(module: ModuleOp) -> Target:
    from tensor_graphs.target import of_module

    return of_module(module)


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _as_torch(x):
    import torch

    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return x


def _context():
    from tensor_graphs.context import make_context

    return make_context()
