"""bf16 products of `buf.attention {bf16_products}`: a query block of the flash kernel
(`kernels_attention._Attention` hands it to `PairedQueryBlock`) whose two GEMMs take words of two
bf16 (pairs along their K), float32 sums, and whose scores are held transposed, keys by queries,
so that the online softmax runs down the columns, in vectors across the queries, with no
reduction along a row (scratch layout: `scratch.AttentionTiles.pairs`)::

    per query block [q0, q0 + Br) (N = Br rounded up to 16: whole tiles; the columns past its rows
    are computed from zeros and never stored):
        qt = (q * scale) of the block, transposed, pairs along D          [Dw, N]   (once)
        m = -inf, l = 0, acc = 0                                          acc: [Dv', N]
        for each key block [k0, k0 + Bc) not entirely above the causal diagonal:
            kw = the key block in bf16 (pairs along D)                     [Bc', Dw]
            st = kw @ qt                                                   [Bc', N]   S^T
            st += mask^T;  st = -inf above the causal diagonal
            mu = max(m, max over the block's keys of st)     (down the columns: elementwise)
            alpha = exp(m - mu'), mu' = mu, 0 where it is -inf;  m = mu
            l *= alpha;  acc *= alpha;  st = exp(st - mu');  l += sum over the keys of st
            pt = st's pairs along the keys                                 [Kw, N]
            vt = the value block transposed, pairs along the keys          [Dv', Kw]
            acc += vt @ pt                                                 (acc^T += V^T P^T)
        out[q0 + i, c] = acc[c, i] / l[i]  (0 where every score was masked)

q times the scale, k, v and each key block's probabilities are rounded to bf16 (nearest even)
as they are moved into pairs; everything else stays float32. The GEMMs run on AMX tiles
(`kernels_amx.tile_gemm`, whole tiles: each K padded with zero words) where the target has
AMX-BF16, else on the register tiles' bf16 dot products (`vdpbf16ps`, or their emulation by FMAs).
Every word past D, and past the block's keys along P V's K, is zero (as are qt's columns past
the block's queries), so no sum adds anything but products of the operands. On AMX kw's rows
past the block's keys are left from earlier blocks: the rows of st they give are never read.
The blocks move into pairs by `bf16_blocks` (in vectors where a head is whole vectors).
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f32
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.bf16_blocks import (
    load_vector,
    row_pairs,
    rows_as_pairs,
    store_vector,
    transpose16,
    transposed_pairs,
    transposed_row_pairs,
)
from tensor_graphs.codegen.llvm.bf16_dot import PAIR_LANES, native_bf16_dot
from tensor_graphs.codegen.llvm.kernels import _add_idx, _at, _fadd, _fmax, _fmul, _fsub, _load, _mul_idx, _store
from tensor_graphs.codegen.llvm.kernels_amx import TILE_ROWS, tile_gemm
from tensor_graphs.codegen.llvm.kernels_attention import _tile_gemm, inverse_or_zero
from tensor_graphs.codegen.llvm.kernels_gemm import splat
from tensor_graphs.codegen.llvm.loops import Index, emit_for, icmp, max_i64, min_i64
from tensor_graphs.codegen.llvm.loops import value as _val
from tensor_graphs.codegen.llvm.scalar import emit_unary

#: The slot's parts a paired query block works in (`scratch.AttentionTiles`' offsets of the same names)
PARTS = ("scores", "m", "l", "acc", "kt", "vp", "qt", "pt", "mu", "alpha")


class PairedQueryBlock:
    """One query block of ``att`` (a `kernels_attention._Attention` inside its worker, ``att.t``)
    with bf16 products: the module doc's loop, from the item's offsets ``offs``, the block's first
    query ``q0``, its ``rows`` and the address of its first query row ``q_ptr``."""

    def __init__(self, att, offs: dict[str, SSAValue | None], q0: SSAValue, rows: Index, q_ptr: SSAValue):
        self.att, self.t, self.b, self.tiles = att, att.t, att.t.b, att.tiles
        self.offs, self.q0, self.rows, self.q_ptr = offs, q0, rows, q_ptr
        self.n = self.tiles.rows  # queries of every transposed tile: Br in whole tiles
        self.p = dict(zip(PARTS, self.t.slot))
        self.native = native_bf16_dot(att.ctx.target, PAIR_LANES)  # vcvtne2ps2bf16
        self.zeros = self.b.stack(PAIR_LANES, f32)  # what a row past a block's reads (`bf16_blocks`)

    def emit(self) -> None:
        b, att, n, p = self.b, self.att, self.n, self.p
        emit_for(b, 0, n, lambda i, _: (_store(b, self.t.neg_inf, p["m"], i), _store(b, self.t.zero, p["l"], i)) and [])
        emit_for(b, 0, att.tiles.dv_pad * n, lambda i, _: _store(b, self.t.zero, p["acc"], i) or [])
        store_vector(b, splat(b, self.t.zero, PAIR_LANES), self.zeros, None)
        transposed_pairs(b, self.q_ptr, att.q_pos, self.rows, att.dim, p["qt"], n, self.tiles.d_words, att.scale, self.native,
                         self.zeros)
        kb_end = att._key_blocks_end(self.q0, self.rows) if att.causal else self.t.n_kblocks
        emit_for(b, 0, kb_end, lambda kb, _: self.key_block(kb) or [])
        self.finish()

    def key_block(self, kb: SSAValue) -> None:
        """Key block ``kb``: ``S^T``, its mask and diagonal, the online softmax down the columns,
        ``acc^T += V^T P^T``."""
        b, att, t, n, p, tiles = self.b, self.att, self.t, self.n, self.p, self.tiles
        k0 = _mul_idx(b, kb, att.bc) or b.i64(0)
        cols = att.rows_in_block(k0, att.bc, t.keys)
        k_ptr = _at(b, t.pk, _add_idx(b, self.offs["k"], _mul_idx(b, k0, att.k_pos)))
        v_ptr = _at(b, t.pv, _add_idx(b, self.offs["v"], _mul_idx(b, k0, att.v_pos)))
        rows_as_pairs(b, k_ptr, att.k_pos, cols, att.dim, p["kt"], tiles.d_words, self.native)
        self.gemm(cols, tiles.bc_pad, tiles.d_words, p["kt"], p["qt"], p["scores"], False)
        self.mask_and_diagonal(k0, cols)
        self.softmax(cols)
        row_pairs(b, p["scores"], n, cols, p["pt"], n, tiles.key_words, self.native)
        transposed_row_pairs(b, v_ptr, att.v_pos, cols, att.dim_v, p["vp"], tiles.key_words, self.native, self.zeros)
        self.gemm(att.dim_v, tiles.dv_pad, tiles.key_words, p["vp"], p["pt"], p["acc"], True)

    def gemm(self, rows: Index, most: int, k_words: int, a: SSAValue, bm: SSAValue, c: SSAValue, accumulate: bool) -> None:
        """``C[rows, N] (+)= A[rows, k_words] @ B[k_words, N]`` over words of bf16 pairs (A's rows
        ``k_words`` words apart, B's and C's ``N``): on AMX, all ``most`` rows (whole tiles:
        `kernels_amx.tile_gemm`), else the register tiles' bf16 dot products over ``rows``."""
        n = self.n
        if self.att.amx:  # (the worker loaded the whole-tile configuration)
            tile_gemm(self.b, most // TILE_ROWS, n // TILE_ROWS, k_words // TILE_ROWS, a, k_words, bm, n, c, n, accumulate)
            return
        _tile_gemm(self.att.ctx, rows, k_words, a, k_words, bm, n, c, n, accumulate=accumulate, pairs=True)

    def mask_and_diagonal(self, k0: SSAValue, cols: Index) -> None:
        """The mask added to each key's row of ``S^T`` over the block's queries; causal: -inf for
        the queries a key is hidden from (key j is visible to query i when j <= i + diag)."""
        b, att, t, n, p = self.b, self.att, self.t, self.n, self.p
        if t.pm is not None:
            ms_q, ms_k = t.at["ms_q"], t.at["ms_k"]
            base = _add_idx(b, _add_idx(b, self.offs["mask"], _mul_idx(b, self.q0, ms_q)), _mul_idx(b, k0, ms_k))

            def add_mask(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                row, m_row = _at(b, p["scores"], _mul_idx(b, j, n)), _at(b, t.pm, _add_idx(b, base, _mul_idx(b, j, ms_k)))
                emit_for(b, 0, self.rows, lambda i, _a: _store(b, _fadd(b, _load(b, row, i), _load(b, m_row, _mul_idx(b, i, ms_q))),
                                                              row, i) or [])
                return []

            emit_for(b, 0, cols, add_mask)
        if not att.causal:
            return
        diag = t.diag

        def hide(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            first = b.add(llvm.SubOp(b.add_i64(k0, j), b.add_i64(self.q0, _val(b, diag))))  # the first query seeing key j
            hidden = min_i64(b, max_i64(b, first, b.i64(0)), b.i64(n))
            row = _at(b, p["scores"], _mul_idx(b, j, n))
            emit_for(b, 0, hidden, lambda i, _a: _store(b, t.neg_inf, row, i) or [])
            return []

        emit_for(b, 0, cols, hide)

    def softmax(self, cols: Index) -> None:
        """The online softmax over the block's keys, down each query's column (every loop over the
        N queries: vectors, no reduction along a row): the new running max, the old sums'
        factor, the probabilities in place and their sums."""
        b, t, n, p = self.b, self.t, self.n, self.p
        emit_for(b, 0, n, lambda i, _: _store(b, _load(b, p["m"], i), p["mu"], i) or [])

        def key_max(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            row = _at(b, p["scores"], _mul_idx(b, j, n))
            emit_for(b, 0, n, lambda i, _a: _store(b, _fmax(b, _load(b, p["mu"], i), _load(b, row, i)), p["mu"], i) or [])
            return []

        emit_for(b, 0, cols, key_max)

        def factor(i: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            m_new = _load(b, p["mu"], i)
            # every score so far masked: 0 as the max, so that exp(-inf - 0) = 0, not NaN
            use = b.add(llvm.SelectOp(b.add(llvm.FCmpOp(m_new, t.neg_inf, "oeq")), t.zero, m_new))
            alpha = emit_unary(b, "exp", _fsub(b, _load(b, p["m"], i), use))
            _store(b, alpha, p["alpha"], i)
            _store(b, m_new, p["m"], i)
            _store(b, use, p["mu"], i)
            _store(b, _fmul(b, _load(b, p["l"], i), alpha), p["l"], i)
            return []

        emit_for(b, 0, n, factor)

        def rescale(c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            row = _at(b, p["acc"], _mul_idx(b, c, n))
            emit_for(b, 0, n, lambda i, _a: _store(b, _fmul(b, _load(b, row, i), _load(b, p["alpha"], i)), row, i) or [])
            return []

        emit_for(b, 0, self.att.dim_v, rescale)

        def exp_row(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            row = _at(b, p["scores"], _mul_idx(b, j, n))

            def one(i: SSAValue, _a: list[SSAValue]) -> list[SSAValue]:
                e = emit_unary(b, "exp", _fsub(b, _load(b, row, i), _load(b, p["mu"], i)))
                _store(b, e, row, i)
                _store(b, _fadd(b, _load(b, p["l"], i), e), p["l"], i)
                return []

            emit_for(b, 0, n, one)
            return []

        emit_for(b, 0, cols, exp_row)

    def finish(self) -> None:
        """``out[q0 + i, c] = acc[c, i] / l[i]`` for the block's rows (0 where ``l`` is 0): the
        N inverses into alpha, then where Dv is whole vectors 16 queries by 16 columns at a time,
        transposed in registers (`finish_vectors`), else one element at a time."""
        b, att, t, n, p = self.b, self.att, self.t, self.n, self.p
        emit_for(b, 0, n, lambda i, _: _store(b, inverse_or_zero(b, _load(b, p["l"], i), t.zero), p["alpha"], i) or [])
        o_base = _add_idx(b, self.offs["out"], _mul_idx(b, self.q0, att.o_pos))
        if att.dim_v % PAIR_LANES == 0:
            self.finish_vectors(o_base)
            return

        def row(i: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            inv = _load(b, p["alpha"], i)
            o_row = _at(b, t.po, _add_idx(b, o_base, _mul_idx(b, i, att.o_pos)))
            emit_for(b, 0, att.dim_v, lambda c, _a: _store(b, _fmul(b, _load(b, p["acc"], b.add_i64(_mul_idx(b, c, n) or b.i64(0), i)), inv),
                                                          o_row, c) or [])
            return []

        emit_for(b, 0, self.rows, row)

    def finish_vectors(self, o_base: SSAValue | None) -> None:
        """`finish` in vectors: per 16 queries and 16 columns ``acc * (1 / l)`` (the inverses in
        alpha) transposed to 16 rows of out (a row past the block's stored to a stack vector,
        never to out)."""
        b, att, t, n, p = self.b, self.att, self.t, self.n, self.p
        trash = b.stack(PAIR_LANES, f32)

        def group(g: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            first = b.mul_i64(g, b.i64(PAIR_LANES))
            inv = load_vector(b, p["alpha"], first)
            for c in range(0, att.dim_v, PAIR_LANES):
                rows = [b.add(llvm.FMulOp(load_vector(b, p["acc"], b.add_i64(b.i64((c + r) * n), first)), inv))
                        for r in range(PAIR_LANES)]
                for i, vector in enumerate(transpose16(b, rows)):
                    q = b.add_i64(first, b.i64(i))
                    o_row = _at(b, t.po, _add_idx(b, o_base, _mul_idx(b, q, att.o_pos)))
                    dest = b.add(llvm.SelectOp(icmp(b, "slt", q, _val(b, self.rows)), _at(b, o_row, c), trash))
                    store_vector(b, vector, dest, None)
            return []

        groups = -(-self.rows // PAIR_LANES) if isinstance(self.rows, int) else b.add(
            llvm.UDivOp(b.add_i64(self.rows, b.i64(PAIR_LANES - 1)), b.i64(PAIR_LANES)))
        emit_for(b, 0, groups, group)
