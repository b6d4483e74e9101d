"""A module at any level lowered to ONE native function on the CPU, its kernel paths the
heuristic's (a tuned compile is `tensor_graphs.tuning.compile`); a graph compiled before from
the same module and options comes from the compile cache (`codegen.llvm.object_cache`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.driver.collector import paused_collector
from tensor_graphs.driver.lowering import CompileStats, Lowering, begin, module_target, set_target
from tensor_graphs.options import CompileOptions
from tensor_graphs.passes import BUFFER_PIPELINE, LLVM_PIPELINE, PROFILED_LLVM_PIPELINE, buffer_pipeline
from tensor_graphs.runtime_support.executable import CompiledGraph


def compile_module(
    module: ModuleOp,
    weights: Mapping[str, np.ndarray] | None = None,
    options: CompileOptions = CompileOptions(),
    *,
    stats: CompileStats | None = None,
    tg_passes: Sequence[str] = (),
    states: Mapping[str, np.ndarray] | None = None,
    packed: dict | None = None,
    verify: bool = True,
    optimize: bool = True,
) -> CompiledGraph:
    """Lower ``module`` (changed in place) with ``options`` and bind ``weights``
    (`tensor_graphs.api.compile_module` says what each argument does); ``options.device``
    other than the CPU: `gpu.compile_for_gpu`. The options' tuning is not read here. Python's
    cyclic garbage collector is paused meanwhile (`collector.paused_collector`)."""
    with paused_collector():
        return _compile_module(module, weights, options, stats=stats, tg_passes=tg_passes, states=states, packed=packed,
                               verify=verify, optimize=optimize)


def _compile_module(
    module: ModuleOp,
    weights: Mapping[str, np.ndarray] | None,
    options: CompileOptions,
    *,
    stats: CompileStats | None,
    tg_passes: Sequence[str],
    states: Mapping[str, np.ndarray] | None,
    packed: dict | None,
    verify: bool,
    optimize: bool,
) -> CompiledGraph:
    """`compile_module`'s work."""
    from tensor_graphs.codegen.llvm.jit import jit_compile

    if options.device != "cpu":
        from tensor_graphs.driver.gpu import compile_for_gpu

        return compile_for_gpu(module, weights, options, stats=stats, tg_passes=tg_passes, states=states, verify=verify,
                               optimize=optimize, bound=packed)
    lowering, level = begin_cpu(module, options, stats, verify)
    stats = lowering.stats
    cached = _from_cache(module, level, weights, states, packed, options, stats, tg_passes, optimize)
    if isinstance(cached, CompiledGraph):
        return cached
    if options.profile and level == "llvm" and "tg.profile" not in module.attributes:
        raise ValueError(
            "compile_module(profile=True): this module is already at the llvm level, lowered without "
            "profiling; pass a module at the aten, tg or buf level (or lower it with convert-buffer-to-llvm{profile=true})"
        )
    lowering.keep(level)
    report = _to_buffers(lowering, level, options, optimize, tg_passes)
    if level != "llvm":
        lowering.run("buf -> llvm", PROFILED_LLVM_PIPELINE if options.profile else LLVM_PIPELINE)
    t0 = time.perf_counter()
    native = jit_compile(module)
    stats.seconds["llvm jit"] = time.perf_counter() - t0
    if options.keep_ir:
        lowering.ir["llvm"] = native.ir_text
    fn = CompiledGraph(native, dict(weights or {}), lowering.ir, states=states, packed=packed)
    fn.tuning = report
    if cached is not None and fn._native.object_code is not None:
        from tensor_graphs.codegen.llvm.object_cache import Entry, LazyText

        cache, key = cached
        cache.put(key, Entry(fn._native.object_code, LazyText.of(fn._native.ir_text), fn.signature,
                             {k: LazyText.of(v) for k, v in lowering.ir.items()}, report))
    return fn


