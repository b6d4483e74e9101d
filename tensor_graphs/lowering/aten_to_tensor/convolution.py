"""aten → tg: convolution and pooling over NCHW (NCL for the 1-D forms), through `tg.im2col`.

A convolution is one GEMM in NCHW: ``weight[Cout, C*KH*KW] @ cols[N, C*KH*KW, OH*OW]``, the
weight as PyTorch stores it (a free reshape), the windows of the input as columns
(`tg.im2col`; a 1x1 kernel at stride 1 without padding needs none: its input already is that
matrix). Groups are a batch dim of that GEMM (depthwise: ``C`` groups of one channel). The bias
is a ``[Cout, 1]`` addend that ``fuse-matmul-epilogue`` folds into the GEMM with the activation
that follows. Pooling reduces the same windows (``-inf`` padding for max pooling); adaptive
average pooling with whole bins is a reshape and a mean. The 1-D forms are the 2-D ones over a
height of 1. Eval-mode ``batch_norm`` after a convolution was folded into its weights by the
importer already (`frontend/fold_batch_norm.py`).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloat, i1
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.tensor import (
    AddOp,
    AmaxOp,
    ConstantOp,
    DivOp,
    Im2colOp,
    MatmulOp,
    MeanOp,
    SumOp,
    shape_of,
)
from tensor_graphs.lowering.aten_to_tensor.common import OpList, append, element_type, elementwise_body, notify_match_failure


def _pair(values: tuple[int, ...], what: str, default: tuple[int, int] | None = None) -> tuple[int, int]:
    """A 2-D conv/pool parameter: one entry for both dims, or two."""
    if not values and default is not None:
        return default
    if len(values) == 1:
        return (values[0], values[0])
    if len(values) != 2:
        raise ValueError(f"{what} takes one or two entries, got {list(values)}")
    return (values[0], values[1])


def _ints(attr) -> tuple[int, ...]:
    return tuple(attr.get_values())


def _height_one(values: tuple[int, ...], height: int) -> tuple[int, ...]:
    """A 1-D op's parameter as the 2-D op's over a height of 1: ``(height, v)`` for one entry
    ``v`` (``height``: the identity along that dim, 1 for a kernel/stride/dilation, 0 for padding)."""
    return (height, values[0]) if len(values) == 1 else values


def convolution(
    ops: OpList,
    x,
    weight,
    bias,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
):
    """The NCHW convolution of ``x`` by ``weight`` [Cout, C/groups, KH, KW] (+ ``bias``) as tg ops."""
    n, c, _, _ = shape_of(x)
    cout, cg, kh, kw = shape_of(weight)
    if c % groups or cout % groups or cg * groups != c:
        raise ValueError(f"{c} input channels and weight {list(shape_of(weight))} do not make {groups} groups")
    if (kh, kw) == (1, 1) and stride == (1, 1) and padding == (0, 0):
        oh, ow = shape_of(x)[2:]
        cols = x
    else:
        cols = ops.add(Im2colOp(x, (kh, kw), stride, padding, dilation))
        oh, ow = shape_of(cols)[4:]
    k = cg * kh * kw
    if groups == 1:
        w = ops.reshape(weight, (cout, k))
        cols = ops.reshape(cols, (n, k, oh * ow))
    else:
        w = ops.reshape(weight, (groups, cout // groups, k))
        cols = ops.reshape(cols, (n, groups, k, oh * ow))
    y = ops.add(MatmulOp(w, cols))
    if bias is not None:  # on the product itself, so that the GEMM's epilogue takes it
        y = ops.add(AddOp(y, ops.reshape(bias, (*shape_of(w)[:-1], 1))))
    return ops.reshape(y, (n, cout, oh, ow))


class ConvolutionPattern(RewritePattern):
    """``conv2d`` (and ``conv1d``, over a height of 1; an unbatched input as a batch of one) as
    im2col + one GEMM + bias.

    ```mlir
    %y = aten.conv2d %x, %w, %b {padding = array<i64: 1, 1>} : (tensor<1x8x5x5xf32>, tensor<16x8x3x3xf32>, tensor<16xf32>) -> tensor<1x16x5x5xf32>
    // becomes
    %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x8x5x5xf32>) -> tensor<1x8x3x3x5x5xf32>
    %w2 = tg.reshape %w : (tensor<16x8x3x3xf32>) -> tensor<16x72xf32>
    %c2 = tg.reshape %c : (tensor<1x8x3x3x5x5xf32>) -> tensor<1x72x25xf32>
    %m = tg.matmul %w2, %c2 : (tensor<16x72xf32>, tensor<1x72x25xf32>) -> tensor<1x16x25xf32>
    %b2 = tg.reshape %b : (tensor<16xf32>) -> tensor<16x1xf32>
    %s = tg.add %m, %b2 : (tensor<1x16x25xf32>, tensor<16x1xf32>) -> tensor<1x16x25xf32>
    %y = tg.reshape %s : (tensor<1x16x25xf32>) -> tensor<1x16x5x5xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.Conv2dOp, aten.Conv1dOp)):
            return
        one_d = isinstance(op, aten.Conv1dOp)
        x_shape, w_shape = shape_of(op.input), shape_of(op.weight)
        rank = 3 if one_d else 4
        if len(x_shape) not in (rank, rank - 1) or len(w_shape) != rank:
            return notify_match_failure(op, f"expected an input of rank {rank} (or {rank - 1}, unbatched) and a weight of rank {rank}, "
                                            f"got {list(x_shape)} and {list(w_shape)}")
        ops = OpList()
        x, w = op.input, op.weight
        if len(x_shape) == rank - 1:  # unbatched: a batch of one
            x_shape = (1, *x_shape)
            x = ops.reshape(x, x_shape)
        params = [_ints(op.stride), _ints(op.padding), _ints(op.dilation)]
        if one_d:
            x = ops.reshape(x, (x_shape[0], x_shape[1], 1, x_shape[2]))
            w = ops.reshape(w, (w_shape[0], w_shape[1], 1, w_shape[2]))
            params = [_height_one(p, h) for p, h in zip(params, (1, 0, 1))]
        try:
            stride, padding, dilation = (_pair(p, name) for p, name in zip(params, ("stride", "padding", "dilation")))
            y = convolution(ops, x, w, op.bias, stride, padding, dilation, op.groups.value.data)
        except ValueError as e:
            return notify_match_failure(op, str(e))
        y = ops.reshape(y, shape_of(op.result))
        rewriter.replace(op, ops, [y])


def _pool_windows(op, ops: OpList, pad_value: float):
    """The windows of a 2-D or 1-D pooling op: (cols [N, C, KH*KW, OH, OW], its im2col)."""
    shape = shape_of(op.self)
    one_d = len(shape) == 3
    x = op.self
    if one_d:
        x = ops.reshape(x, (shape[0], shape[1], 1, shape[2]))
    kernel = _ints(op.kernel_size)
    stride = _ints(op.stride) or kernel
    padding, dilation = _ints(op.padding), _ints(op.dilation) if hasattr(op, "dilation") else (1,)
    if one_d:
        kernel, stride, padding, dilation = (_height_one(v, h) for v, h in zip((kernel, stride, padding, dilation), (1, 1, 0, 1)))
    k, s, p, d = (_pair(v, name) for v, name in zip((kernel, stride, padding, dilation), ("kernel_size", "stride", "padding", "dilation")))
    if any(2 * pp > kk for pp, kk in zip(p, k)):
        raise ValueError(f"padding {list(p)} should be at most half the kernel {list(k)}")
    im2col = Im2colOp(x, k, s, p, d, pad_value, bool(op.ceil_mode.value.data))
    cols = ops.add(im2col)
    n, c, _, _, oh, ow = shape_of(cols)
    return ops.reshape(cols, (n, c, k[0] * k[1], oh, ow)), im2col


def lowest_value(el) -> float:
    """What max pooling pads with: ``-inf``, or an integer dtype's minimum."""
    return float("-inf") if isinstance(el, AnyFloat) else float(-(2 ** (el.width.data - 1)))


class MaxPoolPattern(RewritePattern):
    """``max_pool2d`` / ``max_pool1d``: the max over each window, padded with ``-inf`` (integers:
    the dtype's minimum).

    ```mlir
    %y = aten.max_pool2d %x {kernel_size = array<i64: 2, 2>} : (tensor<1x8x4x4xf32>) -> tensor<1x8x2x2xf32>
    // becomes
    %c = tg.im2col %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, pad_value = 0xFF800000 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x2x2x2x2xf32>
    %r = tg.reshape %c : (tensor<1x8x2x2x2x2xf32>) -> tensor<1x8x4x2x2xf32>
    %y = tg.amax %r {dims = array<i64: 2>} : (tensor<1x8x4x2x2xf32>) -> tensor<1x8x2x2xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.MaxPool2dOp, aten.MaxPool1dOp)):
            return
        el = element_type(op.self)
        if el == i1:
            return notify_match_failure(op, f"{op.name.removeprefix('aten.')} of bool (torch refuses it too)")
        ops = OpList()
        try:
            cols, _ = _pool_windows(op, ops, lowest_value(el))
        except ValueError as e:
            return notify_match_failure(op, str(e))
        y = ops.add(AmaxOp(cols, (2,)))
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


