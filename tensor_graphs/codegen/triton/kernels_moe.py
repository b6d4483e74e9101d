"""The mixture-of-experts `buf` kernels as Triton kernels (the GPU counterparts of
`codegen.llvm.kernels_moe`): the router's top-k and the sort of tokens by expert
(`buf.argtopk`), the inverse permutation (`buf.put`) and the experts' GEMMs
(`buf.grouped_matmul`).

- `buf.argtopk`: each element's rank in its row is counted, not sorted: the number of elements
  ranking before it (larger, or smaller with ``largest = false``; NaN above every number; equal
  values by position, so the order is stable as the CPU's merge sort), compared chunk against
  chunk; an element of rank ``r < k`` writes its position to ``out[r]``::

      rank = sum_j [x_j before x_i  or  (x_j ties x_i and j < i)]      (blocks [BI, BJ])
      tl.store(out + rank * inner, i, mask=rank < k)

  Quadratic in the row (a router's experts, a sort of ``tokens x k`` expert ids: thousands),
  every row and block of ranks a program of its own.
- `buf.put`: a copy of the input, then one program per block of offsets; each offset checked;
  without ``accumulate`` only the last write to an offset is stored (the CPU's in-order
  semantics, with no race between duplicates); with it, the first occurrence of an offset adds
  the sum of every value put there.
- `buf.grouped_matmul`: one program per ``group x BN columns``; the group's rows (a run-time
  range from the offsets, each checked) in ``BM``-row tiles through ``tl.dot`` at IEEE float32,
  or one row at a time (a decode step: a matrix-vector product per row, the weight tile read
  once per row) when the whole matmul has at most `GROUPED_GEMV_MAX_ROWS` rows; the last
  group's programs zero the rows past the last offset. The loops run over the static row
  tiles and skip those outside the group (a run-time bound on a loop is not something
  Triton's interpreter runs): an expert no token chose costs S / BM scalar tests.
"""

from __future__ import annotations

from xdsl.ir import Operation

from tensor_graphs.codegen.checks import grouped_offsets_message, put_message, zero_divisor_message
from tensor_graphs.codegen.triton.kernels import (
    INT32_MAX,
    TritonContext,
    contiguous,
    element,
    elementwise,
    flag_failures,
    numel,
    pow2,
    program_id,
    register,
    require,
    shape,
    sum_type,
)
from tensor_graphs.codegen.triton.kernels_matmul import PRECISION
from tensor_graphs.dialects import buffer as buf

#: an argtopk's or put's elements compared at once: blocks of ``PAIR_BLOCK x PAIR_BLOCK`` pairs
PAIR_BLOCK = 64
#: a grouped matmul of at most this many rows runs each row as a matrix-vector product
GROUPED_GEMV_MAX_ROWS = 16
#: a grouped matmul's tile: rows, columns, K step
GROUPED_BM, GROUPED_BN, GROUPED_BK = 32, 64, 32


def _before(a: str, b: str, largest: bool, floating: bool) -> str:
    """Whether value ``a`` ranks strictly before ``b``: larger (smaller) first, NaN above every number."""
    if not floating:
        return f"({a} > {b})" if largest else f"({a} < {b})"
    if largest:  # a > b, or a is NaN and b is not
        return f"(({a} > {b}) | (({a} != {a}) & ({b} == {b})))"
    return f"(({a} < {b}) | (({b} != {b}) & ({a} == {a})))"


