"""PyTorch's OpInfo database through ``tg.compile``: a fixed share of the cases, every run.

The whole corpus (every OpInfo, its first 2 samples, at float32, float16, bfloat16, float64,
int64 and bool) takes about an hour on 2 cores; it runs as a script
(``benchmarks/opinfo_sweep.py``, the table in docs/ops-and-dtypes.md). This file runs a fixed slice of it in
``make test``: the first sample of every ``F32_STRIDE``-th OpInfo (in ``op_db``'s order) at
float32, and of every ``OTHER_STRIDE``-th at each other dtype (each dtype starting at its own
offset, so the dtypes do not all take the same ops: ``opinfo_harness.slice_cases``), each case
in a forked child
(``tests/opinfo_harness.py``: what is compared and at which tolerance is in its docstring;
float16/bfloat16 results are judged against a float64 run of the op: at most twice eager's
error plus the dtype's atol).

Every case must end as ``pass``, a clear refusal (``refused``: ``UnsupportedOpsError`` or a
``TypeError``/``ValueError`` that tensor_graphs raises on purpose, naming what it refuses) or
``export`` (torch.export itself, or eager, fails on the sample). A ``wrong`` answer, an
``internal`` error (``KeyError``, ``IndexError``, ``NoneType`` ...), a ``crash`` or a
``timeout`` fails, unless the case is in `KNOWN_FAILURES` with the outcome it has today (a
known failure that is fixed fails too, so the list only shrinks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import expecttest  # noqa: F401  (op_db imports it; the test extra installs it: never skipped)
import pytest

ROOT = Path(__file__).resolve().parent.parent
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "bool")
F32_STRIDE = 16
OTHER_STRIDE = 44
#: outcomes a case may end with
ACCEPTED = ("pass", "refused", "export")

#: case id (``op-dtype-sample``) -> the outcome it has today, and why
KNOWN_FAILURES: dict[str, tuple[str, str]] = {}

#: per dtype, the least share of the slice's exportable cases that must pass, one case under what
#: passed when last raised (2026-11-27, the session's full sweeps at the slice's cases: float32
#: 29/34, float16 6/7, bfloat16 9/10, float64 11/15, int64 8/11, bool 4/5); raise it as ops land
MIN_PASS_RATE: dict[str, float] = {"float32": 0.8, "float16": 0.8, "bfloat16": 0.8, "float64": 0.65,
                                    "int64": 0.6, "bool": 0.6}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """The slice, run by the sweep script in a process of its own (its children are forked from a
    process that has run nothing else: no thread pools of earlier tests to fork)."""
    out = tmp_path_factory.mktemp("opinfo") / "slice.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "opinfo_sweep.py"), "--dtypes", *DTYPES,
           "--slice", str(F32_STRIDE), str(OTHER_STRIDE), "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200,
                          env=dict(os.environ, TQDM_DISABLE="1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(out.read_text())["outcomes"]
    return {f"{o['op']}-{o['dtype']}-{o['sample']}": o for o in got}


def _describe(o: dict) -> str:
    text = f"{o['op']} {o['dtype']} #{o['sample']}: {o['outcome']}"
    for key in ("exc_type", "message", "location", "detail"):
        if o.get(key):
            text += f"; {key}: {o[key]}"
    return text


def test_no_wrong_answer_crash_or_internal_error(outcomes):
    bad = [_describe(o) for cid, o in outcomes.items()
           if o["outcome"] not in ACCEPTED and KNOWN_FAILURES.get(cid, ("",))[0] != o["outcome"]]
    assert not bad, f"{len(bad)} of {len(outcomes)} OpInfo cases failed:\n" + "\n".join(bad)


def test_known_failures_are_still_failing(outcomes):
    """A known failure that now passes or is refused cleanly: take it off `KNOWN_FAILURES`."""
    fixed = [f"{cid}: now {outcomes[cid]['outcome']}" for cid, (kind, _) in KNOWN_FAILURES.items()
             if cid in outcomes and outcomes[cid]["outcome"] != kind]
    assert not fixed, "fixed, take them off KNOWN_FAILURES:\n" + "\n".join(fixed)


def test_pass_rate_holds(outcomes):
    """Per dtype, the share of the slice's exportable cases that pass stays at least
    `MIN_PASS_RATE`: a refusal where there was a pass is a regression too."""
    by_dtype: dict[str, list[str]] = {}
    for o in outcomes.values():
        if o["outcome"] != "export":
            by_dtype.setdefault(o["dtype"], []).append(o["outcome"])
    assert set(by_dtype) == set(DTYPES)
    low = {d: f"{got.count('pass')}/{len(got)}" for d, got in by_dtype.items()
           if got.count("pass") < MIN_PASS_RATE.get(d, 0.0) * len(got)}
    assert not low, f"pass rates below MIN_PASS_RATE {MIN_PASS_RATE}: {low}"
