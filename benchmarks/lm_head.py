"""GPT-2 small's LM head alone, warm and with the caches flushed: the 128 x 768 by 768 x 50257 GEMM
of a prefill's all logits, its weight packed for one GEMM variant each.

    .venv/bin/python benchmarks/lm_head.py [--variants matmul.packed_bf16 matmul.packed_int8]
                                           [--rows 128] [--rounds 7]

Each variant's graph (`pinned_gemms.pinned_graph`: the GEMM pinned to it, for the host) is timed
call by call, alternately warm (right after a call) and cold (after writing a 1 GiB array, so
that neither its 77 MB of bf16 weight panels nor its 26 MB of logits are in any cache, as in
the model, where the rest of GPT-2 runs between two calls). Medians, ms; the bytes it moves
(weights read, logits written) over the cold time beside them.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np
import torch

import tensor_graphs as tg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from pinned_gemms import pinned_graph  # noqa: E402

VOCAB, D = 50257, 768


class _Patch:
    """The ``monkeypatch`` `pinned_graph` takes, outside pytest."""

    def setattr(self, obj, name, value) -> None:
        setattr(obj, name, value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=["matmul.packed_bf16", "matmul.packed_int8"])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.manual_seed(0)
    head = torch.nn.Linear(D, VOCAB, bias=False).eval()
    x = torch.randn(args.rows, D)
    flush = np.ones(1 << 28, np.float32)
    print("| variant | warm ms | cold ms | GB/s cold (weights + logits) |")
    print("|---|--:|--:|--:|")
    for variant in args.variants:
        graph = pinned_graph(head, (x,), "host", variant, _Patch())
        fn = tg.compile_module(graph.module, graph.weights, target="host")
        xn = x.numpy()
        fn(xn)
        warm, cold = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            fn(xn)
            warm.append(time.perf_counter() - t0)
            flush += 1.0
            t0 = time.perf_counter()
            fn(xn)
            cold.append(time.perf_counter() - t0)
        weight_bytes = {"matmul.packed_bf16": 2, "matmul.packed_int8": 1}.get(variant, 4) * VOCAB * D
        moved = weight_bytes + 4 * args.rows * VOCAB
        w, c = statistics.median(warm), statistics.median(cold)
        print(f"| {variant} | {w * 1e3:.2f} | {c * 1e3:.2f} | {moved / c / 1e9:.1f} |", flush=True)


if __name__ == "__main__":
    main()
