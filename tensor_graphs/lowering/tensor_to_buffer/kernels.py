"""Kernel paths: the registry of ways each `tg` op can run at the `buf` level.

An op may run by more than one path (a fused kernel or its decomposition, BLAS or an emitted
loop, a zero-copy view or a copy, ...). `convert-tensor-to-buffer` never hard-wires the choice:
it asks this registry. A variant is either

- a :class:`KernelVariant`: one `buf` kernel call writing a fresh output buffer (plus, when
  its ``scratch`` says so, a scratch buffer passed as the kernel's second output), or
- an :class:`AliasVariant`: no kernel at all, the result is a zero-copy view of the op's
  first operand (``buf.reshape``, ``buf.subview``); e.g. a contiguous ``tg.slice``.

Each variant says whether it applies to a given op (and why not). Today :func:`select_kernel`
takes the first variant that applies, unless the op pins one by name with the attribute
``tg.kernel`` (`KERNEL_ATTR`: a tuner's choice, replayed by `tg-opt`); a tuner can enumerate
:func:`applicable_kernels` (`tuning.paths.kernel_paths`), time each, and pin its pick.

```python
register_kernel(tg.ReluOp, KernelVariant("relu.loop", build=lambda op, ins, out: buf.ReluOp(ins, [out])))
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Union

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    DenseArrayBase,
    Float32Type,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    TensorType,
    UnregisteredOp,
    f32,
    f64,
    i8,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from tensor_graphs import dtypes
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects import tensor as tg
from tensor_graphs.dialects.shapes import ATTENTION_OPERANDS, numel
from tensor_graphs.lowering.tensor_to_buffer.scratch import attention_scratch_type
from tensor_graphs.dialects.packing import INT4_SCHEMES, Bf16RowsLayout, Int4Scheme, PanelLayout
from tensor_graphs.dialects.symbolic import dims_of, shaped_memref, simplify, symbols_of, upper_bound
from tensor_graphs.target import TARGET_ATTR, Target, of_module
from tensor_graphs.dialects.tensor import TABLE_NAME

#: ``applies(op)``: ``None`` when the variant can run ``op``, else the reason it cannot.
Applies = Callable[[Operation], "str | None"]
#: ``build(op, inputs, output)``: the `buf` kernel op computing ``op`` from ``inputs`` (the
#: buffers of ``op``'s operands, in operand order) into ``output``, or a list of ops: views of
#: ``output`` (``buf.reshape``) and, last, the kernel writing through them. Not inserted anywhere.
#: A variant with ``scratch`` is called as ``build(op, inputs, output, scratch)``.
Build = Callable[..., buf.KernelOp]
#: ``scratch(op, threads, target)``: the type of the scratch buffer the kernel needs for ``op``
#: when it may run on up to ``threads`` threads on ``target`` (its tiles' sizes), or None.
Scratch = Callable[[Operation, int, Target], "MemRefType | None"]
#: ``prepare(op, inputs, target)``: ops to insert before the kernel and the kernel's new inputs
#: (``target``: the machine compiled for, e.g. the width of packed panels).
Prepare = Callable[[Operation, Sequence[SSAValue], Target], "tuple[list[Operation], list[SSAValue]]"]
#: ``build(op, input, result_type)``: the alias op (one result of ``result_type``) viewing
#: ``input`` (the buffer of ``op``'s first operand). Not inserted anywhere.
BuildAlias = Callable[[Operation, SSAValue, MemRefType], Operation]

#: `buf` ops whose result is the same bytes as (part of) their input: zero-copy views.
ALIAS_OPS = buf.ALIAS_OPS


def _always(op: Operation) -> str | None:
    return None


@dataclass(frozen=True)
class KernelVariant:
    """One way to run a `tg` op as a `buf` kernel call."""

    name: str
    build: Build
    applies: Applies = field(default=_always)
    description: str = ""
    #: When set and it returns a type for an op, the lowering allocates a buffer of that type
    #: (planned like any other, live for this op only) and passes it as the second output.
    scratch: Scratch | None = None
    #: When set, ``prepare(op, inputs, target)`` returns ops to insert before the kernel and the
    #: inputs to build it from (a weight replaced by its packed copy, say).
    prepare: Prepare | None = None
    #: True when the kernel is a packed GEMM: it reads a weight in a packed copy made when the
    #: graph is loaded, or packs its activation rhs itself (a convolution's windows).
    #: `convert-tensor-to-buffer{pack-weights=false}` skips such variants: BLAS runs every GEMM.
    packs_weights: bool = False
    #: The least error (max relative to the output's magnitude) its arithmetic gives on data that
    #: is not exact in it (bf16 rounding: about 2^-9 per operand): a tuner does not measure it
    #: under a tolerance below this (0: as exact as float32).
    error_floor: float = 0.0


def error_floor(op: Operation, variant: str) -> float:
    """`KernelVariant.error_floor` of ``op``'s variant named ``variant`` (0 when it has none)."""
    found = next((v for v in variants_for(op) if v.name == variant), None)
    return found.error_floor if isinstance(found, KernelVariant) else 0.0


@dataclass(frozen=True)
class AliasVariant:
    """A zero-copy way to run a `tg` op: its result is a view of its first operand's buffer."""

    name: str
    build: BuildAlias
    applies: Applies = field(default=_always)
    description: str = ""


Variant = Union[KernelVariant, AliasVariant]


def op_name(op: Operation) -> str:
    """The op's name as written, also for ops parsed with ``--allow-unregistered-dialect``."""
    return op.op_name.data if isinstance(op, UnregisteredOp) else op.name


class NoKernelError(ValueError):
    """No registered kernel variant can run an op; the message lists every variant's reason."""


#: tg op class -> its variants, in order of preference.
KERNELS: dict[type[Operation], list[Variant]] = {}


def register_kernel(op_cls: type[Operation], variant: Variant, *, prefer: bool = False) -> Variant:
    """Add ``variant`` for ``op_cls`` (last, or first with ``prefer=True``); replaces one of the same name."""
    variants = [v for v in KERNELS.get(op_cls, []) if v.name != variant.name]
    if prefer:
        variants.insert(0, variant)
    else:
        variants.append(variant)
    KERNELS[op_cls] = variants
    return variant


def variants_for(op: Operation) -> list[Variant]:
    """Every registered variant for ``op``'s class (applicable or not)."""
    return list(KERNELS.get(type(op), []))


def applicable_kernels(op: Operation) -> list[Variant]:
    """The variants that can run ``op``, in order of preference (what a tuner enumerates)."""
    return [v for v in variants_for(op) if v.applies(op) is None]


#: The discardable attribute of a `tg` op that pins the variant running it (a name of
#: `variants_for`): written by a tuner (`tuning.paths.pin`), replayed by `tg-opt`.
KERNEL_ATTR = "tg.kernel"
#: The GEMM over float32 panels of its weight packed at load time (a tied table's embedding
#: gathers from the same panels: `_table_packed_by_a_gemm`)
PACKED_F32_GEMM = "matmul.packed"

#: The kernel parameters a `tg` op may set for its kernel, by name, and the discardable
#: attribute carrying each (`tuning.paths` enumerates them): `convert-tensor-to-buffer` copies
#: them from the tg op onto the buf kernel op, where the LLVM lowering reads them::
#:
#:     %y = tg.matmul %x, %w {tg.kernel = "matmul.packed", tg.k_block = 128 : i64, tg.threads = 1 : i64}
#:
#: ``k_block``: a packed GEMM's K block (`kernels_gemm.k_block`); ``mr``: the rows of its register
#: tile (`kernels_gemm.TILE_ROWS_ATTR`); ``nr``: the columns of its panels (`panel_columns`: read
#: here, where the weight is packed, and by the kernel from the panels' shape);
#: ``separate_epilogue``: 1 runs a GEMM's epilogue (accumulator, residual, activation) as a
#: second sweep over its output instead of on each register tile (`kernels_gemm.SEPARATE_EPILOGUE_ATTR`);
#: ``threads``: the most threads the kernel's parallel region starts; ``chunks``: the guided
#: schedule's chunks per thread (`parallel_region.CHUNKS_ATTR`).
PARAMETER_ATTRS: dict[str, str] = {
    "k_block": "tg.k_block",
    "mr": "tg.mr",
    "nr": "tg.nr",
    "separate_epilogue": "tg.separate_epilogue",
    "threads": "tg.threads",
    "chunks": "tg.chunks",
}
#: The discardable attribute of a `tg` op pinning the variant that runs it on the GPU (a name of
#: `codegen.triton.paths.GPU_VARIANTS`: ``"matmul.dot_tf32"``): a GPU tuner's choice, carried
#: to the buf kernel as the parameters are and read by the Triton lowering; the CPU ignores it.
GPU_KERNEL_ATTR = "tg.gpu_kernel"
#: The GPU variants' parameters by name and their attributes (`codegen.triton.paths`):
#: ``block_n``, the output columns per program of a matrix-vector kernel or the keys per block of
#: attention; ``block_m``, attention's queries per program; ``warps``, the warps per program of
#: the op's Triton kernels (Triton's ``num_warps``); ``splits``, the key ranges attention splits
#: each query block's keys into (flash-decoding: partial softmaxes, then their combination).
GPU_PARAMETER_ATTRS: dict[str, str] = {"block_n": "tg.gpu_block_n", "block_m": "tg.gpu_block_m", "warps": "tg.gpu_warps",
                                       "splits": "tg.gpu_splits"}
#: What `convert-tensor-to-buffer` copies from a tg op onto its buf kernel.
CARRIED_ATTRS: tuple[str, ...] = (*PARAMETER_ATTRS.values(), GPU_KERNEL_ATTR, *GPU_PARAMETER_ATTRS.values())

#: The attribute pinning a packed GEMM's panel width (`PARAMETER_ATTRS`).
PANEL_COLUMNS_ATTR = PARAMETER_ATTRS["nr"]


