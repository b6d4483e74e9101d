"""`tg-bench`: every benchmark workload on every engine, written to BENCHMARKS.md and a PNG chart.

    tg-bench                      # the full suite at 1 and 2 threads (30+ minutes)
    tg-bench --quick              # tiny configurations: a smoke run of a few minutes
    tg-bench --only gpt2-prefill qwen3 --threads 1 --json

A thin wrapper: the suite lives in ``benchmarks/suite.py`` of a source checkout (beside the
scripts it reuses), not in the installed package. It is found through ``$TG_BENCHMARKS_DIR``,
else beside this package's source tree (an editable install or a checkout), else in
``./benchmarks``. Run ``tg-bench --help`` for the suite's options.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ENV = "TG_BENCHMARKS_DIR"


def find_suite() -> Path | None:
    """``benchmarks/suite.py`` of a source checkout, or None."""
    candidates = []
    if os.environ.get(ENV):
        candidates.append(Path(os.environ[ENV]))
    candidates.append(Path(__file__).resolve().parents[2] / "benchmarks")  # <repo>/tensor_graphs/tools/tg_bench.py
    candidates.append(Path.cwd() / "benchmarks")
    for d in candidates:
        if (d / "suite.py").is_file():
            return d / "suite.py"
    return None


def load_suite(path: Path):
    """Import ``benchmarks/suite.py`` (which puts its directory on ``sys.path`` for its siblings)."""
    spec = importlib.util.spec_from_file_location("tg_benchmarks_suite", path)
    suite = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = suite  # dataclasses look their module up there
    spec.loader.exec_module(suite)
    return suite


def main(argv: list[str] | None = None) -> int:
    path = find_suite()
    if path is None:
        print(
            "tg-bench: cannot find benchmarks/suite.py. The benchmarks are not part of the installed package: "
            "run tg-bench from a source checkout of tensor_graphs (pip install -e '.[bench]'), from the checkout's "
            f"root directory, or point ${ENV} at its benchmarks/ directory.",
            file=sys.stderr,
        )
        return 2
    try:
        suite = load_suite(path)
    except ImportError as e:
        print(f"tg-bench: {path}: {e} (the peers need the bench extra: pip install -e '.[bench]')", file=sys.stderr)
        return 2
    return suite.main(sys.argv[1:] if argv is None else argv, prog="tg-bench")


if __name__ == "__main__":
    sys.exit(main())
