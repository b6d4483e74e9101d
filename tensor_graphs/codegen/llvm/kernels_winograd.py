"""The transforms of a Winograd convolution: `buf.winograd_input` and `buf.winograd_output`.

Between them run the convolution's ``a * a`` GEMMs (`buf.packed_matmul` over a batch,
`kernels_gemm`); the matrices are `dialects.winograd`'s, their products emitted as adds and
subtracts (coefficients +-1), multiplies only for the others. Both kernels vectorise over
``L`` neighbouring tiles of one tile row (``L`` = the target's floats per vector) and stage a
channel's rows on each thread's stack:

input (per channel, split among the threads)::

    for each tile row:
        the a input rows it reads -> a zero-bordered stack rows (memcpy; zeros outside x)
        for L tiles at a time:
            d[r][k] = row r, columns m*tw + k of the L tiles   (an m*L-float load, lanes m apart)
            V = B^T d B                                        (a*a vectors)
            V[xi] -> stack row xi at the tiles' index          (t = tile row * tiles per row + tw)
    each stack row xi, NR tiles at a time -> its panels        out[xi, t // NR, c, t % NR]

output (per output channel, split among the threads)::

    for each tile row:
        for L tiles at a time (then the rest one by one):
            M[xi] = gemms[xi, co, t .. t + L]
            Y = A^T M A                                        (m*m vectors)
            Y's rows, the m outputs of each tile interleaved -> m stack rows
        out[co, rows of this tile row, :OW] = act(alpha * stack + beta * acc)   (`emit_pointwise`)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import llvm
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, f32, i1, i8, i32, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    SYMBOLIC_KERNELS,
    Access,
    KernelContext,
    _scalar_errors,
    _shape,
    check_no_overlap,
    emit_copy_nest,
    emit_pointwise,
    image_and_row,
    split_rows,
)
from tensor_graphs.codegen.llvm.kernels_gemm import _vector_at, splat, vector_type
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, broadcast_strides, emit_for, emit_if
from tensor_graphs.codegen.llvm.loops import value as _val
from tensor_graphs.codegen.llvm.scalar import emit_unary
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.winograd import matrices


def _combine(b: FunctionBuilder, coeffs: Sequence[float], values: Sequence[SSAValue], const: Callable[[float], SSAValue]) -> SSAValue:
    """``sum_k coeffs[k] * values[k]`` (vectors or scalars): zero terms left out, +-1 as adds and
    subtracts, other coefficients multiplied (``const(c)``: ``c`` as a value of the values' type)."""
    total: SSAValue | None = None
    negate = False  # total holds minus the sum so far (a leading -1 term)
    for c, v in zip(coeffs, values):
        if c == 0:
            continue
        term, sign = (v, c) if c in (1, -1) else (b.add(llvm.FMulOp(v, const(abs(c)))), 1 if c > 0 else -1)
        if total is None:
            total, negate = term, sign < 0
        elif (sign > 0) != negate:
            total = b.add(llvm.FAddOp(total, term))
        else:
            total = b.add(llvm.FSubOp(total, term))
    assert total is not None, "a transform row of zeros"
    return b.add(llvm.FNegOp(total)) if negate else total


def _memset0(b: FunctionBuilder, ptr: SSAValue, floats: SSAValue | int) -> None:
    nbytes = b.mul_i64(floats, b.i64(4)) if isinstance(floats, SSAValue) else b.i64(floats * 4)
    b.add(llvm.CallIntrinsicOp("llvm.memset.p0.i64", [ptr, b.constant(0, i8), nbytes, b.constant(0, i1)], []))


def _load(b: FunctionBuilder, ptr: SSAValue, lanes: int) -> SSAValue:
    return b.add(llvm.LoadOp(ptr, vector_type(lanes), alignment=4))


def _store(b: FunctionBuilder, value: SSAValue, ptr: SSAValue) -> None:
    """An unaligned store of the vector ``value`` at the float pointer ``ptr``."""
    lanes = value.type.get_shape()[0]  # type: ignore[attr-defined]
    b.add(llvm.StoreOp(value, _vector_at(b, ptr, 0, lanes), alignment=4))


def _shuffle(b: FunctionBuilder, x: SSAValue, y: SSAValue, mask: Sequence[int]) -> SSAValue:
    return b.add(llvm.ShuffleVectorOp(x, y, DenseArrayBase.from_list(i32, list(mask)), vector_type(len(mask))))


def _interleave(b: FunctionBuilder, vectors: Sequence[SSAValue], lanes: int) -> SSAValue:
    """``[v0[0], v1[0], .., v0[1], v1[1], ..]``: the m outputs of each of ``lanes`` tiles side by side."""
    count = len(vectors)
    if count == 1:
        return vectors[0]
    if count & (count - 1):
        raise NotImplementedError(f"interleaving {count} vectors")
    level = list(vectors)
    width = lanes
    while len(level) > 1:  # concatenate pairwise: v0 ++ v1 ++ ...
        level = [_shuffle(b, level[i], level[i + 1], range(2 * width)) for i in range(0, len(level), 2)]
        width *= 2
    whole = level[0]
    return _shuffle(b, whole, whole, [q * lanes + t for t in range(lanes) for q in range(count)])


def _emit_winograd_input(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.WinogradInputOp)
    (x,), out = op.inputs, op.output
    check_no_overlap(ctx, op, out, [x], in_place_ok=False)
    images, channels, h, w = _shape(x)
    ph, pw = op.padding.get_values()
    m = op.tile.value.data
    mats = matrices(m)
    a = mats.a
    tile_rows, row_tiles = op.tiles(_shape(x))
    _, panels, _, nr = _shape(out)
    xis = a * a
    lanes = ctx.target.float_lanes
    row_vectors = -(-row_tiles // lanes)
    # a staging row holds one input row at columns [pw, pw + w), zeros around it, and room for
    # the last vector's m*L-float loads
    width = -(-(m * row_vectors * lanes + a) // lanes) * lanes
    # a stack row holds one channel's values of one xi for every tile; the last tile row's
    # vector may write up to L - 1 tiles past them (tiles the panels' padding, or nothing, takes)
    tiles_width = panels * nr + lanes

    def rows(b: FunctionBuilder, start: SSAValue | int, end: SSAValue | int) -> None:
        xp, outp = ctx.ptr(x), ctx.ptr(out)
        stage = b.stack(a * width, f32)
        values = b.stack(xis * tiles_width, f32)
        _memset0(b, stage, a * width)
        _memset0(b, values, xis * tiles_width)

        def const(c: float) -> SSAValue:
            return splat(b, b.f32(c), lanes)

        def tile_row(src: SSAValue, th: SSAValue) -> None:
            for i in range(a):  # input row m*th - ph + i -> staging row i (zeros outside x)
                y = b.add_i64(b.mul_i64(th, b.i64(m)), b.i64(i - ph))
                dst = b.gep(stage, i * width + pw, f32)
                inside = b.add(llvm.ICmpOp(y, b.i64(h), IntegerAttr(llvm.ICmpPredicateFlag.ULT.to_int(), i64)))

                def copy(y=y, dst=dst) -> None:
                    src_row = b.gep(src, b.mul_i64(y, b.i64(w)), f32)
                    b.add(llvm.CallIntrinsicOp("llvm.memcpy.p0.p0.i64", [dst, src_row, b.i64(w * 4), b.constant(0, i1)], []))

                emit_if(b, inside, copy, lambda dst=dst: _memset0(b, dst, w))
            first = b.mul_i64(th, b.i64(row_tiles))

            def tiles(j: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
                tw0 = b.mul_i64(j, b.i64(lanes))
                col = b.mul_i64(tw0, b.i64(m))
                d = [[_shuffle(b, wide, wide, range(0, m * lanes, m))
                      for k in range(a)
                      for wide in [_load(b, b.gep(stage, b.add_i64(col, b.i64(r * width + k)), f32), m * lanes)]]
                     for r in range(a)]
                across = [[_combine(b, mats.bt[jj], d[r], const) for jj in range(a)] for r in range(a)]  # d B
                t = b.add_i64(first, tw0)
                for i in range(a):
                    for jj in range(a):
                        v = _combine(b, mats.bt[i], [across[r][jj] for r in range(a)], const)  # B^T (d B)
                        _store(b, v, b.gep(values, b.add_i64(t, b.i64((i * a + jj) * tiles_width)), f32))
                return []

            emit_for(b, 0, row_vectors, tiles)

        def channel(r: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
            """Input row r: image r / C's channel r % C, into that image's a*a sets of panels."""
            src = b.gep(xp, b.mul_i64(r, b.i64(h * w)), f32)
            emit_for(b, 0, tile_rows, lambda th, _: tile_row(src, th) or [])
            image, ch = image_and_row(b, r, images, channels)
            at = b.mul_i64(ch, b.i64(nr))
            if images != 1:
                at = b.add_i64(at, b.mul_i64(image, b.i64(xis * panels * channels * nr)))
            dst = b.gep(outp, at, f32)
            for xi in range(xis):  # stack row xi -> its panels, NR tiles at a time
                emit_copy_nest(b, (panels, nr), Access(b.gep(dst, xi * panels * channels * nr, f32), (channels * nr, 1), f32),
                               Access(b.gep(values, xi * tiles_width, f32), (nr, 1), f32))
            return []

        emit_for(b, start, end, channel)

    split_rows(ctx, images * channels, numel(_shape(out)) + numel(_shape(x)), rows)


def _emit_winograd_output(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.WinogradOutputOp)
    gemms = op.inputs[0]
    acc = op.inputs[1] if len(op.inputs) == 2 else None
    out = op.output
    check_no_overlap(ctx, op, out, list(op.inputs), in_place_ok=False)
    alpha, beta = op.flags
    act = op.activation.data
    m = op.tile.value.data
    mats = matrices(m)
    a = mats.a
    _, cout, n = _shape(gemms)
    xis = a * a
    images, _, oh, ow = _shape(out)
    row_tiles = -(-ow // m)
    lanes = ctx.target.float_lanes
    vectors, rest = divmod(row_tiles, lanes)
    width = m * row_tiles  # a staging row: one output row of every tile of a tile row
    acc_strides = broadcast_strides(_shape(acc), _shape(out)) if acc is not None else None

    def rows(b: FunctionBuilder, start: SSAValue | int, end: SSAValue | int) -> None:
        gp, outp = ctx.ptr(gemms), ctx.ptr(out)
        accp = ctx.ptr(acc) if acc is not None else None
        stage = b.stack(m * width, f32)

        def transform(at: Callable[[int], SSAValue], const: Callable[[float], SSAValue]) -> list[list[SSAValue]]:
            """Y = A^T M A of the loaded M[xi] = at(xi)."""
            mv = [at(xi) for xi in range(xis)]
            down = [[_combine(b, mats.at[i], [mv[r * a + jj] for r in range(a)], const) for jj in range(a)] for i in range(m)]
            return [[_combine(b, mats.at[q], down[i], const) for q in range(m)] for i in range(m)]

        def tile_row(r: SSAValue, th: SSAValue, out_rows: int) -> None:
            """Tile row th of output row r (image r / Cout's channel co = r % Cout)."""
            image, co = image_and_row(b, r, images, cout)
            first = _val(b, image) if images == 1 else b.mul_i64(image, b.i64(xis * cout * n))
            base = b.gep(gp, b.add_i64(first, b.add_i64(b.mul_i64(co, b.i64(n)), b.mul_i64(th, b.i64(row_tiles)))), f32)

            def vector(j: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
                tw0 = b.mul_i64(j, b.i64(lanes))
                y = transform(lambda xi: _load(b, b.gep(base, b.add_i64(tw0, b.i64(xi * cout * n)), f32), lanes),
                              lambda c: splat(b, b.f32(c), lanes))
                col = b.mul_i64(tw0, b.i64(m))
                for i in range(m):
                    _store(b, _interleave(b, y[i], lanes), b.gep(stage, b.add_i64(col, b.i64(i * width)), f32))
                return []

            def scalar(tw: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
                y = transform(lambda xi: b.load(b.gep(base, b.add_i64(tw, b.i64(xi * cout * n)), f32), f32), b.f32)
                col = b.mul_i64(tw, b.i64(m))
                for i in range(m):
                    for q in range(m):
                        b.store(y[i][q], b.gep(stage, b.add_i64(col, b.i64(i * width + q)), f32))
                return []

            emit_for(b, 0, vectors, vector)
            emit_for(b, vectors * lanes, row_tiles, scalar)
            r0 = b.mul_i64(th, b.i64(m))
            dst = b.gep(outp, b.add_i64(b.mul_i64(r, b.i64(oh * ow)), b.mul_i64(r0, b.i64(ow))), f32)
            ins = [Access(stage, (width, 1), f32)]
            if acc is not None:
                assert accp is not None and acc_strides is not None
                offset = b.add_i64(b.mul_i64(co, b.i64(acc_strides[1])), b.mul_i64(r0, b.i64(acc_strides[2])))
                if images != 1 and acc_strides[0]:
                    offset = b.add_i64(offset, b.mul_i64(image, b.i64(acc_strides[0])))
                ins.append(Access(b.gep(accp, offset, f32), acc_strides[2:], f32))

            def epilogue(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
                y = vals[0] if alpha == 1.0 else b.add(llvm.FMulOp(vals[0], b.f32(alpha)))
                if acc is not None:
                    y = b.add(llvm.FAddOp(y, vals[1] if beta == 1.0 else b.add(llvm.FMulOp(vals[1], b.f32(beta)))))
                return y if act == "none" else emit_unary(b, act, y)

            with _scalar_errors(op):
                emit_pointwise(b, (out_rows, ow), Access(dst, (ow, 1), f32), ins, epilogue)

        def channel(r: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
            full, last = divmod(oh, m)
            emit_for(b, 0, full, lambda th, _: tile_row(r, th, m) or [])
            if last:
                tile_row(r, b.i64(full), last)
            return []

        emit_for(b, start, end, channel)

    split_rows(ctx, images * cout, numel(_shape(gemms)) + numel(_shape(out)), rows)


# a batch of images of run-time size: its rows (images x channels) counted at run time
SYMBOLIC_KERNELS.update((buf.WinogradInputOp, buf.WinogradOutputOp))
REGISTRY[buf.WinogradInputOp] = _emit_winograd_input
REGISTRY[buf.WinogradOutputOp] = _emit_winograd_output
