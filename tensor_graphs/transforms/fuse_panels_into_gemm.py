"""`fuse-panels-into-gemm`: a packed GEMM writes its own panels, a chunk at a time.

A convolution's GEMM reads column panels that a `buf.im2col` with ``panels`` wrote over the
whole image first (`fuse-im2col-panels`): the panels of a 3x3 convolution over 64 channels at
56 x 56 are 3.6 MB of bf16 pairs (7.2 MB in float32), written to memory and read back, where the
activation they are made of is 0.8 MB. When that `buf.im2col` is the only writer of the panels
and the GEMM their only reader, it moves into the GEMM's ``packing`` region
(`buf.PackedMatmulOp`): the code (`codegen.llvm.panel_packing`) then writes each thread's panels
a chunk at a time into a scratch that fits in L2, right before the GEMM's tiles read them, so
the panels never go to memory. The input of the windows is an operand of the GEMM from then on:
its lifetime runs to the GEMM (`buf.lifetime` counts an op in a region as the op holding it),
so `plan-memory` never gives the GEMM's output its bytes. A `buf`-level pass: it runs before
`plan-memory`.

```mlir
// before
%p = buf.alloc : memref<98x288x64xbf16>
buf.im2col ins(%x : memref<1x64x56x56xf32>) outs(%p : memref<98x288x64xbf16>) {kernel = array<i64: 3, 3>, ..., panels = 32 : i64}
%y = buf.alloc : memref<64x3136xf32>
buf.packed_matmul ins(%w, %p : memref<64x576xbf16>, memref<98x288x64xbf16>) outs(%y : memref<64x3136xf32>)
// after
%p = buf.alloc : memref<98x288x64xbf16>
%y = buf.alloc : memref<64x3136xf32>
buf.packed_matmul ins(%w, %p : memref<64x576xbf16>, memref<98x288x64xbf16>) outs(%y : memref<64x3136xf32>) packing {
  buf.im2col ins(%x : memref<1x64x56x56xf32>) outs(%p : memref<98x288x64xbf16>) {kernel = array<i64: 3, 3>, ..., panels = 32 : i64}
}
```

Over a static batch of images (panels ``[N, P, K, NR]``: a batch of GEMMs) the same; left alone:
a run-time count of images, and panels some other op also reads or writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.symbolic import dims_of


def _writes_between(first: Operation, last: Operation, root) -> bool:
    """Whether an op after ``first`` and before ``last`` (one block) writes the buffer ``root``."""
    op = first.next_op
    while op is not None and op is not last:
        if any(buf.root_buffer(v) is root for v in getattr(op, "outputs", ())):
            return True
        op = op.next_op
    return op is None


class MovePanelsIntoGemm(RewritePattern):
    """``im2col{panels}(x) -> %p; packed_matmul(a, %p)`` -> ``packed_matmul(a, %p) packing {
    im2col{panels}(x) -> %p }`` (see the module doc)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: buf.Im2colOp, rewriter: PatternRewriter) -> None:
        if op.panel_columns <= 0 or op.reduce.data or isinstance(op.parent_op(), buf.PackedMatmulOp):
            return
        alloc = op.output.owner
        if not isinstance(alloc, buf.AllocOp):
            return
        users = [use.operation for use in alloc.result.uses]
        gemm = next((u for u in users if isinstance(u, buf.PackedMatmulOp)), None)
        if len(users) != 2 or gemm is None or op not in users or gemm.inputs[1] is not alloc.result:
            return
        if gemm.packing is not None or any(v is alloc.result for v in (*gemm.inputs[2:], gemm.output)):
            return
        x = op.inputs[0]
        images = dims_of(x.type)[0]
        if not isinstance(images, int) or (images == 1) != (len(dims_of(op.output.type)) == 3) \
                or gemm.parent_block() is not op.parent_block():
            return  # a run-time count of images
        if _writes_between(op, gemm, buf.root_buffer(x)):
            return  # the windows would read what an op between them wrote
        epilogue = gemm.epilogue.clone() if gemm.epilogue is not None else None
        fused = buf.PackedMatmulOp(list(gemm.inputs), list(gemm.outputs), dict(gemm.properties), epilogue=epilogue,
                                   packing=Region(Block([op.clone()])))
        fused.attributes.update(gemm.attributes)  # its kernel parameters (tg.k_block, ...)
        rewriter.replace_op(gemm, fused, [])
        rewriter.erase_op(op)


@dataclass(frozen=True)
class FusePanelsIntoGemmPass(ModulePass):
    """Move each convolution's panel packing into the GEMM that alone reads it."""

    name = "fuse-panels-into-gemm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(MovePanelsIntoGemm(), walk_regions_first=False).rewrite_module(op)