def planned_memory(module: ModuleOp, options: CompileOptions = CompileOptions()):
    """The `MemoryReport` of ``module`` (at the aten or tg level; changed in place) lowered to
    planned buffers, without generating code or allocating anything: arena, weights, packed
    copies, and one call's inputs and outputs (a dynamic graph's at its largest sizes, `at`
    for others)."""
    from tensor_graphs.dialects import buffer as buf
    from tensor_graphs.dialects.symbolic import symbols_of
    from tensor_graphs.runtime_support.executable import MemoryReport
    from tensor_graphs.runtime_support.signature import TensorSpec

    lowering, level = begin_cpu(module, options, None, verify=True)
    _to_buffers(lowering, level, options, optimize=True, tg_passes=())
    fn = next(op for op in module.walk() if "tg.num_outputs" in op.attributes)
    arena = int(module.attributes["tg.arena_size"].value.data)  # type: ignore[attr-defined]
    ops = list(module.walk())
    weights = {op.weight_name.data: buf.nbytes(op.result.type) for op in ops if isinstance(op, buf.WeightOp)}
    packed = {op.slot_name: buf.nbytes(op.result.type) for op in ops if isinstance(op, buf.PackedWeightOp)}
    constants = sum(buf.nbytes(op.result.type) for op in ops if isinstance(op, buf.ConstantOp))
    symbols = tuple((n, lo, hi) for n, (lo, hi) in sorted(symbols_of(module).items()))
    report = MemoryReport(arena_bytes=arena, weight_bytes=sum(weights.values()) + constants,
                          packed_bytes=sum(packed.values()), symbols=symbols,
                          io=tuple(TensorSpec.of(t) for t in fn.function_type.inputs.data))  # type: ignore[attr-defined]
    return report.at(**{n: hi for n, _, hi in symbols})


def begin_cpu(module: ModuleOp, options: CompileOptions, stats: CompileStats | None, verify: bool) -> tuple[Lowering, str]:
    """`lowering.begin`, then the target recorded (``options.target``): what a CPU compile, tuned
    or not, does first."""
    lowering, level = begin(module, options, stats, verify,
                            static_only="the tuner (tune=...)" if options.tuned else None)
    set_target(module, level, options.target)
    return lowering, level


def _to_buffers(lowering: Lowering, level: str, options: CompileOptions, optimize: bool, tg_passes: Sequence[str]):
    """An aten or tg module to planned buffers (the heuristic kernel paths: returned as the
    report ``fn.explain()`` prints); a buf module with allocations planned; else nothing."""
    from tensor_graphs.tuning.report import heuristic_report

    if level in ("aten", "tg"):
        lowering.to_tg(level, options.pack_weights, optimize, tg_passes)
        t0 = time.perf_counter()
        report = heuristic_report(lowering.module, module_target(lowering.module), options.pack_weights)
        lowering.stats.seconds["kernel paths"] = time.perf_counter() - t0
        lowering.run("tg -> buf", buffer_pipeline(options.pack_weights))
        lowering.keep("buf")
        return report
    if level == "buf" and any(op.name == "buf.alloc" for op in lowering.module.walk()):
        lowering.run("plan memory", BUFFER_PIPELINE[1:])
        lowering.keep("buf")
    return None


def _from_cache(module, level, weights, states, packed, options: CompileOptions, stats, tg_passes, optimize):
    """A graph compiled before from the same module and options (`object_cache`, graph
    entries): the `CompiledGraph` on a hit; on a miss (cache, key) to store the result under;
    None when the cache is off or does not apply (a module at the buf or llvm level)."""
    from tensor_graphs.codegen.llvm.object_cache import CompileCache, digest

    if level not in ("aten", "tg"):
        return None
    cache = CompileCache.default()
    if cache is None:
        return None
    t0 = time.perf_counter()
    key_options = repr((level, tuple(tg_passes), options.profile, options.pack_weights, optimize, options.keep_ir))
    key = digest("graph", str(module), key_options)
    entry = cache.get(key)
    if entry is None or entry.signature is None:
        stats.seconds["cache lookup"] = time.perf_counter() - t0
        return cache, key
    from tensor_graphs.codegen.llvm.jit import load_native
    from tensor_graphs.target import of_module

    native = load_native(entry.object_code, entry.signature, entry.llvm_ir, of_module(module))
    fn = CompiledGraph(native, dict(weights or {}), dict(entry.ir) if options.keep_ir else {}, states=states, packed=packed)
    fn.tuning = entry.report
    stats.seconds["from cache"] = time.perf_counter() - t0
    return fn
