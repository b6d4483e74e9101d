"""Weights packed into column panels, the layout `buf.packed_matmul` reads (`buf.packed_weight`).

A GEMM ``C[M, N] = A[M, K] @ B[K, N]`` whose ``B`` is a weight reads ``B`` in panels of ``nr``
columns: panel ``p`` holds columns ``[p * nr, (p + 1) * nr)`` as one contiguous, row-major
``K x nr`` block, the last panel zero-padded past ``N``::

    packed[p, k, j] = B[k, p * nr + j]      (0 where p * nr + j >= N)     shape [ceil(N / nr), K, nr]

The GEMM's inner loop then loads one row of ``nr`` floats of a panel per ``k`` (one cache line
per 16 floats, in order), which is what OpenBLAS's sgemm packs ``B`` into on every call; here it
is done once, when the graph is loaded. A matrix-vector product streams the same panels. ``nr``
is the width of the target's GEMM register tile (`Target.panel_columns_for`: 64 on AVX-512, 16
on AVX2, 8 on SSE), so the packed layout follows the target a graph is compiled for.

`layout_from_slot_name` also knows the other load-time layouts: a 3x3 convolution's weight
transformed for Winograd's algorithm (`dialects.winograd.WinogradLayout`), and a weight as the
bf16 rows of a GEMM's lhs (`Bf16RowsLayout`: a convolution's weight in its bf16 GEMM).

The weight comes as PyTorch stores it, ``[N, K]`` (``transposed``: ``B`` is its transpose, as in
``nn.Linear``), or ``[K, N]`` (transformers' ``Conv1D``). `PanelLayout` names the packed array
in the graph's weight table (``"<weight>@panels<nr>[t]"``) and packs it with NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Byte alignment of packed arrays (a panel row of whole vectors is then aligned loads).
PACKED_ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` (float32 unless ``dtype``) starting on a
    `PACKED_ALIGNMENT`-byte boundary."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + PACKED_ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % PACKED_ALIGNMENT
    return raw[start : start + size].view(dtype).reshape(shape)


#: Formats of packed panels besides float32 (`PanelLayout.format`), for matrix-vector products
#: that stream the weight (`buf.quantized_matvec`): ``bf16`` (the top half of each float32,
#: rounded to nearest even; stored as uint16, each panel row as ``nr / 2`` 32-bit words, word
#: ``j`` holding column ``j`` in its high half and column ``j + nr / 2`` in its low half, so
#: that a vector of words gives two vectors of floats by a mask and a shift: `bf16_pairs`),
#: ``int8`` (each column ``n`` of ``B`` as
#: ``round(B[:, n] / scale[n])`` in [-127, 127], ``scale[n] = max |B[:, n]| / 127``) and
#: ``int8scales`` (those scales, ``[panels, nr]`` float32, 0 past ``N``), and ``bf16k`` (bf16
#: paired along K for AVX512-BF16's ``vdpbf16ps``: panel rows ``[ceil(K / 2), 2 nr]``, word ``j``
#: of row ``kk`` holding ``B[2 kk, j]`` in its low half and ``B[2 kk + 1, j]`` in its high half,
#: 0 past K: `bf16_k_pairs`).
FORMATS: dict[str, np.dtype] = {"f32": np.dtype(np.float32), "bf16": np.dtype(np.uint16),
                                 "int8": np.dtype(np.int8), "int8scales": np.dtype(np.float32),
                                 "bf16k": np.dtype(np.uint16)}


@dataclass(frozen=True)
class Int4Scheme:
    """4-bit weights in groups of ``group`` along K, each group of a column with its own scale
    (bf16) and, with ``zero_points``, its own zero point (0..15; else 8): ``B[k, n] = (q[k, n] -
    zero[g, n]) * scale[g, n]`` for ``g = k // group``, ``q`` in 0..15. Symmetric (llama.cpp's
    Q4_0 at group 32): the scale is the group's value of largest magnitude over -8, so that it
    is -8 exactly. With zero points (GPTQ / AWQ at group 128): the group's range with 0 in it over
    15, the zero point the rounded ``-min / scale``.

    Its formats (`FORMATS`): ``name`` (``int4g32``, ``int4zg128``): the codes, each panel row as
    ``nr / 2`` bytes, byte ``j`` holding column ``j`` in its low nibble and column ``j + nr / 2``
    in its high one (a vector of bytes gives two vectors of columns by a mask and a shift, as
    `bf16_pairs`), ``[panels, K, nr / 2]``; ``name + "scales"``: bf16 ``[panels, ceil(K /
    group), nr]``; ``name + "zeros"`` (with zero points): uint8, the same shape. Padding columns
    and rows past K have code, scale and zero 0."""

    group: int
    zero_points: bool

    @property
    def name(self) -> str:
        return f"int4{'z' if self.zero_points else ''}g{self.group}"

    @property
    def parts(self) -> tuple[str, ...]:
        """The formats of its packed arrays: codes, scales (and zero points)."""
        return (self.name, f"{self.name}scales") + ((f"{self.name}zeros",) if self.zero_points else ())

    @staticmethod
    def of(fmt: str) -> tuple[Int4Scheme, str] | None:
        """The scheme a format is part of and which part (``""``, ``scales``, ``zeros``), or None."""
        for scheme in INT4_SCHEMES:
            if fmt.startswith(scheme.name) and fmt[len(scheme.name):] in ("", "scales", "zeros"):
                part = fmt[len(scheme.name):]
                return (scheme, part) if part != "zeros" or scheme.zero_points else None
        return None


#: The int4 schemes (`Int4Scheme`): groups of 32, 64 and 128, symmetric and with zero points.
INT4_SCHEMES = tuple(Int4Scheme(g, z) for z in (False, True) for g in (32, 64, 128))
for _scheme in INT4_SCHEMES:
    FORMATS.update({_scheme.name: np.dtype(np.uint8), f"{_scheme.name}scales": np.dtype(np.uint16),
                    f"{_scheme.name}zeros": np.dtype(np.uint8)})

#: The int4 weights that integer dot products read (``vpdpbusd``: 4 unsigned bytes of a column
#: times 4 signed bytes of the activations per 32-bit lane): Q4_0's codes and scales (symmetric,
#: groups of 32: `INT4_DOT_SCHEME`) in their order: ``int4dot`` ``[panels, ceil(K / 8), 4 nr]``,
#: row ``o`` holding K rows ``8 o .. 8 o + 7``, column ``j`` in bytes ``4 j .. 4 j + 3``, byte ``t``
#: with row ``8 o + t`` in its low nibble and ``8 o + 4 + t`` in its high one (rows past K: 0);
#: ``int4dotscales``: as ``int4g32scales``.
INT4_DOT_SCHEME = Int4Scheme(32, False)
FORMATS.update({"int4dot": np.dtype(np.uint8), "int4dotscales": np.dtype(np.uint16)})

#: The int8 weights of the int8 GEMM (`buf.packed_matmul` over quads, ``vpdpbusd`` / AMX's
#: ``tdpbusd``: 4 unsigned bytes of the activations times 4 signed bytes of a column per 32-bit
#: lane): ``int8k`` ``[panels, ceil(K / 4) + 2, 4 nr]`` int8, row ``o < ceil(K / 4)`` holding K
#: rows ``4 o .. 4 o + 3`` of each column ``j`` in bytes ``4 j .. 4 j + 3`` (byte ``t``: row
#: ``4 o + t``; 0 past K), each column ``round(B[:, n] / scale[n])`` in [-127, 127] (`int8_scales`);
#: the two rows after them are ``nr`` float32 each (`INT8K_SCALE_ROWS`): the columns' ``scale``
#: and ``128 * sum_k q[k, n]`` (the activations' codes are offset by 128 to be unsigned: this is
#: what the offset adds to each column's sum, taken out again after it). 0 past N.
FORMATS["int8k"] = np.dtype(np.int8)
#: The rows of float32 after an ``int8k`` panel's codes: its columns' scales and offsets
INT8K_SCALE_ROWS = 2
#: The activations' codes are ``round(x / scale) + INT8_ZERO`` (unsigned bytes, `buf.quantize_rows`)
INT8_ZERO = 128


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even (NaN stays NaN)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def bf16_pairs(panels: np.ndarray) -> np.ndarray:
    """``[..., nr]`` bf16 panel rows -> the paired order of the ``bf16`` format (`FORMATS`):
    ``[c_{nr/2}, c_0, c_{nr/2+1}, c_1, ...]`` (little-endian words: the low half first)."""
    half = panels.shape[-1] // 2
    out = np.empty_like(panels)
    out[..., 0::2], out[..., 1::2] = panels[..., half:], panels[..., :half]
    return out


def from_bf16_pairs(panels: np.ndarray) -> np.ndarray:
    """The inverse of `bf16_pairs`: panel rows back in column order."""
    return np.concatenate([panels[..., 1::2], panels[..., 0::2]], axis=-1)


def bf16_k_pairs(panels: np.ndarray) -> np.ndarray:
    """``[..., K, nr]`` bf16 panels -> the ``bf16k`` format (`FORMATS`): ``[..., ceil(K / 2), 2 nr]``,
    rows 2 kk and 2 kk + 1 interleaved column by column (an odd K gets a zero row)."""
    k, nr = panels.shape[-2:]
    if k % 2:
        panels = np.concatenate([panels, np.zeros((*panels.shape[:-2], 1, nr), panels.dtype)], axis=-2)
    pairs = panels.reshape(*panels.shape[:-2], -1, 2, nr)
    return np.ascontiguousarray(np.swapaxes(pairs, -1, -2)).reshape(*panels.shape[:-2], -1, 2 * nr)


def from_bf16_k_pairs(panels: np.ndarray, k: int) -> np.ndarray:
    """The inverse of `bf16_k_pairs`: ``[..., K, nr]`` panels of ``k`` rows."""
    nr = panels.shape[-1] // 2
    pairs = np.swapaxes(panels.reshape(*panels.shape[:-1], nr, 2), -1, -2)
    return pairs.reshape(*panels.shape[:-2], -1, nr)[..., :k, :]


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32, exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def int4_quantize(wt: np.ndarray, scheme: Int4Scheme) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[N, K]`` float32 -> (codes ``[N, K]`` uint8 in 0..15, scales ``[N, G]`` bf16 bits,
    zero points ``[N, G]`` uint8) of `Int4Scheme` ``scheme``, ``G = ceil(K / group)``. Codes are
    rounded to nearest against the scale as stored (bf16), then clipped."""
    n, k = wt.shape
    groups = -(-k // scheme.group)
    blocks = np.zeros((n, groups * scheme.group), np.float32)
    blocks[:, :k] = wt
    blocks = blocks.reshape(n, groups, scheme.group)
    if scheme.zero_points:
        lo, hi = np.minimum(blocks.min(-1), 0.0), np.maximum(blocks.max(-1), 0.0)
        scale = from_bf16(to_bf16((hi - lo) / 15.0))
    else:
        at = np.abs(blocks).argmax(-1)[..., None]
        scale = from_bf16(to_bf16(np.take_along_axis(blocks, at, -1)[..., 0] / -8.0))
    safe = np.where(scale != 0, scale, 1.0)
    zero = np.clip(np.rint(-lo / safe), 0, 15) if scheme.zero_points else np.full(scale.shape, 8.0)
    codes = np.clip(np.rint(blocks / safe[..., None]) + zero[..., None], 0, 15).astype(np.uint8)
    return codes.reshape(n, -1)[:, :k], to_bf16(scale), zero.astype(np.uint8)


def int4_dequantize(codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray, group: int) -> np.ndarray:
    """The ``[N, K]`` weight `int4_quantize`'s parts stand for, in float64."""
    g = np.arange(codes.shape[1]) // group
    return (codes.astype(np.float64) - zeros[:, g]) * from_bf16(scales)[:, g].astype(np.float64)


def int8_scales(wt: np.ndarray) -> np.ndarray:
    """Per output column scales of a ``[N, K]`` weight: ``max |row| / 127`` (1 for a zero row)."""
    peak = np.abs(wt).max(axis=1) if wt.shape[1] else np.zeros(wt.shape[0], np.float32)
    return np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)


