"""Reduced-precision prefill: tensor_graphs tuned within a tolerance against its float32 graph and
OpenVINO at f32 and bf16, each time beside its error.

    .venv/bin/python benchmarks/lowp_prefill.py [--models mlp encoder gpt2 qwen3 resnet] [--threads 1,2]
                                                [--tolerance 1e-2 [3e-2 ...]] [--rounds 10] [--images 1]

Rows (random init, ``torch.manual_seed(0)``): the MLP 768 -> 3072 -> 768 (GELU) at 64 and 128
rows; one BertLayer (d 768, 12 heads, FFN 3072) at seq 128 (``suite.EncoderBlock``); GPT-2 small
prefill 128, all logits (``gpt2.build``); the Qwen3-0.6B-shaped model (``decode.build_qwen3``: 28 layers,
d 1024, 16 query and 8 KV heads, a 151,936-token vocabulary) prefill 128, the last position's
logits (only with ``--models qwen3``: its float64 reference and OpenVINO's conversion take
minutes); ResNet-50 at 224 x 224, batch 1 (``--images``: more; ``suite.build_resnet50``:
transformers', its batch norms folded; only with ``--models resnet``). Engines: ``tg-fp32``, tensor_graphs' heuristic graph;
``tg-tuned`` (``tg-tuned@<tolerance>`` for each of several), ``tg.compile(tune="missing",
tolerance=...)``, whose tuner may take the bf16 GEMMs (``matmul.packed_bf16``: AMX tiles,
AVX512-BF16 dot products; for convolutions ``matmul.packed_rhs_bf16``, and
``winograd_conv.direct_bf16`` for the 3x3 ones at stride 1) and the int8 GEMMs
(``matmul.packed_int8``: AMX-INT8 tiles, VNNI) where
the CPU has them and their measured error fits (its compile includes the measuring); ``openvino-f32`` and ``openvino-bf16``
(``INFERENCE_PRECISION_HINT``; skipped when OpenVINO is not installed). With ``--bf16-model`` also
``eager-bf16`` and ``tg-bf16-model``: the model and its input cast to bfloat16 (``model.to(torch.bfloat16)``),
run by PyTorch eager and by ``tg.compile`` (the heuristic's paths: a bf16 model's GEMMs and
convolutions on its bf16 operands, `matmul.bf16_operands` / `matmul.bf16_operands_rhs`), their
outputs widened to float32. Within a row the engines
alternate (``gpt2.bench``); medians. Errors: max |y - y64| / max |y64| against eager in float64
(the model and input cast to double), so that float32 engines show their own rounding.
"""

from __future__ import annotations

import argparse
import copy
import functools
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpt2  # noqa: E402
import tensor_graphs as tg  # noqa: E402
from tensor_graphs.target import Target  # noqa: E402


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(768, 3072), torch.nn.GELU(), torch.nn.Linear(3072, 768)).eval()


