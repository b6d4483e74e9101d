"""Emitters of the `buf` kernels that move data without arithmetic: `copy`, `broadcast`,
`transpose`, `slice`, `concat`, `embedding` (and `packed_embedding`) and `cache_write`.
Importing this module registers them into :data:`kernels.REGISTRY` (``convert_buffer_to_llvm``
imports it).

- `buf.copy`, `buf.broadcast`, `buf.transpose`, `buf.slice`, `buf.concat` are strided copies:
  one ``llvm.memcpy`` per contiguous run (`kernels.emit_copy_nest`; a transposed read is
  cache-blocked in 16x16 tiles, see `loops.emit_tiled_nest`), rows split among the threads
  when large. A concat input already in place in its output slab is not copied.
- `buf.embedding` (and `buf.packed_embedding`, from a table packed into column panels) checks
  every index against [0, V): an index out of range makes the graph function return an error
  status (see `KernelContext.check`) instead of reading out of bounds. The message names the
  table as the model does (a tied table by the name its embedding uses, ``tg.table_name``) and,
  when the indices are a graph input, asks the runtime for the offending value.
- `buf.im2col` (the windows of a convolution or pooling, `tg.im2col`): rows ``(n, c)`` split
  among the threads; per row, every tap ``(i, j)`` is one strided copy of the input rows and
  columns it reads (a ``memcpy`` per output row at stride 1: the valid range of each tap is
  known when compiling) and a fill of ``pad_value`` over the border it pads. A pooling (``reduce``)
  computes each window as it writes the output instead (`window_reduce`), from a padded copy of
  the plane on the stack; only a plane too large for it goes tap by tap.
- `buf.cache_write {axis}` copies its update into the state (a KV cache) at positions
  ``[past, past + n)`` along ``axis``, ``past`` being the run-time ``dims[0]``
  (`KernelContext.dim`): one ``llvm.memcpy`` of ``n * inner`` elements per index of the dims
  before ``axis``. It first checks ``past + n <= capacity`` (an unsigned compare, which also
  rejects a negative ``past``) and otherwise returns an error status naming the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import llvm
from xdsl.dialects.builtin import BFloat16Type, IntegerAttr, IntegerType, f32, f64, i1, i16, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue

from tensor_graphs.codegen.checks import embedding_message, take_message
from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    SYMBOLIC_KERNELS,
    Access,
    KernelContext,
    LoweringError,
    Operand,
    _element,
    _fmax,
    _require_same_element,
    _shape,
    check_no_overlap,
    emit_copy_nest,
    emit_elementwise,
    emit_pointwise,
    image_and_row,
    parallel_nest,
    split_rows,
    splat_value,
    symbolic_refusal,
)
from tensor_graphs.codegen.llvm.bf16_dot import pair_word
from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder, broadcast_strides, emit_for, emit_if, emit_loop, icmp
from tensor_graphs.codegen.llvm.loops import value as _val
from tensor_graphs.codegen.llvm.scalar import emit_convert
from tensor_graphs.codegen.llvm import window_reduce
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.symbolic import format_expr, is_static, parse_expr
from tensor_graphs.dialects.shapes import contiguous_strides, numel

def _emit_copy(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.CopyOp | buf.BroadcastOp | buf.CastOp)
    if _element(op.inputs[0]) != _element(op.output):
        raise LoweringError(f"{op.name}: input and output element types differ")
    if ctx.same_bytes(op.inputs[0], op.output) and numel(_shape(op.inputs[0])) == numel(_shape(op.output)):
        return  # copying a buffer onto itself
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=False)
    src = op.inputs[0]
    _emit_strided_copy(ctx, op.output, src, broadcast_strides(_shape(src), _shape(op.output)))


def _emit_strided_copy(ctx: KernelContext, out: SSAValue, src: SSAValue, strides: Sequence[int], offset: int = 0) -> None:
    """``out[idx] = src[offset + idx . strides]`` (memcpy per contiguous run, see `emit_copy_nest`;
    rows split among the threads when large)."""
    shape = _shape(out)
    if splat_value(src) is not None:
        emit_elementwise(ctx, out, [src], lambda b, v: v[0])
        return
    operands = [Operand(out, contiguous_strides(shape)), Operand(src, tuple(strides), offset)]
    parallel_nest(ctx, shape, operands, lambda b, sub, acc: emit_copy_nest(b, sub, acc[0], acc[1]))


def _emit_transpose(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.TransposeOp)
    src = op.inputs[0]
    if _element(src) != _element(op.output):
        raise LoweringError(f"{op.name}: input and output element types differ")
    check_no_overlap(ctx, op, op.output, [src], in_place_ok=False)
    own = contiguous_strides(_shape(src))
    _emit_strided_copy(ctx, op.output, src, tuple(own[p] for p in op.permutation))


def _emit_slice(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.SliceOp)
    src = op.inputs[0]
    dim, start, step = op.dim.value.data, op.start.value.data, op.step.value.data
    if _element(src) != _element(op.output):
        raise LoweringError(f"{op.name}: input and output element types differ")
    if step <= 0:
        raise LoweringError(f"{op.name}: step must be positive, got {step}")
    check_no_overlap(ctx, op, op.output, [src], in_place_ok=False)
    own = contiguous_strides(_shape(src))
    strides = tuple(s * step if d == dim else s for d, s in enumerate(own))
    _emit_strided_copy(ctx, op.output, src, strides, start * own[dim])


def _emit_concat(ctx: KernelContext, op: Operation) -> None:
    """One copy per input: input k is an ``outer x (size_k * inner)`` block of the output (any of
    these a run-time count when the shapes are symbolic: the copy is then an element loop)."""
    assert isinstance(op, buf.ConcatOp)
    out = op.output
    el = _require_same_element(op, [*op.inputs, out])
    so, dim = _shape(out), op.dim.value.data
    outer, inner = numel(so[:dim]), numel(so[dim + 1 :])
    symbolic = not is_static(so)
    b = ctx.b
    row = ctx.size(so[dim] * inner)
    outer = ctx.size(outer)
    width = max(el.bitwidth // 8, 1)  # type: ignore[attr-defined]
    out_extent = ctx.extent(out)
    at: int | SSAValue = 0
    for v in op.inputs:
        size = ctx.size(_shape(v)[dim] * inner)
        slab = None if out_extent is None or symbolic else (out_extent[0], out_extent[1] + at * width, out_extent[1] + (at + size) * width)
        if not (outer == 1 and slab is not None and ctx.extent(v) == slab):  # already in place
            check_no_overlap(ctx, op, out, [v], in_place_ok=False)
            emit_copy_nest(b, (outer, size), Access(b.gep(ctx.ptr(out), at, el), (row, 1), el), Access(ctx.ptr(v), (size, 1), el))
        at = at + size if isinstance(at, int) and isinstance(size, int) else b.add_i64(_val(b, at), _val(b, size))


def _emit_embedding(ctx: KernelContext, op: Operation) -> None:
    """``out[i, :] = table[idx[i], :]``, each index checked against [0, V) first. From a packed
    table (`buf.packed_embedding`), row ``j`` starts at ``(j / NR) * D * NR + j % NR`` and its
    elements are ``NR`` apart."""
    assert isinstance(op, buf.EmbeddingOp | buf.PackedEmbeddingOp)
    table, idx = op.inputs
    out = op.output
    el = _require_same_element(op, [table, out])
    ie = _element(idx)
    if not isinstance(ie, IntegerType) or ie == i1:
        raise LoweringError(f"{op.name}: indices must be an integer buffer, got {idx.type}")
    check_no_overlap(ctx, op, out, [table, idx], in_place_ok=False)
    if isinstance(op, buf.PackedEmbeddingOp):
        _, dim, nr = _shape(table)
        vocab = op.rows.value.data
    else:
        (vocab, dim), nr = _shape(table), 1
    message = embedding_message(op, vocab)
    b = ctx.b
    tp, ip, op_ = ctx.ptr(table), ctx.ptr(idx), ctx.ptr(out)
    ult = IntegerAttr(llvm.ICmpPredicateFlag.ULT.to_int(), i64)
    rows = _val(b, ctx.size(vocab))  # a table of symbolic rows (a prefill's hidden states): counted at run time

    def row(i: SSAValue) -> None:
        j = b.load_element(ip, i, ie)
        if ie != i64:
            j = b.add(llvm.SExtOp(j, i64))
        ctx.check(b.add(llvm.ICmpOp(j, rows, ult)), message)  # also rejects j < 0
        if nr == 1:
            start = b.mul_i64(j, b.i64(dim))
        else:
            panel = b.add(llvm.UDivOp(j, b.i64(nr)))
            start = b.add_i64(b.mul_i64(panel, b.i64(dim * nr)), b.add(llvm.URemOp(j, b.i64(nr))))
        src = b.gep(tp, start, el)
        dst = b.gep(op_, b.offset(None, i, dim), el)
        emit_copy_nest(b, (dim,), Access(dst, (1,), el), Access(src, (nr,), el))

    emit_loop(b, ctx.size(numel(_shape(idx))), row)


def _emit_take(ctx: KernelContext, op: Operation) -> None:
    """``out[i] = x[offsets[i]]`` over the flat buffers, each offset checked against [0, numel(x))
    first (an unsigned compare also rejects negatives): a bad index is the graph's error status."""
    assert isinstance(op, buf.TakeOp)
    x, offsets = op.inputs
    out = op.output
    el = _require_same_element(op, [x, out])
    if _element(offsets) != i64:
        raise LoweringError(f"{op.name}: offsets must be an i64 buffer, got {offsets.type}")
    check_no_overlap(ctx, op, out, [x, offsets], in_place_ok=False)
    message = take_message(_shape(x))
    b = ctx.b
    size = _val(b, ctx.size(numel(_shape(x))))
    xp, offp, outp = ctx.ptr(x), ctx.ptr(offsets), ctx.ptr(out)
    ult = IntegerAttr(llvm.ICmpPredicateFlag.ULT.to_int(), i64)

    def element(i: SSAValue) -> None:
        j = b.load_element(offp, i, i64)
        ctx.check(b.add(llvm.ICmpOp(j, size, ult)), message)
        b.store_element(b.load_element(xp, j, el), outp, i, el)

    emit_loop(b, ctx.size(numel(_shape(out))), element)


