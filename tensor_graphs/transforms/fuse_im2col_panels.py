"""`fuse-im2col-panels`: a convolution's windows written straight into the GEMM's column panels.

`convert-tensor-to-buffer` lowers ``weight @ cols`` (a convolution, `lowering.aten_to_tensor.
convolution`) to a packed GEMM whose rhs the graph packs itself: ``buf.im2col`` of a 1x1 window
with ``panels = NR`` over the activation (`buf.Im2colOp`). When that activation is the plain
``buf.im2col`` of the convolution's input, read by nothing else, the two copies become one: the
windows go to the panels directly, and the plain windows buffer (nine times the input for a 3x3
kernel) is never written or read. A `buf`-level pass: it runs before `plan-memory`.

A bf16 model's windows (`matmul.bf16_operands_rhs`: panels of bf16 pairs) of an activation that
a ``buf.cast`` widened from bf16 for them alone are packed from the bf16 values themselves: the
cast and its float32 buffer are gone (`FuseWideningIntoPairs`).

```mlir
// before
%c = buf.alloc : memref<1x64x3x3x56x56xf32>
buf.im2col ins(%x : memref<1x64x56x56xf32>) outs(%c : memref<1x64x3x3x56x56xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
%r = buf.reshape %c : memref<1x64x3x3x56x56xf32> to memref<1x576x3136xf32>
%r4 = buf.reshape %r : memref<1x576x3136xf32> to memref<1x576x1x3136xf32>
%p = buf.alloc : memref<196x576x16xf32>
buf.im2col ins(%r4 : memref<1x576x1x3136xf32>) outs(%p : memref<196x576x16xf32>) {kernel = array<i64: 1, 1>, ..., panels = 16 : i64}
// after
%p = buf.alloc : memref<196x576x16xf32>
buf.im2col ins(%x : memref<1x64x56x56xf32>) outs(%p : memref<196x576x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import BFloat16Type, IntegerAttr, ModuleOp, f32
from xdsl.ir import Operation
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


def _is_packing(op: buf.Im2colOp) -> bool:
    """A panel-layout im2col of a 1x1 window at stride 1 without padding: a plain packing."""
    kernel, stride, padding, _ = op.window
    return op.panel_columns > 0 and kernel == (1, 1) and stride == (1, 1) and padding == (0, 0)


class FuseIm2colIntoPanels(RewritePattern):
    """``im2col{panels}(reshape*(im2col(x)))`` -> ``im2col{window, panels}(x)`` when the plain
    windows are read by that packing alone (see the module doc)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: buf.Im2colOp, rewriter: PatternRewriter) -> None:
        if not _is_packing(op):
            return
        chain: list[Operation] = []
        value = op.inputs[0]
        while isinstance(value.owner, buf.ReshapeOp):
            chain.append(value.owner)
            value = value.owner.input
        alloc = value.owner
        if not isinstance(alloc, buf.AllocOp):
            return
        writers = [u.operation for u in alloc.result.uses if isinstance(u.operation, buf.Im2colOp)]
        # the alloc is written by one plain im2col and otherwise read only along the chain
        if len(writers) != 1 or len(list(alloc.result.uses)) != 2:
            return
        windows = writers[0]
        if windows.panel_columns or windows.output is not alloc.result:
            return
        images = dims_of(windows.inputs[0].type)[0]
        out = dims_of(op.output.type)
        if (out[0] if len(out) == 4 else 1) != images:  # one set of panels per image
            return
        for link, nxt in zip(chain, [op, *chain[:-1]]):
            if link.results[0].get_user_of_unique_use() is not nxt:
                return
        x = windows.inputs[0]
        if tuple(alloc.result.type.get_shape()[4:]) != windows.positions(tuple(dims_of(x.type))):
            return  # ceil_mode's extra window, which the panel layout does not count
        props = {name: windows.properties[name] for name in ("kernel", "stride", "padding", "dilation", "pad_value")}
        props["panels"] = IntegerAttr(op.panel_columns, op.panels.type)
        rewriter.replace_op(op, buf.Im2colOp([x], [op.output], props))
        for dead in chain:
            rewriter.erase_op(dead)
        rewriter.erase_op(windows)
        rewriter.erase_op(alloc)


class FuseWideningIntoPairs(RewritePattern):
    """``im2col{bf16 pairs}(reshape*(cast(x: bf16) : f32))`` -> ``im2col{bf16 pairs}(reshape(x))``
    when the float32 widening is read by that packing alone: its values are ``x``'s, whose bits
    are the pairs' halves (`kernels_movement._im2col_pairs`)::

        buf.cast ins(%x : memref<1x64x56x56xbf16>) outs(%w : memref<1x64x56x56xf32>)
        buf.im2col ins(%w : memref<1x64x56x56xf32>) outs(%p : memref<49x288x128xbf16>) {kernel = 3x3, panels = 64}
        ->
        buf.im2col ins(%x : memref<1x64x56x56xbf16>) outs(%p : memref<49x288x128xbf16>) {kernel = 3x3, panels = 64}
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: buf.Im2colOp, rewriter: PatternRewriter) -> None:
        if not op.pairs or op.inputs[0].type.element_type != f32:  # type: ignore[attr-defined]
            return
        alloc = buf.root_buffer(op.inputs[0]).owner
        found = buf.views_and_readers(alloc) if isinstance(alloc, buf.AllocOp) else None
        if found is None or len(found[1]) != 2 or not any(user is op for user, _ in found[1]):
            return  # written by the cast, read by the packing alone (through reshapes)
        views, readers = found
        cast = next((user for user, v in readers if isinstance(user, buf.CastOp) and user.outputs[0] is v), None)
        if cast is None or not isinstance(cast.inputs[0].type.element_type, BFloat16Type):  # type: ignore[attr-defined]
            return
        source = cast.inputs[0]
        shape = op.inputs[0].type
        if tuple(dims_of(source.type)) != tuple(dims_of(shape)):
            reshape = buf.ReshapeOp(source, shaped_memref(BFloat16Type(), dims_of(shape)))
            rewriter.insert_op(reshape, InsertPoint.before(op))
            source = reshape.results[0]
        rewriter.replace_op(op, buf.Im2colOp([source], [op.output], dict(op.properties)))
        for dead in [*views, cast, alloc]:  # the views deepest first, the widening, its buffer
            rewriter.erase_op(dead)


@dataclass(frozen=True)
class FuseIm2colPanelsPass(ModulePass):
    """Fold each convolution's plain im2col, and a bf16 activation's widening, into the packing of
    its GEMM's panels."""

    name = "fuse-im2col-panels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FuseIm2colIntoPanels(), FuseWideningIntoPairs()])).rewrite_module(op)
