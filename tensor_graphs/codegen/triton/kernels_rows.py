"""Row kernels as Triton kernels: softmax, layer norm, RMS norm and reductions. One program per
row; the row is read in chunks of at most `kernels.MAX_ROW_BLOCK` (a power of two), in float32::

    buf.softmax ins(%x : memref<2x4x7xf32>) outs(%o : memref<2x4x7xf32>) {dim = 2}
    =>
    @triton.jit
    def k0_softmax(x, out):
        row = tl.program_id(0)
        base = row * 7
        mx = float('-inf'); s = 0.0
        for c in range(0, 7, 8):                      # online: max and sum in one pass
            ...
        for c in range(0, 7, 8):
            ...tl.store(out + base + cols, tl.exp(v - mx) / s, mask=m)

A softmax along another dim reads its row at the stride of that dim (``[outer, D, inner]``).
A running sum (`buf.cumsum`) is a row too: ``tl.cumsum`` per chunk plus the carry of the chunks
before it.
"""

from __future__ import annotations

from xdsl.ir import Operation

from tensor_graphs.codegen.triton.kernels import (
    MAX_ROW_BLOCK,
    TritonContext,
    contiguous,
    element,
    index_lines,
    numel,
    pow2,
    program_id,
    register,
    require,
    shape,
    sum_type,
)
from tensor_graphs.dialects import buffer as buf


