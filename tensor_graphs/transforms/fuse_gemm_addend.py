"""`fuse-gemm-addend`: a residual added after a GEMM joins the GEMM's epilogue.

A ResNet block ends ``relu(conv3(x) + bias + shortcut)``: `fuse-matmul-epilogue` gives the GEMM
its bias (``acc``), and the residual add and ReLU stay a `buf.bias_activation` sweep over the
output, written and read back once more; a transformer block's ``x + linear(h)`` stays a `buf.add`
the same way. When one of its two operands (float32, both of the output's elements) is the output of a packed
GEMM that nothing else reads, and the other one has the same elements (a residual, not a
broadcast bias), that GEMM takes the other as its addend (`buf.packed_matmul`'s fourth input, or
its accumulator when it has none) and the activation, and writes the sum's buffer itself; it
moves to where the add was, after both operands are computed (a shortcut GEMM that runs after
the block's last convolution takes that convolution's output as its addend). A `buf`-level pass:
it runs before `plan-memory`.

```mlir
// before
%m = buf.alloc : memref<1x256x196xf32>
buf.packed_matmul ins(%w, %p, %b : memref<1x256x64xf32>, memref<13x64x16xf32>, memref<256x1xf32>) outs(%m : memref<1x256x196xf32>) {beta = 1.0 : f32}
%m4 = buf.reshape %m : memref<1x256x196xf32> -> memref<1x256x14x14xf32>
buf.bias_activation ins(%m4, %r : memref<1x256x14x14xf32>, memref<1x256x14x14xf32>) outs(%y : memref<1x256x14x14xf32>) {activation = "relu"}
// after
%r3 = buf.reshape %r : memref<1x256x14x14xf32> -> memref<1x256x196xf32>
%y3 = buf.reshape %y : memref<1x256x14x14xf32> -> memref<1x256x196xf32>
buf.packed_matmul ins(%w, %p, %b, %r3 : ...) outs(%y3 : memref<1x256x196xf32>) {beta = 1.0 : f32, activation = "relu"}
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import FloatAttr, ModuleOp, StringAttr, f32
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.symbolic import dims_of, shaped_memref


def sole_gemm(value: SSAValue, reader: Operation) -> buf.PackedMatmulOp | None:
    """The packed GEMM that writes ``value``'s buffer (through reshapes) for ``reader`` alone, with
    no activation or epilogue body of its own; else None."""
    root = buf.root_buffer(value)
    if not isinstance(root.owner, buf.AllocOp):
        return None
    found = buf.views_and_readers(root.owner)
    if found is None or len(found[1]) != 2:
        return None
    readers = found[1]
    gemm = next((op for op, v in readers if isinstance(op, buf.PackedMatmulOp) and op.output is v), None)
    if gemm is None or not any(op is reader for op, _ in readers):
        return None
    return gemm if gemm.activation.data == "none" and gemm.epilogue_body is None else None


def replace_with_gemm(rewriter: PatternRewriter, op: Operation, gemm: buf.PackedMatmulOp, new_ops: list[Operation],
                      fused: buf.PackedMatmulOp) -> None:
    """``op`` (what read ``gemm``'s output) replaced by ``new_ops`` and ``fused`` (``gemm`` with
    ``op``'s work in its epilogue, its kernel parameters kept); ``gemm``, its output buffer and
    that buffer's views erased."""
    fused.attributes.update(gemm.attributes)  # its kernel parameters (tg.k_block, ...)
    alloc = buf.root_buffer(gemm.output).owner
    found = buf.views_and_readers(alloc)  # type: ignore[arg-type]
    assert found is not None
    rewriter.replace_op(op, [*new_ops, fused], [])
    rewriter.erase_op(gemm)
    for dead in [*found[0], alloc]:  # the views, deepest first, then the buffer: unused now
        rewriter.erase_op(dead)


def _fusable_gemm(value: SSAValue, add: buf.BiasActivationOp | buf.AddOp) -> buf.PackedMatmulOp | None:
    """`sole_gemm` with room for an addend: one GEMM, or a batch of them sharing their A (a
    convolution over a batch of images), with at most an accumulator."""
    gemm = sole_gemm(value, add)
    if gemm is None:
        return None
    one_a = len(dims_of(gemm.inputs[1].type)) == 3 or len(dims_of(gemm.inputs[0].type)) == 2
    if len(gemm.inputs) > 3 or not one_a:
        return None
    if len(gemm.inputs) == 3 and gemm.flags[1] == 0.0:
        return None  # an accumulator with beta 0 is no accumulator: left as it is
    return gemm


def view_as(value: SSAValue, shape: tuple[int, ...]) -> tuple[list[Operation], SSAValue]:
    """``value`` seen as ``shape``: the ``buf.reshape`` that makes it (none when it has it) and the view."""
    if dims_of(value.type) == shape:
        return [], value
    view = buf.ReshapeOp(value, shaped_memref(value.type.element_type, shape))  # type: ignore[attr-defined]
    return [view], view.result


class FuseResidualIntoGemm(RewritePattern):
    """``bias_activation(gemm_out, residual)`` or ``add(gemm_out, residual)`` -> the GEMM with the
    residual as its addend (see the module doc)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: buf.BiasActivationOp | buf.AddOp, rewriter: PatternRewriter) -> None:
        x, other = op.inputs
        out = op.output
        if any(numel(dims_of(v.type)) != numel(dims_of(out.type)) or v.type.element_type != f32  # type: ignore[attr-defined]
               for v in (x, other, out)):
            return  # a broadcast bias (fuse-matmul-epilogue's), or not float32
        block = op.parent_block()
        if block is None:
            return
        candidates = [(g, addend) for g, addend in ((_fusable_gemm(x, op), other), (_fusable_gemm(other, op), x)) if g is not None]
        if not candidates:
            return
        # the GEMM computed last: the other operand is ready before it
        gemm, addend = max(candidates, key=lambda c: block.get_operation_index(c[0]))
        shape = dims_of(gemm.output.type)
        new_ops, addend_view = view_as(addend, shape)
        out_ops, out_view = view_as(out, shape)
        props = {k: v for k, v in gemm.properties.items() if k in ("alpha", "beta")}
        props["activation"] = StringAttr(op.activation.data if isinstance(op, buf.BiasActivationOp) else "none")
        inputs = list(gemm.inputs)
        if len(inputs) == 2:  # no accumulator: the residual is it
            props["beta"] = FloatAttr(1.0, f32)
        inputs.append(addend_view)
        replace_with_gemm(rewriter, op, gemm, [*new_ops, *out_ops], buf.PackedMatmulOp(inputs, [out_view], props))


@dataclass(frozen=True)
class FuseGemmAddendPass(ModulePass):
    """Move each residual add (and its activation) after a packed GEMM into the GEMM's epilogue."""

    name = "fuse-gemm-addend"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FuseResidualIntoGemm()]), apply_recursively=False).rewrite_module(op)