def panel_columns(op: Operation, target: Target, n: int) -> int:
    """Columns per panel of the packed GEMM ``op`` with ``n`` output columns: its ``tg.nr``
    (whole vectors, at most the target's widest register tile), else the target's
    `Target.panel_columns_for`."""
    attr = op.attributes.get(PANEL_COLUMNS_ATTR)
    if attr is None:
        return target.panel_columns_for(n)
    widest = target.panel_columns
    nr = attr.value.data if isinstance(attr, IntegerAttr) else None
    if nr is None or nr < 1 or nr % target.float_lanes or nr > widest:
        raise NoKernelError(
            f"'{op_name(op)}': {PANEL_COLUMNS_ATTR} must be whole vectors of {target.float_lanes} floats up to "
            f"{widest} columns on {target.name}, got {attr}"
        )
    return nr


def _pinned(op: Operation, variants: list[Variant]) -> Variant | None:
    """The variant ``op`` pins with ``tg.kernel``, checked; None when it pins none."""
    attr = op.attributes.get(KERNEL_ATTR)
    if attr is None:
        return None
    every = variants_for(op)
    if not isinstance(attr, StringAttr):
        raise NoKernelError(f"'{op_name(op)}': {KERNEL_ATTR} must be a variant's name (a string), got {attr}")
    chosen = next((v for v in every if v.name == attr.data), None)
    if chosen is None:
        names = ", ".join(v.name for v in every) or "none registered"
        raise NoKernelError(f"'{op_name(op)}' pins kernel '{attr.data}' ({KERNEL_ATTR}), which is not one of its variants: {names}")
    if chosen not in variants:
        raise NoKernelError(
            f"'{op_name(op)}' pins kernel '{attr.data}' ({KERNEL_ATTR}), which reads a weight packed at load time: "
            "pack-weights=false rules it out"
        )
    if (why := chosen.applies(op)) is not None:
        raise NoKernelError(f"'{op_name(op)}' pins kernel '{attr.data}' ({KERNEL_ATTR}), which cannot run it: {why}")
    return chosen


def select_kernel(
    op: Operation,
    choose: Callable[[Operation, list[Variant]], Variant] | None = None,
    *,
    pack_weights: bool = True,
) -> Variant:
    """The variant that runs ``op``: the one it pins (``tg.kernel``, `KERNEL_ATTR`), else the
    first applicable one, or ``choose(op, applicable)``. Without ``pack_weights``, variants that
    read packed weights are not considered.

    Raises :class:`NoKernelError` naming the op and each variant's reason when none applies, or
    why a pinned variant cannot run it.
    """
    variants = [v for v in variants_for(op) if pack_weights or not getattr(v, "packs_weights", False)]
    if (pinned := _pinned(op, variants)) is not None:
        return pinned
    if not variants and variants_for(op):
        raise NoKernelError(
            f"every kernel of '{op_name(op)}' reads a weight transformed at load time, which "
            "pack-weights=false rules out (compile with pack_weights=True)"
        )
    if not variants:
        raise NoKernelError(
            f"no buf kernel is registered for '{op_name(op)}' "
            "(register one with tensor_graphs.lowering.tensor_to_buffer.kernels.register_kernel)"
        )
    reasons = [(v, v.applies(op)) for v in variants]
    ok = [v for v, why in reasons if why is None]
    if not ok:
        why = "; ".join(f"{v.name}: {r}" for v, r in reasons)
        raise NoKernelError(f"no buf kernel can run this '{op_name(op)}': {why}")
    return choose(op, ok) if choose is not None else ok[0]


# --------------------------------------------------------------------------- helpers


def _shape(value: SSAValue) -> tuple[int, ...]:
    """The shape kernels are chosen for: a symbolic dim (`dialects.symbolic`) at the top of its
    range, so that a variant chosen for the largest size serves every size (its kernel reads the
    sizes at run time). Offsets and types use `_dims`."""
    shape = value.type.get_shape()  # type: ignore[attr-defined]
    if DYNAMIC_INDEX not in shape:
        return tuple(shape)
    return buf.max_shape(value.type, value.owner if isinstance(value.owner, Operation) else value.owner.parent_op())


def _dims(value: SSAValue) -> tuple:
    """Ints, and an expression of the symbols for each dynamic dim (`dialects.symbolic`)."""
    return dims_of(value.type)


def _all_f32(op: Operation) -> str | None:
    for v in (*op.operands, *op.results):
        el = v.type.element_type if isinstance(v.type, TensorType) else None
        if not isinstance(el, Float32Type):
            return f"cblas_sgemm needs f32 operands, got {v.type}"
    return None


def _one_numeric_dtype(op: Operation) -> str | None:
    """Operands and result of one dtype, a float32, float64 or integer one (torch refuses bool
    products; float16/bfloat16 ones compute in float32 after `widen-dtypes`)."""
    elements = {v.type.element_type for v in (*op.operands, *op.results) if isinstance(v.type, TensorType)}
    if len(elements) != 1:
        return f"operands of several dtypes: {', '.join(sorted(map(str, elements)))}"
    (el,) = elements
    if not (el in (f32, f64) or (isinstance(el, IntegerType) and el.width.data > 1)):
        return f"no matmul kernel for {el}"
    return None


