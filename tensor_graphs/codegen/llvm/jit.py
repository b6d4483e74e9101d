"""llvm-dialect module -> LLVM IR text -> optimised native code (llvmlite MCJIT).

    to_llvm_ir(module)         LLVM IR text of a module already lowered to the llvm dialect
    jit_compile(module)        -> NativeGraph: the entry's address, its signature, the engine
    call_native(native, ...)   call a NativeGraph with NumPy arrays (tests, debugging)

Each graph gets its own execution engine, optimised with the new pass manager for the target
the module records (``tg.target``, `tensor_graphs.target`; the host when it records none): LLVM
gets its CPU and features, so loops vectorise to its vector width. A target whose ISA this CPU
lacks is refused before any code runs. OpenBLAS is loaded into the
process so ``scipy_cblas_sgemm`` resolves, libgomp and the thread count for parallel kernels
(`runtime_support.threads`), and libc's ``clock_gettime`` registered for graphs compiled with
profiling.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException

from tensor_graphs.runtime_support.signature import GraphSignature
from tensor_graphs.target import Target, TargetError
from tensor_graphs.target import of_module as target_of_module

#: The C type of every graph function: int32 f(arena*, weights**, inputs**, outputs**, dims*),
#: returning 0 or an error status (see `GraphSignature.errors`).
GRAPH_CFUNCTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * 5))


class CodegenError(DiagnosticException, RuntimeError):
    """The module cannot be turned into native code; the message says why."""


def _check_llvm_level(module: ModuleOp) -> None:
    for op in module.walk():
        if op is module:
            continue
        if not op.name.startswith("llvm."):
            raise CodegenError(
                f"cannot translate to LLVM IR: the module still contains '{op.name}' "
                "(lower it with convert-buffer-to-llvm first)"
            )


@functools.cache
def _bf16_as_i16() -> None:
    """bfloat16 is ``i16`` in the LLVM IR we print (llvmlite's IR builder has no ``bfloat``): the
    kernels only load, store and convert its bits (`scalar._to_bf16`, `scalar._from_bf16`), so
    no arithmetic can see the difference."""
    from llvmlite import ir
    from xdsl.backend.llvm import convert_type
    from xdsl.dialects.builtin import BFloat16Type

    convert_type._TYPE_CONVERTERS.setdefault(BFloat16Type, lambda _: ir.IntType(16))


def to_llvm_ir(module: ModuleOp, *, triple: str | None = None, data_layout: str = "") -> str:
    """LLVM IR text of ``module`` (every op must be in the llvm dialect)."""
    from xdsl.backend.llvm.convert import convert_module

    _bf16_as_i16()
    _check_llvm_level(module)
    try:
        ir_module = convert_module(module, fallback_target_triple=triple, data_layout=data_layout)
    except NotImplementedError as e:
        raise CodegenError(f"cannot translate to LLVM IR: {e}") from e
    _outline_kernels(module, ir_module)
    return str(ir_module)


def _outline_kernels(module: ModuleOp, ir_module: Any) -> None:
    """Kernel functions (every defined function but the entry) get internal linkage and
    ``noinline``: xDSL's translation drops both, and an inlined kernel would merge back into
    one huge entry function, which LLVM optimises in superlinear time."""
    entry = module.attributes.get("tg.entry")
    if entry is None:
        return
    for fn in ir_module.functions:
        if not fn.is_declaration and fn.name != entry.data:  # type: ignore[attr-defined]
            fn.linkage = "internal"
            fn.attributes.add("noinline")


@functools.cache
def _triple() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.get_process_triple()


def host_float_lanes() -> int:
    """float32 lanes of the host target's vectors (16 with AVX-512, 8 with AVX2, 4 otherwise)."""
    return Target.host().float_lanes


def _target_machine(opt_level: int, target: Target | None = None) -> Any:
    """LLVM's target machine for ``target`` (default: the host): its CPU and feature string."""
    import llvmlite.binding as llvm

    target = target if target is not None else Target.host()
    machine = llvm.Target.from_triple(_triple())
    return machine.create_target_machine(
        cpu=target.llvm_cpu, features=target.llvm_features, opt=opt_level, codemodel="jitdefault", jit=True
    )


@functools.cache
def _register_clock() -> None:
    """Make libc's ``clock_gettime`` (read by profiled graphs) resolvable by the JIT."""
    import llvmlite.binding as llvm

    from tensor_graphs.codegen.llvm.profiling import CLOCK_GETTIME

    address = ctypes.cast(getattr(ctypes.CDLL(None), CLOCK_GETTIME), ctypes.c_void_p).value
    if not address:  # pragma: no cover - every POSIX libc has it
        raise CodegenError(f"{CLOCK_GETTIME} was not found in this process: profiling needs it")
    llvm.add_symbol(CLOCK_GETTIME, address)


def _optimise(mod: Any, tm: Any, opt_level: int) -> None:
    """Run LLVM's default ``O<opt_level>`` pipeline over ``mod`` for the target machine ``tm``,
    tuned for our loops.

    Every object made here is freed before returning. llvmlite 0.50 never frees a
    ``ModulePassManager`` by itself: the class inherits ``ObjectRef._dispose`` (a no-op) ahead of
    ``NewPassManager._dispose`` (which deletes it), so each dropped one kept the whole pipeline
    and what its passes cached during the run, 55-85 KB per small module. `_close_pass_manager`
    frees it. What still stays is the ``PassInstrumentationCallbacks`` that llvmlite's
    ``LLVMPY_CreatePassBuilder`` allocates and never deletes, plus the callbacks each run adds
    to it (~2 KB per run). Reusing one ``PassBuilder`` would not save that: each run adds
    callbacks that point at that run's dead instrumentation, and every later run calls all of
    them.
    """
    import llvmlite.binding as llvm

    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    # No unroller: it fully unrolls short inner loops (a 64-float row copy) before the
    # vectoriser sees them, leaving scalar code, and costs ~40% of compile time; vectorised
    # loops are still interleaved by the vectoriser itself.
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(mod, pb)
    finally:
        _close_pass_manager(mpm)
        pb.close()
        pto.close()


def _close_pass_manager(pm: Any) -> None:
    """Free a llvmlite new-pass-manager object (its ``close()`` frees nothing in llvmlite 0.50)."""
    from llvmlite.binding.newpassmanagers import NewPassManager

    if not pm.closed:
        NewPassManager._dispose(pm)
        pm.detach()


@dataclass
class NativeGraph:
    """A compiled graph: keep this object alive as long as ``address`` is called."""

    engine: Any
    address: int
    signature: GraphSignature
    #: the optimised LLVM IR (a str, or an `object_cache.LazyText` for code from the cache)
    ir_text: Any
    #: the machine the code was compiled for (the module's ``tg.target``)
    target: Target | None = None
    #: the object code (for the compile cache's graph entries)
    object_code: bytes | None = None

    @property
    def llvm_ir(self) -> str:
        """The optimised LLVM IR text."""
        return str(self.ir_text)

    @property
    def cfunc(self) -> Any:
        """The entry as a ctypes function (five ``void*`` arguments, an ``int32`` status)."""
        return GRAPH_CFUNCTYPE(self.address)


@functools.cache
def _context_engine() -> type:
    """The class of our engines (made on first use: llvmlite is imported lazily here)."""
    import llvmlite.binding as llvm
    from llvmlite.binding import ffi

    class ContextEngine(llvm.ExecutionEngine):
        """An MCJIT engine that also owns the LLVMContext its module lives in, and frees it
        right after itself (so after the module). The context is not left to its own
        ``ContextRef``: when a dropped graph is collected as cyclic garbage the collector runs
        the finalizers in no set order, and a context freed before the engine frees the
        module, which the engine then frees again."""

        @classmethod
        def take(cls, engine: Any, context: Any) -> Any:
            engine.__class__ = cls  # made by llvmlite's create_mcjit_compiler: same layout
            engine._context = context._ptr
            context._owned = True  # its ContextRef (kept by the module's) no longer frees it
            return engine

        def _dispose(self) -> None:
            try:
                super()._dispose()
            finally:
                ffi.lib.LLVMPY_ContextDispose(self._context)

    return ContextEngine


#: How many native graphs this process has JIT-compiled (tests count recompilations with it).
COMPILATIONS = 0


def _prepare_process(target: Target, signature: GraphSignature) -> None:
    """Check ``target`` runs here and load what the graph's code calls (BLAS, libgomp, clock);
    on a target with AMX, ask Linux for its tile state."""
    from tensor_graphs.codegen.llvm.kernels_amx import request_amx
    from tensor_graphs.target import AMX_BF16, AMX_INT8
    from tensor_graphs.runtime_support import blas, threads

    try:
        target.check_runs_here()
    except TargetError as e:
        raise CodegenError(str(e)) from None
    blas.load()
    threads.load()
    if {AMX_BF16, AMX_INT8} & target.extensions:  # its GEMMs may run on AMX tiles (`kernels_amx`)
        request_amx()
    if signature.profile:
        _register_clock()


def load_native(object_code: bytes, signature: GraphSignature, llvm_ir: Any, target: Target) -> NativeGraph:
    """A graph from its object code (the compile cache's): an engine over an empty module that
    loads ``object_code`` through llvmlite's object cache instead of generating code."""
    import llvmlite.binding as llvm

    global COMPILATIONS
    COMPILATIONS += 1
    _prepare_process(target, signature)
    context = llvm.create_context()
    mod = None
    try:
        mod = llvm.parse_assembly(f'target triple = "{_triple()}"\n', context=context)
        engine = _context_engine().take(llvm.create_mcjit_compiler(mod, _target_machine(3, target)), context)
    except BaseException:
        if mod is not None:
            mod.close()
        context.close()
        raise
    engine.set_object_cache(None, lambda _module: object_code)
    engine.finalize_object()
    address = engine.get_function_address(signature.entry)
    if not address:
        raise CodegenError(f"entry function @{signature.entry} was not found in the cached object code")
    return NativeGraph(engine=engine, address=address, signature=signature, ir_text=llvm_ir, target=target,
                       object_code=object_code)


def jit_compile(module: ModuleOp, opt_level: int = 3, cache: Any = "default") -> NativeGraph:
    """Optimise ``module`` (llvm dialect, with a recorded signature) and JIT it for this CPU.

    ``cache``: the compile cache (`object_cache.CompileCache`; ``"default"``: the environment's,
    None: none): object code made before for the same IR, target and level is loaded instead of
    running LLVM."""
    import llvmlite.binding as llvm

    from tensor_graphs.codegen.llvm.object_cache import CompileCache, Entry, LazyText, digest

    global COMPILATIONS

    if not 0 <= opt_level <= 3:
        raise ValueError(f"jit_compile: opt_level must be 0..3, got {opt_level}")
    signature = GraphSignature.from_module(module)
    target = target_of_module(module)
    _prepare_process(target, signature)
    triple = _triple()

    opt_tm = _target_machine(opt_level, target)
    ir_text = to_llvm_ir(module, triple=triple, data_layout=str(opt_tm.target_data))
    cache = CompileCache.default() if cache == "default" else cache
    key = digest("object", ir_text, target.llvm_cpu, target.llvm_features, str(opt_level)) if cache is not None else ""
    if cache is not None and (hit := cache.get(key)) is not None:
        return load_native(hit.object_code, signature, hit.llvm_ir, target)
    COMPILATIONS += 1
    # The module gets an LLVMContext of its own, freed with its engine (`_context_engine`). In
    # llvmlite's global context every compile would leave behind what a context owns and only
    # frees when it is destroyed, whatever module made it: all metadata (above all the distinct
    # ``!llvm.loop`` nodes the loop vectoriser attaches to every loop it vectorises, parsed once
    # more by MCJIT) and uniqued constants and types, ~5.5 KB per 2-layer GPT-2 compile.
    context = llvm.create_context()
    mod = None
    try:
        try:
            mod = llvm.parse_assembly(ir_text, context=context)
            mod.verify()
        except RuntimeError as e:
            raise CodegenError(f"generated LLVM IR is invalid: {e}") from e

        if opt_level > 0:
            _optimise(mod, opt_tm, opt_level)

        optimised_ir = str(mod)  # before MCJIT's code generation rewrites the module
        engine = _context_engine().take(llvm.create_mcjit_compiler(mod, _target_machine(opt_level, target)), context)
    except BaseException:
        if mod is not None:
            mod.close()  # before its context, whose destruction would free it a second time
        context.close()
        raise
    made: list[bytes] = []
    engine.set_object_cache(lambda _module, data: made.append(bytes(data)), None)
    engine.finalize_object()
    address = engine.get_function_address(signature.entry)
    if not address:
        raise CodegenError(f"entry function @{signature.entry} was not found in the compiled module")
    object_code = made[0] if made else None
    if cache is not None and object_code is not None:
        cache.put(key, Entry(object_code, LazyText.of(optimised_ir)))
    return NativeGraph(engine=engine, address=address, signature=signature, ir_text=optimised_ir, target=target,
                       object_code=object_code)


# --------------------------------------------------------------------------- calling


def _pointer_table(arrays: Sequence[np.ndarray]) -> ctypes.Array:
    table = (ctypes.c_void_p * max(len(arrays), 1))()
    for i, a in enumerate(arrays):
        table[i] = a.ctypes.data
    return table


def _checked(a: Any, shape: tuple[int, ...], dtype: np.dtype, what: str, writable: bool = False) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: expected a numpy array, got {type(a).__name__}")
    if a.shape != tuple(shape) or a.dtype != dtype:
        raise ValueError(f"{what}: expected {dtype.name}{list(shape)}, got {a.dtype.name}{list(a.shape)}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: array must be C-contiguous")
    if writable and not a.flags.writeable:
        raise ValueError(f"{what}: array must be writable")
    return a


def call_native(
    native: NativeGraph,
    arena: np.ndarray | None,
    weights: Mapping[str, np.ndarray],
    inputs: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
) -> None:
    """Run ``native`` once on NumPy buffers (outputs are written in place).

    ``weights`` maps names of the signature's weight table to arrays (a packed slot is packed
    from its source weight); IR constants (``__const*``) come from the signature unless given. ``arena`` defaults to a fresh one.
    A graph compiled with profiling gets fresh counters (discarded; `CompiledGraph.profile`
    reports them).
    A nonzero status from the native code raises (``IndexError`` for an index out of range,
    ``RuntimeError`` otherwise) with the message recorded in the signature.
    """
    sig = native.signature
    if arena is None:
        arena = np.zeros(max(sig.arena_size, 1), np.uint8)
    if arena.nbytes < sig.arena_size or not arena.flags.c_contiguous:
        raise ValueError(f"call_native: arena must be a contiguous buffer of at least {sig.arena_size} bytes")
    if len(inputs) != len(sig.inputs) or len(outputs) != len(sig.outputs):
        raise ValueError(
            f"call_native: expected {len(sig.inputs)} inputs and {len(sig.outputs)} outputs, "
            f"got {len(inputs)} and {len(outputs)}"
        )
    ins = [_checked(a, s.shape, s.dtype, f"input {s.name}") for a, s in zip(inputs, sig.inputs)]
    outs = [_checked(a, s.shape, s.dtype, f"output {i}", writable=True) for i, (a, s) in enumerate(zip(outputs, sig.outputs))]
    table: list[np.ndarray] = []
    for name in sig.weight_table:
        layout = sig.packed_layout(name)
        if name in weights:
            table.append(np.asarray(weights[name], order="C"))
        elif name in sig.constants:
            table.append(sig.constants[name])
        elif layout is not None and layout.source in weights:
            table.append(layout.pack(np.asarray(weights[layout.source], np.float32)))
        else:
            raise KeyError(f"call_native: weight '{layout.source if layout else name}' is missing")
    if sig.profile is not None:
        if sig.states:
            raise ValueError("call_native: a graph with states runs through CompiledGraph")
        table.append(np.zeros(2 * len(sig.profile), np.int64))
    tables = [_pointer_table(t) if t else None for t in (table, ins, outs)]
    status = native.cfunc(arena.ctypes.data, *(ctypes.addressof(t) if t is not None else None for t in tables), None)
    if status:
        raise sig.status_error(status, inputs=ins)
