"""GPU rows (issue 15): tensor_graphs' Triton path against PyTorch eager and torch.compile on the
same GPU, in one process.

    .venv/bin/python benchmarks/gpu.py [--models gpt2 qwen3] [--seq 128] [--calls 30] [--steps 64]
                                       [--quick] [--tune [--tune-seconds S]] [--profile] [--out FILE.md] [--json FILE.json]
    tg-bench --device cuda [the same options]

Models (random init, ``torch.manual_seed(0)``, eval, fp32, batch 1; `decode.build_gpt2`,
`decode.build_qwen3`): GPT-2 small and a Qwen3-0.6B-shaped model.

* **forward**: ids ``[1, seq]`` -> the logits of every position. ``eager``: the model on the GPU;
  ``torch.compile``: inductor, default mode (its first call, the compile, is reported, never
  timed); ``tensor_graphs``: ``tg.compile(model, (ids,), device="cuda")`` (one CUDA-graph replay
  per call). The engines alternate call by call; every call ends with ``torch.cuda.synchronize()``
  before the clock stops; medians of ``--calls``.
* **decode**: greedy tokens/s at context ``seq`` (the prompt prefilled untimed): ``eager`` with a
  ``DynamicCache``, ``torch.compile`` with a ``StaticCache`` (as `benchmarks/decode.py`),
  ``tensor_graphs``: ``tg.compile_decoder(model, device="cuda")``; each step's argmax feeds the
  next; medians of ``--steps`` steps, engines alternating step by step. ``tensor_graphs bf16``:
  the same with ``weight_format="bf16"`` (its matrix-vector products over bfloat16 weights).
* ``--tune``: a ``tensor_graphs tuned`` forward too, ``tune="missing"`` at tolerance 1e-5 (the GPU
  variants of every GEMM and attention measured on this GPU; what was chosen is printed);
  ``--tune-seconds S`` stops the measuring after S seconds (what is left keeps the heuristic).
* ``--profile``: where tensor_graphs' time goes, per op (``fn.profile``: each op's kernels timed
  by CUDA events, launched one by one), for the forward and for one decode step.

Each engine's output is checked against eager's (max abs difference of the logits; the greedy
token after the prompt). Without a GPU this runs only with ``TRITON_INTERPRET=1`` and ``--quick``
(tiny models on the CPU through Triton's interpreter: a smoke test of the script, no timings
worth reading).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode  # noqa: E402
from decode import build_gpt2, build_qwen3, kv_shape  # noqa: E402

import tensor_graphs as tg  # noqa: E402

BUILD = {"gpt2": build_gpt2, "qwen3": build_qwen3}
LABEL = {"gpt2": "GPT-2 small", "qwen3": "Qwen3-0.6B-shaped"}
ENGINES = ("tensor_graphs", "tensor_graphs bf16", "tensor_graphs tuned", "eager", "torch.compile")


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids).logits


def device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    raise SystemExit("benchmarks/gpu.py: no CUDA GPU here (set TRITON_INTERPRET=1 with --quick for a smoke run on the CPU)")


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(f):
    sync()
    t0 = time.perf_counter()
    out = f()
    sync()
    return out, time.perf_counter() - t0


def forward_row(name: str, model_cpu, seq: int, calls: int, dev: str, log, tune: bool = False, profile: bool = False,
                tune_seconds: float | None = None) -> dict:
    ids_cpu = torch.randint(0, model_cpu.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
    row: dict = {"model": LABEL[name], "what": f"forward {seq}", "unit": "ms", "values": {}, "notes": {}}
    fn, t = timed(lambda: tg.compile(Logits(model_cpu), (ids_cpu,), device="cuda"))
    log(f"  tensor_graphs compile (device='cuda'): {t:.1f} s, {fn.launches} launches per call")
    row["notes"]["tensor_graphs compile s"] = round(t, 2)
    tuned = None
    if tune:
        tuned, t = timed(lambda: tg.compile(Logits(model_cpu), (ids_cpu,), device="cuda", tune="missing", tolerance=1e-5,
                                                max_tuning_seconds=tune_seconds))
        log(f"  tensor_graphs tuned compile: {t:.1f} s\n{tuned.explain(all_kernels=False)}")
        row["notes"]["tensor_graphs tuned compile s"] = round(t, 2)
    model = Logits(model_cpu).to(dev).eval()
    ids = ids_cpu.to(dev)
    if profile:
        show_profile(log, "forward", lambda: fn.profile(ids, repeat=10))
    compiled = torch.compile(model, backend="inductor", dynamic=False)
    with torch.inference_mode():
        ref = model(ids)
        engines = {"tensor_graphs": lambda: fn(ids), "eager": lambda: model(ids), "torch.compile": lambda: compiled(ids)}
        if tuned is not None:
            engines["tensor_graphs tuned"] = lambda: tuned(ids)
        _, t = timed(engines["torch.compile"])
        row["notes"]["torch.compile first call s"] = round(t, 2)
        times: dict[str, list[float]] = {k: [] for k in engines}
        for r in range(calls + 2):
            for k, f in engines.items():
                out, dt = timed(f)
                if r == 0:
                    row["notes"][f"{k} max abs diff vs eager"] = float((out - ref).abs().max())
                if r >= 2:
                    times[k].append(dt)
    row["values"] = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    if dev == "cuda":  # the device's share of a call: one replay of the captured plan alone
        row["notes"]["tensor_graphs device ms per replay"] = round(statistics.median(fn._graph.replay_ns() for _ in range(10)) / 1e6, 3)
    return row


class Eager(decode.Eager):
    """`benchmarks/decode.py`'s eager engine (a DynamicCache), on whatever device the model is."""

    def __init__(self, model):
        super().__init__(model, max_cache=0, prefill_len=0)


