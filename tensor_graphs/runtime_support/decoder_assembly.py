"""A transformers causal LM assembled into a `CompiledDecoder`: its step imported for a prefill
of 1 to ``prefill_chunk`` tokens (a size symbol; on a GPU or tuned: exactly that many) and at one
token, the KV cache introduced, memory planned and checked
against what the OS has, the two graphs compiled (by the driver, or tuned) sharing weights and
cache; `estimate_memory` plans without compiling."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.driver.cpu import compile_module
from tensor_graphs.driver.lowering import CompileStats, context, set_target
from tensor_graphs.options import CompileOptions, DecoderOptions
from tensor_graphs.passes import buffer_pipeline, build_pipeline, tensor_pipeline
from tensor_graphs.runtime_support.decoder import CompiledDecoder, DecoderMemory
from tensor_graphs.tuning.compile import Tuning, compile_tuned

#: ``compile_decoder(weight_format=...)`` -> the variant its matrix-vector products are pinned to
WEIGHT_FORMATS = {"bf16": "matmul.bf16_weights", "int8": "matmul.int8_weights", "bf16dot": "matmul.bf16_dot",
                  "int4": "matmul.int4_weights", "int4zp": "matmul.int4zp_weights", "int4dot": "matmul.int4_dot"}


@dataclass
class DecoderModules:
    """The planned buf-level modules of a decoder's graphs (prefill chunk, then one token), their
    weights, the sizes `CompiledDecoder` needs, and per module None or (its tg-level module
    before the buffer lowering, the step's `Tuning`) when tuned."""

    modules: list[ModuleOp]
    weights: dict
    chunk: int
    capacity: int
    max_seq: int
    max_position: int | None
    tuned: list


def _checked(model, decoder: DecoderOptions) -> tuple[DecoderOptions, int | None]:
    """``decoder`` with ``max_seq`` and ``padding`` defaulted; a ValueError or TypeError naming
    a bad argument. Also the model's positions (None: its config gives none)."""
    from tensor_graphs.frontend.causal_lm import max_positions

    limit = max_positions(model)
    max_seq = decoder.max_seq
    if max_seq is None:
        if limit is None:
            raise ValueError("max_seq is required: the model's config gives no max_position_embeddings")
        max_seq = limit
    if not isinstance(max_seq, int) or max_seq < 1:
        raise ValueError(f"max_seq must be a positive int, got {max_seq!r}")
    if limit is not None and max_seq > limit:
        raise ValueError(f"max_seq = {max_seq} exceeds the model's {limit} positions (max_position_embeddings)")
    if not isinstance(decoder.batch, int) or decoder.batch < 1:
        raise ValueError(f"batch must be a positive int, got {decoder.batch!r}")
    if decoder.prefill_chunk is not None and (not isinstance(decoder.prefill_chunk, int) or decoder.prefill_chunk < 1):
        raise ValueError(f"prefill_chunk must be a positive int (or None: the default), got {decoder.prefill_chunk!r}")
    padding = decoder.batch > 1 if decoder.padding is None else decoder.padding
    if not isinstance(padding, bool):
        raise TypeError(f"padding must be a bool or None, got {padding!r}")
    return replace(decoder, max_seq=max_seq, padding=padding), limit


def decoder_modules(model, decoder: DecoderOptions, options: CompileOptions, stats: CompileStats,
                    tuning: Tuning | None = None, exact: bool | None = None) -> DecoderModules:
    """Import ``model``'s step at the chunk length and at 1, optimise, add the KV cache (with a
    key-padding mask when ``padding``) and plan memory. With ``tuning`` (its inputs unused: each
    step gets random token ids) each module's tg-level twin is kept for `compile_tuned`; the
    buf-level modules are the heuristic paths (the memory estimate, the tuned graphs' twins)."""
    import torch

    from tensor_graphs.frontend import import_model
    from tensor_graphs.frontend.causal_lm import CausalLMStep

    decoder, limit = _checked(model, decoder)
    batch = decoder.batch
    exact = exact_prefill(options, tuning) if exact is None else exact
    chunk = min(prefill_chunk(decoder, exact), decoder.max_seq)
    exact = exact and chunk > 1  # a chunk of one token is the decode step's static graph
    # a padded last chunk may write up to chunk - 1 rows past the last real position
    capacity = decoder.max_seq if exact else decoder.max_seq + chunk - 1
    step = CausalLMStep(model).eval()
    out = DecoderModules([], {}, chunk, capacity, decoder.max_seq, limit, [])
    ctx = context()
    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 2
    # the examples on the model's device (a model already on a GPU exports there)
    where = next((p.device for p in model.parameters()), torch.device("cpu"))
    for length in dict.fromkeys((chunk, 1)):
        ids = torch.zeros((batch, length), dtype=torch.int64, device=where)
        pos = torch.arange(length, dtype=torch.int64, device=where).expand(batch, length).contiguous()
        rows = torch.arange(batch, dtype=torch.int64, device=where) * length + length - 1
        t0 = time.perf_counter()
        graph = import_model(step, (ids, pos, rows), dynamic_shapes=prefill_tokens(chunk) if exact and length > 1 else None)
        stats.add("import", time.perf_counter() - t0)
        t0 = time.perf_counter()
        set_target(graph.module, "aten", options.target)
        kv = f"introduce-kv-cache{{capacity={capacity}{' padding_mask=true' if decoder.padding else ''}}}"
        build_pipeline((*tensor_pipeline(options.pack_weights), kv)).apply(ctx, graph.module)
        _check_every_layer_cached(graph.module, model)
        if decoder.weight_format is not None:
            _pin_weight_format(graph.module, decoder.weight_format, options.pack_weights, options.device)
        if tuning is not None and tuning.active:  # tuned later (`compile_tuned`) from the tg module
            example = (torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(length)), pos.cpu(), rows.cpu())
            step_tuning = Tuning(tuning.tune, tuning.tolerance, example, tuning.db, tuning.max_seconds, tuning.progress,
                                 tuning.keep_faster)
            out.tuned.append((graph.module.clone(), step_tuning))
        else:
            out.tuned.append(None)
        build_pipeline(buffer_pipeline(options.pack_weights)).apply(ctx, graph.module)
        stats.add("aten -> buf", time.perf_counter() - t0)
        out.modules.append(graph.module)
        out.weights.update(graph.weights)
    return out


