"""The GPU kernel paths: per op, the Triton (or library) variants that can run it on the GPU, the
one the heuristic takes, and the one an op pins (``tg.gpu_kernel``, `GPU_KERNEL_ATTR`: written by
the tuner, carried from the tg op to its buf kernel by `convert-tensor-to-buffer`, read by the
emitters here and replayed by `tg-opt`)::

    %y = tg.matmul %x, %w {tg.gpu_kernel = "matmul.dot_tf32"} : (...) -> tensor<128x3072xf32>

`matmul`:

- ``matmul.library``: cuBLAS's SGEMM (``torch.matmul`` into the output's arena view), then the
  epilogue as one Triton sweep; ``matmul.library_tf32`` the same with TF32 allowed (tensor cores,
  inputs rounded to 10 mantissa bits: errors near 1e-3 of the magnitude);
- ``matmul.dot``: a Triton ``tl.dot`` kernel at IEEE float32 with the epilogue fused;
  ``matmul.dot_tf32`` with TF32 inputs;
- ``matmul.gemv``: a few rows (at most `GEMV_PATH_MAX_ROWS`) as matrix-vector products, the
  weight streamed once; its parameter ``block_n`` (``tg.gpu_block_n``), the columns per program
  (`gemv_block_n`: by default enough programs to keep every SM streaming);
  ``matmul.gemv_bf16`` the same streaming a bfloat16 copy of the weight (made once when the
  graph is bound: half the bytes, each weight rounded to 8 mantissa bits, products and sums in
  float32), ``matmul.gemv_int8`` an int8 copy with a float32 scale per output column (a quarter
  of the bytes; ``round(w / scale)``, ``scale = max |column| / 127``, as the CPU's int8 panels):
  ``compile_decoder(device="cuda", weight_format="bf16" | "int8")`` pins them on the decode step.

`attention`: ``attention.flash`` (``tl.dot`` at IEEE float32) or ``attention.flash_tf32``; its
parameters the query and key blocks, the warps and ``splits``: the keys of each query block in
that many ranges, each a partial softmax written to a scratch buffer, then one kernel combining
them (flash-decoding: a decode step at a long context has batch x heads programs only).
``attention.library``: PyTorch's own ``scaled_dot_product_attention`` (the backend torch picks
on the device: on an H100 at float32 its memory-efficient kernel, what eager and torch.compile
run) over views of the arena's q, k and v, its result copied into the output's place; grouped
heads' keys and values repeated to every query head first (torch's fused kernels take no
grouped heads at float32). Only where the op means what SDPA computes: no KV cache (its
length is a run-time value), no mask (a query whose every key is masked is 0 here), causal only
over as many keys as queries (SDPA's diagonal starts top-left).

The heuristic (`heuristic`): cuBLAS from `LIBRARY_MIN_ROWS` output rows on, the gemv for at
most `GEMV_MAX_ROWS` rows, else the ``tl.dot`` kernel; attention at IEEE float32. Everything
float32 by default, as PyTorch's (no TF32 unless a tuner measured it within the tolerance).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation

from tensor_graphs.codegen.triton.expressions import TritonCodegenError
from tensor_graphs.lowering.tensor_to_buffer.kernels import GPU_KERNEL_ATTR, GPU_PARAMETER_ATTRS

#: From this many rows of the output on, the heuristic runs a float32 GEMM in the vendor library
#: (``tl.dot`` at IEEE float32 has no tensor cores, cuBLAS's SGEMM is the faster float32 GEMM:
#: GPT-2 small's forward at 128 tokens on an H100, 6.5 ms with every GEMM in Triton, 5.0 with
#: cuBLAS); fewer rows (a decode step) stay one Triton kernel with the epilogue fused.
LIBRARY_MIN_ROWS = 32
#: At most this many rows (a decode step's, all batch dims folded): the heuristic's gemv
GEMV_MAX_ROWS = 4
#: ... and the most rows the gemv path runs at all (each row its own accumulator)
GEMV_PATH_MAX_ROWS = 16
#: A matrix-vector product streams its weight: it wants many programs in flight on every SM
#: (an H100 has 132), so its columns per program shrink (to `GEMV_BLOCK_N_RANGE`'s least) until
#: there are this many programs: Qwen3-0.6B's 1024-column GEMVs run 128 programs of 8 columns,
#: not 32 of 32.
GEMV_MIN_PROGRAMS = 256
#: the columns per program a gemv may take (powers of two)
GEMV_BLOCK_N_RANGE = (8, 64)
#: ... and the weight elements of its tile per K step (``BK = GEMV_TILE / block_n``, within K)
GEMV_TILE = 4096
#: A gemv of at most this many rows keeps each row's products in a tile of its own through the
#: K loop and sums them once after it: summed over the tile's K at every step, the sum crosses
#: warps, and on sm_90 each K step then waits at 3 barriers (and ~40 shuffles) before the next
#: tile's loads can issue; the loop of the deferred sum has none (`ptxas` and the PTX of
#: `benchmarks/gpu_kernels.py`'s kernels). Its cost is registers, a `GEMV_TILE`-element tile per
#: row (32 per thread at 4 warps): ptxas gives 1 row 42 to 80 registers, 2 rows 93 to 127 (at
#: least 4 programs a multiprocessor), 4 rows 166 to 232 (2 or 3): more rows sum at every step.
GEMV_DEFERRED_MAX_ROWS = 2


@dataclass(frozen=True)
class GpuVariant:
    """One way to run an op on the GPU; ``applies(op)`` is None when it can run ``op`` (the tg
    op or its buf kernel: operands ``a, b[, acc]`` / ``q, k, v[, mask]``), else why not."""

    name: str
    applies: Callable[[Operation], str | None]


def _shape(value) -> tuple[int, ...]:
    return tuple(value.type.get_shape())


def _float32(op: Operation) -> str | None:
    types = {str(v.type.get_element_type()) for v in op.operands[:3]}  # type: ignore[attr-defined]
    return None if types == {"f32"} else f"float32 operands only, got {', '.join(sorted(types))}"


def _rows(op: Operation) -> int:
    """The output rows of a GEMM, batch dims folded in."""
    out = _shape(op.results[0] if op.results else op.operands[-1])
    n = 1
    for d in out[:-1]:
        n *= d
    return n


def _transposes(op: Operation) -> tuple[bool, bool]:
    flags = op.flags  # type: ignore[attr-defined]
    return bool(flags[0]), bool(flags[1])


def _gemv_applies(op: Operation) -> str | None:
    if (why := _float32(op)) is not None:
        return why
    if _transposes(op)[0]:
        return "a transposed lhs"
    if len(_shape(op.operands[1])) != 2:
        return "a batched rhs"
    if _rows(op) > GEMV_PATH_MAX_ROWS:
        return f"{_rows(op)} rows (at most {GEMV_PATH_MAX_ROWS})"
    return None


def _is_weight(value) -> bool:
    owner = value.owner
    return getattr(owner, "name", "") in ("tg.weight", "buf.weight")


def _library_attention_applies(op: Operation) -> str | None:
    """Whether torch's SDPA computes what ``op`` means (`attention.library`)."""
    if (why := _float32(op)) is not None:
        return why
    if op.kv_cache.value.data:  # type: ignore[attr-defined]
        return "a KV cache (its valid length is a run-time value)"
    if (op.mask if op.name == "tg.attention" else op.inputs[3:]):  # type: ignore[attr-defined]  # buf: ins(q, k, v[, mask])
        return "an additive mask (a query whose every key is masked is 0 here, not what SDPA gives)"
    q, k = op.heads_major_shapes()[:2]  # type: ignore[attr-defined]
    if op.causal.value.data and q[-2] != k[-2]:  # type: ignore[attr-defined]
        return (f"causal with {k[-2]} keys against {q[-2]} {'query' if q[-2] == 1 else 'queries'} "
                "(SDPA's causal diagonal starts top-left)")
    return None


