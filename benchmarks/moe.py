"""A mixture-of-experts layer: routed experts (what tensor_graphs compiles) against a dense
fallback (every expert computed), both compiled by tensor_graphs, and PyTorch eager.

    .venv/bin/python benchmarks/moe.py [--hidden 1024 --intermediate 2048 --experts 8 --top-k 2]
                                       [--seq 1 128] [--threads 1 2] [--repeat 20]

The layer is transformers' ``MixtralSparseMoeBlock`` (router, softmax, top-k, renormalised
weights, SwiGLU experts) with random weights, on ``[1, seq, hidden]``:

- routed: the block as transformers writes it (its default grouped experts: tokens sorted by
  expert, a GEMM per chosen expert), compiled: `tg.argtopk`, `tg.grouped_matmul` (each chosen
  expert's rows in the packed GEMM's register tiles over its packed weights; experts no token
  chose are skipped), `tg.put` for the inverse permutation;
- routed, BLAS: the same with ``pack_weights=False`` (an sgemm, or sgemv for one row, per
  chosen expert, weights read where they are);
- dense: the same function written without routing: every expert's SwiGLU on every token,
  each scaled by its routing weight (zero for experts not chosen), as two GEMMs over the
  experts' weights concatenated (packed, register-tiled): E / k times the FLOPs, and every
  expert's weights read on every call;
- eager: PyTorch running the block (its grouped_mm experts).

Medians of ``--repeat`` rounds in milliseconds, the engines timed in turn within each round;
the compiled forms are checked against eager first (1e-4).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
import transformers as T

import tensor_graphs as tg


def moe_block(hidden: int, intermediate: int, experts: int, top_k: int) -> torch.nn.Module:
    torch.manual_seed(0)
    config = T.MixtralConfig(hidden_size=hidden, intermediate_size=intermediate, num_local_experts=experts, num_experts_per_tok=top_k)
    config._experts_implementation = "grouped_mm"  # what a MixtralForCausalLM sets (transformers' default)
    block = T.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.02)
    return block


class DenseMoe(torch.nn.Module):
    """The block computed densely: ``sum_e w[t, e] * down_e(silu(gate_e x) * up_e x)`` with
    ``w`` the renormalised top-k routing weights scattered to zeros elsewhere."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        e, two_i, h = block.experts.gate_up_proj.shape
        self.experts, self.inter, self.top_k = e, two_i // 2, block.top_k
        self.router = torch.nn.Parameter(block.gate.weight.detach().clone())
        # [E * 2I, H]: expert e's gate rows, then its up rows
        self.gate_up = torch.nn.Parameter(block.experts.gate_up_proj.detach().reshape(e * two_i, h).clone())
        # [H, E * I]: expert e's down projection in columns [e I, (e + 1) I)
        self.down = torch.nn.Parameter(block.experts.down_proj.detach().permute(1, 0, 2).reshape(h, e * self.inter).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        x = x.reshape(-1, h)
        probs = F.softmax(F.linear(x, self.router), dim=-1)
        top, idx = torch.topk(probs, self.top_k, dim=-1)
        top = top / top.sum(dim=-1, keepdim=True)
        chosen = idx.unsqueeze(-1) == torch.arange(self.experts)  # [T, k, E]
        weights = (chosen.to(x.dtype) * top.unsqueeze(-1)).sum(dim=1)  # [T, E], zeros off the top k
        gu = F.linear(x, self.gate_up).reshape(-1, self.experts, 2, self.inter)
        act = F.silu(gu[:, :, 0]) * gu[:, :, 1] * weights.unsqueeze(-1)  # [T, E, I]
        return F.linear(act.reshape(-1, self.experts * self.inter), self.down).reshape(b, s, h)


def interleaved(engines: dict, repeat: int, min_seconds: float = 0.05) -> dict[str, float]:
    """Milliseconds per call of each engine: the median of ``repeat`` rounds, each round timing
    every engine in turn (ABAB...: load from other processes hits them alike) over enough calls
    to last ``min_seconds``."""
    inner = {}
    for name, call in engines.items():
        call()
        t0 = time.perf_counter()
        call()
        inner[name] = max(1, int(min_seconds / max(time.perf_counter() - t0, 1e-9)))
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(repeat):
        for name, call in engines.items():
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                call()
            times[name].append((time.perf_counter() - t0) / inner[name] * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--seq", type=int, nargs="+", default=[1, 128])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    block = moe_block(args.hidden, args.intermediate, args.experts, args.top_k)
    dense = DenseMoe(block).eval()
    weights_mb = sum(p.numel() for p in block.experts.parameters()) * 4 / 2**20
    print(f"MoE layer: hidden {args.hidden}, intermediate {args.intermediate}, {args.experts} experts, top-{args.top_k} "
          f"(expert weights {weights_mb:.0f} MiB); median of {args.repeat} (ms)")
    print("| seq | threads | routed (tg) | routed, BLAS (tg) | dense (tg) | PyTorch eager | dense / routed |")
    print("|----:|--------:|------------:|------------------:|-----------:|--------------:|---------------:|")
    for seq in args.seq:
        x = torch.randn(1, seq, args.hidden)
        routed_fn, dense_fn = tg.compile(block, (x,)), tg.compile(dense, (x,))
        blas_fn = tg.compile(block, (x,), pack_weights=False)
        with torch.no_grad():
            expected = block(x)
            assert (dense(x) - expected).abs().max().item() < 1e-4
        for fn in (routed_fn, blas_fn, dense_fn):
            assert (fn(x) - expected).abs().max().item() < 1e-4
        for threads in args.threads:
            tg.set_num_threads(threads)
            torch.set_num_threads(threads)
            engines = {"routed": lambda: routed_fn(x), "blas": lambda: blas_fn(x), "dense": lambda: dense_fn(x), "eager": lambda: block(x)}
            with torch.no_grad():
                times = interleaved(engines, args.repeat)
            print(f"| {seq:3d} | {threads:7d} | {times['routed']:11.2f} | {times['blas']:17.2f} | {times['dense']:10.2f} | {times['eager']:13.2f} "
                  f"| {times['dense'] / times['routed']:13.2f}x |")


if __name__ == "__main__":
    main()
