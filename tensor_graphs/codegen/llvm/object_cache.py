"""The compile cache: native code of graphs compiled before, so that compiling one again skips
LLVM (and, for a whole graph, every pass too).

Two kinds of entry, one file each in the cache directory (``<key>.tgc``):

- **object code** (`jit.jit_compile`): keyed by the LLVM IR text the passes produced, the
  target (LLVM CPU and features) and the optimisation level; holds the object code MCJIT made
  (through llvmlite's object cache) and the optimised IR text. A hit skips LLVM's optimisation
  and code generation: the engine loads the object into an empty module.
- **graph** (`tensor_graphs.driver.cpu.compile_module`): keyed by the module text a compile starts
  from (aten or tg level) and every option that shapes the code (target, packing, profiling,
  extra tg passes); holds the object code, the graph's signature, the IR text of each level
  and the kernel-path report. A hit skips every pass as well.

Both keys also hold the versions of tensor_graphs (and a digest of its source files), xDSL and
llvmlite, so code made by another version, or by an edited checkout, is never used. The directory is ``$TG_CACHE_DIR``, else
``$XDG_CACHE_HOME/tensor_graphs/compiled`` (``~/.cache/...``); ``TG_CACHE=off`` turns the cache
off. Entries are written to a temporary file and renamed into place (processes sharing the
directory never read half a file); when the directory grows over ``TG_CACHE_MAX_MB`` (default
2048) the least recently used entries are removed. An entry that cannot be read (truncated,
from another format) is ignored and replaced.

**An entry is data, and only its owner writes the directory.** The object code in an entry is
run when a graph is loaded from it, so the cache is kept as ssh keeps its keys: the directory is
made with mode 0700, and a directory or an entry that is not owned by the user, or that group or
others may write, is not used (one `CacheWarning` naming the path, then the compile goes on
without the cache). An entry is plain fields and bytes (`encode`, `decode`: JSON whose objects
are the few dataclasses an entry holds, by name, and base64 for bytes and arrays), never a
pickle: reading one constructs those classes and nothing else, so a planted file cannot run
code when it is read.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import os
import stat
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sympy

#: Format of the entries; bump it when `Entry` or the encoding changes.
FORMAT = 2
#: The first bytes of every entry file.
MAGIC = b"tensor_graphs compile cache\n"
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

    @property
    def data(self) -> bytes:
        """The compressed text."""
        return self._data


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
        self._usable: bool | None = None

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

    def usable(self) -> bool:
        """Whether the directory may be used: made now (mode 0700) if it is missing, else owned
        by the user and not writable by group or others (else one `CacheWarning`, and False)."""
        if self._usable is None:
            self._usable = _private_directory(self.directory)
        return self._usable

    def get(self, key: str) -> Entry | None:
        if not self.usable():
            return None
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:  # missing, or a link: a miss
            return None
        with os.fdopen(fd, "rb") as f:
            if not _private(os.fstat(f.fileno()), path, "entry"):
                return None
            try:
                entry = decode(f.read())
            except Exception:  # noqa: BLE001 - a damaged or foreign entry: ignored, replaced by the next put
                return None
        try:
            os.utime(path)  # recently used: pruned last
        except OSError:
            pass
        return entry

    def put(self, key: str, entry: Entry) -> None:
        """Store ``entry`` (best effort: a cache that cannot be written is no error)."""
        if not self.usable():
            return
        try:
            data = encode(entry)
        except TypeError:  # a field the format does not hold: not cached
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")  # mode 0600
            with os.fdopen(fd, "wb") as f:
                f.write(data)
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


# --------------------------------------------------------------------------- who may write it


class CacheWarning(UserWarning):
    """The compile cache's directory or an entry is not private to the user: it is not used."""


#: paths warned about already (one warning each per process)
_WARNED: set[str] = set()


def _warn(path: Path, why: str) -> None:
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        warnings.warn(f"tensor_graphs: not using the compile cache at {path}: {why} (the compile goes on "
                      "without it; the cache runs the code it holds, so only its owner may write it)", CacheWarning, stacklevel=4)


