"""`compile_decoder`'s prefill with its token count a size symbol (calls of up to ``chunk``
tokens, the last one exactly what is left) against the padded fixed chunk it replaced (every
call ``chunk`` tokens, the last padded).

    .venv/bin/python benchmarks/prefill_chunks.py [--chunks 32 128 512] [--prompts 17 100 300]
                                                  [--threads 1] [--rounds 5] [--quick] [--out FILE.md]

GPT-2 small (transformers ``GPT2Config()``, random weights), max_seq 512; each decoder's
``prefill(ids)`` timed alternately with the others (ABAB...), medians of the rounds after one
warm-up round. Columns: "padded C" (a static prefill graph of C tokens: ceil(P / C) calls, the
last padded), "symbolic C" (the default now: ceil(P / C) calls, the last of P mod C tokens).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import tensor_graphs as tg


def decoders(model, chunks: list[int]) -> dict:
    """label -> decoder: padded and symbolic per chunk (the same weights, compiled each)."""
    from tensor_graphs.driver.lowering import CompileStats
    from tensor_graphs.options import CompileOptions, DecoderOptions
    from tensor_graphs.runtime_support.decoder_assembly import compile_decoder
    from tensor_graphs.tuning.compile import Tuning

    out = {}
    for c in chunks:
        out[f"padded {c}"] = compile_decoder(model, DecoderOptions(512, 1, c), CompileOptions(), CompileStats(),
                                             Tuning.of(CompileOptions(), (), None), exact=False)
        out[f"symbolic {c}"] = tg.compile_decoder(model, max_seq=512, prefill_chunk=c)
        assert out[f"symbolic {c}"].explain().startswith("prefill: calls of up to")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--prompts", type=int, nargs="+", default=[17, 100, 300])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a tiny GPT-2 (a smoke test)")
    ap.add_argument("--out", default=None, help="write the table (markdown) here too")
    args = ap.parse_args(argv)
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4) if args.quick else GPT2Config()
    model = GPT2LMHeadModel(config).eval()
    tg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    runs = decoders(model, args.chunks)
    head = ["| prompt | " + " | ".join(f"{k} ms" for k in runs) + " | " + " | ".join(
        f"symbolic / padded {c}" for c in args.chunks) + " |", "|--:|" + "--:|" * (len(runs) + len(args.chunks))]
    print("\n".join(head), flush=True)
    lines = []
    for p in args.prompts:
        ids = torch.randint(0, config.vocab_size, (1, p))
        with torch.no_grad():
            expected = model(ids).logits[0, -1]
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.rounds + 1):
            for k, d in runs.items():
                t0 = time.perf_counter()
                logits = d.prefill(ids)
                times[k].append(time.perf_counter() - t0)
                torch.testing.assert_close(torch.as_tensor(logits)[0], expected, rtol=1e-4, atol=1e-4)
        med = {k: statistics.median(v[1:]) * 1e3 for k, v in times.items()}
        line = (f"| {p} | " + " | ".join(f"{med[k]:.1f}" for k in runs) + " | "
                + " | ".join(f"{med[f'symbolic {c}'] / med[f'padded {c}']:.2f}" for c in args.chunks) + " |")
        print(line, flush=True)
        lines.append(line)
    if args.out:
        from tensor_graphs.target import Target

        Path(args.out).write_text(
            f"# Prefill: a symbolic token count against padded fixed chunks\n\n"
            f"`{' '.join(['benchmarks/prefill_chunks.py', *(argv or sys.argv[1:])])}`, GPT-2 small, "
            f"{args.threads} thread(s), {Target.host().describe()}; medians of {args.rounds} alternating rounds.\n\n"
            + "\n".join(head + lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
