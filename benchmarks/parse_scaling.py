"""Parsing time against module size (issue 29): `diagnostics.parse_module` on tg-level modules of
growing size, each a chain of elementwise ops over one weight. Linear parsing takes about the
same time per megabyte at every size; the quadratic location lookup it replaced took 5.2 s for
1 MB and 71 s for 5 MB.

    .venv/bin/python benchmarks/parse_scaling.py                 # 1, 2, 5, 10 MB
    .venv/bin/python benchmarks/parse_scaling.py --sizes 1 50    # the issue's comparison: 50 MB vs 1 MB
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from tensor_graphs.diagnostics import parse_module

OP = "    %v{i} = tg.add %v{p}, %w : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>\n"


def module_text(megabytes: float) -> str:
    """A tg-level module of about ``megabytes`` MB: a weight and a chain of adds."""
    head = 'builtin.module {\n  func.func @forward(%v0: tensor<4x8xf32>) -> tensor<4x8xf32> {\n    %w = tg.weight "w" : tensor<4x8xf32>\n'
    ops, size, i = [], len(head), 0
    while size < megabytes * 1e6:
        i += 1
        line = OP.format(i=i, p=i - 1)
        ops.append(line)
        size += len(line)
    return head + "".join(ops) + f"    func.return %v{i} : tensor<4x8xf32>\n  }}\n}}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 5, 10], help="module sizes in MB")
    ap.add_argument("--repeat", type=int, default=3, help="parses per size (the median is reported)")
    args = ap.parse_args(argv)
    print(f"parse time by module size; {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print("| MB | ops | median s | s per MB |\n|--:|--:|--:|--:|")
    for mb in args.sizes:
        text = module_text(mb)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            parse_module(text, "scaling.mlir")
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        print(f"| {len(text) / 1e6:.1f} | {text.count('tg.add')} | {t:.2f} | {t / (len(text) / 1e6):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
