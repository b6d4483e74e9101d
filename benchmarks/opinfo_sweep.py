"""Sweep PyTorch's OpInfo database through ``tg.compile``: which ops compile and match eager.

    .venv/bin/python benchmarks/opinfo_sweep.py --dtypes float32 --json /tmp/opinfo_f32.json \\
        --markdown /tmp/opinfo_f32.md
    .venv/bin/python benchmarks/opinfo_sweep.py --ops sin add nn.functional.gelu --samples 4

Every case (an OpInfo, a dtype it supports on the CPU, one of its first ``--samples`` samples)
runs in a forked child of its own (``tests/opinfo_harness.py``: what is compared, the tolerance
and the outcomes are in its docstring): ``torch.export``, ``tg.compile``, the call, the result
against eager and a float64 reference. Writes the JSON of every outcome (``--json``) and a
markdown report (``--markdown``): per dtype, the ops passing every exportable sample out of the
exportable ops and the count of each outcome, then per outcome kind (not pass, not export) the
most frequent messages (numbers folded to ``N``), and the ATen ops without a translation by the
OpInfo ops each blocks.

Time: a full float32 sweep (677 OpInfos, 1,313 cases at ``--samples 2``) took 14.4 and 17.5
minutes (863 s, 1,048 s) with ``--jobs 1`` on a 2-vCPU Zen 3 machine that was running other work
too: 0.65-0.8 s a case (the fork, rebuilding the sample, eager twice and in float64,
``torch.export``, the compile, the call), plus ~25 s to enumerate the samples and ~10 s of
imports. ``--jobs 2`` runs two children at a time (no more on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import opinfo_harness as harness  # noqa: E402  (sets TG_CACHE and OPENBLAS_NUM_THREADS first)
import tqdm  # noqa: E402

UNTRANSLATED = "no tensor_graphs translation for this ATen op yet"


def _fold(message: str) -> str:
    """A message with its numbers (sizes, counts, line numbers) folded to ``N``: one key for one
    kind of error."""
    return re.sub(r"(?<![A-Za-z_0-9.])-?\d+(\.\d+)?(e[-+]?\d+)?", "N", message or "")


def _message_key(o: dict) -> str:
    if o.get("outcome") == "wrong":
        return _fold(o.get("detail") or "")
    text = f"{o.get('exc_type') or ''}: {o.get('message') or ''}"
    if o.get("outcome") == "internal" and o.get("location"):
        text += f" [{o['location']}]"
    return _fold(text)


def blocking_ops(outcomes: list[dict]) -> dict[str, dict[str, list[str]]]:
    """Per dtype: ATen op without a translation -> the OpInfo ops (names) it blocks."""
    table: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for o in outcomes:
        for u in o.get("unsupported") or ():
            if u.get("problem") == UNTRANSLATED:
                table[o["dtype"]][u["target"]].add(o["op"])
    return {d: {t: sorted(ops) for t, ops in targets.items()} for d, targets in table.items()}


def markdown(outcomes: list[dict], wall_s: float, argv: list[str], top: int = 30) -> str:
    summary = harness.summarize(outcomes)
    kinds = [k for k in harness.OUTCOMES if any(s["counts"].get(k) for s in summary.values())]
    lines = ["# OpInfo sweep through tg.compile", "",
             f"`{' '.join(['benchmarks/opinfo_sweep.py', *argv])}`: {len(outcomes)} cases in {wall_s / 60:.1f} min.",
             "Ops passing: every exportable sample passed. `export` cases (torch.export or eager itself "
             "fails) are left out of the denominators.", "",
             "| dtype | ops passing / exportable | % | ops | cases | " + " | ".join(kinds) + " |",
             "|---|---|---|---|---|" + "---|" * len(kinds)]
    for dtype, s in summary.items():
        pct = 100 * s["passing_ops"] / s["exportable_ops"] if s["exportable_ops"] else 0.0
        counts = " | ".join(str(s["counts"].get(k, 0)) for k in kinds)
        lines.append(f"| {dtype} | {s['passing_ops']} / {s['exportable_ops']} | {pct:.1f} | {s['ops']} | {s['cases']} | {counts} |")
    lines += ["", "## Most frequent messages", ""]
    for kind in ("refused", "internal", "wrong", "crash", "timeout", "harness"):
        chosen = [o for o in outcomes if o["outcome"] == kind]
        if not chosen:
            continue
        counts = Counter(_message_key(o) for o in chosen)
        ops = defaultdict(set)
        for o in chosen:
            ops[_message_key(o)].add(o["op"])
        lines += [f"### {kind} ({len(chosen)} cases, {len({o['op'] for o in chosen})} ops)", "",
                  "| cases | ops | message | e.g. |", "|---|---|---|---|"]
        for msg, n in counts.most_common(top):
            example = ", ".join(sorted(ops[msg])[:3])
            lines.append(f"| {n} | {len(ops[msg])} | {msg.replace('|', '/')[:300]} | {example} |")
        lines.append("")
    blocked = blocking_ops(outcomes)
    for dtype, targets in blocked.items():
        lines += [f"## ATen ops without a translation ({dtype}): OpInfo ops each blocks", "",
                  "| ATen op | OpInfo ops | which |", "|---|---|---|"]
        for target, names in sorted(targets.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            lines.append(f"| {target} | {len(names)} | {shown} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", nargs="+", default=["float32"],
                   help="float32 float16 bfloat16 float64 int64 bool ... (default float32)")
    p.add_argument("--samples", type=int, default=2, help="samples per OpInfo and dtype (default 2)")
    p.add_argument("--ops", nargs="+", default=None, help="only these OpInfos (name, or name.variant)")
    p.add_argument("--slice", nargs=2, type=int, metavar=("F32_STRIDE", "OTHER_STRIDE"),
                   help="only the first sample of every F32_STRIDE-th OpInfo at float32 and of every "
                        "OTHER_STRIDE-th at each other dtype (tests/test_opinfo.py's share)")
    p.add_argument("--json", help="write every outcome here")
    p.add_argument("--markdown", help="write the report here")
    p.add_argument("--jobs", type=int, default=1, help="children at a time (at most 2 on a 2-core machine)")
    p.add_argument("--timeout", type=int, default=60, help="seconds per case (default 60)")
    args = p.parse_args(argv)

    tqdm.tqdm.monitor_interval = 0  # no monitor thread: the process forks
    t0 = time.perf_counter()
    threads = harness.warm()
    if threads != ["MainThread"]:
        print(f"warning: threads alive before forking: {threads}", file=sys.stderr)
    skipped: list = []
    if args.slice:
        todo = harness.slice_cases(args.dtypes, *args.slice)
    else:
        todo = harness.cases(args.dtypes, args.samples, args.ops, skipped=skipped)
    for name, dtype, err in skipped:
        print(f"skipped {name} ({dtype}): its samples fail: {err}", file=sys.stderr)
    print(f"{len(todo)} cases ({len({(c.name, c.dtype) for c in todo})} OpInfo x dtype), "
          f"set up in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    outcomes = []
    bar = tqdm.tqdm(total=len(todo), unit="case", dynamic_ncols=True)
    try:
        for o in harness.run_cases(todo, args.timeout, args.jobs,
                                   on_start=lambda c: bar.set_postfix_str(f"{c.name} {c.dtype} #{c.index}", refresh=False)):
            outcomes.append(o)
            bar.update(1)
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    order = {c.id: i for i, c in enumerate(todo)}
    outcomes.sort(key=lambda o: order.get(f"{o['op']}-{o['dtype']}-{o['sample']}", 0))

    summary = harness.summarize(outcomes)
    for dtype, s in summary.items():
        counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items() if v)
        print(f"{dtype}: {s['passing_ops']} / {s['exportable_ops']} exportable ops pass every sample "
              f"({s['ops']} ops, {s['cases']} cases: {counts})")
    print(f"wall time {wall:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": argv, "wall_s": round(wall, 1), "summary": summary, "skipped": skipped,
                       "outcomes": outcomes}, f, indent=1, default=str)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(outcomes, wall, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