def _row(dims: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """(rows, D, inner) of reading ``dims`` row by row along ``dim``."""
    inner = numel(dims[dim + 1 :])
    return numel(dims) // max(dims[dim], 1), dims[dim], inner


def _row_base(inner: int, d: int, total: int) -> list[str]:
    """``base``: the first element of program ``row``'s row (rows ``[outer, inner]``, stride ``inner`` within)."""
    row = f"row = {program_id(0, total)}"
    if inner == 1:
        return [row, f"base = row * {d}"]
    return [row, f"base = (row // {inner}) * {d * inner} + row % {inner}"]


def _at(inner: int) -> str:
    return "cols" if inner == 1 else f"cols * {inner}"


@register(buf.SoftmaxOp)
def emit_softmax(ctx: TritonContext, op: Operation) -> None:
    assert isinstance(op, buf.SoftmaxOp)
    x, out = op.inputs[0], op.output
    dims = shape(x)
    dim = op.dim.value.data % len(dims)
    rows, d, inner = _row(dims, dim)
    if rows * d == 0:
        return
    block = min(pow2(d), MAX_ROW_BLOCK)
    log = bool(op.log.value.data)
    body = _row_base(inner, d, numel(dims)) + [
        "mx = tl.full([], float('-inf'), tl.float32)",
        "s = tl.full([], 0.0, tl.float32)",
        f"for c in range(0, {d}, {block}):",
        f"    cols = c + tl.arange(0, {block})",
        f"    m = cols < {d}",
        f"    v = tl.load(x + base + {_at(inner)}, mask=m, other=float('-inf')).to(tl.float32)",
        "    new = tl.maximum(mx, tl.max(v, 0))",
        "    safe = tl.where(new == float('-inf'), 0.0, new)",  # a chunk of -inf only: no exp(-inf - -inf)
        "    s = s * tl.exp(mx - safe) + tl.sum(tl.where(m, tl.exp(v - safe), 0.0), 0)",
        "    mx = new",
        f"for c in range(0, {d}, {block}):",
        f"    cols = c + tl.arange(0, {block})",
        f"    m = cols < {d}",
        f"    v = tl.load(x + base + {_at(inner)}, mask=m, other=0.0).to(tl.float32)",
        f"    y = {'v - mx - tl.log(s)' if log else 'tl.exp(v - mx) / s'}",
        f"    tl.store(out + base + {_at(inner)}, y.to({element(out)}), mask=m)",
    ]
    ctx.launch(ctx.kernel("log_softmax" if log else "softmax", ["x", "out"], body), (rows,), [x, out])


@register(buf.LayerNormOp, buf.RmsNormOp)
def emit_norm(ctx: TritonContext, op: Operation) -> None:
    """Layer norm ``(x - mean) / sqrt(var + eps) * w + b`` or RMS norm ``x / sqrt(mean(x^2) + eps) * w``
    over the last dim (float32 sums, two passes over the row, then the write)."""
    rms = isinstance(op, buf.RmsNormOp)
    x, out = op.inputs[0], op.output  # type: ignore[attr-defined]
    dims = shape(x)
    d = dims[-1]
    rows = numel(dims[:-1])
    if rows * d == 0:
        return
    eps = op.eps.value.data  # type: ignore[attr-defined]
    block = min(pow2(d), MAX_ROW_BLOCK)
    loop = [f"    cols = c + tl.arange(0, {block})", f"    m = cols < {d}",
            "    v = tl.load(x + base + cols, mask=m, other=0.0).to(tl.float32)"]
    body = [f"row = {program_id(0, numel(dims))}", f"base = row * {d}"]
    if rms:
        body += ["ss = tl.full([], 0.0, tl.float32)", f"for c in range(0, {d}, {block}):", *loop, "    ss += tl.sum(v * v, 0)",
                 f"inv = 1.0 / tl.sqrt(ss / {d} + {eps!r})", "mean = 0.0"]
        finish = "y = v * inv * tl.load(w + cols, mask=m, other=0.0)"
        params = ["x", "w", "out"]
    else:
        body += ["s = tl.full([], 0.0, tl.float32)", f"for c in range(0, {d}, {block}):", *loop, "    s += tl.sum(v, 0)",
                 f"mean = s / {d}", "ss = tl.full([], 0.0, tl.float32)", f"for c in range(0, {d}, {block}):", *loop,
                 "    dv = tl.where(m, v - mean, 0.0)", "    ss += tl.sum(dv * dv, 0)", f"inv = 1.0 / tl.sqrt(ss / {d} + {eps!r})"]
        finish = "y = (v - mean) * inv * tl.load(w + cols, mask=m, other=0.0) + tl.load(b + cols, mask=m, other=0.0)"
        params = ["x", "w", "b", "out"]
    body += [f"for c in range(0, {d}, {block}):", *loop, f"    {finish}",
             f"    tl.store(out + base + cols, y.to({element(out)}), mask=m)"]
    name = ctx.kernel("rms_norm" if rms else "layer_norm", params, body)
    ctx.launch(name, (rows,), [*op.inputs, out])  # type: ignore[attr-defined]


#: reduction kind -> (identity of a float, of an int, ``tl`` reduction of a chunk, how it joins the
#: accumulator); a product has no ``tl`` function: ``tl.reduce`` with `_mul` (in the prelude)
_REDUCE = {
    "sum": ("0.0", "0", "tl.sum(v, 0)", "acc + {r}"),
    "mean": ("0.0", "0", "tl.sum(v, 0)", "acc + {r}"),
    "max": ("float('-inf')", "{min}", "tl.max(v, 0)", "tl.maximum(acc, {r})"),
    "min": ("float('inf')", "{max}", "tl.min(v, 0)", "tl.minimum(acc, {r})"),
    "prod": ("1.0", "1", "tl.reduce(v, 0, _mul)", "acc * {r}"),
    "any": ("0.0", "0", "tl.max(v, 0)", "tl.maximum(acc, {r})"),
}

_INT_LIMITS = {"tl.int8": 7, "tl.int16": 15, "tl.int32": 31, "tl.int64": 63, "tl.int1": 0}


def _reduce_type(out: str) -> tuple[str, bool]:
    """The accumulator's ``tl`` type for an output of ``out`` and whether it is an integer: float32
    for floats below float64, the integer itself (int32 for narrower ones)."""
    if out == "tl.float64":
        return out, False
    if out.startswith("tl.float") or out == "tl.bfloat16":
        return "tl.float32", False
    return sum_type(out), True


@register(buf.ReduceOp)
def emit_reduce(ctx: TritonContext, op: Operation) -> None:
    """``kind`` (`functions.REDUCTIONS`) over ``dims``: one program per output element, the
    reduced elements enumerated flat in chunks (their offsets from the reduced dims' strides);
    floats accumulate in float32 (float64 in float64), integers and bools in their integer type."""
    assert isinstance(op, buf.ReduceOp)
    x, out = op.inputs[0], op.output
    dims = shape(x)
    kind = op.kind.data
    require(kind in _REDUCE, op, f"no Triton reduction '{kind}' ({', '.join(_REDUCE)})")
    reduced = sorted({d % len(dims) for d in op.dims.get_values()})
    kept = [d for d in range(len(dims)) if d not in reduced]
    st = contiguous(dims)
    r_dims = [dims[d] for d in reduced]
    r = numel(r_dims)
    outs = numel([dims[d] for d in kept])
    if outs == 0:
        return
    block = min(pow2(r), MAX_ROW_BLOCK)
    acc_type, integer = _reduce_type(element(out))
    float_init, int_init, chunk, join = _REDUCE[kind]
    bits = _INT_LIMITS.get(acc_type, 63)
    init = int_init.format(min=-(1 << bits) if bits else 0, max=(1 << bits) - 1 if bits else 1) if integer else float_init
    if element(out) == "tl.int1":  # bools: any/max is or, min/prod is and
        init = "1" if kind in ("min", "prod") else "0"
    body = [f"row = {program_id(0, numel(dims))}"]
    body += index_lines("row", [dims[d] for d in kept], prefix="o") if kept else []
    base = " + ".join(f"o{k} * {st[d]}" for k, d in enumerate(kept)) or "0"
    body += [f"base = {base}", f"acc = tl.full([], {init}, {acc_type})", f"for c in range(0, {r}, {block}):",
             f"    cols = c + tl.arange(0, {block})", f"    m = cols < {r}"]
    body += ["    " + line for line in index_lines("cols", r_dims, prefix="j")]
    at = " + ".join(f"j{k} * {st[d]}" for k, d in enumerate(reduced)) or "0"
    body += [f"    v = tl.load(x + base + {at}, mask=m, other={init}).to({acc_type})",
             f"    acc = {join.format(r=chunk)}"]
    if kind in ("max", "min") and not integer:  # a NaN anywhere is the result, as PyTorch's (the GPU's drops NaNs)
        body.insert(body.index(f"for c in range(0, {r}, {block}):"), "nans = tl.full([], 0, tl.int32)")
        body.append("    nans += tl.sum((v != v).to(tl.int32), 0)")
        body.append("acc = tl.where(nans > 0, float('nan'), acc)")
    if kind == "mean":
        body.append(f"acc = acc / {r}")
    body.append(f"tl.store(out + row, acc.to({element(out)}))")
    ctx.launch(ctx.kernel("reduce_" + kind, ["x", "out"], body), (outs,), [x, out])


@register(buf.ArgReduceOp)
def emit_arg_reduce(ctx: TritonContext, op: Operation) -> None:
    """The first position of the largest (smallest) element along ``dim``, a NaN counting as
    both: one program per output element; each chunk's best (``tl.argmax``/``argmin``, the first
    position among equals) replaces the carried one when strictly better, so the earliest
    position wins a tie; the first NaN, once seen, is the answer."""
    assert isinstance(op, buf.ArgReduceOp)
    x, out = op.inputs[0], op.output
    dims = shape(x)
    rows, d, inner = _row(dims, op.dim.value.data)
    if rows == 0:
        return
    largest = op.kind.data == "max"
    el = element(x)
    integer = not (el.startswith("tl.float") or el == "tl.bfloat16")
    vt = "tl.int64" if integer else "tl.float32"
    worst = ("-2**63" if largest else "2**63 - 1") if integer else ("float('-inf')" if largest else "float('inf')")
    arg, red, better = ("tl.argmax", "tl.max", ">") if largest else ("tl.argmin", "tl.min", "<")
    block = min(pow2(d), MAX_ROW_BLOCK)
    body = _row_base(inner, d, numel(dims)) + [
        f"best = tl.full([], {worst}, {vt})",
        "pos = tl.full([], 0, tl.int64)",
        "nan = tl.full([], 0, tl.int32)",
        f"for c in range(0, {d}, {block}):",
        f"    cols = c + tl.arange(0, {block})",
        f"    m = cols < {d}",
        f"    v = tl.load(x + base + {_at(inner)}, mask=m, other={worst}).to({vt})",
    ]
    if not integer:  # the first NaN is the answer, whatever comes after
        body += ["    isnan = (v != v) & m",
                 "    k = tl.argmax(isnan.to(tl.int32), 0, tie_break_left=True)",
                 "    first_nan = (nan == 0) & (tl.sum(isnan.to(tl.int32), 0) > 0)",
                 "    pos = tl.where(first_nan, c + k, pos)",
                 "    nan = tl.where(first_nan, 1, nan)",
                 f"    v = tl.where(isnan, {worst}, v)"]
    body += [f"    i = {arg}(v, 0, tie_break_left=True)",
             f"    cand = {red}(v, 0)",
             f"    take = (nan == 0) & (cand {better} best)",
             "    pos = tl.where(take, c + i, pos)",
             "    best = tl.where(take, cand, best)"]
    body.append("tl.store(out + row, pos.to(tl.int64))")
    ctx.launch(ctx.kernel("arg_reduce_" + op.kind.data, ["x", "out"], body), (rows,), [x, out])


@register(buf.CumsumOp)
def emit_cumsum(ctx: TritonContext, op: Operation) -> None:
    """``out[..., i, ...] = sum(x[..., :i+1, ...])`` along ``dim``: one program per row, chunks
    of at most `MAX_ROW_BLOCK` summed with ``tl.cumsum`` and carried (float32 for floats, the
    element type for integers, as the CPU kernel)."""
    assert isinstance(op, buf.CumsumOp)
    require(op.reduce.data == "sum", op, f"cumsum with reduce='{op.reduce.data}' (cumprod, cummax, cummin, "
            "logcumsumexp): only the running sum on the GPU path so far")
    x, out = op.inputs[0], op.output
    dims = shape(x)
    rows, d, inner = _row(dims, op.dim.value.data)
    if rows * d == 0:
        return
    el = element(out)
    acc = sum_type(el)
    block = min(pow2(d), MAX_ROW_BLOCK)
    body = _row_base(inner, d, numel(dims)) + [
        f"carry = tl.full([], 0, {acc})",
        f"for c in range(0, {d}, {block}):",
        f"    cols = c + tl.arange(0, {block})",
        f"    m = cols < {d}",
        f"    v = tl.load(x + base + {_at(inner)}, mask=m, other=0).to({acc})",
        "    run = tl.cumsum(v, 0) + carry",
        f"    tl.store(out + base + {_at(inner)}, run.to({el}), mask=m)",
        "    carry += tl.sum(v, 0)",
    ]
    ctx.launch(ctx.kernel("cumsum", ["x", "out"], body), (rows,), [x, out])
