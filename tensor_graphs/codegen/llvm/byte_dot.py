"""Dot products of bytes: four unsigned bytes times four signed bytes added to each 32-bit lane.

One step over ``<lanes x i32>`` words, each four bytes (``u`` unsigned, ``s`` signed)::

    acc[i] += u[i][0] * s[i][0] + u[i][1] * s[i][1] + u[i][2] * s[i][2] + u[i][3] * s[i][3]

``vpdpbusd`` does it in one instruction where the target has it (AVX512-VNNI on 16 lanes, AVX-VNNI
on 8: `native_byte_dot`). Elsewhere two emulations: `byte_dot` (``pmaddubsw`` then ``pmaddwd`` by
ones: exact while every pair of products fits an int16, as for int4 codes times int8) and
`byte_dot_exact` (every byte widened to 32 bits: exact for any bytes, as the int8 GEMM's 255 x 127
products need), so that every kernel built on them is tested on any CPU.
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import DenseArrayBase, VectorType, i8, i16, i32
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.bf16_dot import int_splat
from tensor_graphs.codegen.llvm.loops import FunctionBuilder

#: vector bits -> (``pmaddubsw``, ``pmaddwd``): `byte_dot`'s emulation
EMULATION = {
    512: ("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512"),
    256: ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"),
    128: ("llvm.x86.ssse3.pmadd.ub.sw.128", "llvm.x86.sse2.pmadd.wd"),
}


def native_byte_dot(target) -> bool:
    """True when ``target`` has ``vpdpbusd`` on its vectors (`Target.byte_dot_extension`)."""
    return target.byte_dot_extension is not None


def _vpdpbusd(b: FunctionBuilder, acc: SSAValue, u: SSAValue, s: SSAValue, lanes: int) -> SSAValue:
    return b.add(llvm.CallIntrinsicOp(f"llvm.x86.avx512.vpdpbusd.{32 * lanes}", [acc, u, s], [VectorType(i32, [lanes])]))


def byte_dot(b: FunctionBuilder, acc: SSAValue, u: SSAValue, s: SSAValue, lanes: int, native: bool) -> SSAValue:
    """``acc[i] += sum_t u8(u[i])[t] * s8(s[i])[t]`` over ``<lanes x i32>``: ``vpdpbusd``, or its
    emulation by ``pmaddubsw`` (exact while every pair of products fits an int16)."""
    words = VectorType(i32, [lanes])
    if native:
        return _vpdpbusd(b, acc, u, s, lanes)
    pairs, quads = EMULATION[32 * lanes]
    as_bytes = VectorType(i8, [4 * lanes])
    shorts = b.add(llvm.CallIntrinsicOp(pairs, [b.add(llvm.BitcastOp(u, as_bytes)), b.add(llvm.BitcastOp(s, as_bytes))],
                                        [VectorType(i16, [2 * lanes])]))
    ones = int_splat(b, 1, i16, 2 * lanes)
    return b.add(llvm.AddOp(acc, b.add(llvm.CallIntrinsicOp(quads, [shorts, ones], [words]))))


def byte_dot_exact(b: FunctionBuilder, acc: SSAValue, u: SSAValue, s: SSAValue, lanes: int, native: bool) -> SSAValue:
    """`byte_dot` for any bytes: ``vpdpbusd``, else every byte widened to 32 bits (``u`` by zeros,
    ``s`` by its sign), multiplied and summed four by four (products up to 255 x 128 would
    saturate ``pmaddubsw``'s int16 pairs)."""
    if native:
        return _vpdpbusd(b, acc, u, s, lanes)
    as_bytes, wide = VectorType(i8, [4 * lanes]), VectorType(i32, [4 * lanes])
    uw = b.add(llvm.ZExtOp(b.add(llvm.BitcastOp(u, as_bytes)), wide))
    sw = b.add(llvm.SExtOp(b.add(llvm.BitcastOp(s, as_bytes)), wide))
    products = b.add(llvm.MulOp(uw, sw))
    words = VectorType(i32, [lanes])
    for t in range(4):
        picked = b.add(llvm.ShuffleVectorOp(products, products, DenseArrayBase.from_list(i32, list(range(t, 4 * lanes, 4))), words))
        acc = b.add(llvm.AddOp(acc, picked))
    return acc
