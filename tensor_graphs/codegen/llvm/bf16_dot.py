"""Dot products of bf16 pairs, native (AVX512-BF16's ``vdpbf16ps``) or emulated with FMAs.

A word of two bf16 holds a pair along K: element ``2kk`` in its low half, ``2kk + 1`` in its high
half (`dialects.packing.bf16_k_pairs`, and a row of bf16 activations read as words). One step::

    acc[i] += lo(w[i]) * lo(x[i]) + hi(w[i]) * hi(x[i])          over the lanes of float32

Each product of two bf16 is exact in float32. ``vdpbf16ps`` does 16 lanes of it in one
instruction (twice the float32 FMA's multiply-adds); where the target lacks it the same sum is two
FMAs over the halves widened to float32, so that every kernel built on it is tested on any CPU
(the emulation adds the hi product first and rounds after each FMA, as the instruction's pairs
are summed: results agree within float32 rounding).
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import DenseArrayBase, IntegerType, VectorType, f32, i16, i32
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.loops import FunctionBuilder
from tensor_graphs.codegen.llvm.scalar import fma

#: AVX512-BF16's dot product over 16 lanes of bf16 pairs (LLVM upgrades this i32-vector form of
#: its operands to its bfloat one).
DPBF16PS = "llvm.x86.avx512bf16.dpbf16ps.512"
#: The target extension `DPBF16PS` needs (`Target.extensions`).
BF16_DOT_EXTENSION = "avx512bf16"


def native_bf16_dot(target, lanes: int) -> bool:
    """True when ``target`` runs `DPBF16PS` on vectors of ``lanes`` floats (16: AVX-512)."""
    return lanes == 16 and BF16_DOT_EXTENSION in target.extensions


def int_splat(b: FunctionBuilder, value: int | SSAValue, type: IntegerType, lanes: int) -> SSAValue:
    """An integer (a constant, or a value of ``type``) in every lane of a ``<lanes x type>``."""
    vec = VectorType(type, [lanes])
    undef = b.add(llvm.UndefOp(vec))
    scalar = b.constant(value, type) if isinstance(value, int) else value
    one = b.add(llvm.InsertElementOp(undef, scalar, b.i64(0)))
    return b.add(llvm.ShuffleVectorOp(one, undef, DenseArrayBase.from_list(i32, [0] * lanes), vec))


def bf16_bits(b: FunctionBuilder, x: SSAValue) -> SSAValue:
    """float ``x`` (or a vector of them) -> its bf16 bits in the low half of an i32 (each lane's),
    rounded to nearest even (a NaN stays a quiet NaN): `packing.to_bf16` in code."""
    lanes = x.type.get_shape()[0] if isinstance(x.type, VectorType) else 0

    def const(value: int) -> SSAValue:
        return int_splat(b, value, i32, lanes) if lanes else b.i32(value)

    bits = b.add(llvm.BitcastOp(x, VectorType(i32, [lanes]) if lanes else i32))
    odd = b.add(llvm.AndOp(b.add(llvm.LShrOp(bits, const(16))), const(1)))
    rounded = b.add(llvm.LShrOp(b.add(llvm.AddOp(bits, b.add(llvm.AddOp(odd, const(0x7FFF))))), const(16)))
    is_nan = b.add(llvm.FCmpOp(x, x, "uno"))
    return b.add(llvm.SelectOp(is_nan, const(0x7FC0), rounded))


def pair_word(b: FunctionBuilder, lo: SSAValue, hi: SSAValue | None) -> SSAValue:
    """The i32 word of two floats in bf16 (`bf16_bits`): ``lo`` in its low half, ``hi`` in its
    high (None: 0), as `packing.bf16_k_pairs` pairs them along K."""
    low = bf16_bits(b, lo)
    return low if hi is None else b.add(llvm.OrOp(low, b.add(llvm.ShlOp(bf16_bits(b, hi), b.i32(16)))))


#: AVX512-BF16's conversion of two vectors of 16 floats to one of 32 bf16 (nearest even): the
#: second operand's in the low half (LLVM upgrades this i16-vector result to its bfloat one).
CVTNE2PS2BF16 = "llvm.x86.avx512bf16.cvtne2ps2bf16.512"
#: Floats a `bf16_vector` converts from each operand
PAIR_LANES = 16


def bf16_vector(b: FunctionBuilder, first: SSAValue, second: SSAValue, native: bool, interleave: bool = False) -> SSAValue:
    """``<32 x i16>`` bf16 bits of two ``<16 x float>`` (nearest even; NaN stays NaN): ``first``'s
    then ``second``'s, one ``vcvtne2ps2bf16`` where the target has it (``native``), else
    `bf16_bits`; with ``interleave``, element by element (``first[0], second[0], first[1], ...``:
    as i32 words, 16 pairs of ``first`` low and ``second`` high)."""
    halves = VectorType(i16, [2 * PAIR_LANES])
    if native:
        joined = b.add(llvm.CallIntrinsicOp(CVTNE2PS2BF16, [second, first], [halves]))
    else:
        narrow = [b.add(llvm.TruncOp(bf16_bits(b, x), VectorType(i16, [PAIR_LANES]))) for x in (first, second)]
        joined = b.add(llvm.ShuffleVectorOp(*narrow, DenseArrayBase.from_list(i32, list(range(2 * PAIR_LANES))), halves))
    if not interleave:
        return joined
    order = [j for i in range(PAIR_LANES) for j in (i, i + PAIR_LANES)]
    return b.add(llvm.ShuffleVectorOp(joined, joined, DenseArrayBase.from_list(i32, order), halves))


def dot_pairs(b: FunctionBuilder, acc: SSAValue, words: SSAValue, xs: SSAValue, lanes: int, native: bool) -> SSAValue:
    """``acc[i] += lo(w[i]) * lo(x[i]) + hi(w[i]) * hi(x[i])`` over ``<lanes x i32>`` words of two
    bf16: one ``vdpbf16ps`` where the target has it (``native``), else two FMAs over the halves
    widened to float32."""
    vec = VectorType(f32, [lanes])
    if native:
        return b.add(llvm.CallIntrinsicOp(DPBF16PS, [acc, words, xs], [vec]))
    mask, sixteen = int_splat(b, -65536, i32, lanes), int_splat(b, 16, i32, lanes)

    def halves(v: SSAValue) -> tuple[SSAValue, SSAValue]:
        return (b.add(llvm.BitcastOp(b.add(llvm.ShlOp(v, sixteen)), vec)),
                b.add(llvm.BitcastOp(b.add(llvm.AndOp(v, mask)), vec)))

    (w_lo, w_hi), (x_lo, x_hi) = halves(words), halves(xs)
    return fma(b, w_lo, x_lo, fma(b, w_hi, x_hi, acc))
