"""What keeping a SwiGLU's activation out of the gate GEMM costs or saves on the CPU
(`fuse-matmul-epilogue` leaves an activation whose only user is an elementwise op to that op's
fused loop, for the GPU path's library GEMMs): the Qwen3-0.6B-shaped model compiled with the
rule (``silu(gate) * up`` one fused loop, the gate GEMM plain) and without it (the silu in the
gate GEMM's epilogue, then the multiply), timed side by side in one process (alternating blocks,
`gpt2.bench`).

    .venv/bin/python benchmarks/swiglu_epilogue.py [--seq 128 1] [--threads 2] [--repeat 15]

Rows: the forward (all logits) at each ``--seq`` (1 token: the GEMMs are matrix-vector
products, as in a decode step), batch 1, float32. Both graphs' logits are compared with each
other and with PyTorch's.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from decode import build_qwen3  # noqa: E402
from gpt2 import bench  # noqa: E402
from gpu import Logits  # noqa: E402

import tensor_graphs as tg  # noqa: E402
from tensor_graphs.transforms.fusion import matmul_epilogue  # noqa: E402


def compile_graph(model, ids, keep_out: bool):
    """``model`` compiled with the rule (``keep_out``) or with every activation in its GEMM (the
    compile cache is off here: its key does not see the rule switched at run time)."""
    os.environ["TG_CACHE"] = "off"
    saved = matmul_epilogue._feeds_an_elementwise_loop
    if not keep_out:
        matmul_epilogue._feeds_an_elementwise_loop = lambda op: False
    try:
        return tg.compile(model, (ids,))
    finally:
        matmul_epilogue._feeds_an_elementwise_loop = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[128, 1])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    tg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    model = Logits(build_qwen3(False)).eval()
    rows = []
    for seq in args.seq:
        ids = torch.randint(0, model.model.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
        graphs = {k: compile_graph(model, ids, k) for k in (True, False)}
        silu_gemms = {k: graphs[k].ir("tg").count('activation = "silu"') for k in graphs}
        print(f"seq {seq}: target {graphs[True].target.llvm_cpu} ({graphs[True].target.level}); GEMMs with a silu "
              f"epilogue: {silu_gemms[True]} with the rule, {silu_gemms[False]} without", flush=True)
        outs = {k: np.asarray(f(ids)) for k, f in graphs.items()}
        with torch.no_grad():
            ref = model(ids).numpy()
        diff = float(np.abs(outs[True] - outs[False]).max())
        errors = {k: float(np.abs(v - ref).max()) for k, v in outs.items()}
        ms = bench({"kept out": lambda: graphs[True](ids), "in the GEMM": lambda: graphs[False](ids)}, args.repeat)
        rows.append((seq, ms["kept out"], ms["in the GEMM"]))
        print(f"seq {seq}: kept out {ms['kept out']:.2f} ms, in the GEMM {ms['in the GEMM']:.2f} ms; max |logits "
              f"difference| {diff:.1e}; against PyTorch (largest logit {np.abs(ref).max():.2f}): kept out "
              f"{errors[True]:.1e}, in the GEMM {errors[False]:.1e}", flush=True)
    print(f"\nthreads {args.threads}\n\n| Qwen3-0.6B-shaped forward | silu kept out | silu in the gate GEMM | ratio |")
    print("|---|--:|--:|--:|")
    for seq, a, b in rows:
        print(f"| {seq} token{'s' if seq > 1 else ''} | {a:.2f} ms | {b:.2f} ms | {a / b:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
