"""Every workload on every engine in one run: writes BENCHMARKS.md, a PNG chart and (optionally) JSON.

    tg-bench [--threads 1,2] [--quick] [--only WORKLOAD ...] [--out BENCHMARKS.md] [--chart benchmarks.png]
             [--json [benchmarks.json]] [--target NAME] [--no-force-isa]
    .venv/bin/python benchmarks/suite.py ...     # the same, from a checkout
    make bench [BENCH_ARGS=--quick]              # installs the bench extra first

Workloads (``--only``; fp32, batch 1 unless said, random init with ``torch.manual_seed(0)``):

* ``mlp``: MLP 256 -> 1024 -> 1024 -> 256 (ReLU) at batch 1 and 64 (``benchmarks/mlp.py``);
* ``encoder``: one post-LN transformer encoder block (a transformers ``BertLayer``: d_model 768,
  12 heads, FFN 3072, GELU; and d_model 256, 4 heads, FFN 1024), sequence 128, no mask;
* ``gpt2-prefill``: GPT-2 small, ``ids -> logits`` of every position at seq 32 and 128
  (``benchmarks/gpt2.py``);
* ``gpt2-decode``: GPT-2 small with a KV cache: prefill 128 (last logits) and greedy decode
  tokens/s at context 128 (``benchmarks/decode.py``);
* ``qwen3``: Qwen3-0.6B-shaped: prefill 128 (last logits) and decode tokens/s at context 128
  (``benchmarks/decode.py``);
* ``conv``: ResNet-50 (transformers ``ResNetConfig()``) at 224x224 and a diffusion UNet
  (diffusers ``UNet2DModel`` in the shape of DDPM's CIFAR-10 model) at 32x32, one noise
  prediction; FLOPs are the convolutions' GEMMs (``roofline.conv_gemms``; the UNet's attention
  and norms not counted).

Engines: tensor_graphs (``tg.compile`` / ``tg.compile_decoder``), PyTorch eager, torch.compile
(inductor), ONNX Runtime (``ORT_ENABLE_ALL``), where a fusion pattern set exists (encoder,
GPT-2 prefill) ONNX Runtime on the model rewritten by ``onnxruntime.transformers.optimizer``,
and OpenVINO (``ov.convert_model``, CPU plugin, fp32); a peer that is not installed is skipped
with a note. In reduced precision, on the forward rows: ``tg-lowp`` (``tg.compile(tune="missing",
tolerance=1e-2)``: the tuner may take the bf16 and int8 GEMM paths where their measured error
fits) and ``openvino-bf16`` (its ``INFERENCE_PRECISION_HINT`` bf16); neither is ever a float32
row's "fastest peer": they are held to each other (tensor_graphs at 1e-2 at most OpenVINO bf16's
time at no larger error, and at least 1.8x its own float32 graph's speed). Every forward row's
cell gives the engine's error beside its time: max |y - y64| / max |y64| against eager in float64.
On the decode rows (``gpt2-decode``, ``qwen3``): ``tg-int8`` and ``tg-int4``
(``compile_decoder(weight_format="int8" / "int4dot")``: every decode GEMM over int8 weights, or
Q4_0's 4-bit codes times int8 activations) and llama.cpp (``llama-cpp-python`` from the bench
extra, `llama_cpp_peer`: the same random-weight model written to GGUF in F32 and quantised by
llama.cpp to Q8_0, Q4_0 and Q4_K_M); each of these reports its max abs logits error and its share
of eager's greedy tokens over 64 teacher-forced steps beside its numbers, and ours are held to
llama.cpp's Q8_0 / Q4_0 tokens/s at no larger error. Without llama-cpp-python a note says so and
the run goes on. All run in this one process; within a row they alternate call by call (ABCDABCD...)
so machine noise hits all alike, and each row reports medians. Each thread count (``--threads``)
sets ``torch.set_num_threads``, ``tg.set_num_threads``, ORT's ``intra_op_num_threads`` and
OpenVINO's ``INFERENCE_NUM_THREADS`` alike.

Target (``--target``; default ``TG_TARGET``, else ``host``): every tensor_graphs compile is for
that machine (``tensor_graphs.target``: an ISA level such as ``x86-64-v3`` or a CPU such as
``znver3``; one this CPU cannot run is refused). When its ISA level is below the host's (AVX2 code
on an AVX-512 machine), the peers are held to it too where they have a switch: OpenBLAS
(``OPENBLAS_CORETYPE``), PyTorch (``ATEN_CPU_CAPABILITY``, ``MKL_ENABLE_INSTRUCTIONS``), oneDNN in
PyTorch and OpenVINO (``ONEDNN_MAX_CPU_ISA``), inductor (``cpp.simdlen``, gcc ``-march``). The
libraries read these when they load, so the run sets them and re-executes itself once;
``--no-force-isa`` skips that. ONNX Runtime has no such switch. The report says what was held.

The same run measures the machine's ceilings: the arithmetic peak of each precision the target
has (an emitted microkernel per unit: float32 FMAs, AVX512-BF16 and VNNI dot products, AMX tiles;
``benchmarks/peaks.py``), OpenBLAS sgemm GFLOP/s (the scipy-openblas32 library tensor_graphs
calls) at 2048^3 and at each row's own GEMM shapes, and read bandwidth (``np.max`` /
``torch.sum`` over 512 MiB, the better). Forward / prefill rows report tensor_graphs' achieved
GFLOP/s as a share of the peak of the precision it ran in (and of sgemm); decode rows the
tokens/s as a share of the bandwidth ceiling.

``--quick`` runs tiny configurations of the same workloads (a smoke test of the whole pipeline,
a few minutes); its timings say nothing about the full-size models, and its outputs default to
``BENCHMARKS.quick.md`` / ``benchmarks.quick.png`` so that they never overwrite a full report.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # the sibling benchmark scripts, also when imported by tg-bench

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Mapping  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

import torch  # noqa: E402

import decode  # noqa: E402  (sets TORCHINDUCTOR_CACHE_DIR to a fresh directory before inductor loads)
import gpt2  # noqa: E402
import mlp  # noqa: E402
import roofline  # noqa: E402

from tensor_graphs import target as tg_target  # noqa: E402  (its Target; `Target` below is a row's goal)
from tensor_graphs.codegen.llvm import peak_kernels  # noqa: E402
from tensor_graphs.target import cpu_model  # noqa: E402

WORKLOADS = ("mlp", "encoder", "gpt2-prefill", "gpt2-decode", "qwen3", "conv")
LLAMA_ENGINES = tuple(f"llama.cpp {f}" for f in decode.LLAMA_FORMATS)
ENGINES = ("tensor_graphs", "tg-tuned", "tg-dynamic", "tg-lowp", "tg-int8", "tg-int4", "eager", "torch.compile", "onnxruntime",
           "onnxruntime-opt", "openvino", "openvino-bf16", *LLAMA_ENGINES)
#: tensor_graphs' own engines: the heuristic paths and the tuned ones (`gpt2.make_tensor_graphs_tuned`,
#: `decode.TensorGraphsTuned`, at 1e-2 `gpt2.make_tensor_graphs_lowp`), its decoders over int8 and
#: int4 weights (`decode.weight_engine`); never peers
TG_ENGINES = ("tensor_graphs", "tg-tuned", "tg-dynamic", "tg-lowp", "tg-int8", "tg-int4")
#: the engines in reduced precision (bf16, int8, int4): never "the fastest peer" of a float32 row;
#: their errors beside their times say what they give up
REDUCED_PRECISION = (*gpt2.REDUCED_PRECISION, "tg-int8", "tg-int4", *(e for e in LLAMA_ENGINES if not e.endswith("F32")))
#: tensor_graphs' decoder over cheaper weights -> the llama.cpp format it is held to (issue 32)
LLAMA_RIVALS = {"tg-int8": "llama.cpp Q8_0", "tg-int4": "llama.cpp Q4_0"}
LABELS = {
    "tensor_graphs": "tensor_graphs",
    "tg-tuned": "tuned",
    "tg-dynamic": "dynamic",
    "eager": "PyTorch eager",
    "torch.compile": "torch.compile (inductor)",
    "onnxruntime": "ONNX Runtime",
    "onnxruntime-opt": "ONNX Runtime + transformers optimizer",
    "openvino": "OpenVINO",
    "tg-lowp": "tuned at 1e-2 (bf16, int8)",
    "tg-int8": "int8 weights",
    "tg-int4": "int4 weights (Q4_0's)",
    "openvino-bf16": "OpenVINO bf16",
    **{e: e for e in LLAMA_ENGINES},
}
CHART_NAMES = {"mlp": "MLP", "encoder": "Encoder", "gpt2-prefill": "GPT-2", "gpt2-decode": "GPT-2 KV",
               "qwen3": "Qwen3", "conv": "Conv"}
SHORT = {"tensor_graphs": "tg", "tg-tuned": "tuned", "tg-dynamic": "dynamic", "eager": "eager", "torch.compile": "torch.compile", "onnxruntime": "ORT",
         "onnxruntime-opt": "ORT + optimizer", "openvino": "OpenVINO", "tg-lowp": "tuned@1e-2",
         "openvino-bf16": "OpenVINO bf16", "tg-int8": "tg int8", "tg-int4": "tg int4",
         **{e: e.replace("llama.cpp", "llama") for e in LLAMA_ENGINES}}
COLORS = {"tensor_graphs": "#d62728", "tg-tuned": "#8c564b", "tg-dynamic": "#e377c2", "eager": "#1f77b4", "torch.compile": "#ff7f0e", "onnxruntime": "#2ca02c",
          "onnxruntime-opt": "#17becf", "openvino": "#9467bd", "tg-lowp": "#bcbd22", "openvino-bf16": "#7f7f7f",
          "tg-int8": "#ff9896", "tg-int4": "#c49c94", "llama.cpp F32": "#aec7e8", "llama.cpp Q8_0": "#98df8a",
          "llama.cpp Q4_0": "#c5b0d5", "llama.cpp Q4_K_M": "#dbdb8d"}

log = gpt2.log


@dataclass(frozen=True)
class Repeats:
    """How many timed rounds / steps the workloads run (medians over them)."""

    mlp_rounds: int  # forward rows: rounds of alternating turns (gpt2.bench)
    rounds: int
    prefill_rounds: int  # KV-cache prefill (decode.bench_prefill)
    steps: int  # timed decode steps per engine (decode.bench_decode)
    decode_warmup: int


REPEATS = {False: Repeats(mlp_rounds=20, rounds=10, prefill_rounds=3, steps=12, decode_warmup=2),
           True: Repeats(mlp_rounds=3, rounds=3, prefill_rounds=2, steps=6, decode_warmup=2)}


@dataclass
class Result:
    """One table row: one workload at one shape and thread count."""

    workload: str  # a WORKLOADS key
    model: str  # "GPT-2 small (all logits)"
    what: str  # "prefill 128", "decode @128", "batch 64"
    threads: int
    unit: str  # "ms" (per call, lower is better) or "tok/s" (higher is better)
    values: dict[str, float] = field(default_factory=dict)
    engines: list[str] = field(default_factory=list)  # the engines this row ran (the others: n/a)
    failed: dict[str, str] = field(default_factory=dict)
    flops: float | None = None  # per call, counted (roofline.FLOPS_HOW)
    gemm_flops: float | None = None  # of which weight GEMMs
    gemm_gflops: float | None = None  # the row's weight GEMMs alone through OpenBLAS sgemm
    bytes_per_token: float | None = None  # decode rows: weights + KV cache read per token
    ceiling: float | None = None  # decode rows: tok/s at the measured read bandwidth
    gemm_bound: bool = False
    tokens: int | None = None  # rows of the weight GEMMs (batch x seq); below 16 they are GEMVs
    precision: str = "float32"  # what tensor_graphs computed this row in: its peak is the ceiling
    #: engine -> its error: forward rows max |y - y64| / max |y64| against eager in float64; decode
    #: rows (engines that report one) the max abs logits error over teacher-forced steps
    errors: dict[str, float] = field(default_factory=dict)
    #: decode rows: engine -> the share of its greedy tokens that are eager's over those steps
    agreement: dict[str, float] = field(default_factory=dict)

    @property
    def gemv(self) -> bool:
        """Weight GEMMs of a few rows are matrix-vector products: memory-bound, sgemm is no ceiling."""
        return self.tokens is not None and self.tokens < 16

    def seconds(self, engine: str) -> float:
        v = self.values[engine]
        return v / 1e3 if self.unit == "ms" else 1.0 / v

    def fastest_peer(self) -> str | None:
        """The fastest float32 peer (reduced-precision peers are held against tensor_graphs'
        own reduced-precision engines: `_lowp_at_most_openvino_bf16`, `_at_least_llama`)."""
        peers = [e for e in self.values if e not in TG_ENGINES and e not in REDUCED_PRECISION]
        return min(peers, key=self.seconds) if peers else None

    def tg_ratio(self) -> float | None:
        """tensor_graphs' time over the fastest peer's (below 1: tensor_graphs is faster)."""
        peer = self.fastest_peer()
        if peer is None or "tensor_graphs" not in self.values:
            return None
        return self.seconds("tensor_graphs") / self.seconds(peer)

    def tg_gflops(self) -> float | None:
        if self.unit != "ms" or not self.flops or "tensor_graphs" not in self.values:
            return None
        return self.flops / self.seconds("tensor_graphs") / 1e9


@dataclass
class Run:
    """What the workloads share: options, ceilings, collected rows, compile times and notes."""

    threads: list[int]
    quick: bool
    results: list[Result] = field(default_factory=list)
    compile_rows: list[tuple[str, str, str, float]] = field(default_factory=list)  # (model, engine, step, s)
    notes: list[str] = field(default_factory=list)
    sgemm: dict[int, list[float]] = field(default_factory=dict)  # threads -> GFLOP/s measurements
    peaks: dict[int, dict[str, list[float]]] = field(default_factory=dict)  # threads -> peak unit -> GOP/s
    bandwidth: dict[int, float] = field(default_factory=dict)  # threads -> best read bytes/s
    bandwidth_start: dict[int, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # workload -> wall time
    host_isa: str = ""  # the host target's describe()
    target: str = ""  # describe() of the target tensor_graphs compiles for
    isa_notes: list[str] = field(default_factory=list)  # the peers' ISA: the first line, then one per peer
    isa_env: dict[str, str] = field(default_factory=dict)  # the ISA switches in this process's environment
    engines: tuple[str, ...] | None = None  # --engines: only these (None: every installed one)
    #: model label -> the "tg-dynamic" graph serving every row of that model (`dynamic_maker`)
    dynamic_graphs: dict[str, object] = field(default_factory=dict)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            log(f"  note: {text}")


@dataclass(frozen=True)
class Ceilings:
    """The run's ceilings, each the best of its measurements: OpenBLAS sgemm and each precision's
    arithmetic peak (`peak_kernels`: the fastest unit of that precision), per thread count."""

    sgemm: dict[int, float]
    #: threads -> precision -> GOP/s
    peaks: dict[int, dict[str, float]] = field(default_factory=dict)

    @staticmethod
    def of(run: Run) -> Ceilings:
        peaks: dict[int, dict[str, float]] = {}
        for t, units in run.peaks.items():
            for unit, gops in units.items():
                precision = peak_kernels.UNITS[unit].precision
                peaks.setdefault(t, {})[precision] = max(max(gops), peaks.get(t, {}).get(precision, 0.0))
        return Ceilings({t: max(v) for t, v in run.sgemm.items()}, peaks)

    def peak(self, r: Result) -> float | None:
        """The peak of the precision row ``r`` ran in, on its threads (None: not measured)."""
        return self.peaks.get(r.threads, {}).get(r.precision)


# --------------------------------------------------------------------------- peers


def ort_optimizer_maker(model_type: str, num_heads: int, hidden: int, run: Run, label: str) -> Callable:
    """An engine maker (``gpt2.MAKERS`` signature): ONNX Runtime on the transformers-optimized export.

    ``onnxruntime.transformers.optimizer.optimize_model`` with ``model_type`` (falling back to the
    generic ``bert`` fusions when that type's pass fails on this export), ``opt_level=0`` (its own
    fusions only), then a session with ``ORT_ENABLE_ALL`` like the plain ONNX Runtime engine.
    """

    def make(model, x, threads, cache):
        if "ort_opt_path" not in cache:
            from onnxruntime.transformers import optimizer

            path = gpt2.onnx_file(model, x, cache)  # shared with the plain ONNX Runtime engine
            errors = []
            t0 = time.perf_counter()
            for mt in dict.fromkeys((model_type, "bert")):
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        opt = optimizer.optimize_model(path, model_type=mt, num_heads=num_heads, hidden_size=hidden,
                                                       opt_level=0)
                    break
                except Exception as e:  # noqa: BLE001 - fall back to the generic fusions, else give up
                    errors.append(f"model_type {mt!r}: {decode.one_line(e)}")
            else:
                raise RuntimeError("transformers optimizer failed: " + " | ".join(errors))
            fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
            out = path.removesuffix(".onnx") + ".opt.onnx"
            opt.save_model_to_file(out)
            seconds = time.perf_counter() - t0
            fallback = f" (after {'; '.join(errors)})" if errors else ""
            run.note(f"{label}: ONNX Runtime transformers optimizer, model_type {mt!r}{fallback}: fused "
                     + (", ".join(f"{v} {k}" for k, v in fused.items()) or "nothing"))
            cache["ort_opt_path"] = out
            cache["compile:transformers optimizer"] = seconds
        sess, seconds = gpt2.timed(lambda: gpt2.ort_session(cache["ort_opt_path"], threads))
        cache[f"compile:onnxruntime-opt session:{threads}"] = seconds
        feed = {sess.get_inputs()[0].name: x.numpy()}
        return lambda: sess.run(None, feed)[0]

    return make


def openvino_maker(run: Run, label: str) -> Callable:
    """``gpt2.make_openvino`` (an engine maker), noting when the conversion had to fall back from
    TorchScript tracing to ``torch.export`` (and why)."""

    def make(model, x, threads, cache):
        out = gpt2.make_openvino(model, x, threads, cache)
        if "(after" in cache.get("ov_how", ""):
            run.note(f"{label}: OpenVINO: ov.convert_model via {cache['ov_how']}")
        return out

    return make


def dynamic_maker(run: Run, label: str, dim: int, name: str, maximum: int) -> Callable:
    """The "tg-dynamic" engine (``gpt2.MAKERS`` signature): ONE ``tg.compile`` with
    ``dynamic_shapes`` (dim ``dim`` of the input the size symbol ``name`` in ``[1, maximum]``) per
    model, at its first row, serving every row of that model: the same weights, sizes read at run
    time. Its compile time is counted once, at that row. A size-1 example is doubled along ``dim``
    (torch.export specialises a dim it sees as 1)."""
    from torch.export import Dim

    def make(model, x, threads, cache):
        fn = run.dynamic_graphs.get(label)
        if fn is None:
            example = x if x.shape[dim] > 1 else torch.cat([x, x], dim)
            spec = ({dim: Dim(name, min=1, max=maximum)},)
            fn, seconds = gpt2.timed(lambda: gpt2.tg.compile(model, (example,), dynamic_shapes=spec))
            log(f"  tensor_graphs dynamic compile ({name} in 1..{maximum}, every row of this model): {seconds:.2f} s; "
                f"{fn.memory}")
            cache["compile:tg-dynamic"] = seconds
            run.dynamic_graphs[label] = fn
        return lambda: fn(x)

    return make


def forward_makers(run: Run, label: str, dynamic: tuple[int, str, int] | None = None, **extra: Callable) -> dict[str, Callable]:
    """The engine makers of a forward row: ``gpt2.MAKERS``, OpenVINO's with its notes, with
    ``dynamic`` = (dim, symbol, maximum) the "tg-dynamic" engine's (`dynamic_maker`), ``extra``."""
    makers = dict(gpt2.MAKERS, openvino=openvino_maker(run, label), **extra)
    if dynamic is not None:
        makers["tg-dynamic"] = dynamic_maker(run, label, *dynamic)
    return makers


