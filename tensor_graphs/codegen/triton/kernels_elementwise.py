"""Elementwise and data-movement `buf` kernels as Triton kernels: one program per
`kernels.ELEMENTWISE_BLOCK` output elements, each input read at its broadcast strides.

    buf.add ins(%a, %b : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>)
    =>
    @triton.jit
    def k3_add(in0, in1, out):
        offs = tl.program_id(0) * 1024 + tl.arange(0, 1024)
        m = offs < 32
        _r = offs
        i1 = _r % 8
        ...
        v0 = tl.load(in0 + (offs), mask=m, other=0)
        v1 = tl.load(in1 + (i1), mask=m, other=0)
        tl.store(out + (offs), ((v0) + (v1)).to(tl.float32), mask=m)

Movement ops are the same loop with other strides: a transpose reads its input at permuted
strides, a slice at an offset and a step, a broadcast at stride 0, a concatenation is one
launch per input writing its part of the output. A gather (`buf.take`) reads its source at
run-time offsets, each checked (`kernels.flag_failures`).
"""

from __future__ import annotations

from xdsl.ir import Operation

from tensor_graphs.codegen.checks import take_message
from tensor_graphs.codegen.triton.expressions import binary, body_expression, unary
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
    register,
    require,
    shape,
)
from tensor_graphs.dialects import buffer as buf

_BINARY_OPS = {buf.AddOp: "add", buf.SubOp: "sub", buf.MulOp: "mul", buf.DivOp: "div"}


def _inputs(op: Operation) -> list:
    out = shape(op.output)  # type: ignore[attr-defined]
    return [(v, broadcast(shape(v), out), 0) for v in op.inputs]  # type: ignore[attr-defined]


@register(*_BINARY_OPS, buf.BinaryOp)
def emit_binary(ctx: TritonContext, op: Operation) -> None:
    fn = _BINARY_OPS.get(type(op)) or op.fn.data  # type: ignore[attr-defined]
    elementwise(ctx, fn, op.output, _inputs(op), lambda v: ([], binary(fn, v[0], v[1])))  # type: ignore[attr-defined]


@register(buf.ReluOp, buf.UnaryOp)
def emit_unary(ctx: TritonContext, op: Operation) -> None:
    fn = "relu" if isinstance(op, buf.ReluOp) else op.fn.data  # type: ignore[attr-defined]
    elementwise(ctx, fn, op.output, _inputs(op), lambda v: ([], unary(fn, v[0])))  # type: ignore[attr-defined]


@register(buf.CastOp, buf.CopyOp, buf.BroadcastOp)
def emit_copy(ctx: TritonContext, op: Operation) -> None:
    """A copy, a broadcast copy or a conversion (the store converts to the output's type)."""
    elementwise(ctx, op.name.removeprefix("buf."), op.output, _inputs(op), lambda v: ([], v[0]))  # type: ignore[attr-defined]


@register(buf.SelectOp)
def emit_select(ctx: TritonContext, op: Operation) -> None:
    elementwise(ctx, "select", op.output, _inputs(op), lambda v: ([], f"tl.where({v[0]} != 0, {v[1]}, {v[2]})"))  # type: ignore[attr-defined]


@register(buf.BiasActivationOp)
def emit_bias_activation(ctx: TritonContext, op: Operation) -> None:
    act = op.activation.data  # type: ignore[attr-defined]
    elementwise(ctx, "bias_" + act, op.output, _inputs(op), lambda v: ([], unary(act, f"{v[0]} + {v[1]}")))  # type: ignore[attr-defined]


@register(buf.FusedElementwiseOp)
def emit_fused(ctx: TritonContext, op: Operation) -> None:
    """The body's `arith`/`math` ops as straight-line statements (`expressions.body_expression`)."""
    assert isinstance(op, buf.FusedElementwiseOp)
    elementwise(ctx, "fused", op.output, _inputs(op), lambda v: body_expression(op.body.block, v))


@register(buf.TransposeOp)
def emit_transpose(ctx: TritonContext, op: Operation) -> None:
    """``out[i] = x[i permuted back]``: x read at its strides permuted into the output's order."""
    perm = op.perm.get_values()  # type: ignore[attr-defined]
    st = contiguous(shape(op.inputs[0]))  # type: ignore[attr-defined]
    elementwise(ctx, "transpose", op.output, [(op.inputs[0], tuple(st[p] for p in perm), 0)], lambda v: ([], v[0]))  # type: ignore[attr-defined]