#: the size symbol of a prefill call's tokens (`exact_prefill`)
TOKENS = "tokens"
#: ``prefill_chunk`` by default: the most tokens a prefill call of any length runs (128: a prompt
#: of 17 / 100 / 300 tokens prefills 0.64 / 0.74 / 0.85x the time of padded chunks of 32 on GPT-2
#: small, `benchmarks/prefill_chunks.py`), and the padded chunk where the prefill is static (32:
#: padding a short prompt to 128 tokens would cost 4x)
EXACT_CHUNK, PADDED_CHUNK = 128, 32


def prefill_chunk(decoder: DecoderOptions, exact: bool) -> int:
    """The tokens of a prefill call: ``decoder.prefill_chunk``, or the default for the prefill."""
    if decoder.prefill_chunk is not None:
        return decoder.prefill_chunk
    return EXACT_CHUNK if exact else PADDED_CHUNK


def exact_prefill(options: CompileOptions, tuning: Tuning | None) -> bool:
    """Whether the prefill graph may take its count of tokens as the size symbol `TOKENS` in
    ``[1, chunk]`` (a prompt runs as calls of ``chunk`` tokens and one of exactly what is left,
    never padded) rather than exactly ``chunk`` (the last call padded): on the CPU, untuned
    (the tuner and the GPU path take static sizes)."""
    return options.device == "cpu" and not (tuning is not None and tuning.active)


def prefill_tokens(chunk: int) -> tuple:
    """The ``dynamic_shapes`` of `CausalLMStep`'s (ids, positions, rows) for a prefill of 1 to
    ``chunk`` tokens."""
    from torch.export import Dim

    tokens = Dim(TOKENS, min=1, max=chunk)
    return ({1: tokens}, {1: tokens}, None)


class NotCacheable(ValueError):
    """A model whose attentions cannot read a KV cache (`_check_every_layer_cached`), at any
    prefill length."""


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
        raise NotCacheable(
            f"compile_decoder: no attention of {name} can read a KV cache: none became a tg.attention "
            "(its attention is written in a form fuse-attention does not recognise), so every call would "
            "attend to its new tokens only. Compile its forward with tg.compile instead, or write the "
            "attention with torch.nn.functional.scaled_dot_product_attention")
    if isinstance(layers, int) and caches != 2 * layers:
        raise NotCacheable(
            f"compile_decoder: {name} has {layers} layers but {caches // 2} of its attentions read a KV cache: "
            "the others (a form fuse-attention does not recognise) would attend to each call's new tokens only")


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


