"""The timing database: time AND error of every kernel path measured on a machine (SQLite).

A record says how one kernel path ran on one machine::

    kernel signature   op, variant, parameters, shapes, dtypes     (`KernelSignature`, canonical JSON)
    machine            CPU model, ISA features, threads,           (`Machine`, canonical JSON)
                       tensor_graphs and library versions
    measurement        median / p20 / p80 ns, runs, max abs and max relative error against the
                       float64 reference, when it was measured    (`Record`)

Records are keyed by (signature, machine): measuring again replaces the record, and a lookup
for this machine never returns another machine's (a different CPU, thread count or library
version is another machine). The file is SQLite from the standard library in WAL mode, so that
several processes (parallel tuning jobs, a test suite in shards) read and write it at once; a
writer waits up to `BUSY_TIMEOUT_S` for another's transaction. ``PRAGMA user_version`` holds the
`SCHEMA_VERSION`; a file written by a newer tensor_graphs is refused, not guessed at.

The default file is ``$XDG_CACHE_HOME/tensor_graphs/tuning.sqlite`` (``~/.cache/...``);
``TG_TUNING_DB`` moves it. docs/tuning.md ("Tuning database") says how the schema maps onto a shared
server database for a fleet.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Version of the tables below (``PRAGMA user_version``); bump it with a migration in `_migrate`.
SCHEMA_VERSION = 1
#: How long a writer waits for another process's transaction before failing (seconds).
BUSY_TIMEOUT_S = 30.0
#: Environment variable naming the database file.
ENV = "TG_TUNING_DB"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    signature   TEXT NOT NULL,      -- KernelSignature.key(): canonical JSON
    machine     TEXT NOT NULL,      -- Machine.key(): canonical JSON
    op          TEXT NOT NULL,      -- copies of signature fields, for queries and explain
    variant     TEXT NOT NULL,
    median_ns   REAL NOT NULL,
    p20_ns      REAL NOT NULL,
    p80_ns      REAL NOT NULL,
    runs        INTEGER NOT NULL,
    max_abs_err REAL NOT NULL,
    max_rel_err REAL NOT NULL,
    measured_at REAL NOT NULL,      -- seconds since the epoch (UTC)
    PRIMARY KEY (signature, machine)
);
CREATE INDEX IF NOT EXISTS records_by_machine_op ON records (machine, op);
"""


def _canonical(value: object) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class KernelSignature:
    """One kernel path at its shapes: the op (``"matmul"``), the variant that runs it
    (``"matmul.packed"``), its parameters (``{"mr": 6, "nr": 16, "k_block": 256}``), the
    operands' shapes and dtypes."""

    op: str
    variant: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    params: Mapping[str, object] = field(default_factory=dict)
    #: what else the kernel's code depends on (its properties, a fused body): a digest of the
    #: op alone as a module (`tuning.measure.standalone`); empty when shapes say it all
    form: str = ""

    def key(self) -> str:
        fields = {"op": self.op, "variant": self.variant, "params": dict(self.params),
                  "shapes": [list(s) for s in self.shapes], "dtypes": list(self.dtypes)}
        if self.form:
            fields["form"] = self.form
        return _canonical(fields)


@dataclass(frozen=True)
class Machine:
    """What makes timings comparable: the CPU (model and ISA features), the thread count, and
    the versions of tensor_graphs and the libraries that generate or run its code."""

    cpu: str
    features: tuple[str, ...]
    threads: int
    versions: Mapping[str, str]

    def key(self) -> str:
        return _canonical({"cpu": self.cpu, "features": sorted(self.features), "threads": self.threads,
                           "versions": dict(self.versions)})

    @staticmethod
    def this(threads: int | None = None) -> Machine:
        """This machine at ``threads`` threads (default: the graph thread count now)."""
        import llvmlite
        import numpy
        import xdsl

        import tensor_graphs
        from tensor_graphs.runtime_support.threads import get_num_threads
        from tensor_graphs.target import Target, cpu_model

        host = Target.host()
        features = tuple(sorted(f[1:] for f in host.host_features.split(",") if f.startswith("+")))
        versions = {name: str(getattr(module, "__version__", "unknown"))
                    for name, module in (("tensor_graphs", tensor_graphs), ("llvmlite", llvmlite), ("numpy", numpy), ("xdsl", xdsl))}
        return Machine(f"{cpu_model()} ({host.llvm_cpu})", features, threads or get_num_threads(), versions)

    @staticmethod
    def gpu(device: str) -> Machine:
        """The GPU a ``device="cuda"`` graph runs on (`runtime_support.triton_graph.device_for`):
        its name and compute capability, with the versions of Triton and torch (cuBLAS) and a
        digest of the Triton lowering's sources (a kernel or a default emitted otherwise makes
        the old records another machine's); under Triton's interpreter, the interpreter on this
        CPU (its records never mix with a GPU's)."""
        import torch
        import triton

        import tensor_graphs
        from tensor_graphs.target import cpu_model

        versions = {"tensor_graphs": str(tensor_graphs.__version__), "triton": str(triton.__version__), "torch": str(torch.__version__),
                    "kernels": _triton_codegen_digest()}
        if device == "cpu":  # the interpreter
            return Machine(f"Triton interpreter on {cpu_model()}", (), 1, versions)
        index = torch.device(device).index
        index = torch.cuda.current_device() if index is None else index
        major, minor = torch.cuda.get_device_capability(index)
        return Machine(f"{torch.cuda.get_device_name(index)} (cuda, sm_{major}{minor})", (), 1, versions)