@register(buf.SliceOp)
def emit_slice(ctx: TritonContext, op: Operation) -> None:
    x = op.inputs[0]  # type: ignore[attr-defined]
    dim, start, step = op.dim.value.data, op.start.value.data, op.step.value.data  # type: ignore[attr-defined]
    st = list(contiguous(shape(x)))
    offset = start * st[dim]
    st[dim] *= step
    elementwise(ctx, "slice", op.output, [(x, tuple(st), offset)], lambda v: ([], v[0]))  # type: ignore[attr-defined]


@register(buf.ConcatOp)
def emit_concat(ctx: TritonContext, op: Operation) -> None:
    """One launch per input, writing its slab of the output along ``dim``."""
    out = op.output  # type: ignore[attr-defined]
    dim = op.dim.value.data  # type: ignore[attr-defined]
    st = contiguous(shape(out))
    at = 0
    for x in op.inputs:  # type: ignore[attr-defined]
        dims = shape(x)
        require(len(dims) == len(shape(out)), op, "inputs of the output's rank")
        elementwise(ctx, "concat", out, [(x, contiguous(dims), 0)], lambda v: ([], v[0]), out_strides=st,
                    out_offset=at * st[dim], dims=dims)
        at += dims[dim]


@register(buf.Im2colOp)
def emit_im2col(ctx: TritonContext, op: Operation) -> None:
    """The windows of a convolution or a pooling, ``out [N, C, KH, KW, OH, OW]``: each output
    element reads ``x[n, c, oh * sh - ph + i * dh, ow * sw - pw + j * dw]``, ``pad_value``
    outside the input (the panel layout and the fused reductions are the CPU's packed paths)."""
    assert isinstance(op, buf.Im2colOp)
    require(op.panel_columns == 0 and not op.reduce.data, op, "only the plain window layout (no panels, no fused reduction)")
    x, out = op.inputs[0], op.output
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = op.window
    n, c, h, w = shape(x)
    dims = shape(out)
    total = numel(dims)
    if total == 0:
        return
    block = ELEMENTWISE_BLOCK
    pad = op.pad_value.value.data
    pad_text = repr(float(pad)) if pad == pad and abs(pad) != float("inf") else f"float('{pad}')"
    body = [*flat_offsets(total), *index_lines("offs", dims),
            f"hh = i4 * {sh} - {ph} + i2 * {dh}", f"ww = i5 * {sw} - {pw} + i3 * {dw}",
            f"inside = m & (hh >= 0) & (hh < {h}) & (ww >= 0) & (ww < {w})",
            f"v = tl.load(x + i0 * {c * h * w} + i1 * {h * w} + hh * {w} + ww, mask=inside, other={pad_text})",
            f"tl.store(out + offs, v.to({element(out)}), mask=m)"]
    ctx.launch(ctx.kernel("im2col", ["x", "out"], body), (-(-total // block),), [x, out])


@register(buf.TakeOp)
def emit_take(ctx: TritonContext, op: Operation) -> None:
    """``out.flat[i] = x.flat[offsets.flat[i]]``; an offset outside ``[0, numel(x))`` is not
    read: it sets the check flag of the CPU kernel's message."""
    assert isinstance(op, buf.TakeOp)
    x, offsets = op.inputs
    out = op.output
    require(element(offsets) == "tl.int64", op, f"offsets must be an i64 buffer, got {offsets.type}")
    require(element(x) == element(out), op, "input and output element types differ")
    total, size = numel(shape(out)), numel(shape(x))
    if total == 0:
        return
    body = [*flat_offsets(total, extent=max(total, size)),
            "j = tl.load(offsets + offs, mask=m, other=0)",
            f"ok = m & (j >= 0) & (j < {size})",
            *flag_failures(ctx.check(take_message(shape(x))), f"m & ((j < 0) | (j >= {size}))"),
            "tl.store(out + offs, tl.load(x + j, mask=ok, other=0), mask=m)"]
    kernel = ctx.kernel("take", ["x", "offsets", "out"], body, checks=True)
    ctx.launch(kernel, (-(-total // ELEMENTWISE_BLOCK),), [x, offsets, out], checks=True)
