"""Kernel scratch layouts: the one place where the lowering (which allocates scratch) and the
kernel emitters (which carve it up) agree on sizes and offsets.

A kernel that needs temporary memory gets it as a second output buffer, a ``buf.alloc`` that
`plan-memory` places in the arena like any other buffer, live for that one op.

Attention (``buf.attention ins(q, k, v[, mask]) outs(out, scratch)``) is tiled flash-style:
one block of ``Br`` query rows against one block of ``Bc`` keys at a time, with an online
softmax, so it never holds a seq x seq matrix. Its scratch is one ``memref<N x f32>``:

```
[ scores Br*Bc' | m Br' | l Br' | acc Br*Dv' | kt D*Bc' | vp Bc*Dv' (only when Dv % 16 != 0) ]
  scores: q_block @ k_block^T * scale (+ mask), row-major [Br, Bc']
  m:      running row maximum            l: running row sum of exp(score - m)
  acc:    running output rows, row-major [Br, Dv']
  kt:     the key block transposed, [D, Bc'] (zero past the block's keys): the GEMM's B panel
  vp:     the value block with its rows padded to Dv' floats (zero past Dv)
Br = min(B, Sq), Bc = min(B, Sk), B from the target (`attention_block`: the largest multiple of
16 up to 64 whose tiles, with the q, k and v blocks they read, fit half of L2); Bc', Dv', Br' are Bc, Dv, Br rounded up to 16 (whole vectors),
and every part starts at a multiple of 16 floats (64 bytes): 16 is `MAX_FLOAT_LANES`, the widest
vector of any target, so the one layout serves every target's tiles.
```

With bf16 products (``buf.attention {bf16_products}``, `AttentionTiles.pairs`;
`kernels_attention_bf16`) the scores are held transposed, keys by queries, so that the softmax
runs down the columns; the two GEMMs read words of two bf16 (pairs along their K) in whole tiles
of AMX's 16 rows by 16 words: a block's queries are Br rounded up to 16 (Br''), each K is
padded with zeros to whole tiles, and without a causal mask up to twice as many queries share a
key block (`pair_query_block`: each key block is moved into pairs once for them all; a causal
block stays Bc queries, so that the key blocks above the diagonal are still skipped):

```
[ st Bc'*Br'' | m Br'' | l Br'' | acc Dv'*Br'' | kw Bc'*Dw | vt Dv'*Kw | qt Dw*Br'' | pt Kw*Br'' | mu Br'' | alpha Br'' ]
  st:    the scores transposed, S^T = K_blk Q_blk^T (+ mask^T), then the probabilities
  acc:   the running output transposed, [Dv', Br'']
  kw:    the key block in bf16, row-major words (pairs along D)            (kw ... pt: words)
  vt:    the value block transposed, its pairs along the keys [Dv', Kw]
  qt:    the query block times the scale, transposed, pairs along D [Dw, Br'']
  pt:    the probabilities' pairs along the keys [Kw, Br'']
  mu, alpha: the block's new running max (0 for -inf) and the old sums' factor
Dw = ceil(D / 2) and Kw = ceil(Bc / 2) rounded up to 16 words; the words past D, and in vt and
pt past the block's keys, are zero.
```

The kernel runs its (batch, head, query block) items on several threads, each with its own
set of tiles: the scratch holds ``slots`` sets, set ``t`` from element ``t * slot_elements`` on
(``slot_elements`` is the set rounded up to 16 floats, so every set starts 64-byte aligned), and
the kernel uses at most that many threads. One slot is exactly one set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import MemRefType, f32

from tensor_graphs.target import MAX_FLOAT_LANES, Target

#: Rows of an AMX tile, and words (bf16 pairs) of its row: the bf16 layout's unit
PAIR_TILE = 16

#: The largest query rows per tile (``Br``) and keys per tile (``Bc``), before clamping to the
#: sequence: 64 measured best on AVX2 and AVX-512 hosts (L2 512 KiB to 2 MiB); a smaller L2 or a
#: wide head gets smaller blocks from `attention_block`.
ATTENTION_BLOCK_MAX = 64


@dataclass(frozen=True)
class AttentionTiles:
    """Tile sizes of one attention call and where each part of its scratch starts (in f32 elements)."""

    br: int  #: query rows per tile
    bc: int  #: keys per tile
    dv: int  #: value head dim
    d: int = 0  #: query/key head dim
    pairs: bool = False  #: bf16 products: the module doc's second layout

    @property
    def rows(self) -> int:
        """Queries of the scores and acc tiles: ``Br``, with pairs rounded up to whole AMX tiles."""
        return _round_up(self.br, PAIR_TILE) if self.pairs else self.br

    @property
    def d_words(self) -> int:
        """With pairs: words of a query row and pair rows of kt, ``ceil(D / 2)`` in whole tiles."""
        return _round_up(-(-self.d // 2), PAIR_TILE)

    @property
    def key_words(self) -> int:
        """With pairs: words of a row of probabilities and pair rows of vp, ``ceil(Bc / 2)`` in
        whole tiles."""
        return _round_up(-(-self.bc // 2), PAIR_TILE)

    @property
    def bc_pad(self) -> int:
        """Row stride of the scores and kt tiles: ``Bc`` in whole vectors."""
        return _vectors(self.bc)

    @property
    def dv_pad(self) -> int:
        """Row stride of the acc and vp tiles: ``Dv`` in whole vectors."""
        return _vectors(self.dv)

    @property
    def scores(self) -> int:
        return 0

    @property
    def m(self) -> int:
        return self.rows * self.bc_pad

    @property
    def l(self) -> int:  # noqa: E743 (the flash-attention paper's name)
        return self.m + _vectors(self.br)

    @property
    def acc(self) -> int:
        return self.l + _vectors(self.br)

    @property
    def kt(self) -> int:
        return self.acc + self.rows * self.dv_pad

    @property
    def vp(self) -> int:
        return self.kt + (self.d_words if self.pairs else self.d) * self.bc_pad

    @property
    def pads_values(self) -> bool:
        """The float32 product copies the value rows into ``vp``: their length is not whole vectors."""
        return self.dv % MAX_FLOAT_LANES != 0

    @property
    def vp_elements(self) -> int:
        """Of vp: ``Bc`` rows where the float32 product pads the values; with pairs, vt."""
        return self.key_words * self.dv_pad if self.pairs else self.bc * self.dv_pad if self.pads_values else 0

    @property
    def qt(self) -> int:
        """With pairs: where the query block's pairs start."""
        return self.vp + self.vp_elements

    @property
    def pt(self) -> int:
        """With pairs: where the probabilities' pairs start."""
        return self.qt + self.rows * self.d_words

    @property
    def mu(self) -> int:
        """With pairs: where the block's running max (0 for -inf) starts."""
        return self.pt + self.rows * self.key_words

    @property
    def alpha(self) -> int:
        """With pairs: where the factor of the old sums starts."""
        return self.mu + self.rows

    @property
    def elements(self) -> int:
        return self.alpha + self.rows if self.pairs else self.qt

    @property
    def slot_elements(self) -> int:
        """One set of tiles rounded up to a multiple of 16 floats (64 bytes)."""
        return -(-self.elements // MAX_FLOAT_LANES) * MAX_FLOAT_LANES

    def slots(self, scratch_elements: int) -> int:
        """How many sets of tiles a scratch of ``scratch_elements`` holds (0: not even one)."""
        if scratch_elements < self.elements:
            return 0
        return 1 + (scratch_elements - self.elements) // self.slot_elements


def _vectors(n: int) -> int:
    """``n`` floats rounded up to whole vectors of the widest target (16 floats)."""
    return _round_up(n, MAX_FLOAT_LANES)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def attention_block(d: int, dv: int, target: Target) -> int:
    """Query rows and keys per tile for head dims ``d``/``dv`` on ``target``: the largest multiple
    of 16 up to `ATTENTION_BLOCK_MAX` whose working set (the q, k and v blocks read, the scores,
    acc and kt tiles written; f32) fits half of the target's L2, so one thread's tiles stay in its
    L2 beside what streams through. At least 16 (one tile row of vectors)."""
    block = ATTENTION_BLOCK_MAX
    while block > MAX_FLOAT_LANES and _working_set(block, d, dv) > target.caches.l2 // 2:
        block -= MAX_FLOAT_LANES
    return block


def _working_set(block: int, d: int, dv: int, keys: int | None = None) -> int:
    """Bytes one (query block, key block) step touches: q, k, v blocks, scores, acc and kt
    (``block`` queries, ``keys`` keys: as many by default)."""
    keys = block if keys is None else keys
    return 4 * (block * d + keys * d + keys * dv + block * keys + block * dv + d * keys)


def pair_query_block(d: int, dv: int, target: Target) -> int:
    """Queries per block with bf16 products: twice `attention_block` where that working set
    still fits half of the target's L2 (each key block is moved into pairs once per query block),
    else as many."""
    block = attention_block(d, dv, target)
    return 2 * block if _working_set(2 * block, d, dv, block) <= target.caches.l2 // 2 else block


def attention_tiles(
    q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int], target: Target, pairs: bool = False,
    causal: bool = False,
) -> AttentionTiles:
    """Tiles for q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv] on ``target`` (with ``pairs``:
    bf16 products, of a ``causal`` attention or not). The lowering (which sizes the scratch) and
    the kernel (which carves it) both call this with the module's target, so they agree."""
    block = attention_block(q_shape[-1], v_shape[-1], target)
    queries = pair_query_block(q_shape[-1], v_shape[-1], target) if pairs and not causal else block
    return AttentionTiles(br=min(queries, q_shape[-2]), bc=min(block, k_shape[-2]), dv=v_shape[-1], d=q_shape[-1],
                          pairs=pairs)


def attention_scratch_elements(
    q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int], target: Target, slots: int = 1,
    pairs: bool = False, causal: bool = False,
) -> int:
    """f32 elements of attention scratch for ``slots`` threads, one set of tiles each (layout in
    the module doc)."""
    tiles = attention_tiles(q_shape, k_shape, v_shape, target, pairs, causal)
    return tiles.elements + (max(slots, 1) - 1) * tiles.slot_elements


def attention_scratch_type(
    q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int], target: Target, slots: int = 1,
    pairs: bool = False, causal: bool = False,
) -> MemRefType:
    """The scratch buffer `convert-tensor-to-buffer` allocates for one attention call."""
    return MemRefType(f32, [attention_scratch_elements(q_shape, k_shape, v_shape, target, slots, pairs, causal)])
