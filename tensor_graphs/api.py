"""The public Python surface: `compile`, `compile_module`, `export`, `load`, `tune`,
`set_num_threads`, `profile`, and for token-by-token generation with a KV cache
`compile_decoder`, `generate`, `estimate_memory`. A thin facade: each function gathers its
options into one `CompileOptions` and hands it to the driver (`tensor_graphs.driver`), the tuned
compile (`tensor_graphs.tuning.compile`) or the decoder assembly
(`runtime_support.decoder_assembly`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.driver.lowering import (
    LEVELS,
    TG_OPTIMIZE,
    CompileStats,
    as_numpy,
    as_torch,
    context,
    module_level,
    module_target,
    refuse_symbolic,
    set_target,
)
from tensor_graphs.options import CompileOptions, DecoderOptions
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline, tensor_pipeline
from tensor_graphs.runtime_support.executable import CompiledGraph
from tensor_graphs.runtime_support.profile import ProfileReport
from tensor_graphs.target import Target
from tensor_graphs.tuning.compile import Tuning, opened_db

__all__ = ["CompileOptions", "CompileStats", "DecoderOptions", "LEVELS", "TG_OPTIMIZE", "Tuning", "compile",
           "compile_decoder", "compile_module", "estimate_memory", "export", "generate", "get_num_threads", "load",
           "module_level", "profile", "set_num_threads", "tune", "tune_module"]


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
    options = CompileOptions(keep_ir=keep_ir, profile=profile, pack_weights=pack_weights, target=target, device=device)
    return _compile(module, weights, options, tuning, stats=stats, tg_passes=tg_passes, states=states, packed=packed,
                    verify=verify, optimize=optimize)


def _compile(module: ModuleOp, weights, options: CompileOptions, tuning: Tuning | None, **kwargs) -> CompiledGraph:
    """The driver's compile, or the tuned one when ``tuning`` is on and the module is at the aten
    or tg level (a lower one has its paths already)."""
    from tensor_graphs.driver.cpu import compile_module as drive

    if tuning is not None and tuning.active and module_level(module) in ("aten", "tg"):
        from tensor_graphs.tuning.compile import compile_module_tuned

        return compile_module_tuned(module, weights, options, tuning, **kwargs)
    return drive(module, weights, options, **kwargs)


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
    dynamic_shapes=None,
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

    ``dynamic_shapes``: torch.export's own spec (``{"x": {1: torch.export.Dim("seq", min=1,
    max=512)}}``), handed to ``torch.export.export``; the imported graph names each dynamic size
    after its Dim and records its range (`dialects.symbolic`); the tg level carries them too.
    Compiling such a graph to kernels is not done yet: a `SymbolicShapeError` says so
    (``tg.export`` writes it).
    """
    from tensor_graphs.frontend.importer import (
        _forget_generated_source,
        dim_names_of,
        export_program,
        import_exported_program,
    )

    options = CompileOptions(keep_ir=keep_ir, profile=profile, pack_weights=pack_weights, target=target,
                             tolerance=tolerance, tune=tune, tuning_db=tuning_db,
                             max_tuning_seconds=max_tuning_seconds, device=device)
    if device != "cpu":
        from tensor_graphs.runtime_support.triton_graph import device_for

        device_for(device)  # no GPU: say so before exporting anything
    stats = stats if stats is not None else CompileStats()
    with _forget_generated_source():  # as import_model, timed in two: torch's part and ours
        t0 = time.perf_counter()
        program = export_program(model, tuple(as_torch(x) for x in example_inputs), dynamic_shapes)
        t1 = time.perf_counter()
        graph = import_exported_program(program, dim_names_of(model, dynamic_shapes))
    stats.seconds["torch.export"] = t1 - t0
    stats.seconds["import"] = time.perf_counter() - t1
    with opened_db(tuning_db, options.tuned) as db:
        fn = _compile(graph.module, graph.weights, options, Tuning.of(options, example_inputs, db), stats=stats,
                      verify=False)
    fn.output_structure = graph.structure  # tuples, lists, named tuples, dicts, numbers: as the model returns them
    return fn


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

    graph = import_model(model, tuple(as_torch(x) for x in example_inputs))
    return tune_module(graph.module, graph.weights, [as_numpy(x) for x in example_inputs], tolerance=tolerance,
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
    refuse_symbolic(module, "the tuner")
    set_target(module, level, target)
    build_pipeline(tensor_pipeline(pack_weights, TENSOR_PIPELINE if level == "aten" else TG_OPTIMIZE)).apply(context(), module)
    with opened_db(tuning_db) as db:
        return tune_graph(module, weights, [np.asarray(x) for x in example_inputs], tolerance=tolerance, tune=tune,
                          target=module_target(module), threads=get_num_threads(), pack_weights=pack_weights, db=db,
                          max_seconds=max_seconds, progress=progress)


def export(model, example_inputs: Sequence, path: str | Path, *, dynamic_shapes=None):
    """Write ``path`` (.mlir at the aten level) and its weights to ``<stem>.safetensors`` beside it.
    ``dynamic_shapes`` as for `compile`: the module keeps the symbols (``tensor<?x8xf32,
    ["batch"]>``, ``tg.symbols = {batch = array<i64: 1, 64>}``)."""
    from tensor_graphs.frontend import export_model

    return export_model(model, tuple(as_torch(x) for x in example_inputs), path, dynamic_shapes)


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


def estimate_memory(
    model, max_seq: int | None = None, *, batch: int = 1, prefill_chunk: int | None = None, pack_weights: bool = True,
    target: Target | str | None = None, padding: bool | None = None, inputs: Sequence | None = None,
    dynamic_shapes=None,
):
    """Bytes `compile_decoder` with these arguments would hold: arena, weights (the packed
    copies included), KV cache (and its padding mask), outputs. With ``inputs`` (and
    ``dynamic_shapes``, as in `compile`): what `compile(model, inputs, ...)` would hold instead,
    a `MemoryReport` whose ``at(seq=300)`` answers for given sizes of a dynamic graph.

    Plans memory without generating code or allocating anything (it imports and optimises the
    model: seconds for a large one).
    """
    from tensor_graphs.runtime_support.decoder_assembly import decoder_modules, estimate, with_static_prefill_fallback

    if inputs is not None:
        from tensor_graphs.driver.cpu import planned_memory
        from tensor_graphs.frontend.importer import import_model

        graph = import_model(model, tuple(as_torch(x) for x in inputs), dynamic_shapes=dynamic_shapes)
        return planned_memory(graph.module, CompileOptions(pack_weights=pack_weights, target=target))

    decoder = DecoderOptions(max_seq, batch, prefill_chunk, padding)
    options = CompileOptions(pack_weights=pack_weights, target=target)
    built, _ = with_static_prefill_fallback(
        lambda exact: decoder_modules(model, decoder, options, CompileStats(), exact=exact), decoder, options, None)
    return estimate(built.modules)


def compile_decoder(
    model,
    *,
    max_seq: int | None = None,
    batch: int = 1,
    prefill_chunk: int | None = None,
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
    1 to ``prefill_chunk`` tokens (a size symbol; default 128) and a decode function for one
    token, compiled once and sharing one cache of ``max_seq`` positions (default: the model's
    maximum). A prompt runs as calls of ``prefill_chunk`` tokens and one of exactly what is
    left; every prompt length up to ``max_seq`` and every position run on these two functions.
    Where the prefill cannot take its length at run time (``tune``, ``device="cuda"``, a
    mixture of experts' routing), it runs chunks of exactly ``prefill_chunk`` tokens (default
    32), the last one padded (``dec.explain()`` says which).

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
    (a ValueError on a target without them); ``"int4"``: 4-bit codes with a bf16 scale per
    group of 32 along K (llama.cpp's Q4_0: 4.5 bits a weight), ``"int4zp"``: with a scale and a
    zero point per group of 128 (GPTQ / AWQ's: 4.2 bits; `packing.Int4Scheme`); ``"int4dot"``:
    Q4_0's weights times the activations quantised to int8 per group of 32 (Q8_0's), by integer
    dot products (VNNI, else SSSE3's pmaddubsw), as llama.cpp runs Q4_0.
    ``device="cuda"``: both graphs as Triton kernels on an NVIDIA GPU, the KV cache (and the
    padding mask) device tensors shared by both (see `compile`); ``weight_format="bf16"`` runs
    the decode step's matrix-vector products over bfloat16 copies of their weights (made once on
    the device; ``"int8"`` over int8 copies with a scale per output column; `codegen.triton.paths`); ``tune`` chooses each graph's GPU variants (cuBLAS or
    Triton, TF32, bf16 weights for the matrix-vector products...) within the tolerance, measured
    on the GPU. Either graph of a GPU decoder can be profiled (``profile`` or not).
    """
    from tensor_graphs.runtime_support import decoder_assembly

    if device != "cpu":
        from tensor_graphs.runtime_support.triton_graph import device_for

        device_for(device)  # no GPU: say so before importing anything
        pack_weights = False
    options = CompileOptions(keep_ir=keep_ir, profile=profile, pack_weights=pack_weights, target=target,
                             tolerance=tolerance, tune=tune, tuning_db=tuning_db,
                             max_tuning_seconds=max_tuning_seconds, device=device)
    decoder = DecoderOptions(max_seq, batch, prefill_chunk, padding, weight_format)
    with opened_db(tuning_db, options.tuned) as db:
        return decoder_assembly.compile_decoder(model, decoder, options, stats if stats is not None else CompileStats(),
                                                Tuning.of(options, (), db))


def generate(
    model, input_ids, max_new_tokens: int, *, attention_mask=None, eos_token_id=None, max_seq: int | None = None,
    prefill_chunk: int | None = None,
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
