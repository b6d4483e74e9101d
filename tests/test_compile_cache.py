"""The compile cache (`codegen.llvm.object_cache`): a second compile of the same module loads
the native code instead of running the passes and LLVM, and gives the same results bit for bit;
entries are keyed by everything that shapes the code, damaged ones are ignored, the directory is
kept under its size cap, ``TG_CACHE=off`` turns it off. Entries are data (no pickle), and a
directory or entry others may write is not used."""

from __future__ import annotations

import os
import stat
import warnings

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from conftest import mlp as build_mlp
from tensor_graphs.codegen.llvm import jit
from tensor_graphs.codegen.llvm.object_cache import CompileCache, Entry, LazyText


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TG_CACHE", "on")
    return tmp_path / "cache"


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return build_mlp([32, 64, 16]), torch.randn(8, 32)


def _compile(model, x, **kw):
    stats = tg.CompileStats()
    return tg.compile(model, (x,), stats=stats, **kw), stats.seconds


def test_a_second_compile_comes_from_the_cache(cache_dir, mlp, monkeypatch):
    model, x = mlp
    first, phases = _compile(model, x)
    assert "from cache" not in phases and "llvm jit" in phases
    assert len(list(cache_dir.glob("*.tgc"))) == 2, "the object code entry and the graph entry"

    def no_llvm(*args, **kwargs):
        raise AssertionError("LLVM ran for a cached graph")

    monkeypatch.setattr(jit, "_optimise", no_llvm)
    second, phases = _compile(model, x)
    assert "from cache" in phases and "aten -> tg" not in phases and "llvm jit" not in phases
    assert np.array_equal(first(x.numpy()), second(x.numpy()))
    with torch.no_grad():
        assert (second(x) - model(x)).abs().max().item() <= 1e-5
    for level in ("aten", "tg", "buf", "llvm"):
        assert second.ir(level) == first.ir(level)
    assert "matmul.packed" in second.explain()


def test_a_dynamic_graph_comes_from_the_cache_with_its_symbols(cache_dir, mlp, monkeypatch):
    """Its signature's symbolic shapes are stored as size expressions (read back by the size
    parser, never evaluated); the cached graph checks and serves every size in range."""
    from torch.export import Dim

    model, x = mlp
    spec = ({0: Dim("batch", min=1, max=40)},)
    first, phases = _compile(model, x, dynamic_shapes=spec)
    assert "from cache" not in phases and len(list(cache_dir.glob("*.tgc"))) == 2
    monkeypatch.setattr(jit, "_optimise", lambda *a, **k: pytest.fail("LLVM ran for a cached graph"))
    second, phases = _compile(model, x, dynamic_shapes=spec)
    assert "from cache" in phases and second.signature == first.signature
    assert str(second.signature.inputs[0]) == "float32[batch, 32]" and second.signature.symbols == (("batch", 1, 40),)
    for n in (1, 5, 40):
        y = torch.randn(n, 32)
        assert np.array_equal(first(y.numpy()), second(y.numpy()))
    with pytest.raises(ValueError, match=r"outside the range of its size symbol batch: \[1, 40\]"):
        second(torch.randn(41, 32))


def test_the_key_holds_the_options(cache_dir, mlp):
    model, x = mlp
    _compile(model, x)
    other, phases = _compile(model, x, pack_weights=False)
    assert "from cache" not in phases, "pack_weights changes the code"
    assert "buf.packed_matmul" not in other.ir("buf")
    _, phases = _compile(model, x, profile=True)
    assert "from cache" not in phases
    _, phases = _compile(model, x, target="x86-64")
    assert "from cache" not in phases
    _, phases = _compile(model, x, target="x86-64")
    assert "from cache" in phases


def test_llvm_object_code_is_reused_below_the_graph(cache_dir, mlp, monkeypatch):
    """A buf-level module (no graph entry) still skips LLVM the second time."""
    from tensor_graphs.diagnostics import parse_module

    model, x = mlp
    fn, _ = _compile(model, x)
    buf_text = fn.ir("buf")
    weights = dict(fn._given)
    tg.compile_module(parse_module(buf_text, "buf"), weights)
    monkeypatch.setattr(jit, "_optimise", lambda *a, **k: (_ for _ in ()).throw(AssertionError("LLVM ran")))
    again = tg.compile_module(parse_module(buf_text, "buf"), weights)
    assert np.array_equal(again(x.numpy()), fn(x.numpy()))


def test_a_damaged_entry_is_ignored_and_replaced(cache_dir, mlp):
    model, x = mlp
    first, _ = _compile(model, x)
    for path in cache_dir.glob("*.tgc"):
        path.write_bytes(path.read_bytes()[:50])
    second, phases = _compile(model, x)
    assert "from cache" not in phases
    assert np.array_equal(first(x.numpy()), second(x.numpy()))
    _, phases = _compile(model, x)
    assert "from cache" in phases


