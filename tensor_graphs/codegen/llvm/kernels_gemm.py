"""`buf.packed_matmul`: a register-tiled GEMM over a weight packed into column panels.

    out[M, N] = act(alpha * A[M, K] @ B[K, N] + beta * acc (+ addend))      B in panels: [P, K, NR]

(`dialects.packing`: panel ``p`` is columns ``[p NR, p NR + NR)`` of ``B``, a row-major ``K x NR``
block): a weight packed at load time (`buf.packed_weight`), or an activation the graph packed
(`buf.im2col` with ``panels``: a convolution's windows, with the weight as A; `buf.winograd_input`:
a batch of G GEMMs, ``A[G, M, K]`` by panels ``[G, P, K, NR]``, whose G x P panels are one list
of work items, each with its GEMM's A and out, the last panel of each partial when N is not a
multiple of NR). The panels are split among the threads
(`KernelContext.parallel`); each thread runs::

    for p in its panels:                                     NR = L V columns, V vectors of L floats
        for r0 in 0, MR, 2 MR, ... (then one block of the M % MR rows left):
            c[i][v] = 0                                      MR x V vectors (registers)
            for k in 0 .. K:
                b[v] = panel[p][k][L v : L v + L]             V aligned loads
                c[i][v] = fma(splat(A[r0 + i][k]), b[v], c[i][v])
            c *= alpha
            (the first row blocks also prefetch panel p + 1, a share of its lines per k step)
            store c into out[r0 : r0 + MR, p NR : p NR + NR]  (the last panel's padding columns
                                                              go to a stack tile, never to out)
            out tile = act(out tile + beta * acc tile)        one loop over the tile, still in L1

Each K block passes over this thread's panels, every row block at each panel (the panel's slice
stays in L1, A's ``M x kc`` slice in L2). When that slice of A overflows half of L2, or A has
more rows than the panels have columns, while all the panels' slices fit there (a convolution:
its weight is A, its few output pixels the panels), the row blocks go outside instead
(A-stationary), so that A streams once per K block, and the threads split the row blocks rather
than the panels (each streams only its rows of A: split by panels, every thread streamed all of
it, and ResNet-50's 7 x 7 convolutions ran no faster on 2 threads than on 1); the last, partial
panel is then one more panel of each row block, its K blocks' sums added to ``out`` through a
stack tile, or, where it is the only panel, all of K in one block. In a batch of GEMMs split by
panels, each GEMM's partial last panel runs after the whole panels' K blocks, in one pass over K.
The last, partial panel's tile is only as many vectors wide as its columns need. The code of a panel is emitted once for all its K blocks: a
loop over them whose first (start from zeros) and last (alpha, the epilogue) are run-time flags.
Run-time rows (a symbolic M): the tiles, K blocks and team are those of the largest M; each call
takes the static kernel's prefetch plan for its count of row blocks (`_PackedGemm.run_time_plans`).

Cheaper operands take the same tiles: bf16 pairs along K (a bf16 ``A``, "bf16kpanels": each step a
dot product of pairs, `bf16_dot`; on AMX `kernels_amx` instead), and int8 quads along K (the int8
GEMM: ``A`` the rows `buf.quantize_rows` made, unsigned codes then each row's scale; "int8kpanels",
the weight's signed codes then two rows of its columns' scales and offsets; each step
``vpdpbusd`` or its emulation, `byte_dot`, into int32 sums that the tile adds to the float32 ones
it stores, K block by K block; the epilogue then computes ``alpha * s_row * s_col * (y - offset)``
before the addends and the activation).

A bf16 ``out`` (`narrow-gemm-output`: a convolution whose only readers pack bf16 panels, or
whose epilogue body rounds to bf16) takes every block's sums in the stack tile, over all of K
in one block (the sums are never kept in out between K blocks), and the epilogue writes each
value rounded to bf16 (`stored_value`).

The shapes come from the target (`KernelContext.target`, `Target.gemm_tile`): ``L`` is its
floats per vector, and ``MR x V`` fills its vector registers with the accumulators, the panel
row's vectors and one broadcast: 6 x 4 vectors of 16 (6 x 64 floats) of AVX-512's 32 zmm, 6 x 2
vectors of 8 (6 x 16, BLIS's Haswell tile) of AVX2's 16 ymm, 6 x 2 vectors of 4 of SSE's 16 xmm.
Narrower panels (a small N) get taller tiles. The row loop, the tail block and the last panel are
emitted for the shapes at hand; the tile itself (zeros or the stored sums, the FMA loop over a K
block, alpha, the store) is a function of the module that every GEMM with that tile shape calls
(`tile_function`: one copy to build and optimise, not one per call site). With M = 1 the same
code is a matrix-vector product that streams each panel once (the memory-bound decode step). ``A`` (batch dims folded into M) and
``out`` must be contiguous; ``acc`` (a bias ``[N]``, a residual ``[M, N]``, ...) must read as
one row stride and a column stride of 0 or 1 over the folded rows, and must not share bytes
with ``out`` (plan-memory never places a kernel's output over its inputs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from xdsl.dialects import llvm
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, VectorType, f32, i32, i64
from xdsl.ir import Block, Operation, SSAValue

from tensor_graphs.codegen.llvm.bf16_dot import dot_pairs, int_splat, native_bf16_dot
from tensor_graphs.codegen.llvm.byte_dot import byte_dot_exact, native_byte_dot
from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    SYMBOLIC_KERNELS,
    Access,
    _shape,
    KernelContext,
    LoweringError,
    _scalar_errors,
    check_no_overlap,
    emit_elementwise,
    emit_pointwise,
    paying_rows,
    static_row,
)
from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder, broadcast_strides, collapse_dims, emit_for, emit_if, icmp, min_i64
from tensor_graphs.codegen.llvm.loops import sum_i64 as _sum
from tensor_graphs.codegen.llvm.loops import value as _val
from tensor_graphs.codegen.llvm.scalar import emit_arith_body, emit_convert, emit_unary, fma
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.packing import INT8K_SCALE_ROWS
from tensor_graphs.dialects.shapes import contiguous_strides, numel

#: From this many rows on, each panel's first row blocks prefetch the next panel (so that the
#: weights stream from memory while the FMAs run; measured on a chain of weights larger than the
#: L3: +25% at M = 32, +5% at M = 128). Below it the kernel is a matrix-vector product bound by
#: the memory stream, which the hardware prefetcher serves better alone (-20% at M = 1 with it).
PREFETCH_MIN_ROWS = 4
#: At most this many k steps per loop iteration (one prefetch each; +8% at M = 128)
MAX_SPREAD = 8


@functools.cache
def vector_type(lanes: int) -> VectorType:
    """``<lanes x float>``: one vector register of floats."""
    return VectorType(f32, [lanes])


def splat(b: FunctionBuilder, x: SSAValue, lanes: int) -> SSAValue:
    """``<lanes x float>`` of ``x`` (insertelement + zero shuffle: a broadcast LLVM folds into the FMA)."""
    vec = vector_type(lanes)
    undef = b.add(llvm.UndefOp(vec))
    one = b.add(llvm.InsertElementOp(undef, x, b.i64(0)))
    return b.add(llvm.ShuffleVectorOp(one, undef, DenseArrayBase.from_list(i32, [0] * lanes), vec))


def _vector_at(b: FunctionBuilder, ptr: SSAValue, index: int, lanes: int) -> SSAValue:
    """``&ptr[index]`` (floats) typed as a vector pointer, so that a vector can be stored there."""
    return b.add(
        llvm.GEPOp(b.gep(ptr, index, f32), [llvm.GEP_USE_SSA_VAL], vector_type(lanes), ssa_indices=[b.i64(0)], inbounds=True)
    )


def _prefetch(b: FunctionBuilder, ptr: SSAValue) -> None:
    """``llvm.prefetch(ptr, read, locality 3, data)``: into L1 ahead of use (a hint: never faults,
    so running past the end of the weights is harmless)."""
    b.add(llvm.CallIntrinsicOp("llvm.prefetch.p0", [ptr, b.i32(0), b.i32(3), b.i32(1)], []))


def register_tile(
    b: FunctionBuilder,
    rows: int,
    vectors: int,
    k: SSAValue,
    a_at: Callable[[int, SSAValue], SSAValue],
    b_row: Callable[[SSAValue], SSAValue],
    init: list[SSAValue],
    *,
    lanes: int,
    b_aligned: bool = True,
    spread: int = 1,
    prefetch: SSAValue | None = None,
    per_step: int = 0,
    line_floats: int = 16,
    pairs: bool = False,
    quads: bool = False,
    native: bool = False,
) -> list[SSAValue]:
    """The FMA loop of one register tile: ``c[i][v] = init + sum_k A[i][k] * B[k][L v : L v + L]``
    (``L = lanes``, the target's floats per vector). With ``pairs``, A's and B's elements are
    words of two bf16 (pairs along K) and each step is a dot product of pairs
    (`bf16_dot.dot_pairs`: ``vdpbf16ps`` when ``native``, else emulated); with ``quads``, words of
    four bytes along K (A's unsigned, B's signed) and each step an integer dot product into int32
    accumulators (`byte_dot.byte_dot_exact`: ``vpdpbusd`` when ``native``, else emulated).

    ``a_at(i, k)`` is the address of A's element (broadcast to a vector), ``b_row(k)`` of the
    first of B's ``vectors`` vectors for step ``k`` (64-byte aligned when ``b_aligned``); ``init``
    the ``rows * vectors`` starting vectors (zeros, or a tile loaded from C to accumulate into).
    ``k`` (run time) steps, ``spread`` per loop iteration and the ``k % spread`` left one by
    one, each iteration prefetching ``per_step`` lines from ``prefetch`` on (the
    next panel).
    Returns the accumulators, row-major (``c[i * vectors + v]``).
    """
    align = 64 if b_aligned else 4
    vec = vector_type(lanes)

    loaded = VectorType(i32, [lanes]) if pairs or quads else vec

    def step(kk: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
        row = b_row(kk)
        bv = [b.add(llvm.LoadOp(b.gep(row, v * lanes, f32), loaded, alignment=min(align, lanes * 4))) for v in range(vectors)]
        new = []
        for i in range(rows):
            if pairs or quads:
                x = int_splat(b, b.load(a_at(i, kk), i32), i32, lanes)
                new += [byte_dot_exact(b, c[i * vectors + v], x, bv[v], lanes, native) if quads
                        else dot_pairs(b, c[i * vectors + v], bv[v], x, lanes, native) for v in range(vectors)]
                continue
            x = splat(b, b.load(a_at(i, kk), f32), lanes)
            new += [fma(b, x, bv[v], c[i * vectors + v]) for v in range(vectors)]
        return new

    def steps(it: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
        if prefetch is not None:
            line = b.gep(prefetch, b.mul_i64(it, b.i64(per_step * line_floats)), f32)
            for j in range(per_step):
                _prefetch(b, b.gep(line, j * line_floats, f32))
        k0 = b.mul_i64(it, b.i64(spread)) if spread > 1 else it
        for j in range(spread):
            c = step(b.add_i64(k0, b.i64(j)) if j else k0, c)
        return c

    iterations = b.add(llvm.SDivOp(k, b.i64(spread))) if spread > 1 else k
    c = emit_for(b, 0, iterations, steps, init)
    if spread > 1:
        c = emit_for(b, b.mul_i64(iterations, b.i64(spread)), k, step, c)
    return c


def store_tile(
    b: FunctionBuilder, c: list[SSAValue], rows: int, vectors: int, dest: SSAValue, ld: int | SSAValue, lanes: int
) -> None:
    """``dest[i * ld + L v : ... + L] = c[i * vectors + v]`` (unaligned stores, ``L = lanes``)."""
    for i in range(rows):
        row = _row_at(b, dest, i, ld)
        for v in range(vectors):
            b.add(llvm.StoreOp(c[i * vectors + v], _vector_at(b, row, v * lanes, lanes), alignment=4))


def _row_at(b: FunctionBuilder, base: SSAValue, i: int, ld: int | SSAValue) -> SSAValue:
    """``&base[i * ld]`` (floats), ``ld`` static or run time."""
    if i == 0:
        return base
    return b.gep(base, i * ld if isinstance(ld, int) else b.mul_i64(b.i64(i), ld), f32)


def load_tile(b: FunctionBuilder, rows: int, vectors: int, src: SSAValue, ld: int | SSAValue, lanes: int) -> list[SSAValue]:
    """The ``rows x vectors`` vectors of ``lanes`` floats of a tile at ``src`` (row stride ``ld`` floats)."""
    vec = vector_type(lanes)
    return [
        b.add(llvm.LoadOp(b.gep(_row_at(b, src, i, ld), v * lanes, f32), vec, alignment=4))
        for i in range(rows)
        for v in range(vectors)
    ]


@dataclass(frozen=True)
class Tile:
    """The code of one register-tile function (`tile_function`): ``rows x vectors`` accumulator
    vectors of ``lanes`` floats, ``spread`` k steps per loop iteration, each iteration
    prefetching ``per_step`` cache lines of ``line_floats`` floats (0: none); B's rows 64-byte
    aligned when ``b_aligned``; with ``pairs``, A's and B's elements are words of two bf16
    along K (`register_tile`), each step a dot product of pairs; with ``quads``, words of four
    int8 along K, each step an integer dot product into int32 sums, which the tile adds to its
    float32 sums when it stores them."""

    rows: int
    vectors: int
    lanes: int
    spread: int = 1
    per_step: int = 0
    line_floats: int = 16
    b_aligned: bool = True
    pairs: bool = False
    quads: bool = False

    @property
    def name(self) -> str:
        """``tg_tile_<rows>x<vectors>v<lanes>_s<spread>[_p<per_step>x<line_floats>][_u][_bf16|_i8]``."""
        prefetch = f"_p{self.per_step}x{self.line_floats}" if self.per_step else ""
        suffix = ("" if self.b_aligned else "_u") + ("_bf16" if self.pairs else "") + ("_i8" if self.quads else "")
        return f"tg_tile_{self.rows}x{self.vectors}v{self.lanes}_s{self.spread}{prefetch}{suffix}"


#: A tile function's arguments: ``(A, lda, B, ldb, steps, ahead, C, ldc, alpha, accumulate)``
TILE_ARGS = (PTR, i64, PTR, i64, i64, PTR, PTR, i64, f32, i64)


def tile_function(ctx: KernelContext, tile: Tile) -> str:
    """The module's function of ``tile`` (built on first use, `KernelContext.shared_function`)::

        void @tg_tile_6x2v8_s4(ptr A, i64 lda, ptr B, i64 ldb, i64 steps, ptr ahead,
                               ptr C, i64 ldc, float alpha, i64 accumulate)
          c = accumulate ? C[0:rows, 0:vectors*lanes] : 0        (rows of ldc floats)
          for k in 0 .. steps:  c[i][v] = fma(splat(A[i*lda + k]), B[k*ldb + lanes*v ...], c[i][v])
                                (`register_tile`; every spread-th step prefetches per_step lines
                                 of ahead, which is otherwise unused; int8 quads: int32 sums from
                                 zeros, c + float(sums) after the loop)
          C[0:rows, ...] = alpha * c

    One function per tile shape serves every GEMM of the module that uses it (the packed GEMM's
    K blocks, panels and row tails, attention's tiles, the grouped MoE GEMM), where a copy per
    call site made the packed GEMMs 80% of GPT-2 small's LLVM code. A call costs a few cycles per
    ``steps`` FMA steps of the tile (a K block: hundreds)."""
    lanes, rows, vectors = tile.lanes, tile.rows, tile.vectors

    def build(b: FunctionBuilder) -> None:
        a, lda, bm, ldb, steps, ahead, c, ldc, alpha, accumulate = b.args
        for arg, hint in zip(b.args, ("a", "lda", "b", "ldb", "steps", "ahead", "c", "ldc", "alpha", "accumulate")):
            arg.name_hint = hint
        vec = vector_type(lanes)
        loaded, start = b.new_block(), b.new_block([vec] * (rows * vectors))
        zeros = [splat(b, b.f32(0.0), lanes)] * (rows * vectors)
        b.add(llvm.CondBrOp(icmp(b, "ne", accumulate, b.i64(0)), loaded, [], start, zeros))
        b.block = loaded
        b.add(llvm.BrOp(start, *load_tile(b, rows, vectors, c, ldc, lanes)))
        b.block = start
        a_rows = [_row_at(b, a, i, lda) for i in range(rows)]
        init = [int_splat(b, 0, i32, lanes)] * (rows * vectors) if tile.quads else list(start.args)
        native = native_byte_dot(ctx.target) if tile.quads else tile.pairs and native_bf16_dot(ctx.target, lanes)
        acc = register_tile(
            b, rows, vectors, steps,
            lambda i, kk: b.gep(a_rows[i], kk, f32),
            lambda kk: b.gep(bm, b.mul_i64(kk, ldb), f32),
            init, lanes=lanes, b_aligned=tile.b_aligned, spread=tile.spread,
            prefetch=ahead if tile.per_step else None, per_step=tile.per_step, line_floats=tile.line_floats,
            pairs=tile.pairs, quads=tile.quads, native=native,
        )
        if tile.quads:  # the int32 sums of this call added to the float32 ones
            acc = [b.add(llvm.FAddOp(c0, b.add(llvm.SIToFPOp(x, vec)))) for c0, x in zip(start.args, acc)]
        scale = splat(b, alpha, lanes)
        store_tile(b, [b.add(llvm.FMulOp(x, scale)) for x in acc], rows, vectors, c, ldc, lanes)
        b.add(llvm.ReturnOp())

    ctx.shared_function(tile.name, TILE_ARGS, build)
    return tile.name


def call_tile(
    ctx: KernelContext,
    tile: Tile,
    a: SSAValue,
    lda: int | SSAValue,
    bm: SSAValue,
    ldb: int | SSAValue,
    steps: int | SSAValue,
    c: SSAValue,
    ldc: int | SSAValue,
    *,
    alpha: float | SSAValue = 1.0,
    accumulate: bool | SSAValue = False,
    ahead: SSAValue | None = None,
) -> None:
    """At the cursor: ``C[rows, vectors * lanes] (+)= alpha * A[rows, steps] @ B[steps, ...]``
    through ``tile``'s function (`tile_function`); ``ahead``: where its prefetches start
    (``tile.per_step`` lines every ``tile.spread`` steps). ``alpha`` (an f32) and
    ``accumulate`` (an i64, 0 or 1) may be run-time values."""
    if tile.per_step and ahead is None:
        raise LoweringError(f"call_tile: {tile.name} prefetches, but no address to prefetch from was given")
    b = ctx.b
    args = (a, _val(b, lda), bm, _val(b, ldb), _val(b, steps), ahead if ahead is not None else a, c, _val(b, ldc))
    scale = alpha if isinstance(alpha, SSAValue) else b.f32(alpha)
    adding = accumulate if isinstance(accumulate, SSAValue) else b.i64(int(accumulate))
    b.add(llvm.CallOp(tile_function(ctx, tile), *args, scale, adding))


@dataclass(frozen=True)
class KRange:
    """The k steps ``[start, start + steps)`` of one K block (``start`` static or run time);
    ``first``: the tile starts from zeros; ``last``: alpha and the epilogue follow (each a bool,
    or an i1 of a loop over the K blocks: `_PackedGemm.each_k_block`)."""

    start: SSAValue | int
    steps: int
    first: bool | SSAValue
    last: bool | SSAValue


@dataclass(frozen=True)
class Choice:
    """One prefetch plan a run-time row count may take (`_PackedGemm`): its index among
    the kernel's plans (None: the one plan of a static count), the plan (lines per prefetching
    step, k steps per loop iteration, prefetching row blocks) and the tail row counts that take
    it (None: every one)."""

    index: int | None
    plan: tuple[int, int, int]
    rows: frozenset[int] | None = None


class Choices(NamedTuple):
    """The prefetch plans a block of run-time rows chooses among (`_PackedGemm.run_time_panel`):
    the plans, the i64 index of the one this call takes (one past the last: none), and whether
    the call surely takes one of them (the last one then needs no test)."""

    plans: list[Choice]
    chosen: SSAValue
    surely: bool


#: The op attribute that sets a packed GEMM's K block (the k steps per pass over the panels), for
#: tuning and lit tests; without it the target chooses (`Target.gemm_k_block`).
K_BLOCK_ATTR = "tg.k_block"


def k_block(ctx: KernelContext, op: Operation, m: int, k: int, nr: int, mr: int, panels: int = 2) -> int:
    """The k steps per K block of a packed GEMM of ``m`` rows over ``panels`` panels (per GEMM
    of a batch): ``tg.k_block`` when the op sets it, else the target's (`Target.gemm_k_block`)
    when a panel slice serves two row blocks or more, else all of K (a matrix-vector product
    streams each panel once: nothing to keep). One panel whose whole K fits in half of L2 also
    takes all of K: its rows of A serve no other panel, and K blocks would only cut their
    streams short and store and reload the output tiles (a Winograd convolution's 16 GEMMs of
    512 x 512 by 16 tiles: 5.4 -> 4.7 ms at 1 thread on Zen 1, `benchmarks/winograd.py`). A bf16
    output takes all of K too: the sums are kept in out between K blocks, and bf16 cannot hold
    them. Blocks are balanced: K = 768 with a block of at most 256 runs 3 of 256, K = 1000 4 of 250."""
    attr = op.attributes.get(K_BLOCK_ATTR)
    if op.output.type.element_type != f32:  # type: ignore[attr-defined]
        return k
    if isinstance(attr, IntegerAttr):
        most = attr.value.data
        if most < 1:
            raise LoweringError(f"{op.name}: {K_BLOCK_ATTR} must be positive, got {most}")
    elif m >= 2 * mr and not (panels == 1 and k * nr * 4 <= ctx.target.caches.l2 // 2):
        most = ctx.target.gemm_k_block(nr)
    else:
        return k
    count = -(-k // min(most, k))
    return -(-k // count)


#: The op attribute that sets a packed GEMM's register tile rows (MR), for tuning and lit tests;
#: without it the target chooses (`Target.gemm_tile`).
TILE_ROWS_ATTR = "tg.mr"


def _tile_rows(ctx: KernelContext, op: Operation, vectors: int) -> int:
    """MR of the register tile for panels of ``vectors`` vectors: ``tg.mr`` when the op sets it
    (at most what the vector registers hold: MR x vectors accumulators, a panel row and a
    broadcast), else the target's."""
    attr = op.attributes.get(TILE_ROWS_ATTR)
    if attr is None:
        return ctx.target.gemm_tile(vectors)[0]
    most = max_tile_rows(ctx.target.vector_registers, vectors)
    if not isinstance(attr, IntegerAttr) or not 1 <= attr.value.data <= most:
        raise LoweringError(f"{op.name}: {TILE_ROWS_ATTR} must be 1 to {most} rows for tiles of {vectors} vector(s) on "
                            f"{ctx.target.name}, got {attr}")
    return attr.value.data


#: The op attribute (0 or 1) that runs a GEMM's epilogue separately: the register tiles store
#: ``alpha * A @ B`` and one elementwise sweep over the output then adds the accumulator and the
#: residual and applies the activation (a tuner's alternative to the fused epilogue: the sweep
#: rereads the output from cache or memory, but the tile loop is the plain one).
SEPARATE_EPILOGUE_ATTR = "tg.separate_epilogue"


def separate_epilogue(op: Operation) -> bool:
    """Whether ``op`` asks for its epilogue as a second sweep (`SEPARATE_EPILOGUE_ATTR`)."""
    attr = op.attributes.get(SEPARATE_EPILOGUE_ATTR)
    if attr is None:
        return False
    if not isinstance(attr, IntegerAttr) or attr.value.data not in (0, 1):
        raise LoweringError(f"{op.name}: {SEPARATE_EPILOGUE_ATTR} must be 0 or 1, got {attr}")
    return attr.value.data == 1


def max_tile_rows(registers: int, vectors: int) -> int:
    """The most register-tile rows of ``vectors`` vectors that ``registers`` vector registers hold."""
    return max(1, (registers - vectors - 1) // vectors)


def _acc_strides(op: Operation, acc: SSAValue, out_shape: tuple, batched: bool = False) -> tuple[int, int, int]:
    """(row stride, column stride, stride between GEMMs) of ``acc`` broadcast to ``out`` with
    its rows folded into one dim (``batched``: a batch of GEMMs ``[G, M, N]``, the first dim
    G's, the rows M)."""
    st = broadcast_strides(_shape(acc), out_shape)
    if batched:
        if not isinstance(st[0], int) or st[-1] not in (0, 1):
            raise LoweringError(f"{op.name}: the accumulator {list(_shape(acc))} does not read as strides over the output {list(out_shape)}")
        return st[1], st[2], st[0]
    rows, (out_rs, acc_rs) = collapse_dims(out_shape[:-1], [contiguous_strides(out_shape)[:-1], st[:-1]])
    if len(rows) > 1 or st[-1] not in (0, 1):
        raise LoweringError(
            f"{op.name}: the accumulator {list(_shape(acc))} does not read as one row stride over the "
            f"output {list(out_shape)}; use buf.matmul"
        )
    return (acc_rs[0] if rows else 0), st[-1], 0


@dataclass
class _Thread:
    """What one thread's range of a packed GEMM works with (`_PackedGemm.work_range`): its
    builder, this call's whole row blocks and tail rows, its count of GEMMs, the operands'
    pointers in the worker and a stack tile for a partial panel's rows."""

    b: FunctionBuilder
    run_rows: SSAValue | int
    run_rest: SSAValue | int
    groups_now: SSAValue | int
    pa: SSAValue
    pb: SSAValue
    po: SSAValue
    padd: list[SSAValue]
    stack: SSAValue | None
    #: the panel ``pb`` holds first (a chunk of panels the GEMM packed itself: `panel_packing`)
    p0: SSAValue | None = None


class _PackedGemm:
    """One `buf.packed_matmul` as code (`_emit_packed_matmul`): the op read and its blocking
    chosen (`__init__`: a batch of GEMMs or one, run-time rows or GEMMs, MR, the K block, the
    prefetch geometry, A-stationary), then the team (`emit`), each thread's range by mode
    (`work_range`: A-stationary row blocks, a batch's items with partial panels, panels), a
    panel's row blocks (`panel`, `run_time_panel`) and one block's register tile and epilogue
    (`block`)."""

    def __init__(self, ctx: KernelContext, op: Operation):
        assert isinstance(op, buf.PackedMatmulOp)
        self.ctx, self.op = ctx, op
        self._read_operands()
        self.empty = self.m == 0 or self.n == 0 or self.groups == 0
        #: the packer of the panels it packs itself a chunk at a time (`_emit_packed_matmul`), or None
        self.packer = None
        if not self.empty:
            self._choose_blocking()

    def takes_chunks(self) -> bool:
        """Whether a thread's panels can be packed and run a chunk at a time: one GEMM (not a
        batch) over panels (not A-stationary row blocks)."""
        return not self.batched and not self.a_stationary

    def _read_operands(self) -> None:
        """The operands, the epilogue and the sizes: a batch of GEMMs: item q = g * panels + p is
        panel p of GEMM g, whose out (and A, unless one A serves them all: a convolution's weight
        over a batch of images) follow g's; the panels [G, P, K, NR] are one flat list of them; G
        may be a size symbol (run-time items). Run-time rows (a symbolic M:
        `dialects.symbolic`): tiles, K blocks, prefetching and the team are chosen for the
        largest M; the row loops count to this call's M, the tail rows (M mod MR) switch among
        the MR - 1 row tiles."""
        ctx, op = self.ctx, self.op
        self.a, self.packed = op.inputs[0], op.inputs[1]
        self.acc = op.inputs[2] if len(op.inputs) >= 3 else None
        self.addend = op.inputs[3] if len(op.inputs) == 4 else None  # a residual after a bias (`fuse-gemm-addend`)
        self.out = op.output
        # a bf16 output (`narrow-gemm-output`): every block's sums go to the stack tile, and its
        # epilogue writes them to out, over all of K at once (`k_block`)
        self.out_el = op.output.type.element_type
        self.narrow = self.out_el != f32
        self.alpha, self.beta = op.flags
        self.act = epilogue_function(op)
        self.so = _shape(self.out)
        a_shape = _shape(self.a)
        self.batched = len(_shape(self.packed)) == 4
        groups, self.panels, self.k, self.nr = _shape(self.packed) if self.batched else (1, *_shape(self.packed))
        # bf16 pairs along K: the GEMM of A's and the panels' words (K / 2 of them per row), each
        # step a dot product of pairs (`Tile.pairs`); the offsets in words, as in floats
        self.pairs = op.pairs
        if self.pairs:
            self.nr //= 2
        # int8 quads along K (`kernels_quantize_rows`): the panels' words of four bytes (K / 4 per
        # column), then two rows of the columns' scales and offsets; A's rows their words, then
        # each row's scale; the sums scaled back in the epilogue (`_dequant_accesses`)
        self.quads = op.quads
        if self.quads:
            self.nr //= 4
            self.k -= INT8K_SCALE_ROWS
        self.lda = self.k + 1 if self.quads else self.k  # words from one row of A to the next
        self.panel_words = (self.k + INT8K_SCALE_ROWS * self.quads) * self.nr  # from one panel to the next
        self.tile_alpha = 1.0 if self.quads else self.alpha  # int8: alpha with the scales, in the epilogue
        self.a_group = 0 if self.batched and len(a_shape) == 2 else None  # A's stride from GEMM to GEMM
        # GEMM g reads A[g % a_period] (a Winograd convolution over a batch of images: a*a A's)
        self.a_period = a_shape[0] if self.batched and len(a_shape) == 3 and a_shape[0] != groups else None
        self.n = self.so[-1]
        m = self.so[-2] if self.batched else numel(self.so[:-1])
        if self.a_group is None and self.batched:
            self.a_group = m * self.k
        self.g_size = None if isinstance(groups, int) else groups
        self.groups = ctx.largest(groups) if self.g_size is not None else groups
        self.m_size = None if isinstance(m, int) else m
        if self.m_size is not None:
            if self.batched:
                raise LoweringError(f"{op.name}: a batch of packed GEMMs takes a symbolic count of GEMMs, not of rows")
            static_row(op, self.n)
            m = ctx.largest(self.m_size)
        self.m = m

    def _choose_blocking(self) -> None:
        """The epilogue's addends, MR, the K block, the prefetch geometry and A-stationary."""
        ctx, op = self.ctx, self.op
        out, acc, addend, so, nr, k = self.out, self.acc, self.addend, self.so, self.nr, self.k
        self.lanes = lanes = ctx.target.float_lanes
        if self.batched and self.a_group and (acc is not None or addend is not None):
            raise LoweringError(f"{op.name}: a batch of packed GEMMs with an A each takes no accumulator")
        if nr % lanes:
            raise LoweringError(f"{op.name}: panels of {nr} columns are not whole vectors of {lanes} floats ({ctx.target.name})")
        check_no_overlap(ctx, op, out, [self.a, self.packed], in_place_ok=False)
        if acc is not None and self.beta != 0.0:
            check_no_overlap(ctx, op, out, [acc], in_place_ok=False)
        else:
            acc = None
        # the epilogue's addends: (buffer, row stride, column stride, stride between GEMMs, scale) each
        addends = [(acc, *_acc_strides(op, acc, so, self.batched), self.beta)] if acc is not None else []
        if addend is not None:
            check_no_overlap(ctx, op, out, [addend], in_place_ok=False)
            addends.append((addend, *_acc_strides(op, addend, so, self.batched), 1.0))
        # a separate epilogue: the tiles store alpha * A @ B, one sweep afterwards does the rest
        self.swept = (addends, self.act) if separate_epilogue(op) and (addends or self.act != "none") and not self.quads \
            and not self.narrow else None
        self.addends = [] if self.swept is not None else addends
        if self.swept is not None:
            self.act = "none"
        self.vectors = nr // lanes
        widest = ctx.target.gemm_tile()[1]
        if self.vectors > widest:
            raise LoweringError(
                f"{op.name}: panels of {nr} columns were packed for a wider target than {ctx.target.name} "
                f"(whose register tile is {widest * lanes} columns); lower the tg module again for this target"
            )
        self.mr = mr = _tile_rows(ctx, op, self.vectors)
        # weights packed at load time are 64-byte aligned; panels packed by the graph live in the
        # arena, whose base is aligned only when a CompiledGraph allocates it
        self.b_aligned = isinstance(buf.root_buffer(self.packed).owner, buf.PackedWeightOp)
        self.kc = kc = k_block(ctx, op, self.m, k, nr, mr, self.panels)
        self.k_blocks = -(-k // kc)
        # the prefetch of the next panel walks its cache lines, `lines_per_row` per k step
        self.line_floats = ctx.target.caches.line // 4
        self.lines_per_row = -(-nr // self.line_floats)
        self.full_panels, self.last_cols = divmod(self.n, nr)
        self.full_rows, self.rest = divmod(self.m, mr)
        self.blocks = self.full_rows + bool(self.rest)
        half_l2 = ctx.target.caches.l2 // 2
        # A's rows outnumber the panels' columns (a convolution's weight, few output pixels): split
        # among threads by panels, each would stream all of A
        a_outweighs = self.m > self.panels * nr
        self.a_stationary = (not self.a_group and self.m_size is None
                             and ((self.panels >= 2 or self.batched) and self.m * kc * 4 > half_l2 or a_outweighs)
                             and self.panels * kc * nr * 4 <= half_l2)
        if self.a_stationary and not self.full_panels:
            # its one, partial panel over all of K at once, as a split by panels runs it: a
            # partial panel's sums are not kept between K blocks (its stack tile), and adding
            # them into out block by block took 1.76 times as long (ResNet-50's 512 x 4608 by 49,
            # 1 thread, `benchmarks/kernel_profile.py resnet50`)
            self.kc = kc = k
            self.k_blocks = 1
        # A-stationary over a batch of GEMMs that share A: the GEMMs in chunks whose panels' K block
        # slices fit in half of L2 together, A streamed once per chunk
        self.chunk = max(1, half_l2 // (self.panels * kc * nr * 4))
        #: the row counts the region being emitted runs at (run-time rows: `emit`)
        self.row_span = (1, self.m)

    # prefetch plans -----------------------------------------------------------------

    def prefetch_plan(self, steps: int, rows: int | None = None, capped: bool = True) -> tuple[int, int, int]:
        """(lines per prefetching step, k steps per loop iteration, prefetching row blocks) for a
        pass of ``steps`` k steps over ``rows`` rows (default M): the next panel's ``steps x V``
        cache lines (its same K block) are shared out among the first row blocks of this one,
        `per_step` lines every `spread` k steps each, spread over as many blocks as there are, so
        that the requests trickle instead of bursting (``capped``: at most the blocks there are)."""
        rows = self.m if rows is None else rows
        if rows < PREFETCH_MIN_ROWS:
            return 0, 1, 0
        count = -(-rows // self.mr)
        per_step = -(-self.lines_per_row // count)
        spread = max(1, min(MAX_SPREAD, count // self.lines_per_row, steps))
        ahead = -(-self.lines_per_row * steps // (per_step * (steps // spread)))
        return per_step, spread, min(count, ahead) if capped else ahead

    def run_time_plans(self, steps: int) -> list[tuple[int, tuple[int, int, int]]]:
        """Run-time rows: (the fewest rows, the prefetch plan) of each distinct plan, largest
        first: a call takes the first its rows reach, the static plan of its row count (a plan
        depends on the count of row blocks only, and many counts share one: each plan its own
        tile functions, not each row count; 3 row blocks at spread 3 run a 768 x 3072 GEMM 10%
        faster than at spread 2, Zen 3). The few blocks below `lines_per_row` take more lines a
        step each (7 to 18 rows at MR 6: the static kernel's 2 lines a step in 2 blocks; without
        a plan of their own they prefetched nothing, 1.2 to 1.3 times the static time over
        weights streamed from L3, Emerald Rapids). Only the plans some row count of `row_span`
        takes: each is code to compile."""
        mr = self.mr
        plans: dict[tuple[int, int, int], int] = {}
        for count in range(-(-PREFETCH_MIN_ROWS // mr), -(-self.m // mr) + 1):
            least = max(PREFETCH_MIN_ROWS, (count - 1) * mr + 1)
            plans.setdefault(self.prefetch_plan(steps, least, capped=False), least)
        ordered = sorted(((least, plan) for plan, least in plans.items()), reverse=True)
        lo, hi = self.row_span
        # plan i serves the rows [least_i, least_{i-1}): those that meet [lo, hi]
        return [(least, plan) for i, (least, plan) in enumerate(ordered)
                if least <= hi and (i == 0 or ordered[i - 1][0] > lo)]

    def tail_shares(self, plans: list[tuple[int, tuple[int, int, int]]]) -> dict[int, set[int]]:
        """Run-time rows: plan i (of `run_time_plans`) -> the tail rows (1 to MR - 1) of the row
        counts of `row_span` that take plan i and whose tail takes a share of its prefetch: the
        row blocks before the tail are fewer than the plan's prefetching blocks (the static
        kernel's rule). Plans of one k step per prefetch only (up to 7 row blocks at 4 lines a
        panel row): the share of a wider spread's tail (at its fewest rows only) is left to the
        hardware prefetcher, since each (plan, tail rows) is a tile function to compile, and those
        of spreads 2 to 8 would have more than doubled BERT-base's LLVM IR."""
        mr = self.mr
        shares: dict[int, set[int]] = {}
        for rows in range(self.row_span[0], self.row_span[1] + 1):
            i = next((i for i, (least, _) in enumerate(plans) if least <= rows), None)
            if i is not None and plans[i][1][1] == 1 and rows % mr and rows // mr < plans[i][1][2]:
                shares.setdefault(i, set()).add(rows % mr)
        return shares

    # the team and each thread's range ---------------------------------------------------

    def work_of(self, m: int, groups: int | None = None) -> tuple[float, float]:
        """(FLOPs, bytes) of ``groups`` GEMMs (default: the largest count) of ``m`` rows."""
        groups = self.groups if groups is None else groups
        n, k, nr = self.n, self.k, self.nr
        return 2.0 * groups * m * n * k, 4.0 * groups * (self.panels * k * nr + m * k + m * n)

    def emit(self) -> None:
        """The team: at most as many threads as the FLOPs (and the panels' bytes, for a
        matrix-vector product) pay for (`Target.thread_work`); each takes a share of the panels
        or, when A's K block slice overflows half of L2 or A's rows outnumber the panels' columns,
        while all the panels' slices fit there (a convolution's weight as A, few output pixels as
        panels: A-stationary), a share of the row blocks, so that each thread streams its own rows
        of A once per K block. Run-time rows:
        below two row blocks one pass over K (a matrix-vector product, as the static kernel for
        its rows takes: `k_block`), from two row blocks the K blocks of the largest M."""
        ctx, m, mr = self.ctx, self.m, self.mr
        if self.g_size is not None:  # a run-time count of GEMMs: their panels (or A's row blocks) are the items
            count = ctx.size(self.g_size)
            pays = paying_rows(ctx, count, self.groups, lambda g: self.work_of(m, g))
            items = self.blocks if self.a_stationary else ctx.b.mul_i64(count, ctx.b.i64(self.panels))
            ctx.parallel(items, self.work_range, [count], work=self.work_of(m), pays=pays)
        elif self.m_size is None:
            ctx.parallel(self.blocks if self.a_stationary else self.groups * self.panels, self.work_range, work=self.work_of(m))
        else:
            b = ctx.b
            rows_now = ctx.size(self.m_size)
            run_rows = b.add(llvm.UDivOp(rows_now, b.i64(mr)))
            run_rest = b.add(llvm.SubOp(rows_now, b.mul_i64(run_rows, b.i64(mr))))
            pays = paying_rows(ctx, rows_now, m, self.work_of)

            def with_k_block(value: int, rows: tuple[int, int]) -> None:
                self.kc, self.k_blocks, self.row_span = value, -(-self.k // value), rows
                ctx.parallel(self.groups * self.panels, self.work_range, [run_rows, run_rest], work=self.work_of(m), pays=pays)

            single, blocked = k_block(ctx, self.op, 1, self.k, self.nr, mr, self.panels), self.kc
            if single == blocked or m < 2 * mr:
                with_k_block(blocked, (1, m))
            else:
                emit_if(b, icmp(b, "slt", rows_now, b.i64(2 * mr)), lambda: with_k_block(single, (1, 2 * mr - 1)),
                        lambda: with_k_block(blocked, (2 * mr, m)))
        if self.swept is not None:
            _sweep_epilogue(ctx, self.op, *self.swept)

    def work_range(self, start: SSAValue, end: SSAValue, _thread: SSAValue, values: list[SSAValue]) -> None:
        """This thread's panels ``[start, end)``, or with ``a_stationary`` its row blocks
        (``values``: this call's whole row blocks and tail rows, when M is symbolic; its count
        of GEMMs when that is)."""
        ctx = self.ctx
        b = ctx.b
        run_rows, run_rest = values if self.m_size is not None else (self.full_rows, self.rest)
        groups_now = values[0] if self.g_size is not None else self.groups
        pa, pb, po = ctx.ptr(self.a), ctx.ptr(self.packed), ctx.ptr(self.out)
        padd = [ctx.ptr(v) for v, *_ in self.addends]
        # a tile for the last panel's rows (its padding columns never reach out); for every block's
        # rows where out is bf16
        stack = b.stack(self.mr * self.nr, f32) if self.last_cols or self.narrow else None
        self.t = _Thread(b, run_rows, run_rest, groups_now, pa, pb, po, padd, stack)
        if self.a_stationary:
            self._a_stationary_range(start, end)
        elif self.batched and self.last_cols:
            self._items_range(start, end)
        elif self.packer is not None:
            def chunk(p0: SSAValue, p1: SSAValue, panels: SSAValue) -> None:
                self.t.pb, self.t.p0 = panels, p0
                self._panels_range(p0, p1)

            self.packer.chunks(b, start, end, chunk)
        else:
            self._panels_range(start, end)

    def _a_stationary_range(self, start: SSAValue, end: SSAValue) -> None:
        """A-stationary: each of this thread's row blocks of A (MR x kc) stays in L1 while it
        passes every panel (of the GEMMs of a chunk of a batch), the last one included (their K
        block slices in L2); K blocks, each over all of this thread's row blocks: A streams once
        per K block (per chunk of the GEMMs of a batch)."""
        b, mr, full_panels, last_cols = self.t.b, self.mr, self.full_panels, self.last_cols

        def rows_over(ks: KRange, gemms: tuple[SSAValue, SSAValue] | None = None) -> None:
            def gemm(r0: SSAValue | int, rows: int, first: SSAValue | int) -> None:
                emit_for(b, 0, full_panels, lambda p, _: self.block(_sum(b, first, p), r0, rows, False, None, ks) or [])
                if last_cols:
                    self.block(b.add_i64(_val(b, first), b.i64(full_panels)), r0, rows, True, None, ks)

            def row_block(r0: SSAValue | int, rows: int) -> None:
                if gemms is None:
                    gemm(r0, rows, 0)
                else:
                    emit_for(b, *gemms, lambda g, _: gemm(r0, rows, b.mul_i64(g, b.i64(self.panels))) or [])

            emit_for(b, start, min_i64(b, end, b.i64(self.full_rows)), lambda r, _: row_block(b.mul_i64(r, b.i64(mr)), mr) or [])
            if self.rest:  # the thread whose range ends at the last row block runs the tail rows
                emit_if(b, icmp(b, "eq", end, b.i64(self.blocks)), lambda: row_block(self.full_rows * mr, self.rest))

        if not self.batched:
            self.each_k_block(rows_over)
            return
        chunk, groups_now = self.chunk, self.t.groups_now

        def one_chunk(c: SSAValue) -> None:
            g0 = b.mul_i64(c, b.i64(chunk))
            gemms = (g0, min_i64(b, b.add_i64(g0, b.i64(chunk)), _val(b, groups_now)))
            self.each_k_block(lambda ks: rows_over(ks, gemms))

        chunks = b.add(llvm.UDivOp(b.add_i64(_val(b, groups_now), b.i64(chunk - 1)), b.i64(chunk)))
        emit_for(b, 0, chunks, lambda c, _: one_chunk(c) or [])

    def _items_range(self, start: SSAValue, end: SSAValue) -> None:
        """A batch of GEMMs whose last panels are partial: the whole panels by K blocks, as a
        single GEMM's, then each GEMM's last, partial panel in one pass over K, as a single
        GEMM's last panel (its sums in the stack tile: K blocks would add them into out block by
        block, 1.7 times the time of ResNet-50's 512 x 4608 by 49 convolution, Emerald Rapids)."""
        b, panels = self.t.b, self.panels

        def is_last(q: SSAValue) -> SSAValue:
            """Whether item q is its GEMM's last, partial panel."""
            return icmp(b, "eq", b.add(llvm.URemOp(q, b.i64(panels))), b.i64(panels - 1))

        def whole_items(ks: KRange) -> None:
            emit_for(b, start, end, lambda q, _: emit_if(b, is_last(q), lambda: None, lambda: self.panel(q, False, ks)) or [])

        if self.full_panels:
            self.each_k_block(whole_items, looped=True)
        emit_for(b, start, end, lambda q, _: emit_if(b, is_last(q), lambda: self.panel(q, True, KRange(0, self.k, True, True))) or [])

    def _panels_range(self, start: SSAValue, end: SSAValue) -> None:
        """This thread's panels: K blocks, each over all of them (a block's panel slice, kc x NR,
        stays in L1 for every row block, A's M x kc columns in L2 for every panel); the thread
        whose range ends at the last panel runs it when partial (one K block: rows of its stack
        tile are not kept between blocks)."""
        b, full_panels = self.t.b, self.full_panels
        if full_panels:
            last = end if not self.last_cols else min_i64(b, end, b.i64(full_panels))

            def panels_over(ks: KRange) -> None:
                emit_for(b, start, last, lambda p, _: self.panel(p, False, ks) or [])

            self.each_k_block(panels_over, looped=True)
        if self.last_cols:
            emit_if(b, icmp(b, "eq", end, b.i64(self.panels)), lambda: self.panel(b.i64(full_panels), True, KRange(0, self.k, True, True)))

    def each_k_block(self, over: Callable[[KRange], None], looped: bool = False) -> None:
        """``over`` each K block in turn: the first from zeros, the last with alpha and the
        epilogue (one block when K is not split). ``looped``: the blocks of ``kc`` steps as one
        loop whose first and last are run-time flags (the last one after it when shorter), one
        copy of ``over``'s code where three were (a third of BERT-base's GEMM code; the tile
        takes alpha and accumulate as arguments anyway)."""
        b, k, kc, k_blocks = self.t.b, self.k, self.kc, self.k_blocks
        if looped and k_blocks > 1:
            equal = k % kc == 0

            def one(kb: SSAValue) -> None:
                last = icmp(b, "eq", kb, b.i64(k_blocks - 1)) if equal else False
                over(KRange(b.mul_i64(kb, b.i64(kc)), kc, icmp(b, "eq", kb, b.i64(0)), last))

            emit_for(b, 0, k_blocks if equal else k_blocks - 1, lambda kb, _: one(kb) or [])
            if not equal:
                over(KRange((k_blocks - 1) * kc, k - (k_blocks - 1) * kc, False, True))
            return
        over(KRange(0, kc if k_blocks > 1 else k, True, k_blocks == 1))
        if k_blocks > 2:
            emit_for(b, 1, k_blocks - 1, lambda kb, _: over(KRange(b.mul_i64(kb, b.i64(kc)), kc, False, False)) or [])
        if k_blocks > 1:
            over(KRange((k_blocks - 1) * kc, k - (k_blocks - 1) * kc, False, True))

    # a panel's row blocks -------------------------------------------------------------

    def panel(self, p: SSAValue, partial: bool, ks: KRange) -> None:
        """Panel p's row blocks over the k steps ``ks``: the first ones prefetch the next panel
        (the last panel has no next one to prefetch)."""
        if self.m_size is not None:
            self.run_time_panel(p, partial, ks)
            return
        b, mr, full_rows = self.t.b, self.mr, self.full_rows
        ahead = min(self.prefetch_plan(ks.steps)[2], full_rows) if not partial else 0
        emit_for(b, 0, ahead, lambda r, _: self.block(p, b.mul_i64(r, b.i64(mr)), mr, partial, r, ks) or [])
        emit_for(b, ahead, full_rows, lambda r, _: self.block(p, b.mul_i64(r, b.i64(mr)), mr, partial, None, ks) or [])
        if self.rest:
            tail_prefetches = not partial and full_rows < self.prefetch_plan(ks.steps)[2]
            self.block(p, full_rows * mr, self.rest, partial, full_rows if tail_prefetches else None, ks)

    def run_time_panel(self, p: SSAValue, partial: bool, ks: KRange) -> None:
        """`panel` over this call's rows: the first row blocks prefetch under the plan its row
        count takes (`run_time_plans`: a switch around the tile call only), the tail rows (fewer
        than MR) after them when it has any, taking the plan's share after the row blocks' when
        the plan has one left for them, as in the static kernel of this call's rows (only the
        plans and tail rows some call of the region takes: each is a tile function to compile)."""
        b, mr, run_rows, run_rest = self.t.b, self.mr, self.t.run_rows, self.t.run_rest
        rows_now = b.add_i64(b.mul_i64(run_rows, b.i64(mr)), run_rest)
        plans = [] if partial else self.run_time_plans(ks.steps)  # (the last panel has no next one to prefetch)
        choices, ahead, prefetching = None, 0, None
        if plans:
            chosen, prefetching = b.i64(len(plans)), b.i64(0)  # none: fewer rows than any plan's
            for i in reversed(range(len(plans))):  # the first plan (most rows) whose rows this call reaches
                least, plan = plans[i]
                reach = icmp(b, "sge", rows_now, b.i64(least))
                chosen = b.add(llvm.SelectOp(reach, b.i64(i), chosen))
                prefetching = b.add(llvm.SelectOp(reach, b.i64(plan[2]), prefetching))
            choices = Choices([Choice(i, plan) for i, (_, plan) in enumerate(plans)], chosen, False)
            ahead = min_i64(b, prefetching, run_rows)

        def tail() -> None:
            shares = self.tail_shares(plans)
            if not shares:
                self.block(p, r0, run_rest, partial, None, ks, choices)
                return
            # (the plans of spread 1 are the last ones, those of the fewest rows)
            first = min(shares)
            assert all(plan[1] == 1 for _, plan in plans[first:]), plans
            taken = Choices([Choice(i, plans[i][1], frozenset(r)) for i, r in sorted(shares.items())], choices.chosen, True)
            sharing = b.add(llvm.AndOp(icmp(b, "slt", run_rows, prefetching), icmp(b, "sge", choices.chosen, b.i64(first))))
            emit_if(b, sharing, lambda: self.block(p, r0, run_rest, partial, run_rows, ks, taken),
                    lambda: self.block(p, r0, run_rest, partial, None, ks, choices))

        emit_for(b, 0, ahead, lambda r, _: self.block(p, b.mul_i64(r, b.i64(mr)), mr, partial, r, ks, choices) or [])
        emit_for(b, ahead, run_rows, lambda r, _: self.block(p, b.mul_i64(r, b.i64(mr)), mr, partial, None, ks, choices) or [])
        r0 = b.mul_i64(run_rows, b.i64(mr))
        emit_if(b, icmp(b, "sgt", run_rest, b.i64(0)), tail)

    # one row block of one panel -----------------------------------------------------------

    def block(self, p: SSAValue, r0: SSAValue | int, rows: int | SSAValue, partial: bool, rb: SSAValue | int | None,
              ks: KRange, choices: Choices | None = None) -> None:
        """Rows ``[r0, r0 + rows)`` of panel ``p`` over the k steps ``ks``: the register tile
        (from zeros for the first K block, else from the sums stored so far), then, after the
        last K block, its epilogue. Block ``rb`` (one of the first `prefetching`) also
        prefetches its share of panel p + 1's same K block; with ``choices`` (run-time rows: the
        prefetch plans, which one this call takes, and whether it surely takes one of them)
        under the plan chosen."""
        plans = list(choices.plans) if choices is not None and rb is not None else [
            Choice(None, self.prefetch_plan(ks.steps) if choices is None else choices.plans[0].plan)]
        at = self._block_at(p, r0, partial, ks)

        def tile_call(prefetch: bool = False, **kwargs) -> None:
            self._tile_call(at, rows, rb, ks, plans, choices, prefetch, **kwargs)

        if partial and not (ks.first is True and ks.last is True):
            assert isinstance(ks.first, bool) and isinstance(ks.last, bool), "a partial panel's K blocks are emitted one by one"
            self._partial_block(at, r0, rows, ks, tile_call)
            return
        b, alpha = self.t.b, self.tile_alpha
        if isinstance(ks.last, bool):
            scale = alpha if ks.last else 1.0
        else:
            scale = alpha if alpha == 1.0 else b.add(llvm.SelectOp(ks.last, b.f32(alpha), b.f32(1.0)))
        adding = (not ks.first) if isinstance(ks.first, bool) else b.add(llvm.SubOp(b.i64(1), b.add(llvm.ZExtOp(ks.first, i64))))
        tile_call(prefetch=True, alpha=scale, accumulate=adding)
        if self.quads and ks.last is not False:  # the int8 sums scaled in place, vectors of the tile just stored
            assert at.scales is not None
            row_scales, columns = at.scales

            # a whole tile takes its addends with its scales (a partial one's columns past N have none)
            added = [] if partial or not self._adds_in_vectors else addend_vectors(self._addend_accesses(r0, at.col0, at.g), self.addends)

            def scale_tile() -> None:
                dequant_tile(b, at.dest, at.ld, rows, at.width, self.lanes, (row_scales, self.lda), columns, self.nr, self.alpha,
                             addends=added)

            scale_tile() if ks.last is True else emit_if(b, ks.last, scale_tile)
        added_here = self.quads and not partial and self._adds_in_vectors
        if ks.last is False or not (partial or self.narrow or (self.addends and not added_here) or self.act != "none"):
            return
        self._epilogue(at, r0, rows, self.last_cols if partial else self.nr, ks, with_addends=not added_here)

    @property
    def _adds_in_vectors(self) -> bool:
        """Whether the int8 sums' scaling adds the addends too (`dequant_tile`: float32 vectors):
        not where the epilogue body takes one, nor a bf16 one (the epilogue widens it)."""
        return not self.op.body_takes_addend and float_addends(self.addends)

    def _block_at(self, p: SSAValue, r0: SSAValue | int, partial: bool, ks: KRange) -> _BlockAt:
        """Where block (p, r0) reads and writes: A's rows from k step ``ks.start``, the panel's
        same K block, the output tile (and where its tile goes: the stack tile for a partial
        panel) and, in a batch, its GEMM."""
        t, b, k, nr, n = self.t, self.t.b, self.k, self.nr, self.n
        k0 = ks.start
        a_base, out_base, col, g = t.pa, t.po, p, None
        if self.batched:  # panel p % panels of GEMM p / panels
            g = b.add(llvm.UDivOp(p, b.i64(self.panels)))
            col = b.add(llvm.SubOp(p, b.mul_i64(g, b.i64(self.panels))))
            out_base = b.gep(t.po, b.mul_i64(g, b.i64(self.m * n)), self.out_el)
            if self.a_group:
                ga = g if self.a_period is None else b.add(llvm.URemOp(g, b.i64(self.a_period)))
                a_base = b.gep(t.pa, b.mul_i64(ga, b.i64(self.a_group)), f32)
        a_start = b.gep(a_base, b.mul_i64(_val(b, r0), b.i64(self.lda)), f32) if r0 != 0 else a_base
        a_row = b.gep(a_start, k0, f32) if k0 != 0 else a_start
        in_pb = p if t.p0 is None else b.add(llvm.SubOp(p, t.p0))  # (a chunk of panels packed here: from its first)
        panel_start = b.gep(t.pb, b.mul_i64(in_pb, b.i64(self.panel_words)), f32)
        panel = b.gep(panel_start, b.mul_i64(_val(b, k0), b.i64(nr)), f32) if k0 != 0 else panel_start
        col0 = b.mul_i64(col, b.i64(nr))
        out_tile = b.gep(out_base, b.add_i64(b.mul_i64(_val(b, r0), b.i64(n)), col0) if r0 != 0 else col0, self.out_el)
        dest, ld = (t.stack, nr) if partial or self.narrow else (out_tile, n)
        assert dest is not None
        # the last panel's tile is as many vectors wide as its columns need (its padding columns
        # beyond them are never computed)
        width = -(-self.last_cols // self.lanes) if partial else self.vectors
        scales = (b.gep(a_start, k, f32), b.gep(panel_start, k * nr, f32)) if self.quads else None
        return _BlockAt(a_row, panel, col0, out_tile, dest, ld, width, g, scales)

    def _tile_call(self, at: _BlockAt, rows: int | SSAValue, rb: SSAValue | int | None, ks: KRange, plans: list[Choice],
                   choices: Choices | None, prefetch: bool = False, **kwargs) -> None:
        """The register tile of the block's rows; a run-time count (this call's tail rows)
        switches among the MR - 1 row tiles, a run-time plan among the plans' tiles (the
        epilogue after it takes the count as is, whatever the plan)."""
        b, nr, line_floats = self.t.b, self.nr, self.line_floats

        def ahead_of(plan: tuple[int, int, int]) -> SSAValue | None:
            """Lines [rb, rb + 1) * per_step * (steps // spread) of the next panel."""
            if rb is None:
                return None
            lines = plan[0] * (ks.steps // plan[1]) * line_floats
            return b.gep(at.panel, b.add_i64(b.mul_i64(_val(b, rb), b.i64(lines)), b.i64(self.panel_words)), f32)

        def one(r: int, plan: tuple[int, int, int], prefetching: bool = True) -> None:
            ahead = ahead_of(plan) if prefetch and prefetching else None
            tile = Tile(r, at.width, self.lanes, plan[1], plan[0] if ahead is not None else 0, line_floats, self.b_aligned,
                        self.pairs, self.quads)
            call_tile(self.ctx, tile, at.a_row, self.lda, at.panel, nr, ks.steps, at.dest, at.ld, **kwargs,
                      **({"ahead": ahead} if prefetch else {}))

        def with_rows(choice: Choice, prefetching: bool = True) -> None:
            if isinstance(rows, int):
                one(rows, choice.plan, prefetching)
                return
            for r in range(1, self.mr):
                if choice.rows is None or r in choice.rows:
                    emit_if(b, icmp(b, "eq", rows, b.i64(r)), lambda r=r: one(r, choice.plan, prefetching))

        if plans[0].index is None:
            with_rows(plans[0])
            return
        assert choices is not None

        def from_plan(i: int) -> None:  # plan i, else the next; past the last: no prefetch
            if i == len(plans):
                with_rows(Choice(None, plans[0].plan), prefetching=False)
                return
            if i == len(plans) - 1 and choices.surely:  # the call takes one of these plans
                with_rows(plans[i])
                return
            emit_if(b, icmp(b, "eq", choices.chosen, b.i64(plans[i].index)), lambda: with_rows(plans[i]), lambda: from_plan(i + 1))

        from_plan(0)

    def _addend_accesses(self, r0: SSAValue | int, col0: SSAValue, g: SSAValue | None) -> list[Access]:
        """The epilogue's addends (the accumulator, a residual) at the output tile at row r0,
        column col0 (of GEMM g in a batch)."""
        b = self.t.b
        accesses = []
        for ptr, (buffer, rs, cs, gs, _scale) in zip(self.t.padd, self.addends):
            off = _sum(b, b.mul_i64(_val(b, r0), b.i64(rs)) if rs and r0 != 0 else None,
                       b.mul_i64(col0, b.i64(cs)) if cs else None,
                       b.mul_i64(g, b.i64(gs)) if gs and g is not None else None)
            el = buffer.type.element_type  # (bf16: a residual the epilogue body takes as it is)
            accesses.append(Access(b.gep(ptr, off if off is not None else b.i64(0), el), (rs, cs), el))
        return accesses

    def _dequant_accesses(self, at: _BlockAt) -> list[Access]:
        """int8 quads: the block's row scales (the word after each row's codes in A), its
        columns' scales and offsets (the rows after the panel's codes); else none. (For the
        K-blocked partial panel, whose sums are scaled once added up: `_partial_block`; every
        other block scales its tile in place, `dequant_tile`.)"""
        if at.scales is None:
            return []
        rows, columns = at.scales
        offsets = self.t.b.gep(columns, self.nr, f32)
        return [Access(rows, (self.lda, 0), f32), Access(columns, (0, 1), f32), Access(offsets, (0, 1), f32)]

    def _finish(self, b: FunctionBuilder, y: SSAValue, values: list[SSAValue], sums: bool = False) -> SSAValue:
        """The epilogue of one output element ``y`` (``values``: with ``sums``, int8 sums to
        scale, its dequantisation's first (`_dequant_accesses`), then its addends', when any):
        int8 sums ``y`` are ``alpha * s_row * s_col * (y - offset_col)`` first."""
        if sums:
            s_row, s_col, offset = values[:3]
            scale = b.add(llvm.FMulOp(s_col, s_row if self.alpha == 1.0 else b.add(llvm.FMulOp(s_row, b.f32(self.alpha)))))
            y, values = b.add(llvm.FMulOp(b.add(llvm.FSubOp(y, offset)), scale)), values[3:]
        return _epilogue_value(b, y, values, self.addends, self.act)

    def _partial_block(self, at: _BlockAt, r0: SSAValue | int, rows: int | SSAValue, ks: KRange,
                       tile_call: Callable[..., None]) -> None:
        """The last panel within a K-blocked pass (A-stationary): this block's sums go to the
        stack tile, then are added to out's columns (stored there after the first)."""
        n = self.n
        assert not self.narrow, "a bf16 output is written over all of K at once"
        tile_call(alpha=self.tile_alpha)
        ins = [Access(at.dest, (at.ld, 1), f32)]
        if not ks.first:
            ins.append(Access(at.out_tile, (n, 1), f32))
        sums = len(ins)
        if ks.last:
            ins += self._dequant_accesses(at) + self._addend_accesses(r0, at.col0, at.g)

        def add_block(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
            y = vals[0] if ks.first else b.add(llvm.FAddOp(vals[0], vals[1]))
            return self._finish(b, y, vals[sums:], self.quads) if ks.last else y

        with _scalar_errors(self.op):
            emit_pointwise(self.t.b, (rows, self.last_cols), Access(at.out_tile, (n, 1), f32), ins, add_block)

    def _epilogue(self, at: _BlockAt, r0: SSAValue | int, rows: int | SSAValue, cols: int, ks: KRange,
                  with_addends: bool = True) -> None:
        """After the last K block (a run-time flag in a loop over them): the block's addends
        (unless added already: ``with_addends``) and activation, out of the stack tile for a
        partial panel."""
        b = self.t.b
        ins = [Access(at.dest, (at.ld, 1), f32), *(self._addend_accesses(r0, at.col0, at.g) if with_addends else [])]

        def epilogue(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
            if not with_addends:
                return stored_value(b, _epilogue_value(b, vals[0], [], [], self.act), self.out_el)
            return stored_value(b, self._finish(b, vals[0], vals[1:]), self.out_el)

        def sweep() -> None:
            with _scalar_errors(self.op):
                emit_pointwise(b, (rows, cols), Access(at.out_tile, (self.n, 1), self.out_el), ins, epilogue)

        if ks.last is True:
            sweep()
        else:
            emit_if(b, ks.last, sweep)


@dataclass(frozen=True)
class _BlockAt:
    """Where one row block of one panel reads and writes (`_PackedGemm._block_at`)."""

    a_row: SSAValue
    panel: SSAValue
    col0: SSAValue
    out_tile: SSAValue
    dest: SSAValue
    ld: int
    width: int
    g: SSAValue | None
    #: int8 quads: (the block's first row scale in A, its panel's column scales), else None
    scales: tuple[SSAValue, SSAValue] | None = None


def float_addends(addends: list) -> bool:
    """Whether every addend of an epilogue (buffer, strides..., scale) is float32: the vector adds
    at a tile's store (`dequant_tile`) and AMX's preload read float32 only; a bf16 one (a residual
    `narrow-gemm-output` rounded) is widened by the block's epilogue (`_epilogue_value`)."""
    return all(buffer.type.element_type == f32 for buffer, *_ in addends)


def addend_vectors(accesses: list[Access], addends: list) -> list[tuple[SSAValue, int, int, float]]:
    """The epilogue's addends (``addends``: buffer, strides..., scale) at a tile (``accesses``,
    `_PackedGemm._addend_accesses`) as `dequant_tile` adds them: (pointer, row stride, column
    stride, scale) each."""
    return [(a.ptr, *a.strides, scale) for a, (*_, scale) in zip(accesses, addends)]


def dequant_tile(b: FunctionBuilder, tile: SSAValue, ld: int | SSAValue, rows: int | SSAValue, vectors: int, lanes: int,
                 row_scales: tuple[SSAValue, int] | None, columns: SSAValue | None, nr: int, alpha: float,
                 from_int: bool = False, addends: list[tuple[SSAValue, int, int, float]] = ()) -> None:
    """The int8 GEMM's sums of a tile scaled in place, in vectors: ``tile[r, j] = (y - offset[j]) *
    scale[j] * s[r] * alpha`` for ``rows`` rows (``ld`` floats apart) of ``vectors`` vectors of
    ``lanes``; ``y`` the float32 sums (``from_int``: int32 sums, as AMX stores them); ``s[r]`` at
    ``row_scales`` (pointer, stride in words), ``scale`` at ``columns``, ``offset`` ``nr`` after
    (without them, float sums: ``alpha * y``). Then ``+ scale * addend`` for each of ``addends``
    ((pointer at the tile's first element, row stride, column stride 0 or 1, scale): a bias, a
    residual), in the order of the scalar epilogue (`_epilogue_value`): the vectors the loop
    vectoriser could not make of it (the tile and the addends may alias, for all it knows)."""
    vec = vector_type(lanes)
    words = VectorType(i32, [lanes])
    quantised = row_scales is not None and columns is not None
    if quantised:
        col = [b.add(llvm.LoadOp(b.gep(columns, v * lanes, f32), vec, alignment=4)) for v in range(vectors)]
        offset = [b.add(llvm.LoadOp(b.gep(columns, nr + v * lanes, f32), vec, alignment=4)) for v in range(vectors)]

    def row(r: SSAValue, _c: list) -> list:
        if quantised:
            first, stride = row_scales
            s = b.load(b.gep(first, b.mul_i64(r, b.i64(stride)), f32), f32)
            scale = splat(b, s if alpha == 1.0 else b.add(llvm.FMulOp(s, b.f32(alpha))), lanes)
        at = b.gep(tile, b.mul_i64(r, _val(b, ld)), f32)
        for v in range(vectors):
            y = b.add(llvm.LoadOp(b.gep(at, v * lanes, f32), words if from_int else vec, alignment=4))
            y = b.add(llvm.SIToFPOp(y, vec)) if from_int else y
            if quantised:
                scaled = b.add(llvm.FMulOp(b.add(llvm.FSubOp(y, offset[v])), b.add(llvm.FMulOp(col[v], scale))))
            else:
                scaled = y if alpha == 1.0 else b.add(llvm.FMulOp(y, splat(b, b.f32(alpha), lanes)))
            for base, rs, cs, weight in addends:
                start = b.gep(base, b.mul_i64(r, b.i64(rs)), f32) if rs else base
                value = b.add(llvm.LoadOp(b.gep(start, v * lanes, f32), vec, alignment=4)) if cs else \
                    splat(b, b.load(start, f32), lanes)
                scaled = b.add(llvm.FAddOp(scaled, value if weight == 1.0 else b.add(llvm.FMulOp(value, splat(b, b.f32(weight), lanes)))))
            b.add(llvm.StoreOp(scaled, _vector_at(b, at, v * lanes, lanes), alignment=4))
        return []

    emit_for(b, 0, rows, row)


def _emit_packed_matmul(ctx: KernelContext, op: Operation) -> None:
    """The register tiles (`_PackedGemm`), or for bf16 pairs (int8 quads) on a target with
    AMX-BF16 (AMX-INT8) its tiles (`kernels_amx.AmxGemm`). A GEMM that packs its own panels
    (``packing``) writes them a chunk at a time in its threads (`panel_packing`) where its
    blocking takes chunks, else all of them first (the standalone `buf.im2col` kernel)."""
    from tensor_graphs.codegen.llvm.kernels_amx import AmxGemm
    from tensor_graphs.codegen.llvm.kernels_movement import _emit_im2col
    from tensor_graphs.codegen.llvm.panel_packing import PanelPacker

    assert isinstance(op, buf.PackedMatmulOp)
    gemm = _PackedGemm(ctx, op)
    if gemm.empty:
        return
    engine = AmxGemm(gemm) if (gemm.pairs or gemm.quads) and ctx.target.tiles_gemm(gemm.k, gemm.quads) else gemm
    packer = PanelPacker.for_gemm(ctx, op)
    engine.packer = packer if packer is not None and engine.takes_chunks() else None
    if op.panel_packing is not None and engine.packer is None:
        _emit_im2col(ctx, op.panel_packing)
    engine.emit()


def epilogue_function(op: buf.PackedMatmulOp) -> str | Block:
    """What a packed GEMM applies to each sum after its addends: its activation (``"none"``:
    nothing, so that ``!= "none"`` says an epilogue has work), or its ``epilogue`` body
    (`fuse-gemm-elementwise`)."""
    body = op.epilogue_body
    return op.activation.data if body is None else body


def _epilogue_value(b: FunctionBuilder, y: SSAValue, values: list[SSAValue], addends: list, act: str | Block) -> SSAValue:
    """``act(y + scale * value ...)``: one output element's epilogue, ``values`` its addends'
    (``addends``: (buffer, strides..., scale) each), in a GEMM's tile or in a separate sweep;
    ``act`` an `epilogue_function`: an activation's name or a body of arith ops; a body of two
    arguments takes the last addend's scaled value as its second in place of its adding
    (`buf.PackedMatmulOp.body_takes_addend`). A bf16 value (a residual `narrow-gemm-output`
    rounded) is widened first, unless such a body takes it as bf16."""
    passed_bf16 = isinstance(act, Block) and len(act.args) == 2 and act.args[1].type != f32
    values = [v if v.type == f32 or (passed_bf16 and i == len(values) - 1) else emit_convert(b, v, f32) for i, v in enumerate(values)]
    scaled = [v if scale == 1.0 else b.add(llvm.FMulOp(v, b.f32(scale))) for v, (*_, scale) in zip(values, addends)]
    passed = scaled[-1:] if isinstance(act, Block) and len(act.args) == 2 else []
    for v in scaled[:len(scaled) - len(passed)]:
        y = b.add(llvm.FAddOp(y, v))
    if isinstance(act, Block):
        assert len(act.args) == 1 + len(passed), "an epilogue body of two arguments needs its addend's value"
        return emit_arith_body(b, act, [y, *passed])
    return y if act == "none" else emit_unary(b, act, y)


def stored_value(b: FunctionBuilder, value: SSAValue, element) -> SSAValue:
    """An epilogue's ``value`` as out's ``element``: a float32 rounded to a bf16 out (to nearest
    even, as `scalar.emit_convert` rounds); a bf16 an epilogue body yields, as it is."""
    return value if value.type == element else emit_convert(b, value, element)


def _sweep_epilogue(ctx: KernelContext, op: Operation, addends: list, act: str, alpha: float = 1.0) -> None:
    """``out = act(alpha * out + scale * addend ...)`` in one elementwise sweep (`SEPARATE_EPILOGUE_ATTR`;
    ``alpha`` where the tiles stored the bare sums: AMX's)."""
    out = op.output  # type: ignore[attr-defined]

    def compute(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
        y = vals[0] if alpha == 1.0 else b.add(llvm.FMulOp(vals[0], b.f32(alpha)))
        return _epilogue_value(b, y, vals[1:], addends, act)

    with _scalar_errors(op):
        emit_elementwise(ctx, out, [out, *(v for v, *_ in addends)], compute)


# a symbolic M (rows of A and out) is counted at run time; K and N are the packed weight's
SYMBOLIC_KERNELS.add(buf.PackedMatmulOp)
REGISTRY[buf.PackedMatmulOp] = _emit_packed_matmul
