"""Emitter of `buf.attention` (flash attention); importing this module registers it into
:data:`kernels.REGISTRY` (``convert_buffer_to_llvm`` imports it).

`buf.attention {scale, causal}`: tiled, with an online softmax, never an Sq x Sk matrix::

    for each batch, kv head, query head of its group, query block [q0, q0 + Br):
        m = -inf, l = 0, acc = 0                     (scratch: [S Br*Bc | m Br | l Br | acc Br*Dv])
        for each key block [k0, k0 + Bc) not entirely above the causal diagonal:
            S = scale * Q_blk @ K_blk^T              (sgemm; sgemv when Sq == 1)
            S += mask tile
            per row i, over its visible columns j < vis_i (causal: key j <= i + Sk - Sq):
                m' = max(m, max_j S); P = exp(S - m'); P = 0 for j >= vis_i
                l = l * exp(m - m') + sum_j P;  acc_i = acc_i * exp(m - m')
            acc += P @ V_blk                          (sgemm with beta = 1; sgemv when Sq == 1)
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
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, f32, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm import kernels_gemm as _gemm
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
) -> None:
    """``C[rows, ldc] (+)= alpha * A[rows, k] @ B[k, ldc]`` with the target's register tiles
    (`kernels_gemm.call_tile`, `Target.gemm_tile`): ``ldc`` (whole vectors) columns in panels of
    up to the tile's width, A and C row-major (row strides ``lda``, ``ldc``), B's rows ``ldb``
    floats apart; ``rows`` and ``k`` may be run-time counts."""
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
            _gemm.call_tile(ctx, _gemm.Tile(n, vectors, lanes, b_aligned=False), a_row, lda, _at(b, bm, c0 or None),
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


def _emit_attention(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.AttentionOp)
    q, k, v = op.inputs[:3]
    mask = op.inputs[3] if len(op.inputs) == 4 else None
    out = op.output
    sq_, sk_, sv_, so = op.heads_major_shapes()  # [..., H, S, D]; the buffers may be [..., S, H, D]
    # each buffer's (batch, head, position) strides and first head's offset: a position's row is
    # `pos` floats after the previous; a buffer may hold more heads than read (a head range)
    (q_batch, q_head, q_pos, q_first), (k_batch, k_head, k_pos, k_first), (v_batch, v_head, v_pos, v_first), \
        (o_batch, o_head, o_pos, _) = (
            attention_operand_strides(_shape(x), f, r[0] if r else 0)
            for x, f, r in zip((q, k, v, out), op.seq_major, (*op.head_ranges, None))
        )
    ins = [q, k, v] + ([mask] if mask is not None else [])
    _require_f32(op, [*ins, out])
    if numel(so) == 0:
        return
    b = ctx.b
    check_no_overlap(ctx, op, out, ins, in_place_ok=False)
    if sk_[-2] == 0:  # no keys at all: like a fully masked row, the result is 0
        emit_for(b, 0, numel(so), lambda i, _: _store(b, b.f32(0.0), ctx.ptr(out), i) or [])
        return
    # a symbolic sequence length (`dialects.symbolic`): tiles for the largest, counts at run time
    symbolic = not is_static((*sq_, *sk_, *sv_))
    tiles = attention_tiles(*(tuple(ctx.largest(d) for d in s_) for s_ in (sq_, sk_, sv_)), ctx.target)
    if len(op.outputs) < 2:
        raise LoweringError(
            f"{op.name}: no scratch buffer (the second output); the tiled kernel needs "
            f"memref<{tiles.elements}xf32> of scratch, planned by plan-memory"
        )
    scratch = op.outputs[1]
    if scratch.type.element_type != f32 or numel(_shape(scratch)) < tiles.elements:  # type: ignore[attr-defined]
        raise LoweringError(f"{op.name}: the scratch must hold at least {tiles.elements} f32, got {scratch.type}")
    check_no_overlap(ctx, op, scratch, [*ins, out], in_place_ok=False)
    slots = tiles.slots(numel(_shape(scratch)))  # one set of tiles per thread

    scale, causal = op.scale.value.data, bool(op.causal.value.data)
    batch = sq_[:-3]
    heads, seq_q, dim = sq_[-3], sq_[-2], sq_[-1]
    kv_heads, seq_k, dim_v = sk_[-3], sk_[-2], sv_[-1]
    static_row(op, heads, kv_heads, dim, dim_v, *batch)
    group = heads // kv_heads
    br, bc = tiles.br, tiles.bc
    n_qblocks = (seq_q + br - 1) // br
    last_rows = seq_q - (n_qblocks - 1) * br if not symbolic else None  # rows of the last query block
    bc_pad, dv_pad = tiles.bc_pad, tiles.dv_pad
    # keys in use (seq_k is also the head stride of k and v), key blocks, and the causal
    # diagonal (key j is visible to query i when j <= i + diag): run-time values over a KV cache
    if bool(op.kv_cache.value.data):
        # the queries may be a symbolic count (a prefill of any length); the cache is static
        if not is_static((*sk_, *sv_)):
            raise LoweringError(f"{op.name}: attention over a kv cache takes a symbolic size only in its queries")
        most_q = ctx.largest(seq_q)
        if not causal and most_q > 1:
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
        run_time = [past]  # keys = past + Sq, ceil(keys / Bc) key blocks, the diagonal at past
    else:
        run_time = []
    items = numel(batch) * heads * n_qblocks  # (batch, head, query block): split among the threads
    scores_shape = (*sq_[:-1], seq_k)
    ms = broadcast_strides(_shape(mask), scores_shape) if mask is not None else (0,) * len(scores_shape)
    per_batch = [
        *(tuple(s * stride for s in contiguous_strides(batch)) for stride in (q_batch, k_batch, v_batch, o_batch)),
        tuple(ms[: len(batch)]),
    ]
    # every size the body reads that may be an expression of the size symbols
    sizes = RunTimeSizes(ctx, {
        "seq_q": seq_q, "seq_k": seq_k, "n_qblocks": n_qblocks, "ms_h": ms[-3], "ms_q": ms[-2], "ms_k": ms[-1],
        "q_head": q_head, "k_head": k_head, "v_head": v_head, "o_head": o_head,
        "q_first": q_first, "k_first": k_first, "v_first": v_first,
        **{f"batch{i}_{d}": st for i, sts in enumerate(per_batch) for d, st in enumerate(sts)},
    })

    def work(start: SSAValue, end: SSAValue, tid: SSAValue, values: list[SSAValue]) -> None:
        """Items ``[start, end)`` of (batch, head, query block), on scratch slot ``tid``."""
        b = ctx.b
        keys: Index
        n_kblocks: Index
        diag: Index
        at = sizes.inside(values[len(run_time):])
        seq_q, n_qblocks, ms_h, ms_q, ms_k = at["seq_q"], at["n_qblocks"], at["ms_h"], at["ms_q"], at["ms_k"]
        q_head, k_head, v_head, o_head = at["q_head"], at["k_head"], at["v_head"], at["o_head"]
        q_first, k_first, v_first = at["q_first"], at["k_first"], at["v_first"]
        per_batch = [tuple(at[f"batch{i}_{d}"] for d in range(len(batch))) for i in range(5)]
        if run_time:
            past = values[0]
            keys = b.add_i64(past, _val(b, seq_q))
            n_kblocks = b.add(llvm.SDivOp(b.add_i64(keys, b.i64(bc - 1)), b.i64(bc)))
            diag = past
        elif symbolic:
            keys = at["seq_k"]
            n_kblocks = b.add(llvm.SDivOp(b.add_i64(_val(b, keys), b.i64(bc - 1)), b.i64(bc)))
            diag = b.add(llvm.SubOp(_val(b, keys), _val(b, seq_q)))
        else:
            keys, n_kblocks, diag = seq_k, -(-seq_k // bc), seq_k - seq_q
        pq, pk, pv, po = ctx.ptr(q), ctx.ptr(k), ctx.ptr(v), ctx.ptr(out)
        ps = _at(b, ctx.ptr(scratch), _mul_idx(b, tid, tiles.slot_elements))
        pm = ctx.ptr(mask) if mask is not None else None
        p_scores, p_max, p_sum, p_acc, p_kt, p_vp = (
            _at(b, ps, off) for off in (tiles.scores, tiles.m, tiles.l, tiles.acc, tiles.kt, tiles.vp)
        )
        neg_inf, zero = b.f32(_NEG_INF), b.f32(0.0)

        def rows_in_block(start: SSAValue, block: int, total: Index) -> Index:
            if isinstance(total, int) and total % block == 0:
                return block
            return _min_i64(b, b.i64(block), b.add(llvm.SubOp(_val(b, total), start)))

        def by_rows(qb: SSAValue, emit: Callable[[Index], None], rows: Index) -> None:
            """``emit(rows)`` for the query block's row count, a static one: Br, or for the last
            block of a sequence that Br does not divide, what is left (a run-time ``rows`` when
            the sequence length is)."""
            if last_rows is None:
                emit(rows)
                return
            if last_rows == br:
                emit(br)
                return
            last, other, after = b.new_block(), b.new_block(), b.new_block()
            b.add(llvm.CondBrOp(_icmp(b, "eq", qb, b.i64(n_qblocks - 1)), last, [], other, []))
            for block, n in ((last, last_rows), (other, br)):
                b.block = block
                emit(n)
                b.add(llvm.BrOp(after))
            b.block = after

        def query_block(offs: dict[str, SSAValue | None], qb: SSAValue) -> None:
            q0 = _mul_idx(b, qb, br) or b.i64(0)
            rows = rows_in_block(q0, br, seq_q)
            q_ptr = _at(b, pq, _add_idx(b, offs["q"], _mul_idx(b, q0, q_pos)))

            def init_row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                _store(b, neg_inf, p_max, r)
                _store(b, zero, p_sum, r)
                return []

            emit_for(b, 0, rows, init_row)
            acc_len = rows * dv_pad if isinstance(rows, int) else _mul_idx(b, rows, dv_pad)
            emit_for(b, 0, acc_len or 0, lambda i, _: _store(b, zero, p_acc, i) or [])

            if causal:  # key blocks past the last visible key of the block's last row are skipped
                if isinstance(diag, int):
                    last = b.add_i64(q0, b.i64(rows - 1 + diag)) if isinstance(rows, int) else b.add_i64(
                        b.add_i64(q0, rows), b.i64(diag - 1)
                    )
                else:
                    last = b.add_i64(q0, b.i64(rows - 1)) if isinstance(rows, int) else b.add_i64(
                        b.add_i64(q0, rows), b.i64(-1)
                    )
                    last = b.add_i64(last, diag)
                blocks = b.add_i64(b.add(llvm.SDivOp(last, b.i64(bc))), b.i64(1))
                blocks = _min_i64(b, blocks, _val(b, n_kblocks))
                kb_end: Index = b.add(llvm.SelectOp(_icmp(b, "slt", last, b.i64(0)), b.i64(0), blocks))
            else:
                kb_end = n_kblocks

            def key_block(kb: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                k0 = _mul_idx(b, kb, bc) or b.i64(0)
                cols = rows_in_block(k0, bc, keys)
                k_ptr = _at(b, pk, _add_idx(b, offs["k"], _mul_idx(b, k0, k_pos)))
                v_ptr = _at(b, pv, _add_idx(b, offs["v"], _mul_idx(b, k0, v_pos)))
                # kt = K_blk^T [D, Bc'] (zero past the block's keys), then S = scale * Q_blk @ kt
                _transpose_into(b, k_ptr, k_pos, cols, dim, p_kt, bc_pad)
                by_rows(qb, lambda n: _tile_gemm(ctx, n, dim, q_ptr, q_pos, p_kt, bc_pad, p_scores, bc_pad, scale), rows)

                def row(r: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
                    s_row = _at(b, p_scores, _mul_idx(b, r, bc_pad))
                    qi = b.add_i64(q0, r)
                    if pm is not None:
                        m_base = _add_idx(b, _add_idx(b, offs["mask"], _mul_idx(b, qi, ms_q)), _mul_idx(b, k0, ms_k))
                        m_row = _at(b, pm, m_base)
                    if causal:  # columns [vis, cols) lie above the diagonal: P = 0 there, no exp
                        if isinstance(diag, int):
                            first_hidden = b.add(llvm.SubOp(b.add_i64(qi, b.i64(diag + 1)), k0))
                        else:
                            first_hidden = b.add(llvm.SubOp(b.add_i64(b.add_i64(qi, diag), b.i64(1)), k0))
                        vis = _min_i64(b, _max_i64(b, first_hidden, b.i64(0)), _val(b, cols))
                        emit_for(b, vis, cols, lambda c, _z: _store(b, zero, s_row, c) or [])
                    else:
                        vis = cols

                    if pm is not None:  # its own loop: LLVM does not vectorise a max reduction that also stores

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
                    acc_row = _at(b, p_acc, _mul_idx(b, r, dv_pad))
                    emit_for(b, 0, dim_v, lambda c, _a: _store(b, _fmul(b, _load(b, acc_row, c), alpha), acc_row, c) or [])
                    return []

                emit_for(b, 0, rows, row)
                # acc += P @ V_blk (the rows of V padded to whole vectors first when Dv is not)
                if tiles.pads_values:
                    _pad_rows_into(b, v_ptr, v_pos, cols, dim_v, p_vp, dv_pad)
                    v_src, v_ld = p_vp, dv_pad
                else:
                    v_src, v_ld = v_ptr, v_pos
                by_rows(qb, lambda n: _tile_gemm(ctx, n, cols, p_scores, bc_pad, v_src, v_ld, p_acc, dv_pad, accumulate=True), rows)
                return []

            emit_for(b, 0, kb_end, key_block)

            o_base = _add_idx(b, offs["out"], _mul_idx(b, q0, o_pos))

            def finish(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                l_r = _load(b, p_sum, r)
                inv = b.add(llvm.FDivOp(b.f32(1.0), l_r))
                inv = b.add(llvm.SelectOp(b.add(llvm.FCmpOp(l_r, zero, "ogt")), inv, zero))
                acc_row = _at(b, p_acc, _mul_idx(b, r, dv_pad))
                o_row = _at(b, po, _add_idx(b, o_base, _mul_idx(b, r, o_pos)))
                emit_for(b, 0, dim_v, lambda c, _a: _store(b, _fmul(b, _load(b, acc_row, c), inv), o_row, c) or [])
                return []

            emit_for(b, 0, rows, finish)

        def item(it: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            """Item ``it`` = ((batch index * heads) + head) * n_qblocks + query block."""
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
                oq, ok, ov, oo, om = (_add_idx(b, o, _mul_idx(b, idx, st[d])) for o, st in zip((oq, ok, ov, oo, om), per_batch))
            kh = b.add(llvm.SDivOp(h, b.i64(group))) if group > 1 else h
            offs = {
                "q": _add_idx(b, _add_idx(b, oq, _mul_idx(b, h, q_head)), q_first),
                "k": _add_idx(b, _add_idx(b, ok, _mul_idx(b, kh, k_head)), k_first),
                "v": _add_idx(b, _add_idx(b, ov, _mul_idx(b, kh, v_head)), v_first),
                "out": _add_idx(b, oo, _mul_idx(b, h, o_head)),
                "mask": _add_idx(b, om, _mul_idx(b, h, ms_h)),
            }
            query_block(offs, qb)
            return []

        emit_for(b, start, end, item)

    def work_of(seq: int) -> tuple[float, float]:  # S = Q K^T and P V over the full rectangle
        n = numel(batch) * heads * -(-seq // br)
        return 2.0 * n * br * seq * (dim + dim_v), 4.0 * n * (br * (dim + dim_v) + seq * (dim + dim_v))

    if not symbolic:
        ctx.parallel(items, work, run_time, max_threads=slots, work=work_of(seq_k))
        return
    if run_time:  # a run-time count of queries over a KV cache: the team when this call's queries pay for it

        def work_over_cache(q: int) -> tuple[float, float]:  # q queries over every cached key (at most)
            n = numel(batch) * heads * -(-q // br)
            return 2.0 * n * br * seq_k * (dim + dim_v), 4.0 * n * (br * (dim + dim_v) + seq_k * (dim + dim_v))

        queries = ctx.size(seq_q)
        ctx.parallel(ctx.size(items), work, [*run_time, *sizes.values], max_threads=slots, work=work_over_cache(most_q),
                     pays=paying_rows(ctx, _val(ctx.b, queries), most_q, work_over_cache))
        return
    longest, keys = ctx.largest(seq_k), sizes.inside(sizes.values)["seq_k"]
    ctx.parallel(ctx.size(items), work, sizes.values, max_threads=slots, work=work_of(longest),
                 pays=paying_rows(ctx, _val(ctx.b, keys), longest, work_of))


# a symbolic sequence length (queries and keys; over a KV cache, the queries) is counted at run time
SYMBOLIC_KERNELS.add(buf.AttentionOp)
REGISTRY[buf.AttentionOp] = _emit_attention