class Compiled(Eager):
    def __init__(self, model, max_cache: int, dev: str):
        from transformers import StaticCache

        super().__init__(model)
        self.fn = torch.compile(model, backend="inductor", dynamic=False)
        _, heads, head_dim = kv_shape(model)
        self.cache = StaticCache(config=model.config, max_cache_len=max_cache)
        self.cache.early_initialization(1, heads, head_dim, torch.float32, torch.device(dev))

    def _run(self, ids):
        out = self.fn(ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1]

    def prefill(self, ids):
        self.cache.reset()
        return self._run(ids)


class TensorGraphs:
    def __init__(self, model_cpu, max_cache: int, seq: int, weight_format: str | None = None):
        self.dec = tg.compile_decoder(model_cpu, max_seq=max_cache, prefill_chunk=seq, device="cuda", weight_format=weight_format)

    def prefill(self, ids):
        return torch.as_tensor(self.dec.prefill(ids.cpu()))

    def decode(self, tok):
        return torch.as_tensor(self.dec.decode(tok.cpu()))


def decode_row(name: str, model_cpu, seq: int, steps: int, dev: str, log, profile: bool = False) -> dict:
    ids_cpu = torch.randint(0, model_cpu.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(1))
    max_cache = seq + 2 * steps + 16
    row: dict = {"model": LABEL[name], "what": f"decode @{seq}", "unit": "tok/s", "values": {}, "notes": {}}
    tgd, t = timed(lambda: TensorGraphs(model_cpu, max_cache, seq))
    row["notes"]["tensor_graphs compile_decoder s"] = round(t, 2)
    bf16 = TensorGraphs(model_cpu, max_cache, seq, weight_format="bf16")
    if profile:
        step = tgd.dec.decode_graph
        show_profile(log, "decode step", lambda: step.profile(*[torch.zeros_like(x) for x in step._graph.inputs], repeat=10, past=seq))
    model = model_cpu.to(dev).eval()
    engines = {"tensor_graphs": tgd, "tensor_graphs bf16": bf16, "eager": Eager(model), "torch.compile": Compiled(model, max_cache, dev)}
    ids = ids_cpu.to(dev)
    tok: dict[str, torch.Tensor] = {}
    with torch.inference_mode():
        first = {}
        for k, e in engines.items():
            logits, t = timed(lambda e=e: e.prefill(ids if not k.startswith("tensor_graphs") else ids_cpu))
            first[k] = int(logits.reshape(-1).argmax())
            if k == "torch.compile":
                row["notes"]["torch.compile first calls s"] = round(t, 2)
            tok[k] = torch.tensor([[first[k]]], device=dev if not k.startswith("tensor_graphs") else "cpu")
        row["notes"]["first token same as eager"] = {k: v == first["eager"] for k, v in first.items()}
        times: dict[str, list[float]] = {k: [] for k in engines}
        for r in range(steps + 3):
            for k, e in engines.items():
                logits, dt = timed(lambda e=e, k=k: e.decode(tok[k]))
                nxt = int(logits.reshape(-1).argmax())
                tok[k] = torch.tensor([[nxt]], device=tok[k].device)
                if r >= 3:
                    times[k].append(dt)
    row["values"] = {k: 1.0 / statistics.median(v) for k, v in times.items()}
    if dev == "cuda":  # the device's share of a step: one replay of the captured decode plan alone
        graph = tgd.dec.decode_graph._graph
        row["notes"]["tensor_graphs device ms per step replay"] = round(statistics.median(graph.replay_ns() for _ in range(10)) / 1e6, 3)
    return row