def _private(st: os.stat_result, path: Path, what: str) -> bool:
    """Whether ``st`` (of ``path``, a cache directory or entry) is the user's and writable by
    nobody else; else one warning, and False."""
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        _warn(path, f"the {what} is owned by user id {st.st_uid}, not by you ({os.getuid()})")
        return False
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        _warn(path, f"the {what} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} "
                    f"(mode {stat.S_IMODE(st.st_mode):o})")
        return False
    return True


def _private_directory(directory: Path) -> bool:
    """``directory`` made (mode 0700) when missing, and then whether it is private (`_private`)."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and _private(st, directory, "directory")


# --------------------------------------------------------------------------- the entry format

def _classes() -> dict[str, type]:
    """The classes an entry may hold, by name (`decode` constructs these and nothing else)."""
    from tensor_graphs.runtime_support.signature import GraphSignature, TensorSpec
    from tensor_graphs.tuning.database import KernelSignature, Machine, Record
    from tensor_graphs.tuning.paths import Candidate
    from tensor_graphs.tuning.tuner import Choice, PathResult, TuningReport

    return {c.__name__: c for c in (Entry, GraphSignature, TensorSpec, TuningReport, Choice, PathResult, Candidate,
                                    Record, KernelSignature, Machine)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _to_json(value: Any) -> Any:
    """``value`` as JSON data: plain values as they are; bytes, text, arrays, dtypes, size
    expressions, tuples, dicts and the dataclasses of `_classes` as one-key objects saying what
    they are."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return {"bytes": _b64(value)}
    if isinstance(value, LazyText):
        return {"text": _b64(value.data)}
    if isinstance(value, np.ndarray):
        return {"array": [value.dtype.str, list(value.shape), _b64(np.ascontiguousarray(value).tobytes())]}
    if isinstance(value, np.dtype):
        return {"dtype": value.str}
    if isinstance(value, sympy.Basic):  # a symbolic size (a dynamic graph's shapes): its text
        from tensor_graphs.dialects.symbolic import format_expr

        return {"size": format_expr(value)}
    if isinstance(value, tuple):
        return {"tuple": [_to_json(v) for v in value]}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "items") and not dataclasses.is_dataclass(value):
        return {"dict": [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and _classes().get(name) is type(value):
        return {"object": [name, {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}]}
    raise TypeError(f"the compile cache does not store a {type(value).__name__}")


def _from_json(data: Any, classes: dict[str, type]) -> Any:
    """The inverse of `_to_json`; a ValueError for anything it would not have written."""
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return [_from_json(v, classes) for v in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError("not a compile cache entry")
    (kind, body), = data.items()
    if kind == "bytes":
        return base64.b64decode(body, validate=True)
    if kind == "text":
        return LazyText(base64.b64decode(body, validate=True))
    if kind == "array":
        dtype, shape, raw = body
        return np.frombuffer(base64.b64decode(raw, validate=True), dtype=np.dtype(dtype)).reshape(shape).copy()
    if kind == "dtype":
        return np.dtype(body)
    if kind == "size" and isinstance(body, str):  # read by the size parser of `dialects.symbolic`, never eval
        from tensor_graphs.dialects.symbolic import parse_expr

        return parse_expr(body)
    if kind == "tuple":
        return tuple(_from_json(v, classes) for v in body)
    if kind == "dict":
        return {_from_json(k, classes): _from_json(v, classes) for k, v in body}
    if kind == "object" and body[0] in classes and isinstance(body[1], dict):
        return classes[body[0]](**{k: _from_json(v, classes) for k, v in body[1].items()})
    raise ValueError("not a compile cache entry")


def encode(entry: Entry) -> bytes:
    """The bytes of an entry file: `MAGIC`, then the entry as JSON (`_to_json`); a TypeError for a
    field of a kind the format does not hold."""
    return MAGIC + json.dumps(_to_json(entry), separators=(",", ":")).encode()


def decode(data: bytes) -> Entry:
    """The entry of an entry file's bytes; a ValueError for anything else (no code runs: only the
    classes of `_classes` are made, from their fields)."""
    if not data.startswith(MAGIC):
        raise ValueError("not a compile cache entry")
    entry = _from_json(json.loads(data[len(MAGIC):]), _classes())
    if not isinstance(entry, Entry) or entry.format != FORMAT:
        raise ValueError("a compile cache entry of another format")
    return entry