def _same_props(kernel: type[buf.KernelOp], *names: str, **fixed) -> Build:
    """Build ``kernel`` copying the properties ``names`` of the tg op and adding ``fixed`` ones
    (a callable in ``fixed`` is called with the op)."""

    def build(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
        props = {n: op.properties[n] for n in names if n in op.properties}
        props.update({k: v(op) if callable(v) else v for k, v in fixed.items()})
        return kernel(ins, [out], props)

    return build


def _register_all(op_cls: type[Operation], *variants: Variant) -> None:
    for v in variants:
        register_kernel(op_cls, v)


# --------------------------------------------------------------------------- zero-copy paths


def contiguous_slice_offset(shape: Sequence[int], dim: int, start: int, step: int, size: int) -> int | None:
    """Element offset of ``x[..., start : start + step * size : step, ...]`` (along ``dim``) in a
    row-major ``x`` of ``shape`` when those elements are one contiguous run; None otherwise.

    Contiguous when the slice is empty, or takes one index or steps by 1 along ``dim`` and
    either every dim before ``dim`` has size 1 or the slice covers all of ``dim``.
    """
    outer, inner = numel(shape[:dim]), numel(shape[dim + 1 :])
    if not all(isinstance(x, int) for x in (outer, inner, size)):  # symbolic sizes: never empty
        if size != 1 and step != 1:
            return None
    elif size == 0 or outer == 0 or inner == 0:
        return 0
    elif size > 1 and step != 1:
        return None
    if outer == 1 or size == shape[dim]:
        offset = simplify(start * inner)
        return offset if isinstance(offset, int) else None  # a symbolic offset: not a constant view
    return None


def _slice_offset(op: Operation) -> int | None:
    assert isinstance(op, tg.SliceOp)
    dim, start, step = op.bounds
    return contiguous_slice_offset(_dims(op.input), dim, start, step, _dims(op.result)[dim])


def _slice_is_contiguous(op: Operation) -> str | None:
    if _slice_offset(op) is not None:
        return None
    assert isinstance(op, tg.SliceOp)
    dim, _, step = op.bounds
    if step != 1:
        return f"step {step} along dim {dim} is not contiguous"
    return f"dims before dim {dim} of {list(_shape(op.input))} are not all 1 and the slice is not the full range"


def _subview(op: Operation, src: SSAValue, type: MemRefType) -> Operation:
    offset = _slice_offset(op)
    assert offset is not None
    return buf.SubviewOp(src, offset, type)


def _reshape(op: Operation, src: SSAValue, type: MemRefType) -> Operation:
    return buf.ReshapeOp(src, type)


def _same_numel(op: Operation) -> str | None:
    a, r = _shape(op.operands[0]), _shape(op.results[0])
    return None if numel(a) == numel(r) else f"{list(a)} -> {list(r)} changes the element count"


def _only_unit_dims_move(op: Operation) -> str | None:
    """A transpose that keeps every dim larger than 1 in order moves no bytes."""
    assert isinstance(op, tg.TransposeOp)
    shape = _shape(op.input)
    moved = [p for p in op.permutation if shape[p] != 1]
    return None if moved == sorted(moved) else "it reorders dims larger than 1"


# --------------------------------------------------------------------------- kernels with extras


def _matmul(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
    assert isinstance(op, tg.MatmulOp)
    props = {k: op.properties[k] for k in ("transpose_a", "transpose_b", "alpha", "beta", "activation") if k in op.properties}
    return buf.MatmulOp(ins, [out], props)


def _packed_matmul_applies(op: Operation) -> str | None:
    """A GEMM by a 2-D f32 weight with at least 16 columns (a transposed lhs is copied
    untransposed first: `_pack_rhs`)."""
    assert isinstance(op, tg.MatmulOp)
    if (why := _all_f32(op)) is not None:
        return why
    w = op.operands[1].owner
    if not isinstance(w, tg.WeightOp):
        return "the rhs is not a weight"
    if len(_shape(op.operands[1])) != 2:
        return f"the weight {list(_shape(op.operands[1]))} is not 2-D"
    n = _shape(op.results[0])[-1]
    if n < 16:
        return f"N = {n} < 16 columns: too narrow to pack"
    return None


def _pack_rhs(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The weight operand becomes a `buf.packed_weight` of it (panels of the target's
    `Target.panel_columns_for` N columns)."""
    assert isinstance(op, tg.MatmulOp)
    w = op.operands[1].owner
    assert isinstance(w, tg.WeightOp)
    transposed = op.properties.get("transpose_b") == tg.bool_attr(True)
    layout = PanelLayout(w.weight_name.data, panel_columns(op, target, _shape(op.results[0])[-1]), transposed)
    packed = buf.PackedWeightOp(layout.source, transposed, MemRefType(Float32Type(), layout.shape(_shape(op.operands[1]))),
                                _shape(op.operands[1]))
    packed.result.name_hint = (op.operands[1].name_hint or "w") + "_packed"
    if op.properties.get("transpose_a") != tg.bool_attr(True):
        return [packed], [ins[0], packed.result, *ins[2:]]
    # a transposed lhs (a [C, HW] feature map as tokens: absorb-blas-flags made its transpose a
    # flag) is copied untransposed, M x K floats, for the register tiles' row-major A
    shape = _shape(op.operands[0])
    rank = len(shape)
    lhs = buf.AllocOp(MemRefType(Float32Type(), (*shape[:-2], shape[-1], shape[-2])))
    lhs.result.name_hint = (op.operands[0].name_hint or "lhs") + "_t"
    perm = DenseArrayBase.from_list(i64, [*range(rank - 2), rank - 1, rank - 2])
    return [packed, lhs, buf.TransposeOp([ins[0]], [lhs.result], {"perm": perm})], [lhs.result, packed.result, *ins[2:]]


def _packed_matmul(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
    props = {k: op.properties[k] for k in ("alpha", "beta", "activation") if k in op.properties}
    return buf.PackedMatmulOp(ins, [out], props)


#: At most this many rows of the lhs for a matrix-vector product over bf16 or int8 panels (each
#: row streams the panel again, from cache): a decode step has one per sequence.
QUANTIZED_MAX_ROWS = 8


def _quantized_applies(op: Operation) -> str | None:
    """A matrix-vector product (a few rows) by a 2-D f32 weight of at least 16 columns, with at
    most a bias ``[N]`` or an accumulator of the output's shape (a residual)."""
    assert isinstance(op, tg.MatmulOp)
    if (why := _packed_matmul_applies(op)) is not None:
        return why
    if op.properties.get("transpose_a") == tg.bool_attr(True):
        return "a transposed lhs"
    rows = numel(_shape(op.operands[0])[:-1])
    if rows > QUANTIZED_MAX_ROWS:
        return f"{rows} rows: not a matrix-vector product (at most {QUANTIZED_MAX_ROWS})"
    out = _shape(op.results[0])
    if len(op.operands) == 3 and _shape(op.operands[2]) not in ((out[-1],), out):
        return f"the accumulator {list(_shape(op.operands[2]))} is neither a bias [N] nor of the output's shape"
    return None


def _paired_panels_apply(op: Operation) -> str | None:
    """A matrix-vector product (`_quantized_applies`) whose panels on the module's target are an
    even number of vectors: the bf16 and int8 panels' kernel converts two halves of each panel
    at a time (N = 48 on AVX-512 makes panels of 3 vectors)."""
    if (why := _quantized_applies(op)) is not None:
        return why
    target = _target_of(op)
    nr = target.panel_columns_for(_shape(op.results[0])[-1])
    if nr % (2 * target.float_lanes):
        return f"panels of {nr} columns on {target.name} are not an even number of vectors of {target.float_lanes} floats"
    return None


#: ``buf.quantized_matvec`` format -> the packed weights it reads: (`packing.FORMATS` name, element type)
QUANTIZED_PARTS: dict[str, tuple[tuple[str, Attribute], ...]] = {
    "bf16": (("bf16", BFloat16Type()),),
    "int8": (("int8", i8), ("int8scales", Float32Type())),
    "bf16dot": (("bf16k", BFloat16Type()),),
    **{scheme.name: tuple(zip(scheme.parts, (i8, BFloat16Type(), i8))) for scheme in INT4_SCHEMES},
    "int4dot": (("int4dot", i8), ("int4dotscales", BFloat16Type())),
}


def _int4_dot_applies(op: Operation) -> str | None:
    """A matrix-vector product (`_quantized_applies`) on a target with byte dot products (VNNI,
    or SSSE3's ``pmaddubsw``: every level above the baseline) whose rows fit the kernel's stack
    as int8."""
    if (why := _quantized_applies(op)) is not None:
        return why
    target = _target_of(op)
    if target.level == "x86-64":
        return f"the target ({target.name}) has no byte dot products (SSSE3's pmaddubsw)"
    a = _shape(op.operands[0])
    if numel(a[:-1]) * a[-1] > BF16_DOT_MAX_STACK:
        return f"the rows of {list(a)} as int8 exceed {BF16_DOT_MAX_STACK // 1024} KiB of the kernel's stack"
    return None


def _target_of(op: Operation) -> Target:
    """The target the module holding ``op`` records (`set-target`), else this machine."""
    top = op.get_toplevel_object()
    recorded = isinstance(top, Operation) and TARGET_ATTR in top.attributes
    return of_module(top) if recorded else Target.host()


def _bf16_dot_applies(op: Operation) -> str | None:
    """A matrix-vector product (`_quantized_applies`) on a target with AVX512-BF16 dot products."""
    if (why := _quantized_applies(op)) is not None:
        return why
    target = _target_of(op)
    if "avx512bf16" not in target.extensions:
        return f"the target ({target.name}) has no AVX512-BF16 dot products"
    a = _shape(op.operands[0])
    if numel(a[:-1]) * -(-a[-1] // 2) * 4 > BF16_DOT_MAX_STACK:
        return f"the rows of {list(a)} as bf16 pairs exceed {BF16_DOT_MAX_STACK // 1024} KiB of the kernel's stack"
    return None


#: The most bytes of activations (as bf16 pairs, or int8) the bf16-dot and int4-dot kernels keep on
#: their stack.
BF16_DOT_MAX_STACK = 64 << 10


def _quantized_prepare(fmt: str) -> Prepare:
    def prepare(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
        """The weight becomes its panels in ``fmt`` (and, for int8, their scales)."""
        assert isinstance(op, tg.MatmulOp)
        w = op.operands[1].owner
        assert isinstance(w, tg.WeightOp)
        transposed = op.properties.get("transpose_b") == tg.bool_attr(True)
        nr = target.panel_columns_for(_shape(op.results[0])[-1])
        made: list[Operation] = []
        for part, element in QUANTIZED_PARTS[fmt]:
            layout = PanelLayout(w.weight_name.data, nr, transposed, part)
            packed = buf.PackedWeightOp(layout.source, transposed, MemRefType(element, layout.shape(_shape(op.operands[1]))),
                                        _shape(op.operands[1]), layout=f"{part}panels")
            packed.result.name_hint = (op.operands[1].name_hint or "w") + f"_{part}"
            made.append(packed)
        return made, [ins[0], *(m.results[0] for m in made), *ins[2:]]

    return prepare


def _quantized_matvec(fmt: str) -> Build:
    def build(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
        props = {k: op.properties[k] for k in ("alpha", "beta", "activation") if k in op.properties}
        return buf.QuantizedMatvecOp(ins, [out], {**props, "format": StringAttr(fmt)})

    return build


def bf16_gemm_extension(target: Target) -> str | None:
    """The instructions the bf16 GEMM (`matmul.packed_bf16`) runs on ``target``: AMX tiles
    (`kernels_amx`), AVX512-BF16 dot products (`bf16_dot`); None
    when it has neither (the kernel's emulation then runs only where a test pins it)."""
    return next((e for e in ("amx-bf16", "avx512bf16") if e in target.extensions), None)


def _no_bf16_dots(op: Operation) -> str | None:
    """Why ``op``'s target cannot run a bf16 GEMM (`bf16_gemm_extension`), or None."""
    target = _target_of(op)
    if bf16_gemm_extension(target) is None:
        return f"the target ({target.name}) has no bf16 dot products (AVX512-BF16)"
    return None


def _packed_bf16_applies(op: Operation) -> str | None:
    """A packed GEMM (`_packed_matmul_applies`) of an untransposed lhs with an even K, on a
    target with bf16 dot products."""
    if (why := _packed_matmul_applies(op)) is not None:
        return why
    if op.properties.get("transpose_a") == tg.bool_attr(True):
        return "a transposed lhs"
    k = _shape(op.operands[0])[-1]
    if k % 2:
        return f"K = {k} is odd: bf16 pairs along K need an even K"
    return _no_bf16_dots(op)


def _packed_int8_applies(op: Operation) -> str | None:
    """A packed GEMM (`_packed_matmul_applies`) of an untransposed lhs on a target with integer
    dot products (`Target.byte_dot_extension`: VNNI)."""
    if (why := _packed_matmul_applies(op)) is not None:
        return why
    if op.properties.get("transpose_a") == tg.bool_attr(True):
        return "a transposed lhs"
    k = _shape(op.operands[0])[-1]
    if k > INT8_MAX_K:
        return f"K = {k} > {INT8_MAX_K}: int32 sums of 255 x 127 products could overflow"
    target = _target_of(op)
    if target.byte_dot_extension is None:
        return f"the target ({target.name}) has no int8 dot products (AVX512-VNNI or AVX-VNNI)"
    return None


#: The longest K of the int8 GEMM: its int32 sums of codes (at most 255 x 127 a product) hold
#: 66,311 products (AMX sums all of K in one tile; the register tiles a K block, or all of K)
INT8_MAX_K = 65536


def _packed_int8_prepare(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The weight becomes its int8 panels in quads along K with their columns' scales
    (``[P, ceil(K / 4) + 2, 4 NR]``, packed at load time), the lhs its rows quantised to int8
    (`buf.quantize_rows`, planned in the arena; one for every GEMM of the same lhs)."""
    w = op.operands[1].owner
    assert isinstance(w, tg.WeightOp)
    transposed = op.properties.get("transpose_b") == tg.bool_attr(True)
    layout = PanelLayout(w.weight_name.data, panel_columns(op, target, _shape(op.results[0])[-1]), transposed, "int8k")
    packed = buf.PackedWeightOp(layout.source, transposed, MemRefType(i8, layout.shape(_shape(w.result))),
                                _shape(w.result), layout="int8kpanels")
    packed.result.name_hint = (w.result.name_hint or "w") + "_int8k"
    k = _shape(op.operands[0])[-1]
    made, lhs = _converted_lhs(op, ins[0], buf.QuantizeRowsOp, i8, (*dims_of(ins[0].type)[:-1], 4 * -(-k // 4) + 4))
    return [packed, *made], [lhs, packed.result, *ins[2:]]


def _packed_bf16_prepare(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The weight becomes its panels of bf16 pairs along K (``[P, K / 2, 2 NR]``, packed at load
    time), the lhs a bf16 copy (rounded to nearest even, one cast over it, planned in the arena)."""
    w = op.operands[1].owner
    assert isinstance(w, tg.WeightOp)
    packed = _bf16k_panels(op, w, target)
    made, lhs = _bf16_lhs(op, ins[0])
    return [packed, *made], [lhs, packed.result, *ins[2:]]


def _bf16k_panels(op: Operation, w: tg.WeightOp, target: Target) -> buf.PackedWeightOp:
    """``op``'s weight ``w`` (float32, or a bf16 model's) as panels of bf16 pairs along K, packed
    at load time, ``tg.nr`` columns each (`panel_columns`)."""
    transposed = op.properties.get("transpose_b") == tg.bool_attr(True)
    layout = PanelLayout(w.weight_name.data, panel_columns(op, target, _shape(op.results[0])[-1]), transposed, "bf16k")
    packed = buf.PackedWeightOp(layout.source, transposed, MemRefType(BFloat16Type(), layout.shape(_shape(w.result))),
                                _shape(w.result), layout="bf16kpanels")
    packed.result.name_hint = (w.result.name_hint or "w") + "_bf16k"
    return packed


def _bf16_lhs(op: Operation, lhs: SSAValue) -> tuple[list[Operation], SSAValue]:
    """The ops that make a bf16 copy of the float32 buffer ``lhs`` (one cast into a buffer of its
    own) and that copy; none when an earlier GEMM made one (Q, K and V projections of one x)."""
    return _converted_lhs(op, lhs, buf.CastOp, BFloat16Type(), dims_of(lhs.type))


def _converted_lhs(op: Operation, lhs: SSAValue, kind: type[buf.KernelOp], element: Attribute,
                   dims: Sequence) -> tuple[list[Operation], SSAValue]:
    """The ops that make a copy of the float32 buffer ``lhs`` in a cheaper form (``kind``: a bf16
    cast, int8 rows) of ``element`` and ``dims``, and that copy; none when an earlier GEMM made
    one (`_converted_of`)."""
    if (made := _converted_of(lhs, kind, element)) is not None:
        return [], made
    alloc = buf.AllocOp(shaped_memref(element, dims))
    alloc.result.name_hint = (op.operands[0].name_hint or "lhs") + ("_bf16" if kind is buf.CastOp else "_q8")
    return [alloc, kind([lhs], [alloc.result])], alloc.result


def _bf16_source(value: SSAValue) -> SSAValue | None:
    """The bfloat16 tensor ``value`` is the exact float32 widening of (``tg.cast``, as
    `widen-dtypes` makes for a bf16 model), or None."""
    cast = value.owner
    if not isinstance(cast, tg.CastOp) or not isinstance(cast.input.type.element_type, BFloat16Type):  # type: ignore[attr-defined]
        return None
    return cast.input if isinstance(value.type.element_type, Float32Type) else None  # type: ignore[attr-defined]


def _bf16_representable(x: float) -> bool:
    """Whether ``x`` is a bf16 value: rounding it to bf16 gives it back."""
    return bool(dtypes.bf16_values(dtypes.bf16_bits(x)) == x)


def _bf16_exact(value: SSAValue) -> bool:
    """Whether every element of the float32 ``value`` is a bf16 value: a widened bf16 tensor, a
    fused elementwise result that ends in the rounding to bf16 and back (`widen-dtypes` rounds
    each op of a bf16 model so), a reshape of one, or its windows (`tg.im2col`) padded with a
    bf16 value."""
    if _bf16_source(value) is not None:
        return True
    if isinstance(value.owner, tg.ReshapeOp):
        return _bf16_exact(value.owner.input)
    if isinstance(value.owner, tg.Im2colOp):  # windows of bf16 values, padded with one (0, -inf)
        pad = value.owner.pad_value.value.data
        return _bf16_representable(pad) and _bf16_exact(value.owner.input)
    fused = value.owner
    if not isinstance(fused, tg.FusedElementwiseOp):
        return False
    (yield_op,) = [o for o in fused.body.block.ops if o.name == "tg.yield"]
    last = yield_op.operands[fused.results.index(value)].owner  # type: ignore[arg-type]
    return getattr(last, "name", "") == "arith.extf" and isinstance(last.operands[0].type, BFloat16Type)


def _bf16_operands_apply(op: Operation) -> str | None:
    """A GEMM of a bf16 model: a 2-D bf16 weight widened to float32 and an lhs whose elements are
    all bf16 values (`_bf16_exact`): their products are exact in float32, so the bf16 GEMM computes
    what the float32 one would, in another order. Untransposed lhs, even K, at least 16 columns."""
    assert isinstance(op, tg.MatmulOp)
    if (why := _all_f32(op)) is not None:
        return why
    rhs = _bf16_source(op.operands[1])
    if rhs is None or not isinstance(rhs.owner, tg.WeightOp) or not _bf16_exact(op.operands[0]):
        return "the operands are not bf16 values and a bf16 weight widened to float32"
    if len(_shape(rhs)) != 2 or op.properties.get("transpose_a") == tg.bool_attr(True):
        return "a weight not 2-D, or a transposed lhs"
    k, n = _shape(op.operands[0])[-1], _shape(op.results[0])[-1]
    if k % 2 or n < 16:
        return f"K = {k} odd or N = {n} < 16"
    return None


def _bf16_operands_prepare(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The bf16 weight packed as pairs along K at load time (exactly); the bf16 activation read
    as it is, not its float32 widening (whose cast, now read by nobody, is dropped)."""
    w = _bf16_source(op.operands[1]).owner  # type: ignore[union-attr]
    assert isinstance(w, tg.WeightOp)
    packed = _bf16k_panels(op, w, target)
    widened = _writer_cast(ins[0]) if _bf16_source(op.operands[0]) is not None else None
    if widened is not None:  # the bf16 activation itself
        made, lhs = [packed], widened.inputs[0]
    else:  # rounded to bf16 and back already: the cast is exact
        cast_ops, lhs = _bf16_lhs(op, ins[0])
        made = [packed, *cast_ops]
    for buffer, value in ((ins[0], op.operands[0]), (ins[1], op.operands[1])):
        _drop_unread_widening(value, buffer)
    return made, [lhs, packed.result, *ins[2:]]


def _writer_cast(buffer: SSAValue) -> buf.CastOp | None:
    """The buf.cast that writes ``buffer``, if one does."""
    return next((u.operation for u in buffer.uses if isinstance(u.operation, buf.CastOp)
                 and u.operation.outputs[0] is buffer), None)


def _drop(cast: buf.CastOp, buffer: SSAValue) -> None:
    """Erase a buf.cast whose output nobody reads, and that output's allocation."""
    cast.detach()
    cast.erase()
    if isinstance(buffer.owner, buf.AllocOp) and not buffer.uses:
        alloc = buffer.owner
        alloc.detach()
        alloc.erase()


def _converted_of(value: SSAValue, kind: type[buf.KernelOp], element: Attribute) -> SSAValue | None:
    """A copy of ``value`` an earlier GEMM made (`_converted_lhs`: a ``kind`` op writing
    ``element``), if any: in the block that defines ``value`` (the function's body, lowered in
    order: before this GEMM); the buffer, written once, still holds it."""
    home = value.owner if isinstance(value.owner, Block) else value.owner.parent_block()
    for use in value.uses:
        made = use.operation
        if isinstance(made, kind) and use.index == 0 and made.parent_block() is home \
                and made.output.type.element_type == element:  # type: ignore[attr-defined]
            return made.output
    return None


def _packed_rhs_applies(op: Operation) -> str | None:
    """A 2-D f32 weight (or a reshape of one) times one activation matrix or a batch of them (a
    convolution's ``W[Cout, K] @ cols[B, K, P]``, B images, static or a size symbol), neither
    transposed, with at least 16 columns."""
    assert isinstance(op, tg.MatmulOp)
    if (why := _all_f32(op)) is not None:
        return why
    lhs = weight = op.operands[0]
    while isinstance(weight.owner, tg.ReshapeOp):  # a convolution's [Cout, C, KH, KW] as [Cout, K]
        weight = weight.owner.input
    if not isinstance(weight.owner, tg.WeightOp) or len(_shape(lhs)) != 2:
        return "the lhs is not a 2-D weight"
    return _rhs_panels_fit(op)


def _rhs_panels_fit(op: Operation) -> str | None:
    """The rhs of ``op`` (a weight times an activation) can be packed by the graph: an activation
    ``[1.., K, N]`` or ``[B, K, N]``, neither operand transposed, at least 16 columns."""
    rhs = op.operands[1]
    if isinstance(rhs.owner, tg.WeightOp):
        return "the rhs is a weight"
    if any(op.properties.get(t) == tg.bool_attr(True) for t in ("transpose_a", "transpose_b")):
        return "an operand is transposed"
    if numel(_shape(rhs)[:-2]) != 1 and len(_shape(rhs)) != 3:
        return f"the rhs {list(_shape(rhs))} is a batch of matrices, not [B, K, N]"
    if _shape(rhs)[-1] < 16:
        return f"N = {_shape(rhs)[-1]} < 16 columns: too narrow to pack"
    return None


def _pack_rhs_at_run_time(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The activation rhs ``[1.., K, N]`` is packed into column panels by the graph itself, into a
    scratch buffer (``buf.im2col`` of a 1x1 window over it seen as ``[1, K, 1, N]``: see
    `buf.Im2colOp`; `fuse-im2col-panels` folds a convolution's own im2col into it), and the
    weight lhs is the GEMM's A, read as stored (``[1.., M, K]`` to match the output's rank).
    A batch of B activations ``[B, K, N]`` (B not 1: images) is packed into B sets of panels
    ``[B, P, K, NR]``, a batch of GEMMs that share the weight as their A (``[M, K]``)."""
    return _rhs_panels(op, ins, target, ins[0], Float32Type())


def _panel_rows(k: int, nr: int, element: Attribute) -> tuple[int, int]:
    """A graph-packed rhs panel's rows and their elements for K = ``k``, ``nr`` columns of
    ``element``: float32 ``(K, NR)``, or bf16 pairs along K ``(ceil(K / 2), 2 NR)``."""
    return (-(-k // 2), 2 * nr) if isinstance(element, BFloat16Type) else (k, nr)


def _rhs_panels(op: Operation, ins: Sequence[SSAValue], target: Target, lhs: SSAValue,
                element: Attribute) -> tuple[list[Operation], list[SSAValue]]:
    """`_pack_rhs_at_run_time`'s ops with ``lhs`` as the GEMM's A and panels of ``element``:
    float32, or bf16 pairs along K (``[.., P, ceil(K / 2), 2 NR]``, `buf.Im2colOp.pairs`)."""
    m, k = _shape(op.operands[0])
    out_shape = _shape(op.results[0])
    n = out_shape[-1]
    nr = panel_columns(op, target, n)
    f32 = Float32Type()
    rows, width = _panel_rows(k, nr, element)
    ops: list[Operation] = []
    images = numel(_dims(op.results[0])[:-2])  # a size symbol's expression for a symbolic batch
    if images != 1:  # one set of panels per image, one A for all: out [B, M, N]
        ops.append(buf.ReshapeOp(ins[1], shaped_memref(f32, (images, k, 1, n))))
        panels = buf.AllocOp(shaped_memref(element, (images, -(-n // nr), rows, width)))
    else:
        if len(out_shape) > 2:
            ops.append(buf.ReshapeOp(lhs, MemRefType(lhs.type.element_type, (*out_shape[:-2], m, _shape(lhs)[-1]))))
            lhs = ops[-1].results[0]
        ops.append(buf.ReshapeOp(ins[1], MemRefType(f32, (1, k, 1, n))))
        panels = buf.AllocOp(MemRefType(element, (-(-n // nr), rows, width)))
    panels.result.name_hint = (op.operands[1].name_hint or "rhs") + "_panels"
    one = DenseArrayBase.from_list(i64, [1, 1])
    props = {"kernel": one, "stride": one, "padding": DenseArrayBase.from_list(i64, [0, 0]), "dilation": one,
             "panels": IntegerAttr(nr, i64)}
    ops += [panels, buf.Im2colOp([ops[-1].results[0]], [panels.result], props)]
    return ops, [lhs, panels.result, *ins[2:]]


def _packed_rhs_bf16_applies(op: Operation) -> str | None:
    """A weight times an activation (`_packed_rhs_applies`: a convolution) on a target with
    bf16 dot products."""
    if (why := _packed_rhs_applies(op)) is not None:
        return why
    return _no_bf16_dots(op)


def _bf16_weight_of(value: SSAValue) -> tg.WeightOp | None:
    """The bf16 weight whose float32 widening ``value`` is, through reshapes (a bf16 model's
    convolution weight ``[Cout, C, KH, KW]`` widened by `widen-dtypes`, seen as ``[Cout, K]``)."""
    while isinstance(value.owner, tg.ReshapeOp):
        value = value.owner.input
    source = _bf16_source(value)
    return source.owner if source is not None and isinstance(source.owner, tg.WeightOp) else None


def _bf16_operands_rhs_apply(op: Operation) -> str | None:
    """A bf16 model's convolution: a bf16 weight widened to float32 (through reshapes) times
    windows or an activation of bf16 values (`_bf16_exact`), shaped as `_packed_rhs_applies`
    takes them. The products are exact in float32, as in `matmul.bf16_operands`: the bf16 GEMM
    computes what the float32 one would, in another order, on any CPU (AMX, AVX512-BF16 or their
    emulation by FMAs)."""
    assert isinstance(op, tg.MatmulOp)
    if (why := _all_f32(op)) is not None:
        return why
    if _bf16_weight_of(op.operands[0]) is None or not _bf16_exact(op.operands[1]):
        return "the operands are not a bf16 weight widened to float32 and bf16 values"
    if len(_shape(op.operands[0])) != 2:
        return "the lhs is not 2-D"
    return _rhs_panels_fit(op)


def _bf16_operands_rhs_prepare(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """`_pack_rhs_bf16_at_run_time` for a bf16 model: the bf16 weight's rows packed at load time
    (exactly), not its float32 widening (whose cast, if this GEMM was its only reader, is
    dropped); the windows rounded to bf16 as they are packed (exactly: they are bf16 values)."""
    w = _bf16_weight_of(op.operands[0])
    assert w is not None
    rows = _bf16_rows_of(w)
    made, ins2 = _rhs_panels(op, ins, target, rows.result, BFloat16Type())
    _drop_unread_widening(op.operands[0], ins[0])
    return [rows, *made], ins2


def _drop_unread_widening(value: SSAValue, buffer: SSAValue) -> None:
    """Erase the ``buf.cast`` that writes ``buffer`` (``value``'s, directly or through
    ``buf.reshape``s), with those reshapes and the cast's allocation, when the GEMM being lowered
    was the only reader of ``value`` and of every reshape between it and the cast: a bf16
    widening that the GEMM reads as bf16 instead."""
    while isinstance(value.owner, tg.ReshapeOp):
        if len(list(value.uses)) != 1:
            return
        value = value.owner.input
    if len(list(value.uses)) != 1:
        return
    chain = []
    while isinstance(buffer.owner, buf.ReshapeOp) and len(list(buffer.uses)) == (1 if chain else 0):
        chain.append(buffer.owner)
        buffer = buffer.owner.input
    cast = _writer_cast(buffer)
    if cast is None or len(list(buffer.uses)) != 1 + (1 if chain else 0):  # the cast (and the chain) alone
        return
    for reshape in chain:
        reshape.detach()
        reshape.erase()
    _drop(cast, buffer)


def _bf16_rows_of(w: tg.WeightOp) -> buf.PackedWeightOp:
    """The weight ``w`` as the bf16 lhs of a GEMM whose rhs the graph packs: its rows rounded to
    bf16, K padded to even, packed at load time (`packing.Bf16RowsLayout`)."""
    layout = Bf16RowsLayout(w.weight_name.data)
    rows = buf.PackedWeightOp(layout.source, False, MemRefType(BFloat16Type(), layout.shape(_shape(w.result))),
                              _shape(w.result), layout=buf.BF16_ROWS)
    rows.result.name_hint = (w.result.name_hint or "w") + "_bf16rows"
    return rows


def _pack_rhs_bf16_at_run_time(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """`_pack_rhs_at_run_time` in bf16: the weight (the lhs, through its reshapes) as its bf16
    rows packed at load time (`packing.Bf16RowsLayout`: K padded to even), the activation packed
    by the graph into panels of bf16 pairs along K, rounded as they are written (`buf.im2col`
    with a bf16 output; `fuse-im2col-panels` folds a convolution's own im2col into it)."""
    weight = op.operands[0]
    while isinstance(weight.owner, tg.ReshapeOp):
        weight = weight.owner.input
    w = weight.owner
    assert isinstance(w, tg.WeightOp)
    rows = _bf16_rows_of(w)
    made, ins2 = _rhs_panels(op, ins, target, rows.result, BFloat16Type())
    return [rows, *made], ins2


def _table_packed_by_a_gemm(op: Operation) -> str | None:
    """The table is a weight that a GEMM also reads, packed as float32 panels (a tied LM head's
    embedding): a GEMM that pins another variant (a tuner's bf16 or int8 LM head) reads panels of
    its own, and gathering from float32 panels made for the embedding alone reads a cache line
    per element (GPT-2's 128 tokens: 1.6-1.8 ms, against a row copy each from the table)."""
    assert isinstance(op, tg.EmbeddingOp)
    if not isinstance(op.table.owner, tg.WeightOp) or op.table.type.element_type != Float32Type():  # type: ignore[attr-defined]
        return "the table is not an f32 weight"
    for use in op.table.uses:
        user = use.operation
        pinned = user.attributes.get(KERNEL_ATTR)
        if (
            isinstance(user, tg.MatmulOp)
            and use.index == 1
            and user.properties.get("transpose_b") == tg.bool_attr(True)
            and _packed_matmul_applies(user) is None
            and (pinned is None or pinned == StringAttr(PACKED_F32_GEMM))
        ):
            return None
    return f"no GEMM reads the table as {PACKED_F32_GEMM}'s float32 panels"


def _pack_table(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The table becomes the `buf.packed_weight` its GEMM reads (the same layout: one slot)."""
    assert isinstance(op, tg.EmbeddingOp)
    w = op.table.owner
    assert isinstance(w, tg.WeightOp)
    rows = _shape(op.table)[0]
    layout = PanelLayout(w.weight_name.data, target.panel_columns_for(rows), True)
    packed = buf.PackedWeightOp(layout.source, True, MemRefType(Float32Type(), layout.shape(_shape(op.table))), _shape(op.table))
    packed.result.name_hint = (op.table.name_hint or "table") + "_packed"
    return [packed], [packed.result, ins[1]]


def _with_table_name(op: Operation, kernel: buf.KernelOp) -> buf.KernelOp:
    """``kernel`` with the table's name as the model wrote it (:data:`TABLE_NAME`), if ``op`` has it."""
    if TABLE_NAME in op.attributes:
        kernel.attributes[TABLE_NAME] = op.attributes[TABLE_NAME]
    return kernel


def _packed_embedding(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
    assert isinstance(op, tg.EmbeddingOp)
    return _with_table_name(op, buf.PackedEmbeddingOp(ins, [out], {"rows": IntegerAttr(_shape(op.table)[0], i64)}))


def _embedding(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
    return _with_table_name(op, buf.EmbeddingOp(ins, [out]))


def _unary(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
    return buf.UnaryOp(ins, [out], {"fn": StringAttr(op.fn)})  # type: ignore[attr-defined]


def _attention_scratch(pairs: bool) -> Scratch:
    """One set of tiles per thread (`scratch.py`), the tiles sized for ``target`` (with
    ``pairs``: bf16 products' layout)."""

    def scratch(op: Operation, threads: int, target: Target) -> MemRefType:
        assert isinstance(op, tg.AttentionOp)
        q, k, v, _ = (upper_bound(s, symbols_of(op)) for s in op.heads_major_shapes())  # tiles for the largest sizes
        return attention_scratch_type(q, k, v, target, threads, pairs, bool(op.causal.value.data))

    return scratch


def _attention_bf16_applies(op: Operation) -> str | None:
    """bf16 products: on a target with bf16 dot products (`_no_bf16_dots`), for more than one
    query row (a decode step's single row would fill whole tiles of 16 with one)."""
    assert isinstance(op, tg.AttentionOp)
    if upper_bound(op.heads_major_shapes()[0], symbols_of(op))[-2] == 1:
        return "one query row (a decode step): the float32 kernel's dot products along the keys"
    return _no_bf16_dots(op)


def _attention_bf16_operands_apply(op: Operation) -> str | None:
    """A bf16 model's attention (q, k and v bf16 values: `_bf16_exact`) on a target with AMX-BF16,
    for more than one query row: `attention.flash_bf16`'s kernel as the heuristic's choice. Its
    roundings are the ones eager bfloat16's CPU attention makes (the unnormalised probabilities
    rounded to bf16 before the second product), but for q times the scale (rounded here: exact
    when the scale is a power of two, 1 / sqrt(64)). Where the target has only AVX512-BF16, Intel's
    cores run ``vdpbf16ps`` at half the FMAs' rate, slower than float32: not offered."""
    assert isinstance(op, tg.AttentionOp)
    if not all(_bf16_exact(v) for v in op.operands[:3]):
        return "q, k and v are not all bf16 values (a bf16 model's)"
    target = _target_of(op)
    if "amx-bf16" not in target.extensions:
        return f"the target ({target.name}) has no AMX-BF16 tiles"
    return _attention_bf16_applies(op)


def _attention(pairs: bool) -> Build:
    """`buf.attention` with the op's flags (``bf16_products`` when ``pairs``)."""

    def build(op: Operation, ins: Sequence[SSAValue], out: SSAValue, scratch: SSAValue | None = None) -> buf.KernelOp:
        names = ("scale", "causal", "kv_cache", *(f"{x}_seq_major" for x in ATTENTION_OPERANDS),
                 *(f"{x}_heads" for x in ATTENTION_OPERANDS[:3]))
        props = {k: op.properties[k] for k in names if k in op.properties}
        if pairs:
            props["bf16_products"] = tg.bool_attr(True)
        return buf.AttentionOp(ins, [out] if scratch is None else [out, scratch], props)

    return build


def _body_is_closed(op: Operation) -> str | None:
    """The scalar body may only use its own arguments and the values it defines."""
    assert isinstance(op, tg.FusedElementwiseOp)
    inner = list(op.body.walk())
    defined: set[SSAValue] = {a for b in op.body.blocks for a in b.args}
    defined.update(r for o in inner for r in o.results)
    defined.update(a for o in inner for r in o.regions for b in r.blocks for a in b.args)
    for o in inner:
        for v in o.operands:
            if v not in defined:
                what = f"%{v.name_hint}" if v.name_hint else "a value"
                return f"its body uses {what} defined outside it (only block arguments carry inputs)"
    return None


def _fused_elementwise(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
    """Clones the scalar body (arith/math ops stay as they are); tg.yield becomes buf.yield."""
    assert isinstance(op, tg.FusedElementwiseOp)
    body = op.body.clone()
    block = body.block
    term = block.last_op
    assert isinstance(term, tg.YieldOp)
    block.insert_op_before(buf.YieldOp(*term.values), term)
    block.erase_op(term)
    return buf.FusedElementwiseOp(ins, [out], body)


# --------------------------------------------------------------------------- the built-in paths

#: The error floors of the cheaper arithmetic (`KernelVariant.error_floor`): bf16 operands and
#: int8 weights give 7e-4 to 3e-3 and about 1e-2 of the output's magnitude on random data
#: (tests/test_bf16_gemm.py, tests/test_quantized_matvec.py); these sit well below, so that only
#: a tolerance these paths could never meet skips their measuring.
BF16_ERROR_FLOOR, INT8_ERROR_FLOOR, INT4_ERROR_FLOOR = 1e-4, 1e-3, 1e-2
#: The int4 variants' schemes (`packing.Int4Scheme`): llama.cpp's Q4_0 (symmetric, groups of 32)
#: and GPTQ / AWQ's usual (zero points, groups of 128).
INT4_VARIANTS = {"matmul.int4_weights": Int4Scheme(32, False), "matmul.int4zp_weights": Int4Scheme(128, True)}

register_kernel(tg.ReshapeOp, AliasVariant("reshape.alias", _reshape, description="same bytes, new shape"))
_register_all(
    tg.MatmulOp,
    KernelVariant(
        PACKED_F32_GEMM,
        _packed_matmul,
        _packed_matmul_applies,
        "emitted register-tiled GEMM over the weight packed into column panels once, at load time",
        prepare=_pack_rhs,
        packs_weights=True,
    ),
    KernelVariant(
        "matmul.packed_rhs",
        _packed_matmul,
        _packed_rhs_applies,
        "a weight times an activation (a convolution): the activation packed into column panels by "
        "the graph, then the emitted register-tiled GEMM reading the weight as stored",
        prepare=_pack_rhs_at_run_time,
        packs_weights=True,
    ),
    KernelVariant(
        "matmul.bf16_operands",
        _packed_matmul,
        _bf16_operands_apply,
        "a bf16 model's GEMM: the register-tiled (or AMX) GEMM over the bf16 weight packed as pairs along K "
        "and the bf16 activation as it is, float32 sums (exact products: no error beyond float32's)",
        prepare=_bf16_operands_prepare,
        packs_weights=True,
    ),
    KernelVariant(
        "matmul.bf16_operands_rhs",
        _packed_matmul,
        _bf16_operands_rhs_apply,
        "a bf16 model's convolution: the bf16 weight as bf16 rows packed at load time, the windows of bf16 values "
        "packed by the graph into panels of bf16 pairs along K, float32 sums (exact products: no error beyond "
        "float32's)",
        prepare=_bf16_operands_rhs_prepare,
        packs_weights=True,
    ),
    KernelVariant("matmul.blas", _matmul, _one_numeric_dtype,
                  "one cblas_sgemm (float64: dgemm) per batch; integers: a loop nest (kernels_matmul_loop)"),
    # cheaper weights, another error: never the heuristic's choice (last), a tuner's within a tolerance
    KernelVariant(
        "matmul.bf16_weights",
        _quantized_matvec("bf16"),
        _paired_panels_apply,
        "matrix-vector product over the weight packed as bf16 panels at load time (half the bytes)",
        prepare=_quantized_prepare("bf16"),
        packs_weights=True,
        error_floor=BF16_ERROR_FLOOR,
    ),
    KernelVariant(
        "matmul.int8_weights",
        _quantized_matvec("int8"),
        _paired_panels_apply,
        "matrix-vector product over the weight packed as int8 panels with per-column scales (a quarter of the bytes)",
        prepare=_quantized_prepare("int8"),
        packs_weights=True,
        error_floor=INT8_ERROR_FLOOR,
    ),
    *(KernelVariant(
        variant,
        _quantized_matvec(scheme.name),
        _paired_panels_apply,
        f"matrix-vector product over the weight as 4-bit codes in groups of {scheme.group} along K, each with a "
        f"bf16 scale{' and a zero point' if scheme.zero_points else ''} (about an eighth of the bytes)",
        prepare=_quantized_prepare(scheme.name),
        packs_weights=True,
        error_floor=INT4_ERROR_FLOOR,
    ) for variant, scheme in INT4_VARIANTS.items()),
    KernelVariant(
        "matmul.int4_dot",
        _quantized_matvec("int4dot"),
        _int4_dot_applies,
        "matrix-vector product by integer dot products (VNNI, else pmaddubsw): the weight as Q4_0's 4-bit codes "
        "(a bf16 scale per 32 along K), the rows quantised to int8 per 32 (Q8_0's), as llama.cpp's Q4_0",
        prepare=_quantized_prepare("int4dot"),
        packs_weights=True,
        error_floor=INT4_ERROR_FLOOR,
    ),
    KernelVariant(
        "matmul.packed_bf16",
        _packed_matmul,
        _packed_bf16_applies,
        "the register-tiled GEMM over bf16 pairs along K: the weight packed as bf16 at load time, the "
        "activations rounded to bf16 once per call, float32 sums (AVX512-BF16 dot products)",
        prepare=_packed_bf16_prepare,
        packs_weights=True,
        error_floor=BF16_ERROR_FLOOR,
    ),
    KernelVariant(
        "matmul.packed_rhs_bf16",
        _packed_matmul,
        _packed_rhs_bf16_applies,
        "a weight times an activation (a convolution) in bf16: the weight as bf16 rows packed at load time, the "
        "activation packed by the graph into panels of bf16 pairs along K, float32 sums (AMX, AVX512-BF16)",
        prepare=_pack_rhs_bf16_at_run_time,
        packs_weights=True,
        error_floor=BF16_ERROR_FLOOR,
    ),
    KernelVariant(
        "matmul.packed_int8",
        _packed_matmul,
        _packed_int8_applies,
        "the register-tiled (or AMX) GEMM by integer dot products (VNNI's vpdpbusd, AMX's tdpbusd): the weight "
        "as int8 per output column, packed at load time, the activations quantised to int8 per row once per call, int32 sums",
        prepare=_packed_int8_prepare,
        packs_weights=True,
        error_floor=INT8_ERROR_FLOOR,
    ),
    KernelVariant(
        "matmul.bf16_dot",
        _quantized_matvec("bf16dot"),
        _bf16_dot_applies,
        "matrix-vector product by AVX512-BF16 dot products: the weight packed as bf16 pairs along K at load "
        "time, the activations rounded to bf16 (a second rounding)",
        prepare=_quantized_prepare("bf16dot"),
        packs_weights=True,
        error_floor=BF16_ERROR_FLOOR,
    ),
)

for _tg_op, _buf_op, _fn in (
    (tg.AddOp, buf.AddOp, "add"),
    (tg.SubOp, buf.SubOp, "sub"),
    (tg.MulOp, buf.MulOp, "mul"),
    (tg.DivOp, buf.DivOp, "div"),
):
    _register_all(
        _tg_op,
        KernelVariant(f"{_fn}.loop", _same_props(_buf_op)),
        KernelVariant(f"{_fn}.binary", _same_props(buf.BinaryOp, fn=StringAttr(_fn)), description="buf.binary"),
    )
for _tg_op, _fn in ((tg.PowOp, "pow"), (tg.MaxOp, "max"), (tg.MinOp, "min")):
    register_kernel(_tg_op, KernelVariant(f"{_fn}.binary", _same_props(buf.BinaryOp, fn=StringAttr(_fn))))

register_kernel(tg.ReluOp, KernelVariant("relu.loop", _same_props(buf.ReluOp)))
for _cls in (*tg.UNARY_OPS.values(), tg.GeluOp):
    register_kernel(_cls, KernelVariant(f"{_cls.name.removeprefix('tg.')}.unary", _unary, description="buf.unary {fn}"))

register_kernel(tg.SelectOp, KernelVariant("select.loop", _same_props(buf.SelectOp)))
register_kernel(tg.CastOp, KernelVariant("cast.loop", _same_props(buf.CastOp)))
register_kernel(tg.IotaOp, KernelVariant("iota.loop", _same_props(buf.IotaOp, "start", "step")))
register_kernel(tg.SizeOp, KernelVariant("size.store", _same_props(buf.SizeOp, "size")))
register_kernel(tg.CheckNonzeroOp, KernelVariant("check_nonzero.loop", _same_props(buf.CheckNonzeroOp),
                                                 description="copy, then every element checked against zero"))
_register_all(
    tg.TransposeOp,
    AliasVariant("transpose.alias", _reshape, _only_unit_dims_move, "only size-1 dims move: a reshape"),
    KernelVariant("transpose.loop", _same_props(buf.TransposeOp, "perm")),
)
_register_all(
    tg.SliceOp,
    AliasVariant("slice.subview", _subview, _slice_is_contiguous, "contiguous: a zero-copy buf.subview"),
    KernelVariant("slice.copy", _same_props(buf.SliceOp, "dim", "start", "step"), description="strided copy"),
)
register_kernel(tg.ConcatOp, KernelVariant("concat.copy", _same_props(buf.ConcatOp, "dim")))
_register_all(
    tg.BroadcastOp,
    AliasVariant("broadcast.alias", _reshape, _same_numel, "adds only size-1 dims: a reshape"),
    KernelVariant("broadcast.copy", _same_props(buf.BroadcastOp)),
)
_register_all(
    tg.EmbeddingOp,
    KernelVariant(
        "embedding.packed_table",
        _packed_embedding,
        _table_packed_by_a_gemm,
        "gather from the panels a GEMM packed the table into (the table is not bound twice)",
        prepare=_pack_table,
        packs_weights=True,
    ),
    KernelVariant("embedding.gather", _embedding),
)
for _cls in tg.REDUCE_OPS.values():
    register_kernel(
        _cls,
        KernelVariant(
            f"{_cls.name.removeprefix('tg.')}.loop",
            _same_props(buf.ReduceOp, "dims", "keepdim", kind=lambda op: StringAttr(op.KIND)),
            description="buf.reduce {kind}",
        ),
    )
register_kernel(tg.ArgReduceOp, KernelVariant("arg_reduce.loop", _same_props(buf.ArgReduceOp, "kind", "dim", "keepdim"),
                                             description="one pass per output element"))
register_kernel(tg.SoftmaxOp, KernelVariant("softmax.loop", _same_props(buf.SoftmaxOp, "dim", log=tg.bool_attr(False))))
register_kernel(tg.LogSoftmaxOp, KernelVariant("log_softmax.loop", _same_props(buf.SoftmaxOp, "dim", log=tg.bool_attr(True))))
register_kernel(tg.TakeOp, KernelVariant("take.gather", _same_props(buf.TakeOp), description="element gather by checked offsets"))
register_kernel(
    tg.Im2colOp,
    KernelVariant("im2col.copy", _same_props(buf.Im2colOp, "kernel", "stride", "padding", "dilation", "pad_value"),
                  description="a strided copy per tap, padded border filled"),
)
register_kernel(tg.CumsumOp, KernelVariant("cumsum.scan", _same_props(buf.CumsumOp, "dim", "reduce"), description="row by row along dim"))
register_kernel(tg.LayerNormOp, KernelVariant("layer_norm.loop", _same_props(buf.LayerNormOp, "eps")))
register_kernel(tg.RmsNormOp, KernelVariant("rms_norm.loop", _same_props(buf.RmsNormOp, "eps")))
register_kernel(
    tg.RopeOp, KernelVariant("rope.loop", _same_props(buf.RopeOp, "eps"),
                               description="rotate-half, per row of the last dim (RMS-normalised first with a norm weight)")
)
_register_all(
    tg.AttentionOp,
    KernelVariant(
        "attention.bf16_operands",
        _attention(True),
        _attention_bf16_operands_apply,
        "a bf16 model's attention on AMX tiles: attention.flash_bf16's kernel, its roundings eager bfloat16's",
        scratch=_attention_scratch(True),
    ),
    KernelVariant(
        "attention.flash",
        _attention(False),
        description="tiled online softmax, items on threads; scratch layout in scratch.py",
        scratch=_attention_scratch(False),
    ),
    KernelVariant(
        "attention.flash_bf16",
        _attention(True),
        _attention_bf16_applies,
        "the same, its two GEMMs over bf16 operands (q times the scale, k, the probabilities, v rounded to "
        "nearest even), float32 sums (AMX tiles, AVX512-BF16 dot products)",
        scratch=_attention_scratch(True),
        error_floor=BF16_ERROR_FLOOR,
    ),
)
register_kernel(
    tg.BiasActivationOp,
    KernelVariant("bias_activation.loop", _same_props(buf.BiasActivationOp, "activation"), description="one sweep"),
)
register_kernel(
    tg.FusedElementwiseOp,
    KernelVariant("fused_elementwise.loop", _fused_elementwise, _body_is_closed, "one loop over the output"),
)

# mixture of experts: routing (argtopk), restoring token order (put), the experts' GEMMs
register_kernel(
    tg.ArgTopkOp,
    KernelVariant(
        "argtopk.merge_sort",
        lambda op, ins, out, scratch: buf.ArgTopkOp(ins, [out, scratch], {n: op.properties[n] for n in ("k", "dim", "largest")}),
        description="a stable merge sort of each row's positions, the first k kept",
        scratch=lambda op, threads, target: MemRefType(i64, (2, op.input.type.get_shape()[op.dim.value.data])),
    ),
)
register_kernel(tg.PutOp, KernelVariant("put.scatter", _same_props(buf.PutOp, "accumulate", "reduce"), description="copy, then checked element writes"))


def _lapack_scratch(op: Operation, threads: int, target: Target) -> MemRefType:
    """The routine's other outputs for one problem (`buf.lapack_scratch_elements`)."""
    assert isinstance(op, tg.LapackOp)
    sizes = buf.lapack_scratch_elements(op.routine.data, op.output.data, [_shape(v) for v in op.inputs],
                                        tg.lapack_params(op.params))
    return MemRefType(op.inputs[0].type.element_type, (sizes["size"],))  # type: ignore[attr-defined]


register_kernel(
    tg.LapackOp,
    KernelVariant(
        "lapack.call",
        lambda op, ins, out, scratch: buf.LapackOp(ins, [out, scratch], {n: op.properties[n] for n in ("routine", "output", "params", "check")
                                                                          if n in op.properties}),
        description="per matrix problem: the in-place copy, the LAPACKE/CBLAS call, its info checked",
        scratch=_lapack_scratch,
    ),
)


def _grouped_weight_packs(op: Operation) -> str | None:
    assert isinstance(op, tg.GroupedMatmulOp)
    if not isinstance(op.weight.owner, tg.WeightOp):
        return "the weights are not a model weight"
    n = _shape(op.result)[-1]
    return f"N = {n} < 16 columns: too narrow to pack" if n < 16 else None


def _pack_grouped_weight(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The weight stack becomes a `buf.packed_weight` ``[G, P, K, NR]``: each group's panels."""
    assert isinstance(op, tg.GroupedMatmulOp) and isinstance(op.weight.owner, tg.WeightOp)
    layout = PanelLayout(op.weight.owner.weight_name.data, target.panel_columns_for(_shape(op.result)[-1]), op.transposed)
    packed = buf.PackedWeightOp(layout.source, op.transposed, MemRefType(Float32Type(), layout.shape(_shape(op.weight))),
                                _shape(op.weight))
    packed.result.name_hint = (op.weight.name_hint or "w") + "_packed"
    return [packed], [ins[0], packed.result, ins[2]]


_register_all(
    tg.GroupedMatmulOp,
    KernelVariant(
        "grouped_matmul.packed",
        lambda op, ins, out: buf.PackedGroupedMatmulOp(ins, [out]),
        _grouped_weight_packs,
        "each group's rows in the packed GEMM's register tiles over its weights packed at load time",
        prepare=_pack_grouped_weight,
        packs_weights=True,
    ),
    KernelVariant("grouped_matmul.blas", _same_props(buf.GroupedMatmulOp, "transpose_b"),
                  description="cblas_sgemm (sgemv for one row) per non-empty group and column block"),
)


# Winograd convolutions: input transform into panels, a batch of packed GEMMs, output transform


def _winograd_applies(op: Operation) -> str | None:
    assert isinstance(op, tg.WinogradConvOp)
    return None if isinstance(op.weight.owner, tg.WeightOp) else "the weight is not a model weight (it is transformed at load time)"


def _winograd_gemms(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The input transform (`buf.winograd_input`) into column panels of the target's width, and
    the ``a * a`` GEMMs of the transformed weight (a `buf.packed_weight` of layout
    ``winograd<m>``) by those panels: the output transform's first input (``[a*a, Cout, tiles]``;
    over N images, ``N * a * a`` GEMMs, each image's ``a * a`` by the same weights)."""
    assert isinstance(op, tg.WinogradConvOp) and isinstance(op.weight.owner, tg.WeightOp)
    m = op.tile.value.data
    cout, c = _shape(op.weight)[:2]
    _, _, oh, ow = _shape(op.result)
    tiles = -(-oh // m) * -(-ow // m)
    nr = target.panel_columns_for(tiles)
    panels = -(-tiles // nr)
    f32 = Float32Type()
    xis = (m + 2) ** 2
    u = buf.PackedWeightOp(op.weight.owner.weight_name.data, False, MemRefType(f32, (xis, cout, c)), _shape(op.weight),
                           layout=f"winograd{m}")
    u.result.name_hint = (op.weight.name_hint or "w") + "_winograd"
    gemms = simplify(_dims(op.result)[0] * xis)  # a*a per image
    v = buf.AllocOp(shaped_memref(f32, (gemms, panels, c, nr)))
    v.result.name_hint = (op.input.name_hint or "x") + "_tiles"
    transform = buf.WinogradInputOp([ins[0]], [v.result], {"padding": op.padding, "tile": op.tile})
    products = buf.AllocOp(shaped_memref(f32, (gemms, cout, tiles)))
    products.result.name_hint = (op.result.name_hint or "conv") + "_products"
    matmuls = buf.PackedMatmulOp([u.result, v.result], [products.result])
    return [u, v, transform, products, matmuls], [products.result, *ins[2:]]


def _direct_conv_applies(op: Operation) -> str | None:
    """The weight is a model weight and the accumulator, if any, a per-channel bias or a whole
    residual (either reads as a matrix broadcasting to ``[Cout, OH * OW]``)."""
    assert isinstance(op, tg.WinogradConvOp)
    if not isinstance(op.weight.owner, tg.WeightOp):
        return "the weight is not a model weight"
    if op.acc is not None and _direct_acc_shape(op) is None:
        return f"the accumulator {list(_shape(op.acc))} is neither a per-channel bias nor a whole residual"
    return None


def _direct_acc_shape(op: tg.WinogradConvOp) -> tuple | None:
    """The accumulator seen as a matrix broadcasting to ``[Cout, OH * OW]`` (or ``[N, Cout, OH *
    OW]``, a residual over N images), or None."""
    assert op.acc is not None
    images, cout, oh, ow = _dims(op.result)
    acc = _dims(op.acc)
    dims = [d for d in acc if d != 1]
    if numel(acc) == cout and (dims == [cout] or cout == 1) and len(acc) >= 3 and acc[-3] == cout:
        return (cout, 1)
    if (1,) * (4 - len(acc)) + tuple(acc) == (1, cout, oh, ow):
        return (cout, oh * ow)
    if tuple(acc) == (images, cout, oh, ow):
        return (images, cout, oh * ow)
    return None


def _direct_conv_panels(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """The input's 3x3 windows straight into column panels (`buf.im2col` with ``panels``), the
    weight read as stored as the GEMM's A ``[Cout, C * 9]``, the accumulator as a matrix (N
    images: N sets of panels, a batch of GEMMs sharing that A)."""
    assert isinstance(op, tg.WinogradConvOp)
    cout, c = _shape(op.weight)[:2]
    weight = buf.ReshapeOp(ins[1], MemRefType(Float32Type(), (cout, c * 9)))
    return _windows_into_panels(op, ins, target, weight, Float32Type())


def _direct_conv_bf16_applies(op: Operation) -> str | None:
    """`_direct_conv_applies`, on a target with bf16 dot products."""
    if (why := _direct_conv_applies(op)) is not None:
        return why
    return _no_bf16_dots(op)


def _direct_conv_bf16_panels(op: Operation, ins: Sequence[SSAValue], target: Target) -> tuple[list[Operation], list[SSAValue]]:
    """`_direct_conv_panels` in bf16 (as `matmul.packed_rhs_bf16`): the weight as its bf16 rows
    packed at load time (`packing.Bf16RowsLayout`, ``[Cout, 2 ceil(9 C / 2)]``), the windows
    rounded to bf16 as `buf.im2col` writes them into panels of pairs along K."""
    assert isinstance(op, tg.WinogradConvOp) and isinstance(op.weight.owner, tg.WeightOp)
    return _windows_into_panels(op, ins, target, _bf16_rows_of(op.weight.owner), BFloat16Type())


def _windows_into_panels(op: tg.WinogradConvOp, ins: Sequence[SSAValue], target: Target, weight: Operation,
                         element: Attribute) -> tuple[list[Operation], list[SSAValue]]:
    """The direct convolution's GEMM operands: ``weight`` (the op making its A), the 3x3 windows packed by `buf.im2col` into column panels of ``element`` (float32
    ``[.., P, 9 C, NR]``, or bf16 pairs along K ``[.., P, ceil(9 C / 2), 2 NR]``), the accumulator
    as a matrix."""
    c = _shape(op.weight)[1]
    _, _, oh, ow = _shape(op.result)
    images = _dims(op.result)[0]
    nr = target.panel_columns_for(oh * ow)
    rows, width = _panel_rows(c * 9, nr, element)
    panels = buf.AllocOp(shaped_memref(element, (*([images] if images != 1 else []), -(-(oh * ow) // nr), rows, width)))
    panels.result.name_hint = (op.input.name_hint or "x") + "_panels"
    three, one = DenseArrayBase.from_list(i64, [3, 3]), DenseArrayBase.from_list(i64, [1, 1])
    props = {"kernel": three, "stride": one, "padding": op.padding, "dilation": one, "panels": IntegerAttr(nr, i64)}
    windows = buf.Im2colOp([ins[0]], [panels.result], props)
    ops: list[Operation] = [panels, windows, weight]
    if op.acc is not None:
        shape = _direct_acc_shape(op)
        assert shape is not None
        ops.append(buf.ReshapeOp(ins[2], shaped_memref(Float32Type(), shape)))
    return ops, [weight.results[0], panels.result, *([ops[-1].results[0]] if op.acc is not None else [])]


def _direct_conv(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> list[Operation]:
    """The GEMM ``[Cout, C * 9] x panels`` writing the output seen as ``[Cout, OH * OW]``."""
    assert isinstance(op, tg.WinogradConvOp)
    images, cout, oh, ow = _dims(op.result)
    view = buf.ReshapeOp(out, shaped_memref(Float32Type(), (*([images] if images != 1 else []), cout, oh * ow)))
    props = {k: op.properties[k] for k in ("alpha", "beta", "activation") if k in op.properties}
    return [view, buf.PackedMatmulOp(ins, [view.results[0]], props)]


register_kernel(
    tg.WinogradConvOp,
    KernelVariant(
        "winograd_conv.packed",
        _same_props(buf.WinogradOutputOp, "tile", "alpha", "beta", "activation"),
        _winograd_applies,
        "input transform into column panels, a batch of packed GEMMs by the weight transformed at "
        "load time, output transform with the epilogue",
        prepare=_winograd_gemms,
        packs_weights=True,
    ),
)
# the tg-level alternative, as a path of the same op: no Winograd after all (its transforms cost
# more than they save on few tiles; its error is a little larger), the convolution's GEMM as it was
register_kernel(
    tg.WinogradConvOp,
    KernelVariant(
        "winograd_conv.direct",
        _direct_conv,
        _direct_conv_applies,
        "no Winograd: the 3x3 windows packed into column panels by the graph, then the emitted GEMM "
        "reading the weight as stored (the convolution as it was before winograd-convolution)",
        prepare=_direct_conv_panels,
        packs_weights=True,
    ),
)
# the direct convolution in bf16: a path with its error, a tuner's within a tolerance (never the heuristic's)
register_kernel(
    tg.WinogradConvOp,
    KernelVariant(
        "winograd_conv.direct_bf16",
        _direct_conv,
        _direct_conv_bf16_applies,
        "no Winograd, in bf16: the 3x3 windows rounded to bf16 as the graph packs them into panels of pairs "
        "along K, the weight as bf16 rows packed at load time, float32 sums (AMX, AVX512-BF16)",
        prepare=_direct_conv_bf16_panels,
        packs_weights=True,
        error_floor=BF16_ERROR_FLOOR,
    ),
)