@dataclass(frozen=True)
class Record:
    """One measurement of a kernel path on a machine."""

    signature: KernelSignature
    machine: Machine
    median_ns: float
    p20_ns: float
    p80_ns: float
    runs: int
    max_abs_err: float
    max_rel_err: float
    measured_at: float = field(default_factory=time.time)

    @staticmethod
    def of_times(signature: KernelSignature, machine: Machine, times_ns: Sequence[float], max_abs_err: float,
                 max_rel_err: float) -> Record:
        """A record from the raw run times (their median, 20th and 80th percentiles)."""
        import numpy as np

        if not times_ns:
            raise ValueError("a record needs at least one timed run")
        t = np.asarray(times_ns, np.float64)
        return Record(signature, machine, float(np.median(t)), float(np.percentile(t, 20)), float(np.percentile(t, 80)),
                      len(t), float(max_abs_err), float(max_rel_err))


def default_path() -> Path:
    """``$TG_TUNING_DB``, else ``$XDG_CACHE_HOME/tensor_graphs/tuning.sqlite`` (``~/.cache``)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "tensor_graphs" / "tuning.sqlite"


class TuningDatabaseError(RuntimeError):
    """The database file cannot be used (a newer schema, not a database, ...)."""


class TuningDatabase:
    """The records of one database file (`default_path` unless given); see the module doc."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else default_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TuningDatabaseError(f"tuning database {self.path}: cannot make its directory {self.path.parent} "
                                      f"({e.strerror or e}{': a file is in the way' if isinstance(e, FileExistsError | NotADirectoryError) else ''}); "
                                      f"set {ENV} to a file in a directory you can write") from None
        try:
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise TuningDatabaseError(f"tuning database {self.path}: {e}") from None

    def _migrate(self) -> None:
        with self._transaction():
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise TuningDatabaseError(
                    f"tuning database {self.path} has schema version {version}, newer than this tensor_graphs' "
                    f"{SCHEMA_VERSION}: upgrade tensor_graphs, or point {ENV} at another file"
                )
            if version == 0:  # a new file (later versions migrate here, step by step)
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _transaction(self):
        conn = self._conn

        class _Tx:
            def __enter__(self):
                conn.execute("BEGIN IMMEDIATE")  # take the write lock now: no upgrade deadlock

            def __exit__(self, exc_type, exc, tb):
                conn.execute("ROLLBACK" if exc_type else "COMMIT")

        return _Tx()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> TuningDatabase:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def put(self, *records: Record) -> None:
        """Store ``records`` (one transaction), replacing earlier measurements of the same
        signature on the same machine."""
        rows = [(r.signature.key(), r.machine.key(), r.signature.op, r.signature.variant, r.median_ns, r.p20_ns,
                 r.p80_ns, r.runs, r.max_abs_err, r.max_rel_err, r.measured_at) for r in records]
        with self._transaction():
            self._conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def get(self, signature: KernelSignature, machine: Machine) -> Record | None:
        """The record of ``signature`` on ``machine``, or None (never another machine's)."""
        row = self._conn.execute(
            "SELECT median_ns, p20_ns, p80_ns, runs, max_abs_err, max_rel_err, measured_at FROM records "
            "WHERE signature = ? AND machine = ?", (signature.key(), machine.key())).fetchone()
        return Record(signature, machine, *row) if row is not None else None

    def records(self, machine: Machine, op: str | None = None) -> Iterator[Record]:
        """Every record of ``machine`` (of ``op`` only, when given)."""
        query = "SELECT signature, median_ns, p20_ns, p80_ns, runs, max_abs_err, max_rel_err, measured_at FROM records WHERE machine = ?"
        args: tuple = (machine.key(),)
        if op is not None:
            query += " AND op = ?"
            args += (op,)
        for sig, *values in self._conn.execute(query, args):
            s = json.loads(sig)
            signature = KernelSignature(s["op"], s["variant"], tuple(tuple(x) for x in s["shapes"]), tuple(s["dtypes"]),
                                        s["params"], s.get("form", ""))
            yield Record(signature, machine, *values)

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]


def _triton_codegen_digest() -> str:
    """A digest of the Triton lowering's sources (`tensor_graphs/codegen/triton/*.py`) and of the
    runtime that binds and runs its plans (library calls, weight copies)."""
    import hashlib
    from pathlib import Path

    import tensor_graphs

    root = Path(tensor_graphs.__file__).parent
    digest = hashlib.sha256()
    for path in [*sorted((root / "codegen" / "triton").glob("*.py")), root / "runtime_support" / "triton_graph.py"]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]
