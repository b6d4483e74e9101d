"""tg-bench's tensor_graphs rows at two revisions of tensor_graphs, measured in turn (A B A B ...).

    git worktree add /tmp/base <commit>
    .venv/bin/python benchmarks/compare_revisions.py /tmp/base [--rounds 2] [--threads 1]
                     [--only mlp encoder ...] [--engine tg-lowp] [--out /tmp/ab]

Each round runs ``benchmarks/suite.py --engines ENGINE eager --json`` (ENGINE: ``tensor_graphs``,
or another of tensor_graphs' engines: ``tg-tuned``, ``tg-lowp``, whose tuned paths come from the
one tuning database both revisions read) once with the base
checkout first on ``PYTHONPATH`` and once with this checkout (the suite script itself is this
checkout's in both, so the workloads and the measuring are the same). PyTorch eager runs in every
row of every run: the same code in both, so ``tensor_graphs / eager`` per row cancels most of the
machine's drift between runs. Printed per row: the engine's median over the rounds at each
revision, the ratio new / base of the raw medians, and the ratio of the per-run ``tg / eager``
ratios (the figure to believe on a shared machine; below 1: the new revision is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run_suite(checkout: Path, out: Path, args: argparse.Namespace) -> list[dict]:
    """One suite run with ``checkout``'s tensor_graphs; its JSON results."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, str(HERE / "suite.py"), "--threads", args.threads, "--engines", args.engine, "eager",
           "--json", str(out), "--out", str(out.with_suffix(".md")), "--chart", ""]
    if args.only:
        cmd += ["--only", *args.only]
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=checkout)
    with open(out) as f:
        return json.load(f)["results"]


def key(row: dict) -> tuple:
    return row["model"], row["what"], row["threads"], row["unit"]


def seconds(row: dict, engine: str) -> float:
    v = row["values"][engine]
    return v / 1e3 if row["unit"] == "ms" else 1.0 / v


def table(runs: dict[str, list[list[dict]]], engine: str = "tensor_graphs") -> str:
    """Markdown: per row, ``engine``'s median at each revision and the two new/base ratios."""
    rows: dict[tuple, dict[str, list[dict]]] = {}
    for rev, rounds in runs.items():
        for results in rounds:
            for r in results:
                if engine in r["values"] and "eager" in r["values"]:
                    rows.setdefault(key(r), {}).setdefault(rev, []).append(r)
    lines = ["| model | row | threads | base | new | new / base | (new / eager) / (base / eager) |",
             "|---|---|--:|--:|--:|--:|--:|"]
    for (model, what, threads, unit), by_rev in rows.items():
        if set(by_rev) != {"base", "new"}:
            continue
        med = {rev: statistics.median(seconds(r, engine) for r in rs) for rev, rs in by_rev.items()}
        rel = {rev: statistics.median(seconds(r, engine) / seconds(r, "eager") for r in rs)
               for rev, rs in by_rev.items()}
        show = {rev: (f"{med[rev] * 1e3:.3f} ms" if unit == "ms" else f"{1 / med[rev]:.1f} tok/s") for rev in med}
        lines.append(f"| {model} | {what} | {threads} | {show['base']} | {show['new']} | "
                     f"{med['new'] / med['base']:.3f} | {rel['new'] / rel['base']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base", type=Path, help="a checkout of the base revision (git worktree add)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", default="1")
    p.add_argument("--only", nargs="+", default=None)
    p.add_argument("--engine", default="tensor_graphs", help="tensor_graphs' engine compared (default tensor_graphs)")
    p.add_argument("--out", type=Path, default=Path("/tmp/compare_revisions"))
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[list[dict]]] = {"base": [], "new": []}
    for i in range(args.rounds):
        for rev, checkout in (("base", args.base.resolve()), ("new", ROOT)):
            started = time.time()
            runs[rev].append(run_suite(checkout, args.out / f"{rev}{i}.json", args))
            print(f"round {i + 1}/{args.rounds}, {rev}: {time.time() - started:.0f} s", flush=True)
    text = table(runs, args.engine)
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