def _tap_range(size: int, positions: int, k: int, stride: int, pad: int, dilation: int) -> tuple[int, int]:
    """The positions ``[first, end)`` at which tap ``k`` reads inside the input (else padding)."""
    offset = k * dilation - pad  # input index at position 0
    first = -(offset // stride) if offset < 0 else 0  # ceil(-offset / stride)
    end = min(positions, (size - 1 - offset) // stride + 1) if offset <= size - 1 else 0
    return first, max(first, end)


#: A tap function's arguments: ``(src, dst, OH, OW, y0, y1, x0, x1, row stride, column stride)``
TAP_ARGS = (PTR, PTR, i64, i64, i64, i64, i64, i64, i64, i64)


def _tap_function(ctx: KernelContext, el: Attribute, pad: float, unit_columns: bool) -> str:
    """The module's function that writes one tap of an im2col (`KernelContext.shared_function`;
    one per element type, pad value and column stride 1 or not, whatever the shapes)::

        void @tg_im2col_tap_f32_c1_pad0p0(ptr src, ptr dst, i64 OH, i64 OW, i64 y0, i64 y1,
                                          i64 x0, i64 x1, i64 row_stride, i64 col_stride)
          dst[0 : y0 * OW] = pad                           the rows above the input
          for r in y0 .. y1:                               rows that read it
            dst[r, 0 : x0] = pad;  dst[r, x1 : OW] = pad
            dst[r, x0 : x1] = src[(r - y0) * row_stride + (c - x0) * col_stride]   (a memcpy at 1)
          dst[y1 * OW : OH * OW] = pad                     the rows below

    ``src`` is the input element that output ``(y0, x0)`` reads. Each im2col kernel calls it per
    tap and channel; emitted inline for the static ranges of every tap, the taps made half of
    ResNet-50's LLVM code."""
    key = repr(float(pad)).replace("-", "m").replace(".", "p").replace("+", "")
    name = f"tg_im2col_tap_{el}{'_c1' if unit_columns else ''}_pad{key}"

    def build(b: FunctionBuilder) -> None:
        src, dst, oh, ow, y0, y1, x0, x1, row_stride, col_stride = b.args
        for arg, hint in zip(b.args, ("src", "dst", "oh", "ow", "y0", "y1", "x0", "x1", "row_stride", "col_stride")):
            arg.name_hint = hint
        value = b.constant(pad, el)
        width = max(el.bitwidth // 8, 1)  # type: ignore[attr-defined]

        def fill(ptr: SSAValue, start: SSAValue | int, end: SSAValue) -> None:
            emit_for(b, start, end, lambda c, _: b.store_element(value, ptr, c, el) or [])

        def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            out_row = b.gep(dst, b.mul_i64(r, ow), el)
            fill(out_row, 0, x0)
            fill(out_row, x1, ow)
            in_row = b.gep(src, b.mul_i64(b.add(llvm.SubOp(r, y0)), row_stride), el)
            if unit_columns:
                nbytes = b.mul_i64(b.add(llvm.SubOp(x1, x0)), b.i64(width))
                b.add(llvm.CallIntrinsicOp("llvm.memcpy.p0.p0.i64", [b.gep(out_row, x0, el), in_row, nbytes, b.constant(0, i1)], []))
            else:
                emit_for(b, x0, x1, lambda c, _: b.store_element(
                    b.load_element(in_row, b.mul_i64(b.add(llvm.SubOp(c, x0)), col_stride), el), out_row, c, el) or [])
            return []

        fill(dst, 0, b.mul_i64(y0, ow))
        emit_for(b, y0, y1, row)
        fill(dst, b.mul_i64(y1, ow), b.mul_i64(oh, ow))
        b.add(llvm.ReturnOp())

    ctx.shared_function(name, TAP_ARGS, build)
    return name


def _emit_im2col(ctx: KernelContext, op: Operation) -> None:
    """``out[n, c, i, j, oh, ow] = x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]`` or the pad value;
    with ``panels = NR`` the same windows into the panel layout (`buf.Im2colOp`): each tap's
    ``OH x OW`` plane into a stack row, then ``NR`` values at a time into its panels (a 1x1
    window at stride 1 scatters the input row itself). Panels of bf16 (`buf.Im2colOp`: pairs
    along K, the bf16 GEMM's rhs) are written a pair row at a time, both halves of each word
    together (`_im2col_pairs`)."""
    assert isinstance(op, buf.Im2colOp)
    (x,), out = op.inputs, op.output
    pairs = op.pairs
    el = _require_same_element(op, [x] if pairs else [x, out])
    check_no_overlap(ctx, op, out, [x], in_place_ok=False)
    n, c, h, w = _shape(x)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = op.window
    nr = op.panel_columns
    reduce = op.reduce.data
    if not is_static((c, h, w, *_shape(out)[-3 if nr else 1:])):
        raise symbolic_refusal(op, x, "the windows of a convolution or pooling take a symbolic size only in the batch "
                               "(dim 0): their channels and spatial sizes are compile-time constants")
    oh, ow = op.positions(_shape(x)) if nr else _shape(out)[2:] if reduce else _shape(out)[4:]
    taps = oh * ow
    pad = op.pad_value.value.data
    plain = nr and (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0)  # the plane is the input row itself
    k_total = c * kh * kw
    combine = _fmax if reduce == "max" else (lambda b, u, v: b.add(llvm.FAddOp(u, v)))
    if reduce and isinstance(el, BFloat16Type) and reduce != "max":  # (the tap-by-tap sum would round every partial sum)
        raise LoweringError(f"{op.name}: a {reduce} pooling of bf16 is computed in float32 (`widen-dtypes`), got bf16 buffers")
    combine_taps = window_reduce.on_floats(el, lambda b, v: combine(b, v[0], v[1]), reduce)

    def tap(b: FunctionBuilder, src_row: SSAValue, i: int, j: int, dst: SSAValue) -> None:
        """Tap ``(i, j)``'s ``OH x OW`` plane of one input channel into ``dst`` (row stride OW),
        through the module's shared tap function (`_tap_function`)."""
        y0, y1 = _tap_range(h, oh, i, sh, ph, dh)
        x0, x1 = _tap_range(w, ow, j, sw, pw, dw)
        src = src_row
        if y1 > y0 and x1 > x0:
            src = b.gep(src_row, (y0 * sh + i * dh - ph) * w + x0 * sw + j * dw - pw, el)
        else:  # the tap reads padding only
            y0 = y1 = x0 = x1 = 0
        bounds = [b.i64(v) for v in (oh, ow, y0, y1, x0, x1, sh * w, sw)]
        b.add(llvm.CallOp(_tap_function(ctx, el, pad, unit_columns=sw == 1), src, dst, *bounds))

    if pairs:
        _im2col_pairs(ctx, op, tap, plain)
        return

    def scatter(b: FunctionBuilder, plane: SSAValue, r: SSAValue, t: int) -> None:
        """Row ``(c, t)`` of an image's windows matrix (``OH*OW`` values at ``plane``; input row
        ``r`` is image ``r / C``'s channel ``c``, ``t`` the tap) into its image's panels."""
        full, last = divmod(taps, nr)
        if n == 1:
            at = b.mul_i64(b.add_i64(b.mul_i64(r, b.i64(kh * kw)), b.i64(t)), b.i64(nr))
        else:  # image r / C's panels, -(-taps // nr) of K x NR each
            image, channel = image_and_row(b, r, n, c)
            k = b.add_i64(b.mul_i64(channel, b.i64(kh * kw)), b.i64(t))
            at = b.add_i64(b.mul_i64(image, b.i64(-(-taps // nr) * k_total * nr)), b.mul_i64(k, b.i64(nr)))
        write_panel_row(b, b.gep(ctx.ptr(out), at, el), plane, el, (k_total * nr, nr), full, last)

    if reduce and window_reduce.fits(op, h, w, oh, ow, el):  # a pooling: each window combined as it is written
        pooling = window_reduce.WindowReduce(ctx, op, (h, w, oh, ow), el)
        split_rows(ctx, n * c, numel(_shape(out)) + numel(_shape(x)), pooling.rows)
        return

    def rows(b, start, end) -> None:
        xp, outp = ctx.ptr(x), ctx.ptr(out)
        # one tap's plane at a time, on this thread's stack
        plane = b.stack(taps, el) if (nr and not plain) or reduce else None

        def row(r: SSAValue) -> None:
            src_row = b.gep(xp, b.mul_i64(r, b.i64(h * w)), el)
            if plain:
                scatter(b, src_row, r, 0)
                return
            if reduce:  # each tap's plane combined into the output row: max, or a sum (scaled)
                assert plane is not None
                dst = Access(b.gep(outp, b.mul_i64(r, b.i64(taps)), el), (1,), el)
                for t, (i, j) in enumerate((i, j) for i in range(kh) for j in range(kw)):
                    tap(b, src_row, i, j, plane)
                    src = Access(plane, (1,), el)
                    if t == 0:
                        emit_copy_nest(b, (taps,), dst, src)
                    else:
                        emit_pointwise(b, (taps,), dst, [dst, src], combine_taps)
                if reduce == "mean":
                    scale = b.constant(1.0 / (kh * kw), el)
                    emit_pointwise(b, (taps,), dst, [dst], lambda b, v: b.add(llvm.FMulOp(v[0], scale)))
                return
            for i in range(kh):
                for j in range(kw):
                    if plane is None:
                        tap(b, src_row, i, j, b.gep(outp, b.add_i64(b.mul_i64(r, b.i64(kh * kw * taps)), b.i64((i * kw + j) * taps)), el))
                    else:
                        tap(b, src_row, i, j, plane)
                        scatter(b, plane, r, i * kw + j)

        emit_for(b, start, end, lambda r, _c: row(r) or [])

    split_rows(ctx, n * c, numel(_shape(out)) + numel(_shape(x)), rows)  # a symbolic batch: rows counted at run time


def _panels_tail(b: FunctionBuilder, has_last: SSAValue | bool, tail: Callable[[], None]) -> None:
    """``tail()`` (the partial last panel's row) where ``has_last``: always, never, or at run time."""
    if has_last is True:
        tail()
    elif has_last is not False:
        emit_if(b, has_last, tail)


def _offset(b: FunctionBuilder, count: int | SSAValue, stride: int) -> int | SSAValue:
    return count * stride if isinstance(count, int) else b.mul_i64(count, b.i64(stride))


def write_panel_row(b: FunctionBuilder, dst: SSAValue, plane: SSAValue, el: Attribute, layout: tuple[int, int],
                    full: int | SSAValue, last: int, has_last: SSAValue | bool = True) -> None:
    """One row of the windows matrix (``plane``: its positions) into ``full`` whole panels of
    ``el`` (``layout``: elements from one panel to the next, NR) from ``dst`` (the row in the first
    of them), NR positions a panel, then, when ``has_last``, the partial panel after them
    (``last`` positions, zeros past them)."""
    panel_elements, nr = layout
    if not isinstance(full, int) or full:
        emit_copy_nest(b, (full, nr), Access(dst, (panel_elements, 1), el), Access(plane, (nr, 1), el))
    if not last:
        return

    def tail() -> None:
        at = b.gep(dst, _offset(b, full, panel_elements), el)
        emit_copy_nest(b, (last,), Access(at, (1,), el), Access(b.gep(plane, _offset(b, full, nr), el), (1,), el))
        emit_pointwise(b, (nr - last,), Access(b.gep(at, last, el), (1,), el), [], lambda b, _v: b.constant(0.0, el))

    _panels_tail(b, has_last, tail)


def write_pair_row(b: FunctionBuilder, dst: SSAValue, planes: list[SSAValue], bits: bool, layout: tuple[int, int],
                   full: int | SSAValue, last: int, has_last: SSAValue | bool = True) -> None:
    """One pair row of ``full`` whole panels (``layout``: words from one panel to the next, NR)
    from ``dst`` (the row's word in the first of them), then, when ``has_last``, of the partial
    panel after them (``last`` columns, zeros past them): word ``j`` of a panel holds position
    ``j`` of ``planes[0]`` (rounded to bf16; with ``bits``, its bf16 bits as they are) in its low
    half and of ``planes[1]`` in its high half (one plane: zeros there)."""
    panel_words, nr = layout
    plane_el = i16 if bits else f32

    def word(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
        if not bits:
            return pair_word(b, vals[0], vals[1] if len(vals) == 2 else None)
        low_half = b.add(llvm.ZExtOp(vals[0], i32))
        if len(vals) == 1:
            return low_half
        return b.add(llvm.OrOp(low_half, b.add(llvm.ShlOp(b.add(llvm.ZExtOp(vals[1], i32)), b.i32(16)))))

    if not isinstance(full, int) or full:
        emit_pointwise(b, (full, nr), Access(dst, (panel_words, 1), i32), [Access(p, (nr, 1), plane_el) for p in planes], word)
    if not last:
        return

    def tail() -> None:
        at = b.gep(dst, _offset(b, full, panel_words), i32)
        start = _offset(b, full, nr)
        emit_pointwise(b, (last,), Access(at, (1,), i32), [Access(b.gep(p, start, plane_el), (1,), plane_el) for p in planes], word)
        emit_pointwise(b, (nr - last,), Access(b.gep(at, last, i32), (1,), i32), [], lambda b, _v: b.i32(0))

    _panels_tail(b, has_last, tail)


def _im2col_pairs(ctx: KernelContext, op: buf.Im2colOp, tap, plain: bool) -> None:
    """An image's windows matrix (rows ``k = (c, t)``: channel c's tap t, ``T = KH KW`` taps a
    channel) into its bf16 panels of pairs along K (``[P, ceil(K / 2), NR]`` words: word ``j`` of
    pair row ``kk`` holds row ``2 kk``'s value ``j`` rounded to bf16 in its low half, row
    ``2 kk + 1``'s in its high half), a pair of channels at a time (the threads' items): their
    ``2 T`` rows are ``T`` whole pair rows, each the two taps' planes (``tap``: on the stack; the
    input rows themselves when ``plain``) combined into whole words, stored as vectors. The
    last panel's columns past OH*OW are zeros; an odd C's last channel is alone, its last pair
    row's high halves (the zero row that pads an odd K) zeros. A bf16 input (a bf16 model's
    values, `fuse-im2col-panels`) is paired as it is: its bits are the halves."""
    (x,), out = op.inputs, op.output
    el = x.type.element_type  # type: ignore[attr-defined]
    bits = isinstance(el, BFloat16Type)
    n, c, h, w = _shape(x)
    (kh, kw) = op.window[0]
    nr, taps = op.panel_columns, numel(op.positions(_shape(x)))
    t_count = kh * kw
    pair_rows = -(-c * t_count // 2)
    panel_words = pair_rows * nr  # from one panel to the next
    full, last = divmod(taps, nr)
    channel_pairs = -(-c // 2)

    def write(b: FunctionBuilder, dst: SSAValue, low: SSAValue, high: SSAValue | None) -> None:
        """The words of one pair row (from ``dst``, in panel 0) of the planes ``low`` and ``high``
        (None: zeros)."""
        write_pair_row(b, dst, [low] if high is None else [low, high], bits, (panel_words, nr), full, last)

    def body(b: FunctionBuilder, start: SSAValue | int, end: SSAValue | int) -> None:
        xp, outp = ctx.ptr(x), ctx.ptr(out)
        stack = None if plain else (b.stack(taps, el), b.stack(taps, el))

        def plane(image, channel: SSAValue, t: int, which: int) -> SSAValue:
            """Channel ``channel``'s tap t: its input row itself (``plain``), or its plane on the stack."""
            row = channel if image == 0 else b.add_i64(b.mul_i64(image, b.i64(c)), channel)
            src_row = b.gep(xp, b.mul_i64(row, b.i64(h * w)), el)
            if plain:
                return src_row
            i, j = divmod(t, kw)
            tap(b, src_row, i, j, stack[which])
            return stack[which]

        def item(r: SSAValue, _c: list) -> list:
            image, q = image_and_row(b, r, n, channel_pairs)
            first = b.mul_i64(q, b.i64(2))
            words = b.gep(outp, b.mul_i64(q, b.i64(t_count * nr)), i32)
            if image != 0:
                words = b.gep(words, b.mul_i64(image, b.i64(-(-taps // nr) * panel_words)), i32)

            def rows(count: int, alone: bool) -> None:
                for j in range(count):
                    (ca, ta), (cb, tb) = divmod(2 * j, t_count), divmod(2 * j + 1, t_count)
                    low = plane(image, b.add_i64(first, b.i64(ca)), ta, 0)
                    high = None if alone and cb else plane(image, b.add_i64(first, b.i64(cb)), tb, 1)
                    write(b, b.gep(words, j * nr, i32), low, high)

            if c % 2 == 0:
                rows(t_count, False)
            else:  # the last channel alone: ceil(T / 2) pair rows
                emit_if(b, icmp(b, "ult", q, b.i64(channel_pairs - 1)), lambda: rows(t_count, False),
                        lambda: rows(-(-t_count // 2), True))
            return []

        emit_for(b, start, end, item)

    split_rows(ctx, n * channel_pairs, numel(_shape(out)) + numel(_shape(x)), body)


def state_name(value: SSAValue) -> str | None:
    """The name of the `buf.state` that ``value`` is (or aliases), else None."""
    owner = buf.root_buffer(value).owner
    return owner.state_name.data if isinstance(owner, buf.StateOp) else None


def _emit_cache_write(ctx: KernelContext, op: Operation) -> None:
    """``state[..., past : past + n, ...] = update`` along ``axis`` (``past`` = ``dims[0]``; ``n``
    the new tokens, a size symbol's expression in a prefill of any length)."""
    assert isinstance(op, buf.CacheWriteOp)
    (update,), state = op.inputs, op.output
    el = _require_same_element(op, [update, state])
    check_no_overlap(ctx, op, state, [update], in_place_ok=False)
    axis = op.axis.value.data
    shape, n = _shape(state), _shape(update)[axis]
    if not is_static((*shape, *_shape(update)[:axis], *_shape(update)[axis + 1:])):
        raise symbolic_refusal(op, update, "a cache write takes a symbolic size only in its count of new tokens")
    cap, outer, inner = shape[axis], numel(shape[:axis]), numel(shape[axis + 1 :])
    name = state_name(state)
    what = f"kv cache '{name}'" if name is not None else f"cache {state.type}"
    b = ctx.b
    past = ctx.dim(0)
    # a symbolic count of new tokens (a prefill of any length): counted at run time, at most
    # the cache's positions (`introduce-kv-cache` checks its largest)
    count = ctx.size(n)
    if not isinstance(n, int) and ctx.largest(n) > cap:
        raise LoweringError(f"{op.name}: up to {ctx.largest(n)} new tokens ({n}) do not fit {what} of {cap} positions")
    # unsigned: a negative past is a huge number, so one compare checks 0 <= past <= cap - n
    room = b.i64(cap - n) if isinstance(n, int) else b.add(llvm.SubOp(b.i64(cap), count))
    fits = b.add(llvm.ICmpOp(past, room, IntegerAttr(llvm.ICmpPredicateFlag.ULE.to_int(), i64)))
    ctx.check(fits, f"{what}: position {{past}} + {format_expr(n)} new tokens exceed its {cap} positions")
    if n == 0 or outer == 0 or inner == 0:
        return
    dst = b.gep(ctx.ptr(state), b.mul_i64(past, b.i64(inner)) if inner != 1 else past, el)
    run = n * inner if isinstance(n, int) else b.mul_i64(count, b.i64(inner))  # the new rows of one outer index
    emit_copy_nest(b, (outer, run), Access(dst, (cap * inner, 1), el), Access(ctx.ptr(update), (run, 1), el))


def _emit_iota(ctx: KernelContext, op: Operation) -> None:
    """``out[i] = start + i * step`` (`buf.iota`), computed in float64 (an arange's arithmetic)
    and converted to the output's element type; its length counted at run time when symbolic."""
    assert isinstance(op, buf.IotaOp)
    out = op.output
    el = _element(out)
    b = ctx.b
    start, step = b.constant(op.start.value.data, f64), b.constant(op.step.value.data, f64)
    po = ctx.ptr(out)

    def element(i: SSAValue) -> None:
        x = b.add(llvm.FAddOp(start, b.add(llvm.FMulOp(b.add(llvm.SIToFPOp(i, f64)), step))))
        b.store_element(emit_convert(b, x, el), po, i, el)

    emit_loop(b, ctx.size(_shape(out)[0]), element)


def _emit_size(ctx: KernelContext, op: Operation) -> None:
    """``out[] = size`` (`buf.size`): an expression of the size symbols, from ``dims``."""
    assert isinstance(op, buf.SizeOp)
    b = ctx.b
    b.store_element(_val(b, ctx.size(parse_expr(op.size.data))), ctx.ptr(op.output), None, i64)


# iotas and sizes of symbolic length, takes and embeddings of a symbolic number of indices,
# strided copies over run-time extents and strides (`parallel_nest`), concatenations, the windows
# and poolings of a symbolic batch (its images' rows counted at run time), cache writes of a
# symbolic count of new tokens
SYMBOLIC_KERNELS.update((buf.IotaOp, buf.SizeOp, buf.TakeOp, buf.CopyOp, buf.BroadcastOp, buf.CastOp, buf.TransposeOp, buf.SliceOp, buf.ConcatOp,
                         buf.EmbeddingOp, buf.PackedEmbeddingOp, buf.Im2colOp, buf.CacheWriteOp))
REGISTRY[buf.IotaOp] = _emit_iota
REGISTRY[buf.SizeOp] = _emit_size
REGISTRY[buf.CopyOp] = _emit_copy
REGISTRY[buf.BroadcastOp] = _emit_copy
REGISTRY[buf.TransposeOp] = _emit_transpose
REGISTRY[buf.SliceOp] = _emit_slice
REGISTRY[buf.ConcatOp] = _emit_concat
REGISTRY[buf.EmbeddingOp] = _emit_embedding
REGISTRY[buf.TakeOp] = _emit_take
REGISTRY[buf.Im2colOp] = _emit_im2col
REGISTRY[buf.PackedEmbeddingOp] = _emit_embedding
REGISTRY[buf.CacheWriteOp] = _emit_cache_write