def _gemv_copy_applies(op: Operation) -> str | None:
    """A gemv over a copy of its weight in another format (made when the graph is bound)."""
    if (why := _gemv_applies(op)) is not None:
        return why
    return None if _is_weight(op.operands[1]) else "the rhs is not a weight (its copy is made when the graph is bound)"


#: op name (tg or buf, without the dialect) -> its GPU variants, the heuristic's order
GPU_VARIANTS: dict[str, tuple[GpuVariant, ...]] = {
    "matmul": (
        GpuVariant("matmul.library", _float32),
        GpuVariant("matmul.library_tf32", _float32),
        GpuVariant("matmul.dot", _float32),
        GpuVariant("matmul.dot_tf32", _float32),
        GpuVariant("matmul.gemv", _gemv_applies),
        GpuVariant("matmul.gemv_bf16", _gemv_copy_applies),
        GpuVariant("matmul.gemv_int8", _gemv_copy_applies),
    ),
    "attention": (
        GpuVariant("attention.flash", lambda op: None),
        GpuVariant("attention.flash_tf32", lambda op: None),
        GpuVariant("attention.library", _library_attention_applies),
    ),
}


#: Triton's warps per program unless a tuner pinned others (``tg.gpu_warps``), and the others tried
DEFAULT_WARPS, WARPS = 4, (2, 8)
#: attention's query and key blocks: the allowed range (powers of two) and the values tried
ATTENTION_BLOCKS = (16, 128)
#: the key ranges attention may split its keys into (`attention_splits`) and the values tried
ATTENTION_SPLITS_RANGE, ATTENTION_SPLITS = (1, 64), (1, 2, 4, 8, 16)
#: By default attention splits its keys (flash-decoding) when its query blocks make fewer
#: programs than this (a decode step: batch x heads of one query each, or batch x kv heads
#: packed: `attention_programs`; an H100 has 132 SMs), into
#: as many ranges as make that many programs, each of at least `ATTENTION_SPLIT_MIN_KEYS` keys.
ATTENTION_MIN_PROGRAMS = 128
ATTENTION_SPLIT_MIN_KEYS = 256
#: By default a block of queries (of keys) holds at most 64 rows and at most this many float32
#: values with the head dim (its q and accumulator tiles, its k and v tiles stay in registers:
#: head dim 64 takes blocks of 64, head dim 128 blocks of 32); fewer queries while the blocks
#: make fewer than `ATTENTION_MIN_PROGRAMS` programs (GPT-2's 12 heads at 128 tokens: 96
#: programs of 16 queries, not 24 of 64 on an H100's 132 SMs)
ATTENTION_TILE = 4096
#: ... but at IEEE float32 (``attention.flash``) a key block holds this many keys: ``tl.dot`` at
#: IEEE float32 runs on the FMA units, its operand layouts copy the tiles across threads, and
#: with 32 keys or more ptxas spills registers at some head dims (sm_90, 4 warps, Triton 3.6:
#: head dim 64 in 64 x 64 blocks spills 16.8 KB per thread, 64 x 32 428 bytes, head dim 128 in
#: 32 x 32 396 bytes); every query block up to the tile with 16 keys and 4 or 8 warps spills none, head dims
#: 32 to 256 (`benchmarks/gpu_kernels.py --attention`, `tests/test_triton_sm90.py`). The
#: narrower block costs little where a wider one would not spill: per key block the online
#: softmax rescales ``block_m x head_dim`` values against ``2 x block_m x 16 x head_dim`` FMAs of
#: the two products (3%). TF32's tensor-core layouts take the tile's keys unspilled.
ATTENTION_IEEE_KEY_BLOCK = 16
ATTENTION_BLOCK_M, ATTENTION_BLOCK_N = (16, 32, 64), (16, 32, 64)