@register(buf.ArgTopkOp)
def emit_argtopk(ctx: TritonContext, op: Operation) -> None:
    assert isinstance(op, buf.ArgTopkOp)
    x, out = op.inputs[0], op.outputs[0]
    require(element(out) == "tl.int64", op, "the positions are an i64 buffer")
    el = element(x)
    require(el != "tl.int1", op, "no top-k of i1 elements")
    dims, dim, k = shape(x), op.dim.value.data, op.k.value.data
    outer, n, inner = numel(dims[:dim]), dims[dim], numel(dims[dim + 1 :])
    if outer * inner * k == 0:
        return
    floating = el.startswith("tl.float") or el.startswith("tl.bfloat")
    largest = bool(op.largest.value.data)
    bi = min(pow2(n), PAIR_BLOCK)
    xi, xj = "xi[:, None]", "xj[None, :]"
    wide = ".to(tl.int64)" if numel(dims) > INT32_MAX else ""  # positions times inner past int32
    body = [f"row = {program_id(0, numel(dims))}",
            f"base = (row // {inner}) * {n * inner} + row % {inner}",
            f"obase = (row // {inner}) * {k * inner} + row % {inner}",
            f"ii = (tl.program_id(1) * {bi} + tl.arange(0, {bi})){wide}",
            f"mi = ii < {n}",
            f"xi = tl.load(x + base + ii * {inner}, mask=mi, other=0)",
            f"rank = tl.zeros([{bi}], dtype=tl.int32)",
            f"for c in range(0, {n}, {bi}):",
            f"    jj = (c + tl.arange(0, {bi})){wide}",
            f"    xj = tl.load(x + base + jj * {inner}, mask=jj < {n}, other=0)",
            f"    first = {_before(xj, xi, largest, floating)}",
            f"    tie = ({_before(xi, xj, largest, floating)} == 0) & (first == 0)",
            f"    earlier = (first | (tie & (jj[None, :] < ii[:, None]))) & (jj[None, :] < {n})",
            "    rank += tl.sum(earlier.to(tl.int32), 1)",
            f"tl.store(out + obase + rank{wide} * {inner}, ii.to(tl.int64), mask=mi & (rank < {k}))"]
    ctx.launch(ctx.kernel("argtopk", ["x", "out"], body), (outer * inner, -(-n // bi)), [x, out])


@register(buf.PutOp)
def emit_put(ctx: TritonContext, op: Operation) -> None:
    assert isinstance(op, buf.PutOp)
    (x, offsets, values), out = op.inputs, op.output
    require(element(offsets) == "tl.int64", op, f"offsets must be an i64 buffer, got {offsets.type}")
    require(element(x) == element(values) == element(out), op, "input, values and output element types differ")
    accumulate = bool(op.accumulate.value.data)
    require(not (accumulate and element(out) == "tl.int1"), op, "accumulate on i1 elements")
    require(not accumulate or op.reduce.data == "sum", op,
            f"put with reduce='{op.reduce.data}' (scatter_reduce): only 'sum' on the GPU path so far")
    size, count = numel(shape(x)), numel(shape(offsets))
    if size == 0:
        return
    elementwise(ctx, "copy", out, [(x, contiguous(shape(x)), 0)], lambda v: ([], v[0]))
    if count == 0:
        return
    bi = min(pow2(count), PAIR_BLOCK)
    body = [f"ii = tl.program_id(0) * {bi} + tl.arange(0, {bi})",
            f"mi = ii < {count}",
            "oi = tl.load(offsets + ii, mask=mi, other=0)",
            f"ok = mi & (oi >= 0) & (oi < {size})",
            *flag_failures(ctx.check(put_message(shape(x))), f"mi & ((oi < 0) | (oi >= {size}))"),
            f"others = tl.zeros([{bi}], dtype=tl.int32)"]
    if accumulate:
        body.append(f"total = tl.zeros([{bi}], dtype={sum_type(element(out))})")
    body += [f"for c in range(0, {count}, {bi}):",
             f"    jj = c + tl.arange(0, {bi})",
             f"    mj = jj < {count}",
             "    same = (tl.load(offsets + jj, mask=mj, other=-1)[None, :] == oi[:, None]) & mj[None, :]"]
    if accumulate:  # the first occurrence of an offset adds every value put there
        body += ["    others += tl.sum((same & (jj[None, :] < ii[:, None])).to(tl.int32), 1)",
                 f"    vj = tl.load(values + jj, mask=mj, other=0).to({sum_type(element(out))})",
                 "    total += tl.sum(tl.where(same, vj[None, :], 0), 1)",
                 f"tl.store(out + oi, (tl.load(out + oi, mask=ok & (others == 0), other=0) + total).to({element(out)}), "
                 "mask=ok & (others == 0))"]
    else:  # the last write to an offset wins: only it is stored
        body += ["    others += tl.sum((same & (jj[None, :] > ii[:, None])).to(tl.int32), 1)",
                 "tl.store(out + oi, tl.load(values + ii, mask=mi, other=0), mask=ok & (others == 0))"]
    kernel = ctx.kernel("put_add" if accumulate else "put", ["offsets", "values", "out"], body, checks=True)
    ctx.launch(kernel, (-(-count // bi),), [offsets, values, out], checks=True)


@register(buf.CheckNonzeroOp)
def emit_check_nonzero(ctx: TritonContext, op: Operation) -> None:
    """A copy of the integer input; a zero anywhere sets the division-by-zero check."""
    assert isinstance(op, buf.CheckNonzeroOp)
    (x,), out = op.inputs, op.output
    size = numel(shape(x))
    if size == 0:
        return
    elementwise(ctx, "copy", out, [(x, contiguous(shape(x)), 0)], lambda v: ([], v[0]))
    bi = min(pow2(size), PAIR_BLOCK)
    body = [f"ii = tl.program_id(0) * {bi} + tl.arange(0, {bi})",
            f"v = tl.load(x + ii, mask=ii < {size}, other=1)",
            *flag_failures(ctx.check(zero_divisor_message()), "v == 0")]
    ctx.launch(ctx.kernel("check_nonzero", ["x"], body, checks=True), (-(-size // bi),), [x], checks=True)


@register(buf.GroupedMatmulOp)
def emit_grouped_matmul(ctx: TritonContext, op: Operation) -> None:
    assert isinstance(op, buf.GroupedMatmulOp)
    (a, w, offsets), out = op.inputs, op.output
    for v in (a, w, out):
        require(element(v) == "tl.float32", op, f"f32 buffers only, got {v.type}")
    require(element(offsets) == "tl.int64", op, f"offsets must be an i64 buffer, got {offsets.type}")
    transposed = bool(op.transpose_b.value.data)
    (s, k), (groups, *_), (_, n) = shape(a), shape(w), shape(out)
    if s * n == 0 or groups == 0:
        return
    bn = min(GROUPED_BN, max(16, pow2(n)))
    bk = min(GROUPED_BK, max(16, pow2(k)))
    # w[g] as op(w[g]): element (kk, nn) at g * N * K + kk * skk + nn * snn
    skk, snn = (1, k) if transposed else (n, 1)
    slot = ctx.check(grouped_offsets_message(s))
    body = [f"g = {program_id(0, numel(shape(w)))}",
            f"rn = tl.program_id(1) * {bn} + tl.arange(0, {bn})",
            f"cols = rn < {n}",
            "end = tl.load(offsets + g)",
            "start = tl.where(g > 0, tl.load(offsets + tl.maximum(g - 1, 0)), 0)",
            f"bad = (start > end) | (end > {s}) | (start < 0)",
            "if bad:",
            f"    tl.store(dims + {slot}, 1)",
            "lo = tl.where(bad, 0, start)",
            "hi = tl.where(bad, 0, end)",
            f"wg = w + g * {n * k}"]
    if s <= GROUPED_GEMV_MAX_ROWS:  # a row at a time: out[r] = a[r] @ op(w[g])
        body += [f"for r in range(0, {s}):",
                 "    if (r >= lo) & (r < hi):",
                 f"        acc = tl.zeros([{bn}], dtype=tl.float32)",
                 f"        for k0 in range(0, {k}, {bk}):",
                 f"            kk = k0 + tl.arange(0, {bk})",
                 f"            ks = kk < {k}",
                 f"            y = tl.load(wg + kk[:, None] * {skk} + rn[None, :] * {snn}, mask=ks[:, None] & cols[None, :], other=0.0)",
                 f"            acc += tl.sum(tl.load(a + r * {k} + kk, mask=ks, other=0.0)[:, None] * y, 0)",
                 f"        tl.store(out + r * {n} + rn, acc, mask=cols)"]
    else:
        bm = GROUPED_BM
        body += [f"for r0 in range(0, {s}, {bm}):",
                 f"    if (r0 + {bm} > lo) & (r0 < hi):",
                 f"        rm = r0 + tl.arange(0, {bm})",
                 "        rows = (rm >= lo) & (rm < hi)",
                 f"        c = tl.zeros(({bm}, {bn}), dtype=tl.float32)",
                 f"        for k0 in range(0, {k}, {bk}):",
                 f"            kk = k0 + tl.arange(0, {bk})",
                 f"            ks = kk < {k}",
                 f"            x = tl.load(a + rm[:, None] * {k} + kk[None, :], mask=rows[:, None] & ks[None, :], other=0.0)",
                 f"            y = tl.load(wg + kk[:, None] * {skk} + rn[None, :] * {snn}, mask=ks[:, None] & cols[None, :], other=0.0)",
                 f"            c += tl.dot(x, y, input_precision=\"{PRECISION}\")",
                 f"        tl.store(out + rm[:, None] * {n} + rn[None, :], c, mask=rows[:, None] & cols[None, :])"]
    # the last group's programs zero the rows no group holds
    bz = min(GROUPED_BM, pow2(s))
    body += [f"if g == {groups - 1}:",
             f"    for r0 in range(0, {s}, {bz}):",
             f"        if r0 + {bz} > hi:",
             f"            rz = r0 + tl.arange(0, {bz})",
             f"            tl.store(out + rz[:, None] * {n} + rn[None, :], tl.zeros(({bz}, {bn}), dtype=tl.float32), "
             f"mask=((rz >= hi) & (rz < {s}))[:, None] & cols[None, :])"]
    kernel = ctx.kernel("grouped_matmul", ["a", "w", "offsets", "out"], body, checks=True)
    ctx.launch(kernel, (groups, -(-n // bn)), [a, w, offsets, out], checks=True)
