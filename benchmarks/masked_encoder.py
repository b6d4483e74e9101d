"""What a run-time padding mask costs: BERT (base width) at seq 128 with and without an attention_mask.

    .venv/bin/python benchmarks/masked_encoder.py [--layers 4] [--seq 128] [--pad 28] [--threads 1 2] [--rounds 15]

Two graphs of the same ``transformers.BertModel`` (hidden 768, 12 heads, FFN 3072, ``--layers``
layers, random weights): ``ids -> last_hidden_state`` (no mask: the graph has none) and
``(ids, mask) -> last_hidden_state`` with the last ``--pad`` positions padding (the mask
computed at run time into the additive mask that `tg.attention` takes). Rounds time the two in
turn (one untimed call first, then one timed call each, alternating); the report is the median
of each and their ratio, per thread count, with PyTorch eager's masked time beside them. The
issue's target: the masked graph within 5% of the unmasked one.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tensor_graphs as tg
from tensor_graphs.target import cpu_model


class Hidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


class Unmasked(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids).last_hidden_state



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--pad", type=int, default=28)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=args.layers, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    bert = transformers.BertModel(config).eval()
    ids = torch.randint(1000, config.vocab_size, (1, args.seq), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, args.seq, dtype=torch.long)
    mask[0, args.seq - args.pad :] = 0
    masked_model, plain_model = Hidden(bert).eval(), Unmasked(bert).eval()
    masked = tg.compile(masked_model, (ids, mask))
    plain = tg.compile(plain_model, (ids,))
    with torch.no_grad():
        ref = masked_model(ids, mask)
    err = (masked(ids, mask) - ref).abs().max().item()
    print(f"# {cpu_model()}; BertModel {args.layers} layers, hidden 768, seq {args.seq}, {args.pad} padded; "
          f"masked graph vs PyTorch: max abs diff {err:.2e}")
    print("| threads | unmasked ms | masked ms | masked / unmasked | PyTorch eager masked ms |")
    print("|--:|--:|--:|--:|--:|")
    for threads in args.threads:
        tg.set_num_threads(threads)
        torch.set_num_threads(threads)
        calls = {"unmasked": lambda: plain(ids), "masked": lambda: masked(ids, mask),
                 "eager": lambda: masked_model(ids, mask)}
        times: dict[str, list[float]] = {k: [] for k in calls}
        with torch.no_grad():
            for fn in calls.values():
                fn()
            for _ in range(args.rounds):
                for name, fn in calls.items():
                    fn()  # untimed: wakes the engine's threads after the others ran
                    t = time.perf_counter()
                    fn()
                    times[name].append((time.perf_counter() - t) * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {threads} | {med['unmasked']:.2f} | {med['masked']:.2f} | {med['masked'] / med['unmasked']:.3f} | {med['eager']:.2f} |")


if __name__ == "__main__":
    main()
