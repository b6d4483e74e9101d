"""Where a compiled graph spends its time: per-kernel counters read back as a report.

A graph compiled with profiling (``tg.compile(..., profile=True)``, ``tg-run --profile``) adds
each kernel's nanoseconds and calls to an ``int64`` counter array (see `signature`);
`CompiledGraph.profile` zeroes it, runs the graph and builds a :class:`ProfileReport`::

    report = fn.profile(x, repeat=50)
    print(report)                    # kernels by time, then the time per kind of kernel
    report.kernels[0].label          # 'buf.matmul 128x768 @ 768x2304 (%qkv)': the slowest
    report.by_kind()["matmul"].share # the share of every matmul together

Shares are of the measured total (the sum over kernels), which covers the graph function from
its first kernel call to its last; ``wall_ns`` is the Python-side time of the same calls
(argument checks and output allocation included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KernelProfile:
    """One kernel of a profiled graph: ``index`` is its position in call order."""

    index: int
    label: str
    total_ns: int
    calls: int
    #: of the measured total (0..1)
    share: float

    @property
    def kind(self) -> str:
        """The kernel's op without its dialect: 'matmul', 'attention', 'rms_norm', ..."""
        return kernel_kind(self.label)

    @property
    def ns_per_call(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0


@dataclass(frozen=True)
class KindProfile:
    """Every kernel of one kind together."""

    kind: str
    total_ns: int
    #: kernels of this kind in the graph
    kernels: int
    share: float


def kernel_kind(label: str) -> str:
    """``'buf.matmul 4x8 @ 8x16'`` -> ``'matmul'``."""
    return label.split(" ", 1)[0].removeprefix("buf.")


@dataclass(frozen=True)
class ProfileReport:
    """Per-kernel time of ``runs`` calls of the graph ``entry``; ``kernels`` slowest first."""

    entry: str
    kernels: tuple[KernelProfile, ...]
    runs: int
    #: the sum over kernels
    measured_ns: int
    #: Python-side time of the ``runs`` calls
    wall_ns: int

    @staticmethod
    def from_counters(entry: str, labels: Sequence[str], counters: np.ndarray, runs: int, wall_ns: int) -> ProfileReport:
        """A report from the native counters (``[ns_0, calls_0, ns_1, calls_1, ...]``)."""
        pairs = np.asarray(counters, dtype=np.int64).reshape(len(labels), 2)
        measured = int(pairs[:, 0].sum())
        kernels = [
            KernelProfile(i, label, int(ns), int(calls), int(ns) / measured if measured else 0.0)
            for i, (label, (ns, calls)) in enumerate(zip(labels, pairs))
        ]
        kernels.sort(key=lambda k: (-k.total_ns, k.index))
        return ProfileReport(entry, tuple(kernels), runs, measured, wall_ns)

    def by_kind(self) -> dict[str, KindProfile]:
        """Time per kind of kernel (matmul, attention, ...), slowest first."""
        totals: dict[str, list[int]] = {}
        for k in self.kernels:
            t = totals.setdefault(k.kind, [0, 0])
            t[0] += k.total_ns
            t[1] += 1
        kinds = [
            KindProfile(kind, ns, n, ns / self.measured_ns if self.measured_ns else 0.0)
            for kind, (ns, n) in totals.items()
        ]
        kinds.sort(key=lambda k: -k.total_ns)
        return {k.kind: k for k in kinds}

    def format(self, top: int | None = 30) -> str:
        """The report as text: the ``top`` slowest kernels (all for None), then the kinds."""
        runs = max(self.runs, 1)
        covered = f" ({self.measured_ns / self.wall_ns:.1%} of wall)" if self.wall_ns else ""
        lines = [
            f"profile of @{self.entry}: {self.runs} run(s), {len(self.kernels)} kernels; per run "
            f"{self.measured_ns / runs / 1e3:.1f} us in kernels{covered}, {self.wall_ns / runs / 1e3:.1f} us wall",
            f"{'share':>7} {'us/run':>10} {'us/call':>10} {'calls':>7}  kernel",
        ]
        shown = self.kernels if top is None else self.kernels[:top]
        for k in shown:
            lines.append(
                f"{k.share:7.1%} {k.total_ns / runs / 1e3:10.1f} {k.ns_per_call / 1e3:10.1f} {k.calls:7d}  #{k.index} {k.label}"
            )
        if len(shown) < len(self.kernels):
            rest = self.kernels[len(shown):]
            ns = sum(k.total_ns for k in rest)
            share = ns / self.measured_ns if self.measured_ns else 0.0
            lines.append(f"{share:7.1%} {ns / runs / 1e3:10.1f} {'':>10} {'':>7}  ... {len(rest)} more kernels")
        lines += ["", f"{'share':>7} {'us/run':>10} {'kernels':>7}  kind"]
        for kind in self.by_kind().values():
            lines.append(f"{kind.share:7.1%} {kind.total_ns / runs / 1e3:10.1f} {kind.kernels:7d}  {kind.kind}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()