def installed(run: Run, engines: list[str]) -> list[str]:
    """``engines`` less the peers whose package is not installed here (a note says so), and less
    those ``--engines`` leaves out."""
    out = []
    for e in engines:
        if run.engines is not None and e not in run.engines:
            continue
        why = gpt2.not_installed(e)
        if why:
            run.note(f"{LABELS[e]}: skipped: {why}")
        else:
            out.append(e)
    return out


# --------------------------------------------------------------------------- workloads


def _compile_label(step: str) -> tuple[str, str]:
    """``bench_forward``'s compile keys -> (engine label, step)."""
    engine, _, threads = step.partition(":")
    names = {
        "tensor_graphs": ("tensor_graphs", "tg.compile"),
        "tg-tuned": ("tensor_graphs", "tg.compile(tune='missing') from an empty database: measuring included"),
        "tg-dynamic": ("tensor_graphs", "tg.compile(dynamic_shapes=...): once, serving every row of the model"),
        "torch.compile": ("torch.compile", "first call (compile; inductor cache fresh per run)"),
        "onnxruntime session": ("ONNX Runtime", "session (ORT_ENABLE_ALL)"),
        "onnxruntime-opt session": ("ONNX Runtime + optimizer", "session (ORT_ENABLE_ALL)"),
        "transformers optimizer": ("ONNX Runtime + optimizer", "optimize_model"),
        "openvino compile_model": ("OpenVINO", "compile_model (CPU, f32, LATENCY, 1 stream)"),
        "openvino-bf16 compile_model": ("OpenVINO bf16", "compile_model (CPU, bf16, LATENCY, 1 stream)"),
        "tg-lowp": ("tensor_graphs", "tg.compile(tune='missing', tolerance=1e-2), sharing tg-tuned's database: "
                                     "measuring included"),
    }
    if engine.startswith("openvino convert_model"):
        names[engine] = ("OpenVINO", engine.removeprefix("openvino ").replace("convert_model", "ov.convert_model"))
    eng, what = names.get(engine, ("ONNX Runtime", engine))
    return eng, what + (f", {threads} thread(s)" if threads else "")


