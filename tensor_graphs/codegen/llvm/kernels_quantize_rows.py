"""`buf.quantize_rows`: each row of float32 activations as int8 codes and a scale, the lhs of the
int8 GEMM (`kernels_gemm` over quads: `buf.packed_matmul` by "int8kpanels").

Per row ``x`` of K floats (threads over rows: `split_rows`; run-time rows counted at run time)::

    m = max |x|                                   vectors of L lanes, then the K % L left (a NaN wins: `_absmax`)
    s = m / 127                                   NaN when m is NaN or infinite
    inv = 127 / m if m > 0 else 0
    out[k] = roundeven(clamp(x[k] * inv, -127, 127)) + 128        unsigned bytes (`packing.INT8_ZERO`)
    out[K .. Kq) = 128                            Kq = 4 ceil(K / 4): whole quads, worth 0
    out[Kq .. Kq + 4) = s                         the row's scale, as float32 bytes

A row's codes times a column's (`packing` "int8k", ``w = q_w * scale_w``) sum to
``sum_k (q_x + 128) q_w``, from which the GEMM's epilogue takes ``128 sum_k q_w`` (stored with the
column) and scales by ``s * scale_w``. The rounding is what the tuner measures: half an int8 step
of the row's largest magnitude per element.
"""

from __future__ import annotations

import math

from xdsl.dialects import llvm
from xdsl.dialects.builtin import VectorType, f32, i8, i32
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.bf16_dot import int_splat
from tensor_graphs.codegen.llvm.kernels import REGISTRY, SYMBOLIC_KERNELS, KernelContext, LoweringError, _shape, split_rows, static_row
from tensor_graphs.codegen.llvm.kernels_gemm import splat, vector_type
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, emit_for
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.packing import INT8_ZERO
from tensor_graphs.dialects.shapes import numel

#: The largest code magnitude (symmetric: -128 is never used)
CODE_MAX = 127


def _suffix(lanes: int, element: str) -> str:
    """An intrinsic's type suffix: ``f32`` for a scalar, ``v16f32`` for 16 lanes."""
    return element if lanes == 1 else f"v{lanes}{element}"


def _call(b: FunctionBuilder, name: str, args: list[SSAValue], result, lanes: int, element: str) -> SSAValue:
    return b.add(llvm.CallIntrinsicOp(f"llvm.{name}.{_suffix(lanes, element)}", args, [result]))