def _avg_divisors(im2col: Im2colOp, size: tuple[int, int], count_include_pad: bool) -> np.ndarray:
    """torch's divisor of each average-pooling window [OH, OW]: its taps inside the padded input
    (``count_include_pad``) or inside the input."""
    (kh, kw), (sh, sw), (ph, pw), _ = im2col.window
    oh, ow = shape_of(im2col.result)[4:]

    def counts(positions: int, k: int, s: int, p: int, n: int) -> np.ndarray:
        start = np.arange(positions) * s - p
        end = np.minimum(start + k, n + p)
        padded = end - start
        inside = np.minimum(end, n) - np.maximum(start, 0)
        return padded if count_include_pad else inside

    return np.outer(counts(oh, kh, sh, ph, size[0]), counts(ow, kw, sw, pw, size[1])).astype(np.float32)


class AvgPoolPattern(RewritePattern):
    """``avg_pool2d``: the sum over each window divided by torch's divisor (the window's size
    unless ``ceil_mode``, ``count_include_pad = false`` or ``divisor_override`` change it: then a
    constant [OH, OW] of divisors; integers: divided toward zero, as torch's kernel does).

    ```mlir
    %y = aten.avg_pool2d %x {kernel_size = array<i64: 2, 2>} : (tensor<1x8x4x4xf32>) -> tensor<1x8x2x2xf32>
    // becomes
    %c = tg.im2col %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, ...} : (tensor<1x8x4x4xf32>) -> tensor<1x8x2x2x2x2xf32>
    %r = tg.reshape %c : (tensor<1x8x2x2x2x2xf32>) -> tensor<1x8x4x2x2xf32>
    %y = tg.mean %r {dims = array<i64: 2>} : (tensor<1x8x4x2x2xf32>) -> tensor<1x8x2x2xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.AvgPool2dOp, rewriter: PatternRewriter) -> None:
        el = element_type(op.self)
        if el == i1:
            return notify_match_failure(op, "avg_pool2d of bool (torch refuses it too)")
        ops = OpList()
        try:
            cols, im2col = _pool_windows(op, ops, 0.0)
        except ValueError as e:
            return notify_match_failure(op, str(e))
        include_pad = bool(op.count_include_pad.value.data)
        size = shape_of(op.self)[2:]
        divisors = _avg_divisors(im2col, size, include_pad)
        override = op.divisor_override
        if override is not None:
            divisors = np.full_like(divisors, float(override.value.data))
        taps = shape_of(cols)[2]
        if not isinstance(el, AnyFloat):  # integers: the sum divided toward zero (C++'s integer division, as torch)
            total = ops.add(SumOp(cols, (2,)))
            divisor = ops.add(ConstantOp(dense_from_numpy(divisors.astype(np.int64), el)))
            y = ops.add(elementwise_body([total, divisor], total.type, lambda block, a: append(block, arith.DivSIOp(a[0], a[1]))))
        elif np.all(divisors == taps):
            y = ops.add(MeanOp(cols, (2,)))
        else:
            total = ops.add(SumOp(cols, (2,)))
            y = ops.add(DivOp(total, ops.add(ConstantOp(dense_from_numpy(divisors, element_type(op.self))))))
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


def adaptive_bins(size: int, out: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling bins: ``[floor(i * size / out), ceil((i + 1) * size / out))``."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _pooling_matrix(size: int, out: int) -> np.ndarray:
    """[out, size]: row i averages bin i (float64: the constant takes the input's dtype)."""
    m = np.zeros((out, size), np.float64)
    for i, (a, b) in enumerate(adaptive_bins(size, out)):
        m[i, a:b] = 1.0 / (b - a)
    return m


class AdaptiveAvgPoolPattern(RewritePattern):
    """``adaptive_avg_pool2d`` / ``adaptive_avg_pool1d``. To one output: a mean over H, W. With
    whole bins (the size a multiple of the output): a reshape to [N, C, OH, H/OH, OW, W/OW] and a
    mean over the bins. Otherwise the bins overlap and differ in size: ``P_h @ x @ P_w^T`` with
    constant averaging matrices.

    ```mlir
    %y = aten.adaptive_avg_pool2d %x {output_size = array<i64: 1, 1>} : (tensor<1x8x7x7xf32>) -> tensor<1x8x1x1xf32>
    // becomes
    %m = tg.mean %x {dims = array<i64: 2, 3>, keepdim = true} : (tensor<1x8x7x7xf32>) -> tensor<1x8x1x1xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.AdaptiveAvgPool2dOp, aten.AdaptiveAvgPool1dOp)):
            return
        shape = shape_of(op.self)
        spatial = 1 if isinstance(op, aten.AdaptiveAvgPool1dOp) else 2
        if len(shape) not in (spatial + 1, spatial + 2):
            return notify_match_failure(op, f"expected an input of rank {spatial + 1} or {spatial + 2}, got {list(shape)}")
        x = op.self
        ops = OpList()
        if len(shape) == spatial + 1:  # unbatched: a batch of one
            shape = (1, *shape)
            x = ops.reshape(x, shape)
        if spatial == 1:
            x = ops.reshape(x, (shape[0], shape[1], 1, shape[2]))
        n, c, h, w = shape_of(x)
        out = _ints(op.output_size)
        oh, ow = (1, out[0]) if spatial == 1 else _pair(out, "output_size")
        if (oh, ow) == (1, 1):
            y = ops.add(MeanOp(x, (2, 3), keepdim=True))
        elif h % oh == 0 and w % ow == 0:
            y = ops.add(MeanOp(ops.reshape(x, (n, c, oh, h // oh, ow, w // ow)), (3, 5)))
        else:
            el = element_type(x)
            ph = ops.add(ConstantOp(dense_from_numpy(_pooling_matrix(h, oh), el)))
            pwt = ops.add(ConstantOp(dense_from_numpy(_pooling_matrix(w, ow).T.copy(), el)))
            y = ops.add(MatmulOp(ph, ops.add(MatmulOp(x, pwt))))
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


def populate_convolution_patterns() -> list[RewritePattern]:
    return [ConvolutionPattern(), MaxPoolPattern(), AvgPoolPattern(), AdaptiveAvgPoolPattern()]
