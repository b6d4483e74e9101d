"""The machine a graph is compiled for: ONE object every level below tg reads.

    target = Target.host()                    # this CPU (the default)
    target = Target.named("x86-64-v3")        # an ISA level: x86-64, x86-64-v2, -v3, -v4
    target = Target.named("znver3")           # a CPU (table `CPUS`): its ISA level and extensions
    target = resolve(None)                    # TG_TARGET when set, else the host
    tg.compile(model, (x,), target="x86-64-v3")

A `Target` names the ISA family and vector width, the vector registers, FMA, the extensions that
matter for later kernels (AVX512-BF16, AVX512-VNNI, AVX-VNNI, AMX), the caches (from sysfs where
present) and the cores. LLVM gets it as a CPU name and a feature string (`llvm_cpu`,
`llvm_features`); kernels read their shapes from it (`float_lanes`, `gemm_tile`,
`panel_columns`), never from the host, and no kernel file keeps a vector width of its own. A
module records the target it is compiled for as its ``tg.target`` attribute (`record`,
`of_module`), so its buf and llvm IR say what they were made for, and every pass that lowers
it agrees.

Code for a target runs on a CPU that has its ISA: `check_runs_here` says which feature the host
lacks otherwise. AVX2 and generic code runs on every AVX-512 machine, so every family below the
host's can be compiled and tested anywhere.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

#: The environment variable that names the default target (same names as ``target=``).
TARGET_ENV = "TG_TARGET"
#: The module attribute holding the target a module is compiled for.
TARGET_ATTR = "tg.target"
#: The extensions whose tiles run a packed GEMM over bf16 pairs, over int8 quads (`kernels_amx`)
AMX_BF16, AMX_INT8 = "amx-bf16", "amx-int8"
#: Words (bf16 pairs or int8 quads along K) per row of an AMX tile
AMX_ROW_WORDS = 16


@dataclass(frozen=True)
class IsaLevel:
    """One rung of the x86-64 ISA ladder (the psABI micro-architecture levels)."""

    name: str
    #: widest vector register in bits
    vector_bits: int
    #: architectural vector registers (xmm/ymm: 16; zmm with AVX-512: 32)
    vector_registers: int
    fma: bool
    #: LLVM features the level guarantees (what code compiled for it may use)
    requires: tuple[str, ...]


#: The x86-64 ISA levels, lowest first (`x86-64` is SSE2: the generic fallback).
LEVELS: dict[str, IsaLevel] = {
    level.name: level
    for level in (
        IsaLevel("x86-64", 128, 16, False, ("sse2",)),
        IsaLevel("x86-64-v2", 128, 16, False, ("sse2", "sse4.2", "popcnt")),
        IsaLevel("x86-64-v3", 256, 16, True, ("sse4.2", "avx", "avx2", "fma", "bmi2", "f16c")),
        IsaLevel("x86-64-v4", 512, 32, True, ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl")),
    )
}

#: float32 lanes of the narrowest vector of any level (what a packed panel is a multiple of)
MIN_FLOAT_LANES = min(level.vector_bits for level in LEVELS.values()) // 32
#: float32 lanes of the widest vector of any level (scratch tiles padded to it serve every target)
MAX_FLOAT_LANES = max(level.vector_bits for level in LEVELS.values()) // 32

#: Extensions later kernels may use (LLVM feature names), recorded when the CPU has them.
EXTENSIONS = ("avx512bf16", "avx512vnni", "avxvnni", "amx-tile", "amx-bf16", "amx-int8", "avx512fp16")

#: CPU name (LLVM's) -> (ISA level, extensions). A CPU not listed here is refused with the list.
CPUS: dict[str, tuple[str, tuple[str, ...]]] = {
    "haswell": ("x86-64-v3", ()),
    "broadwell": ("x86-64-v3", ()),
    "skylake": ("x86-64-v3", ()),
    "alderlake": ("x86-64-v3", ("avxvnni",)),
    "znver1": ("x86-64-v3", ()),
    "znver2": ("x86-64-v3", ()),
    "znver3": ("x86-64-v3", ()),
    "skylake-avx512": ("x86-64-v4", ()),
    "cascadelake": ("x86-64-v4", ("avx512vnni",)),
    "cooperlake": ("x86-64-v4", ("avx512vnni", "avx512bf16")),
    "icelake-server": ("x86-64-v4", ("avx512vnni",)),
    "sapphirerapids": ("x86-64-v4", ("avx512vnni", "avx512bf16", "avxvnni", "amx-tile", "amx-bf16", "amx-int8", "avx512fp16")),
    "emeraldrapids": ("x86-64-v4", ("avx512vnni", "avx512bf16", "avxvnni", "amx-tile", "amx-bf16", "amx-int8", "avx512fp16")),
    "graniterapids": ("x86-64-v4", ("avx512vnni", "avx512bf16", "avxvnni", "amx-tile", "amx-bf16", "amx-int8", "avx512fp16")),
    "znver4": ("x86-64-v4", ("avx512vnni", "avx512bf16")),
    "znver5": ("x86-64-v4", ("avx512vnni", "avx512bf16", "avxvnni")),
}


@dataclass(frozen=True)
class Caches:
    """Data cache sizes in bytes (per core for L1d and L2, the whole L3 a core shares)."""

    l1d: int = 32 << 10
    l2: int = 1 << 20
    l3: int = 8 << 20
    #: bytes per cache line (what a prefetch fetches)
    line: int = 64


@dataclass(frozen=True)
class ThreadWork:
    """How much work pays for a thread of a parallel kernel: a kernel runs on at most
    ``max(flops / flops_per_thread, bytes / bytes_per_thread)`` threads (at least one), so a
    thread is added only when the share it takes outweighs what a parallel region costs (waking
    the team, splitting the range, joining). Measured by ``benchmarks/thread_work.py`` (the
    crossover where two threads beat one, for a streaming elementwise kernel and a packed GEMM),
    see `DEFAULT_THREAD_WORK`."""

    #: bytes read and written per thread, at least (memory-bound kernels)
    bytes_per_thread: int
    #: floating-point operations per thread, at least (GEMMs, attention)
    flops_per_thread: int

    def threads(self, flops: float, bytes: float) -> int:
        """The most threads that work of ``flops`` and ``bytes`` pays for (>= 1)."""
        return max(1, int(max(flops / self.flops_per_thread, bytes / self.bytes_per_thread)))


#: The work at which a second thread starts to pay, per thread: ``.venv/bin/python
#: benchmarks/thread_work.py`` on an AMD EPYC (Zen 1, 2 vCPUs, AVX2), 2026-11-23: a streaming
#: elementwise kernel first gains >= 10% at 2 threads from 384 KiB moved (192 KiB per thread), a
#: matrix-vector product from a 256 KiB weight, a 32-row packed GEMM from 0.52 MFLOP (256 KFLOP
#: per thread). Times are of whole one-kernel graph calls, so they lean towards fewer threads.
DEFAULT_THREAD_WORK = ThreadWork(bytes_per_thread=192 << 10, flops_per_thread=256 << 10)


class TargetError(ValueError):
    """An unknown target name, or a target whose code cannot run on this CPU."""


@dataclass(frozen=True)
class Target:
    """The machine compiled for; see the module docstring."""

    #: how the user named it: ``"host"``, an ISA level or a CPU name
    name: str
    #: LLVM's CPU name (scheduling model and, for a named CPU, its features)
    llvm_cpu: str
    #: the ISA level of the code (`LEVELS`)
    level: str
    #: extensions beyond the level (`EXTENSIONS`) the CPU has
    extensions: frozenset[str] = frozenset()
    caches: Caches = field(default_factory=Caches)
    cores: int = 1
    #: how much work pays for a thread (`ThreadWork`)
    thread_work: ThreadWork = DEFAULT_THREAD_WORK
    #: the host's full LLVM feature string (only for ``host``: everything it has, and lacks)
    host_features: str = ""

    # ------------------------------------------------------------------ constructors

    @staticmethod
    def host() -> Target:
        """This CPU, as LLVM sees it."""
        return _host_target()

    @staticmethod
    def named(name: str) -> Target:
        """An ISA level (``x86-64``, ``x86-64-v2``, ``-v3``, ``-v4``), a CPU name of `CPUS`, or
        ``host``. Caches and cores are this machine's (a named target is usually run here)."""
        name = name.strip()
        if name in ("host", "native", ""):
            return Target.host()
        host = Target.host()
        if name in LEVELS:
            return Target(name, name, name, frozenset(), host.caches, host.cores)
        if name in CPUS:
            level, extensions = CPUS[name]
            return Target(name, name, level, frozenset(extensions), host.caches, host.cores)
        known = ", ".join([*LEVELS, *CPUS])
        raise TargetError(f"unknown target '{name}': give host, an ISA level or a CPU name ({known})")

    # ------------------------------------------------------------------ what kernels read

    @property
    def isa(self) -> IsaLevel:
        return LEVELS[self.level]

    @property
    def vector_bits(self) -> int:
        return self.isa.vector_bits

    @property
    def vector_registers(self) -> int:
        return self.isa.vector_registers

    @property
    def fma(self) -> bool:
        return self.isa.fma

    @property
    def float_lanes(self) -> int:
        """float32 elements per vector register."""
        return self.vector_bits // 32

    @property
    def byte_dot_extension(self) -> str | None:
        """The extension that gives ``vpdpbusd`` on this target's vectors (AVX512-VNNI at 512
        bits, AVX-VNNI at 256), or None when it has none."""
        vnni = {512: "avx512vnni", 256: "avxvnni"}.get(self.vector_bits)
        return vnni if vnni in self.extensions else None

    @property
    def family(self) -> str:
        """``avx512``, ``avx2`` or ``sse`` (the kernel families)."""
        return {512: "avx512", 256: "avx2"}.get(self.vector_bits, "sse")

    @property
    def llvm_features(self) -> str:
        """The feature string for LLVM's target machine. The host: what it has; an AVX-512 target:
        without LLVM's preference for 256-bit vectors (Intel's tuning), our kernels are written
        for the full width."""
        features = self.host_features
        if self.vector_bits == 512:
            features = ",".join(f for f in (features, "-prefer-256-bit") if f)
        return features

    def gemm_tile(self, vectors: int | None = None) -> tuple[int, int]:
        """(MR rows, vectors per row) of the packed GEMM's register tile: the accumulators, the
        panel row's vectors and one broadcast fill the vector registers (BLIS: 6 x 16 on AVX2,
        6 x 64 on AVX-512). ``vectors``: the tile for panels that narrow (a small N)."""
        v = vectors if vectors is not None else (4 if self.vector_registers >= 32 else 2)
        return GEMM_ROWS.get((self.vector_registers, v), max(1, min(16, (self.vector_registers - v - 1) // v))), v

    @property
    def panel_columns(self) -> int:
        """Columns per packed weight panel for a wide weight: the GEMM tile's width."""
        return self.gemm_tile()[1] * self.float_lanes

    def panel_columns_for(self, n: int) -> int:
        """Panel width for a weight of ``n`` output columns: `panel_columns`, or ``n`` rounded up
        to whole vectors when smaller."""
        lanes = self.float_lanes
        return self.panel_columns if n >= self.panel_columns else max(lanes, -(-n // lanes) * lanes)

    def tiles_gemm(self, k_words: int, quads: bool = False) -> bool:
        """Whether a packed GEMM over bf16 pairs of ``k_words`` words along K (any K: its tail in a
        tile step of its own), or over int8 quads (whole tile rows of 16 words), runs on AMX tiles
        on this target (`kernels_amx`): each output block over all of K at once."""
        return (AMX_INT8 if quads else AMX_BF16) in self.extensions and (not quads or k_words % AMX_ROW_WORDS == 0)

    def gemm_k_block(self, nr: int) -> int:
        """The most k steps per K block of a packed GEMM with panels of ``nr`` columns: a block's
        panel slice (``kc x nr`` floats) takes half of L1d, so that it stays there while every
        row block of A streams past it (BLIS's KC: 256 for 16 columns and 32 KiB, Haswell's);
        a multiple of 8, at least 32."""
        return max(32, (self.caches.l1d // 2) // (nr * 4) // 8 * 8)

    # ------------------------------------------------------------------ running

    def missing_on_host(self) -> list[str]:
        """LLVM features this target's code needs that this CPU lacks (empty: it runs here)."""
        if self.host_features:
            return []
        have = _host_feature_set()
        need = list(self.isa.requires) + sorted(self.extensions)
        return [f for f in need if f not in have]

    def check_runs_here(self) -> None:
        """Raise `TargetError` when code for this target would not run on this CPU."""
        missing = self.missing_on_host()
        if missing:
            host = Target.host()
            raise TargetError(
                f"target {self.name} needs {', '.join(missing)}, which this CPU ({host.llvm_cpu}, "
                f"{host.level}) lacks: its code cannot run here; compile for {host.level} or lower "
                "(tg-opt -t llvm still prints its LLVM IR)"
            )

    # ------------------------------------------------------------------ the module attribute

    def describe(self) -> str:
        """One line: ``x86-64-v3 (cpu haswell, avx2: 8 float lanes, 16 registers, FMA; L1d 32 KiB ...)``."""
        ext = f", {'+'.join(sorted(self.extensions))}" if self.extensions else ""
        c = self.caches
        return (
            f"{self.name} (cpu {self.llvm_cpu}, {self.level}: {self.float_lanes} float lanes, "
            f"{self.vector_registers} vector registers{', FMA' if self.fma else ''}{ext}; "
            f"L1d {c.l1d >> 10} KiB, L2 {c.l2 >> 10} KiB, L3 {c.l3 >> 20} MiB; {self.cores} cores)"
        )

    def as_dict(self) -> dict[str, object]:
        c = self.caches
        return {
            "name": self.name,
            "cpu": self.llvm_cpu,
            "level": self.level,
            "extensions": ",".join(sorted(self.extensions)),
            "l1d": c.l1d,
            "l2": c.l2,
            "l3": c.l3,
            "line": c.line,
            "cores": self.cores,
            "bytes_per_thread": self.thread_work.bytes_per_thread,
            "flops_per_thread": self.thread_work.flops_per_thread,
            "vector_bits": self.vector_bits,
            "vector_registers": self.vector_registers,
        }

    @staticmethod
    def from_dict(d: Mapping[str, object]) -> Target:
        """The target a module records (`as_dict`), as recorded (``host`` with this CPU's LLVM
        feature string: the code is for the CPU that compiles it)."""
        extensions = frozenset(e for e in str(d.get("extensions", "")).split(",") if e)
        caches = Caches(int(d["l1d"]), int(d["l2"]), int(d["l3"]), int(d.get("line", 64)))  # type: ignore[arg-type]
        work = ThreadWork(
            int(d.get("bytes_per_thread", DEFAULT_THREAD_WORK.bytes_per_thread)),  # type: ignore[arg-type]
            int(d.get("flops_per_thread", DEFAULT_THREAD_WORK.flops_per_thread)),  # type: ignore[arg-type]
        )
        features = Target.host().host_features if d.get("name") == "host" else ""
        return Target(
            str(d["name"]), str(d["cpu"]), str(d["level"]), extensions, caches, int(d["cores"]), work, features  # type: ignore[arg-type]
        )


#: (vector registers, vectors per tile row) -> tile rows, where measured or inherited from BLIS;
#: other combinations fill the registers by the formula of `Target.gemm_tile`
GEMM_ROWS: dict[tuple[int, int], int] = {
    (32, 4): 6,  # 24 accumulators + 4 panel vectors + 1 broadcast of 32 zmm
    (32, 3): 8,
    (32, 2): 12,
    (32, 1): 16,
    (16, 2): 6,  # BLIS haswell sgemm 6 x 16: 12 + 2 + 1 of 16 ymm
    (16, 1): 12,
}


def resolve(target: Target | str | None = None) -> Target:
    """``target`` as a `Target`: given, named, or (None) ``TG_TARGET``, else the host."""
    if isinstance(target, Target):
        return target
    if target is None:
        target = os.environ.get(TARGET_ENV, "") or "host"
    if not isinstance(target, str):
        raise TypeError(f"target must be a name (str) or a tensor_graphs.target.Target, got {type(target).__name__}")
    return Target.named(target)


def record(module, target: Target) -> None:
    """Record ``target`` on ``module`` (its ``tg.target`` attribute)."""
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i64

    module.attributes[TARGET_ATTR] = DictionaryAttr(
        {k: StringAttr(v) if isinstance(v, str) else IntegerAttr(v, i64) for k, v in target.as_dict().items()}
    )


def of_module(module, default: Target | str | None = None) -> Target:
    """The target ``module`` records; when it records none, ``default`` (`resolve`), recorded on it
    so that every later pass agrees."""
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr

    attr = module.attributes.get(TARGET_ATTR)
    if isinstance(attr, DictionaryAttr):
        values = {k: v.data if isinstance(v, StringAttr) else v.value.data for k, v in attr.data.items() if isinstance(v, StringAttr | IntegerAttr)}
        return Target.from_dict(values)
    target = resolve(default)
    record(module, target)
    return target


# --------------------------------------------------------------------------- the host


def cpu_model() -> str:
    """This CPU's marketing name (``/proc/cpuinfo``'s "model name"), for reports and the tuning
    database's machine key; the platform's processor string where there is no such file."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


@functools.cache
def _host_target() -> Target:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    have = {f[1:] for f in features.split(",") if f.startswith("+")}
    if "amx-tile" in have and not amx_state_permitted():  # the CPU has AMX, this kernel lends it no state
        have = {f for f in have if not f.startswith("amx")}
        features = ",".join("-" + f[1:] if f[1:].startswith("amx") else f for f in features.split(","))
    level = "x86-64"
    for candidate in LEVELS.values():
        if all(f in have for f in candidate.requires):
            level = candidate.name
    extensions = frozenset(e for e in EXTENSIONS if e in have)
    return Target("host", llvm.get_host_cpu_name(), level, extensions, _caches(), _cores(), DEFAULT_THREAD_WORK, features)


#: Linux's arch_prctl: the request for an extended state component, AMX's tile data
_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18


@functools.cache
def amx_state_permitted() -> bool:
    """Ask Linux for AMX's tile state for this process (``arch_prctl(ARCH_REQ_XCOMP_PERM,
    XFEATURE_XTILEDATA)``, once): True when granted. Without it the first tile instruction
    raises SIGILL, so a host whose kernel refuses (before Linux 5.16) has no AMX here."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0


@functools.cache
def _host_feature_set() -> frozenset[str]:
    return frozenset(f[1:] for f in Target.host().host_features.split(",") if f.startswith("+"))


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> Caches:
    """Cache sizes from sysfs (``index*/level``, ``type``, ``size``); the defaults where absent."""
    found: dict[str, int] = {}
    try:
        for index in sorted(root.glob("index*")):
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = _size((index / "size").read_text().strip())
            if level == "1" and kind == "Data":
                found["l1d"] = size
            elif level in ("2", "3") and kind == "Unified":
                found[f"l{level}"] = size
            line = index / "coherency_line_size"
            if level == "1" and kind == "Data" and line.exists():
                found["line"] = int(line.read_text().strip())
    except (OSError, ValueError):
        pass
    return replace(Caches(), **found)


def _size(text: str) -> int:
    """``"32K"`` / ``"8192K"`` / ``"1M"`` -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main() -> None:
    """The host target, and which targets run here (``make target``, printed by ``make test``)."""
    host = Target.host()
    print(f"host target: {host.describe()}")
    for name in LEVELS:
        missing = Target.named(name).missing_on_host()
        print(f"  {name:10} {'runs here' if not missing else 'cannot run here (no ' + ', '.join(missing) + ')'}")
