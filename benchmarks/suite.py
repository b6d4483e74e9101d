"""Every workload on every engine in one run: writes BENCHMARKS.md, a PNG chart and (optionally) JSON.

    tg-bench [--threads 1,2] [--quick] [--only WORKLOAD ...] [--out BENCHMARKS.md] [--chart benchmarks.png]
             [--json [benchmarks.json]]
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
  (``benchmarks/decode.py``).

Engines: tensor_graphs (``tg.compile`` / ``tg.compile_decoder``), PyTorch eager, torch.compile
(inductor), ONNX Runtime (``ORT_ENABLE_ALL``) and, where a fusion pattern set exists (encoder,
GPT-2 prefill), ONNX Runtime on the model rewritten by ``onnxruntime.transformers.optimizer``.
All run in this one process; within a row they alternate call by call (ABCDABCD...) so machine
noise hits all alike, and each row reports medians. Each thread count (``--threads``) sets
``torch.set_num_threads``, ``tg.set_num_threads`` and ORT's ``intra_op_num_threads`` alike.

The same run measures the machine's ceilings: OpenBLAS sgemm GFLOP/s (the scipy-openblas32
library tensor_graphs calls) at 2048^3 and at each row's own GEMM shapes, and read bandwidth
(``np.max`` / ``torch.sum`` over 512 MiB, the better). Forward / prefill rows report tensor_graphs' achieved GFLOP/s as a
share of sgemm; decode rows the tokens/s as a share of the bandwidth ceiling.

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
import contextlib  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

import torch  # noqa: E402

import decode  # noqa: E402  (sets TORCHINDUCTOR_CACHE_DIR to a fresh directory before inductor loads)
import gpt2  # noqa: E402
import mlp  # noqa: E402
import roofline  # noqa: E402

WORKLOADS = ("mlp", "encoder", "gpt2-prefill", "gpt2-decode", "qwen3")
ENGINES = ("tensor_graphs", "eager", "torch.compile", "onnxruntime", "onnxruntime-opt")
LABELS = {
    "tensor_graphs": "tensor_graphs",
    "eager": "PyTorch eager",
    "torch.compile": "torch.compile (inductor)",
    "onnxruntime": "ONNX Runtime",
    "onnxruntime-opt": "ONNX Runtime + transformers optimizer",
}
CHART_NAMES = {"mlp": "MLP", "encoder": "Encoder", "gpt2-prefill": "GPT-2", "gpt2-decode": "GPT-2 KV",
               "qwen3": "Qwen3"}
SHORT = {"tensor_graphs": "tg", "eager": "eager", "torch.compile": "torch.compile", "onnxruntime": "ORT",
         "onnxruntime-opt": "ORT + optimizer"}

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

    @property
    def gemv(self) -> bool:
        """Weight GEMMs of a few rows are matrix-vector products: memory-bound, sgemm is no ceiling."""
        return self.tokens is not None and self.tokens < 16

    def seconds(self, engine: str) -> float:
        v = self.values[engine]
        return v / 1e3 if self.unit == "ms" else 1.0 / v

    def fastest_peer(self) -> str | None:
        peers = [e for e in self.values if e != "tensor_graphs"]
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
    bandwidth: dict[int, float] = field(default_factory=dict)  # threads -> best read bytes/s
    bandwidth_start: dict[int, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # workload -> wall time

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            log(f"  note: {text}")


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


# --------------------------------------------------------------------------- workloads


def _compile_label(step: str) -> tuple[str, str]:
    """``bench_forward``'s compile keys -> (engine label, step)."""
    engine, _, threads = step.partition(":")
    names = {
        "tensor_graphs": ("tensor_graphs", "tg.compile"),
        "torch.compile": ("torch.compile", "first call (compile; inductor cache fresh per run)"),
        "onnxruntime session": ("ONNX Runtime", "session (ORT_ENABLE_ALL)"),
        "onnxruntime-opt session": ("ONNX Runtime + optimizer", "session (ORT_ENABLE_ALL)"),
        "transformers optimizer": ("ONNX Runtime + optimizer", "optimize_model"),
    }
    eng, what = names.get(engine, ("ONNX Runtime", engine))
    return eng, what + (f", {threads} thread(s)" if threads else "")


