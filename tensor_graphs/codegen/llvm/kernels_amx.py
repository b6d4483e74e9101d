"""`buf.packed_matmul` over bf16 pairs on AMX tiles (``tdpbf16ps``), where the target has AMX-BF16.

The operands are those of the bf16 GEMM (`kernels_gemm`, ``pairs``): ``A`` bf16 ``[M, K]``, the
weight's panels of bf16 pairs along K ``[P, K / 2, NR]`` words (`packing.bf16_k_pairs`: word j of
pair row kk holds ``B[2kk, j]`` low and ``B[2kk + 1, j]`` high, which is AMX's "VNNI" layout of B),
``out`` float32 ``[M, N]``. Eight tile registers of 16 rows x 64 bytes: four accumulators (32 rows x
32 columns of float32), two of A (16 rows x 32 bf16 each), two of B (16 pair rows x 16 columns)::

    for (g, p) in this thread's items (row group g of G, panel p; group-major):
        for r0 in group g's blocks of 32 rows (the last group: the M mod 32 rows last, under a configuration of their rows):
            for each 32 columns c0 of the panel (16 when only one column tile is left):
                C00 C01 C10 C11 = 0                     (or the first addend's tiles, `_preload`)
                for s in 0 .. K / 32:
                    A0, A1 = A[r0 : r0 + 16, 32 s : 32 s + 32], A[r0 + 16 : r0 + 32, ...]
                    B0, B1 = panel[p, 16 s : 16 s + 16, c0 : c0 + 16], [.., c0 + 16 : c0 + 32]
                    Cij += Ai @ Bj                      (tdpbf16ps: 16 x 16 x 32 multiply-adds)
                    out[previous block's rows R s .. R s + R] = act(...)   (a deferred activation)
                out[r0 + 16 i : ..., p NR + c0 + 16 j : ...] = alpha Cij + addend   (a partial column tile: via the stack)
                out[block] = act(out[block])    (the activation, if any: deferred to the next block's steps)

A batch of GEMMs (a convolution over a batch of images: one A for all; Winograd's: A per
GEMM modulo their count) is one list of items, GEMM by GEMM, each item with its GEMM's A, panels,
out and addends (`AmxGemm._gemm_bases`); a run-time count of GEMMs counts its items at run time.
The threads share out the items: each panel's rows in G groups of whole blocks (`row_groups`),
the items group-major, so that a thread reads its groups' rows of A from memory once and from
the cache for every further panel. G is 1 unless the panels are fewer than twice the cores (a
convolution's few output pixels, many output channels: every core then has work) or A is
larger than half the L2 (a large weight as A: its rows then fit it). Each thread loads its tile configuration
(`ldtilecfg`: palette 1, the rows and bytes of each tile) at the start of its items and releases
the tiles at the end; rows past M are never configured, so
no tile reads or writes past A or out. AMX has no masked K tail, and a configuration cannot
change within a tile's sums (``ldtilecfg`` zeroes the tiles): where K is not a multiple of 32
(a stem convolution's 3 x 7 x 7 = 147), each block's sums after the whole steps go to a scratch
on the stack, a configuration whose A tiles have the tail's words a row and B tiles the tail's pair
rows is loaded, the sums loaded back, the tail's product added, and the next block loads its
full-K configuration again (`K_TAIL_SCRATCH`).
The epilogue runs on each 32 x 32 block as its sums are stored (alpha and the addends on each
tile, in vectors; the first addend, a bias or a residual added unscaled to unscaled sums, is where
the sums start: ``C = addend`` by a tile load, `AmxGemm._preload`), or with
``tg.separate_epilogue`` in one sweep after the tiles (a tuner's parameter). A whole block's
activation waits for the next block of the item: ``R = ceil(32 / steps)`` of its rows after each
of that block's K steps, so that its vector arithmetic runs while the tile unit multiplies
(`_interleaved_steps`; the last block's at the end of the item's whole blocks, `_flush`). A bf16
out (`narrow-gemm-output`) takes no tile stores: each block's tiles go to a 32 x 32 float scratch
on the stack, and all of its epilogue (the addends after a preloaded first one, the activation,
the rounding to bf16) runs from there into out, deferred the same way (`_narrow_tiles`,
`_narrow_rows`). Run
after each block instead, a GELU's polynomials did not overlap the tiles: on Emerald Rapids,
128 x 768 by 768 x 3072, 1 thread, the activation's cost over the same GEMM without one fell
from 510-530 us to 290-310 (GELU), 305 to 90-110 (tanh GELU), 265 to 55-90 (SiLU) with bf16
tiles, and from 450 to 345-365 us (GELU) with int8 tiles (`benchmarks/amx_epilogue.py`).
The int8 GEMM (``quads``, where the target has AMX-INT8) runs on the same tiles: A's rows are the
codes `buf.quantize_rows` made (unsigned bytes, 64 of K a tile row, the row's scale after them,
never loaded), B's the "int8kpanels" quads (16 rows of quads, 64 of K), ``tdpbusd`` sums them in
int32 over all of K (exact: K below 66,000 cannot overflow), and each tile's int32 sums, as
soon as they are stored, are scaled to float32 in place, in vectors (`kernels_gemm.dequant_tile`),
before the block's epilogue; K a multiple of 64.
Linux hands AMX's tile state to a process only on request (`request_amx`, before the first call).
Each product of two bf16 is exact in float32; the sums are float32 (AMX rounds each
``tdpbf16ps`` to nearest even with denormals flushed: within float32 rounding of the dot
product kernel's, `bf16_dot`).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import f32, i8, i16, i64
from xdsl.ir import SSAValue

from tensor_graphs.codegen.llvm.kernels import Access, LoweringError, _scalar_errors, emit_pointwise, paying_rows
from tensor_graphs.codegen.llvm.kernels_gemm import (
    _epilogue_value,
    _prefetch,
    _sweep_epilogue,
    addend_vectors,
    dequant_tile,
    float_addends,
    stored_value,
)
from tensor_graphs.codegen.llvm.loops import FunctionBuilder, emit_for, emit_if, icmp, max_i64, min_i64
from tensor_graphs.target import AMX_ROW_WORDS, amx_state_permitted

#: The tile product of each: bf16 pairs (float32 sums), int8 quads (unsigned A by signed B, int32 sums)
TILE_PRODUCT = {False: "tdpbf16ps", True: "tdpbusd"}
#: Tile registers: the accumulators C[i][j] (row half i, column tile j), A's row halves, B's column tiles
C_TILES, A_TILES, B_TILES = ((0, 1), (2, 3)), (4, 5), (6, 7)
#: Rows of a tile, and bytes of each row (16 float32, 32 bf16 or 16 words of pairs)
TILE_ROWS, ROW_BYTES = 16, 64
#: Words (bf16 pairs or int8 quads along K) per row of an A tile
WORDS_PER_ROW = AMX_ROW_WORDS
assert WORDS_PER_ROW == ROW_BYTES // 4
#: The configuration's bytes: palette, then the bytes per row of each tile (u16s), then its rows (u8s)
CONFIG_BYTES, COLSB_AT, ROWS_AT = 64, 16, 48
#: Floats of the stack scratch a block's four sums wait in while the K tail's configuration loads
K_TAIL_SCRATCH = len(C_TILES) * len(C_TILES[0]) * TILE_ROWS * TILE_ROWS


def row_groups(panels: int, m: int | None, cores: int, a_bytes: int = 0, l2: int = 0) -> int:
    """Groups of whole 32-row blocks each panel's rows are split into, as items of their own (at
    most one per block of M; one where M is a run-time size): where the panels are fewer than twice
    the cores, as many as make about two items per core; where A (``a_bytes``) is larger than half
    the L2 (``l2``) and there are several panels, as many as make each group's rows of A fit in it,
    so that a thread's items (a group's rows over every panel, `AmxGemm.work_range`) read A from
    memory once, not once a panel (a convolution's weight, 4 MiB in bf16 at 2048 x 1024, times its
    few panels of output pixels)."""
    if m is None:
        return 1
    by_cores = 1 if panels >= 2 * cores else -(-2 * cores // panels)
    by_cache = -(-a_bytes // (l2 // 2)) if panels > 1 and l2 else 1
    return max(1, min(max(by_cores, by_cache), m // (2 * TILE_ROWS)))


def request_amx() -> None:
    """Make sure Linux lent this process AMX's tile state (`target.amx_state_permitted`); the
    host target has no AMX where it did not, so code for it is refused before it runs."""
    if not amx_state_permitted():
        raise OSError("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused: this kernel or CPU does not offer AMX; "
                      "compile for a target without amx-bf16")


def _at(b: FunctionBuilder, ptr: SSAValue, index: int, element) -> SSAValue:
    """``&ptr[index]`` typed as a pointer to ``element``, also at index 0."""
    return b.add(llvm.GEPOp(ptr, [llvm.GEP_USE_SSA_VAL], element, ssa_indices=[b.i64(index)], inbounds=True))


def _amx(b: FunctionBuilder, name: str, *args: SSAValue | int) -> None:
    """``call void @llvm.x86.<name>(args)``, ints as i8 immediates (tile registers), addresses
    typed as pointers to i8 (the intrinsic is declared with its first call's types)."""
    values = [b.constant(a, i8) if isinstance(a, int) else _at(b, a, 0, i8) if isinstance(a.type, llvm.LLVMPointerType) else a
              for a in args]
    b.add(llvm.CallIntrinsicOp(f"llvm.x86.{name}", values, []))


def configure(b: FunctionBuilder, first: SSAValue, second: SSAValue, k_words: int = WORDS_PER_ROW) -> SSAValue:
    """A tile configuration on the stack: palette 1; C[0][*] and A0 of ``first`` rows, C[1][*]
    and A1 of ``second`` (0: not configured), the B tiles of ``k_words`` rows; 64 bytes a row
    where configured (the A tiles: ``k_words`` words, the K tail's)."""
    cfg = b.stack(CONFIG_BYTES, i8)
    for q in range(CONFIG_BYTES // 8):
        b.store(b.i64(0), _at(b, cfg, q, i64))
    b.store(b.constant(1, i8), _at(b, cfg, 0, i8))
    for half, rows in enumerate((first, second)):
        rows8 = b.add(llvm.TruncOp(rows, i8))
        colsb = b.add(llvm.SelectOp(icmp(b, "sgt", rows, b.i64(0)), b.constant(ROW_BYTES, i16), b.constant(0, i16)))
        a_colsb = b.add(llvm.SelectOp(icmp(b, "sgt", rows, b.i64(0)), b.constant(4 * k_words, i16), b.constant(0, i16)))
        for t in (*C_TILES[half], A_TILES[half]):
            b.store(rows8, _at(b, cfg, ROWS_AT + t, i8))
            b.store(a_colsb if t == A_TILES[half] else colsb, _at(b, cfg, COLSB_AT // 2 + t, i16))
    for t in B_TILES:
        b.store(b.constant(k_words, i8), _at(b, cfg, ROWS_AT + t, i8))
        b.store(b.constant(ROW_BYTES, i16), _at(b, cfg, COLSB_AT // 2 + t, i16))
    return cfg


def tile_step(b: FunctionBuilder, a_rows: list[tuple[SSAValue, int]], b_columns: list[tuple[SSAValue, int]],
              quads: bool = False) -> None:
    """One K step of a block of ``len(a_rows) x len(b_columns)`` accumulators: A's row halves and
    B's column tiles loaded (``(address, row stride in bytes)`` each) into their tile registers,
    then every accumulator's product (``tdpbf16ps``; ``quads``: ``tdpbusd``)."""
    for i, (at, stride) in enumerate(a_rows):
        _amx(b, "tileloadd64", A_TILES[i], at, b.i64(stride))
    for j, (at, stride) in enumerate(b_columns):
        _amx(b, "tileloadd64", B_TILES[j], at, b.i64(stride))
    for i in range(len(a_rows)):
        for j in range(len(b_columns)):
            _amx(b, TILE_PRODUCT[quads], C_TILES[i][j], A_TILES[i], B_TILES[j])


class AmxGemm:
    """The AMX emission of one `_PackedGemm` (``gemm``: its operands, sizes and epilogue)."""

    def __init__(self, gemm):
        self.g, self.ctx = gemm, gemm.ctx
        if gemm.quads and gemm.k % WORDS_PER_ROW:
            raise LoweringError(f"{gemm.op.name}: AMX-INT8 tiles need K a multiple of {4 * WORDS_PER_ROW}, got {4 * gemm.k}")
        self.col_tiles = gemm.nr // TILE_ROWS
        self.steps, self.k_tail = divmod(gemm.k, WORDS_PER_ROW)  # whole tile steps; the words after them
        # the epilogue: on each 32 x 32 block as soon as its sums are stored (in L1, its vector
        # work beside the tile unit's), or in one sweep after all (`tg.separate_epilogue`); the
        # int8 GEMM's int32 sums are scaled as each tile is stored (`store`: alpha with them)
        self.addends, self.act = gemm.swept if gemm.swept is not None else (gemm.addends, gemm.act)
        self.epilogue = bool(self.addends) or self.act != "none" or (gemm.alpha != 1.0 and not gemm.quads)
        self.swept = self.epilogue and gemm.swept is not None
        # each tile of a whole panel takes alpha (int8: the scales) and its addends in vectors as it
        # is stored (`store`, `kernels_gemm.dequant_tile`: the scalar epilogue did not vectorise);
        # the block's epilogue then applies the activation alone (all of it, on a partial panel)
        # (a body that takes its addend's value: all of the epilogue after the block's tiles)
        # (a bf16 output: each block's tiles go to a scratch, then all of its epilogue to out, `_narrow_tiles`)
        self.narrow = gemm.narrow
        self.added = not self.swept and not gemm.op.body_takes_addend and not self.narrow and float_addends(self.addends)
        # a whole block's activation (its addends taken as its tiles were stored) runs during the
        # next block's tile products, a few of its rows each K step (`_interleaved_steps`)
        # (a bf16 output: all of a whole block's epilogue, from its scratch)
        self.deferred = (self.epilogue and self.added and self.act != "none" or self.narrow) and self.steps > 0
        #: the sums of a whole panel's tiles start from the first addend, loaded into them
        #: (`_preload`), where it is added unscaled to unscaled float sums: no vector work after them
        self.preloaded = self._preloadable()
        target = gemm.ctx.target
        # a batch of GEMMs (`_PackedGemm.batched`): items of every GEMM's panels, GEMM-major
        self.gemms = gemm.groups if gemm.batched else 1
        self.groups = row_groups(self.gemms * gemm.panels, gemm.m if gemm.m_size is None else None, target.cores,
                                 gemm.m * gemm.lda * 4, target.caches.l2)
        #: the packer of the panels it packs itself a chunk at a time (`kernels_gemm._emit_packed_matmul`), or None
        self.packer = None
        self.p0: SSAValue | None = None  # the panel ``pb`` holds first (a chunk packed here)

    def _preloadable(self) -> bool:
        """Whether a whole panel's tiles start from the epilogue's first addend (a bias: row
        stride 0; a residual) instead of zeros: bf16 tiles (float sums), alpha 1, the addend
        unscaled and contiguous along the columns, added with the tiles (not swept). Then
        ``out = (addend + A @ B) + ...`` where the epilogue computes ``(A @ B + addend) + ...``:
        the same sum in another order. Without it, each tile's stored sums were loaded back and
        the addend added in vectors right after the tile store: a bias cost 80-104 us over the
        650-670 us of the bare bf16 GEMM 128 x 768 by 768 x 3072, and 18-25 us loaded into the
        sums (`benchmarks/amx_epilogue.py`, 1 thread, a Xeon with AMX)."""
        g = self.g
        if g.quads or not (self.added or self.narrow and not g.op.body_takes_addend) or g.alpha != 1.0 or not self.addends:
            return False
        buffer, _rs, cs, _gs, scale = self.addends[0]
        return cs == 1 and scale == 1.0 and buffer.type.element_type == f32

    def takes_chunks(self) -> bool:
        """Whether a thread's items can be packed and run a chunk of panels at a time: one row
        group (an item is a whole panel)."""
        return self.groups == 1

    def emit(self) -> None:
        """The threads over the items (a batch's: every GEMM's, a run-time count of them counted
        at run time), then the epilogue's sweep (`_sweep_epilogue`)."""
        g, ctx = self.g, self.ctx
        if g.g_size is not None:
            count = ctx.size(g.g_size)
            items = ctx.b.mul_i64(count, ctx.b.i64(g.panels * self.groups))
            ctx.parallel(items, self.work_range, work=g.work_of(g.m),
                         pays=paying_rows(ctx, count, g.groups, lambda n: g.work_of(g.m, n)))
        elif g.m_size is None:
            ctx.parallel(self.gemms * g.panels * self.groups, self.work_range, work=g.work_of(g.m))
        else:
            rows_now = ctx.size(g.m_size)
            ctx.parallel(g.panels * self.groups, self.work_range, [rows_now], work=g.work_of(g.m),
                         pays=paying_rows(ctx, rows_now, g.m, g.work_of))
        if self.swept:
            _sweep_epilogue(ctx, g.op, self.addends, self.act, g.alpha)

    def work_range(self, start: SSAValue, end: SSAValue, _thread: SSAValue, values: list[SSAValue]) -> None:
        """This thread's items ``[start, end)`` (row group ``i / P``, its panel ``i % P``: a group's
        rows of A over every panel in turn, from the cache): the configurations, each item (the
        partial last panel's under its own code); the tiles released."""
        g, b = self.g, self.ctx.b
        rows = values[0] if values else b.i64(g.m)
        self.pa, self.pb, self.po = self.ctx.ptr(g.a), self.ctx.ptr(g.packed), self.ctx.ptr(g.out)
        self.padd = [self.ctx.ptr(v) for v, *_ in self.addends]
        self.stack = b.stack(TILE_ROWS * TILE_ROWS, f32) if g.last_cols % TILE_ROWS else None
        self.blocks = b.add(llvm.UDivOp(rows, b.i64(2 * TILE_ROWS)))
        self.rest = b.add(llvm.SubOp(rows, b.mul_i64(self.blocks, b.i64(2 * TILE_ROWS))))
        first = min_i64(b, self.rest, b.i64(TILE_ROWS))
        whole, self.tail_rows = (b.i64(TILE_ROWS),) * 2, (first, b.add(llvm.SubOp(self.rest, first)))
        self.full_cfg, self.tail_cfg = configure(b, *whole), configure(b, *self.tail_rows)
        # (whole K, K tail) configurations of whole blocks and of the tail rows' block
        k_tail = (lambda rows: configure(b, *rows, self.k_tail)) if self.k_tail else (lambda _rows: None)
        self.configs = {False: (self.full_cfg, k_tail(whole)), True: (self.tail_cfg, k_tail(self.tail_rows))}
        self.scratch = b.stack(K_TAIL_SCRATCH, f32) if self.k_tail else None
        self.block_tile = b.stack(K_TAIL_SCRATCH, f32) if self.narrow else None
        if self.deferred:  # out's offset of the block whose activation waits (bf16 out: its row, column); -1: none
            self.pending = b.stack(1, i64, 8)
            b.store(b.i64(-1), self.pending)
            self.pending_col = b.stack(1, i64, 8) if self.narrow else None
        if self.packer is not None and g.batched:
            self._packed_gemms(start, end)
        elif self.packer is not None:
            self.packer.chunks(b, start, end, self._chunk_of(self.item))
        else:
            emit_for(b, start, end, lambda i, _: self.item(i) or [])
        _amx(b, "tilerelease")

    def _packed_gemms(self, start: SSAValue, end: SSAValue) -> None:
        """The items ``[start, end)`` of a batch whose panels the GEMM packs itself (one row group:
        an item is a panel): each GEMM's share of them (image g's panels), a chunk at a time."""
        b, g = self.ctx.b, self.g
        panels = b.i64(g.panels)

        def gemm(q: SSAValue, _c: list) -> list:
            first, last = b.mul_i64(q, panels), b.mul_i64(b.add_i64(q, b.i64(1)), panels)
            p_start = b.add(llvm.SubOp(max_i64(b, start, first), first))
            p_end = b.add(llvm.SubOp(min_i64(b, end, last), first))
            self._in_gemm(q, lambda: self.packer.chunks(b, p_start, p_end, self._chunk_of(self._item), image=q))
            return []

        first_gemm = b.add(llvm.UDivOp(start, panels))
        last_gemm = b.add(llvm.UDivOp(b.add_i64(end, b.i64(g.panels - 1)), panels))
        emit_for(b, first_gemm, last_gemm, gemm)

    def item(self, i: SSAValue) -> None:
        """Item i: group ``g = i / P``'s rows of panel ``p = i % P`` (`rows`), the last, partial
        panel's under its own code; in a batch, item ``i mod (G P)`` of GEMM ``i / (G P)``, its
        A, panels, out and addends from that GEMM's (`_gemm_bases`)."""
        b, g = self.ctx.b, self.g
        if g.batched:
            per_gemm = b.i64(self.groups * g.panels)
            self._in_gemm(b.add(llvm.UDivOp(i, per_gemm)), lambda: self._item(b.add(llvm.URemOp(i, per_gemm))))
            return
        self._item(i)

    def _chunk_of(self, item) -> Callable[[SSAValue, SSAValue, SSAValue], None]:
        """The packer's callback (`panel_packing.PanelPacker.chunks`): the items of panels
        ``[p0, p1)`` (``item``: by panel) from the scratch the chunk was packed into."""
        b = self.ctx.b

        def chunk(p0: SSAValue, p1: SSAValue, scratch: SSAValue) -> None:
            self.pb, self.p0 = scratch, p0
            emit_for(b, p0, p1, lambda p, _: item(p) or [])

        return chunk

    def _in_gemm(self, gemm: SSAValue, emit: Callable[[], None]) -> None:
        """``emit()`` with A, the panels, out and the addends of GEMM ``gemm`` of the batch
        (`_gemm_bases`), the whole batch's restored after."""
        bases = (self.pa, self.pb, self.po, self.padd, self.p0)
        self._gemm_bases(gemm)
        emit()
        self.pa, self.pb, self.po, self.padd, self.p0 = bases

    def _gemm_bases(self, gemm: SSAValue) -> None:
        """A, the panels, out and the addends of GEMM ``gemm`` of the batch (A: ``a[gemm mod G']``,
        or one A for all), offsets in words as `kernels_gemm._PackedGemm._block_at` takes them."""
        b, g = self.ctx.b, self.g
        if g.a_group:
            which = gemm if g.a_period is None else b.add(llvm.URemOp(gemm, b.i64(g.a_period)))
            self.pa = b.gep(self.pa, b.mul_i64(which, b.i64(g.a_group)), f32)
        self.pb = b.gep(self.pb, b.mul_i64(gemm, b.i64(g.panels * g.panel_words)), f32)
        self.po = b.gep(self.po, b.mul_i64(gemm, b.i64(g.m * g.n)), g.out_el)
        self.padd = [b.gep(ptr, b.mul_i64(gemm, b.i64(gs)), buffer.type.element_type) if gs else ptr
                     for ptr, (buffer, _rs, _cs, gs, _scale) in zip(self.padd, self.addends)]

    def _item(self, i: SSAValue) -> None:
        b, g = self.ctx.b, self.g
        panels = b.i64(g.panels)
        group = b.add(llvm.UDivOp(i, panels)) if self.groups > 1 else b.i64(0)
        p = b.add(llvm.URemOp(i, panels)) if self.groups > 1 else i
        if not g.last_cols:
            self.rows(p, group, False)
            return
        emit_if(b, icmp(b, "ult", p, b.i64(g.full_panels)), lambda: self.rows(p, group, False),
                lambda: self.rows(p, group, True))

    def rows(self, p: SSAValue, group: SSAValue, partial: bool) -> None:
        """Panel p's row blocks ``[blocks g / G, blocks (g + 1) / G)`` of group g under the full
        configuration, then in the last group its tail rows (1 to 31) under theirs."""
        b, groups = self.ctx.b, self.groups
        first = b.add(llvm.UDivOp(b.mul_i64(self.blocks, group), b.i64(groups)))
        last = b.add(llvm.UDivOp(b.mul_i64(self.blocks, b.add_i64(group, b.i64(1))), b.i64(groups)))
        _amx(b, "ldtilecfg", self.full_cfg)
        emit_for(b, first, last, lambda r, _: self.block(p, b.mul_i64(r, b.i64(2 * TILE_ROWS)), partial, True, None)
                 or [])
        self._flush()

        def tail() -> None:
            _amx(b, "ldtilecfg", self.tail_cfg)
            r0 = b.mul_i64(self.blocks, b.i64(2 * TILE_ROWS))
            emit_if(b, icmp(b, "sgt", self.tail_rows[1], b.i64(0)), lambda: self.block(p, r0, partial, True, self.tail_rows),
                    lambda: self.block(p, r0, partial, False, self.tail_rows))

        has_tail = icmp(b, "sgt", self.rest, b.i64(0))
        if groups > 1:
            has_tail = b.add(llvm.AndOp(has_tail, icmp(b, "eq", group, b.i64(groups - 1))))
        emit_if(b, has_tail, tail)

    def block(self, p: SSAValue, r0: SSAValue, partial: bool, halves2: bool, tail: tuple | None) -> None:
        """Rows ``[r0, r0 + 32)`` (the second 16 only when ``halves2``) of panel p, 32 columns
        at a time."""
        g = self.g
        tiles = self.col_tiles if not partial else -(-g.last_cols // TILE_ROWS)
        for c in range(0, tiles, 2):
            self.columns(p, r0, c, min(2, tiles - c), partial, halves2, tail)

    def columns(self, p: SSAValue, r0: SSAValue, c: int, count: int, partial: bool, halves2: bool, tail: tuple | None) -> None:
        """The ``count`` column tiles from tile c of panel p, over all of K, stored to out."""
        g, b = self.g, self.ctx.b
        halves = (0, 1) if halves2 else (0,)
        k_bytes = 4 * g.lda  # a row of A: K bf16 (int8: K codes and the row's scale)
        whole_k, k_tail = self.configs[tail is not None]
        if k_tail is not None:  # the previous block left the K tail's configuration (zeroes the sums)
            _amx(b, "ldtilecfg", whole_k)
        if self.preloaded and not partial:
            self._preload(p, r0, c, count, halves)
        elif k_tail is None:
            for i in halves:
                for j in range(count):
                    _amx(b, "tilezero", C_TILES[i][j])
        a_row = b.gep(self.pa, b.mul_i64(r0, b.i64(k_bytes)), i8)
        in_pb = p if self.p0 is None else b.add(llvm.SubOp(p, self.p0))  # (a chunk packed here: from its first)
        panel = b.gep(self.pb, b.add_i64(b.mul_i64(in_pb, b.i64(g.panel_words * 4)), b.i64(c * TILE_ROWS * 4)), i8)

        def step(s: SSAValue, _c: list) -> list:
            a_at = [(b.gep(a_row, b.add_i64(b.mul_i64(s, b.i64(ROW_BYTES)), b.i64(i * TILE_ROWS * k_bytes)), i8), k_bytes)
                    for i in halves]
            b_row = b.mul_i64(s, b.i64(TILE_ROWS * g.nr * 4))
            b_at = [(b.gep(panel, b.add_i64(b_row, b.i64(j * ROW_BYTES)), i8), g.nr * 4) for j in range(count)]
            tile_step(b, a_at, b_at, g.quads)
            return []

        defer = self.deferred and not partial and tail is None and count == 2
        if defer and self.narrow:
            self._prefetch_addends(p, r0, c)
        if defer:
            pending = b.load(self.pending, i64)
            emit_if(b, icmp(b, "sge", pending, b.i64(0)), lambda: self._interleaved_steps(step, pending),
                    lambda: emit_for(b, 0, self.steps, step))
        else:
            emit_for(b, 0, self.steps, step)
        if k_tail is not None:
            self._k_tail_step(step, halves, count, k_tail)
        widths = [min(TILE_ROWS, g.last_cols - (c + j) * TILE_ROWS) if partial else TILE_ROWS for j in range(count)]
        if self.narrow:
            if not defer:  # (the scratch holds the waiting block's sums)
                self._flush()
            self._narrow_tiles(p, r0, c, halves, count, tail)
            col0 = b.add_i64(b.mul_i64(p, b.i64(g.nr)), b.i64(c * TILE_ROWS))
            if defer:  # its epilogue waits for the next block's steps (or `_flush`)
                b.store(r0, self.pending)
                b.store(col0, self.pending_col)
                return
            rows = b.i64(len(halves) * TILE_ROWS) if tail is None else tail[0] if not halves2 else b.add_i64(*tail)
            self._narrow_rows(r0, col0, b.i64(0), rows, sum(widths), partial)
            return
        for i in halves:
            row = b.add_i64(r0, b.i64(i * TILE_ROWS))
            for j in range(count):
                self.store(C_TILES[i][j], p, row, (c + j) * TILE_ROWS, widths[j], TILE_ROWS if tail is None else tail[i], partial)
        if defer:  # this block's activation waits for the next block's steps (or `_flush`)
            at = b.add_i64(b.mul_i64(r0, b.i64(g.n)), b.add_i64(b.mul_i64(p, b.i64(g.nr)), b.i64(c * TILE_ROWS)))
            b.store(at, self.pending)
        elif self.epilogue and not self.swept and (self.act != "none" or partial):
            width = sum(widths)
            rows = b.i64(len(halves) * TILE_ROWS) if tail is None else tail[0] if not halves2 else b.add_i64(*tail)
            self.block_epilogue(p, r0, c * TILE_ROWS, rows, width, partial)

    def _prefetch_addends(self, p: SSAValue, r0: SSAValue, c: int) -> None:
        """The cache lines of the addends this block's epilogue reads (bf16 out: all of it waits
        for the next block's steps, `_interleaved_steps`), fetched as its own K steps start, so that
        their misses overlap two blocks' tile products. A residual is one or two lines a row of a
        block, its rows N apart: the hardware's streams miss them (a bf16 ResNet-50 block's last
        1 x 1 convolution, 64 -> 256 at 56 x 56 with its residual: 0.68-0.76x its time; the bf16
        model 0.93-0.95x, `benchmarks/residual_epilogue.py --toggle prefetch`). The first addend of a float32 output's sums
        (`preloaded`), fetched a block ahead the same way, gained nothing measurable: not done."""
        g, b = self.g, self.ctx.b
        col0 = b.add_i64(b.mul_i64(p, b.i64(g.nr)), b.i64(c * TILE_ROWS))
        line = self.ctx.target.caches.line
        for k in range(int(self.preloaded), len(self.addends)):
            buffer, rs, cs, _gs, _scale = self.addends[k]
            if cs != 1 or not rs:  # (a bias: one row, or one value a row)
                continue
            el = buffer.type.element_type
            first = b.gep(self.padd[k], b.add_i64(b.mul_i64(r0, b.i64(rs)), col0), el)
            for r in range(2 * TILE_ROWS):
                row = b.gep(first, r * rs, el)
                for at in range(0, 2 * TILE_ROWS * el.bitwidth // 8, line):  # a block's row: 32 values
                    _prefetch(b, b.gep(row, at, i8))

    def _preload(self, p: SSAValue, r0: SSAValue, c: int, count: int, halves: tuple) -> None:
        """The block's accumulators loaded from the first addend (`preloaded`) at their rows and
        columns (``tileloadd`` at its row stride: 0 for a bias, each tile row the same 16 floats)."""
        b, g = self.ctx.b, self.g
        for i in halves:
            row = b.add_i64(r0, b.i64(i * TILE_ROWS))
            for j in range(count):
                col = b.add_i64(b.mul_i64(p, b.i64(g.nr)), b.i64((c + j) * TILE_ROWS))
                (first,) = self._addend_accesses(row, col, self.addends[:1])
                _amx(b, "tileloadd64", C_TILES[i][j], first.ptr, b.i64(4 * first.strides[0]))

    def _interleaved_steps(self, step, pending: SSAValue) -> None:
        """The K steps of a block with the waiting block's activation (out's 32 x 32 floats at
        ``pending``) spread over them, ``R = ceil(32 / steps)`` of its rows after each step: its
        vector work runs beside the tile unit's products, where after the block it would wait
        for them (a GELU's polynomials cost as much as a 768-deep block's tiles)::

            for s in 0 .. S:  step(s); out[pending + (R s + q) N, 0 : 32] = act(...) for q < R
            for s in S .. K / 32:  step(s)
        """
        b = self.ctx.b
        per_step = -(-2 * TILE_ROWS // self.steps)
        spread = -(-2 * TILE_ROWS // per_step)  # steps that carry rows

        def with_rows(s: SSAValue, c: list) -> list:
            step(s, c)
            first = b.mul_i64(s, b.i64(per_step))
            for q in range(per_step):
                row = b.add_i64(first, b.i64(q))
                if (2 * TILE_ROWS) % per_step:
                    emit_if(b, icmp(b, "slt", row, b.i64(2 * TILE_ROWS)), lambda row=row: self._activate(pending, row, 1))
                else:
                    self._activate(pending, row, 1)
            return []

        emit_for(b, 0, spread, with_rows)
        emit_for(b, spread, self.steps, step)

    def _activate(self, at: SSAValue, row: SSAValue, rows: int) -> None:
        """``out = act(out)`` over ``rows`` rows from ``row`` of the 32 columns at out's offset ``at``
        (a deferred block: its alpha and addends taken as its tiles were stored); bf16 out: all
        of the epilogue of those rows of the block at row ``at`` (`_narrow_rows`)."""
        g, b = self.g, self.ctx.b
        if self.narrow:
            self._narrow_rows(at, b.load(self.pending_col, i64), row, rows, 2 * TILE_ROWS)
            return
        out = Access(b.gep(self.po, b.add_i64(at, b.mul_i64(row, b.i64(g.n))), f32), (g.n, 1), f32)
        with _scalar_errors(g.op):
            emit_pointwise(b, (rows, 2 * TILE_ROWS), out, [out], lambda b, v: _epilogue_value(b, v[0], [], [], self.act))

    def _flush(self) -> None:
        """The waiting block's activation, if any, all of it now (the end of an item's whole blocks)."""
        b = self.ctx.b
        if not self.deferred:
            return
        pending = b.load(self.pending, i64)

        def run() -> None:
            self._activate(pending, b.i64(0), 2 * TILE_ROWS)
            b.store(b.i64(-1), self.pending)

        emit_if(b, icmp(b, "sge", pending, b.i64(0)), run)

    def _k_tail_step(self, step, halves: tuple, count: int, k_tail: SSAValue) -> None:
        """The K tail's product: the sums to the scratch, the tail's configuration (A tiles of
        its words, B tiles of its pair rows: nothing past K is read), the sums back, ``step``
        at the tail (``K / 32``)."""
        b = self.ctx.b
        tiles = [(C_TILES[i][j], b.gep(self.scratch, (2 * i + j) * TILE_ROWS * TILE_ROWS, f32)) for i in halves
                 for j in range(count)]
        for tile, at in tiles:
            _amx(b, "tilestored64", tile, at, b.i64(ROW_BYTES))
        _amx(b, "ldtilecfg", k_tail)
        for tile, at in tiles:
            _amx(b, "tileloadd64", tile, at, b.i64(ROW_BYTES))
        step(b.i64(self.steps), [])

    def _narrow_tiles(self, p: SSAValue, r0: SSAValue, c: int, halves: tuple, count: int, tail: tuple | None) -> None:
        """A block's tiles, out being bf16: each to its place in the block's scratch (32 x 32
        floats; the int8 sums scaled there), whose epilogue then writes out (`_narrow_rows`)."""
        g, b = self.g, self.ctx.b
        for i in halves:
            row = b.add_i64(r0, b.i64(i * TILE_ROWS))
            for j in range(count):
                at = b.gep(self.block_tile, (i * 2 * TILE_ROWS + j) * TILE_ROWS, f32)
                _amx(b, "tilestored64", C_TILES[i][j], at, b.i64(2 * ROW_BYTES))
                if g.quads:
                    self._scale_sums(at, 2 * TILE_ROWS, p, row, (c + j) * TILE_ROWS, TILE_ROWS if tail is None else tail[i], True)

    def _narrow_rows(self, r0: SSAValue, col0: SSAValue, row: SSAValue, rows: int | SSAValue, cols: int,
                     partial: bool = False) -> None:
        """``out = act(alpha * sums + addends)`` rounded to out's bf16, for ``rows`` rows from row
        ``row`` of the block at out's row r0, column col0, its sums in the block's scratch (which
        started from the first addend, `preloaded`, unless in a ``partial`` panel)."""
        g, b = self.g, self.ctx.b
        at_row = b.add_i64(r0, row)
        skip = 1 if self.preloaded and not partial else 0  # (the accesses zip every addend's pointer: sliced after)
        addends, accesses = self.addends[skip:], self._addend_accesses(at_row, col0, self.addends)[skip:]
        sums = Access(b.gep(self.block_tile, b.mul_i64(row, b.i64(2 * TILE_ROWS)), f32), (2 * TILE_ROWS, 1), f32)
        out = Access(b.gep(self.po, b.add_i64(b.mul_i64(at_row, b.i64(g.n)), col0), g.out_el), (g.n, 1), g.out_el)

        def compute(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
            y = vals[0] if g.alpha == 1.0 or g.quads else b.add(llvm.FMulOp(vals[0], b.f32(g.alpha)))
            return stored_value(b, _epilogue_value(b, y, vals[1:], addends, self.act), g.out_el)

        with _scalar_errors(g.op):
            emit_pointwise(b, (rows, cols), out, [sums, *accesses], compute)

    def block_epilogue(self, p: SSAValue, r0: SSAValue, col: int, rows: SSAValue, cols: int, partial: bool = False) -> None:
        """``out = act(alpha * out + beta * acc + addend)`` over the block just stored: ``rows``
        rows from r0, ``cols`` columns from the panel's column ``col`` (the int8 GEMM's whole
        panels added their addends with the scales: the activation only)."""

        g, b = self.g, self.ctx.b
        col0 = b.add_i64(b.mul_i64(p, b.i64(g.nr)), b.i64(col))
        out = Access(b.gep(self.po, b.add_i64(b.mul_i64(r0, b.i64(g.n)), col0), f32), (g.n, 1), f32)
        addends = [] if self.added and not partial else self.addends
        ins = [out, *self._addend_accesses(r0, col0, addends)]
        scaled = g.quads or (self.added and not partial)  # alpha taken already (`store`)

        def compute(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
            y = vals[0] if g.alpha == 1.0 or scaled else b.add(llvm.FMulOp(vals[0], b.f32(g.alpha)))
            return _epilogue_value(b, y, vals[1:], addends, self.act)

        with _scalar_errors(g.op):
            emit_pointwise(b, (rows, cols), out, ins, compute)

    def _addend_accesses(self, r0: SSAValue, col0: SSAValue, addends: list) -> list[Access]:
        """``addends`` (the epilogue's: buffer, row and column strides, ..., scale) at row r0, column col0."""
        b, accesses = self.ctx.b, []
        for ptr, (buffer, rs, cs, _gs, _scale) in zip(self.padd, addends):
            at = b.add_i64(b.mul_i64(r0, b.i64(rs)), b.mul_i64(col0, b.i64(cs)))
            el = buffer.type.element_type  # (bf16: a residual the epilogue body takes as it is)
            accesses.append(Access(b.gep(ptr, at, el), (rs, cs), el))
        return accesses

    def _tile_addends(self, p: SSAValue, row: SSAValue, col: int) -> list:
        """The epilogue's addends at the tile of rows from ``row``, panel p's columns from ``col``,
        as `dequant_tile` adds them (`kernels_gemm.addend_vectors`), less the one its sums started
        from (`preloaded`)."""
        b, g = self.ctx.b, self.g
        col0 = b.add_i64(b.mul_i64(p, b.i64(g.nr)), b.i64(col))
        vectors = addend_vectors(self._addend_accesses(row, col0, self.addends), self.addends)
        return vectors[1:] if self.preloaded else vectors

    def _scale_sums(self, tile: SSAValue, ld: int, p: SSAValue, row: SSAValue, col: int, rows: int | SSAValue,
                    partial: bool) -> None:
        """The int8 GEMM's int32 sums of one tile just stored at ``tile`` (``ld`` floats a row),
        rows from ``row``, the 16 columns from ``col`` of panel p, scaled to float32 in place
        (`kernels_gemm.dequant_tile`: its rows' scales are the words after their codes in A, its
        columns' scales and offsets the rows after the panel's codes), and in a whole panel its
        addends added (a partial panel's columns past N have none: its block's epilogue adds them)."""
        g, b = self.g, self.ctx.b
        scales = b.gep(self.pa, b.add_i64(b.mul_i64(row, b.i64(g.lda)), b.i64(g.k)), f32)
        columns = b.gep(self.pb, b.add_i64(b.mul_i64(p, b.i64(g.panel_words)), b.i64(g.k * g.nr + col)), f32)
        added = [] if partial or not self.added else self._tile_addends(p, row, col)
        dequant_tile(b, tile, ld, rows, TILE_ROWS // g.lanes, g.lanes, (scales, g.lda), columns, g.nr, g.alpha, from_int=True,
                     addends=added)

    def store(self, tile: int, p: SSAValue, row: SSAValue, col: int, cols: int, rows: int | SSAValue, partial: bool = False) -> None:
        """Tile ``tile`` to out's rows from ``row``, columns ``p NR + col`` on: directly when all
        its 16 columns are out's, else through the stack, ``cols`` of them for ``rows`` rows."""
        g, b = self.g, self.ctx.b
        n = g.n
        at = b.add_i64(b.mul_i64(row, b.i64(n)), b.add_i64(b.mul_i64(p, b.i64(g.nr)), b.i64(col)))
        dest = b.gep(self.po, at, f32)
        if cols == TILE_ROWS:
            _amx(b, "tilestored64", tile, dest, b.i64(4 * n))
            if g.quads:
                self._scale_sums(dest, n, p, row, col, rows, partial)
            elif self.added and not partial and (len(self.addends) > self.preloaded or g.alpha != 1.0):
                dequant_tile(b, dest, n, rows, TILE_ROWS // g.lanes, g.lanes, None, None, g.nr, g.alpha,
                             addends=self._tile_addends(p, row, col))
            return
        assert self.stack is not None
        _amx(b, "tilestored64", tile, self.stack, b.i64(ROW_BYTES))
        if g.quads:
            self._scale_sums(self.stack, TILE_ROWS, p, row, col, rows, True)
        count = rows if isinstance(rows, SSAValue) else b.i64(rows)

        def copy(r: SSAValue, _c: list) -> list:
            src, dst = b.gep(self.stack, b.mul_i64(r, b.i64(TILE_ROWS)), f32), b.gep(dest, b.mul_i64(r, b.i64(n)), f32)
            for q in range(cols):
                b.store(b.load(b.gep(src, q, f32), f32), b.gep(dst, q, f32))
            return []

        emit_for(b, 0, count, copy)


# small GEMMs of whole tiles inside another kernel (attention's two products) ----------------------


def whole_tiles_config(b: FunctionBuilder) -> SSAValue:
    """`configure` with every tile whole (16 rows of 64 bytes), for `tile_gemm`: ``ldtilecfg`` it
    once per thread, ``tilerelease`` after."""
    return configure(b, b.i64(TILE_ROWS), b.i64(TILE_ROWS))


def tile_gemm(b: FunctionBuilder, row_tiles: int, col_tiles: int, k_steps: int, a: SSAValue, lda: int, bm: SSAValue,
              ldb: int, c: SSAValue, ldc: int, accumulate: bool) -> None:
    """``C[16 R, 16 C] (+)= A @ B`` of bf16 pairs on AMX tiles, under `whole_tiles_config`: A
    row-major words (pairs along K; ``lda`` words a row, ``16 k_steps`` of them read), B pair rows
    of words (``ldb`` a row, `packing.bf16_k_pairs`' layout), C float32 (``ldc`` a row), each a
    multiple of whole tiles (the caller pads K with zeros). 2 x 2 blocks of accumulators, as
    `AmxGemm`'s::

        for each 2 x 2 block (i0, j0) of C's tiles:
            Cij = accumulate ? C[i, j] : 0
            for s in 0 .. k_steps:  Ai = A[i, s]; Bj = B[s, j]; Cij += Ai @ Bj  (tdpbf16ps)
            C[i, j] = Cij
    """

    def tile_at(base: SSAValue, row: int | SSAValue, ld: int, col: int) -> SSAValue:
        at = b.mul_i64(row, b.i64(TILE_ROWS * ld * 4)) if isinstance(row, SSAValue) else b.i64(row * TILE_ROWS * ld * 4)
        return b.gep(base, b.add_i64(at, b.i64(col * ROW_BYTES)), i8)

    for i0 in range(0, row_tiles, 2):
        for j0 in range(0, col_tiles, 2):
            rows, cols = range(min(2, row_tiles - i0)), range(min(2, col_tiles - j0))
            for i in rows:
                for j in cols:
                    if accumulate:
                        _amx(b, "tileloadd64", C_TILES[i][j], tile_at(c, i0 + i, ldc, j0 + j), b.i64(4 * ldc))
                    else:
                        _amx(b, "tilezero", C_TILES[i][j])

            def step(s: SSAValue, _c: list, i0=i0, j0=j0, rows=rows, cols=cols) -> list:
                a_at = [(b.gep(a, b.add_i64(b.mul_i64(s, b.i64(ROW_BYTES)), b.i64((i0 + i) * TILE_ROWS * lda * 4)), i8), 4 * lda)
                        for i in rows]
                tile_step(b, a_at, [(tile_at(bm, s, ldb, j0 + j), 4 * ldb) for j in cols])
                return []

            emit_for(b, 0, k_steps, step)
            for i in rows:
                for j in cols:
                    _amx(b, "tilestored64", C_TILES[i][j], tile_at(c, i0 + i, ldc, j0 + j), b.i64(4 * ldc))