def show_profile(log, what: str, run) -> None:
    """Log tensor_graphs' per-op profile of ``what``; a profile that fails is logged, the rows
    still measured."""
    try:
        log(f"  tensor_graphs profile, {what}:\n" + run().format(top=25))
    except Exception:  # noqa: BLE001 - a benchmark run keeps its rows
        import traceback

        log(f"  tensor_graphs profile of the {what} failed:\n{traceback.format_exc()}")


def table(rows: list[dict]) -> str:
    lines = ["| model | row | " + " | ".join(ENGINES) + " | tg / torch.compile |", "|---|---|" + "--:|" * (len(ENGINES) + 1)]
    for row in rows:
        v = row["values"]
        cells = [f"{v[e]:.2f} {row['unit']}" if e in v else "—" for e in ENGINES]
        ratio = ""
        if "tensor_graphs" in v and "torch.compile" in v:
            ratio = (v["tensor_graphs"] / v["torch.compile"]) if row["unit"] == "ms" else (v["torch.compile"] / v["tensor_graphs"])
            ratio = f"{ratio:.2f}x time"
        lines.append(f"| {row['model']} | {row['what']} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu.py", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(BUILD), choices=list(BUILD))
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="tiny models, few calls: a smoke run")
    ap.add_argument("--tune", action="store_true", help="also a forward with tune='missing' (tolerance 1e-5)")
    ap.add_argument("--tune-seconds", type=float, default=None, help="with --tune: stop measuring paths after this long")
    ap.add_argument("--profile", action="store_true", help="print tensor_graphs' per-op profile of the forward and a decode step")
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    dev = device()
    if dev == "cpu" and not args.quick:
        raise SystemExit("benchmarks/gpu.py: without a GPU only --quick runs (under TRITON_INTERPRET=1)")
    if args.quick:
        args.seq, args.calls, args.steps = min(args.seq, 8), min(args.calls, 2), min(args.steps, 2)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    name = torch.cuda.get_device_name() if dev == "cuda" else "CPU (Triton interpreter)"
    header = (f"GPU rows, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {name}; torch {torch.__version__}, "
              f"python {platform.python_version()}, seq {args.seq}, fp32, batch 1")
    log(header)
    rows = []
    for m in args.models:
        log(f"===== {m}")
        model = BUILD[m](args.quick)
        for make in (lambda: forward_row(m, model, args.seq, args.calls, dev, log, args.tune, args.profile, args.tune_seconds),
                     lambda: decode_row(m, BUILD[m](args.quick), args.seq, args.steps, dev, log, args.profile)):
            r = make()
            rows.append(r)
            log(f"  {r['what']}: " + ", ".join(f"{k} {v:.3g} {r['unit']}" for k, v in r["values"].items()) + f"; {r['notes']}")
            if args.json:  # each row as soon as it is measured
                Path(args.json).write_text(json.dumps({"header": header, "rows": rows}, indent=1, default=str))
    text = f"# {header}\n\n{table(rows)}\n\nCommand: `benchmarks/gpu.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
