"""The compile cache: native code of graphs compiled before, so that compiling one again skips
LLVM (and, for a whole graph, every pass too).

Two kinds of entry, one file each in the cache directory (``<key>.tgc``, a pickle):

- **object code** (`jit.jit_compile`): keyed by the LLVM IR text the passes produced, the
  target (LLVM CPU and features) and the optimisation level; holds the object code MCJIT made
  (through llvmlite's object cache) and the optimised IR text. A hit skips LLVM's optimisation
  and code generation: the engine loads the object into an empty module.
- **graph** (`tensor_graphs.api.compile_module`): keyed by the module text a compile starts
  from (aten or tg level) and every option that shapes the code (target, packing, profiling,
  extra tg passes); holds the object code, the graph's signature, the IR text of each level
  and the kernel-path report. A hit skips every pass as well.

Both keys also hold the versions of tensor_graphs (and a digest of its source files), xDSL and
llvmlite, so code made by another version, or by an edited checkout, is never used. The directory is ``$TG_CACHE_DIR``, else
``$XDG_CACHE_HOME/tensor_graphs/compiled`` (``~/.cache/...``); ``TG_CACHE=off`` turns the cache
off. Entries are written to a temporary file and renamed into place (processes sharing the
directory never read half a file); when the directory grows over ``TG_CACHE_MAX_MB`` (default
2048) the least recently used entries are removed. An entry that cannot be read (truncated,
from an incompatible Python) is ignored and replaced.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Format of the entries; bump it when `Entry` changes.
FORMAT = 1
#: Environment variables: the directory, off switch and size cap.
DIR_ENV, SWITCH_ENV, MAX_ENV = "TG_CACHE_DIR", "TG_CACHE", "TG_CACHE_MAX_MB"
DEFAULT_MAX_MB = 2048


class LazyText:
    """Text kept zlib-compressed until it is read (``str(text)``): a cached graph's IR levels."""

    __slots__ = ("_data", "_text")

    def __init__(self, data: bytes):
        self._data, self._text = data, None

    @staticmethod
    def of(text: str | LazyText) -> LazyText:
        return text if isinstance(text, LazyText) else LazyText(zlib.compress(text.encode(), 1))

    def __str__(self) -> str:
        if self._text is None:
            self._text = zlib.decompress(self._data).decode()
        return self._text

    def __getstate__(self):
        return self._data

    def __setstate__(self, data):
        self._data, self._text = data, None


@dataclass
class Entry:
    """What a cache file holds (see the module doc)."""

    object_code: bytes
    llvm_ir: LazyText
    signature: Any = None  # runtime_support.signature.GraphSignature (graph entries)
    ir: dict[str, LazyText] = field(default_factory=dict)
    report: Any = None  # tuning.tuner.TuningReport (graph entries)
    format: int = FORMAT


@functools.cache
def _versions() -> str:
    """The libraries' versions and a digest of tensor_graphs' own source: code made by another
    checkout (an edited kernel emitter under the same version number) is never used."""
    import llvmlite
    import xdsl

    import tensor_graphs

    return (f"tensor_graphs {tensor_graphs.__version__} ({_source_digest()}); xdsl {xdsl.__version__}; "
            f"llvmlite {llvmlite.__version__}; format {FORMAT}")


def _source_digest() -> str:
    """A digest of every Python file of the tensor_graphs package (their paths and bytes)."""
    import tensor_graphs

    root = Path(tensor_graphs.__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def digest(*parts: str) -> str:
    """The key of an entry: a digest of ``parts`` and the library versions."""
    h = hashlib.sha256(_versions().encode())
    for p in parts:
        h.update(b"\0")
        h.update(p.encode())
    return h.hexdigest()[:40]


class CompileCache:
    """The entries of one directory."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_MB << 20):
        self.directory = Path(directory)
        self.max_bytes = max_bytes

    @staticmethod
    def default() -> CompileCache | None:
        """The cache of the environment (module doc), or None when ``TG_CACHE=off``."""
        if os.environ.get(SWITCH_ENV, "").lower() in ("0", "off", "false", "no"):
            return None
        directory = os.environ.get(DIR_ENV)
        if not directory:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            directory = os.path.join(base, "tensor_graphs", "compiled")
        try:
            max_mb = int(os.environ.get(MAX_ENV, DEFAULT_MAX_MB))
        except ValueError:
            max_mb = DEFAULT_MAX_MB
        return CompileCache(directory, max_mb << 20)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.tgc"

    def get(self, key: str) -> Entry | None:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                entry = pickle.load(f)
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001 - a damaged or foreign entry: ignored, replaced by the next put
            return None
        if not isinstance(entry, Entry) or entry.format != FORMAT:
            return None
        try:
            os.utime(path)  # recently used: pruned last
        except OSError:
            pass
        return entry

    def put(self, key: str, entry: Entry) -> None:
        """Store ``entry`` (best effort: a cache that cannot be written is no error)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(entry, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self._path(key))
        except OSError:
            return
        self._prune()

    def _prune(self) -> None:
        try:
            files = [(p.stat().st_mtime, p.stat().st_size, p) for p in self.directory.glob("*.tgc")]
        except OSError:
            return
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files, key=lambda t: t[0]):
            if total <= self.max_bytes:
                break
            try:
                path.unlink()
                total -= size
            except OSError:
                pass
