"""`winograd-convolution`: stride-1 3x3 convolutions by Winograd's minimal filtering.

`convert-aten-to-tensor` lowers a convolution to im2col + one GEMM
(`lowering.aten_to_tensor.convolution`). For a 3x3 kernel at stride 1 and dilation 1 over each
image (of a batch, its size static or a symbol), F(2x2, 3x3) (`dialects.winograd`) does the same in 2.25x fewer FLOPs: 16 GEMMs of
``[Cout, C] @ [C, tiles]`` between an input and an output transform, the weight transformed once
at load. The GEMM's epilogue (bias, residual, activation: `fuse-matmul-epilogue`) moves to the
output transform. Run after `fuse-matmul-epilogue`; `dce` removes the windows left unused.

```mlir
// before
%c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x64x56x56xf32>) -> tensor<1x64x3x3x56x56xf32>
%w2 = tg.reshape %w : (tensor<64x64x3x3xf32>) -> tensor<64x576xf32>
%c2 = tg.reshape %c : (tensor<1x64x3x3x56x56xf32>) -> tensor<1x576x3136xf32>
%m = tg.matmul %w2, %c2, %b {beta = 1.0 : f32, activation = "relu"} : (tensor<64x576xf32>, tensor<1x576x3136xf32>, tensor<64x1xf32>) -> tensor<1x64x3136xf32>
// after
%b3 = tg.reshape %b : (tensor<64x1xf32>) -> tensor<64x1x1xf32>
%y = tg.winograd_conv %x, %w, %b3 {padding = array<i64: 1, 1>, tile = 2 : i64, beta = 1.0 : f32, activation = "relu"} : (...) -> tensor<1x64x56x56xf32>
%m = tg.reshape %y : (tensor<1x64x56x56xf32>) -> tensor<1x64x3136xf32>
```

Convolutions it leaves alone (they stay one GEMM): groups, other kernels, strides or
dilations, a weight computed by the graph, fewer than `MIN_CHANNELS` input or output channels
(GEMMs too thin for the transforms to pay), more than `MAX_TILES` tiles (the transforms stage one
channel's tiles on the stack).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects.tensor import Im2colOp, MatmulOp, ReshapeOp, WeightOp, WinogradConvOp, shape_of
from tensor_graphs.dialects.winograd import tiles
from tensor_graphs.transforms.fusion.common import float32_kernel

#: Output tile side (F(2x2, 3x3)).
TILE = 2
#: Fewer input or output channels than this keep the im2col GEMM: a GEMM with K or M this small
#: runs far below peak, and the transforms' memory traffic outweighs the FLOPs saved.
MIN_CHANNELS = 16
#: At most this many tiles per image: the transforms stage one channel's ``16 x tiles`` values
#: on each thread's stack (128 KiB).
MAX_TILES = 2048


def _source(value, cls):
    """The op of class ``cls`` that ``value`` is, looking through reshapes; else None."""
    while isinstance(value.owner, ReshapeOp):
        value = value.owner.input
    return value.owner if isinstance(value.owner, cls) else None


class ConvolutionToWinograd(RewritePattern):
    """``matmul(reshape(weight[Cout, C, 3, 3]), reshape(im2col_3x3_s1(x)), acc?)`` ->
    ``reshape(winograd_conv(x, weight, reshape(acc)?))`` (see the module doc)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MatmulOp, rewriter: PatternRewriter) -> None:
        transpose_a, transpose_b, alpha, beta = op.flags
        if transpose_a or transpose_b:
            return
        weight = op.lhs.owner.input if isinstance(op.lhs.owner, ReshapeOp) else None
        windows = op.rhs.owner.input.owner if isinstance(op.rhs.owner, ReshapeOp) else None
        if weight is None or not isinstance(weight.owner, WeightOp) or not isinstance(windows, Im2colOp):
            return
        kernel, stride, padding, dilation = windows.window
        if (kernel, stride, dilation) != ((3, 3), (1, 1), (1, 1)) or windows.pad_value.value.data != 0.0:
            return
        x = windows.input
        n, c, h, w = shape_of(x)
        cout = shape_of(weight)[0]
        oh, ow = h + 2 * padding[0] - 2, w + 2 * padding[1] - 2
        if shape_of(weight) != (cout, c, 3, 3) or shape_of(windows.result)[4:] != (oh, ow):
            return
        if shape_of(op.result) != (n, cout, oh * ow) or min(c, cout) < MIN_CHANNELS:
            return
        if tiles(oh, TILE) * tiles(ow, TILE) > MAX_TILES:
            return
        if any(not isinstance(v.type.element_type, Float32Type) for v in (x, weight, op.result)):  # type: ignore[attr-defined]
            return
        if not float32_kernel(x):
            return
        new_ops = []
        acc = op.acc
        if acc is not None:
            shape = shape_of(acc)
            if not shape or len(shape) > 3 or shape[-1] not in (1, oh * ow):
                return
            spatial = (1, 1) if shape[-1] == 1 else (oh, ow)
            new_ops.append(ReshapeOp(acc, (*shape[:-1], *spatial)))
            acc = new_ops[-1].result
        conv = WinogradConvOp(x, weight, acc, padding, tile=TILE, alpha=alpha, beta=beta, activation=op.activation.data)
        flat = ReshapeOp(conv.result, shape_of(op.result))
        rewriter.replace_op(op, [*new_ops, conv, flat])


@dataclass(frozen=True)
class WinogradConvolutionPass(ModulePass):
    """Run each eligible stride-1 3x3 convolution as F(2x2, 3x3) Winograd GEMMs."""

    name = "winograd-convolution"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([ConvolutionToWinograd()]), apply_recursively=False).rewrite_module(op)
