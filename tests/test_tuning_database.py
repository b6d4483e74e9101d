"""The timing database (`tensor_graphs.tuning.database`): records keyed by kernel signature and
machine, WAL mode with several processes writing at once, the schema version guarded."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pytest

from tensor_graphs.tuning.database import (
    ENV,
    SCHEMA_VERSION,
    KernelSignature,
    Machine,
    Record,
    TuningDatabase,
    TuningDatabaseError,
    default_path,
)

SIG = KernelSignature("matmul", "matmul.packed", ((128, 768), (768, 2304)), ("f32", "f32"), {"nr": 16, "k_block": 256})
HERE = Machine("AMD EPYC (znver1)", ("avx2", "fma"), 2, {"tensor_graphs": "0.1.0", "llvmlite": "0.46"})


def _record(sig: KernelSignature = SIG, machine: Machine = HERE, median: float = 1000.0, err: float = 1e-7) -> Record:
    return Record(sig, machine, median, median * 0.9, median * 1.1, 15, err, err * 10)


def test_put_get_replace_and_list(tmp_path):
    with TuningDatabase(tmp_path / "t.sqlite") as db:
        assert db.get(SIG, HERE) is None
        db.put(_record())
        got = db.get(SIG, HERE)
        assert got is not None and got.median_ns == 1000.0 and got.runs == 15 and got.max_rel_err == pytest.approx(1e-6)
        db.put(_record(median=800.0))  # measured again: replaces
        assert db.get(SIG, HERE).median_ns == 800.0 and len(db) == 1
        other = KernelSignature("matmul", "matmul.blas", SIG.shapes, SIG.dtypes)
        db.put(_record(other, median=900.0), _record(KernelSignature("softmax", "softmax.loop", ((4, 8),), ("f32",))))
        assert {r.signature.variant for r in db.records(HERE, op="matmul")} == {"matmul.packed", "matmul.blas"}
        assert len(list(db.records(HERE))) == 3
        # the signature survives the round trip exactly
        assert next(r for r in db.records(HERE) if r.signature.variant == "matmul.packed").signature.key() == SIG.key()


def test_another_machine_is_never_used(tmp_path):
    with TuningDatabase(tmp_path / "t.sqlite") as db:
        db.put(_record())
        for other in (
            Machine("Intel Xeon (emeraldrapids)", HERE.features, HERE.threads, HERE.versions),
            Machine(HERE.cpu, HERE.features, 1, HERE.versions),  # other thread count
            Machine(HERE.cpu, HERE.features, HERE.threads, {**HERE.versions, "tensor_graphs": "0.2.0"}),
            Machine(HERE.cpu, (*HERE.features, "avx512f"), HERE.threads, HERE.versions),
        ):
            assert db.get(SIG, other) is None
            assert list(db.records(other)) == []
        # key order does not matter: the keys are canonical
        same = Machine(HERE.cpu, tuple(reversed(HERE.features)), HERE.threads, dict(reversed(list(HERE.versions.items()))))
        assert db.get(SIG, same) is not None


def test_record_of_times():
    r = Record.of_times(SIG, HERE, [5.0, 1.0, 3.0, 2.0, 4.0], 1e-6, 2e-6)
    assert (r.median_ns, r.runs) == (3.0, 5) and r.p20_ns == pytest.approx(1.8) and r.p80_ns == pytest.approx(4.2)
    with pytest.raises(ValueError, match="at least one"):
        Record.of_times(SIG, HERE, [], 0.0, 0.0)


def test_this_machine():
    m = Machine.this(threads=3)
    assert m.threads == 3 and m.cpu and "tensor_graphs" in m.versions and "avx2" in m.features
    assert Machine.this(threads=3).key() == m.key()


def test_wal_mode_and_schema_version(tmp_path):
    path = tmp_path / "t.sqlite"
    TuningDatabase(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(TuningDatabaseError, match="newer than this tensor_graphs"):
        TuningDatabase(path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all, " * 100)
    with pytest.raises(TuningDatabaseError, match="junk.sqlite"):
        TuningDatabase(junk)


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, str(tmp_path / "elsewhere.sqlite"))
    assert default_path() == tmp_path / "elsewhere.sqlite"
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_path() == tmp_path / "cache" / "tensor_graphs" / "tuning.sqlite"


def _writer(path: str, worker: int, count: int) -> None:
    with TuningDatabase(path) as db:
        for i in range(count):
            sig = KernelSignature("matmul", "matmul.packed", ((worker, i),), ("f32",))
            db.put(_record(sig, median=float(i)))


def test_several_processes_write_at_once(tmp_path):
    """Four processes, each 100 one-record transactions into one file: every record lands."""
    path = str(tmp_path / "shared.sqlite")
    TuningDatabase(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 100)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with TuningDatabase(path) as db:
        assert len(db) == 400
        assert sorted(r.median_ns for r in db.records(HERE) if r.signature.shapes[0][0] == 2) == [float(i) for i in range(100)]
