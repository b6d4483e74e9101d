"""`fuse-gemm-rounding`: a bf16 model's rounding after a GEMM joins the GEMM's epilogue.

`widen-dtypes` computes a bfloat16 model in float32 and rounds each op's result to bf16 and back,
so a convolution followed by a ReLU becomes the GEMM, then a `buf.fused_elementwise` that rounds
its output, applies the ReLU and rounds again: one more sweep over the output, written and read
back (a fifth of a bf16 ResNet-50's time). When a packed GEMM's output (read by nothing else, no
activation of its own) is the one input of such a body, the GEMM takes the activation and the
rounding (`buf.packed_matmul {rounding = "bf16"}`) and writes the body's buffer itself.

The bodies taken: ``round(x)`` and ``round(relu(round(x)))``, which is ``round(relu(x))``
(rounding to nearest is monotone and keeps zero and the sign, so it commutes with the ReLU: the
same values, NaN included; the epilogue's ReLU keeps a -0.0 where ``maximumf`` gives +0.0);
``round`` is ``arith.truncf`` to bf16 then ``arith.extf`` to f32. A
body whose result is bf16 itself (a model output) is left alone: the GEMM writes float32. A
`buf`-level pass: it runs before `plan-memory`.

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
buf.packed_matmul ins(%w, %p, %b : ...) outs(%y3 : memref<1x64x3136xf32>) {beta = 1.0 : f32, activation = "relu", rounding = "bf16"}
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import BFloat16Type, FloatAttr, ModuleOp, StringAttr, f32
from xdsl.ir import Block, Operation, SSAValue
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
from tensor_graphs.transforms.fuse_gemm_addend import replace_with_gemm, sole_gemm, view_as


def _rounded(ops: list[Operation], i: int, x: SSAValue) -> SSAValue | None:
    """The f32 result of ``ops[i:i + 2]`` when they are ``extf(truncf(x) to bf16)``, else None."""
    if len(ops) < i + 2:
        return None
    trunc, ext = ops[i], ops[i + 1]
    if trunc.name != "arith.truncf" or trunc.operands[0] is not x or not isinstance(trunc.results[0].type, BFloat16Type):
        return None
    if ext.name != "arith.extf" or ext.operands[0] is not trunc.results[0] or ext.results[0].type != f32:
        return None
    return ext.results[0]


def _is_zero(value: SSAValue) -> bool:
    """``value`` is the constant +0.0."""
    owner = value.owner
    if not isinstance(owner, Operation) or owner.name != "arith.constant":
        return False
    attr = owner.properties.get("value", owner.attributes.get("value"))
    return isinstance(attr, FloatAttr) and attr.value.data == 0.0 and str(attr.value.data) == "0.0"


def _relu_of(op: Operation, x: SSAValue) -> SSAValue | None:
    """The result of ``op`` when it is ``maximumf(x, +0.0)`` (either order), else None."""
    if op.name != "arith.maximumf" or x not in op.operands:
        return None
    other = op.operands[1] if op.operands[0] is x else op.operands[0]
    return op.results[0] if _is_zero(other) else None


def rounded_activation(block: Block) -> str | None:
    """``"none"`` when the body is ``round(x)``, ``"relu"`` when it is ``round(relu(round(x)))``,
    of its one float32 argument, yielding float32; else None (see the module doc)."""
    if len(block.args) != 1 or block.args[0].type != f32:
        return None
    ops = [o for o in block.ops if o.name != "arith.constant"]  # round, [relu, round,] yield
    x = _rounded(ops, 0, block.args[0])
    if x is None:
        return None
    act = "none"
    if len(ops) == 6 and (relu := _relu_of(ops[2], x)) is not None:
        x, act = _rounded(ops, 3, relu), "relu"
    elif len(ops) != 3:
        return None
    last = ops[-1]
    if x is None or last.name != "buf.yield" or list(last.operands) != [x]:
        return None
    return act


class FuseRoundingIntoGemm(RewritePattern):
    """``fused_elementwise{round(relu?(...))}(gemm_out)`` -> the GEMM with the activation and
    ``rounding = "bf16"`` (see the module doc)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: buf.FusedElementwiseOp, rewriter: PatternRewriter) -> None:
        if len(op.inputs) != 1 or len(op.outputs) != 1 or op.outputs[0].type.element_type != f32:  # type: ignore[attr-defined]
            return
        act = rounded_activation(op.body.block)
        gemm = sole_gemm(op.inputs[0], op) if act is not None else None
        if gemm is None or dims_of(op.inputs[0].type) != dims_of(op.outputs[0].type):
            return
        out_ops, out_view = view_as(op.outputs[0], dims_of(gemm.output.type))
        props = dict(gemm.properties)
        props["activation"], props["rounding"] = StringAttr(act), StringAttr("bf16")
        replace_with_gemm(rewriter, op, gemm, out_ops, buf.PackedMatmulOp(list(gemm.inputs), [out_view], props))


@dataclass(frozen=True)
class FuseGemmRoundingPass(ModulePass):
    """Move each bf16 rounding (and ReLU) after a packed GEMM into the GEMM's epilogue."""

    name = "fuse-gemm-rounding"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FuseRoundingIntoGemm()]), apply_recursively=False).rewrite_module(op)
