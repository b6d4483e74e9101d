"""The compile cache (`codegen.llvm.object_cache`): a second compile of the same module loads
the native code instead of running the passes and LLVM, and gives the same results bit for bit;
entries are keyed by everything that shapes the code, damaged ones are ignored, the directory is
kept under its size cap, ``TG_CACHE=off`` turns it off."""

from __future__ import annotations

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