def _gemv_space(op: Operation) -> dict[str, list[int]]:
    lo, hi = GEMV_BLOCK_N_RANGE
    return {"block_n": [b for b in (8, 16, 32, 64) if lo <= b <= hi], "warps": list(WARPS)}


def _attention_space(op: Operation) -> dict[str, list[int]]:
    return {"block_m": list(ATTENTION_BLOCK_M), "block_n": list(ATTENTION_BLOCK_N), "warps": sorted({DEFAULT_WARPS, *WARPS}),
            "splits": list(ATTENTION_SPLITS)}


#: variant -> its parameters and the values worth measuring (the default always is)
GPU_PARAMETER_SPACES: dict[str, Callable[[Operation], dict[str, list[int]]]] = {
    "matmul.gemv": _gemv_space,
    "matmul.gemv_bf16": _gemv_space,
    "matmul.gemv_int8": _gemv_space,
    "matmul.dot": lambda op: {"warps": list(WARPS)},
    "matmul.dot_tf32": lambda op: {"warps": list(WARPS)},
    "attention.flash": _attention_space,
    "attention.flash_tf32": _attention_space,
}


def parameter(op: Operation, name: str, default: int, allowed: tuple[int, int]) -> int:
    """The GPU parameter ``name`` (`GPU_PARAMETER_ATTRS`) ``op`` pins, checked to be a power of
    two within ``allowed``, else ``default``."""
    attr = op.attributes.get(GPU_PARAMETER_ATTRS[name])
    if attr is None:
        return default
    lo, hi = allowed
    value = getattr(getattr(attr, "value", None), "data", None)
    if not isinstance(value, int) or value < 1 or value & (value - 1) or not lo <= value <= hi:
        raise TritonCodegenError(f"{op.name}: {GPU_PARAMETER_ATTRS[name]} must be a power of two in [{lo}, {hi}], got {attr}")
    return value