def forward_rows(run: Run, key: str, model_label: str, what: str, model, x, engines: list[str], *, repeat: int,
                 warmup: int, makers: dict, gemms: list[roofline.Gemm], attn_flops: int, gemm_bound: bool = False):
    """A stateless ``model(x)`` row per thread count, through ``gpt2.bench_forward``."""
    log(f"\n{model_label}, {what}:")
    engines = [e for e in installed(run, engines) if e in makers]  # "tg-dynamic": where the workload gives its dim
    errors: dict[int, dict[str, float]] = {}
    med_by_threads, seconds, failed = gpt2.bench_forward(model, x, engines, run.threads, repeat, makers=makers,
                                                         warmup=warmup, errors=errors)
    gemm_flops = sum(g.flops for g in gemms)
    for threads, med in med_by_threads:
        fails = {}
        for line in failed:
            name, _, rest = line.partition(" (")
            if rest.startswith(f"{threads} thread"):
                fails[name] = rest.split("): ", 1)[-1]
        gg = roofline.sgemm_gflops(gemms, threads, repeat=3 if run.quick else 5, min_seconds=0.05)
        log(f"  {what}, {threads} thread(s): its weight GEMMs alone through sgemm: {gg:.1f} GFLOP/s")
        run.results.append(Result(key, model_label, what, threads, "ms", med, list(engines), fails,
                                  gemm_flops + attn_flops, gemm_flops, gg, gemm_bound=gemm_bound,
                                  tokens=gemms[0].m if gemms else None, errors=errors.get(threads, {})))
    for step, t in seconds.items():
        eng, label = _compile_label(step)
        run.compile_rows.append((f"{model_label}, {what}", eng, label, t))
    for line in failed:
        run.note(f"{model_label}, {what}: {line}")


def workload_mlp(run: Run) -> None:
    model = mlp.build()
    engines = [e for e in ENGINES if e != "onnxruntime-opt"]  # the transformers optimizer has no MLP patterns
    label = "MLP 256-1024-1024-256"
    for batch in (1, 64):
        x = torch.randn(batch, 256, generator=torch.Generator().manual_seed(batch))
        forward_rows(run, "mlp", label, f"batch {batch}", model, x, engines,
                     repeat=REPEATS[run.quick].mlp_rounds, warmup=20, makers=forward_makers(run, label, dynamic=(0, "batch", 256)),
                     gemms=roofline.weight_gemms(model, batch), attn_flops=0)


