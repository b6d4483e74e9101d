"""The kernel paths of a `tg`-level graph: per op, the variants that could run it.

`convert-tensor-to-buffer` asks the kernel registry (`lowering.tensor_to_buffer.kernels`) which
variant runs each op: the first that applies, unless the op pins one with the discardable
attribute ``tg.kernel`` (`kernels.KERNEL_ATTR`), which a tuner writes and `tg-opt` replays::

    %y = tg.matmul %x, %w {tg.kernel = "matmul.blas"} : (...) -> tensor<128x2304xf32>

`kernel_paths` lists, for every op that has a choice to make, the variant chosen today, every
variant that applies and why each other one does not: what a tuner enumerates and measures
(issue 14). `candidates` adds each variant's target-dependent parameters (`PARAMETER_SPACES`:
a packed GEMM's K block, register tile rows and panel width, its epilogue fused or separate,
the threads and chunks of a parallel kernel), which `pin` writes beside the
variant (`kernels.PARAMETER_ATTRS`) for `convert-tensor-to-buffer` to pass on to the kernel. The
tg-level alternatives that are real choices are paths of the op a tg pass made: BLAS or the
emitted GEMM (``matmul.blas``), a Winograd convolution or the convolution's GEMM as it was
before `winograd-convolution` (``winograd_conv.direct``)::

    %y = tg.matmul %x, %w {tg.kernel = "matmul.packed", tg.k_block = 128 : i64}
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Operation

from tensor_graphs.codegen.llvm.kernels_gemm import max_tile_rows
from tensor_graphs.dialects import tensor as tg
from tensor_graphs.lowering.tensor_to_buffer.kernels import (
    GPU_KERNEL_ATTR,
    GPU_PARAMETER_ATTRS,
    KERNEL_ATTR,
    PARAMETER_ATTRS,
    NoKernelError,
    op_name,
    select_kernel,
    variants_for,
)
from tensor_graphs.target import Target


@dataclass(frozen=True)
class OpPaths:
    """The choice one op offers: ``chosen`` (what `select_kernel` takes now: the pinned variant
    or the first that applies), every variant that ``applicable`` runs it, and the others with
    the reason they cannot (``rejected``)."""

    op: Operation
    chosen: str
    applicable: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return op_name(self.op)


def kernel_paths(module: ModuleOp, *, pack_weights: bool = True, choices_only: bool = True) -> Iterator[OpPaths]:
    """The kernel paths of every `tg` op of ``module`` with registered variants, in program
    order; with ``choices_only``, only the ops with two applicable variants or more. Variants
    that read a weight packed at load time are left out without ``pack_weights``."""
    for op in module.walk():
        variants = [v for v in variants_for(op) if pack_weights or not getattr(v, "packs_weights", False)]
        if not variants:
            continue
        reasons = [(v.name, v.applies(op)) for v in variants]
        applicable = tuple(name for name, why in reasons if why is None)
        if choices_only and len(applicable) < 2:
            continue
        try:
            chosen = select_kernel(op, pack_weights=pack_weights).name
        except NoKernelError:
            chosen = ""
        yield OpPaths(op, chosen, applicable, tuple((name, why) for name, why in reasons if why is not None))


@dataclass(frozen=True)
class Candidate:
    """One path of an op: a variant and the parameters it sets (none: the target's defaults,
    the path the heuristic takes)."""

    variant: str
    params: Mapping[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.variant + "".join(f" {k}={v}" for k, v in sorted(self.params.items()))

    @property
    def key(self) -> tuple:
        return (self.variant, tuple(sorted(self.params.items())))


#: ``space(op, target, threads)``: each parameter of a variant and the values worth trying for
#: ``op`` on ``target`` with up to ``threads`` threads (besides the default, which is always tried).
ParameterSpace = Callable[[Operation, Target, int], dict[str, list[int]]]
#: variant name -> its parameter space (variants not listed have no parameters).
PARAMETER_SPACES: dict[str, ParameterSpace] = {}

#: K blocks a packed GEMM tries besides the target's (`Target.gemm_k_block`): from a sliver of
#: L1 to beyond it (BLIS's KC for 16 columns and 32 KiB is 256).
K_BLOCKS = (64, 128, 256, 512)


def _thread_counts(threads: int) -> list[int]:
    """Fewer threads than the graph's, for a parallel kernel too small to pay for them all."""
    return [t for t in (1, 2, 4, 8) if t < threads]