class LastLogits(torch.nn.Module):
    """``ids -> logits`` of the last position of a causal LM (``logits_to_keep=1``: the LM head
    runs on that row alone, as a prompt's prefill does), no KV cache."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids, use_cache=False, logits_to_keep=1).logits


def rows(keys: list[str], images: int = 1) -> dict[str, list[tuple[str, torch.nn.Module, torch.Tensor]]]:
    """(label, model, input) of every row of ``keys`` (``--models``); ResNet-50 over ``images``."""
    from decode import build_qwen3
    from suite import EncoderBlock, build_resnet50

    torch.manual_seed(0)
    out: dict[str, list] = {key: [] for key in keys}
    if "mlp" in keys:
        model = mlp()
        for m in (64, 128):
            out["mlp"].append((f"MLP 768-3072-768, {m} rows", model, torch.randn(m, 768)))
    if "encoder" in keys:
        out["encoder"].append(("BertLayer d 768, seq 128", EncoderBlock(768, 12, 3072).eval(), torch.randn(1, 128, 768)))
    if "gpt2" in keys:
        g = gpt2.build()
        out["gpt2"].append(("GPT-2 small prefill 128, all logits", g, torch.randint(0, g.model.config.vocab_size, (1, 128))))
    if "qwen3" in keys:
        q = LastLogits(build_qwen3(False)).eval()
        out["qwen3"].append(("Qwen3-0.6B-shaped prefill 128, last logits", q, torch.randint(0, q.model.config.vocab_size, (1, 128))))
    if "resnet" in keys:
        out["resnet"].append((f"ResNet-50 224x224, batch {images}", build_resnet50(False), torch.randn(images, 3, 224, 224)))
    return out


def _bf16_model(model: torch.nn.Module, x: torch.Tensor, cache: dict) -> tuple[torch.nn.Module, torch.Tensor]:
    """``model`` and ``x`` in bfloat16 (token ids stay integers), made once per row."""
    if "bf16-model" not in cache:
        cache["bf16-model"] = (copy.deepcopy(model).to(torch.bfloat16), x.to(torch.bfloat16) if x.is_floating_point() else x)
    return cache["bf16-model"]


def make_eager_bf16(model, x, threads, cache):
    """PyTorch eager on the model cast to bfloat16."""
    m16, x16 = _bf16_model(model, x, cache)

    def run():
        with torch.no_grad():
            return m16(x16).float()

    return run


def make_tg_bf16_model(model, x, threads, cache):
    """``tg.compile`` of the model cast to bfloat16 (the heuristic's paths), compiled once per row."""
    m16, x16 = _bf16_model(model, x, cache)
    if "tg-bf16" not in cache:
        cache["tg-bf16"] = tg.compile(m16, (x16,))
    fn = cache["tg-bf16"]
    return lambda: torch.as_tensor(fn(x16)).float()


#: (row key, engine, threads) -> why that engine is left out of that row: it kills the process
KNOWN_CRASHES = {
    ("qwen3", "openvino-bf16", 1): "OpenVINO 2026.4.1's CPU plugin dies compiling it in bf16 for 1 thread "
                                   "(SIGFPE: a divide error in libopenvino_intel_cpu_plugin.so; f32, and bf16 for 2 threads, compile)",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mlp", "encoder", "gpt2"], choices=["mlp", "encoder", "gpt2", "qwen3", "resnet"])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tolerance", type=float, nargs="+", default=[1e-2])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--bf16-model", action="store_true", help="also the model cast to bfloat16: eager and tg.compile")
    ap.add_argument("--images", type=int, default=1, help="ResNet-50's batch (default 1)")
    args = ap.parse_args(argv)
    names = {t: "tg-tuned" if len(args.tolerance) == 1 else f"tg-tuned@{t:g}" for t in args.tolerance}
    tuned = {name: functools.partial(gpt2.make_tensor_graphs_tuned, engine=name, tolerance=t) for t, name in names.items()}
    makers = {"tg-fp32": gpt2.make_tensor_graphs, **tuned}
    if gpt2.not_installed("openvino") is None:
        makers.update({"openvino-f32": gpt2.MAKERS["openvino"], "openvino-bf16": gpt2.MAKERS["openvino-bf16"]})
    else:
        print("OpenVINO is not installed (pip install .[bench]): its rows are left out")
    if args.bf16_model:
        makers.update({"eager-bf16": make_eager_bf16, "tg-bf16-model": make_tg_bf16_model})
    threads_list = [int(t) for t in args.threads.split(",")]
    print(f"CPU: {platform.processor() or platform.machine()}; target: {Target.host().describe()}")
    print("\n| row | threads | " + " | ".join(f"{e} ms (error)" for e in makers) + "".join(f" | {t} / tg-fp32" for t in tuned) + " |")
    print("|---|--:|" + "--:|" * (len(makers) + len(tuned)))
    table = rows(args.models, args.images)
    for key in args.models:
        for label, model, x in table[key]:
            expected = gpt2.reference64(model, x)
            cache: dict = {}
            for threads in threads_list:
                torch.set_num_threads(threads)
                tg.set_num_threads(threads)
                left_out = {name: why for name in makers if (why := KNOWN_CRASHES.get((key, name, threads)))}
                for name, why in left_out.items():
                    print(f"  {name} left out of this row at {threads} thread(s): {why}")
                runs = {name: make(model, x, threads, cache) for name, make in makers.items() if name not in left_out}
                errors = {name: gpt2.relative_error(run(), expected) for name, run in runs.items()}
                ms = gpt2.bench(runs, args.rounds)
                cells = [f"{ms[e]:.3f} ({errors[e]:.1e})" if e in runs else "crashes" for e in makers]
                ratios = "".join(f" | {ms[t] / ms['tg-fp32']:.2f}" for t in tuned)
                print(f"| {label} | {threads} | " + " | ".join(cells) + ratios + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