def forward_rows(run: Run, key: str, model_label: str, what: str, model, x, engines: list[str], *, repeat: int,
                 warmup: int, makers: dict, gemms: list[roofline.Gemm], attn_flops: int, gemm_bound: bool = False):
    """A stateless ``model(x)`` row per thread count, through ``gpt2.bench_forward``."""
    log(f"\n{model_label}, {what}:")
    med_by_threads, seconds, failed = gpt2.bench_forward(model, x, engines, run.threads, repeat, makers=makers,
                                                         warmup=warmup)
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
                                  tokens=gemms[0].m if gemms else None))
    for step, t in seconds.items():
        eng, label = _compile_label(step)
        run.compile_rows.append((f"{model_label}, {what}", eng, label, t))
    for line in failed:
        run.note(f"{model_label}, {what}: {line}")


def workload_mlp(run: Run) -> None:
    model = mlp.build()
    engines = ["tensor_graphs", "eager", "torch.compile", "onnxruntime"]
    for batch in (1, 64):
        x = torch.randn(batch, 256, generator=torch.Generator().manual_seed(batch))
        forward_rows(run, "mlp", "MLP 256-1024-1024-256", f"batch {batch}", model, x, engines,
                     repeat=REPEATS[run.quick].mlp_rounds, warmup=20, makers=gpt2.MAKERS,
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
        makers = dict(gpt2.MAKERS, **{"onnxruntime-opt": ort_optimizer_maker("bert", heads, d, run, label)})
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
        makers = dict(gpt2.MAKERS, **{"onnxruntime-opt": ort_optimizer_maker("gpt2", c.n_head, c.n_embd, run, label)})
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
    rows, compile_rows, notes = decode.bench_model(spec, model, list(decode.ENGINES), run.threads, steps=steps,
                                                   warmup=warmup, repeat=repeat, bandwidth=run.bandwidth)
    c = model.config
    layers, _, head_dim = decode.kv_shape(model)
    gemms = roofline.weight_gemms(model, spec.prefill, lm_head=model.get_output_embeddings(), lm_rows=1)
    gemm_flops = sum(g.flops for g in gemms)
    attn = roofline.attention_flops(layers, c.num_attention_heads, head_dim, spec.prefill, spec.prefill)
    wbytes = decode.weight_bytes_per_token(model)
    for r in rows:
        res = Result(key, spec.label, r.what, r.threads, r.unit, dict(r.values), list(decode.ENGINES),
                     {k: v for k, v in r.na.items() if k not in r.values})
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


RUNNERS = {
    "mlp": workload_mlp,
    "encoder": workload_encoder,
    "gpt2-prefill": workload_gpt2_prefill,
    "gpt2-decode": workload_gpt2_decode,
    "qwen3": workload_qwen3,
}


# --------------------------------------------------------------------------- the machine


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


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
    for dist in ("tensor_graphs", "torch", "transformers", "onnxruntime", "onnx", "onnxscript", "numpy", "xdsl",
                 "llvmlite", "scipy-openblas32", "matplotlib"):
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


def measure_ceilings(run: Run, size: int) -> None:
    for t in run.threads:
        g = roofline.square_gflops(size, t, repeat=3 if run.quick else 5)
        run.sgemm.setdefault(t, []).append(g)
        log(f"sgemm {size}^3, {t} thread(s): {g:.1f} GFLOP/s")
        if t not in run.bandwidth:
            bw = decode.measure_bandwidth(t, repeat=3 if run.quick else 7)
            run.bandwidth[t] = run.bandwidth_start[t] = bw
            log(f"np.max / torch.sum read bandwidth, {t} thread(s): {bw / 1e9:.1f} GB/s")


# --------------------------------------------------------------------------- report


def _fmt(v: float) -> str:
    return f"{v:.3g}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def cell(r: Result, e: str) -> str:
    if e in r.values:
        fastest = min(r.seconds(k) for k in r.values)
        return f"{_fmt(r.values[e])} ({r.seconds(e) / fastest:.2f}x)"
    if e in r.failed:
        return "failed"
    return "n/a" if e not in r.engines else "—"


def ceiling_cell(r: Result, sgemm: dict[int, float]) -> str:
    if r.unit == "ms":
        g = r.tg_gflops()
        if r.gemv:
            return "(GEMV)"
        return f"{100 * g / sgemm[r.threads]:.0f}% sgemm" if g and r.threads in sgemm else ""
    if r.ceiling and "tensor_graphs" in r.values:
        return f"{100 * r.values['tensor_graphs'] / r.ceiling:.0f}% BW"
    return ""


def main_table(results: list[Result], engines: list[str], sgemm: dict[int, float]) -> str:
    head = ("| workload | row | threads | unit | " + " | ".join(LABELS[e] for e in engines)
            + " | tg / fastest peer | tg of ceiling |")
    lines = [head, "|---|---|--:|---|" + "--:|" * len(engines) + "--:|--:|"]
    for r in results:
        ratio = r.tg_ratio()
        rtxt = f"**{ratio:.2f}** ({SHORT[r.fastest_peer()]})" if ratio is not None else "n/a"
        lines.append(f"| {r.model} | {r.what} | {r.threads} | {r.unit} | "
                     + " | ".join(cell(r, e) for e in engines) + f" | {rtxt} | {ceiling_cell(r, sgemm)} |")
    return "\n".join(lines)


def compute_table(results: list[Result], sgemm: dict[int, float], size: int) -> str:
    lines = ["| workload | row | threads | GFLOP per call (GEMMs) | tg GFLOP/s | % of sgemm "
             f"{size}³ | its GEMMs alone in sgemm, GFLOP/s | tg % of that |",
             "|---|---|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        if r.unit != "ms" or not r.flops:
            continue
        g = r.tg_gflops()
        mark = " ◆" if r.gemm_bound else ""
        pct = (lambda ref: f"{100 * g / ref:.0f}%") if g and not r.gemv else (lambda ref: "GEMV" if r.gemv else "—")
        lines.append(
            f"| {r.model} | {r.what}{mark} | {r.threads} | {r.flops / 1e9:.3g} ({r.gemm_flops / 1e9:.3g}) | "
            + (f"{g:.1f} | " if g else "— | ") + f"{pct(sgemm[r.threads])} | "
            + f"{r.gemm_gflops:.1f} | {pct(r.gemm_gflops)} |")
    return "\n".join(lines)


#: The targets each row is held to (issue 5): (what, holds(row, sgemm GFLOP/s) -> bool | None).
#: None: the row cannot say (an engine failed, no ceiling).
Target = tuple[str, Callable[["Result", dict[int, float]], "bool | None"]]


def _ratio_at_most(limit: float) -> Callable[["Result", dict[int, float]], "bool | None"]:
    return lambda r, _: None if r.tg_ratio() is None else r.tg_ratio() <= limit  # type: ignore[operator]


def _sgemm_share(limit: float) -> Callable[["Result", dict[int, float]], "bool | None"]:
    return lambda r, sg: None if r.tg_gflops() is None else r.tg_gflops() >= limit * sg[r.threads]  # type: ignore[operator]


def _bandwidth_share(limit: float) -> Callable[["Result", dict[int, float]], "bool | None"]:
    def holds(r: Result, _: dict[int, float]) -> bool | None:
        tgv = r.values.get("tensor_graphs")
        return None if not tgv or not r.ceiling else tgv >= limit * r.ceiling

    return holds


def overhead_bound(r: Result) -> bool:
    """MLP batch 1, the d_model-256 encoder block and the decode rows."""
    return r.unit == "tok/s" or (r.workload == "mlp" and r.tokens == 1) or (r.workload == "encoder" and " d 256," in r.model)


def row_targets(r: Result) -> list[Target]:
    """Every row: at most 1.0x the fastest peer; overhead-bound rows 0.7x; GEMM-bound prefill at
    least 90% of sgemm at 1 thread and 88% at 2; decode at least 1.25x the fastest peer's tok/s
    (a time ratio of 0.8) and 85% of the bandwidth ceiling."""
    out: list[Target] = [("<= 1.0x fastest peer", _ratio_at_most(1.0))]
    if overhead_bound(r):
        out.append(("<= 0.7x", _ratio_at_most(0.7)))
    if r.gemm_bound:
        share = 0.90 if r.threads == 1 else 0.88
        out.append((f">= {share:.0%} of sgemm", _sgemm_share(share)))
    if r.unit == "tok/s":
        out += [(">= 1.25x peer tok/s", _ratio_at_most(0.8)), (">= 85% of bandwidth", _bandwidth_share(0.85))]
    return out


def targets_table(results: list[Result], sgemm: dict[int, float]) -> tuple[str, int, int]:
    """Each row's targets, met or not: (markdown, met, total)."""
    lines = ["| workload | row | threads | targets |", "|---|---|--:|---|"]
    met = total = 0
    for r in results:
        cells = []
        for what, holds in row_targets(r):
            ok = holds(r, sgemm)
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
    colors = dict(zip(ENGINES, ("#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#17becf")))
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
            ax.bar(xs, ys, bar, label=LABELS[e], color=colors[e])
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
        ax.set_xticklabels([f"{CHART_NAMES.get(r.workload, r.workload)}\n{r.what.split(' (')[0]}" for r in rows],
                           fontsize=8)
        ax.set_ylabel("time / fastest peer's time\n(lower is better)")
        ax.set_title(f"{t} thread(s)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(engines), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
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
- **Threads**: `torch.set_num_threads`, `tg.set_num_threads` (its OpenBLAS and kernels) and ONNX
  Runtime's `intra_op_num_threads` get the same count; ORT runs one inter-op thread, no spinning.
  torch.compile is compiled once per row and thread count (inductor specialises on it).
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
  for these KV-cache graphs or an MLP.
- **Compute ceiling**: {flops_how}. *tg GFLOP/s* = those FLOPs / tensor_graphs' median time;
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


def report(run: Run, args, argv: list[str], started: datetime, load: tuple[float, float], size: int) -> str:
    sgemm = {t: max(v) for t, v in run.sgemm.items()}
    engines = [e for e in ENGINES if any(e in r.engines for r in run.results)]
    out = [f"# tensor_graphs benchmarks{' (--quick: tiny configurations, smoke test only)' if args.quick else ''}", ""]
    mach, vers = machine(), versions()
    out += [
        f"- **Date**: {started.strftime('%Y-%m-%d %H:%M UTC')} ({sum(run.seconds.values()) / 60:.1f} min of workloads)",
        f"- **Machine**: {mach['cpu']}, {mach['logical_cpus']} logical CPUs"
        + (f" ({mach['cpus_usable']} usable)" if mach.get("cpus_usable") not in (None, mach["logical_cpus"]) else "")
        + (f", {mach['memory_gib']} GiB" if "memory_gib" in mach else "") + f"; {mach['os']}",
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
    varied = speed_varied(run.sgemm)
    if varied:
        out += ["", varied]
    out += ["", "## Results", "", main_table(run.results, engines, sgemm), "",
            "ms rows: median time per call, lower is better; tok/s rows: higher is better. "
            "*tg / fastest peer* is a time ratio either way (below 1: tensor_graphs faster). "
            "*tg of ceiling*: ms rows = tensor_graphs GFLOP/s over sgemm's; tok/s rows = over the bandwidth ceiling.",
            ""]
    if any(r.unit == "ms" and r.flops for r in run.results):
        out += ["### Compute (forward and prefill rows)", "", compute_table(run.results, sgemm, size), ""]
    if any(r.unit == "tok/s" for r in run.results):
        out += ["### Decode against the bandwidth ceiling", "", decode_table(run.results), ""]
    table, met, total = targets_table(run.results, sgemm)
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


def parse_args(argv: list[str] | None, prog: str | None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args = ap.parse_args(argv)
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
    args = parse_args(argv, prog)
    shown = [prog or sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
    started = datetime.now(timezone.utc)
    size = args.sgemm_size or (1024 if args.quick else 2048)
    load_before = os.getloadavg()[0]
    log(f"$ {' '.join(shlex.quote(a) for a in shown)}")
    log(f"{cpu_model()}, {os.cpu_count()} CPUs; torch {torch.__version__}; load average {load_before:.2f}; "
        f"inductor cache {os.environ.get('TORCHINDUCTOR_CACHE_DIR')}")
    if load_before > 0.5:
        log("WARNING: other processes share the cores: the timings (above all at 2 threads) are unreliable")
    run = Run(args.threads, args.quick)
    measure_ceilings(run, size)
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
        measure_ceilings(run, size)
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
                "load_average": [load_before, load_after], "sgemm_size": size,
                "sgemm_gflops": run.sgemm, "read_bandwidth_bytes_per_s": run.bandwidth,
                "results": [dict(asdict(r), tg_over_fastest_peer=r.tg_ratio(), tg_gflops=r.tg_gflops())
                            for r in run.results],
                "compile_seconds": [dict(workload=m, engine=e, step=w, seconds=t) for m, e, w, t in run.compile_rows],
                "notes": run.notes, "flops_how": roofline.FLOPS_HOW,
            }, f, indent=1)
        log(f"wrote {args.json}")
    print()
    print(main_table(run.results, [e for e in ENGINES if any(e in r.engines for r in run.results)],
                     {t: max(v) for t, v in run.sgemm.items()}))
    tg_failed = any("tensor_graphs" in r.failed for r in run.results) or any("aborted" in n for n in run.notes)
    return 1 if tg_failed else 0


if __name__ == "__main__":
    sys.exit(main())