class EncoderBlock(torch.nn.Module):
    """``x [B, S, d] -> y [B, S, d]``: one transformers ``BertLayer`` (post-LN, no attention mask)."""

    def __init__(self, d_model: int, heads: int, ffn: int):
        super().__init__()
        import transformers
        from transformers.models.bert.modeling_bert import BertLayer

        config = transformers.BertConfig(hidden_size=d_model, num_attention_heads=heads, intermediate_size=ffn,
                                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        config._attn_implementation = "sdpa"
        self.layer = BertLayer(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        return out[0] if isinstance(out, tuple) else out


def workload_encoder(run: Run) -> None:
    """d_model 768 (BERT-base) and the overhead-bound d_model 256, at seq 128."""
    configs = [(128, 4, 512, 32)] if run.quick else [(768, 12, 3072, 128), (256, 4, 1024, 128)]
    for d, heads, ffn, seq in configs:
        torch.manual_seed(0)
        model = EncoderBlock(d, heads, ffn).eval()
        x = torch.randn(1, seq, d, generator=torch.Generator().manual_seed(seq))
        label = f"Encoder block (BertLayer d {d}, {heads} heads, FFN {ffn})"
        ort_opt = ort_optimizer_maker("bert", heads, d, run, label)
        makers = forward_makers(run, label, dynamic=(1, "seq", 512), **{"onnxruntime-opt": ort_opt})
        forward_rows(run, "encoder", label, f"seq {seq}", model, x, list(ENGINES), repeat=REPEATS[run.quick].rounds,
                     warmup=2, makers=makers, gemms=roofline.weight_gemms(model, seq),
                     attn_flops=roofline.attention_flops(1, heads, d // heads, seq, seq))


def workload_gpt2_prefill(run: Run) -> None:
    if run.quick:
        model = gpt2.LogitsOnly(decode.build_gpt2(True)).eval()
        seqs, label = (16, 32), "GPT-2 (tiny), all logits"
    else:
        model, seqs, label = gpt2.build(), (32, 128), "GPT-2 small, all logits"
    c = model.model.config
    for seq in seqs:
        ids = torch.randint(0, c.vocab_size, (1, seq), generator=torch.Generator().manual_seed(seq))
        ort_opt = ort_optimizer_maker("gpt2", c.n_head, c.n_embd, run, label)
        makers = forward_makers(run, label, dynamic=(1, "seq", 1024), **{"onnxruntime-opt": ort_opt})
        gemms = roofline.weight_gemms(model, seq)  # the LM head (tied, an nn.Linear) over every position
        forward_rows(run, "gpt2-prefill", label, f"prefill {seq}", model, ids, list(ENGINES),
                     repeat=REPEATS[run.quick].rounds, warmup=2, makers=makers, gemms=gemms,
                     attn_flops=roofline.attention_flops(c.n_layer, c.n_head, c.n_embd // c.n_head, seq, seq),
                     gemm_bound=seq >= 128)


def decode_rows(run: Run, key: str, spec: decode.Spec) -> None:
    """Prefill and decode rows of one KV-cached model, through ``decode.bench_model``."""
    model, t = gpt2.timed(lambda: spec.build(run.quick))
    log(f"\n{spec.label}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, built in {t:.1f} s")
    rep = REPEATS[run.quick]
    steps, warmup, repeat = rep.steps, rep.decode_warmup, rep.prefill_rounds
    engines = installed(run, list(decode.ENGINES))
    rows, compile_rows, notes = decode.bench_model(spec, model, engines, run.threads, steps=steps,
                                                   warmup=warmup, repeat=repeat, bandwidth=run.bandwidth)
    c = model.config
    layers, _, head_dim = decode.kv_shape(model)
    gemms = roofline.weight_gemms(model, spec.prefill, lm_head=model.get_output_embeddings(), lm_rows=1)
    gemm_flops = sum(g.flops for g in gemms)
    attn = roofline.attention_flops(layers, c.num_attention_heads, head_dim, spec.prefill, spec.prefill)
    wbytes = decode.weight_bytes_per_token(model)
    for r in rows:
        res = Result(key, spec.label, r.what, r.threads, r.unit, dict(r.values), list(engines),
                     {k: v for k, v in r.na.items() if k not in r.values},
                     errors={k: v[0] for k, v in r.errors.items()}, agreement={k: v[1] for k, v in r.errors.items()})
        if r.unit == "ms":
            res.what = f"{r.what} (last logits)"
            res.flops, res.gemm_flops = gemm_flops + attn, gemm_flops
            res.gemm_gflops = roofline.sgemm_gflops(gemms, r.threads, repeat=3 if run.quick else 5, min_seconds=0.05)
            res.gemm_bound = key == "qwen3" and spec.prefill >= 128
            res.tokens = spec.prefill
            log(f"  {r.what}, {r.threads} thread(s): its weight GEMMs alone through sgemm: {res.gemm_gflops:.1f} GFLOP/s")
        else:
            ctx = int(r.what.split("@")[1])
            res.bytes_per_token = wbytes + decode.kv_bytes_per_token(model, ctx)
            res.ceiling = r.ceiling
        run.results.append(res)
    run.compile_rows += [(m, e, w, t) for m, e, w, t in compile_rows]
    for n in notes:
        run.note(n)
    del model
    gc.collect()


def workload_gpt2_decode(run: Run) -> None:
    p = 16 if run.quick else 128
    decode_rows(run, "gpt2-decode", decode.Spec("gpt2", p, [p], decode.build_gpt2,
                                                "GPT-2 (tiny), KV cache" if run.quick else "GPT-2 small, KV cache"))


def workload_qwen3(run: Run) -> None:
    p = 16 if run.quick else 128
    decode_rows(run, "qwen3", decode.Spec("qwen3", p, [p], decode.build_qwen3,
                                          "Qwen3-0.6B-shaped (tiny)" if run.quick else "Qwen3-0.6B-shaped"))


class Features(torch.nn.Module):
    """``pixel_values -> pooler_output`` of a transformers vision backbone."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixels).pooler_output


class NoisePrediction(torch.nn.Module):
    """``(sample, timestep) -> noise`` of a diffusers UNet2DModel, the timestep a fixed buffer
    (one denoising step: the engines time the network, not the timestep's embedding input)."""

    def __init__(self, unet: torch.nn.Module, timestep: int):
        super().__init__()
        self.unet = unet
        self.register_buffer("timestep", torch.tensor([timestep]), persistent=False)

    def forward(self, sample: torch.Tensor) -> torch.Tensor:
        return self.unet(sample, self.timestep).sample


def build_resnet50(quick: bool) -> torch.nn.Module:
    """transformers' ResNet-50 (``ResNetConfig()``'s defaults: bottleneck blocks 3-4-6-3, widths
    256-512-1024-2048), random weights, batch norms with trained-like statistics (folded into the
    convolutions by tensor_graphs, by the peers' own graph optimisers)."""
    import transformers

    config = transformers.ResNetConfig(depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256], embedding_size=16) if quick \
        else transformers.ResNetConfig()
    torch.manual_seed(0)
    model = Features(transformers.ResNetModel(config))
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def build_unet(quick: bool) -> torch.nn.Module:
    """diffusers' UNet2DModel in the shape of DDPM's CIFAR-10 model (google/ddpm-cifar10-32:
    32x32 RGB, channels 128-256-256-256, two ResNet blocks per level, self-attention at 16x16,
    35.7 M parameters), random weights; one noise prediction at timestep 500."""
    import diffusers

    if quick:
        unet = diffusers.UNet2DModel(sample_size=16, block_out_channels=(32, 64), layers_per_block=1,
                                     down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                     up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8)
    else:
        unet = diffusers.UNet2DModel(
            sample_size=32, in_channels=3, out_channels=3, layers_per_block=2, block_out_channels=(128, 256, 256, 256),
            down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
        )
    torch.manual_seed(0)
    return NoisePrediction(unet, 500).eval()


def workload_conv(run: Run) -> None:
    """ResNet-50 at 224x224 and a DDPM UNet at 32x32, batch 1: convolution-bound rows."""
    cases = [("resnet", build_resnet50, (1, 3, 224 if not run.quick else 64, 224 if not run.quick else 64)),
             ("unet", build_unet, (1, 3, 32 if not run.quick else 16, 32 if not run.quick else 16))]
    for name, build, shape in cases:
        if name == "unet" and importlib.util.find_spec("diffusers") is None:
            run.note("UNet row: skipped: diffusers is not installed (pip install diffusers)")
            continue
        model = build(run.quick)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
        label = ("ResNet-50 (transformers)" if name == "resnet" else "DDPM UNet2DModel (diffusers, CIFAR-10 shape)") + \
            (" (tiny)" if run.quick else "")
        # the largest GEMM first: the row's "tokens" (its GEMV test) are that GEMM's rows, not the
        # time embedding's one row
        gemms = sorted(roofline.conv_gemms(model, x), key=lambda g: -g.flops)
        engines = [e for e in ENGINES if e != "onnxruntime-opt"]  # the transformers optimizer has no conv patterns
        forward_rows(run, "conv", label, f"batch 1, {shape[2]}x{shape[3]}", model, x, engines,
                     repeat=REPEATS[run.quick].rounds, warmup=2, gemms=gemms,
                     makers=forward_makers(run, label, dynamic=(0, "batch", 16) if name == "resnet" else None),
                     attn_flops=0, gemm_bound=not run.quick)


RUNNERS = {
    "mlp": workload_mlp,
    "encoder": workload_encoder,
    "gpt2-prefill": workload_gpt2_prefill,
    "gpt2-decode": workload_gpt2_decode,
    "qwen3": workload_qwen3,
    "conv": workload_conv,
}


# --------------------------------------------------------------------------- the machine



def machine() -> dict:
    info = {"cpu": cpu_model(), "logical_cpus": os.cpu_count()}
    with contextlib.suppress(AttributeError, OSError):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int([ln for ln in open("/proc/meminfo") if ln.startswith("MemTotal")][0].split()[1])
        info["memory_gib"] = round(kb / 2**20, 1)
    info["os"] = platform.platform()
    return info


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("tensor_graphs", "torch", "transformers", "onnxruntime", "onnx", "onnxscript", "openvino", "numpy",
                 "xdsl", "llvmlite", "scipy-openblas32", "matplotlib"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    with contextlib.suppress(Exception):
        out["openblas"] = roofline.openblas_config()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_HERE, capture_output=True, text=True,
                              timeout=10)
        if head.returncode == 0:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_HERE,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            out["git"] = head.stdout.strip() + (" + uncommitted changes" if dirty else "")
    return out


#: sgemm measurements of one run further apart than this (slowest / fastest) mean the machine's
#: speed changed during the run (another process on the cores, or on a shared physical core,
#: which the load average does not show)
SPEED_SPREAD = 0.85


def speed_varied(sgemm: dict[int, list[float]]) -> str | None:
    """A warning for the report when one thread count's sgemm measurements disagree."""
    spread = {t: min(v) / max(v) for t, v in sgemm.items() if len(v) > 1 and max(v) > 0}
    low = {t: f for t, f in spread.items() if f < SPEED_SPREAD}
    if not low:
        return None
    which = ", ".join(f"{t} thread(s) {100 * (1 - f):.0f}% below the best" for t, f in sorted(low.items()))
    return (f"**The machine's speed varied during this run** (slowest sgemm measurement: {which}): something "
            "else used the cores at times. Ratios to peers are measured alternating call by call and hold; a "
            "row timed in a slow moment reads low against the ceiling (the best measurement). Re-run to compare.")


def measure_ceilings(run: Run, size: int, target: tg_target.Target) -> None:
    for t in run.threads:
        g = roofline.square_gflops(size, t, repeat=3 if run.quick else 5)
        run.sgemm.setdefault(t, []).append(g)
        log(f"sgemm {size}^3, {t} thread(s): {g:.1f} GFLOP/s")
        for unit in peak_kernels.available_units(target):
            p = peak_kernels.measure_peak(unit.name, target, t, repeat=2 if run.quick else 3)
            run.peaks.setdefault(t, {}).setdefault(unit.name, []).append(p.gops)
            log(f"peak of {unit.name} ({unit.precision}), {t} thread(s): {p.gops:.0f} GOP/s")
        if t not in run.bandwidth:
            bw = decode.measure_bandwidth(t, repeat=3 if run.quick else 7)
            run.bandwidth[t] = run.bandwidth_start[t] = bw
            log(f"np.max / torch.sum read bandwidth, {t} thread(s): {bw / 1e9:.1f} GB/s")


# --------------------------------------------------------------------------- the target and the peers' ISA

#: An ISA level as the report names its vectors.
ISA_NAMES = {"x86-64": "SSE2", "x86-64-v2": "SSE4.2", "x86-64-v3": "AVX2", "x86-64-v4": "AVX-512"}


@dataclass(frozen=True)
class IsaSwitches:
    """What holds the peers' libraries to one ISA level: environment variables, each read once when
    its library loads, and inductor's vector width (``torch._inductor.config.cpp.simdlen``, set in
    this process)."""

    openblas: str  # OPENBLAS_CORETYPE: OpenBLAS's kernel set (the sgemm ceiling; tensor_graphs' BLAS calls)
    aten: str  # ATEN_CPU_CAPABILITY: PyTorch's vectorised ATen kernels
    mkl: str  # MKL_ENABLE_INSTRUCTIONS: PyTorch's sgemm (MKL)
    onednn: str  # ONEDNN_MAX_CPU_ISA: oneDNN, in PyTorch and in OpenVINO
    march: str  # TORCHINDUCTOR_CPP_MARCH: gcc's -march for inductor's C++ (else native)
    simdlen: int  # inductor's vector bits: 256 = its AVX2 code; 0 = none (it has no SSE code: scalar C++)
    caveat: str = ""

    def env(self) -> dict[str, str]:
        return {"OPENBLAS_CORETYPE": self.openblas, "ATEN_CPU_CAPABILITY": self.aten,
                "MKL_ENABLE_INSTRUCTIONS": self.mkl, "ONEDNN_MAX_CPU_ISA": self.onednn,
                "TORCHINDUCTOR_CPP_MARCH": self.march}


#: The switches per target ISA level below the host's (the libraries' names for each level).
ISA_SWITCHES = {
    "x86-64-v3": IsaSwitches("Haswell", "avx2", "AVX2", "AVX2", "x86-64-v3", 256),
    "x86-64-v2": IsaSwitches("Nehalem", "default", "SSE4_2", "SSE41", "x86-64-v2", 0),
    "x86-64": IsaSwitches("Nehalem", "default", "SSE4_2", "SSE41", "x86-64", 0,
                          caveat="OpenBLAS, MKL and oneDNN have no switch below SSE4.x: they run at x86-64-v2"),
}
#: Every variable the switches set (recorded in the JSON as this process had them).
ISA_VARIABLES = tuple(ISA_SWITCHES["x86-64-v3"].env())
#: Set in the environment of the re-executed run, so that it never re-executes again.
REEXEC_MARKER = "TG_BENCH_ISA_REEXEC"


@dataclass(frozen=True)
class IsaPlan:
    """How the peers are held to the target's ISA level: ``switches`` (None: they are not held), the
    variables to set before the libraries load (``to_set``: those not already set; a value set
    before the run is kept) and the report's lines (the first says why, then one per peer)."""

    switches: IsaSwitches | None
    to_set: dict[str, str]
    notes: list[str]


def isa_plan(host_level: str, target_level: str, env: Mapping[str, str], *, force: bool = True,
             inductor_march: bool = True) -> IsaPlan:
    """Which ISA switches to set for tensor_graphs compiled for ``target_level`` on a host of
    ``host_level``, given the environment ``env``; ``force`` False: none (``--no-force-isa``).
    ``inductor_march``: this torch's inductor reads ``TORCHINDUCTOR_CPP_MARCH`` (``cpp.march``)."""
    order = list(tg_target.LEVELS)
    host, target = f"{ISA_NAMES[host_level]} ({host_level})", f"{ISA_NAMES[target_level]} ({target_level})"
    if order.index(target_level) >= order.index(host_level):
        return IsaPlan(None, {}, [f"the host is {host} and tensor_graphs is compiled for that level: the peers "
                                  "already run at it; nothing forced"])
    if not force:
        return IsaPlan(None, {}, [f"not forced (--no-force-isa): the peers run at the host's {host}, "
                                  f"tensor_graphs at {target}"])
    switches = ISA_SWITCHES[target_level]
    wanted = switches.env()

    def show(var: str) -> str:
        if env.get(var, wanted[var]) != wanted[var]:
            return f"{var}={env[var]} (set before the run: kept)"
        return f"{var}={wanted[var]}"

    vectors = "its AVX2 vector code" if switches.simdlen == 256 else "no vector code: it has none below AVX2"
    march = (show("TORCHINDUCTOR_CPP_MARCH") if inductor_march
             else "gcc still at -march=native (this torch has no cpp.march)")
    notes = [
        f"tensor_graphs is compiled for {target}, below the host's {host}: the peers are held to it where they "
        "have a switch (set before their libraries load)",
        f"OpenBLAS (the sgemm ceiling; tensor_graphs' BLAS calls): {show('OPENBLAS_CORETYPE')}",
        f"PyTorch eager: {show('ATEN_CPU_CAPABILITY')}, {show('MKL_ENABLE_INSTRUCTIONS')} (its sgemm), "
        f"{show('ONEDNN_MAX_CPU_ISA')}",
        f"torch.compile (inductor): cpp.simdlen={switches.simdlen} ({vectors}; ATEN_CPU_CAPABILITY reaches its "
        f"generated C++ only while simdlen is unset, and never gcc's flags), {march}; its ATen calls as eager",
        f"OpenVINO: {show('ONEDNN_MAX_CPU_ISA')} (its oneDNN kernels; layers it runs through its own MLAS have "
        "no switch)",
        "ONNX Runtime: not forced (no ISA switch)",
    ]
    if switches.caveat:
        notes.append(switches.caveat)
    return IsaPlan(switches, {k: v for k, v in wanted.items() if k not in env}, notes)


def isa_unforced(plan: IsaPlan, why: str) -> IsaPlan:
    """``plan`` when its variables cannot be set before the libraries load: nothing held, ``why``."""
    return IsaPlan(None, {}, [f"not forced ({why}): the peers run at the host's ISA; would have set "
                              + ", ".join(f"{k}={v}" for k, v in plan.to_set.items())])


def reexec_argv() -> list[str]:
    """This process's command line again, for ``os.execv`` (``python -m ...`` and scripts alike)."""
    return [sys.executable, *getattr(sys, "orig_argv", [sys.executable, *sys.argv])[1:]]


def reexec_with(variables: dict[str, str]) -> None:
    """Run this command again, once, with ``variables`` set: the libraries read them when they load."""
    os.environ.update(variables)
    os.environ[REEXEC_MARKER] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, reexec_argv())


def hold_peers(plan: IsaPlan) -> list[str]:
    """Apply what ``plan`` sets in this process (inductor's ``simdlen``) and check what the libraries
    chose against the switches: a note for each that did not follow."""
    if plan.switches is None:
        return []
    import torch._inductor.config as inductor_config

    inductor_config.cpp.simdlen = plan.switches.simdlen
    problems = []
    want = os.environ.get("OPENBLAS_CORETYPE", "")
    core = roofline.openblas_core()
    if core is not None and core.lower() != want.lower():
        problems.append(f"OpenBLAS runs its {core} kernels despite OPENBLAS_CORETYPE={want}")
    want = os.environ.get("ATEN_CPU_CAPABILITY", "")
    have = torch.backends.cpu.get_cpu_capability()
    if have.lower() != want.lower():
        problems.append(f"PyTorch's ATen runs at {have} despite ATEN_CPU_CAPABILITY={want}")
    return problems


def settle_target(args, argv: list[str]) -> IsaPlan:
    """Point every tensor_graphs compile at ``args.target`` (``TG_TARGET``) and hold the peers to its
    ISA level: re-executes this command once when variables must be set first."""
    os.environ[tg_target.TARGET_ENV] = args.target.name
    import torch._inductor.config as inductor_config

    plan = isa_plan(tg_target.Target.host().level, args.target.level, os.environ, force=args.force_isa,
                    inductor_march=hasattr(inductor_config.cpp, "march"))
    if plan.to_set:
        if argv != sys.argv[1:]:
            return isa_unforced(plan, "tg-bench called with its own argument list, not re-executable")
        if os.environ.get(REEXEC_MARKER):
            return isa_unforced(plan, "the re-executed run still lacks them")
        log(f"holding the peers to {args.target.level}: re-executing with "
            + " ".join(f"{k}={v}" for k, v in plan.to_set.items()))
        reexec_with(plan.to_set)
    problems = hold_peers(plan)
    return IsaPlan(plan.switches, plan.to_set, plan.notes + problems)


# --------------------------------------------------------------------------- report


def _fmt(v: float) -> str:
    return f"{v:.3g}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def cell(r: Result, e: str) -> str:
    """An engine's number, its time over the row's fastest and its error (where measured)."""
    if e in r.values:
        fastest = min(r.seconds(k) for k in r.values)
        error = ""
        if e in r.agreement:  # a decode engine's max abs logits error and greedy agreement
            error = f", err {r.errors[e]:.3g}, {100 * r.agreement[e]:.0f}% tokens"
        elif e in r.errors:
            error = f", err {r.errors[e]:.1e}"
        return f"{_fmt(r.values[e])} ({r.seconds(e) / fastest:.2f}x{error})"
    if e in r.failed:
        return "failed"
    return "n/a" if e not in r.engines else "—"


def ceiling_cell(r: Result, ceilings: Ceilings) -> str:
    if r.unit == "ms":
        g, peak = r.tg_gflops(), ceilings.peak(r)
        if r.gemv:
            return "(GEMV)"
        return f"{100 * g / peak:.0f}% {r.precision} peak" if g and peak else ""
    if r.ceiling and "tensor_graphs" in r.values:
        return f"{100 * r.values['tensor_graphs'] / r.ceiling:.0f}% BW"
    return ""


def main_table(results: list[Result], engines: list[str], ceilings: Ceilings) -> str:
    head = ("| workload | row | threads | unit | " + " | ".join(LABELS[e] for e in engines)
            + " | tg / fastest peer | tg of ceiling |")
    lines = [head, "|---|---|--:|---|" + "--:|" * len(engines) + "--:|--:|"]
    for r in results:
        ratio = r.tg_ratio()
        rtxt = f"**{ratio:.2f}** ({SHORT[r.fastest_peer()]})" if ratio is not None else "n/a"
        lines.append(f"| {r.model} | {r.what} | {r.threads} | {r.unit} | "
                     + " | ".join(cell(r, e) for e in engines) + f" | {rtxt} | {ceiling_cell(r, ceilings)} |")
    return "\n".join(lines)


def compute_table(results: list[Result], ceilings: Ceilings, size: int) -> str:
    lines = ["| workload | row | threads | GFLOP per call (GEMMs) | tg GFLOP/s | % of its precision's peak | % of sgemm "
             f"{size}³ | its GEMMs alone in sgemm, GFLOP/s | tg % of that |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        if r.unit != "ms" or not r.flops:
            continue
        g = r.tg_gflops()
        mark = " ◆" if r.gemm_bound else ""
        pct = (lambda ref: f"{100 * g / ref:.0f}%") if g and not r.gemv else (lambda ref: "GEMV" if r.gemv else "—")
        lines.append(
            f"| {r.model} | {r.what}{mark} | {r.threads} | {r.flops / 1e9:.3g} ({r.gemm_flops / 1e9:.3g}) | "
            + (f"{g:.1f} | " if g else "— | ")
            + (f"{pct(ceilings.peak(r))}{'' if r.gemv else f' ({r.precision})'} | " if ceilings.peak(r) else "— | ")
            + f"{pct(ceilings.sgemm[r.threads])} | "
            + f"{r.gemm_gflops:.1f} | {pct(r.gemm_gflops)} |")
    return "\n".join(lines)


#: The targets each row is held to (issues 5 and 32): (what, holds(row, ceilings) -> bool | None).
#: None: the row cannot say (an engine failed, no ceiling).
Target = tuple[str, Callable[["Result", Ceilings], "bool | None"]]


def _ratio_at_most(limit: float) -> Callable[["Result", Ceilings], "bool | None"]:
    return lambda r, _: None if r.tg_ratio() is None else r.tg_ratio() <= limit  # type: ignore[operator]


def _peak_share(limit: float) -> Callable[["Result", Ceilings], "bool | None"]:
    def holds(r: Result, ceilings: Ceilings) -> bool | None:
        g, peak = r.tg_gflops(), ceilings.peak(r)
        return None if g is None or not peak else g >= limit * peak

    return holds


def _bandwidth_share(limit: float) -> Callable[["Result", Ceilings], "bool | None"]:
    def holds(r: Result, _: Ceilings) -> bool | None:
        tgv = r.values.get("tensor_graphs")
        return None if not tgv or not r.ceiling else tgv >= limit * r.ceiling

    return holds


def _tuned_at_most_heuristic(r: Result, _: Ceilings) -> bool | None:
    """The tuned engine's time at most the heuristic's, within 3% (the rows' noise here)."""
    if "tg-tuned" not in r.values or "tensor_graphs" not in r.values:
        return None
    return r.seconds("tg-tuned") <= 1.03 * r.seconds("tensor_graphs")


def _dynamic_near_static(r: Result, _: Ceilings) -> bool | None:
    """The dynamic graph's time at most 1.05x the static compile's for the row's size."""
    if "tg-dynamic" not in r.values or "tensor_graphs" not in r.values:
        return None
    return r.seconds("tg-dynamic") <= 1.05 * r.seconds("tensor_graphs")


def _lowp_at_most_openvino_bf16(r: Result, _: Ceilings) -> bool | None:
    """tensor_graphs at 1e-2 at most OpenVINO bf16's time, at an error no larger than its."""
    if "tg-lowp" not in r.values or "openvino-bf16" not in r.values or not {"tg-lowp", "openvino-bf16"} <= r.errors.keys():
        return None
    return r.seconds("tg-lowp") <= r.seconds("openvino-bf16") and r.errors["tg-lowp"] <= r.errors["openvino-bf16"]


def _lowp_speedup(limit: float) -> Callable[["Result", Ceilings], "bool | None"]:
    """tensor_graphs at 1e-2 at least ``limit`` times as fast as its float32 (heuristic) graph."""
    def holds(r: Result, _: Ceilings) -> bool | None:
        if "tg-lowp" not in r.values or "tensor_graphs" not in r.values:
            return None
        return r.seconds("tensor_graphs") >= limit * r.seconds("tg-lowp")

    return holds


def _at_least_llama(ours: str, theirs: str) -> Callable[["Result", Ceilings], "bool | None"]:
    """tensor_graphs' decoder over cheaper weights ``ours`` at least llama.cpp's format ``theirs``'
    tokens/s, at a max abs logits error no larger than its."""
    def holds(r: Result, _: Ceilings) -> bool | None:
        if ours not in r.values or theirs not in r.values or not {ours, theirs} <= r.errors.keys():
            return None
        return r.values[ours] >= r.values[theirs] and r.errors[ours] <= r.errors[theirs]

    return holds


#: How much faster than its own float32 graph tensor_graphs at 1e-2 is to be on compute-bound rows (issue 32)
LOWP_SPEEDUP = 1.8


def overhead_bound(r: Result) -> bool:
    """MLP batch 1, the d_model-256 encoder block and the decode rows."""
    return r.unit == "tok/s" or (r.workload == "mlp" and r.tokens == 1) or (r.workload == "encoder" and " d 256," in r.model)


#: The share of its precision's peak a GEMM-bound row is held to (issue 32).
PEAK_SHARE = 0.85


def row_targets(r: Result) -> list[Target]:
    """Every row: at most 1.0x the fastest peer (and the tuned engine, where it ran, at most the
    heuristic's time, within 3%; the dynamic graph, where it ran, within 5% of the static one); overhead-bound rows 0.7x; GEMM-bound prefill at
    least 85% of the peak of its precision (the float32 FMA units' for float32 rows) at every
    thread count; decode at least 1.25x the fastest peer's tok/s (a time ratio of 0.8) and 85% of
    the bandwidth ceiling. Where tensor_graphs ran at tolerance 1e-2 ("tg-lowp": bf16 and int8
    paths) on a row that is not overhead-bound: at least 1.8x its float32 graph's speed, and at
    most OpenVINO bf16's time at an error no larger than its; decode over int8 / int4 weights at
    least llama.cpp Q8_0's / Q4_0's tokens/s at a logits error no larger than its (issue 32)."""
    out: list[Target] = [("<= 1.0x fastest peer", _ratio_at_most(1.0))]
    if "tg-tuned" in r.values:
        out.append(("tuned <= heuristic", _tuned_at_most_heuristic))
    if "tg-dynamic" in r.engines:
        out.append(("dynamic <= 1.05x static", _dynamic_near_static))
    if overhead_bound(r):
        out.append(("<= 0.7x", _ratio_at_most(0.7)))
    if r.gemm_bound:
        out.append((f">= {PEAK_SHARE:.0%} of {r.precision} peak", _peak_share(PEAK_SHARE)))
    if r.unit == "tok/s":
        out += [(">= 1.25x peer tok/s", _ratio_at_most(0.8)), (">= 85% of bandwidth", _bandwidth_share(0.85))]
        out += [(f"{SHORT[ours]} >= {theirs} tok/s at <= its error", _at_least_llama(ours, theirs))
                for ours, theirs in LLAMA_RIVALS.items() if ours in r.engines and theirs in r.engines]
    if "tg-lowp" in r.engines and not overhead_bound(r):
        out.append((f"tuned@1e-2 >= {LOWP_SPEEDUP}x tg float32", _lowp_speedup(LOWP_SPEEDUP)))
        if "openvino-bf16" in r.engines:
            out.append(("tuned@1e-2 <= 1.0x OpenVINO bf16 at <= its error", _lowp_at_most_openvino_bf16))
    return out


def targets_table(results: list[Result], ceilings: Ceilings) -> tuple[str, int, int]:
    """Each row's targets, met or not: (markdown, met, total)."""
    lines = ["| workload | row | threads | targets |", "|---|---|--:|---|"]
    met = total = 0
    for r in results:
        cells = []
        for what, holds in row_targets(r):
            ok = holds(r, ceilings)
            total += 1
            met += bool(ok)
            cells.append(f"{what}: {'met' if ok else ('n/a' if ok is None else '**missed**')}")
        lines.append(f"| {r.model} | {r.what} | {r.threads} | {'; '.join(cells)} |")
    return "\n".join(lines), met, total


def decode_table(results: list[Result]) -> str:
    lines = ["| workload | row | threads | MB read per token | ceiling tok/s | tg tok/s | tg % of ceiling | "
             "best peer tok/s |", "|---|---|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        if r.unit != "tok/s":
            continue
        tgv = r.values.get("tensor_graphs")
        peer = r.fastest_peer()
        lines.append(
            f"| {r.model} | {r.what} | {r.threads} | {(r.bytes_per_token or 0) / 1e6:.1f} | "
            + (_fmt(r.ceiling) if r.ceiling else "—") + " | "
            + (f"{_fmt(tgv)} | " if tgv else "— | ")
            + (f"{100 * tgv / r.ceiling:.0f}% | " if tgv and r.ceiling else "— | ")
            + (f"{_fmt(r.values[peer])} ({SHORT[peer]}) |" if peer else "— |"))
    return "\n".join(lines)


def chart_label(r: Result) -> str:
    """A row's label under its bars: the workload's short name (with its width where a workload
    has two models: the encoder blocks' d_model) and the row."""
    name = CHART_NAMES.get(r.workload, r.workload)
    width = re.search(r" d (\d+),", r.model) if r.workload == "encoder" else None
    return f"{name}{f' d {width.group(1)}' if width else ''}\n{r.what.split(' (')[0]}"


#: Engines per row of the chart's legend
LEGEND_COLUMNS = 4


def write_chart(results: list[Result], threads: list[int], path: str, title: str) -> str | None:
    """Grouped bars: time / fastest peer's time per row (one group per row), one panel per thread count."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no chart"
    engines = [e for e in ENGINES if any(e in r.values for r in results)]
    panels = [t for t in threads if any(r.threads == t for r in results)]
    if not panels:
        return "no rows: no chart"
    width = max(8.0, 1.3 * max(sum(r.threads == t for r in results) for t in panels) + 2)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 3.8 * len(panels)), squeeze=False)
    bar = 0.8 / max(len(engines), 1)
    for ax, t in zip(axes[:, 0], panels):
        rows = [r for r in results if r.threads == t]
        for j, e in enumerate(engines):
            xs, ys = [], []
            for i, r in enumerate(rows):
                peer = r.fastest_peer()
                if e in r.values and peer:
                    xs.append(i - 0.4 + bar * (j + 0.5))
                    ys.append(r.seconds(e) / r.seconds(peer))
            ax.bar(xs, ys, bar, label=LABELS[e], color=COLORS[e])
            if e == "tensor_graphs":
                for x, y in zip(xs, ys):
                    ax.annotate(f"{y:.2f}", (x, y), ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_yscale("log", base=2)
        ratios = [r.seconds(e) / r.seconds(r.fastest_peer()) for r in rows if r.fastest_peer() for e in r.values]
        lo, hi = min(ratios + [1.0]), max(ratios + [1.0])
        ax.set_ylim(lo / 1.4, hi * 1.4)
        ax.set_yticks([v for v in (0.125, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 8, 16, 32, 64) if lo / 1.4 <= v <= hi * 1.4])
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([chart_label(r) for r in rows], fontsize=8)
        ax.set_ylabel("time / fastest peer's time\n(lower is better)")
        ax.set_title(f"{t} thread(s)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    columns = min(len(engines), LEGEND_COLUMNS)  # the engines in rows that fit the figure's width
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.01 + 0.03 * -(-len(engines) // columns), 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


METHOD = """\
- **Same process, alternating**: all engines of a row are built first (compile times are never
  timed; see their table), each engine's output is checked against eager PyTorch (forward
  rows: max abs diff <= {max_abs}; KV-cache rows: the greedy next token), then timed calls
  alternate engine by engine in turns (ABCDABCD...), so that machine noise hits all alike. Thread
  pools that busy-wait after a call (OpenMP in eager and inductor kernels, OpenBLAS) would steal a
  core from the engine timed next (on 2 cores this made a 0.07 ms call take 3 ms), and a pool
  that has gone to sleep is slow to wake, so each turn is: a {settle} s pause, one untimed call
  (skipped when a call takes 0.5 s or more), then timed calls for at least {block} s (at least
  one). Each value is a **median** over all timed calls: forward rows of {fwd} rounds; KV-cache
  prefill of {pre} rounds after one warm-up round (one timed call per turn); decode tokens/s = 1 /
  median step time of {steps} greedy steps after {dwarm} warm-up step(s), continuing from the
  prefill (context {ctx} plus at most {extra} tokens: the untimed steps advance it too).
- **Threads**: `torch.set_num_threads`, `tg.set_num_threads` (its OpenBLAS and kernels), ONNX
  Runtime's `intra_op_num_threads` and OpenVINO's `INFERENCE_NUM_THREADS` get the same count; ORT
  runs one inter-op thread, no spinning; OpenVINO one stream. torch.compile and OpenVINO are
  compiled once per row and thread count (inductor specialises on it).
- **ISA**: tensor_graphs compiles for the target in the header (`--target`). When its ISA level is
  below the host's, the peers are held to it where their libraries have a switch (*Peers' ISA*
  above: environment variables read when each library loads, so the run re-executes itself once
  with them set; `--no-force-isa` leaves the peers at the host's ISA).
- **dynamic**: tensor_graphs compiled ONCE per model with `dynamic_shapes` (MLP and ResNet-50: the
  batch, 1..256 and 1..16; encoder and GPT-2 prefill: the sequence, 1..512 and 1..1024), that one
  graph serving every row of the model; held to within 5% of the static compile (*tensor_graphs*).
- **Cells**: value (time / the fastest engine's time in that row). *tg / fastest peer* is
  tensor_graphs' time per call (or per token) over the fastest other engine's: **below 1 means
  tensor_graphs is faster**. n/a: the engine does not apply to the row; failed: see the notes.
- **Peers**: PyTorch eager (`torch.no_grad` / `inference_mode`; KV cache: `DynamicCache`);
  torch.compile (inductor, default mode; KV cache: a `StaticCache`, which attends over all its
  slots); ONNX Runtime: `torch.onnx.export` (dynamo exporter, else the legacy one), static shapes
  for forward rows, one past/present graph for KV-cache rows, `ORT_ENABLE_ALL`; ONNX Runtime +
  transformers optimizer: the same export through `onnxruntime.transformers.optimizer`
  (`model_type` bert for the encoder, gpt2 for GPT-2 with a fallback to the generic bert fusions;
  `opt_level=0`, then `ORT_ENABLE_ALL`; what it fused is in the notes); it has no pattern set
  for these KV-cache graphs or an MLP. OpenVINO: `ov.convert_model` of the same module (TorchScript
  tracing, else `torch.export`; KV-cache rows: the past/present forward through `torch.export`,
  dynamic lengths, two infer requests taking turns so that the cache is passed on without copies),
  CPU plugin, `INFERENCE_PRECISION_HINT` f32, `PERFORMANCE_HINT` LATENCY. A peer that is not
  installed is skipped (see the notes).
- **Compute ceiling**: {flops_how}. *tg GFLOP/s* = those FLOPs / tensor_graphs' median time;
  *% of its precision's peak* divides by the arithmetic peak of the precision tensor_graphs ran
  the row in (float32: the FMA units'), measured in this run with an emitted microkernel per unit
  (`benchmarks/peaks.py`, `codegen/llvm/peak_kernels.py`: independent accumulator chains over
  registers, as many threads as the row; the best of the measurements at the run's start and after
  every workload): the machine's ceiling, which the GEMM-bound rows are held to (85%).
  *% of sgemm* divides by OpenBLAS sgemm GFLOP/s at {size}³ measured in this run (the best of
  the measurements at its start and after every workload), *its GEMMs alone* by sgemm running exactly the row's
  weight GEMMs back to back (same library, beta 0, no epilogue) right after the row's timing
  (KV-cache rows: after the model's rows), with B as PyTorch stores the weights ([N, K],
  transposed); above 100% means tensor_graphs' GEMMs (on its own weight layout) beat that.
  ◆ marks the GEMM-bound rows (prefill at seq 128).
  Rows of fewer than 16 tokens (MLP batch 1) multiply matrices by vectors: memory-bound, so no
  share of sgemm is given (GEMV).
- **Bandwidth ceiling** (decode rows): read GB/s over 512 MiB of float32, the better of `np.max` split across
  the threads and `torch.sum` on them (the best median of the run: at its start and next to every decode row) / bytes
  read per token (every parameter once, the tied embedding counted once as the LM head, plus the
  KV cache at that context).
- **Models** are random-init (seed 0), fp32, batch 1 (MLP: batch 1 and 64); timings do not depend
  on the weights' values. The machine may be shared: see the load average above.
"""


def peak_lines(run: Run, ceilings: Ceilings) -> list[str]:
    """The report's table of each unit's measured peak (every measurement, the best used)."""
    if not run.peaks:
        return []
    out = ["", "| threads | peak unit (precision) | GOP/s (each measurement) | used |", "|--:|---|--:|--:|"]
    for t in run.threads:
        for unit, gops in run.peaks.get(t, {}).items():
            precision = peak_kernels.UNITS[unit].precision
            out.append(f"| {t} | {unit} ({precision}) | {', '.join(f'{g:.0f}' for g in gops)} | {max(gops):.0f} |")
    used = ", ".join(f"{p} {g:.0f}" for p, g in ceilings.peaks.get(run.threads[0], {}).items())
    return out + ["", f"Each precision's ceiling is its fastest unit (at {run.threads[0]} thread(s): {used} GOP/s)."]


def isa_lines(notes: list[str]) -> list[str]:
    """The report's *Peers' ISA* bullet: the first note, the others (one per peer) under it."""
    if not notes:
        return []
    return [f"- **Peers' ISA**: {notes[0]}"] + [f"  - {n}" for n in notes[1:]]


def report(run: Run, args, argv: list[str], started: datetime, load: tuple[float, float], size: int) -> str:
    ceilings = Ceilings.of(run)
    sgemm = ceilings.sgemm
    engines = [e for e in ENGINES if any(e in r.engines for r in run.results)]
    out = [f"# tensor_graphs benchmarks{' (--quick: tiny configurations, smoke test only)' if args.quick else ''}", ""]
    mach, vers = machine(), versions()
    out += [
        f"- **Date**: {started.strftime('%Y-%m-%d %H:%M UTC')} ({sum(run.seconds.values()) / 60:.1f} min of workloads)",
        f"- **Machine**: {mach['cpu']}, {mach['logical_cpus']} logical CPUs"
        + (f" ({mach['cpus_usable']} usable)" if mach.get("cpus_usable") not in (None, mach["logical_cpus"]) else "")
        + (f", {mach['memory_gib']} GiB" if "memory_gib" in mach else "") + f"; {mach['os']}",
        f"- **Host ISA**: {run.host_isa or tg_target.Target.host().describe()}",
        f"- **tensor_graphs compiled for** (`--target`): {run.target or tg_target.resolve(None).describe()}",
        *isa_lines(run.isa_notes),
        "- **Versions**: " + ", ".join(f"{k} {v}" for k, v in vers.items() if k != "openblas"),
        f"- **BLAS**: {vers.get('openblas', 'unknown')}",
        f"- **Command**: `{' '.join(shlex.quote(a) for a in argv)}`",
        f"- **Load average** (1 min): {load[0]:.2f} before, {load[1]:.2f} after (this process included)"
        + (" — other processes shared the cores: treat the timings, above all at 2 threads, with care"
           if load[0] > 0.5 else ""),
        "",
        "## Machine ceilings (measured in this run)",
        "",
        f"| threads | OpenBLAS sgemm {size}³ GFLOP/s (each measurement) | used | np.max / torch.sum read GB/s at start | used (best) |",
        "|--:|--:|--:|--:|--:|",
    ]
    for t in run.threads:
        if t in run.sgemm:
            out.append(f"| {t} | {', '.join(f'{g:.1f}' for g in run.sgemm[t])} | {sgemm[t]:.1f} | "
                       f"{run.bandwidth_start[t] / 1e9:.1f} | {run.bandwidth[t] / 1e9:.1f} |")
    out += peak_lines(run, ceilings)
    varied = speed_varied(run.sgemm)
    if varied:
        out += ["", varied]
    out += ["", "## Results", "", main_table(run.results, engines, ceilings), "",
            "ms rows: median time per call, lower is better; tok/s rows: higher is better. "
            "*tg / fastest peer* is a time ratio either way (below 1: tensor_graphs faster). "
            "*tg of ceiling*: ms rows = tensor_graphs GFLOP/s over the peak of the precision it ran in; "
            "tok/s rows = over the bandwidth ceiling.",
            ""]
    if any(r.unit == "ms" and r.flops for r in run.results):
        out += ["### Compute (forward and prefill rows)", "", compute_table(run.results, ceilings, size), ""]
    if any(r.unit == "tok/s" for r in run.results):
        out += ["### Decode against the bandwidth ceiling", "", decode_table(run.results), ""]
    table, met, total = targets_table(run.results, ceilings)
    out += [f"### Targets ({met} of {total} met)", "", table, ""]
    out += ["## Compile times (not part of any timing)", "", "| workload | engine | step | seconds |",
            "|---|---|---|--:|"]
    out += [f"| {m} | {e} | {w} | {t:.1f} |" for m, e, w, t in run.compile_rows]
    if args.chart:
        rel = os.path.relpath(os.path.abspath(args.chart), os.path.dirname(os.path.abspath(args.out)))
        out += ["", f"![time / fastest peer's time, per row and thread count]({rel})"]
    if run.notes:
        out += ["", "## Notes and failures", ""] + [f"- {n}" for n in run.notes]
    quick, rep = run.quick, REPEATS[run.quick]
    out += ["", "## Methodology", "", METHOD.format(
        max_abs=gpt2.MAX_ABS, fwd=f"{rep.mlp_rounds} (MLP) / {rep.rounds}", settle=gpt2.SETTLE_S,
        block=gpt2.BLOCK_S,
        pre=rep.prefill_rounds, steps=rep.steps, dwarm=rep.decode_warmup, ctx=16 if quick else 128,
        extra=rep.decode_warmup + 2 * rep.steps,
        flops_how=roofline.FLOPS_HOW, size=size)]
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def parse_target(ap: argparse.ArgumentParser, name: str | None) -> tg_target.Target:
    """``--target`` (else ``TG_TARGET``, else ``host``) as a `Target` this CPU runs; an argparse error
    (one line) for an unknown name or code this CPU cannot run."""
    given = name if name is not None else os.environ.get(tg_target.TARGET_ENV) or "host"
    try:
        target = tg_target.Target.named(given)
        target.check_runs_here()
    except tg_target.TargetError as e:
        ap.error(f"{'--target' if name is not None else '$' + tg_target.TARGET_ENV}: {e}")
    return target


def parse_args(argv: list[str] | None, prog: str | None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the GPU rows instead (benchmarks/gpu.py: tensor_graphs' Triton path, eager and "
                         "torch.compile on the GPU; its own options follow)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--quick", action="store_true", help="tiny configurations of every workload: a smoke run")
    ap.add_argument("--only", nargs="+", choices=WORKLOADS, metavar="WORKLOAD",
                    help=f"run only these workloads ({', '.join(WORKLOADS)})")
    ap.add_argument("--out", default=None, help="Markdown report (default BENCHMARKS.md; --quick: BENCHMARKS.quick.md)")
    ap.add_argument("--chart", default=None,
                    help="PNG chart (default benchmarks.png beside --out; --quick: benchmarks.quick.png); '' for none")
    ap.add_argument("--json", nargs="?", const="benchmarks.json", default=None, metavar="FILE",
                    help="also write every number as JSON (default file benchmarks.json)")
    ap.add_argument("--sgemm-size", type=int, default=None, help="square sgemm size (default 2048; --quick 1024)")
    ap.add_argument("--target", default=None, metavar="NAME",
                    help=f"what tensor_graphs compiles for: host (default; ${tg_target.TARGET_ENV} when set), "
                         f"an ISA level ({', '.join(tg_target.LEVELS)}) or a CPU name (znver3, sapphirerapids, ...)")
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=None, metavar="ENGINE",
                    help=f"only these engines ({', '.join(ENGINES)}; default: every installed one): "
                         "e.g. tensor_graphs alone, to compare two commits row by row")
    ap.add_argument("--no-force-isa", dest="force_isa", action="store_false",
                    help="leave the peers at the host's ISA when --target is below it (default: hold them to it)")
    args = ap.parse_args(argv)
    args.target = parse_target(ap, args.target)
    suffix = ".quick" if args.quick else ""
    if args.out is None:
        args.out = f"BENCHMARKS{suffix}.md"
    if args.chart is None:
        args.chart = os.path.join(os.path.dirname(args.out), f"benchmarks{suffix}.png")
    try:
        args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--threads: expected comma-separated integers, got {args.threads!r}")
    if not args.threads or min(args.threads) < 1:
        ap.error("--threads: expected positive thread counts")
    return args


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--device" in argv:  # the GPU rows: benchmarks/gpu.py, with the rest of the options
        i = argv.index("--device")
        dev = argv[i + 1] if i + 1 < len(argv) else ""
        if dev not in ("cpu", "cuda"):
            raise SystemExit(f"--device must be cpu or cuda, got {dev!r}")
        argv = argv[:i] + argv[i + 2 :]
        if dev == "cuda":
            import gpu

            return gpu.main(argv)
    args = parse_args(argv, prog)
    shown = [prog or sys.argv[0], *argv]
    plan = settle_target(args, argv)  # may re-execute this command (the peers' ISA switches)
    started = datetime.now(timezone.utc)
    size = args.sgemm_size or (1024 if args.quick else 2048)
    load_before = os.getloadavg()[0]
    log(f"$ {' '.join(shlex.quote(a) for a in shown)}")
    log(f"{cpu_model()}, {os.cpu_count()} CPUs; torch {torch.__version__}; load average {load_before:.2f}; "
        f"inductor cache {os.environ.get('TORCHINDUCTOR_CACHE_DIR')}")
    run = Run(args.threads, args.quick, engines=tuple(args.engines) if args.engines else None, host_isa=tg_target.Target.host().describe(), target=args.target.describe(),
              isa_notes=plan.notes, isa_env={k: os.environ[k] for k in ISA_VARIABLES if k in os.environ})
    log(f"host ISA: {run.host_isa}")
    log(f"tensor_graphs compiles for: {run.target}")
    log("peers' ISA: " + "\n  ".join(run.isa_notes))
    if load_before > 0.5:
        log("WARNING: other processes share the cores: the timings (above all at 2 threads) are unreliable")
    measure_ceilings(run, size, args.target)
    workloads = [w for w in WORKLOADS if not args.only or w in args.only]
    for w in workloads:
        t0 = time.perf_counter()
        log(f"\n===== {w} =====")
        try:
            RUNNERS[w](run)
        except Exception as e:  # noqa: BLE001 - a broken workload must not lose the others' rows
            import traceback

            traceback.print_exc()
            run.note(f"workload {w} aborted: {decode.one_line(e)}")
        run.seconds[w] = time.perf_counter() - t0
        torch._dynamo.reset()
        gc.collect()
        log(f"===== {w}: {run.seconds[w]:.0f} s")
        # again after every workload: the ceiling is the best measurement of the run, so that a
        # moment when another process shares the cores does not lower it
        measure_ceilings(run, size, args.target)
    log("")
    load_after = os.getloadavg()[0]

    if args.chart:
        problem = write_chart(run.results, run.threads, args.chart,
                              "tensor_graphs and peers: time / fastest peer" + (" (--quick)" if args.quick else ""))
        if problem:
            run.note(problem)
            args.chart = ""
        else:
            log(f"wrote {args.chart}")
    text = report(run, args, shown, started, (load_before, load_after), size)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    log(f"wrote {args.out}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "date": started.isoformat(), "command": shown, "machine": machine(), "versions": versions(),
                "host_isa": run.host_isa, "host_level": tg_target.Target.host().level, "target": run.target,
                "target_level": args.target.level, "peer_isa": run.isa_notes, "isa_environment": run.isa_env,
                "load_average": [load_before, load_after], "sgemm_size": size,
                "sgemm_gflops": run.sgemm, "peak_gops": run.peaks, "read_bandwidth_bytes_per_s": run.bandwidth,
                "results": [dict(asdict(r), tg_over_fastest_peer=r.tg_ratio(), tg_gflops=r.tg_gflops())
                            for r in run.results],
                "compile_seconds": [dict(workload=m, engine=e, step=w, seconds=t) for m, e, w, t in run.compile_rows],
                "notes": run.notes, "flops_how": roofline.FLOPS_HOW,
            }, f, indent=1)
        log(f"wrote {args.json}")
    print()
    print(main_table(run.results, [e for e in ENGINES if any(e in r.engines for r in run.results)],
                     Ceilings.of(run)))
    tg_failed = any("tensor_graphs" in r.failed for r in run.results) or any("aborted" in n for n in run.notes)
    return 1 if tg_failed else 0


if __name__ == "__main__":
    sys.exit(main())
