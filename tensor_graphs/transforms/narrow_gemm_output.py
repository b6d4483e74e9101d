"""`narrow-gemm-output`: a GEMM writes bf16 where its results are bf16 values, or where every
reader rounds them to bf16.

A bfloat16 model computes in float32 and rounds every op's result (`widen-dtypes`), so a
convolution's GEMM whose epilogue is ``round(relu(round(y)))`` (`fuse-gemm-elementwise`) writes
float32 values that are all bf16 values: ``extf(truncf(v))``. Its readers (the next convolution's
panels, an elementwise loop, another GEMM's residual) read twice the bytes the values need; in a
bf16 ResNet-50 the activations between convolutions are most of the traffic. Where every reader
of the GEMM's buffer (through its reshapes) takes bf16 as well, the buffer becomes bf16: the
epilogue yields ``truncf(v)``, and each reader widens what it reads (exact: the same values):

* a `buf.im2col` that writes bf16 panels (it moves the values, now without rounding them);
* a `buf.fused_elementwise`: its block argument becomes bf16, followed by an ``arith.extf``;
* a `buf.packed_matmul` whose epilogue body takes the buffer as its last input (a residual):
  the same, in its body.

A GEMM whose epilogue does not round (a float32 model on bf16 paths: `matmul.packed_rhs_bf16`
at a tolerance) writes bf16, rounded as it stores each value (`kernels_gemm.stored_value`),
where its only readers are im2cols into bf16 panels: they round each value to bf16 as they move
it, so the next convolution reads the same bf16 values from half the bytes.

A max pool (`buf.im2col` reducing by max) that reads the GEMM's buffer counts as a reader that
takes bf16 where its own buffer's readers all do (in turn): it then pools bf16 into bf16, since
the largest of rounded values is the rounded largest (rounding to nearest is monotonic; NaN stays
NaN). ResNet-50's stem writes bf16 so, its pool reads and writes half the bytes (a float32 model
on bf16 panels: stem, pool and the next 1 x 1 convolution 1383 -> 1164 us, 0.85x, 1 thread, a
Xeon with AMX, `benchmarks/residual_epilogue.py --toggle pool --model stem`; bit for bit).

With ``round-activations`` (or the module's `ROUND_ACTIVATIONS`, which the tuner sets: a path
of the whole graph, `tuning.compile._rounded_activations`) a GEMM on AMX that adds the buffer as
its residual (its last input, unscaled) counts as a bf16 reader too, widening what it reads: a
ResNet's residual stream is written and read as bf16. Not exact: the residual adds see rounded
values (a float32 ResNet-50 tuned at 1e-2: 52 of 53 GEMMs write bf16 where 36 did, its error
against float64 3.5e-3 where it was 4.1e-3, 0.92x its time at 1 and at 2 threads, a Xeon with
AMX, `benchmarks/rounded_activations.py`).

A buffer any other op reads stays float32; so does one that is no `buf.alloc` (a graph's input
or output), and one a GEMM writes on the register tiles (`tiles_whole_k`: only AMX's tiles run
each output block over all of K, the target's, `tg.target`). A `buf`-level pass: it runs after `fuse-panels-into-gemm` (the panels' im2col inside
its GEMM) and before `plan-memory`, which then places half the bytes.

```mlir
// before
%y = buf.alloc : memref<1x64x3136xf32>
buf.packed_matmul ins(%w, %p, %b : ...) outs(%y : memref<1x64x3136xf32>) {beta = 1.0 : f32} epilogue {
^bb0(%0: f32):
  ...
  %5 = arith.truncf %4 : f32 to bf16
  %6 = arith.extf %5 : bf16 to f32
  buf.yield %6 : f32
}
%y4 = buf.reshape %y : memref<1x64x3136xf32> -> memref<1x64x56x56xf32>
buf.fused_elementwise ins(%y4 : memref<1x64x56x56xf32>) outs(%z : memref<1x64x56x56xf32>) {
^bb0(%7: f32):
  ...
}
// after
%y = buf.alloc : memref<1x64x3136xbf16>
buf.packed_matmul ins(%w, %p, %b : ...) outs(%y : memref<1x64x3136xbf16>) {beta = 1.0 : f32} epilogue {
^bb0(%0: f32):
  ...
  %5 = arith.truncf %4 : f32 to bf16
  buf.yield %5 : bf16
}
%y4 = buf.reshape %y : memref<1x64x3136xbf16> -> memref<1x64x56x56xbf16>
buf.fused_elementwise ins(%y4 : memref<1x64x56x56xbf16>) outs(%z : memref<1x64x56x56xf32>) {
^bb0(%8: bf16):
  %7 = arith.extf %8 : bf16 to f32
  ...
}
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, bf16, f32
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.symbolic import dims_of, shaped_memref
from tensor_graphs.target import Target
from tensor_graphs.target import of_module as target_of_module


#: A module attribute (set by the tuner, `tuning.compile.compile_tuned`, where the whole graph's
#: error stays within the tolerance and it runs faster): the GEMMs whose activations residual
#: adds read write them as bf16 too, and those adds widen them. Not exact: the residuals are rounded.
ROUND_ACTIVATIONS = "tg.round_activations"


def tiles_whole_k(op: buf.PackedMatmulOp, target: Target) -> bool:
    """Whether ``op`` runs on the target's AMX tiles (`Target.tiles_gemm`), each output block over
    all of K: there a bf16 output costs nothing but its rounding. The register tiles keep their
    sums in out between K blocks, which a bf16 out cannot hold: one would run all of K at once,
    its panel slices out of L1 (BLIS's KC), so they keep writing float32."""
    return (op.pairs or op.quads) and isinstance(op.k_words, int) and target.tiles_gemm(op.k_words, op.quads)


def rounded_yield(body: Block) -> tuple[buf.YieldOp, SSAValue] | None:
    """The body's yield and the bf16 value ``t`` when it yields ``extf(t)`` (a rounded float32), else None."""
    term = body.last_op
    if not isinstance(term, buf.YieldOp) or len(term.values) != 1:
        return None
    widened = term.values[0].owner
    if not isinstance(widened, arith.ExtFOp) or widened.input.type != bf16 or widened.result.type != f32:
        return None
    return term, widened.input


def _body_reading(reader: Operation, value: SSAValue) -> Block | None:
    """The block whose argument stands for ``value``'s elements in ``reader``: a loop's body, or
    a GEMM's epilogue body taking ``value`` as its last input; None where ``reader`` cannot read bf16."""
    if isinstance(reader, buf.FusedElementwiseOp) and value in reader.inputs and value is not reader.output:
        return reader.body.block
    if isinstance(reader, buf.PackedMatmulOp) and reader.body_takes_addend and value is reader.inputs[-1] \
            and value not in reader.inputs[:-1] and (len(reader.inputs) == 4 or reader.flags[1] == 1.0):
        return reader.epilogue_body  # (taken unscaled: an addend, or an accumulator at beta 1)
    return None


def _reads_bf16(reader: Operation, value: SSAValue, writer: Operation, exact: bool) -> bool:
    """Whether ``reader`` (of the buffer ``writer`` writes, as ``value``) can read it as bf16: of
    values that are bf16 values already (``exact``), or of any (the reader rounds each to bf16 itself)."""
    if reader is writer:
        return value is writer.output and value not in writer.inputs  # type: ignore[attr-defined]
    if isinstance(reader, buf.Im2colOp):
        return value is reader.inputs[0] and reader.output.type.element_type == bf16  # type: ignore[attr-defined]
    return exact and _body_reading(reader, value) is not None


def _adds_rounded(reader: Operation, value: SSAValue, target: Target) -> bool:
    """Whether ``reader`` is a GEMM on AMX's tiles that adds ``value`` in its epilogue as its last
    input (a residual: the 4th input, or the accumulator at beta 1), which it can read as bf16
    and widen; the values it adds are then rounded (`ROUND_ACTIVATIONS`)."""
    return isinstance(reader, buf.PackedMatmulOp) and not reader.body_takes_addend and len(reader.inputs) >= 3 \
        and value is reader.inputs[-1] and value not in reader.inputs[:-1] \
        and (len(reader.inputs) == 4 or reader.flags[1] == 1.0) and bool(tiles_whole_k(reader, target))


def _pooled(reader: Operation, value: SSAValue) -> buf.AllocOp | None:
    """The buffer of a max pooling that reads ``value`` (a `buf.im2col` reducing by max, from
    float32 into a `buf.alloc`): it may run on bf16 where that buffer's readers take bf16 in turn,
    since the largest of rounded values is the rounded largest (rounding to nearest is monotonic;
    up to the sign of a zero rounded from a float32 subnormal)."""
    if not isinstance(reader, buf.Im2colOp) or reader.reduce.data != "max" or value is not reader.inputs[0] \
            or reader.output.type.element_type != f32:  # type: ignore[attr-defined]
        return None
    alloc = buf.root_buffer(reader.output).owner
    return alloc if isinstance(alloc, buf.AllocOp) else None


def narrowed_buffers(writer: Operation, alloc: buf.AllocOp, exact: bool,
                     rounding: Target | None = None) -> list[tuple[buf.AllocOp, list, list]] | None:
    """The buffers that become bf16 with ``alloc`` (which ``writer`` writes): itself and those of
    the max poolings that read it (`_pooled`), each with its views and its (reader, operand)
    pairs; None where a reader of any cannot take bf16 (`_reads_bf16`; with ``rounding``, the
    target, also the AMX GEMMs adding it as a residual: `_adds_rounded`)."""
    uses = buf.views_and_readers(alloc)
    if uses is None:
        return None
    found = [(alloc, *uses)]
    for reader, value in uses[1]:
        if _reads_bf16(reader, value, writer, exact) or rounding is not None and _adds_rounded(reader, value, rounding):
            continue
        pool = _pooled(reader, value)
        more = narrowed_buffers(reader, pool, exact, rounding) if pool is not None else None
        if more is None:
            return None
        found += more
    return found


def _widen_argument(rewriter: PatternRewriter, block: Block, index: int) -> None:
    """Block argument ``index`` becomes bf16; its uses read its ``arith.extf``."""
    arg = rewriter.replace_value_with_new_type(block.args[index], bf16)
    wide = arith.ExtFOp(arg, f32)
    rewriter.insert_op(wide, InsertPoint.at_start(block))
    arg.replace_uses_with_if(wide.result, lambda use: use.operation is not wide)


class NarrowGemmOutput(RewritePattern):
    """A GEMM on AMX tiles yielding ``extf(truncf(v))`` into a buffer every reader of which takes
    bf16, or yielding any float32 into a buffer only bf16 panels read (directly, or through max
    pools) -> the buffer (and the pools') bf16, the epilogue yielding ``truncf(v)`` or rounding
    as it stores (see the module doc)."""

    def __init__(self, target: Target, rounding: bool = False):
        self.target, self.rounding = target, rounding

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: buf.PackedMatmulOp, rewriter: PatternRewriter) -> None:
        body = op.epilogue_body
        alloc = buf.root_buffer(op.output).owner
        if op.output.type.element_type != f32 or not isinstance(alloc, buf.AllocOp) or not tiles_whole_k(op, self.target):  # type: ignore[attr-defined]
            return
        found = rounded_yield(body) if body is not None else None
        buffers = narrowed_buffers(op, alloc, found is not None, self.target if self.rounding else None)
        if buffers is None:
            return
        widening = dict.fromkeys(arg for _, _, readers in buffers for reader, value in readers for arg in _arguments(reader, value))
        for root, views, _ in buffers:
            for value in [root.result, *(view.results[0] for view in reversed(views))]:
                rewriter.replace_value_with_new_type(value, shaped_memref(bf16, dims_of(value.type)))
        if found is not None:
            term, rounded = found
            widened = term.values[0].owner
            rewriter.replace(term, buf.YieldOp(rounded))
            if not widened.results[0].uses:  # type: ignore[union-attr]
                rewriter.erase(widened)  # type: ignore[arg-type]
        for block, index in widening:
            _widen_argument(rewriter, block, index)


def _arguments(reader: Operation, value: SSAValue) -> list[tuple[Block, int]]:
    """The (block, argument index) that stand for ``value`` in ``reader`` (`_body_reading`)."""
    block = _body_reading(reader, value)
    if block is None:
        return []
    if isinstance(reader, buf.FusedElementwiseOp):
        return [(block, i) for i, v in enumerate(reader.inputs) if v is value]
    return [(block, len(block.args) - 1)]


@dataclass(frozen=True)
class NarrowGemmOutputPass(ModulePass):
    """Make each GEMM on AMX write bf16 where its values are bf16 values its readers take as
    bf16, or where its only readers round them to bf16 panels."""

    name = "narrow-gemm-output"

    #: also round the activations residual adds read (`ROUND_ACTIVATIONS`), as the module's attribute asks
    round_activations: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rounding = self.round_activations or ROUND_ACTIVATIONS in op.attributes
        PatternRewriteWalker(GreedyRewritePatternApplier([NarrowGemmOutput(target_of_module(op), rounding)]),
                             apply_recursively=False).rewrite_module(op)
