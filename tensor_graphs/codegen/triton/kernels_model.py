"""Model-specific `buf` kernels as Triton kernels: the embedding gather, rotary embedding
(rotate-half) and the KV-cache write, elementwise over their outputs::

    buf.rope ins(%x, %cos, %sin) outs(%o)        y = x * cos + rotate_half(x) * sin
    =>  partner = where(i < D/2, offs + D/2, offs - D/2); sign = where(i < D/2, -1, 1)

(a rope with a norm weight, RMS-normalising its rows first, runs a program per row instead).
"""

from __future__ import annotations

from xdsl.ir import Operation

from tensor_graphs.codegen.checks import embedding_message
from tensor_graphs.codegen.triton.kernels import (
    ELEMENTWISE_BLOCK,
    MAX_ROW_BLOCK,
    TritonContext,
    broadcast,
    contiguous,
    element,
    elementwise,
    flag_failures,
    flat_offsets,
    index_lines,
    numel,
    offset_expr,
    pow2,
    program_id,
    register,
    require,
    shape,
)
from tensor_graphs.dialects import buffer as buf


@register(buf.EmbeddingOp)
def emit_embedding(ctx: TritonContext, op: Operation) -> None:
    """``out[..., c] = table[indices[...], c]``; an index outside the table is never read: it
    sets the check flag of the CPU kernel's message (`kernels.CHECKS_START`), which the runtime
    raises as an IndexError once the plan has run."""
    table, indices = op.inputs  # type: ignore[attr-defined]
    out = op.output  # type: ignore[attr-defined]
    rows, d = shape(table)
    total = numel(shape(out))
    if total == 0:
        return
    block = ELEMENTWISE_BLOCK
    body = [*flat_offsets(total, extent=total + rows * d),
            f"idx = tl.load(indices + offs // {d}, mask=m, other=0).to(tl.int64)",
            f"ok = m & (idx >= 0) & (idx < {rows})",
            *flag_failures(ctx.check(embedding_message(op, rows)), "m & ((idx < 0) | (idx >= " + str(rows) + "))"),
            f"v = tl.load(table + idx * {d} + offs % {d}, mask=ok, other=0.0)",
            f"tl.store(out + offs, v.to({element(out)}), mask=m)"]
    kernel = ctx.kernel("embedding", ["table", "indices", "out"], body, checks=True)
    ctx.launch(kernel, (-(-total // block),), [table, indices, out], checks=True)


@register(buf.RopeOp)
def emit_rope(ctx: TritonContext, op: Operation) -> None:
    x, cos, sin = op.inputs[:3]  # type: ignore[attr-defined]
    out = op.output  # type: ignore[attr-defined]
    dims = shape(out)
    total = numel(dims)
    if total == 0:
        return
    if len(op.inputs) == 4:  # type: ignore[attr-defined]
        _rope_after_rms_norm(ctx, op)
        return
    half = dims[-1] // 2
    block = ELEMENTWISE_BLOCK
    body = [*flat_offsets(total), *index_lines("offs", dims)]
    last = f"i{len(dims) - 1}"
    body += [f"lo = {last} < {half}",
             f"partner = tl.where(lo, offs + {half}, offs - {half})",
             "xv = tl.load(x + offs, mask=m, other=0.0)",
             "xp = tl.load(x + partner, mask=m, other=0.0)",
             f"c = tl.load(cos + ({offset_expr(broadcast(shape(cos), dims))}), mask=m, other=0.0)",
             f"s = tl.load(sin + ({offset_expr(broadcast(shape(sin), dims))}), mask=m, other=0.0)",
             "y = xv * c + tl.where(lo, -xp, xp) * s",
             f"tl.store(out + offs, y.to({element(out)}), mask=m)"]
    ctx.launch(ctx.kernel("rope", ["x", "cos", "sin", "out"], body), (-(-total // block),), [x, cos, sin, out])


def _rope_after_rms_norm(ctx: TritonContext, op: Operation) -> None:
    """``buf.rope ins(x, cos, sin, w) {eps}``: one program per row of the last dim ``D``: its sum
    of squares (float32, blocks of at most `MAX_ROW_BLOCK`), ``inv = 1 / sqrt(sum / D + eps)``,
    then per block of the lower half ``j`` (``h = D / 2``), ``a = x[j] * inv * w[j]``, ``r =
    x[j + h] * inv * w[j + h]``: ``out[j] = a cos[j] - r sin[j]``, ``out[j + h] = r cos[j + h] +
    a sin[j + h]`` (the tables at their broadcast strides; ``x`` may be ``out``: a block is
    read before it is written)."""
    x, cos, sin, w = op.inputs  # type: ignore[attr-defined]
    out = op.output  # type: ignore[attr-defined]
    require(all(element(v) == "tl.float32" for v in (x, cos, sin, w, out)), op, "float32 only with a norm weight")
    dims = shape(out)
    d, h = dims[-1], dims[-1] // 2
    eps = op.eps.value.data  # type: ignore[attr-defined]
    cs, ss = broadcast(shape(cos), dims), broadcast(shape(sin), dims)
    block, half = min(pow2(d), MAX_ROW_BLOCK), min(pow2(h), MAX_ROW_BLOCK)

    def table(name: str, st: tuple[int, ...], col: str) -> str:
        return f"tl.load({name} + {name}_row + ({col}) * {st[-1]}, mask=m, other=0.0)"

    body = [f"row = {program_id(0, numel(dims))}", f"base = row * {d}", *index_lines("row", dims[:-1]),
            f"cos_row = {offset_expr(cs[:-1])}", f"sin_row = {offset_expr(ss[:-1])}",
            "total = tl.full([], 0.0, tl.float32)",
            f"for c in range(0, {d}, {block}):",
            f"    cols = c + tl.arange(0, {block})", f"    m = cols < {d}",
            "    v = tl.load(x + base + cols, mask=m, other=0.0)", "    total += tl.sum(v * v, 0)",
            f"inv = 1.0 / tl.sqrt(total / {d} + {eps!r})",
            f"for c in range(0, {h}, {half}):",
            f"    j = c + tl.arange(0, {half})", f"    m = j < {h}",
            "    a = tl.load(x + base + j, mask=m, other=0.0) * inv * tl.load(w + j, mask=m, other=0.0)",
            f"    r = tl.load(x + base + {h} + j, mask=m, other=0.0) * inv * tl.load(w + {h} + j, mask=m, other=0.0)",
            f"    lo = a * {table('cos', cs, 'j')} - r * {table('sin', ss, 'j')}",
            f"    hi = r * {table('cos', cs, f'j + {h}')} + a * {table('sin', ss, f'j + {h}')}",
            f"    tl.store(out + base + j, lo.to({element(out)}), mask=m)",
            f"    tl.store(out + base + {h} + j, hi.to({element(out)}), mask=m)"]
    name = ctx.kernel("rms_norm_rope", ["x", "cos", "sin", "w", "out"], body)
    ctx.launch(name, (numel(dims[:-1]),), [x, cos, sin, w, out])


@register(buf.CacheWriteOp)
def emit_cache_write(ctx: TritonContext, op: Operation) -> None:
    """``state[..., past + i, ...] = update[..., i, ...]`` along ``axis`` (``past``: run-time)."""
    assert isinstance(op, buf.CacheWriteOp)
    update, state = op.inputs[0], op.outputs[0]
    axis = op.axis.value.data
    st = contiguous(shape(state))
    elementwise(ctx, "cache_write", state, [(update, contiguous(shape(update)), 0)], lambda v: ([], v[0]),
                out_strides=st, out_offset=f"past * {st[axis]}", dims=shape(update), scalars=["past"])
