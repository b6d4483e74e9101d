"""Demo: compile an MLP and a small graph, show the IR at every level, check and time them.

Run with `make demo`.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

import tensor_graphs as tg

torch.manual_seed(0)


class SmallGraph(torch.nn.Module):
    """Transposes, a scalar scale, a bias and a ReLU around two matmuls."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 16))
        self.b = torch.nn.Parameter(torch.randn(16))

    def forward(self, x):
        h = torch.relu((x @ self.w) * 0.5 + self.b)
        return h.t().reshape(4, -1)


def median_us(fn, *args, repeat: int = 200) -> float:
    for _ in range(10):
        fn(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def show(title: str, model: torch.nn.Module, x: torch.Tensor, max_lines: int | None = None) -> None:
    print("=" * 100)
    print(title)
    print("=" * 100)
    stats = tg.CompileStats()
    fn = tg.compile(model, (x,), stats=stats)
    for level in ("aten", "tg", "buf", "llvm"):
        text = fn.ir(level).rstrip().splitlines()
        shown = text if max_lines is None else text[:max_lines]
        print(f"\n--- IR at level '{level}' ({len(text)} lines) ---")
        print("\n".join(shown))
        if len(shown) < len(text):
            print(f"... ({len(text) - len(shown)} more lines)")
    with torch.no_grad():
        expected = model(x).numpy()
    got = fn(x.numpy())
    err = float(np.max(np.abs(got - expected)))
    ok = np.allclose(got, expected, rtol=1e-4, atol=1e-5)
    print(f"\ncheck against PyTorch: max |diff| = {err:.3g} -> {'OK' if ok else 'MISMATCH'} (rtol 1e-4, atol 1e-5)")
    print(f"compile time: {stats.total:.3f} s; memory: {fn.memory}")
    with torch.no_grad():
        eager = median_us(model, x)
    ours = median_us(fn, x.numpy())
    print(f"time per call: tensor_graphs {ours:.1f} us, PyTorch eager {eager:.1f} us ({eager / ours:.2f}x)")
    if not ok:
        raise SystemExit(1)


def main() -> None:
    torch.set_num_threads(1)
    tg.set_num_threads(1)
    show("A small graph: x @ W * 0.5 + b -> relu -> t -> reshape", SmallGraph().eval(), torch.randn(4, 8))
    mlp = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)
    ).eval()
    show("MLP 256 -> 1024 -> 1024 -> 256, batch 1", mlp, torch.randn(1, 256), max_lines=60)


if __name__ == "__main__":
    main()
