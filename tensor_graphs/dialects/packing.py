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

`layout_from_slot_name` also knows the other load-time layout, a 3x3 convolution's weight
transformed for Winograd's algorithm (`dialects.winograd.WinogradLayout`).

The weight comes as PyTorch stores it, ``[N, K]`` (``transposed``: ``B`` is its transpose, as in
``nn.Linear``), or ``[K, N]`` (transformers' ``Conv1D``). `PanelLayout` names the packed array
in the graph's weight table (``"<weight>@panels<nr>[t]"``) and packs it with NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Byte alignment of packed arrays (a panel row of whole vectors is then aligned loads).
PACKED_ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised C-contiguous float32 array of ``shape`` starting on a
    `PACKED_ALIGNMENT`-byte boundary."""
    size = int(np.prod(shape)) * 4
    raw = np.empty(size + PACKED_ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % PACKED_ALIGNMENT
    return raw[start : start + size].view(np.float32).reshape(shape)


@dataclass(frozen=True)
class PanelLayout:
    """How one weight is packed: ``source`` (its name), ``nr`` columns per panel, and whether the
    weight is stored ``[N, K]`` (``transposed``) or ``[K, N]``."""

    source: str
    nr: int
    transposed: bool

    @property
    def slot_name(self) -> str:
        """The packed array's name in the weight table."""
        return f"{self.source}@panels{self.nr}{'t' if self.transposed else ''}"

    @staticmethod
    def from_slot_name(name: str) -> PanelLayout | None:
        """The layout a weight-table name stands for, or None for a plain weight."""
        source, sep, tail = name.rpartition("@panels")
        if not sep or not tail:
            return None
        transposed = tail.endswith("t")
        digits = tail[:-1] if transposed else tail
        if not digits.isdigit() or int(digits) <= 0:
            return None
        return PanelLayout(source, int(digits), transposed)

    def shape(self, weight_shape: tuple[int, ...]) -> tuple[int, ...]:
        """``[panels, K, nr]`` for a weight of ``weight_shape``; a stack of weights ``[G, ...]``
        (a mixture of experts' weights) packs each: ``[G, panels, K, nr]``."""
        n, k = weight_shape[-2:] if self.transposed else weight_shape[-2:][::-1]
        return (*weight_shape[:-2], -(-n // self.nr), k, self.nr)

    def pack(self, weight: np.ndarray) -> np.ndarray:
        """The packed copy of ``weight`` (float32, 64-byte aligned, C-contiguous); of each matrix
        of a 3-D stack."""
        if weight.ndim not in (2, 3) or weight.dtype != np.float32:
            raise ValueError(
                f"weight '{self.source}': panels pack a 2-D float32 matrix (or a 3-D stack), got {weight.dtype}{list(weight.shape)}"
            )
        shape = self.shape(weight.shape)
        out = aligned_empty(shape)
        for matrix, packed in zip(weight.reshape(-1, *weight.shape[-2:]), out.reshape(-1, *shape[-3:])):
            self._pack_into(matrix, packed)
        return out

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


def layout_from_slot_name(name: str):
    """The load-time layout a weight-table slot name stands for (`PanelLayout`,
    `dialects.winograd.WinogradLayout`), or None for a plain weight. Each has ``source`` (the
    weight's name) and ``pack(weight)`` (the array bound in the slot)."""
    from tensor_graphs.dialects.winograd import WinogradLayout

    return PanelLayout.from_slot_name(name) or WinogradLayout.from_slot_name(name)
