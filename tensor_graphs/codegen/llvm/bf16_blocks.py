"""Float32 blocks moved into bf16 pairs (words of two bf16 along a GEMM's K, `packing.bf16_k_pairs`'
layout), rounded to nearest even as they move: rows as they are (`rows_as_pairs`), pairs of rows
(`row_pairs`), and transposed (`transposed_pairs`, `transposed_row_pairs`). Where the sizes are
whole vectors, 16 or 32 floats a row at a time by `bf16_dot.bf16_vector` (``vcvtne2ps2bf16`` where
the target has AVX512-BF16, else its emulation), and a transposed block 16 x 16 at a time through
registers (`transpose16`); otherwise one word at a time, in loops LLVM vectorises. Words past the
source's rows or columns are zero. Attention's bf16 products use them
(`kernels_attention_bf16`).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import DenseArrayBase, VectorType, f32, i32
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.bf16_dot import PAIR_LANES, bf16_vector, pair_word
from tensor_graphs.codegen.llvm.kernels import _at, _fmul, _load, _mul_idx
from tensor_graphs.codegen.llvm.kernels_gemm import splat
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, Index, emit_for, emit_if, icmp
from tensor_graphs.codegen.llvm.loops import value as _val


def _store_word(b: FunctionBuilder, word: SSAValue, ptr: SSAValue, index: SSAValue | int | None) -> None:
    b.store(word, b.gep(ptr, index, i32))


def _zero_words(b: FunctionBuilder, ptr: SSAValue, start: Index, end: Index) -> None:
    if not (isinstance(start, int) and isinstance(end, int) and start >= end):
        emit_for(b, start, end, lambda j, _: _store_word(b, b.i32(0), ptr, j) or [])


def _halves(b: FunctionBuilder, n: Index) -> tuple[Index, Index]:
    """``(n // 2, ceil(n / 2))`` of a count, static or run time."""
    if isinstance(n, int):
        return n // 2, -(-n // 2)
    return b.add(llvm.LShrOp(n, b.i64(1))), b.add(llvm.LShrOp(b.add_i64(n, b.i64(1)), b.i64(1)))


def _if_odd(b: FunctionBuilder, n: Index, emit: Callable[[], None]) -> None:
    """``emit()`` when the count ``n`` is odd (decided now when it is static)."""
    if isinstance(n, int):
        if n % 2:
            emit()
        return
    emit_if(b, icmp(b, "ne", b.add(llvm.AndOp(n, b.i64(1))), b.i64(0)), emit)


def load_vector(b: FunctionBuilder, ptr: SSAValue, index: SSAValue | int | None) -> SSAValue:
    """The `PAIR_LANES` floats from ``ptr[index]``."""
    return b.add(llvm.LoadOp(_at(b, ptr, index), VectorType(f32, [PAIR_LANES]), alignment=4))


def store_vector(b: FunctionBuilder, vector: SSAValue, ptr: SSAValue, index: SSAValue | int | None) -> None:
    """A vector of 64 bytes (16 floats or words, `bf16_vector`'s 32 halves) at element ``index``
    of ``ptr`` (32-bit elements), through a pointer of its own type."""
    at = b.add(llvm.GEPOp(b.gep(ptr, index, f32), [llvm.GEP_USE_SSA_VAL], vector.type, ssa_indices=[b.i64(0)], inbounds=True))
    b.add(llvm.StoreOp(vector, at, alignment=4))


def rows_as_pairs(b: FunctionBuilder, src: SSAValue, src_ld: int, rows: Index, cols: int, dest: SSAValue, words: int,
                   native: bool) -> None:
    """``dest[r, j] = word(src[r, 2j], src[r, 2j + 1])`` (``words`` a row) for ``r < rows``, zero
    past ``cols``: the key block's rows (pairs along D) as A of ``S^T = K Q^T``. A row in bf16
    is its words: 32 floats at a time by `bf16_vector` (one ``vcvtne2ps2bf16`` where ``native``),
    the rest one word at a time."""
    vectors = cols // (2 * PAIR_LANES)
    half, whole = cols // 2, -(-cols // 2)

    def row(r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        s_row, d_row = _at(b, src, _mul_idx(b, r, src_ld)), b.gep(dest, _mul_idx(b, r, words), i32)
        for v in range(vectors):
            first, second = (load_vector(b, s_row, 2 * PAIR_LANES * v + h * PAIR_LANES) for h in (0, 1))
            store_vector(b, bf16_vector(b, first, second, native), d_row, PAIR_LANES * v)

        def pair(j: SSAValue, _w: list[SSAValue]) -> list[SSAValue]:
            c = b.mul_i64(j, b.i64(2))
            _store_word(b, pair_word(b, _load(b, s_row, c), _load(b, s_row, b.add_i64(c, b.i64(1)))), d_row, j)
            return []

        emit_for(b, vectors * PAIR_LANES, half, pair)
        if cols % 2:  # an odd count's last column, its word's high half 0
            _store_word(b, pair_word(b, _load(b, s_row, cols - 1), None), d_row, half)
        _zero_words(b, d_row, whole, words)
        return []

    emit_for(b, 0, rows, row)


def _transposed_pairs_words(b: FunctionBuilder, src: SSAValue, src_ld: int, count: Index, d: int, dest: SSAValue, ld: int,
                      words: int, scale: float = 1.0) -> None:
    """``dest[i, j] = word(scale * src[j, 2i], scale * src[j, 2i + 1])`` (``ld`` words a row) for
    the ``count`` rows of ``src`` (``i < ceil(d / 2)``: an odd ``d``'s last word has 0 high), zero
    past them (to ``ld``) and in the pair rows from ``ceil(d / 2)`` to ``words``: the query block
    (times the scale) transposed into B of ``S^T = K Q^T`` (pairs along D)."""
    half, whole = d // 2, -(-d // 2)

    def source_row(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        row = _at(b, src, _mul_idx(b, j, src_ld))

        def value(c: SSAValue | int) -> SSAValue:
            x = _load(b, row, c)
            return x if scale == 1.0 else _fmul(b, x, b.f32(scale))

        def pair(i: SSAValue, _w: list[SSAValue]) -> list[SSAValue]:
            c = b.mul_i64(i, b.i64(2))
            _store_word(b, pair_word(b, value(c), value(b.add_i64(c, b.i64(1)))), dest, b.add_i64(_mul_idx(b, i, ld) or b.i64(0), j))
            return []

        emit_for(b, 0, half, pair)
        if d % 2:
            _store_word(b, pair_word(b, value(d - 1), None), dest, b.add_i64(b.i64(half * ld), j))
        return []

    emit_for(b, 0, count, source_row)
    if not (isinstance(count, int) and count == ld):
        emit_for(b, 0, whole, lambda i, _: _zero_words(b, b.gep(dest, _mul_idx(b, i, ld), i32), count, ld) or [])
    _zero_words(b, dest, whole * ld, words * ld)


def row_pairs(b: FunctionBuilder, src: SSAValue, src_ld: int, keys: Index, dest: SSAValue, ld: int, words: int,
               native: bool) -> None:
    """``dest[i, c] = word(src[2i, c], src[2i + 1, c])`` (``ld`` words a row, ``c < ld``) for the
    ``keys`` rows of ``src`` (an odd count's last pair row has 0 high), zero in the pair rows
    from ``ceil(keys / 2)`` to ``words``: the probabilities (S^T's rows, pairs along the keys) as
    B of ``acc^T += V^T P^T``; 16 words at a time (`bf16_vector`, interleaved), ``ld`` a multiple
    of 16."""
    assert ld % PAIR_LANES == 0
    half, whole = _halves(b, keys)
    zeros = splat(b, b.f32(0.0), PAIR_LANES) if isinstance(keys, SSAValue) or keys % 2 else None

    def pair_row(i: SSAValue, hi: bool) -> None:
        lo_row = _at(b, src, _mul_idx(b, b.mul_i64(i, b.i64(2)), src_ld))
        hi_row = _at(b, lo_row, src_ld)
        d_row = b.gep(dest, _mul_idx(b, i, ld), i32)
        for c in range(0, ld, PAIR_LANES):
            second = load_vector(b, hi_row, c) if hi else zeros
            store_vector(b, bf16_vector(b, load_vector(b, lo_row, c), second, native, interleave=True), d_row, c)

    emit_for(b, 0, half, lambda i, _: pair_row(i, True) or [])
    _if_odd(b, keys, lambda: pair_row(_val(b, half), False))
    _zero_words(b, dest, whole * ld if isinstance(whole, int) else b.mul_i64(whole, b.i64(ld)), words * ld)


def _transposed_row_pairs_words(b: FunctionBuilder, v_ptr: SSAValue, v_ld: int, keys: Index, dv: int, dest: SSAValue,
                          words: int) -> None:
    """``dest[c, i] = word(V[2i, c], V[2i + 1, c])`` (``words`` a row) for ``c < dv`` over the
    block's ``keys`` (an odd count's last word has 0 high), zero from ``ceil(keys / 2)`` to
    ``words``: the value block as A of ``acc^T += V^T P^T`` (pairs along the keys)."""
    half, whole = _halves(b, keys)

    def pair_row(i: SSAValue, hi: bool) -> None:
        lo_row = _at(b, v_ptr, _mul_idx(b, b.mul_i64(i, b.i64(2)), v_ld))
        hi_row = _at(b, lo_row, v_ld) if hi else None

        def column(c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            word = pair_word(b, _load(b, lo_row, c), _load(b, hi_row, c) if hi_row is not None else None)
            _store_word(b, word, dest, b.add_i64(_mul_idx(b, c, words) or b.i64(0), i))
            return []

        emit_for(b, 0, dv, column)

    emit_for(b, 0, half, lambda i, _: pair_row(i, True) or [])
    _if_odd(b, keys, lambda: pair_row(_val(b, half), False))
    emit_for(b, 0, dv, lambda c, _: _zero_words(b, b.gep(dest, _mul_idx(b, c, words), i32), whole, words) or [])


def transpose16(b: FunctionBuilder, rows: list[SSAValue]) -> list[SSAValue]:
    """The transpose of 16 vectors of 16 lanes (32-bit elements): four stages, each swapping the
    off-diagonal blocks of width w = 8, 4, 2, 1 of every 2w x 2w block with two-source shuffles
    (one ``vpermt2ps`` each on AVX-512: 64 for 256 elements, where a gather or a scatter takes
    about one cycle an element)."""
    r, w = list(rows), PAIR_LANES // 2
    while w:
        first = [j if not j & w else PAIR_LANES + j - w for j in range(PAIR_LANES)]
        second = [j + w if not j & w else PAIR_LANES + j for j in range(PAIR_LANES)]
        new = list(r)
        for k in (k for k in range(PAIR_LANES) if not k & w):
            for at, mask in ((k, first), (k + w, second)):
                new[at] = b.add(llvm.ShuffleVectorOp(r[k], r[k + w], DenseArrayBase.from_list(i32, mask), r[k].type))
        r, w = new, w // 2
    return r


def _words(b: FunctionBuilder, halves: SSAValue) -> SSAValue:
    """`bf16_vector`'s ``<32 x i16>`` as its 16 words."""
    return b.add(llvm.BitcastOp(halves, VectorType(i32, [PAIR_LANES])))


def _vector_or_zeros(b: FunctionBuilder, row: tuple[SSAValue, SSAValue], index: int, zeros: SSAValue) -> SSAValue:
    """The `PAIR_LANES` floats from ``index`` of ``row`` = (inside, pointer), read from ``zeros``
    (a stack vector of zeros) where ``inside`` (i1) is false: a row past the block's."""
    inside, ptr = row
    return load_vector(b, b.add(llvm.SelectOp(inside, _at(b, ptr, index), zeros)), None)


def _transposed_pairs_vectors(b: FunctionBuilder, src: SSAValue, src_ld: int, count: Index, d: int, dest: SSAValue,
                              ld: int, words: int, scale: float, native: bool, zeros: SSAValue) -> None:
    """`_transposed_pairs_words` where ``d`` is whole vectors of 32 floats: per 16 rows of ``src`` (rows
    past ``count`` read from ``zeros``) and 32 of its columns, the rows' words (`bf16_vector`),
    transposed in registers (`transpose16`), stored as 16 words of 16 pair rows."""
    assert d % (2 * PAIR_LANES) == 0 and ld % PAIR_LANES == 0
    factor = splat(b, b.f32(scale), PAIR_LANES)

    def group(g: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        first = b.mul_i64(g, b.i64(PAIR_LANES))
        rows = []
        for r in range(PAIR_LANES):
            j = b.add_i64(first, b.i64(r))
            rows.append((icmp(b, "slt", j, _val(b, count)), _at(b, src, b.mul_i64(j, b.i64(src_ld)))))
        for c in range(0, d, 2 * PAIR_LANES):
            loaded = [[b.add(llvm.FMulOp(_vector_or_zeros(b, row, c + h * PAIR_LANES, zeros), factor)) for h in (0, 1)]
                      for row in rows]
            out = transpose16(b, [_words(b, bf16_vector(b, lo, hi, native)) for lo, hi in loaded])
            for i, vector in enumerate(out):
                store_vector(b, vector, dest, b.add_i64(b.i64((c // 2 + i) * ld), first))
        return []

    emit_for(b, 0, ld // PAIR_LANES, group)
    _zero_words(b, dest, (d // 2) * ld, words * ld)


def _transposed_row_pairs_vectors(b: FunctionBuilder, v_ptr: SSAValue, v_ld: int, keys: Index, dv: int, dest: SSAValue,
                                  words: int, native: bool, zeros: SSAValue) -> None:
    """`_transposed_row_pairs_words` where ``dv`` is whole vectors: per 16 pair rows (rows past ``keys``
    read from ``zeros``) and 16 columns, the pairs' words (`bf16_vector`, interleaved),
    transposed in registers (`transpose16`), stored as 16 words of 16 rows."""
    assert dv % PAIR_LANES == 0 and words % PAIR_LANES == 0

    def group(g: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        first = b.mul_i64(g, b.i64(PAIR_LANES))
        rows = []
        for r in range(2 * PAIR_LANES):
            j = b.add_i64(b.mul_i64(first, b.i64(2)), b.i64(r))
            rows.append((icmp(b, "slt", j, _val(b, keys)), _at(b, v_ptr, b.mul_i64(j, b.i64(v_ld)))))
        for c in range(0, dv, PAIR_LANES):
            pairs = [_words(b, bf16_vector(b, _vector_or_zeros(b, rows[2 * i], c, zeros), _vector_or_zeros(b, rows[2 * i + 1], c, zeros),
                                          native, interleave=True)) for i in range(PAIR_LANES)]
            for i, vector in enumerate(transpose16(b, pairs)):
                store_vector(b, vector, dest, b.add_i64(b.i64((c + i) * words), first))
        return []

    emit_for(b, 0, words // PAIR_LANES, group)


def transposed_pairs(b: FunctionBuilder, src: SSAValue, src_ld: int, count: Index, d: int, dest: SSAValue, ld: int,
                     words: int, scale: float, native: bool, zeros: SSAValue) -> None:
    """``dest[i, j] = word(scale * src[j, 2i], scale * src[j, 2i + 1])`` over the ``count`` rows of
    ``src`` (`_transposed_pairs_words`): 16 x 16 words at a time through registers where ``d`` is
    whole vectors of 32 floats (`_transposed_pairs_vectors`; rows past ``count`` read from
    ``zeros``, a stack vector of zeros), else a word at a time."""
    if d % (2 * PAIR_LANES) == 0 and ld % PAIR_LANES == 0:
        _transposed_pairs_vectors(b, src, src_ld, count, d, dest, ld, words, scale, native, zeros)
    else:
        _transposed_pairs_words(b, src, src_ld, count, d, dest, ld, words, scale)


def transposed_row_pairs(b: FunctionBuilder, v_ptr: SSAValue, v_ld: int, keys: Index, dv: int, dest: SSAValue,
                         words: int, native: bool, zeros: SSAValue) -> None:
    """``dest[c, i] = word(V[2i, c], V[2i + 1, c])`` over the block's ``keys``
    (`_transposed_row_pairs_words`): 16 x 16 words at a time through registers where ``dv`` is
    whole vectors (`_transposed_row_pairs_vectors`; rows past ``keys`` read from ``zeros``), else
    a word at a time."""
    if dv % PAIR_LANES == 0 and words % PAIR_LANES == 0:
        _transposed_row_pairs_vectors(b, v_ptr, v_ld, keys, dv, dest, words, native, zeros)
    else:
        _transposed_row_pairs_words(b, v_ptr, v_ld, keys, dv, dest, words)
