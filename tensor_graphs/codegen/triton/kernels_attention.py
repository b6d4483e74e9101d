"""`buf.attention` as a Triton flash-attention kernel (online softmax): one program per block of
``BM`` queries of one (batch, head); keys and values in blocks of ``BN``; grouped-query heads
read kv head ``h // (H / Hkv)``; ``causal`` masks key ``j > i + (valid - Sq)``; an additive mask
is read at its broadcast strides; with ``kv_cache`` only the first ``past + Sq`` cache positions
are keys (``past`` a run-time argument)::

    for n0 in range(0, Sk, BN):                      (blocks past n_valid or the diagonal skipped)
        s = tl.dot(q, k_block) * scale (+ mask), -inf where masked
        m_new = max(m, rowmax(s)); p = exp(s - m_new)
        l = l * exp(m - m_new) + rowsum(p); acc = acc * exp(m - m_new) + tl.dot(p, v_block)
    out = acc / l                                    (0 where every key is masked)

With grouped-query heads whose queries all fit one block (a decode step: one query per head)
a program's rows are every query of a kv head's group instead (`paths.attention_programs`):
one program per (batch, kv head), its keys and values read once for the group, and the 16-row
tile ``tl.dot`` needs holds the group's heads rather than one query and 15 empty rows.

The scratch output of the CPU kernel (its per-thread tiles) is not used. The products are IEEE
float32, or TF32 with ``tg.gpu_kernel = "attention.flash_tf32"`` (`paths`). With
``"attention.library"`` no Triton kernel: one launch of `LIBRARY_ATTENTION`, PyTorch's SDPA over
views of the buffers (`runtime_support.triton_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import Operation

from tensor_graphs.codegen.triton.kernels import (
    INT32_MAX,
    MAX_GRID_YZ,
    TritonContext,
    broadcast,
    element,
    index_lines,
    numel,
    pow2,
    program_id,
    register,
    require,
    shape,
)
from tensor_graphs.codegen.triton.kernels_matmul import PRECISION, TF32
from tensor_graphs.codegen.triton.paths import attention_blocks, attention_programs, attention_splits, attention_warps, selected
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import attention_operand_strides

#: the plan's name for ``attention.library``: the runtime calls
#: ``torch.nn.functional.scaled_dot_product_attention`` on views of q, k and v and copies its
#: result into the output's place
LIBRARY_ATTENTION = "torch.sdpa"


@register(buf.AttentionOp)
def emit_attention(ctx: TritonContext, op: Operation) -> None:
    assert isinstance(op, buf.AttentionOp)
    q, k, v = op.inputs[:3]
    mask = op.inputs[3] if len(op.inputs) == 4 else None
    out = op.outputs[0]
    sq_, sk_, sv_, so_ = op.heads_major_shapes()  # [..., H, S, D]; a buffer may be [..., S, H, D]
    require(element(q) == element(k) == element(v) == "tl.float32", op, "float32 q, k, v only")
    lead = sq_[:-3]
    h, sq, d = sq_[-3:]
    hkv, sk = sk_[-3], sk_[-2]
    dv = sv_[-1]
    batch = numel(lead)
    if batch * h * sq == 0:
        return
    variant = selected(op)
    if variant == "attention.library":
        ctx.launch(LIBRARY_ATTENTION, (1,), [q, k, v, out])
        return
    group = h // hkv
    precision = TF32 if variant == "attention.flash_tf32" else PRECISION
    bm, bn = attention_blocks(op, sq, sk, d, batch * h)
    bd, bdv = max(16, pow2(d)), max(16, pow2(dv))
    program_warps = attention_warps(op, bd)
    causal, cached = bool(op.causal.value.data), bool(op.kv_cache.value.data)
    scale = op.scale.value.data
    packed, programs = attention_programs(sq, h, hkv, batch, bm)
    splits = attention_splits(op, programs, sk)
    chunk = -(-(-(-sk // bn)) // splits) * bn  # keys per range, whole blocks
    scratch = splits * batch * h * sq * (dv + 2) if splits > 1 else 0  # partial outputs, maxima and sums
    # offsets past int32 (a long prefill's scratch is splits x its output): int64 program ids
    # (the mask too: its rows' offsets, query position x its stride, past int32's in a long prefill)
    big = max(*(numel(shape(x)) for x in (q, k, v, out)), scratch, numel(shape(mask)) if mask is not None else 0)
    # each buffer's (batch, head, position) strides and first head's offset: heads-major (S * D,
    # D), sequence-major (D, H * D); a buffer may hold more heads than read (a head range)
    (q_batch, q_head, q_pos, q_first), (k_batch, k_head, k_pos, k_first), (v_batch, v_head, v_pos, v_first), \
        (o_batch, o_head, o_pos, _) = (attention_operand_strides(shape(x), f, r[0] if r else 0)
                                       for x, f, r in zip((q, k, v, out), op.seq_major, (*op.head_ranges, None)))
    rows = _RowStrides(q_batch, q_head, q_pos, q_first, o_batch, o_head, o_pos)
    # a program's unit: a (batch, head), or with packed rows a (batch, kv head) and its group
    units, blocks = (batch * hkv, 1) if packed else (batch * h, -(-sq // bm))
    # (query block, unit) programs; the units on axis 0 when past CUDA's axis-1 limit
    axes = _axes(units)
    body = [*_row_lines(axes, big, packed, (bm, sq, h, hkv, group), rows),
            f"k_off = b * {k_batch} + hk * {k_head}{_plus(k_first)}", f"v_off = b * {v_batch} + hk * {v_head}{_plus(v_first)}",
            f"rd = tl.arange(0, {bd})", f"rdv = tl.arange(0, {bdv})",
            f"qb = tl.load(q + q_row[:, None] + rd[None, :], mask=row_ok[:, None] & (rd[None, :] < {d}), other=0.0)",
            f"m_i = tl.full([{bm}], float('-inf'), tl.float32)", f"l_i = tl.zeros([{bm}], dtype=tl.float32)",
            f"acc = tl.zeros([{bm}, {bdv}], dtype=tl.float32)",
            f"n_valid = {'past + ' + str(sq) if cached else sk}", f"shift = n_valid - {sq}"]
    if mask is not None:
        st = broadcast(shape(mask), (*sq_[:-1], sk))
        body += index_lines("b", lead, prefix="q") if lead else []
        mb = " + ".join([*(f"q{i} * {s}" for i, s in enumerate(st[: len(lead)]) if s), *([f"hq * {st[-3]}"] if st[-3] else []),
                         *([f"qi * {st[-2]}"] if st[-2] else [])]) or "0"
        body.append(f"mask_row = {mb}")
    # the key blocks: a static loop over the whole Sk (Triton's interpreter takes no run-time
    # bound), blocks past the cache's valid keys or past the causal diagonal skipped
    # key positions times their stride (H * D for sequence-major keys) past int32's offsets: int64
    inner = [f"rn = (n0 + tl.arange(0, {bn})){'.to(tl.int64)' if big > INT32_MAX else ''}",
             "kv = rn < n_valid",
             f"kb = tl.load(k + k_off + rn[None, :] * {k_pos} + rd[:, None], mask=kv[None, :] & (rd[:, None] < {d}), other=0.0)",
             f"s = tl.dot(qb, kb, input_precision=\"{precision}\") * {scale!r}",
             "ok = kv[None, :] & (rm[:, None] >= 0)"]
    if causal:
        inner.append("ok = ok & (rn[None, :] <= qi[:, None] + shift)")
    if mask is not None:
        st = broadcast(shape(mask), (*sq_[:-1], sk))
        inner.append(f"s = s + tl.load(mask + mask_row[:, None] + rn[None, :] * {st[-1]}, "
                     f"mask=row_ok[:, None] & kv[None, :], other=0.0)")
    inner += ["s = tl.where(ok, s, float('-inf'))",
              "m_new = tl.maximum(m_i, tl.max(s, 1))",
              "m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)",
              "p = tl.exp(s - m_safe[:, None])",
              "scale_old = tl.exp(m_i - m_safe)",
              "l_i = l_i * scale_old + tl.sum(p, 1)",
              f"vb = tl.load(v + v_off + rn[:, None] * {v_pos} + rdv[None, :], mask=kv[:, None] & (rdv[None, :] < {dv}), other=0.0)",
              f"acc = acc * scale_old[:, None] + tl.dot(p, vb, input_precision=\"{precision}\")",
              "m_i = m_new"]
    last_query = f"{sq - 1}" if packed else f"pid * {bm} + {bm - 1}"  # the block's last query position
    guards = (["if n0 < n_valid:"] if cached else []) + ([f"if n0 <= {last_query} + shift:"] if causal else [])
    if splits > 1:  # this program's range of keys: [sid * chunk, sid * chunk + chunk) within Sk
        guards = [f"if n0 < {sk}:", *guards]
    for guard in reversed(guards):
        inner = [guard, *("    " + line for line in inner)]
    if splits > 1:
        inner = [f"n0 = sid * {chunk} + i0", *inner]
    buffers = [q, k, v, *([mask] if mask is not None else []), out]
    params = ["q", "k", "v", *(["mask"] if mask is not None else []), "out"]
    scalars = ["past"] if cached else []
    if splits == 1:
        body += [f"for n0 in range(0, {sk}, {bn}):", *("    " + line for line in inner)]
        # a query whose keys are all masked (a padding position) gets 0, as on the CPU (never NaN:
        # its row's keys and values feed later layers through the cache)
        body += ["acc = acc * tl.where(l_i == 0.0, 0.0, 1.0 / tl.where(l_i == 0.0, 1.0, l_i))[:, None]",
                 f"tl.store(out + o_row[:, None] + rdv[None, :], acc.to({element(out)}), "
                 f"mask=row_ok[:, None] & (rdv[None, :] < {dv}))"]
        name = ctx.kernel("attention", params, body, scalars)
        ctx.launch(name, _grid(axes, blocks, units), buffers, scalars, warps=program_warps)
        return
    _split_attention(ctx, op, body, inner, buffers, params, scalars, splits, chunk, (bm, bn, bdv, sq, dv, units, blocks), big,
                     (packed, h, hkv, group), rows, program_warps)


@dataclass(frozen=True)
class _RowStrides:
    """Element strides of q's and out's rows: per batch index, per head, per query position
    (heads-major ``(S * D, D)``, sequence-major ``(D, H * D)``), and the offset of q's first head
    read (a head range): `shapes.attention_operand_strides`."""

    q_batch: int
    q_head: int
    q_pos: int
    q_first: int
    out_batch: int
    out_head: int
    out_pos: int


def _row_lines(axes: tuple[int, int], big: int, packed: bool, dims: tuple[int, int, int, int, int], st: _RowStrides) -> list[str]:
    """The first lines of an attention program: its unit (``b``, ``hk``), its ``bm`` rows
    ``rm``, each row's head ``hq``, query position ``qi``, the offsets of its rows of q and out
    (``q_row``, ``o_row``: ``b``, ``hq`` and ``qi`` at the buffers' strides) and ``row_ok``.
    Unpacked, a unit is a (batch, head) and its rows a block of queries; packed, a (batch, kv
    head) and its rows every query of its group's heads (``g`` = row // Sq): a decode step's one
    query per head fills a 16-row tile with the group's heads instead of 15 empty rows, and the
    kv head's keys are read once for the group."""
    bm, sq, h, hkv, group = dims
    wide = ".to(tl.int64)" if big > INT32_MAX else ""  # query positions times a mask's stride
    lines = [f"pid = tl.program_id({axes[0]})", f"unit = {program_id(axes[1], big)}"]
    if packed:
        lines += [f"b = unit // {hkv}", f"hk = unit % {hkv}", f"rm = tl.arange(0, {bm})", f"hq = hk * {group} + rm // {sq}",
                  f"qi = (rm % {sq}){wide}", f"row_ok = rm < {group * sq}"]
    else:
        lines += [f"b = unit // {h}", f"hq = unit % {h}", f"hk = hq // {group}", f"rm = pid * {bm} + tl.arange(0, {bm})",
                  f"qi = rm{wide}", f"row_ok = rm < {sq}"]
    return [*lines, f"q_row = b * {st.q_batch} + hq * {st.q_head} + qi * {st.q_pos}{_plus(st.q_first)}",
            f"o_row = b * {st.out_batch} + hq * {st.out_head} + qi * {st.out_pos}"]


def _split_attention(ctx: TritonContext, op: Operation, body: list[str], inner: list[str], buffers: list, params: list[str],
                     scalars: list[str], splits: int, chunk: int, dims: tuple[int, int, int, int, int, int, int], big: int,
                     heads: tuple[bool, int, int, int], strides: _RowStrides, program_warps: int | None) -> None:
    """Flash-decoding: program ``(query block, unit, range)`` runs the online softmax over its
    range of ``chunk`` keys and writes its unnormalised output, max and sum to the scratch
    buffer ``part`` (``[splits, units, R, Dv]``, then ``[splits, units, R]`` twice, ``R`` the rows
    of a unit: `_row_lines`); one program per query block then combines the ranges:
    ``out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M)`` (offsets in int64 when the scratch,
    ``big`` elements at most, passes int32's)."""
    bm, bn, bdv, sq, dv, units, blocks = dims
    packed, h, hkv, group = heads
    per_unit = group * sq if packed else sq
    acc_size, row_size = splits * units * per_unit * dv, splits * units * per_unit
    rows = f"(sid * {units} + unit) * {per_unit} + rm"
    partial = [*body, f"sid = {program_id(2, big)}", f"for i0 in range(0, {chunk}, {bn}):",
               *("    " + line for line in inner),
               f"tl.store(part + ({rows})[:, None] * {dv} + rdv[None, :], acc, mask=row_ok[:, None] & (rdv[None, :] < {dv}))",
               f"tl.store(part + {acc_size} + {rows}, m_i, mask=row_ok)",
               f"tl.store(part + {acc_size + row_size} + {rows}, l_i, mask=row_ok)"]
    partial_params = [*params, "part"]
    name = ctx.kernel("attention_part", partial_params, partial, scalars)
    axes = _axes(units)
    ctx.launch(name, (*_grid(axes, blocks, units), splits), buffers, scalars, warps=program_warps, scratch=acc_size + 2 * row_size)
    out = op.outputs[0]  # type: ignore[attr-defined]
    combine = [*_row_lines(axes, big, packed, (bm, sq, h, hkv, group), strides), f"rdv = tl.arange(0, {bdv})",
               f"top = tl.full([{bm}], float('-inf'), tl.float32)",
               f"for sid in range(0, {splits}):",
               f"    top = tl.maximum(top, tl.load(part + {acc_size} + {rows}, mask=row_ok, other=float('-inf')))",
               "top = tl.where(top == float('-inf'), 0.0, top)",
               f"total = tl.zeros([{bm}], dtype=tl.float32)",
               f"acc = tl.zeros([{bm}, {bdv}], dtype=tl.float32)",
               f"for sid in range(0, {splits}):",
               f"    w = tl.exp(tl.load(part + {acc_size} + {rows}, mask=row_ok, other=float('-inf')) - top)",
               f"    total += w * tl.load(part + {acc_size + row_size} + {rows}, mask=row_ok, other=0.0)",
               f"    acc += w[:, None] * tl.load(part + ({rows})[:, None] * {dv} + rdv[None, :], "
               f"mask=row_ok[:, None] & (rdv[None, :] < {dv}), other=0.0)",
               # every key of the query masked (a padding position): 0, as without splits
               "acc = acc * tl.where(total == 0.0, 0.0, 1.0 / tl.where(total == 0.0, 1.0, total))[:, None]",
               f"tl.store(out + o_row[:, None] + rdv[None, :], acc.to({element(out)}), "
               f"mask=row_ok[:, None] & (rdv[None, :] < {dv}))"]
    name = ctx.kernel("attention_combine", ["out", "part"], combine)
    ctx.launch(name, _grid(axes, blocks, units), [out], scratch=acc_size + 2 * row_size)


def _plus(offset: int) -> str:
    return f" + {offset}" if offset else ""


def _axes(heads: int) -> tuple[int, int]:
    """The grid axes of (query blocks, units: batch x heads or kv heads): (0, 1), the query blocks
    of one head launched together (its keys and values shared in L2); (1, 0) when the units pass
    CUDA's `MAX_GRID_YZ` programs along axis 1 (a large batch of an encoder)."""
    return (0, 1) if heads <= MAX_GRID_YZ else (1, 0)


def _grid(axes: tuple[int, int], query_blocks: int, heads: int) -> tuple[int, int]:
    return (query_blocks, heads) if axes == (0, 1) else (heads, query_blocks)