def _absmax(b: FunctionBuilder, row: SSAValue, k: int, lanes: int) -> SSAValue:
    """``max |row[0:k]|``, NaN when any is NaN: the largest of the magnitudes' bits as integers
    (sign cleared, every NaN's bits above infinity's, infinity's above every finite's), a vector
    loop of one-cycle integer maxima, its lanes reduced, then the tail."""
    words = VectorType(i32, [lanes])
    most = b.i32(0)
    if k >= lanes:
        magnitude = int_splat(b, 0x7FFFFFFF, i32, lanes)

        def step(j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            x = b.add(llvm.LoadOp(b.gep(row, b.mul_i64(j, b.i64(lanes)), f32), words, alignment=4))
            return [_call(b, "umax", [c[0], b.add(llvm.AndOp(x, magnitude))], words, lanes, "i32")]

        (acc,) = emit_for(b, 0, k // lanes, step, [int_splat(b, 0, i32, lanes)])
        most = b.add(llvm.CallIntrinsicOp(f"llvm.vector.reduce.umax.v{lanes}i32", [acc], [i32]))

    def tail(j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
        x = b.add(llvm.AndOp(b.load(b.gep(row, j, f32), i32), b.i32(0x7FFFFFFF)))
        return [_call(b, "umax", [c[0], x], i32, 1, "i32")]

    if k % lanes:
        most = emit_for(b, k // lanes * lanes, k, tail, [most])[0]
    return b.add(llvm.BitcastOp(most, f32))


#: ``2**23 + 128``: added to a float in [-127, 127], it rounds it to an integer (to nearest, ties to
#: even: float32's spacing there is 1) and leaves ``code + 128`` in the low byte of its bits
ROUNDING = float(2**23 + INT8_ZERO)


def _codes(b: FunctionBuilder, x: SSAValue, inv: SSAValue, lanes: int) -> SSAValue:
    """``clamp(x * inv, -127, 127)`` rounded to nearest even, plus 128, as ``lanes`` bytes (or
    one): clamped as floats (``minnum``/``maxnum`` also turn the NaN of a NaN row into a bound),
    rounded and offset by one addition (`ROUNDING`), its bits' low bytes taken."""
    scaled = b.add(llvm.FMulOp(x, inv))
    floats = scaled.type

    def const(value: float) -> SSAValue:
        return b.f32(value) if lanes == 1 else splat(b, b.f32(value), lanes)

    clamped = _call(b, "maxnum", [_call(b, "minnum", [scaled, const(CODE_MAX)], floats, lanes, "f32"), const(-CODE_MAX)],
                    floats, lanes, "f32")
    bits = b.add(llvm.BitcastOp(b.add(llvm.FAddOp(clamped, const(ROUNDING))), i32 if lanes == 1 else VectorType(i32, [lanes])))
    return b.add(llvm.TruncOp(bits, i8 if lanes == 1 else VectorType(i8, [lanes])))


def _quantize_row(b: FunctionBuilder, row: SSAValue, out: SSAValue, k: int, lanes: int) -> None:
    """One row (the module docstring): ``row`` its K floats, ``out`` its bytes."""
    most = _absmax(b, row, k, lanes)
    finite = b.add(llvm.FCmpOp(most, b.f32(math.inf), "one"))  # false for NaN and infinity
    scale = b.add(llvm.SelectOp(finite, b.add(llvm.FMulOp(most, b.f32(1.0 / CODE_MAX))), b.f32(math.nan)))
    positive = b.add(llvm.FCmpOp(most, b.f32(0.0), "ogt"))
    inv = b.add(llvm.SelectOp(positive, b.add(llvm.FDivOp(b.f32(float(CODE_MAX)), most)), b.f32(0.0)))
    if k >= lanes:
        inv_v = splat(b, inv, lanes)

        def step(j: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
            at = b.mul_i64(j, b.i64(lanes))
            x = b.add(llvm.LoadOp(b.gep(row, at, f32), vector_type(lanes), alignment=4))
            b.add(llvm.StoreOp(_codes(b, x, inv_v, lanes), b.gep(out, at, i8), alignment=1))
            return []

        emit_for(b, 0, k // lanes, step)

    def tail(j: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
        b.store(_codes(b, b.load(b.gep(row, j, f32), f32), inv, 1), b.gep(out, j, i8))
        return []

    emit_for(b, k // lanes * lanes, k, tail)
    width = 4 * -(-k // 4)
    for j in range(k, width):
        b.store(b.constant(INT8_ZERO, i8), b.gep(out, j, i8))
    b.add(llvm.StoreOp(scale, b.gep(out, width, i8), alignment=4))


def _emit_quantize_rows(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.QuantizeRowsOp)
    (a,), out = op.inputs, op.output
    shape = _shape(a)
    k = shape[-1]
    static_row(op, k)
    if k == 0:
        raise LoweringError(f"{op.name}: rows of no elements have no scale")
    rows, width = numel(shape[:-1]), _shape(out)[-1]
    lanes = ctx.target.float_lanes

    def rows_range(b: FunctionBuilder, start, stop) -> None:
        pa, po = ctx.ptr(a), ctx.ptr(out)

        def row(r: SSAValue, _c: list[SSAValue]) -> list[SSAValue]:
            _quantize_row(b, b.gep(pa, b.mul_i64(r, b.i64(k)), f32), b.gep(po, b.mul_i64(r, b.i64(width)), i8), k, lanes)
            return []

        emit_for(b, start, stop, row)

    split_rows(ctx, rows, rows * (k + width // 4), rows_range, bytes_per_element=4)


# its rows may be counted at run time (`split_rows`)
SYMBOLIC_KERNELS.add(buf.QuantizeRowsOp)
REGISTRY[buf.QuantizeRowsOp] = _emit_quantize_rows
