"""`buf.matmul` on the GPU: ``out = act(alpha * op(a) @ op(b) + beta * acc)`` by the variant
`paths.selected` names (the one pinned with ``tg.gpu_kernel``, else the heuristic's): cuBLAS then
the epilogue (``matmul.library[_tf32]``), a matrix-vector kernel (``matmul.gemv``), or a
``tl.dot`` kernel (``matmul.dot[_tf32]``), one program per ``BM x BN`` output tile and batch, the
epilogue (alpha, the accumulator broadcast to the output, the activation) applied to the tile in
registers::

    @triton.jit
    def k4_matmul(a, b, acc, out):
        pid = tl.program_id(0)
        bid = tl.program_id(1)
        rm = (pid // 12) * 64 + tl.arange(0, 64)
        rn = (pid % 12) * 64 + tl.arange(0, 64)
        c = tl.zeros((64, 64), dtype=tl.float32)
        for k0 in range(0, 768, 32):
            ...
            c += tl.dot(x, y, input_precision="ieee")
        c = c * 1.0 + 1.0 * tl.load(acc + ...)
        tl.store(out + ..., c, mask=...)

float32 products stay IEEE float32 (``input_precision="ieee"``: no TF32), as PyTorch's default,
unless a ``_tf32`` variant is pinned (a tuner measured its error within the user's tolerance).
"""

from __future__ import annotations

from xdsl.ir import Operation

from tensor_graphs.codegen.triton.expressions import unary
from tensor_graphs.codegen.triton.kernels import (
    TritonContext,
    broadcast,
    contiguous,
    element,
    elementwise,
    index_lines,
    numel,
    pow2,
    program_id,
    register,
    require,
    shape,
)
from tensor_graphs.codegen.triton.paths import GEMV_DEFERRED_MAX_ROWS, GEMV_TILE, GEMV_VARIANTS, gemv_block_n, selected, warps
from tensor_graphs.dialects import buffer as buf

#: the dot's precision for float32 operands (`tl.dot`'s ``input_precision``), and a ``_tf32`` variant's
PRECISION, TF32 = "ieee", "tf32"
#: the plan's names for the library GEMM (not Triton kernels: the runtime calls cuBLAS through
#: ``torch.matmul`` into the output's arena view, `runtime_support.triton_graph`), at float32
#: and with TF32 allowed
LIBRARY_MATMUL, LIBRARY_MATMUL_TF32 = "torch.matmul", "torch.matmul.tf32"
#: ... and with the accumulator added by the library: ``out = beta * acc + alpha * a @ op(b)``
LIBRARY_ADDMM, LIBRARY_ADDMM_TF32 = "torch.addmm", "torch.addmm.tf32"


def tile_sizes(m: int, n: int, k: int) -> tuple[int, int, int]:
    """(BM, BN, BK): 64 x 64 x 32 tiles, smaller (down to tl.dot's 16) for small dims."""
    return max(16, min(64, pow2(m))), max(16, min(64, pow2(n))), max(16, min(32, pow2(k)))