def estimate(modules: list[ModuleOp]) -> DecoderMemory:
    """What the planned ``modules`` of one decoder hold: arenas, weights (packed copies apart),
    state, outputs."""
    from tensor_graphs.dialects import buffer as buf

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


def _check_fits(need: DecoderMemory, decoder: DecoderOptions, max_seq: int) -> None:
    """A MemoryError when what the decoder needs beyond its weights exceeds what the OS has."""
    free = available_memory()
    if free is not None and need.new_bytes > free:
        gib = 1 << 30
        raise MemoryError(
            f"compile_decoder(max_seq={max_seq}, batch={decoder.batch}) needs {need.new_bytes / gib:.2f} GiB beyond the weights "
            f"(KV cache {need.state_bytes / gib:.2f} GiB, arenas {need.arena_bytes / gib:.2f} GiB, packed weights "
            f"{need.packed_bytes / gib:.2f} GiB, outputs {need.output_bytes / gib:.2f} GiB) but only "
            f"{free / gib:.2f} GiB is available; lower max_seq or batch (or pack_weights=False)"
        )


def with_static_prefill_fallback(build, decoder: DecoderOptions, options: CompileOptions, tuning: Tuning | None):
    """``build(exact)`` with a prefill of any length (`exact_prefill`) where it applies; when that
    fails (a kernel of the model that takes static sizes only: a mixture of experts' routing),
    ``build(False)``: chunks of ``prefill_chunk`` tokens, the last one padded, as before (a
    MemoryError or a model that cannot read a cache is raised at once: the same at any length).
    Returns (what ``build`` made, the first attempt's error in one line or None)."""
    if not exact_prefill(options, tuning):
        return build(False), None
    try:
        return build(True), None
    except (MemoryError, NotCacheable):  # the same at any prefill length: no second try
        raise
    except Exception as e:  # noqa: BLE001  (the static path below raises what is really wrong)
        why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return build(False), why[:300]


def compile_decoder(model, decoder: DecoderOptions, options: CompileOptions, stats: CompileStats,
                    tuning: Tuning, exact: bool | None = None) -> CompiledDecoder:
    """The decoder (`tensor_graphs.api.compile_decoder`), its tuning database open (``tuning.db``);
    ``exact=False``: the prefill in padded chunks even where one of any length applies (what
    `benchmarks/prefill_chunks.py` compares it with)."""
    if exact is False:
        return _assemble(model, decoder, options, stats, tuning, False)
    dec, why = with_static_prefill_fallback(
        lambda exact: _assemble(model, decoder, options, stats, tuning, exact), decoder, options, tuning)
    if why is not None:
        dec.prefill_note = f"prefill in padded chunks of {dec.chunk} tokens: a prefill of any length did not compile ({why})"
    return dec


def _assemble(model, decoder: DecoderOptions, options: CompileOptions, stats: CompileStats, tuning: Tuning,
              exact: bool) -> CompiledDecoder:
    built = decoder_modules(model, decoder, options, stats, tuning, exact=exact)
    if options.device == "cpu":
        _check_fits(estimate(built.modules), decoder, built.max_seq)
    graphs = []
    states: dict[str, np.ndarray] | None = None
    packed: dict = {}  # both graphs read the same packed weights (on a GPU: the same device copies)
    lower = options.but(target=None)  # each module records its target
    for module, tuned in zip(built.modules, built.tuned):
        if tuned is None:
            fn = compile_module(module, built.weights, lower, stats=stats, states=states, packed=packed, verify=False)
        else:
            tg_module, step_tuning = tuned
            fn = compile_tuned(tg_module, built.weights, step_tuning, lower, states=states, packed=packed, stats=stats,
                               heuristic_module=module)
        states = fn.states  # the decode graph binds the prefill graph's cache
        graphs.append(fn)
    return CompiledDecoder(graphs, chunk=built.chunk, max_seq=built.max_seq, capacity=built.capacity, batch=decoder.batch,
                           max_position=built.max_position)
