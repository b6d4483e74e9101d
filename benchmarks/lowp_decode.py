"""Decode over cheaper weights (issues 14 and 32): tokens/s and error of tensor_graphs'
float32, bf16, int8, int4 and tuned paths against the fp32 peers, in one process.

    .venv/bin/python benchmarks/lowp_decode.py [--models gpt2] [--threads 1 2] [--steps 24]
                                               [--tolerance 1e-2] [--peers onnxruntime] [--quick]
                                               [--engines "tg fp32" "tg int4" ...]
                                               [--llama-cpp F32 Q8_0 Q4_0 Q4_K_M] [--prefill]

Per model (random weights, ``torch.manual_seed(0)``, fp32, batch 1; `decode.py`'s builders):

* **speed**: decode tokens/s at context 128 (`decode.bench_decode`: the engines alternate in
  turns, medians of the timed steps) for ``tg fp32`` (``compile_decoder`` as it is),
  ``tg bf16`` / ``tg int8`` / ``tg int4`` / ``tg int4zp`` / ``tg int4dot`` (``weight_format=``:
  every decode GEMM over bf16 / int8 / int4 weights: Q4_0's groups of 32, or zero points per
  128; int4dot: Q4_0 times the activations as int8, by integer dot products),
  ``tg tuned`` (``tune="missing", tolerance=--tolerance`` into a fresh timing database: each
  kernel's fastest measured path within the tolerance) and the fp32 peers (``--peers``; ONNX
  Runtime was the fastest in BENCHMARKS.md).
* **llama.cpp** (``--llama-cpp FORMAT ...``): the same model written to GGUF and quantised by
  llama.cpp, run by ``llama-cpp-python`` (`llama_cpp_peer`), timed and checked like the others
  (skipped with the reason when it is not installed). ``--prefill`` also times each engine's
  prompt of the context's length (prompt tokens/s).
* **error**, against eager PyTorch in float32 over 64 decode steps after a 16-token prompt,
  teacher-forced (every engine is fed eager's greedy tokens, so that each step compares the
  same context): the max absolute difference of the logits, and the share of steps whose
  greedy token (argmax) is eager's.

Printed as a table, with the CPU; the ratio column is tokens/s over the fastest fp32 peer's.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
import decode  # noqa: E402  (benchmarks/decode.py)

from tensor_graphs.target import Target, cpu_model  # noqa: E402

def llama_engines(formats: list[str]) -> dict[str, type]:
    """The llama.cpp engines of ``formats`` (none, with the reason, when it is not installed)."""
    if not formats:
        return {}
    import llama_cpp_peer

    why = llama_cpp_peer.available()
    if why is not None:
        decode.log(f"llama.cpp engines skipped: {why}")
        return {}
    return {f"llama.cpp {fmt}": llama_cpp_peer.llama_engine(fmt) for fmt in formats}


def variant(name: str, **kwargs) -> type:
    """``compile_decoder`` with extra keyword arguments (weight_format, tuning); it reports its error."""
    return type(name, (decode.TensorGraphs,), {"name": name, "kwargs": kwargs, "reports_error": True})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["gpt2"], choices=["gpt2", "qwen3"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=1e-2)
    ap.add_argument("--peers", nargs="*", default=["onnxruntime"], choices=["eager", "torch.compile", "onnxruntime", "openvino"])
    ap.add_argument("--quick", action="store_true", help="tiny models: a smoke run")
    ap.add_argument("--llama-cpp", nargs="*", default=[], metavar="FORMAT",
                    help="llama.cpp engines in these GGUF formats (F32 BF16 Q8_0 Q4_0 Q4_K_M)")
    ap.add_argument("--prefill", action="store_true", help="also prompt tokens/s (a prefill of the context)")
    ap.add_argument("--engines", nargs="*", default=None,
                    help="only these tensor_graphs engines (default: tg fp32, bf16, int8, int4, int4zp, int4dot, tuned)")
    args = ap.parse_args()
    print(f"{cpu_model()} ({Target.host().llvm_cpu}); Python {platform.python_version()}; torch {torch.__version__}")
    db = os.path.join(tempfile.mkdtemp(prefix="tg-lowp-"), "tuning.sqlite")
    builders = {"gpt2": decode.build_gpt2, "qwen3": decode.build_qwen3}
    for name in args.models:
        model = builders[name](args.quick)
        label = {"gpt2": "GPT-2 small", "qwen3": "Qwen3-0.6B-shaped"}[name] + (" (quick)" if args.quick else "")
        context = 128 if not args.quick else 16
        max_cache = context + args.warmup + 2 * args.steps + decode.ERROR_STEPS + decode.ERROR_PROMPT + 8
        tg_engines = {
            "tg fp32": variant("tg fp32"),
            "tg bf16": variant("tg bf16", weight_format="bf16"),
            "tg int8": variant("tg int8", weight_format="int8"),
            "tg int4": variant("tg int4", weight_format="int4"),
            "tg int4zp": variant("tg int4zp", weight_format="int4zp"),
            "tg int4dot": variant("tg int4dot", weight_format="int4dot"),
            "tg tuned": variant("tg tuned", tune="missing", tolerance=args.tolerance, tuning_db=db),
        }
        tg_engines = {k: v for k, v in tg_engines.items() if not args.engines or k in args.engines}
        engines = {k: cls(model, max_cache, context) for k, cls in tg_engines.items()}
        for peer in args.peers:
            engines[peer] = decode.CLASSES[peer](model, max_cache, context)
        llama = llama_engines(args.llama_cpp)
        engines.update({k: cls(model, max_cache, context) for k, cls in llama.items()})
        ids = torch.randint(0, model.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(1))
        errors: dict[str, tuple[float, float]] = {}
        for threads in args.threads:
            torch.set_num_threads(threads)
            decode.log(f"{label}, {threads} thread(s):")
            live = {}
            for k, e in engines.items():
                try:
                    e.setup(threads)
                    live[k] = e
                except Exception as ex:  # noqa: BLE001 - report, go on with the others
                    decode.log(f"  {k}: n/a: {decode.one_line(ex)}")
            for k in [*tg_engines, *llama]:
                if k in live:  # measured once, after its first setup (`decode.Engine.measure_error`)
                    live[k].measure_error()
                    errors[k] = live[k].error
            first = {k: decode.argmax(e.prefill(ids)) for k, e in live.items()}
            if args.prefill:
                ms = decode.bench_prefill(live, ids, 3, next(iter(first.values())), lambda n, m: decode.log(f"  {n}: {m}"))
                print(f"\n{label}, prompt of {context} tokens, {threads} thread(s)\n| engine | prompt tok/s |\n|---|--:|")
                for k, v in ms.items():
                    print(f"| {k} | {context * 1e3 / v:.0f} |", flush=True)
                first = {k: decode.argmax(e.prefill(ids)) for k, e in live.items()}
            ms = decode.bench_decode(live, first, args.steps, args.warmup, lambda n, m: decode.log(f"  {n}: {m}"))
            peers = {k: 1e3 / v for k, v in ms.items() if k in args.peers}
            best = max(peers, key=peers.get) if peers else None
            print(f"\n{label}, decode @{context}, {threads} thread(s) (tolerance for 'tg tuned': {args.tolerance:g})")
            print("| engine | tok/s | vs fastest fp32 peer | max abs logits error | greedy tokens same |")
            print("|---|--:|--:|--:|--:|")
            for k, v in ms.items():
                tps = 1e3 / v
                ratio = f"{tps / peers[best]:.2f}x ({best})" if best else "n/a"
                err = errors.get(k)
                cells = (f"{err[0]:.3g}", f"{100 * err[1]:.0f}%") if err else ("(fp32)", "")
                print(f"| {k} | {tps:.1f} | {ratio} | {cells[0]} | {cells[1]} |", flush=True)
        if "tg tuned" in engines and engines["tg tuned"].dec is not None:
            print("\n'tg tuned' decode graph, kernels with a choice:")
            print(engines["tg tuned"].dec.decode_graph.explain(all_kernels=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