def warps(op: Operation) -> int | None:
    """The warps per program ``op``'s Triton kernels launch with when a tuner pinned them
    (``tg.gpu_warps``, 1 to 16), else None (Triton's default, `DEFAULT_WARPS`)."""
    return parameter(op, "warps", DEFAULT_WARPS, (1, 16)) if GPU_PARAMETER_ATTRS["warps"] in op.attributes else None


#: From this head dim on, attention's query-block programs (over all keys or a range of them)
#: run `ATTENTION_WIDE_WARPS` warps by default (Triton's default is 4; the kernel combining key
#: ranges keeps it, 80 registers): a block's q and accumulator tiles of 16 x 256 float32 spread over
#: twice the threads. With 4, a decode step's partial-softmax kernel at head dim 256 spills
#: registers on sm_90 (16 queries x 16 keys, two key ranges: 96 registers, 4 bytes spilled);
#: with 8 no kernel at that head dim does (64 to 77 registers; `tests/test_triton_sm90.py`).
ATTENTION_WIDE_HEAD_DIM, ATTENTION_WIDE_WARPS = 256, 8


def attention_warps(op: Operation, head_dim: int) -> int | None:
    """The warps an attention's programs launch with: pinned (``tg.gpu_warps``), else
    `ATTENTION_WIDE_WARPS` from `ATTENTION_WIDE_HEAD_DIM` on, else None (Triton's default)."""
    if GPU_PARAMETER_ATTRS["warps"] in op.attributes:
        return warps(op)
    return ATTENTION_WIDE_WARPS if head_dim >= ATTENTION_WIDE_HEAD_DIM else None


def attention_blocks(op: Operation, queries: int, keys: int, head_dim: int, rows: int) -> tuple[int, int]:
    """(queries, keys) per block of an attention of ``rows`` (batch x heads) query matrices:
    pinned (``tg.gpu_block_m``, ``tg.gpu_block_n``, 16 to 128), else `attention_defaults`."""
    bm, bn = attention_defaults(selected(op), queries, keys, head_dim, rows)
    return parameter(op, "block_m", bm, ATTENTION_BLOCKS), parameter(op, "block_n", bn, ATTENTION_BLOCKS)