@dataclass(frozen=True)
class PanelLayout:
    """How one weight is packed: ``source`` (its name), ``nr`` columns per panel, and whether the
    weight is stored ``[N, K]`` (``transposed``) or ``[K, N]``."""

    source: str
    nr: int
    transposed: bool
    #: the element format of the panels (`FORMATS`): float32, or bf16 / int8 (+ its scales)
    format: str = "f32"

    @property
    def bf16_source(self) -> bool:
        """True when a bf16 model's weight (its bits, uint16) packs as it is: bf16 panels hold
        its values exactly."""
        return self.format in ("bf16", "bf16k")

    @property
    def slot_name(self) -> str:
        """The packed array's name in the weight table (``w@panels16t``, ``w@bf16panels16t``)."""
        kind = "panels" if self.format == "f32" else f"{self.format}panels"
        return f"{self.source}@{kind}{self.nr}{'t' if self.transposed else ''}"

    @staticmethod
    def from_slot_name(name: str) -> PanelLayout | None:
        """The layout a weight-table name stands for, or None for a plain weight."""
        source, sep, tail = name.rpartition("@")
        fmt, kind, tail = tail.partition("panels")
        if not sep or not kind or not tail or (fmt or "f32") not in FORMATS:
            return None
        transposed = tail.endswith("t")
        digits = tail[:-1] if transposed else tail
        if not digits.isdigit() or int(digits) <= 0:
            return None
        return PanelLayout(source, int(digits), transposed, fmt or "f32")

    def packs(self, weight_shape: tuple[int, ...]) -> str | None:
        """None when a weight of ``weight_shape`` can be packed so, else what it must be."""
        ranks = (2, 3) if self.format == "f32" else (2,)
        return None if len(weight_shape) in ranks else f"a weight of rank {' or '.join(map(str, ranks))}"

    def shape(self, weight_shape: tuple[int, ...]) -> tuple[int, ...]:
        """``[panels, K, nr]`` for a weight of ``weight_shape``; a stack of weights ``[G, ...]``
        (a mixture of experts' weights) packs each: ``[G, panels, K, nr]``. The scales of int8
        panels: ``[panels, nr]``; bf16 paired along K: ``[panels, ceil(K / 2), 2 nr]``."""
        n, k = weight_shape[-2:] if self.transposed else weight_shape[-2:][::-1]
        if self.format == "int8scales":
            return (*weight_shape[:-2], -(-n // self.nr), self.nr)
        if self.format == "bf16k":
            return (*weight_shape[:-2], -(-n // self.nr), -(-k // 2), 2 * self.nr)
        if self.format == "int4dot":
            return (*weight_shape[:-2], -(-n // self.nr), -(-k // 8), 4 * self.nr)
        if self.format == "int8k":
            return (*weight_shape[:-2], -(-n // self.nr), -(-k // 4) + INT8K_SCALE_ROWS, 4 * self.nr)
        if self.format == "int4dotscales":
            return (*weight_shape[:-2], -(-n // self.nr), -(-k // INT4_DOT_SCHEME.group), self.nr)
        if (int4 := Int4Scheme.of(self.format)) is not None:
            scheme, part = int4
            if part:
                return (*weight_shape[:-2], -(-n // self.nr), -(-k // scheme.group), self.nr)
            return (*weight_shape[:-2], -(-n // self.nr), k, self.nr // 2)
        return (*weight_shape[:-2], -(-n // self.nr), k, self.nr)

    def pack(self, weight: np.ndarray) -> np.ndarray:
        """The packed copy of ``weight`` (in `format`, 64-byte aligned, C-contiguous); of each
        matrix of a 3-D stack."""
        if weight.dtype == np.uint16 and self.bf16_source:  # a bf16 weight's bits: exact in float32
            weight = from_bf16(weight)
        if weight.ndim not in (2, 3) or weight.dtype != np.float32:
            raise ValueError(
                f"weight '{self.source}': panels pack a 2-D float32 matrix (or a 3-D stack), got {weight.dtype}{list(weight.shape)}"
            )
        if self.format != "f32":
            return self._pack_lowp(weight)
        shape = self.shape(weight.shape)
        out = aligned_empty(shape)
        for matrix, packed in zip(weight.reshape(-1, *weight.shape[-2:]), out.reshape(-1, *shape[-3:])):
            self._pack_into(matrix, packed)
        return out

    def _pack_lowp(self, weight: np.ndarray) -> np.ndarray:
        if weight.ndim != 2:
            raise ValueError(f"weight '{self.source}': {self.format} panels pack a 2-D matrix, got {list(weight.shape)}")
        f32 = PanelLayout(self.source, self.nr, self.transposed).pack(weight)
        out = aligned_empty(self.shape(weight.shape), FORMATS[self.format])
        if self.format == "bf16":
            if self.nr % 2:
                raise ValueError(f"weight '{self.source}': bf16 panels pair columns: {self.nr} is odd")
            out[...] = bf16_pairs(to_bf16(f32))
            return out
        if self.format == "bf16k":
            out[...] = bf16_k_pairs(to_bf16(f32))
            return out
        if (int4 := Int4Scheme.of(self.format)) is not None:
            out[...] = self._pack_int4(weight, *int4)
            return out
        if self.format in ("int4dot", "int4dotscales"):
            out[...] = self._pack_int4_dot(weight, self.format.removeprefix("int4dot"))
            return out
        if self.format == "int8k":
            out[...] = self._pack_int8k(weight)
            return out
        wt = weight if self.transposed else weight.T
        scales = np.zeros(out.shape if self.format == "int8scales" else (f32.shape[0], self.nr), np.float32)
        scales.reshape(-1)[: wt.shape[0]] = int8_scales(wt)
        if self.format == "int8scales":
            out[...] = scales
            return out
        safe = np.where(scales > 0, scales, 1.0)[:, None, :]
        out[...] = np.clip(np.rint(f32 / safe), -127, 127).astype(np.int8)
        return out

    def _pack_int4(self, weight: np.ndarray, scheme: Int4Scheme, part: str) -> np.ndarray:
        """One part of ``weight`` quantised by ``scheme`` (`int4_quantize`) in its panel layout."""
        if self.nr % 2:
            raise ValueError(f"weight '{self.source}': int4 panels pair columns: {self.nr} is odd")
        wt = weight if self.transposed else weight.T
        codes, scales, zeros = int4_quantize(wt, scheme)
        if part:  # [N, G] -> [panels, G, nr], 0 past N
            values = scales if part == "scales" else zeros
            panels = -(-wt.shape[0] // self.nr)
            out = np.zeros((panels * self.nr, values.shape[1]), values.dtype)
            out[: wt.shape[0]] = values
            return out.reshape(panels, self.nr, -1).transpose(0, 2, 1)
        q = PanelLayout(self.source, self.nr, True).pack(codes.astype(np.float32)).astype(np.uint8)
        half = self.nr // 2
        return q[..., :half] | (q[..., half:] << 4)

    def _pack_int4_dot(self, weight: np.ndarray, part: str) -> np.ndarray:
        """The ``int4dot`` codes (or, ``part == "scales"``, their scales) of ``weight``."""
        if part:
            return PanelLayout(self.source, self.nr, self.transposed, f"{INT4_DOT_SCHEME.name}scales").pack(weight)
        wt = weight if self.transposed else weight.T
        codes = int4_quantize(wt, INT4_DOT_SCHEME)[0]
        k = codes.shape[1]
        padded = np.zeros((codes.shape[0], -(-k // 8) * 8), np.float32)
        padded[:, :k] = codes
        q = PanelLayout(self.source, self.nr, True).pack(padded).astype(np.uint8)  # [P, K8 * 8, nr]
        octets = q.reshape(q.shape[0], -1, 2, 4, self.nr)  # [P, K8, half, t, nr]
        nibbles = octets[:, :, 0] | (octets[:, :, 1] << 4)  # [P, K8, t, nr]
        return np.ascontiguousarray(nibbles.transpose(0, 1, 3, 2)).reshape(q.shape[0], -1, 4 * self.nr)

    def _pack_int8k(self, weight: np.ndarray) -> np.ndarray:
        """The ``int8k`` panels of ``weight`` (`FORMATS`): its int8 codes in quads along K, then
        each panel's scales and offsets as float32 bytes."""
        wt = weight if self.transposed else weight.T
        n, k = wt.shape
        scales = int8_scales(wt)
        codes = np.zeros((n, -(-k // 4) * 4), np.float32)
        codes[:, :k] = np.clip(np.rint(wt / scales[:, None]), -127, 127)
        q = PanelLayout(self.source, self.nr, True).pack(codes).astype(np.int8)  # [P, K4 * 4, nr]
        quads = np.ascontiguousarray(q.reshape(q.shape[0], -1, 4, self.nr).transpose(0, 1, 3, 2))
        columns = np.zeros((INT8K_SCALE_ROWS, q.shape[0] * self.nr), np.float32)
        columns[0, :n], columns[1, :n] = scales, INT8_ZERO * codes.sum(axis=1, dtype=np.float64)
        tail = np.ascontiguousarray(columns.reshape(INT8K_SCALE_ROWS, q.shape[0], self.nr).transpose(1, 0, 2))
        return np.concatenate([quads.reshape(q.shape[0], -1, 4 * self.nr), tail.view(np.int8)], axis=1)

    def _pack_into(self, weight: np.ndarray, out: np.ndarray) -> None:
        wt = weight if self.transposed else weight.T  # [N, K]
        n, k = wt.shape
        panels, _, nr = out.shape
        full = n // nr
        out[:full] = wt[: full * nr].reshape(full, nr, k).transpose(0, 2, 1)
        if full < panels:
            rest = n - full * nr
            out[full, :, :rest] = wt[full * nr :].T
            out[full, :, rest:] = 0.0


@dataclass(frozen=True)
class Bf16RowsLayout:
    """A weight ``source`` ``[M, ...]`` as the bf16 lhs of a GEMM whose rhs the graph packs (a
    convolution's ``W[Cout, C KH KW]`` times its windows): the matrix ``[M, K]`` (K the product
    of the other dims) rounded to bf16 (`to_bf16`), each row padded with a zero to an even K, so
    that its words are pairs along K (`buf.packed_matmul` over bf16 pairs): ``[M, 2 ceil(K / 2)]``
    bf16 bits."""

    source: str
    #: a bf16 model's weight (its bits, uint16) packs as it is: bf16 rows hold its values exactly
    bf16_source = True

    @property
    def slot_name(self) -> str:
        return f"{self.source}@bf16rows"

    @staticmethod
    def from_slot_name(name: str) -> Bf16RowsLayout | None:
        source, sep, tail = name.rpartition("@bf16rows")
        return Bf16RowsLayout(source) if sep and not tail else None

    def packs(self, weight_shape: tuple[int, ...]) -> str | None:
        return None if len(weight_shape) >= 2 else "a weight of rank 2 or more"

    def shape(self, weight_shape: tuple[int, ...]) -> tuple[int, ...]:
        k = int(np.prod(weight_shape[1:]))
        return (weight_shape[0], 2 * -(-k // 2))

    def pack(self, weight: np.ndarray) -> np.ndarray:
        """The bf16 rows of ``weight`` (float32, or a bf16 model's bits: exact), 64-byte aligned."""
        if weight.dtype == np.uint16:
            weight = from_bf16(weight)
        if weight.ndim < 2 or weight.dtype != np.float32:
            raise ValueError(f"weight '{self.source}': bf16 rows take a float32 weight of rank 2 or more, "
                             f"got {weight.dtype}{list(weight.shape)}")
        rows = weight.reshape(weight.shape[0], -1)
        out = aligned_empty(self.shape(weight.shape), np.uint16)
        out[:, : rows.shape[1]] = to_bf16(rows)
        out[:, rows.shape[1]:] = 0
        return out


def layout_from_slot_name(name: str):
    """The load-time layout a weight-table slot name stands for (`PanelLayout`,
    `dialects.winograd.WinogradLayout`), or None for a plain weight. Each has ``source`` (the
    weight's name) and ``pack(weight)`` (the array bound in the slot)."""
    from tensor_graphs.dialects.winograd import WinogradLayout

    return PanelLayout.from_slot_name(name) or WinogradLayout.from_slot_name(name) or Bf16RowsLayout.from_slot_name(name)
