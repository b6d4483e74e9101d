"""Emitter of `buf.attention` (flash attention); importing this module registers it into
:data:`kernels.REGISTRY` (``convert_buffer_to_llvm`` imports it).

`buf.attention {scale, causal}`: tiled, with an online softmax, never an Sq x Sk matrix::

    for each batch, kv head, query head of its group, query block [q0, q0 + Br):
        m = -inf, l = 0, acc = 0                     (scratch: [S Br*Bc | m Br | l Br | acc Br*Dv])
        for each key block [k0, k0 + Bc) not entirely above the causal diagonal:
            S = scale * Q_blk @ K_blk^T              (register tiles over K_blk transposed; one
                                                      query row: a dot product per key, along its row)
            S += mask tile
            per row i, over its visible columns j < vis_i (causal: key j <= i + Sk - Sq):
                m' = max(m, max_j S); P = exp(S - m'); P = 0 for j >= vis_i
                l = l * exp(m - m') + sum_j P;  acc_i = acc_i * exp(m - m')
            acc += P @ V_blk                          (register tiles, accumulating)
        out rows = acc / l

Key blocks entirely above the diagonal are skipped (the key-block loop ends early), and in
a block on the diagonal the max and exp loops of each row stop at the diagonal, so causal
attention does about half the work of the full one. A row whose every score is masked gives
**0** (torch's SDPA gives NaN there): the running max is then taken as 0 so that no
``-inf - -inf`` appears, and ``1 / l`` is replaced by 0 when ``l == 0``. The scratch is
the op's second output, planned in the arena (layout from
`lowering.tensor_to_buffer.scratch.attention_tiles`).

With ``kv_cache`` the keys are the first ``Sk' = past + Sq`` positions of caches with room
for ``Sk`` (``past`` = ``dims[0]``, read at run time; the kernel first checks
``past <= Sk - Sq``): the heads of k and v keep their static stride ``Sk * D``, while the
number of key blocks (``ceil(Sk' / Bc)``), the width of the last one (``min(Bc, Sk' - k0)``)
and the causal diagonal (key j visible to query i when ``j <= i + past``) are run-time
values. Without ``kv_cache`` all of them are constants, as before. A mask over a cache
indexes its positions (``[B, 1, 1, Sk]``: the key-padding mask of left-padded prompts, 0 or
-inf per cached position), read like the scores: over the keys in use only.

A buffer stored sequence-major (``q_seq_major`` ...: ``[..., S, H, D]``) is read and written in
place at its strides: its head stride is ``D`` and its rows ``H * D`` floats apart (the GEMMs'
``lda``, the key block's transpose and the output rows take that stride), with no copy. With a
head range (``q_heads = array<i64: first, count>``) the buffer holds more heads than are read:
its strides are the buffer's, and the heads read start ``first`` head strides in.

With ``bf16_products`` each query block runs as `kernels_attention_bf16.PairedQueryBlock`: the
scores transposed (keys by queries, the softmax down the columns), both GEMMs over bf16 pairs,
on AMX tiles where the target has AMX-BF16 (one whole-tile configuration a thread, loaded before
its items and released after them), else the register tiles' bf16 dot products.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, f32, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm import kernels_gemm as _gemm
from tensor_graphs.codegen.llvm.kernels_amx import _amx, whole_tiles_config
from tensor_graphs.codegen.llvm.kernels import (
    _NEG_INF,
    REGISTRY,
    SYMBOLIC_KERNELS,
    KernelContext,
    RunTimeSizes,
    LoweringError,
    _add_idx,
    _at,
    _fadd,
    _fmax,
    _fmul,
    _fsub,
    _load,
    _mul_idx,
    _require_f32,
    _shape,
    _store,
    check_no_overlap,
    paying_rows,
    static_row,
)
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, Index, broadcast_strides, emit_for, emit_if
from tensor_graphs.codegen.llvm.loops import icmp as _icmp
from tensor_graphs.codegen.llvm.loops import max_i64 as _max_i64
from tensor_graphs.codegen.llvm.loops import min_i64 as _min_i64
from tensor_graphs.codegen.llvm.loops import value as _val
from tensor_graphs.codegen.llvm.scalar import emit_unary
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import attention_operand_strides, contiguous_strides, numel
from tensor_graphs.dialects.symbolic import format_expr, is_static
from tensor_graphs.lowering.tensor_to_buffer.scratch import attention_tiles
from tensor_graphs.target import AMX_BF16

def _transpose_into(b: FunctionBuilder, src: SSAValue, src_ld: int, rows: Index, cols: int, dest: SSAValue, ld: int) -> None:
    """``dest[c * ld + r] = src[r * src_ld + c]`` for ``c < cols``, ``r < rows`` (a run-time count
    up to ``ld``), and zero for ``rows <= r < ld``: a key block transposed into the GEMM's B panel."""

    def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        base = _mul_idx(b, r, src_ld)
        emit_for(b, 0, cols, lambda c, _c: _store(b, _load(b, src, _add_idx(b, base, c)), dest, b.add_i64(_mul_idx(b, c, ld) or b.i64(0), r)) or [])
        return []

    emit_for(b, 0, rows, row)
    if not (isinstance(rows, int) and rows == ld):
        zero = b.f32(0.0)

        def zero_row(c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            line = _at(b, dest, _mul_idx(b, c, ld))
            emit_for(b, rows, ld, lambda r, _r: _store(b, zero, line, r) or [])
            return []

        emit_for(b, 0, cols, zero_row)


def _pad_rows_into(b: FunctionBuilder, src: SSAValue, src_ld: int, rows: Index, cols: int, dest: SSAValue, ld: int) -> None:
    """``dest[r * ld + c] = src[r * src_ld + c]`` for ``r < rows``, zero for ``cols <= c < ld``."""
    zero = b.f32(0.0)

    def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        s_row, d_row = _at(b, src, _mul_idx(b, r, src_ld)), _at(b, dest, _mul_idx(b, r, ld))
        emit_for(b, 0, cols, lambda c, _c: _store(b, _load(b, s_row, c), d_row, c) or [])
        emit_for(b, cols, ld, lambda c, _c: _store(b, zero, d_row, c) or [])
        return []

    emit_for(b, 0, rows, row)


def inverse_or_zero(b: FunctionBuilder, total: SSAValue, zero: SSAValue) -> SSAValue:
    """``1 / total``, 0 where ``total`` is not positive (a row whose every score was masked: its
    output is 0, not NaN)."""
    inverse = b.add(llvm.FDivOp(b.f32(1.0), total))
    return b.add(llvm.SelectOp(b.add(llvm.FCmpOp(total, zero, "ogt")), inverse, zero))


def _tile_gemm(
    ctx: KernelContext,
    rows: Index,
    k: Index,
    a: SSAValue,
    lda: int,
    bm: SSAValue,
    ldb: int,
    c: SSAValue,
    ldc: int,
    alpha: float = 1.0,
    accumulate: bool = False,
    pairs: bool = False,
) -> None:
    """``C[rows, ldc] (+)= alpha * A[rows, k] @ B[k, ldc]`` with the target's register tiles
    (`kernels_gemm.call_tile`, `Target.gemm_tile`): ``ldc`` (whole vectors) columns in panels of
    up to the tile's width, A and C row-major (row strides ``lda``, ``ldc``), B's rows ``ldb``
    floats apart; ``rows`` and ``k`` may be run-time counts. With ``pairs``, A's and B's elements
    (and ``k``, ``lda``, ``ldb``) are words of two bf16 along K (`kernels_gemm.Tile.pairs`)."""
    b, target = ctx.b, ctx.target
    lanes = target.float_lanes
    width = target.panel_columns
    for c0 in range(0, ldc, width):
        vectors = min(width, ldc - c0) // lanes
        mr = target.gemm_tile(vectors)[0]

        def tile(r0: SSAValue | int, n: int) -> None:
            a_row = _at(b, a, _mul_idx(b, _val(b, r0), lda) if r0 != 0 else None)
            c_tile = _at(b, c, _add_idx(b, _mul_idx(b, _val(b, r0), ldc) if r0 != 0 else None, c0))
            # (B unaligned: the arena base is 64-byte aligned only in CompiledGraph)
            _gemm.call_tile(ctx, _gemm.Tile(n, vectors, lanes, b_aligned=False, pairs=pairs), a_row, lda, _at(b, bm, c0 or None),
                            ldb, k, c_tile, ldc, alpha=alpha, accumulate=accumulate)

        if not isinstance(rows, int):  # run-time rows: whole tiles, then one of the MR - 1 row tiles
            full_rt = b.add(llvm.UDivOp(rows, b.i64(mr)))
            rest_rt = b.add(llvm.SubOp(rows, b.mul_i64(full_rt, b.i64(mr))))
            emit_for(b, 0, full_rt, lambda r, _: tile(b.mul_i64(r, b.i64(mr)), mr) or [])
            r0 = b.mul_i64(full_rt, b.i64(mr))
            for n in range(1, mr):
                emit_if(b, _icmp(b, "eq", rest_rt, b.i64(n)), lambda n=n: tile(r0, n))
            continue
        full, rest = divmod(rows, mr)
        emit_for(b, 0, full, lambda r, _: tile(b.mul_i64(r, b.i64(mr)), mr) or [])
        if rest:
            tile(full * mr, rest)


@dataclass
class _Worker:
    """What one thread's items of an attention work with (`_Attention.work`): its builder, the
    keys in use, key blocks and causal diagonal (run-time values over a KV cache or a symbolic
    length), the sizes as the worker sees them (`RunTimeSizes.inside`), the operands' pointers
    and its scratch slot's tiles."""

    b: FunctionBuilder
    keys: Index
    n_kblocks: Index
    diag: Index
    at: dict
    per_batch: list[tuple]
    pq: SSAValue
    pk: SSAValue
    pv: SSAValue
    po: SSAValue
    pm: SSAValue | None
    slot: tuple[SSAValue, ...]  # its scratch tiles: scores, running max, running sum, accumulator, K^T, padded V
    # (with bf16 products those of `kernels_attention_bf16.PARTS`, the same six first)
    neg_inf: SSAValue
    zero: SSAValue


class _Attention:
    """One `buf.attention` as code (`_emit_attention`; the module doc): the op read
    (`__init__`), then the team over (batch, head, query block) items (`emit`), each thread's
    items (`work`, `item`), a query block (`query_block`), its key blocks (`key_block`) and the
    online softmax of one row of scores (`score_row`)."""

    def __init__(self, ctx: KernelContext, op: Operation):
        assert isinstance(op, buf.AttentionOp)
        self.ctx, self.op = ctx, op
        self.q, self.k, self.v = q, k, v = op.inputs[:3]
        self.mask = mask = op.inputs[3] if len(op.inputs) == 4 else None
        self.out = out = op.output
        self.sq_, self.sk_, self.sv_, self.so = op.heads_major_shapes()  # [..., H, S, D]; the buffers may be [..., S, H, D]
        # each buffer's (batch, head, position) strides and first head's offset: a position's row
        # is `pos` floats after the previous; a buffer may hold more heads than read (a head range)
        (self.q_batch, self.q_head, self.q_pos, self.q_first), (self.k_batch, self.k_head, self.k_pos, self.k_first), \
            (self.v_batch, self.v_head, self.v_pos, self.v_first), (self.o_batch, self.o_head, self.o_pos, _) = (
                attention_operand_strides(_shape(x), f, r[0] if r else 0)
                for x, f, r in zip((q, k, v, out), op.seq_major, (*op.head_ranges, None))
            )
        self.ins = [q, k, v] + ([mask] if mask is not None else [])
        _require_f32(op, [*self.ins, out])
        # bf16 products: the two GEMMs over words of bf16 pairs, on AMX tiles where the target has them
        self.pairs = bool(op.bf16_products.value.data)
        self.amx = self.pairs and AMX_BF16 in ctx.target.extensions

    def emit(self) -> None:
        ctx, op, out = self.ctx, self.op, self.out
        if numel(self.so) == 0:
            return
        b = ctx.b
        check_no_overlap(ctx, op, out, self.ins, in_place_ok=False)
        if self.sk_[-2] == 0:  # no keys at all: like a fully masked row, the result is 0
            emit_for(b, 0, numel(self.so), lambda i, _: _store(b, b.f32(0.0), ctx.ptr(out), i) or [])
            return
        self._tiles_and_scratch()
        self._sizes()
        self.run_time = self._kv_cache_checks()
        self._run_time_sizes()
        self._team()

    def _tiles_and_scratch(self) -> None:
        """The tiles (for the largest sizes: a symbolic sequence length is counted at run time)
        and the scratch holding one set of them per thread."""
        ctx, op = self.ctx, self.op
        # a symbolic sequence length (`dialects.symbolic`): tiles for the largest, counts at run time
        self.symbolic = not is_static((*self.sq_, *self.sk_, *self.sv_))
        self.tiles = tiles = attention_tiles(*(tuple(ctx.largest(d) for d in s_) for s_ in (self.sq_, self.sk_, self.sv_)), ctx.target,
                                             self.pairs, bool(op.causal.value.data))
        if len(op.outputs) < 2:
            raise LoweringError(
                f"{op.name}: no scratch buffer (the second output); the tiled kernel needs "
                f"memref<{tiles.elements}xf32> of scratch, planned by plan-memory"
            )
        self.scratch = scratch = op.outputs[1]
        if scratch.type.element_type != f32 or numel(_shape(scratch)) < tiles.elements:  # type: ignore[attr-defined]
            raise LoweringError(f"{op.name}: the scratch must hold at least {tiles.elements} f32, got {scratch.type}")
        check_no_overlap(ctx, op, scratch, [*self.ins, self.out], in_place_ok=False)
        self.slots = tiles.slots(numel(_shape(scratch)))  # one set of tiles per thread

    def _sizes(self) -> None:
        """Heads, lengths and dims, the blocks of queries and keys."""
        op, sq_, sk_, sv_, tiles = self.op, self.sq_, self.sk_, self.sv_, self.tiles
        self.scale, self.causal = op.scale.value.data, bool(op.causal.value.data)
        self.batch = sq_[:-3]
        self.heads, self.seq_q, self.dim = sq_[-3], sq_[-2], sq_[-1]
        self.kv_heads, self.seq_k, self.dim_v = sk_[-3], sk_[-2], sv_[-1]
        static_row(op, self.heads, self.kv_heads, self.dim, self.dim_v, *self.batch)
        self.group = self.heads // self.kv_heads
        self.br, self.bc = tiles.br, tiles.bc
        self.n_qblocks = (self.seq_q + self.br - 1) // self.br
        # rows of the last query block
        self.last_rows = self.seq_q - (self.n_qblocks - 1) * self.br if not self.symbolic else None
        self.bc_pad, self.dv_pad = tiles.bc_pad, tiles.dv_pad

    def _kv_cache_checks(self) -> list[SSAValue]:
        """Over a KV cache: the keys in use (seq_k is also the head stride of k and v), key blocks
        and the causal diagonal (key j is visible to query i when j <= i + diag) are run-time
        values from ``past``, checked to leave room for this call's queries; the run-time values
        the workers get (``[past]``, or none)."""
        ctx, op, b, seq_q, seq_k = self.ctx, self.op, self.ctx.b, self.seq_q, self.seq_k
        if not bool(op.kv_cache.value.data):
            return []
        # the queries may be a symbolic count (a prefill of any length); the cache is static
        if not is_static((*self.sk_, *self.sv_)):
            raise LoweringError(f"{op.name}: attention over a kv cache takes a symbolic size only in its queries")
        self.most_q = most_q = ctx.largest(seq_q)
        if not self.causal and most_q > 1:
            raise LoweringError(f"{op.name}: kv_cache attention with more than one query must be causal")
        if most_q > seq_k:
            raise LoweringError(f"{op.name}: {most_q} queries do not fit a cache of {seq_k} positions")
        past = ctx.dim(0)
        ule = IntegerAttr(llvm.ICmpPredicateFlag.ULE.to_int(), i64)
        room = b.i64(seq_k - seq_q) if isinstance(seq_q, int) else b.add(llvm.SubOp(b.i64(seq_k), ctx.size(seq_q)))
        ctx.check(
            b.add(llvm.ICmpOp(past, room, ule)),
            f"attention over a kv cache: position {{past}} + {format_expr(seq_q)} queries exceed its {seq_k} positions",
        )
        return [past]  # keys = past + Sq, ceil(keys / Bc) key blocks, the diagonal at past

    def _run_time_sizes(self) -> None:
        """Every size the body reads that may be an expression of the size symbols, and the
        (batch, head, query block) items split among the threads."""
        batch = self.batch
        self.items = numel(batch) * self.heads * self.n_qblocks
        scores_shape = (*self.sq_[:-1], self.seq_k)
        ms = broadcast_strides(_shape(self.mask), scores_shape) if self.mask is not None else (0,) * len(scores_shape)
        per_batch = [
            *(tuple(s * stride for s in contiguous_strides(batch))
              for stride in (self.q_batch, self.k_batch, self.v_batch, self.o_batch)),
            tuple(ms[: len(batch)]),
        ]
        self.sizes = RunTimeSizes(self.ctx, {
            "seq_q": self.seq_q, "seq_k": self.seq_k, "n_qblocks": self.n_qblocks, "ms_h": ms[-3], "ms_q": ms[-2],
            "ms_k": ms[-1], "q_head": self.q_head, "k_head": self.k_head, "v_head": self.v_head, "o_head": self.o_head,
            "q_first": self.q_first, "k_first": self.k_first, "v_first": self.v_first,
            **{f"batch{i}_{d}": st for i, sts in enumerate(per_batch) for d, st in enumerate(sts)},
        })

    def _work_of(self, seq: int, queries: int | None = None) -> tuple[float, float]:
        """(FLOPs, bytes) of S = Q K^T and P V over the full rectangle of ``seq`` keys (and
        ``queries`` query rows: over a KV cache, else a block of Br per query block of ``seq``)."""
        dims = self.dim + self.dim_v
        n = numel(self.batch) * self.heads * -(-(seq if queries is None else queries) // self.br)
        return 2.0 * n * self.br * seq * dims, 4.0 * n * (self.br * dims + seq * dims)

    def _team(self) -> None:
        """The threads over the items (at most one per scratch slot), when the work pays for them:
        at the largest sizes, and for a symbolic size when this call's does."""
        ctx, run_time, slots = self.ctx, self.run_time, self.slots
        if not self.symbolic:
            ctx.parallel(self.items, self.work, run_time, max_threads=slots, work=self._work_of(self.seq_k))
            return
        if run_time:  # a run-time count of queries over a KV cache: the team when this call's queries pay for it

            def work_over_cache(q: int) -> tuple[float, float]:  # q queries over every cached key (at most)
                return self._work_of(self.seq_k, q)

            queries = ctx.size(self.seq_q)
            ctx.parallel(ctx.size(self.items), self.work, [*run_time, *self.sizes.values], max_threads=slots,
                         work=work_over_cache(self.most_q),
                         pays=paying_rows(ctx, _val(ctx.b, queries), self.most_q, work_over_cache))
            return
        longest, keys = ctx.largest(self.seq_k), self.sizes.inside(self.sizes.values)["seq_k"]
        ctx.parallel(ctx.size(self.items), self.work, self.sizes.values, max_threads=slots, work=self._work_of(longest),
                     pays=paying_rows(ctx, _val(ctx.b, keys), longest, self._work_of))

    # a thread's items ------------------------------------------------------------------

    def work(self, start: SSAValue, end: SSAValue, tid: SSAValue, values: list[SSAValue]) -> None:
        """Items ``[start, end)`` of (batch, head, query block), on scratch slot ``tid``."""
        ctx, b, bc, tiles = self.ctx, self.ctx.b, self.bc, self.tiles
        keys: Index
        n_kblocks: Index
        diag: Index
        at = self.sizes.inside(values[len(self.run_time):])
        seq_q = at["seq_q"]
        per_batch = [tuple(at[f"batch{i}_{d}"] for d in range(len(self.batch))) for i in range(5)]
        if self.run_time:
            past = values[0]
            keys = b.add_i64(past, _val(b, seq_q))
            n_kblocks = b.add(llvm.SDivOp(b.add_i64(keys, b.i64(bc - 1)), b.i64(bc)))
            diag = past
        elif self.symbolic:
            keys = at["seq_k"]
            n_kblocks = b.add(llvm.SDivOp(b.add_i64(_val(b, keys), b.i64(bc - 1)), b.i64(bc)))
            diag = b.add(llvm.SubOp(_val(b, keys), _val(b, seq_q)))
        else:
            keys, n_kblocks, diag = self.seq_k, -(-self.seq_k // bc), self.seq_k - self.seq_q
        pq, pk, pv, po = ctx.ptr(self.q), ctx.ptr(self.k), ctx.ptr(self.v), ctx.ptr(self.out)
        ps = _at(b, ctx.ptr(self.scratch), _mul_idx(b, tid, tiles.slot_elements))
        pm = ctx.ptr(self.mask) if self.mask is not None else None
        parts = (tiles.scores, tiles.m, tiles.l, tiles.acc, tiles.kt, tiles.vp) + (
            (tiles.qt, tiles.pt, tiles.mu, tiles.alpha) if self.pairs else ())  # `kernels_attention_bf16.PARTS`
        slot = tuple(_at(b, ps, off) for off in parts)
        self.t = _Worker(b, keys, n_kblocks, diag, at, per_batch, pq, pk, pv, po, pm, slot, b.f32(_NEG_INF), b.f32(0.0))
        if self.amx:  # every tile whole: the blocks' rows and K are padded to whole tiles
            _amx(b, "ldtilecfg", whole_tiles_config(b))
        emit_for(b, start, end, self.item)
        if self.amx:
            _amx(b, "tilerelease")

    def item(self, it: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        """Item ``it`` = ((batch index * heads) + head) * n_qblocks + query block."""
        b, at, batch, heads = self.t.b, self.t.at, self.batch, self.heads
        n_qblocks = at["n_qblocks"]
        if isinstance(n_qblocks, int) and n_qblocks == 1:
            qb, rest = b.i64(0), it
        else:
            qb, rest = b.add(llvm.SRemOp(it, _val(b, n_qblocks))), b.add(llvm.SDivOp(it, _val(b, n_qblocks)))
        h = b.add(llvm.SRemOp(rest, b.i64(heads)))
        rest = b.add(llvm.SDivOp(rest, b.i64(heads)))
        oq = ok = ov = oo = om = None
        for d in reversed(range(len(batch))):  # the batch index, innermost dim first
            idx = b.add(llvm.SRemOp(rest, b.i64(batch[d]))) if d else rest
            rest = b.add(llvm.SDivOp(rest, b.i64(batch[d]))) if d else rest
            oq, ok, ov, oo, om = (_add_idx(b, o, _mul_idx(b, idx, st[d])) for o, st in zip((oq, ok, ov, oo, om), self.t.per_batch))
        kh = b.add(llvm.SDivOp(h, b.i64(self.group))) if self.group > 1 else h
        offs = {
            "q": _add_idx(b, _add_idx(b, oq, _mul_idx(b, h, at["q_head"])), at["q_first"]),
            "k": _add_idx(b, _add_idx(b, ok, _mul_idx(b, kh, at["k_head"])), at["k_first"]),
            "v": _add_idx(b, _add_idx(b, ov, _mul_idx(b, kh, at["v_head"])), at["v_first"]),
            "out": _add_idx(b, oo, _mul_idx(b, h, at["o_head"])),
            "mask": _add_idx(b, om, _mul_idx(b, h, at["ms_h"])),
        }
        self.query_block(offs, qb)
        return []

    def rows_in_block(self, start: SSAValue, block: int, total: Index) -> Index:
        """The rows of the block of ``block`` rows at ``start`` of ``total``."""
        b = self.t.b
        if isinstance(total, int) and total % block == 0:
            return block
        return _min_i64(b, b.i64(block), b.add(llvm.SubOp(_val(b, total), start)))

    def by_rows(self, qb: SSAValue, emit: Callable[[Index], None], rows: Index) -> None:
        """``emit(rows)`` for the query block's row count, a static one: Br, or for the last
        block of a sequence that Br does not divide, what is left (a run-time ``rows`` when the
        sequence length is)."""
        b, br = self.t.b, self.br
        if self.last_rows is None:
            emit(rows)
            return
        if self.last_rows == br:
            emit(br)
            return
        last, other, after = b.new_block(), b.new_block(), b.new_block()
        b.add(llvm.CondBrOp(_icmp(b, "eq", qb, b.i64(self.t.at["n_qblocks"] - 1)), last, [], other, []))
        for block, n in ((last, self.last_rows), (other, br)):
            b.block = block
            emit(n)
            b.add(llvm.BrOp(after))
        b.block = after

    def query_block(self, offs: dict[str, SSAValue | None], qb: SSAValue) -> None:
        """Query block ``qb`` of the item at ``offs``: its running max, sum and accumulator
        from nothing, every key block not entirely above the causal diagonal, then its rows of
        out (``acc / l``, 0 where every score was masked)."""
        t, b, br = self.t, self.t.b, self.br
        p_max, p_sum, p_acc = t.slot[1:4]
        q0 = _mul_idx(b, qb, br) or b.i64(0)
        rows = self.rows_in_block(q0, br, t.at["seq_q"])
        q_ptr = _at(b, t.pq, _add_idx(b, offs["q"], _mul_idx(b, q0, self.q_pos)))
        if self.pairs:  # bf16 products: the scores transposed (`kernels_attention_bf16`)
            from tensor_graphs.codegen.llvm.kernels_attention_bf16 import PairedQueryBlock

            PairedQueryBlock(self, offs, q0, rows, q_ptr).emit()
            return

        def init_row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            _store(b, t.neg_inf, p_max, r)
            _store(b, t.zero, p_sum, r)
            return []

        emit_for(b, 0, rows, init_row)
        acc_len = rows * self.dv_pad if isinstance(rows, int) else _mul_idx(b, rows, self.dv_pad)
        emit_for(b, 0, acc_len or 0, lambda i, _: _store(b, t.zero, p_acc, i) or [])
        kb_end = self._key_blocks_end(q0, rows) if self.causal else t.n_kblocks
        emit_for(b, 0, kb_end, lambda kb, _: self.key_block(offs, qb, q0, rows, q_ptr, kb) or [])
        o_base = _add_idx(b, offs["out"], _mul_idx(b, q0, self.o_pos))

        def finish(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            inv = inverse_or_zero(b, _load(b, p_sum, r), t.zero)
            acc_row = _at(b, p_acc, _mul_idx(b, r, self.dv_pad))
            o_row = _at(b, t.po, _add_idx(b, o_base, _mul_idx(b, r, self.o_pos)))
            emit_for(b, 0, self.dim_v, lambda c, _a: _store(b, _fmul(b, _load(b, acc_row, c), inv), o_row, c) or [])
            return []

        emit_for(b, 0, rows, finish)

    def _key_blocks_end(self, q0: SSAValue, rows: Index) -> Index:
        """Causal: the key blocks past the last visible key of the block's last row are skipped."""
        b, diag = self.t.b, self.t.diag
        if isinstance(diag, int):
            last = b.add_i64(q0, b.i64(rows - 1 + diag)) if isinstance(rows, int) else b.add_i64(
                b.add_i64(q0, rows), b.i64(diag - 1)
            )
        else:
            last = b.add_i64(q0, b.i64(rows - 1)) if isinstance(rows, int) else b.add_i64(
                b.add_i64(q0, rows), b.i64(-1)
            )
            last = b.add_i64(last, diag)
        blocks = b.add_i64(b.add(llvm.SDivOp(last, b.i64(self.bc))), b.i64(1))
        blocks = _min_i64(b, blocks, _val(b, self.t.n_kblocks))
        return b.add(llvm.SelectOp(_icmp(b, "slt", last, b.i64(0)), b.i64(0), blocks))

    def key_block(self, offs: dict[str, SSAValue | None], qb: SSAValue, q0: SSAValue, rows: Index, q_ptr: SSAValue,
                  kb: SSAValue) -> None:
        """Key block ``kb``: kt = K_blk^T [D, Bc'] (zero past the block's keys), S = scale * Q_blk
        @ kt (one query row: dot products along K's rows, `scores_of_one_row`), the online softmax of each row (`score_row`), then acc += P @ V_blk (the rows of V
        padded to whole vectors first when Dv is not)."""
        t, b, ctx, bc, bc_pad, dv_pad = self.t, self.t.b, self.ctx, self.bc, self.bc_pad, self.dv_pad
        p_scores, p_acc, p_kt, p_vp = t.slot[0], t.slot[3], t.slot[4], t.slot[5]
        k0 = _mul_idx(b, kb, bc) or b.i64(0)
        cols = self.rows_in_block(k0, bc, t.keys)
        k_ptr = _at(b, t.pk, _add_idx(b, offs["k"], _mul_idx(b, k0, self.k_pos)))
        v_ptr = _at(b, t.pv, _add_idx(b, offs["v"], _mul_idx(b, k0, self.v_pos)))
        if isinstance(rows, int) and rows == 1:  # a decode step's query: dot products along the keys' rows
            self.scores_of_one_row(q_ptr, k_ptr, cols, p_scores)
        else:
            _transpose_into(b, k_ptr, self.k_pos, cols, self.dim, p_kt, bc_pad)
            self.by_rows(qb, lambda n: _tile_gemm(ctx, n, self.dim, q_ptr, self.q_pos, p_kt, bc_pad, p_scores, bc_pad,
                                                  self.scale), rows)
        emit_for(b, 0, rows, lambda r, _: self.score_row(offs, q0, k0, cols, r) or [])
        if self.tiles.pads_values:
            _pad_rows_into(b, v_ptr, self.v_pos, cols, self.dim_v, p_vp, dv_pad)
            v_src, v_ld = p_vp, dv_pad
        else:
            v_src, v_ld = v_ptr, self.v_pos
        self.by_rows(qb, lambda n: _tile_gemm(ctx, n, cols, p_scores, bc_pad, v_src, v_ld, p_acc, dv_pad, accumulate=True), rows)

    def scores_of_one_row(self, q_ptr: SSAValue, k_ptr: SSAValue, cols: Index, p_scores: SSAValue) -> None:
        """``S[0, j] = scale * q . K[j]`` for the block's ``cols`` keys, each a dot product along
        the key's row as it is stored (the loop over D vectorised by LLVM: its sum is marked
        reassociable), where a block of several query rows transposes K for the register tiles:
        a decode step's single query would pay that scalar transpose for one row of scores."""
        b = self.t.b

        def key(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            row = _at(b, k_ptr, _mul_idx(b, j, self.k_pos))
            (dot,) = emit_for(b, 0, self.dim, lambda d, acc: [_fadd(b, acc[0], _fmul(b, _load(b, q_ptr, d), _load(b, row, d)),
                                                                    reassoc=True)], [self.t.zero])
            _store(b, _fmul(b, dot, b.f32(self.scale)), p_scores, j)
            return []

        emit_for(b, 0, cols, key)

    def score_row(self, offs: dict[str, SSAValue | None], q0: SSAValue, k0: SSAValue, cols: Index, r: SSAValue) -> None:
        """Row r of the block's scores over its visible columns: the mask added, the running max
        and sum updated, P = exp(S - max) in place (0 above the causal diagonal), the row of
        the accumulator rescaled."""
        t, b = self.t, self.t.b
        p_scores, p_max, p_sum, p_acc = t.slot[:4]
        neg_inf, zero, ms_k = t.neg_inf, t.zero, t.at["ms_k"]
        s_row = _at(b, p_scores, _mul_idx(b, r, self.bc_pad))
        qi = b.add_i64(q0, r)
        if t.pm is not None:
            m_base = _add_idx(b, _add_idx(b, offs["mask"], _mul_idx(b, qi, t.at["ms_q"])), _mul_idx(b, k0, ms_k))
            m_row = _at(b, t.pm, m_base)
        if self.causal:  # columns [vis, cols) lie above the diagonal: P = 0 there, no exp
            if isinstance(t.diag, int):
                first_hidden = b.add(llvm.SubOp(b.add_i64(qi, b.i64(t.diag + 1)), k0))
            else:
                first_hidden = b.add(llvm.SubOp(b.add_i64(b.add_i64(qi, t.diag), b.i64(1)), k0))
            vis = _min_i64(b, _max_i64(b, first_hidden, b.i64(0)), _val(b, cols))
            emit_for(b, vis, cols, lambda c, _z: _store(b, zero, s_row, c) or [])
        else:
            vis = cols
        if t.pm is not None:  # its own loop: LLVM does not vectorise a max reduction that also stores

            def add_mask(c: SSAValue, _a: list[SSAValue]) -> list[SSAValue]:
                _store(b, _fadd(b, _load(b, s_row, c), _load(b, m_row, _mul_idx(b, c, ms_k))), s_row, c)
                return []

            emit_for(b, 0, vis, add_mask)
        (mx,) = emit_for(b, 0, vis, lambda c, acc: [_fmax(b, acc[0], _load(b, s_row, c))], [neg_inf])
        m_old = _load(b, p_max, r)
        m_new = _fmax(b, m_old, mx)
        # every score so far masked: use 0 as the max so that exp(-inf - 0) = 0, not NaN
        all_masked = b.add(llvm.FCmpOp(m_new, neg_inf, "oeq"))
        m_use = b.add(llvm.SelectOp(all_masked, zero, m_new))
        alpha = emit_unary(b, "exp", _fsub(b, m_old, m_use))

        def exp_sum(c: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            p = emit_unary(b, "exp", _fsub(b, _load(b, s_row, c), m_use))
            _store(b, p, s_row, c)
            return [_fadd(b, acc[0], p, reassoc=True)]

        (total,) = emit_for(b, 0, vis, exp_sum, [zero])
        _store(b, _fadd(b, _fmul(b, _load(b, p_sum, r), alpha), total), p_sum, r)
        _store(b, m_new, p_max, r)
        acc_row = _at(b, p_acc, _mul_idx(b, r, self.dv_pad))
        emit_for(b, 0, self.dim_v, lambda c, _a: _store(b, _fmul(b, _load(b, acc_row, c), alpha), acc_row, c) or [])


def _emit_attention(ctx: KernelContext, op: Operation) -> None:
    _Attention(ctx, op).emit()


# a symbolic sequence length (queries and keys; over a KV cache, the queries) is counted at run time
SYMBOLIC_KERNELS.add(buf.AttentionOp)
REGISTRY[buf.AttentionOp] = _emit_attention