@register(buf.MatmulOp)
def emit_matmul(ctx: TritonContext, op: Operation) -> None:
    assert isinstance(op, buf.MatmulOp)
    ta, tb, alpha, beta = op.flags
    a, b_ = op.inputs[0], op.inputs[1]
    acc = op.inputs[2] if len(op.inputs) == 3 and beta != 0.0 else None
    out = op.output
    sa, sb, so = shape(a), shape(b_), shape(out)
    m, k = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    n = sb[-2] if tb else sb[-1]
    require(element(a) == element(b_) == "tl.float32", op, "float32 operands only")
    batch = so[:-2]
    if numel(so) == 0:
        return
    path = selected(op)
    if path in ("matmul.library", "matmul.library_tf32"):
        _library_matmul(ctx, op, alpha, beta, acc, LIBRARY_MATMUL_TF32 if path.endswith("tf32") else LIBRARY_MATMUL)
        return
    if path in GEMV_VARIANTS:
        _gemv(ctx, op, alpha, beta, acc, weight_format=GEMV_VARIANTS[path])
        return
    precision = TF32 if path == "matmul.dot_tf32" else PRECISION
    bm, bn, bk = tile_sizes(m, n, k)
    tiles_n = -(-n // bn)
    # strides: a's rows/columns as op(a)'s (m, k), b's as op(b)'s (k, n); batches broadcast
    st_a, st_b = contiguous(sa), contiguous(sb)
    sam, sak = (st_a[-1], st_a[-2]) if ta else (st_a[-2], st_a[-1])
    sbk, sbn = (st_b[-1], st_b[-2]) if tb else (st_b[-2], st_b[-1])
    ba = broadcast(sa[:-2], batch) if batch else ()
    bb = broadcast(sb[:-2], batch) if batch else ()
    ba = tuple(s * numel(sa[-2:]) for s in ba)
    bb = tuple(s * numel(sb[-2:]) for s in bb)
    big = max(numel(so), numel(sa), numel(sb))
    body = ["pid = tl.program_id(0)", f"bid = {program_id(1, big)}"]
    body += index_lines("bid", batch, prefix="q") if batch else []
    off = lambda strides: " + ".join(f"q{d} * {s}" for d, s in enumerate(strides) if s) or "0"  # noqa: E731
    body += [f"a_off = {off(ba)}", f"b_off = {off(bb)}", f"o_off = bid * {m * n}",
             f"rm = (pid // {tiles_n}) * {bm} + tl.arange(0, {bm})", f"rn = (pid % {tiles_n}) * {bn} + tl.arange(0, {bn})",
             f"c = tl.zeros(({bm}, {bn}), dtype=tl.float32)", f"for k0 in range(0, {k}, {bk}):",
             f"    kk = k0 + tl.arange(0, {bk})",
             f"    x = tl.load(a + a_off + rm[:, None] * {sam} + kk[None, :] * {sak}, mask=(rm[:, None] < {m}) & (kk[None, :] < {k}), other=0.0)",
             f"    y = tl.load(b + b_off + kk[:, None] * {sbk} + rn[None, :] * {sbn}, mask=(kk[:, None] < {k}) & (rn[None, :] < {n}), other=0.0)",
             f"    c += tl.dot(x, y, input_precision=\"{precision}\")",
             f"valid = (rm[:, None] < {m}) & (rn[None, :] < {n})"]
    if alpha != 1.0:
        body.append(f"c = c * {alpha!r}")
    params = ["a", "b"]
    buffers = [a, b_]
    if acc is not None:
        st = broadcast(shape(acc), so)
        at = " + ".join([*(f"q{d} * {s}" for d, s in enumerate(st[:-2]) if s), f"rm[:, None] * {st[-2]}", f"rn[None, :] * {st[-1]}"])
        body.append(f"c = c + {beta!r} * tl.load(acc + {at}, mask=valid, other=0.0)")
        params.append("acc")
        buffers.append(acc)
    act = op.activation.data
    if act != "none":
        body.append(f"c = {unary(act, 'c')}")
    body.append(f"tl.store(out + o_off + rm[:, None] * {n} + rn[None, :], c.to({element(out)}), mask=valid)")
    name = ctx.kernel("matmul", [*params, "out"], body)
    ctx.launch(name, (-(-m // bm) * tiles_n, numel(batch)), [*buffers, out], warps=warps(op))


def _library_matmul(ctx: TritonContext, op: buf.MatmulOp, alpha: float, beta: float, acc, library: str) -> None:
    """``out = op(a) @ op(b)`` by the vendor library (`LIBRARY_MATMUL`), then, when there is one,
    the epilogue ``out = act(alpha * out + beta * acc)`` in place as one elementwise kernel; an
    epilogue without activation whose accumulator is a bias (``[N]``) or the whole output (a
    residual) is the library's own: one ``addmm`` (`LIBRARY_ADDMM`), ``beta * acc`` added by
    cuBLAS, nothing swept after it."""
    out = op.output
    act = op.activation.data
    if acc is not None and act == "none" and _library_epilogue(op, acc):
        ctx.launch(LIBRARY_ADDMM_TF32 if library == LIBRARY_MATMUL_TF32 else LIBRARY_ADDMM, (1,), [op.inputs[0], op.inputs[1], acc, out])
        return
    ctx.launch(library, (1,), [op.inputs[0], op.inputs[1], out])
    if alpha == 1.0 and acc is None and act == "none":
        return
    so = shape(out)
    inputs = [(out, contiguous(so), 0)] + ([(acc, broadcast(shape(acc), so), 0)] if acc is not None else [])

    def compute(v: list[str]) -> tuple[list[str], str]:
        y = v[0] if alpha == 1.0 else f"{v[0]} * {alpha!r}"
        if acc is not None:
            y = f"{y} + {beta!r} * {v[1]}"
        return [], unary(act, y)

    elementwise(ctx, "matmul_epilogue", out, inputs, compute)


def _library_epilogue(op: buf.MatmulOp, acc) -> bool:
    """Whether ``addmm`` takes the accumulator: a 2-D weight-like rhs, and the accumulator a row
    of N (a bias) or all of the output (a residual)."""
    so, sb, sc = shape(op.output), shape(op.inputs[1]), shape(acc)
    return len(sb) == 2 and not op.flags[0] and (numel(sc) == so[-1] == sc[-1] or tuple(sc) == tuple(so))


def _gemv(ctx: TritonContext, op: buf.MatmulOp, alpha: float, beta: float, acc, weight_format: str | None = None) -> None:
    """``out[r, n] = act(alpha * sum_k a[r, k] * B[k, n] + beta * acc)`` for a few rows ``r`` (a
    decode step): one program per ``BN`` columns (`paths.gemv_block_n`), a weight tile ``[BK, BN]`` of
    `paths.GEMV_TILE` elements per K step
    multiplied by every row and summed over K in float32 (the weight streamed once)::

        for k0 in range(0, K, BK):
            w = tl.load(b + kk[:, None] * sbk + rn[None, :] * sbn)      # [BK, BN]
            acc0 += tl.sum(tl.load(a + 0 * K + kk)[:, None] * w, 0)     # one accumulator per row

    ``weight_format`` ``"bf16"``: the weight is its bfloat16 copy (`Launch.bf16`), widened to
    float32 as it is loaded; ``"int8"``: its int8 copy (`Launch.int8`), widened likewise, each
    column's sum times that column's scale (``b_scales``) at the end.
    """
    a, b_, out = op.inputs[0], op.inputs[1], op.output
    sa, sb, so = shape(a), shape(b_), shape(out)
    tb = op.flags[1]
    k = sa[-1]
    n = sb[0] if tb else sb[1]
    rows = numel(sa[:-1])
    sbk, sbn = (1, k) if tb else (n, 1)
    bn = gemv_block_n(op, n)
    bk = min(GEMV_TILE // bn, max(16, pow2(k)))
    deferred = rows <= GEMV_DEFERRED_MAX_ROWS  # each row's products summed over K once, after the loop
    body = [f"rn = {program_id(0, numel(sb))} * {bn} + tl.arange(0, {bn})", f"cols = rn < {n}"]
    body += [f"acc{r} = tl.zeros([{f'{bk}, ' if deferred else ''}{bn}], dtype=tl.float32)" for r in range(rows)]
    body += [f"for k0 in range(0, {k}, {bk}):", f"    kk = k0 + tl.arange(0, {bk})", f"    ks = kk < {k}",
             f"    w = tl.load(b + kk[:, None] * {sbk} + rn[None, :] * {sbn}, mask=ks[:, None] & cols[None, :], other=0)"
             + (".to(tl.float32)" if weight_format else "")]
    for r in range(rows):
        x = f"tl.load(a + {r * k} + kk, mask=ks, other=0.0)[:, None]"
        body.append(f"    acc{r} += {x} * w" if deferred else f"    acc{r} += tl.sum({x} * w, 0)")
    body += [f"acc{r} = tl.sum(acc{r}, 0)" for r in range(rows)] if deferred else []
    params, buffers = ["a", "b", *(["b_scales"] if weight_format == "int8" else [])], [a, b_]
    if weight_format == "int8":
        body.append("sc = tl.load(b_scales + rn, mask=cols, other=0.0)")
        body += [f"acc{r} = acc{r} * sc" for r in range(rows)]
    if acc is not None:
        params.append("acc")
        buffers.append(acc)
        st = broadcast(shape(acc), so)
        # rows fold: row r is output index r of the flattened leading dims
        lead = so[:-1]
    act = op.activation.data
    for r in range(rows):
        y = f"acc{r}" if alpha == 1.0 else f"acc{r} * {alpha!r}"
        if acc is not None:
            idx, rest = [], r
            for d in reversed(lead):
                idx.append(rest % d)
                rest //= d
            idx.reverse()
            base = sum(i * s for i, s in zip(idx, st[:-1]))
            y = f"{y} + {beta!r} * tl.load(acc + {base} + rn * {st[-1]}, mask=cols, other=0.0)"
        body.append(f"tl.store(out + {r * n} + rn, ({unary(act, y)}).to({element(out)}), mask=cols)")
    kernel = ctx.kernel(f"gemv_{weight_format}" if weight_format else "gemv", [*params, "out"], body)
    ctx.launch(kernel, (-(-n // bn),), [*buffers, out], bf16=(1,) if weight_format == "bf16" else (),
               int8=(1,) if weight_format == "int8" else (), warps=warps(op))