def attention_programs(queries: int, heads: int, kv_heads: int, batch: int, block_m: int) -> tuple[bool, int]:
    """(packed, programs) of an attention's blocks of ``block_m`` queries: with grouped-query
    heads whose queries all fit one block (``queries x group <= block_m``: a decode step) the
    rows of a block are every query of a kv head's group (packed: one program per batch and kv
    head, its keys and values read once for the group); else one program per query block,
    batch and head."""
    group = heads // max(kv_heads, 1)
    if group > 1 and queries * group <= block_m:
        return True, batch * kv_heads
    return False, -(-queries // block_m) * batch * heads


def attention_splits(op: Operation, programs: int, keys: int) -> int:
    """The key ranges of an attention whose query blocks make ``programs`` programs over
    ``keys`` keys: pinned (``tg.gpu_splits``), else `default_splits`."""
    return parameter(op, "splits", default_splits(programs, keys), ATTENTION_SPLITS_RANGE)


def default_splits(programs: int, keys: int) -> int:
    """1 when the query blocks make `ATTENTION_MIN_PROGRAMS` programs; else the power of two
    that reaches it, as long as each range keeps `ATTENTION_SPLIT_MIN_KEYS` keys."""
    splits = 1
    while (programs * splits < ATTENTION_MIN_PROGRAMS and keys // (2 * splits) >= ATTENTION_SPLIT_MIN_KEYS
           and 2 * splits <= ATTENTION_SPLITS_RANGE[1]):
        splits *= 2
    return splits


def attention_defaults(variant: str, queries: int, keys: int, head_dim: int, rows: int) -> tuple[int, int]:
    """The blocks ``variant`` takes by default: queries up to 64 and `ATTENTION_TILE` values with
    the head dim, halved (to 16, ``tl.dot``'s least) while they make fewer than
    `ATTENTION_MIN_PROGRAMS` programs over the ``rows`` query matrices; keys as many, or
    `ATTENTION_IEEE_KEY_BLOCK` at IEEE float32."""
    most = max(16, min(64, ATTENTION_TILE // _pow2(head_dim)))
    bm = max(16, min(most, _pow2(queries)))
    while bm > 16 and -(-queries // bm) * rows < ATTENTION_MIN_PROGRAMS:
        bm //= 2
    bn = max(16, min(most, _pow2(keys))) if variant == "attention.flash_tf32" else ATTENTION_IEEE_KEY_BLOCK
    return bm, bn


def _pow2(n: int) -> int:
    return 1 << max(0, (max(1, n) - 1).bit_length())


def gemv_block_n(op: Operation, columns: int) -> int:
    """The columns per program of a gemv of ``columns`` output columns: pinned
    (``tg.gpu_block_n``: a power of two in `GEMV_BLOCK_N_RANGE`), else `default_block_n`."""
    return parameter(op, "block_n", default_block_n(columns, not _transposes(op)[1]), GEMV_BLOCK_N_RANGE)


#: A weight stored ``[K, N]`` (GPT-2's Conv1D) is read along its rows of N: a gemv block of
#: fewer columns than this would read less than a 128-byte line of each row at a time
ROW_MAJOR_MIN_BLOCK_N = 32


def default_block_n(columns: int, row_major: bool = False) -> int:
    """The widest gemv block (in `GEMV_BLOCK_N_RANGE`) that still makes `GEMV_MIN_PROGRAMS`
    programs; for a ``[K, N]`` weight (``row_major``: columns contiguous) at least
    `ROW_MAJOR_MIN_BLOCK_N`."""
    lo, hi = GEMV_BLOCK_N_RANGE
    lo = max(lo, ROW_MAJOR_MIN_BLOCK_N) if row_major else lo
    block = hi
    while block > lo and columns // block < GEMV_MIN_PROGRAMS:
        block //= 2
    return block


def parameter_defaults(op: Operation, variant: str) -> dict[str, int]:
    """The parameters ``variant`` takes for ``op`` when none is pinned."""
    defaults = {"warps": DEFAULT_WARPS}
    if variant in GEMV_VARIANTS:
        out = op.results[0] if op.results else op.operands[-1]
        defaults["block_n"] = default_block_n(_shape(out)[-1], not _transposes(op)[1])
    elif variant in ("attention.flash", "attention.flash_tf32"):
        q, k = op.heads_major_shapes()[:2]  # type: ignore[attr-defined]
        rows = 1
        for n in q[:-2]:
            rows *= n
        defaults["block_m"], defaults["block_n"] = attention_defaults(variant, q[-2], k[-2], q[-1], rows)
        defaults["warps"] = attention_warps(op, _pow2(q[-1])) or DEFAULT_WARPS
        _, programs = attention_programs(q[-2], q[-3], k[-3], rows // q[-3], defaults["block_m"])
        defaults["splits"] = default_splits(programs, k[-2])
    return defaults


def op_kind(op: Operation) -> str:
    """``tg.matmul`` / ``buf.matmul`` -> ``matmul``."""
    return op.name.split(".", 1)[1]


def variants(op: Operation) -> tuple[GpuVariant, ...]:
    return GPU_VARIANTS.get(op_kind(op), ())


def heuristic(op: Operation) -> str:
    """The variant the GPU path takes for ``op`` when nothing is pinned (see the module doc)."""
    kind = op_kind(op)
    if kind == "matmul":
        if _rows(op) >= LIBRARY_MIN_ROWS:
            return "matmul.library"
        if _rows(op) <= GEMV_MAX_ROWS and _gemv_applies(op) is None:
            return "matmul.gemv"
        return "matmul.dot"
    if kind == "attention":
        return "attention.flash"
    raise TritonCodegenError(f"'{op.name}' has no GPU variants")


def selected(op: Operation) -> str:
    """The variant that runs ``op``: the one it pins (``tg.gpu_kernel``, checked: a name of its
    variants that applies), else the heuristic's."""
    attr = op.attributes.get(GPU_KERNEL_ATTR)
    if attr is None:
        return heuristic(op)
    if not isinstance(attr, StringAttr):
        raise TritonCodegenError(f"{op.name}: {GPU_KERNEL_ATTR} must be a variant's name (a string), got {attr}")
    named = {v.name: v for v in variants(op)}
    if attr.data not in named:
        raise TritonCodegenError(f"{op.name} pins GPU kernel '{attr.data}' ({GPU_KERNEL_ATTR}), which is not one of its "
                                 f"variants: {', '.join(named) or 'none'}")
    if (why := named[attr.data].applies(op)) is not None:
        raise TritonCodegenError(f"{op.name} pins GPU kernel '{attr.data}' ({GPU_KERNEL_ATTR}), which cannot run it: {why}")
    return attr.data


#: ``compile_decoder(device="cuda", weight_format=...)`` -> the variant its matrix-vector products are pinned to
WEIGHT_FORMATS = {"bf16": "matmul.gemv_bf16", "int8": "matmul.gemv_int8"}
#: the matrix-vector variants, by the format of the weight they read (None: as stored, float32)
GEMV_VARIANTS = {"matmul.gemv": None, "matmul.gemv_bf16": "bf16", "matmul.gemv_int8": "int8"}
