"""What a prompt of any length costs to prefill with `compile_decoder`'s fixed chunk, against a
prefill graph of exactly its length: the bound a prefill taking the prompt length as a symbol
could reach (the dynamic graph runs within a few % of the static one, docs/dynamic-shapes.md).

    .venv/bin/python benchmarks/prefill_chunks.py [--chunks 32 128] [--prompts 17 100 128 300]
                                                  [--threads 1] [--rounds 5] [--quick]

GPT-2 small (transformers ``GPT2Config()``, random weights), max_seq 512; each decoder's
``prefill(ids)`` timed alternately with the others, medians. A prompt of P tokens runs as
ceil(P / chunk) chunks, the last padded to the chunk; "exact" is a decoder whose chunk is P.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import tensor_graphs as tg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--prompts", type=int, nargs="+", default=[17, 100, 128, 300])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a tiny GPT-2 (a smoke test)")
    args = ap.parse_args(argv)
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4) if args.quick else GPT2Config()
    model = GPT2LMHeadModel(config).eval()
    tg.set_num_threads(args.threads)
    decoders = {c: tg.compile_decoder(model, max_seq=512, prefill_chunk=c) for c in args.chunks}
    print("| prompt | " + " | ".join(f"chunk {c} ms" for c in args.chunks) + " | exact (chunk = prompt) ms | best chunked / exact |")
    print("|--:|" + "--:|" * (len(args.chunks) + 2))
    for p in args.prompts:
        exact = tg.compile_decoder(model, max_seq=512, prefill_chunk=p)
        ids = torch.randint(0, config.vocab_size, (1, p))
        runs = {**{f"chunk {c}": d for c, d in decoders.items()}, "exact": exact}
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.rounds + 1):
            for k, d in runs.items():
                t0 = time.perf_counter()
                d.prefill(ids)
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v[1:]) * 1e3 for k, v in times.items()}
        best = min(med[f"chunk {c}"] for c in args.chunks)
        print(f"| {p} | " + " | ".join(f"{med[f'chunk {c}']:.1f}" for c in args.chunks)
              + f" | {med['exact']:.1f} | {best / med['exact']:.2f} |", flush=True)
        del exact
    return 0


if __name__ == "__main__":
    sys.exit(main())
