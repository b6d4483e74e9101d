"""`fuse-gemm-elementwise`: the elementwise loop after a packed GEMM joins the GEMM's epilogue.

`fuse-matmul-epilogue` gives a GEMM the activations it names (relu, gelu, silu, ...); any other
elementwise function of a GEMM's output alone stays a `buf.fused_elementwise` loop after it: one
more sweep over the output, written and read back. A bfloat16 model is full of them: `widen-dtypes`
computes it in float32 and rounds each op's result to bf16 and back, so a convolution and its
ReLU, or a linear layer and its GELU, become the GEMM and then a loop that rounds its output,
applies the activation and rounds again (a fifth of a bf16 ResNet-50's time, an eighth of a bf16
BertLayer's). When such a loop's one input is the output of a packed GEMM that nothing else reads
(no activation or epilogue of its own), and the loop writes float32 or bf16 of the same shape, the
GEMM takes the loop's body as its ``epilogue`` (`buf.PackedMatmulOp`), applied to each output as
it is written, and writes the loop's buffer itself. The values are the loop's: the same body on
the same float32 sums; a loop whose result is bf16 (a bf16 model's residual block, rounded once
more at its end) makes the GEMM write bf16, where it runs on AMX tiles (each output block over
all of K: `narrow_gemm_output.tiles_whole_k`; elsewhere the loop stays). A loop over a GEMM's
output and one more operand of its shape, float32 or bf16 (a gated or scaled residual:
``r + 0.3 * y * sigmoid(r)``; a bf16 model's ``round(relu(round(y) + r))``) joins the same way,
when the GEMM has room for one
more input: the operand becomes its last input (its accumulator with beta 1, or its addend after
a bias) and the body its epilogue of two arguments, the GEMM's value first; where both operands
are GEMMs' outputs, the one computed last takes the other. A `buf`-level pass: it runs before
`plan-memory`.

```mlir
// before
%m = buf.alloc : memref<1x64x3136xf32>
buf.packed_matmul ins(%w, %p, %b : memref<1x64x576xbf16>, memref<49x288x128xbf16>, memref<64x1xf32>) outs(%m : memref<1x64x3136xf32>) {beta = 1.0 : f32}
%m4 = buf.reshape %m : memref<1x64x3136xf32> -> memref<1x64x56x56xf32>
buf.fused_elementwise ins(%m4 : memref<1x64x56x56xf32>) outs(%y : memref<1x64x56x56xf32>) {
^bb0(%0: f32):
  %1 = arith.truncf %0 : f32 to bf16
  %2 = arith.extf %1 : bf16 to f32
  %3 = arith.constant 0.0 : f32
  %4 = arith.maximumf %2, %3 : f32
  %5 = arith.truncf %4 : f32 to bf16
  %6 = arith.extf %5 : bf16 to f32
  buf.yield %6 : f32
}
// after
%y3 = buf.reshape %y : memref<1x64x56x56xf32> -> memref<1x64x3136xf32>
buf.packed_matmul ins(%w, %p, %b : ...) outs(%y3 : memref<1x64x3136xf32>) {beta = 1.0 : f32} epilogue {
^bb0(%0: f32):
  ... (the same body)
}
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import FloatAttr, ModuleOp, bf16, f32
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.symbolic import dims_of
from tensor_graphs.target import Target
from tensor_graphs.target import of_module as target_of_module
from tensor_graphs.transforms.fuse_gemm_addend import replace_with_gemm, sole_gemm, view_as
from tensor_graphs.transforms.narrow_gemm_output import tiles_whole_k


class FuseElementwiseIntoGemm(RewritePattern):
    """``fused_elementwise{body}(gemm_out)`` -> the GEMM with ``body`` as its epilogue;
    ``fused_elementwise{body}(gemm_out, r)`` -> the GEMM with ``r`` as its last input and ``body``
    as its epilogue of two arguments (see the module doc)."""

    def __init__(self, target: Target):
        self.target = target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: buf.FusedElementwiseOp, rewriter: PatternRewriter) -> None:
        block = op.body.block
        shape = dims_of(op.output.type)
        if op.output.type.element_type not in (f32, bf16) or len(op.inputs) not in (1, 2) or len(block.args) != len(op.inputs):  # type: ignore[attr-defined]
            return
        if any(a.type not in (f32, bf16) for a in block.args) or any(dims_of(v.type) != shape for v in op.inputs):
            return  # float32 (or bf16, the other operand) values of the output's shape each (no broadcast)
        found = [(i, gemm) for i, v in enumerate(op.inputs) if block.args[i].type == f32 and (gemm := sole_gemm(v, op)) is not None]
        if op.output.type.element_type == bf16:  # type: ignore[attr-defined]
            found = [(i, gemm) for i, gemm in found if tiles_whole_k(gemm, self.target)]
        if not found:
            return
        if len(op.inputs) == 1:
            gemm = found[0][1]
            out_ops, out_view = view_as(op.output, dims_of(gemm.output.type))
            fused = buf.PackedMatmulOp(list(gemm.inputs), [out_view], dict(gemm.properties), epilogue=op.body.clone())
            replace_with_gemm(rewriter, op, gemm, out_ops, fused)
            return
        self._with_operand(op, found, rewriter)

    def _with_operand(self, op: buf.FusedElementwiseOp, found: list, rewriter: PatternRewriter) -> None:
        """A loop over a GEMM's output and one more operand: the operand becomes the GEMM's last
        input (its accumulator, beta 1, or its addend), which the body takes as its second
        argument; the GEMM computed last, when both are GEMMs' (the other is ready before it)."""
        parent = op.parent_block()
        assert parent is not None
        which, gemm = max(found, key=lambda f: parent.get_operation_index(f[1]))
        other = op.inputs[1 - which]
        if len(gemm.inputs) > 3 or buf.root_buffer(other) is buf.root_buffer(op.output):
            return  # no room for one more input; or the loop writes in place over it
        shape = dims_of(gemm.output.type)
        new_ops, other_view = view_as(other, shape)
        out_ops, out_view = view_as(op.output, shape)
        props = dict(gemm.properties)
        if len(gemm.inputs) == 2:  # no accumulator: the operand is it
            props["beta"] = FloatAttr(1.0, f32)
        body = op.body.clone()
        if which == 1:  # the GEMM's value first
            first = body.block.insert_arg(f32, 0)
            body.block.args[2].replace_all_uses_with(first)
            body.block.erase_arg(body.block.args[2])
        fused = buf.PackedMatmulOp([*gemm.inputs, other_view], [out_view], props, epilogue=body)
        replace_with_gemm(rewriter, op, gemm, [*new_ops, *out_ops], fused)


@dataclass(frozen=True)
class FuseGemmElementwisePass(ModulePass):
    """Move each elementwise loop over a packed GEMM's output alone into the GEMM's epilogue."""

    name = "fuse-gemm-elementwise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FuseElementwiseIntoGemm(target_of_module(op))]),
                             apply_recursively=False).rewrite_module(op)
