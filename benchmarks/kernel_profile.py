"""Where tensor_graphs spends its time on a tg-bench workload: every kernel's share, kernel by kernel.

    .venv/bin/python benchmarks/kernel_profile.py WORKLOAD [--threads 1] [--repeat 10] [--top 30]
                                                  [--weight-format int4] [--tolerance 1e-2] [--bf16-model]

WORKLOAD is one of the rows of ``tg-bench`` (the same models, inputs and seeds):

* ``mlp-b1``, ``mlp-b64``: the MLP 256 -> 1024 -> 1024 -> 256 at batch 1 / 64;
* ``encoder-768``, ``encoder-256``: the BertLayer encoder blocks at seq 128;
* ``gpt2-32``, ``gpt2-128``: GPT-2 small, all logits, prefill 32 / 128;
* ``resnet50``: ResNet-50 at 224 x 224, batch 1 (its batch norms folded);
* ``gpt2-prefill``, ``gpt2-decode``: GPT-2 small with a KV cache: the 128-token prefill chunk
  (last logits) and one decode step at context 128;
* ``qwen3-prefill``, ``qwen3-decode``: the same for the Qwen3-0.6B-shaped model.

The graph is compiled with ``profile=True`` (`tensor_graphs.compile` / ``compile_decoder``), so
every kernel call is timed with ``clock_gettime`` (a few hundred nanoseconds per kernel: the
profiled total is a little above an unprofiled call); the report is ``fn.profile(...)``'s: the
slowest kernels, then the time per kind of kernel. Timings on a shared machine are noisy: run it
twice.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decode  # noqa: E402
import gpt2  # noqa: E402
import mlp  # noqa: E402
import suite  # noqa: E402

import tensor_graphs as tg  # noqa: E402


def forward_case(name: str):
    """``(model, x)`` of a stateless row, built as tg-bench builds it."""
    if name.startswith("mlp-b"):
        batch = int(name[len("mlp-b"):])
        model = mlp.build()
        return model, torch.randn(batch, 256, generator=torch.Generator().manual_seed(batch))
    if name.startswith("encoder-"):
        d = int(name[len("encoder-"):])
        heads, ffn = {768: (12, 3072), 256: (4, 1024)}[d]
        torch.manual_seed(0)
        model = suite.EncoderBlock(d, heads, ffn).eval()
        return model, torch.randn(1, 128, d, generator=torch.Generator().manual_seed(128))
    if name == "resnet50":
        return suite.build_resnet50(False), torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(224))
    seq = int(name[len("gpt2-"):])
    model = gpt2.build()
    ids = torch.randint(0, model.model.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(seq))
    return model, ids


FORWARD = ("mlp-b1", "mlp-b64", "encoder-768", "encoder-256", "gpt2-32", "gpt2-128", "resnet50")
DECODER = ("gpt2-prefill", "gpt2-decode", "qwen3-prefill", "qwen3-decode")


def profile_forward(name: str, repeat: int, tolerance: float | None = None, bf16_model: bool = False):
    model, x = forward_case(name)
    if bf16_model:  # the model and its input in bfloat16 (token ids stay integers)
        model, x = model.to(torch.bfloat16), (x.to(torch.bfloat16) if x.is_floating_point() else x)
    t0 = time.perf_counter()
    tuned = {} if tolerance is None else {"tune": "missing", "tolerance": tolerance}
    fn = tg.compile(model, (x,), profile=True, **tuned)
    print(f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    return fn.profile(x, repeat=repeat, warmup=2)


def profile_decoder(name: str, repeat: int, weight_format: str | None = None):
    which, step = name.split("-")
    model = decode.build_gpt2(False) if which == "gpt2" else decode.build_qwen3(False)
    prompt = 128
    t0 = time.perf_counter()
    dec = tg.compile_decoder(model, max_seq=prompt + 8, prefill_chunk=prompt, profile=True, weight_format=weight_format)
    print(f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    ids = torch.randint(1, model.config.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(prompt))
    if step == "prefill":  # the prompt as one chunk from position 0; logits of its last token
        pos = np.arange(prompt, dtype=np.int64)[None, :]
        return dec.prefill_graph.profile(ids.numpy(), pos, np.array([prompt - 1], np.int64), repeat=repeat, past=0)
    dec.prefill(ids)  # a cache of 128 positions; each profiled step writes position 128 again
    one = np.array([[7]], np.int64)
    return dec.decode_graph.profile(one, np.array([[prompt]], np.int64), np.zeros(1, np.int64), repeat=repeat, past=prompt)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=FORWARD + DECODER)
    p.add_argument("--threads", type=int, default=1, help="tg.set_num_threads (default 1)")
    p.add_argument("--repeat", type=int, default=10, help="profiled calls (default 10)")
    p.add_argument("--top", type=int, default=30, help="slowest kernels listed (default 30)")
    p.add_argument("--weight-format", default=None,
                   help="decoder workloads: compile_decoder(weight_format=...), e.g. int8, int4 (default: float32)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="forward workloads: the paths tuned at this tolerance (tune=\"missing\", as tg-bench's "
                        "tg-lowp at 1e-2: the bf16 and int8 GEMMs where their error fits); default: the heuristic's")
    p.add_argument("--bf16-model", action="store_true",
                   help="forward workloads: the model and its input cast to bfloat16 (model.to(torch.bfloat16))")
    args = p.parse_args(argv)
    tg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        if args.workload in FORWARD:
            report = profile_forward(args.workload, args.repeat, args.tolerance, args.bf16_model)
        else:
            report = profile_decoder(args.workload, args.repeat, args.weight_format)
    print(f"{args.workload}, {args.threads} thread(s):")
    print(report.format(top=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
