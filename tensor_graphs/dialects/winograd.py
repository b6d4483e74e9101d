"""Winograd's minimal filtering for 3x3 convolutions at stride 1: the matrices and the weight transform.

``F(m x m, 3 x 3)`` (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)
computes an ``m x m`` tile of a stride-1 3x3 convolution from an ``a x a`` tile of its input
(``a = m + 2``, neighbouring tiles overlapping by 2) with ``a * a`` multiplies per channel pair
where the direct form takes ``9 m^2``::

    Y = A^T [ (G g G^T) * (B^T d B) ] A            (* elementwise; g the 3x3 filter, d the tile)

Summed over input channels, the elementwise products are ``a * a`` independent GEMMs::

    U[xi] = (G g G^T)[xi]   [Cout, C]      the weight, transformed once when the graph is loaded
    V[xi] = (B^T d B)[xi]   [C, tiles]     the input, transformed by the graph (`tg.winograd_conv`)
    M[xi] = U[xi] @ V[xi]   [Cout, tiles]
    Y     = A^T M A                        per output channel and tile

F(2x2, 3x3) does 16 multiplies per 4 outputs where the direct form does 36: 2.25x fewer FLOPs,
with transform coefficients 0, +-1 and +-1/2, so fp32 rounding stays within a few ulps of the
direct sum (`tests/test_vision_ops.py` checks 1e-5 relative to the output's scale). F(4x4, 3x3)
would be 4x fewer but amplifies rounding by its larger coefficients (up to 8 in ``A``); only
``m = 2`` is used (`TILES`).

`WinogradLayout` names the transformed weight in the graph's weight table
(``"<weight>@winograd2"``) and computes it with NumPy, in float64, when the graph is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensor_graphs.dialects.packing import aligned_empty


@dataclass(frozen=True)
class WinogradMatrices:
    """``B^T`` [a, a], ``G`` [a, 3] and ``A^T`` [m, a] of F(m x m, 3 x 3)."""

    bt: tuple[tuple[float, ...], ...]
    g: tuple[tuple[float, ...], ...]
    at: tuple[tuple[float, ...], ...]

    @property
    def m(self) -> int:
        """Outputs per tile side."""
        return len(self.at)

    @property
    def a(self) -> int:
        """Inputs per tile side (``m + 2``)."""
        return len(self.bt)


#: Output tile side -> its matrices (Lavin & Gray's F(2x2, 3x3)).
TILES: dict[int, WinogradMatrices] = {
    2: WinogradMatrices(
        bt=((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
        g=((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
        at=((1, 1, 1, 0), (0, 1, -1, -1)),
    ),
}


def matrices(m: int) -> WinogradMatrices:
    try:
        return TILES[m]
    except KeyError:
        raise ValueError(f"no Winograd transform for {m}x{m} output tiles (known: {sorted(TILES)})") from None


def tiles(size: int, m: int) -> int:
    """Tiles of ``m`` outputs covering ``size`` outputs (the last one may hang over the edge)."""
    return -(-size // m)


def transform_weight(weight: np.ndarray, m: int) -> np.ndarray:
    """``U[xi, co, c] = (G w[co, c] G^T)[xi]`` for ``weight`` [Cout, C, 3, 3], in float64."""
    mats = matrices(m)
    g = np.asarray(mats.g, np.float64)
    u = np.einsum("ik,ockl,jl->ijoc", g, weight.astype(np.float64), g)  # [a, a, Cout, C]
    return u.reshape(mats.a * mats.a, *weight.shape[:2])


@dataclass(frozen=True)
class WinogradLayout:
    """A 3x3 convolution weight ``source`` [Cout, C, 3, 3] transformed for F(m x m, 3 x 3):
    ``[a * a, Cout, C]`` (`transform_weight`), each ``[Cout, C]`` matrix the A of one GEMM."""

    source: str
    m: int

    @property
    def slot_name(self) -> str:
        """The transformed array's name in the weight table."""
        return f"{self.source}@winograd{self.m}"

    @staticmethod
    def from_slot_name(name: str) -> WinogradLayout | None:
        source, sep, tail = name.rpartition("@winograd")
        if not sep or not tail.isdigit() or int(tail) not in TILES:
            return None
        return WinogradLayout(source, int(tail))

    def packs(self, weight_shape: tuple[int, ...]) -> str | None:
        """None when a weight of ``weight_shape`` can be transformed, else what it must be."""
        return None if len(weight_shape) == 4 and tuple(weight_shape[2:]) == (3, 3) else "a [Cout, C, 3, 3] weight"

    def shape(self, weight_shape: tuple[int, ...]) -> tuple[int, ...]:
        a = matrices(self.m).a
        return (a * a, *weight_shape[:2])

    def pack(self, weight: np.ndarray) -> np.ndarray:
        """The transformed copy of ``weight`` (float32, 64-byte aligned, C-contiguous)."""
        if weight.ndim != 4 or weight.shape[2:] != (3, 3) or weight.dtype != np.float32:
            raise ValueError(f"weight '{self.source}': the Winograd transform takes a float32 [Cout, C, 3, 3], got {weight.dtype}{list(weight.shape)}")
        out = aligned_empty(self.shape(weight.shape))
        out[...] = transform_weight(weight, self.m)
        return out
