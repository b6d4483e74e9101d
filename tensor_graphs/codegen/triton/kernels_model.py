"""Model-specific `buf` kernels as Triton kernels: the embedding gather, rotary embedding
(rotate-half) and the KV-cache write, elementwise over their outputs::

    buf.rope ins(%x, %cos, %sin) outs(%o)        y = x * cos + rotate_half(x) * sin
    =>  partner = where(i < D/2, offs + D/2, offs - D/2); sign = where(i < D/2, -1, 1)
"""

from __future__ import annotations

from xdsl.ir import Operation

from tensor_graphs.codegen.checks import embedding_message
from tensor_graphs.codegen.triton.kernels import (
    ELEMENTWISE_BLOCK,
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
    register,
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
    x, cos, sin = op.inputs  # type: ignore[attr-defined]
    out = op.output  # type: ignore[attr-defined]
    dims = shape(out)
    total = numel(dims)
    if total == 0:
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


@register(buf.CacheWriteOp)
def emit_cache_write(ctx: TritonContext, op: Operation) -> None:
    """``state[..., past + i, ...] = update[..., i, ...]`` along ``axis`` (``past``: run-time)."""
    assert isinstance(op, buf.CacheWriteOp)
    update, state = op.inputs[0], op.outputs[0]
    axis = op.axis.value.data
    st = contiguous(shape(state))
    elementwise(ctx, "cache_write", state, [(update, contiguous(shape(update)), 0)], lambda v: ([], v[0]),
                out_strides=st, out_offset=f"past * {st[axis]}", dims=shape(update), scalars=["past"])