def test_off_writes_nothing(cache_dir, mlp, monkeypatch):
    monkeypatch.setenv("TG_CACHE", "off")
    model, x = mlp
    _compile(model, x)
    _, phases = _compile(model, x)
    assert "from cache" not in phases and not cache_dir.exists()


def test_the_directory_is_kept_under_its_cap(tmp_path):
    cache = CompileCache(tmp_path, max_bytes=10_000)
    for i in range(6):
        cache.put(f"k{i}", Entry(bytes(3000), LazyText.of("x")))
    kept = sorted(p.stem for p in tmp_path.glob("*.tgc"))
    assert len(kept) <= 3 and "k5" in kept and "k0" not in kept
    assert cache.get("k5") is not None and cache.get("k0") is None


def test_an_edited_checkout_never_reads_old_code(monkeypatch):
    """The keys hold a digest of tensor_graphs' source: after an edit to a kernel emitter (the
    version number unchanged) a module compiles again instead of loading the old object code."""
    from tensor_graphs.codegen.llvm import object_cache

    keys = []
    for source in ("before the edit", "after the edit"):
        monkeypatch.setattr(object_cache, "_source_digest", lambda s=source: s)
        object_cache._versions.cache_clear()
        keys.append(object_cache.digest("graph", "the same module text"))
    object_cache._versions.cache_clear()
    assert keys[0] != keys[1]


# --------------------------------------------------------------------------- data, not code (issue 29)


def test_entries_are_data_not_pickles(cache_dir, mlp):
    """An entry file is the format's magic line and JSON: plain fields and base64 bytes."""
    import json

    from tensor_graphs.codegen.llvm.object_cache import MAGIC, decode, encode

    model, x = mlp
    _compile(model, x)
    for path in cache_dir.glob("*.tgc"):
        raw = path.read_bytes()
        assert raw.startswith(MAGIC) and b"\x80\x04" not in raw[:2]
        json.loads(raw[len(MAGIC):])  # the rest is JSON
        entry = decode(raw)
        assert encode(entry) == raw  # nothing lost or added in a round trip


def test_a_planted_pickle_runs_nothing(cache_dir, mlp, tmp_path):
    """A pickle whose loading would run a command, put where an entry goes, is read as a damaged
    entry: nothing runs, the compile goes on."""
    import pickle

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    model, x = mlp
    first, _ = _compile(model, x)
    for path in cache_dir.glob("*.tgc"):
        path.write_bytes(pickle.dumps(Payload()))
    second, phases = _compile(model, x)
    assert not marker.exists(), "loading a cache entry ran code"
    assert "from cache" not in phases
    assert np.array_equal(first(x.numpy()), second(x.numpy()))


def test_an_entry_naming_another_class_is_refused():
    """The decoder makes only the classes an entry holds, by name."""
    import json

    from tensor_graphs.codegen.llvm.object_cache import MAGIC, decode

    for body in ({"object": ["Popen", {"args": ["touch", "x"]}]}, {"object": ["Entry", {"object_code": {"bytes": "AA=="},
                                                                                       "llvm_ir": {"object": ["Popen", {}]}}]}):
        with pytest.raises(ValueError):
            decode(MAGIC + json.dumps(body).encode())


def test_the_directory_is_made_private(cache_dir, mlp):
    model, x = mlp
    _compile(model, x)
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in cache_dir.glob("*.tgc"))


def test_a_directory_others_may_write_is_not_used(cache_dir, mlp):
    """As ssh treats its keys: one warning naming the directory, then compiles without the cache."""
    from tensor_graphs.codegen.llvm import object_cache

    cache_dir.mkdir()
    cache_dir.chmod(0o777)
    object_cache._WARNED.clear()
    model, x = mlp
    with pytest.warns(object_cache.CacheWarning, match=f"not using the compile cache at {cache_dir}: the directory is writable by others"):
        fn, _ = _compile(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per path, not one per compile
        _, phases = _compile(model, x)
    assert "from cache" not in phases and not list(cache_dir.iterdir())
    with torch.no_grad():
        assert (fn(x) - model(x)).abs().max().item() <= 1e-5


def test_entries_of_another_owner_or_writable_are_not_used(cache_dir, mlp, monkeypatch):
    from tensor_graphs.codegen.llvm import object_cache

    model, x = mlp
    _compile(model, x)
    entries = list(cache_dir.glob("*.tgc"))
    object_cache._WARNED.clear()
    for path in entries:
        path.chmod(0o666)
    with pytest.warns(object_cache.CacheWarning, match="the entry is writable by others"):
        _, phases = _compile(model, x)
    assert "from cache" not in phases
    for path in cache_dir.glob("*.tgc"):
        path.chmod(0o600)
    object_cache._WARNED.clear()
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)  # as if another user had made the directory
    with pytest.warns(object_cache.CacheWarning, match=f"the directory is owned by user id {me}, not by you"):
        _, phases = _compile(model, x)
    assert "from cache" not in phases