#: Guided chunks per thread a parallel kernel tries besides `parallel_region.CHUNKS_PER_THREAD`:
#: one (a static split: each thread streams one contiguous range) and a few.
CHUNKS = (1, 4)


def _parallel_space(threads: int) -> dict[str, list[int]]:
    """A parallel kernel's threads (fewer than the graph's) and its chunks per thread."""
    return {"threads": _thread_counts(threads), "chunks": list(CHUNKS)} if threads > 1 else {}


def _has_epilogue(op: Operation) -> bool:
    """A GEMM with an activation or an accumulator to add: its epilogue can be fused or separate."""
    assert isinstance(op, tg.MatmulOp)
    return op.activation.data != "none" or (op.acc is not None and op.flags[3] != 0.0)


def _weight_read_once(op: Operation) -> bool:
    """The GEMM's rhs is a weight no other op reads (a panel width of its own costs no second
    packed copy: a tied LM head's table is read by the embedding too)."""
    rhs = op.operands[1]
    return isinstance(rhs.owner, tg.WeightOp) and len({use.operation for use in rhs.uses}) == 1


def _gemm_space(op: Operation, target: Target, threads: int) -> dict[str, list[int]]:
    """A packed GEMM: its K block (below K only: more is one block), its register tile's rows
    (half and two fewer than the target's: fewer accumulators, shorter row blocks), its panel
    width (one vector and half the widest tile, when narrower than the target's: a taller tile;
    only for a weight no other op reads), its epilogue fused or separate, its threads and chunks."""
    assert isinstance(op, tg.MatmulOp)
    a = op.operands[0].type.get_shape()  # type: ignore[attr-defined]
    k = a[-2] if op.properties.get("transpose_a") == tg.bool_attr(True) else a[-1]
    space = {"k_block": [kb for kb in K_BLOCKS if kb < k]}
    n = op.results[0].type.get_shape()[-1]  # type: ignore[attr-defined]
    nr = target.panel_columns_for(n)
    vectors = nr // target.float_lanes
    rows = target.gemm_tile(vectors)[0]
    space["mr"] = sorted({r for r in (rows // 2, rows - 2) if 1 <= r <= max_tile_rows(target.vector_registers, vectors)} - {rows})
    if not isinstance(op.operands[1].owner, tg.WeightOp) or _weight_read_once(op):
        widest = target.gemm_tile()[1]
        space["nr"] = sorted({v * target.float_lanes for v in (1, widest // 2) if 1 <= v < vectors})
    if _has_epilogue(op):
        space["separate_epilogue"] = [1]
    return {**space, **_parallel_space(threads)}


def _blas_space(op: Operation, target: Target, threads: int) -> dict[str, list[int]]:
    """OpenBLAS keeps its own threads and blocking; an activation is fused per output tile or
    swept after one sgemm."""
    return {"separate_epilogue": [1]} if op.activation.data != "none" else {}  # type: ignore[attr-defined]


def _threads_space(op: Operation, target: Target, threads: int) -> dict[str, list[int]]:
    return _parallel_space(threads)


def _bf16_gemm_space(op: Operation, target: Target, threads: int) -> dict[str, list[int]]:
    """The bf16 GEMM: its epilogue on each tile or in one sweep, its threads."""
    return {**({"separate_epilogue": [1]} if _has_epilogue(op) else {}), **_parallel_space(threads)}


def _int8_gemm_space(op: Operation, target: Target, threads: int) -> dict[str, list[int]]:
    """The int8 GEMM: the register-tiled GEMM's blocking (`_gemm_space`), its epilogue always on
    each tile (the sums are scaled back there)."""
    space = _gemm_space(op, target, threads)
    space.pop("separate_epilogue", None)
    return space


PARAMETER_SPACES.update({
    "matmul.packed": _gemm_space,
    "matmul.packed_rhs": _gemm_space,
    "matmul.blas": _blas_space,
    "matmul.packed_bf16": _bf16_gemm_space,
    "matmul.packed_int8": _int8_gemm_space,
    "attention.flash": _threads_space,
    "attention.flash_bf16": _threads_space,
})


def candidates(paths: OpPaths, target: Target, threads: int = 1) -> list[Candidate]:
    """Every path of ``paths.op``: each applicable variant with its default parameters, then
    with each parameter set to each other value in its space, one parameter at a time (a
    neighbourhood of the default, not the product: tuning stays linear in the choices)."""
    out: list[Candidate] = []
    for variant in paths.applicable:
        out.append(Candidate(variant))
        space = PARAMETER_SPACES.get(variant)
        for name, values in (space(paths.op, target, threads) if space else {}).items():
            out.extend(Candidate(variant, {name: v}) for v in values)
    return out


def pin(op: Operation, variant: str | Candidate) -> None:
    """Make ``op`` run by ``variant`` (``tg.kernel``), with the candidate's parameters (and no
    others); checked when the graph is lowered."""
    _pin(op, variant, KERNEL_ATTR, PARAMETER_ATTRS)


def _pin(op: Operation, variant: str | Candidate, kernel_attr: str, parameter_attrs: Mapping[str, str]) -> None:
    """``kernel_attr`` = the variant, each of ``parameter_attrs`` = the candidate's value or dropped."""
    candidate = variant if isinstance(variant, Candidate) else Candidate(variant)
    op.attributes[kernel_attr] = StringAttr(candidate.variant)
    for name, attr in parameter_attrs.items():
        if name in candidate.params:
            op.attributes[attr] = IntegerAttr(candidate.params[name], i64)
        else:
            op.attributes.pop(attr, None)


def unpin(op: Operation) -> None:
    """Drop every path choice of ``op`` (the CPU's and the GPU's): the heuristic decides again."""
    for attr in (KERNEL_ATTR, *PARAMETER_ATTRS.values(), GPU_KERNEL_ATTR, *GPU_PARAMETER_ATTRS.values()):
        op.attributes.pop(attr, None)


# --------------------------------------------------------------------------- the GPU's paths


def gpu_kernel_paths(module: ModuleOp) -> Iterator[OpPaths]:
    """The GPU kernel paths of every `tg` op of ``module`` with GPU variants
    (`codegen.triton.paths`): the heuristic's (or the pinned) variant, the applicable ones and
    why the others cannot run it."""
    from tensor_graphs.codegen.triton import paths as gpu
    from tensor_graphs.codegen.triton.expressions import TritonCodegenError

    for op in module.walk():
        if not op.name.startswith("tg.") or not (variants := gpu.variants(op)):
            continue
        reasons = [(v.name, v.applies(op)) for v in variants]
        try:
            chosen = gpu.selected(op)
        except TritonCodegenError:
            chosen = ""
        yield OpPaths(op, chosen, tuple(n for n, why in reasons if why is None), tuple((n, why) for n, why in reasons if why is not None))


def gpu_candidates(paths: OpPaths) -> list[Candidate]:
    """Every applicable GPU variant of the op with its default parameters, then, variant by
    variant, each parameter at each other value of its space
    (`codegen.triton.paths.GPU_PARAMETER_SPACES`): under a tuning time limit every variant is
    measured before any parameter sweep."""
    from tensor_graphs.codegen.triton import paths as gpu

    out: list[Candidate] = [Candidate(variant) for variant in paths.applicable]
    for variant in paths.applicable:
        space = gpu.GPU_PARAMETER_SPACES.get(variant)
        defaults = gpu.parameter_defaults(paths.op, variant)
        for name, values in (space(paths.op) if space else {}).items():
            out.extend(Candidate(variant, {name: v}) for v in values if v != defaults.get(name))
    return out


def pin_gpu(op: Operation, variant: str | Candidate) -> None:
    """Make ``op`` run by the GPU ``variant`` (``tg.gpu_kernel``) with the candidate's parameters
    (and no others); checked when it is lowered."""
    _pin(op, variant, GPU_KERNEL_ATTR, GPU_PARAMETER_ATTRS)
