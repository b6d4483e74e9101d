"""Run the test suite on every core: one pytest per shard of whole test files, at once; then the
tests marked ``serial`` (a compile-time budget, timing guards) alone. ``make pytest`` runs this.

    python tests/run_sharded.py [--shards N] [--record] [pytest args...]

Shards are balanced by the seconds each file took when last measured (``tests/durations.json``;
``--record`` rewrites it from this run). Each shard's output is printed whole when it ends, so
the report stays readable; the exit status is the first failure's (pytest's 5, "no tests
collected", counts as success for the serial phase). The shards' libgomp threads wait passively
(``OMP_WAIT_POLICY=passive``): two processes' worker threads spinning on two cores would steal
each other's time. Every numerics test still runs its kernels on the threads it would alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=os.cpu_count() or 1, help="pytest processes at once (default: the CPUs)")
    ap.add_argument("--record", action="store_true", help="rewrite tests/durations.json from this run")
    args, rest = ap.parse_known_args(argv)
    shards = max(1, args.shards)
    started = time.perf_counter()
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE), *rest]
    tmp = Path(tempfile.mkdtemp(prefix="tg-shards-"))
    procs = []
    for i in range(shards):
        env = dict(os.environ, TG_SHARD=f"{i}/{shards}", TG_RECORD_DURATIONS=str(tmp / f"durations{i}.json"))
        env.setdefault("OMP_WAIT_POLICY", "passive")
        log = open(tmp / f"shard{i}.log", "w")
        procs.append((i, subprocess.Popen([*base, "-m", "not serial"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    print(f"run_sharded: {shards} shard(s) of tests/ at once (logs in {tmp})", flush=True)
    status = 0
    for i, proc, log in procs:
        code = proc.wait()
        log.close()
        print(f"\n===== shard {i + 1}/{shards}: exit {code} =====", flush=True)
        print((tmp / f"shard{i}.log").read_text(), end="", flush=True)
        status = status or code
    print(f"\n===== serial tests (alone) =====", flush=True)
    env = dict(os.environ, TG_RECORD_DURATIONS=str(tmp / "durations-serial.json"))
    code = subprocess.call([*base, "-m", "serial"], cwd=ROOT, env=env)
    status = status or (0 if code == 5 else code)
    measured: dict[str, float] = {}
    for path in tmp.glob("durations*.json"):
        for f, s in json.loads(path.read_text()).items():
            measured[f] = measured.get(f, 0.0) + s
    if args.record and measured:
        (HERE / "durations.json").write_text(json.dumps(dict(sorted(measured.items())), indent=1) + "\n")
    print(f"\nrun_sharded: {time.perf_counter() - started:.0f} s wall, {sum(measured.values()):.0f} s of tests, exit {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
