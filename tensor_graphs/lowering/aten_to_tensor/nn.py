"""aten → tg: Core ATen's general neural-network ops, as compositions of the tg ops the named
forms lower to (`convolution.py`, `normalization.py`).

- ``convolution`` (what ``conv1d``/``conv2d``/``conv_transpose*`` decompose into): not transposed,
  the im2col GEMM of `convolution.convolution` (unbatched inputs get a batch of one); transposed,
  the same convolution over the input spread out by the stride (zeros between its elements, a
  ``tg.put`` into a zero tensor) by the flipped, channel-transposed weight, cropped by the
  padding. 3-D convolutions are refused by name.
- ``max_pool2d_with_indices``: the max of each window (`MaxPoolPattern`'s windows) and its
  position in the input plane: the window's arg-max (``tg.arg_reduce``) looked up in a constant
  table of each window element's input position (-1 for padding, never the max).
- ``native_layer_norm`` / ``native_group_norm`` / ``_native_batch_norm_legit(.no_stats)``: the
  normalised output and the saved ``mean`` and ``rstd`` (`tg.mean` of the deviations squared),
  batch norm with the batch's own statistics (what ``instance_norm`` decomposes into).
- ``_cdist_forward`` / ``_pdist_forward``: ``(sum |x1_i - x2_j|^p)^(1/p)`` over broadcast
  differences (p = 2 as a sqrt, p = inf a max, p = 0 a count), the pairs of ``pdist`` gathered
  by constant row indices.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import i1, i64
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.tensor import (
    AddOp,
    AmaxOp,
    ArgReduceOp,
    BroadcastOp,
    ConstantOp,
    Im2colOp,
    MeanOp,
    MulOp,
    PutOp,
    RsqrtOp,
    SliceOp,
    SubOp,
    TakeOp,
    TransposeOp,
    shape_of,
)
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, notify_match_failure, scalar_constant
from tensor_graphs.lowering.aten_to_tensor.convolution import _height_one, _ints, _pair, convolution, lowest_value
from tensor_graphs.lowering.aten_to_tensor.normalization import trailing_layer_norm
from tensor_graphs.lowering.aten_to_tensor.reductions import p_norm
from tensor_graphs.lowering.aten_to_tensor.views import positions


def _spread(ops: OpList, x, stride: tuple[int, int], border: tuple[int, int], extra: tuple[int, int]):
    """``x`` [N, C, H, W] with ``stride - 1`` zeros between its elements, ``border`` zeros before
    and ``border + extra`` after along H and W: a put into a zero tensor at constant offsets."""
    n, c, h, w = shape_of(x)
    hb = (h - 1) * stride[0] + 1 + 2 * border[0] + extra[0]
    wb = (w - 1) * stride[1] + 1 + 2 * border[1] + extra[1]
    rows = border[0] + np.arange(h) * stride[0]
    cols = border[1] + np.arange(w) * stride[1]
    at = positions((n, c, hb, wb))[:, :, rows][:, :, :, cols]
    zeros = ops.add(BroadcastOp(ops.add(scalar_constant(0.0, element_type(x))), (n, c, hb, wb)))
    offsets = ops.add(ConstantOp(dense_from_numpy(np.ascontiguousarray(at), i64)))
    return ops.add(PutOp(zeros, offsets, x))


def _transposed_weight(ops: OpList, weight, groups: int):
    """A transposed convolution's weight [Cin, Cout/g, KH, KW] as the direct one's [Cout, Cin/g,
    KH, KW], spatially flipped: per group, the channels swapped."""
    cin, cog, kh, kw = shape_of(weight)
    w = ops.reshape(weight, (groups, cin // groups, cog, kh, kw))
    w = ops.add(TransposeOp(w, (0, 2, 1, 3, 4)))
    flip = positions((groups, cog, cin // groups, kh, kw))[:, :, :, ::-1, ::-1]
    w = ops.add(TakeOp(w, ops.add(ConstantOp(dense_from_numpy(np.ascontiguousarray(flip), i64)))))
    return ops.reshape(w, (groups * cog, cin // groups, kh, kw))


def _crop(ops: OpList, y, dim: int, start: int, size: int):
    return y if (start, size) == (0, shape_of(y)[dim]) else ops.add(SliceOp(y, dim, start, size))


def transposed_convolution(ops: OpList, x, weight, bias, stride, padding, dilation, output_padding, groups: int):
    """``conv_transpose2d``: the direct convolution (stride 1) of the spread input by the flipped
    weight, then cropped by ``padding``; output ``(H - 1) s - 2 p + d (K - 1) + op + 1``."""
    kh, kw = shape_of(weight)[2:]
    reach = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))
    spread = _spread(ops, x, stride, reach, output_padding)
    y = convolution(ops, spread, _transposed_weight(ops, weight, groups), bias, (1, 1), (0, 0), dilation, groups)
    h, w = shape_of(x)[2:]
    oh = (h - 1) * stride[0] - 2 * padding[0] + reach[0] + output_padding[0] + 1
    ow = (w - 1) * stride[1] - 2 * padding[1] + reach[1] + output_padding[1] + 1
    return _crop(ops, _crop(ops, y, 2, padding[0], oh), 3, padding[1], ow)


class GeneralConvolutionPattern(RewritePattern):
    """``convolution`` of 1-D and 2-D inputs, batched or not, direct or transposed (module doc).

    ```mlir
    %y = aten.convolution %x, %w {stride = array<i64: 2, 2>, transposed = true, ...} : (tensor<1x4x3x3xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x7x7xf32>
    // becomes: the input spread to 1x4x9x9 (tg.put into zeros), the weight transposed and
    // flipped (tg.transpose, tg.take), the im2col GEMM of a stride-1 convolution, cropped
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.ConvolutionOp):
            return
        w_shape = shape_of(op.weight)
        spatial = len(w_shape) - 2
        if spatial not in (1, 2):
            return notify_match_failure(op, f"a {spatial}-D convolution: tensor_graphs convolves 1-D and 2-D inputs")
        x_shape = shape_of(op.input)
        batched = len(x_shape) == spatial + 2
        ops = OpList()
        x, w = op.input, op.weight
        if not batched:
            x = ops.reshape(x, (1, *x_shape))
        params = [_ints(op.stride), _ints(op.padding), _ints(op.dilation), _ints(op.output_padding)]
        if spatial == 1:
            x = ops.reshape(x, (shape_of(x)[0], shape_of(x)[1], 1, shape_of(x)[2]))
            w = ops.reshape(w, (w_shape[0], w_shape[1], 1, w_shape[2]))
            params = [_height_one(p, h) for p, h in zip(params, (1, 0, 1, 0))]
        try:
            stride, padding, dilation, output_padding = (_pair(p, name, (0, 0)) for p, name in
                                                         zip(params, ("stride", "padding", "dilation", "output_padding")))
            groups = op.groups.value.data
            if op.transposed.value.data:
                y = transposed_convolution(ops, x, w, op.bias, stride, padding, dilation, output_padding, groups)
            else:
                y = convolution(ops, x, w, op.bias, stride, padding, dilation, groups)
        except ValueError as e:
            return notify_match_failure(op, str(e))
        if numel(shape_of(y)) != numel(shape_of(op.result)):
            return notify_match_failure(op, f"computed {list(shape_of(y))}, the result is {list(shape_of(op.result))}")
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


class MaxPoolWithIndicesPattern(RewritePattern):
    """``max_pool2d_with_indices``: the values of `MaxPoolPattern` and, per window, the input
    position of its first largest element (a NaN's if there is one), as torch.

    ```mlir
    %v, %i = aten.max_pool2d_with_indices %x {kernel_size = array<i64: 2, 2>} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
    // becomes
    %c = tg.im2col %x ... -> tensor<1x2x2x2x2x2xf32>     // windows, -inf padded
    %v = tg.amax %r {dims = array<i64: 2>}                 // %r: the windows as [1, 2, 4, 2, 2]
    %k = tg.arg_reduce %r {kind = "max", dim = 2 : i64}    // which window element
    %i = tg.take %positions, (%k * 4 + [[0, 1], [2, 3]])   // its input position
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.MaxPool2dWithIndicesOp):
            return
        shape = shape_of(op.self)
        if len(shape) not in (3, 4):
            return notify_match_failure(op, f"expected an input of rank 3 or 4, got {list(shape)}")
        ops = OpList()
        x = op.self if len(shape) == 4 else ops.reshape(op.self, (1, *shape))
        n, c, h, w = shape_of(x)
        kernel = _ints(op.kernel_size)
        try:
            k, s, p, d = (_pair(v, name) for v, name in zip((kernel, _ints(op.stride) or kernel, _ints(op.padding), _ints(op.dilation)),
                                                         ("kernel_size", "stride", "padding", "dilation")))
            if any(2 * pp > kk for pp, kk in zip(p, k)):
                raise ValueError(f"padding {list(p)} should be at most half the kernel {list(k)}")
        except ValueError as e:
            return notify_match_failure(op, str(e))
        if element_type(x) == i1:
            return notify_match_failure(op, "max_pool2d_with_indices of bool (torch refuses it too)")
        cols = ops.add(Im2colOp(x, k, s, p, d, lowest_value(element_type(x)), bool(op.ceil_mode.value.data)))
        oh, ow = shape_of(cols)[4:]
        windows = ops.reshape(cols, (n, c, k[0] * k[1], oh, ow))
        values = ops.add(AmaxOp(windows, (2,)))
        which = ops.add(ArgReduceOp(windows, "max", 2))
        # the input position of window element (i, j) of output (oh, ow); -1 for padding
        table = np.full((k[0], k[1], oh, ow), -1, np.int64)
        for i in range(k[0]):
            for j in range(k[1]):
                r = np.arange(oh)[:, None] * s[0] - p[0] + i * d[0]
                q = np.arange(ow)[None, :] * s[1] - p[1] + j * d[1]
                inside = (r >= 0) & (r < h) & (q >= 0) & (q < w)
                table[i, j] = np.where(inside, r * w + q, -1)
        grid = ops.add(ConstantOp(dense_from_numpy(np.arange(oh * ow, dtype=np.int64).reshape(oh, ow), i64)))
        offsets = ops.add(AddOp(ops.add(MulOp(which, ops.add(scalar_constant(oh * ow, i64)))), grid))
        indices = ops.add(TakeOp(ops.add(ConstantOp(dense_from_numpy(table.reshape(-1), i64))), offsets))
        rewriter.replace(op, ops, [ops.reshape(values, shape_of(op.results[0])), ops.reshape(indices, shape_of(op.results[1]))])


def _normalized(ops: OpList, x, dims: tuple[int, ...], eps: float):
    """(``(x - mean) * rstd``, mean, rstd) over ``dims`` (kept as size 1), rstd = rsqrt(var + eps)
    with the biased variance, as torch's normalisations save them."""
    el = element_type(x)
    mean = ops.add(MeanOp(x, dims, True))
    dev = ops.add(SubOp(x, mean, x.type))
    var = ops.add(MeanOp(ops.add(MulOp(dev, dev, x.type)), dims, True))
    rstd = ops.add(RsqrtOp(ops.add(AddOp(var, ops.add(scalar_constant(eps, el))))))
    return ops.add(MulOp(dev, rstd, x.type)), mean, rstd


def _affine(ops: OpList, y, weight, bias, per_channel: tuple[int, ...]):
    if weight is not None:
        y = ops.add(MulOp(y, ops.reshape(weight, per_channel)))
    if bias is not None:
        y = ops.add(AddOp(y, ops.reshape(bias, per_channel)))
    return y


class NativeNormPattern(RewritePattern):
    """``native_layer_norm`` (``tg.layer_norm`` over the normalised dims flattened into one, and
    the saved mean and rstd), ``native_group_norm`` and ``_native_batch_norm_legit`` with batch
    statistics (training, or ``.no_stats``: ``instance_norm``), each with its saved statistics."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, aten.NativeLayerNormOp):
            self._layer_norm(op, rewriter)
        elif isinstance(op, aten.NativeGroupNormOp):
            self._group_norm(op, rewriter)
        elif isinstance(op, aten.NativeBatchNormLegitNoStatsOp | aten.NativeBatchNormLegitOp):
            self._batch_norm(op, rewriter)

    def _layer_norm(self, op, rewriter: PatternRewriter) -> None:
        ops = OpList()
        y = trailing_layer_norm(ops, op)
        if isinstance(y, str):
            return notify_match_failure(op, y)
        shape, norm = shape_of(op.input), tuple(op.normalized_shape.get_values())
        dims = tuple(range(len(shape) - len(norm), len(shape)))
        _, mean, rstd = _normalized(ops, op.input, dims, op.eps.value.data)  # dead unless used: dce removes it
        rewriter.replace(op, ops, [y, mean, rstd])

    def _group_norm(self, op, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.input)
        n, c, groups = op.N.value.data, op.C.value.data, op.group.value.data
        if len(shape) < 2 or groups <= 0 or c % groups or (n, c) != tuple(shape[:2]):
            return notify_match_failure(op, f"{groups} groups of {list(shape)}")
        ops = OpList()
        grouped = ops.reshape(op.input, (n, groups, numel(shape) // (n * groups)))
        y, mean, rstd = _normalized(ops, grouped, (2,), op.eps.value.data)
        y = ops.reshape(y, (n, c, numel(shape) // (n * c)))
        y = ops.reshape(_affine(ops, y, op.weight, op.bias, (c, 1)), shape)
        rewriter.replace(op, ops, [y, ops.reshape(mean, (n, groups)), ops.reshape(rstd, (n, groups))])

    def _batch_norm(self, op, rewriter: PatternRewriter) -> None:
        if not op.training.value.data:
            if isinstance(op, aten.NativeBatchNormLegitNoStatsOp):
                return notify_match_failure(op, "batch norm without statistics must use the batch's (training=True)")
            return notify_match_failure(op, "_native_batch_norm_legit with training=False: the eval form has its own op")
        shape = shape_of(op.input)
        if len(shape) < 2:
            return notify_match_failure(op, f"batch norm of a tensor of rank {len(shape)}")
        ops = OpList()
        dims = (0, *range(2, len(shape)))
        y, mean, rstd = _normalized(ops, op.input, dims, op.eps.value.data)
        per_channel = (shape[1],) + (1,) * (len(shape) - 2)
        y = _affine(ops, y, op.weight, op.bias, per_channel)
        results = [y, ops.reshape(mean, (shape[1],)), ops.reshape(rstd, (shape[1],))]
        rewriter.replace(op, ops, results + [None] * (len(op.results) - 3))


def _distance(ops: OpList, diff, p: float, dim: int):
    """``||diff||_p`` along ``dim`` (`reductions.p_norm`)."""
    return p_norm(ops, diff, p, (dim,))


class DistancePattern(RewritePattern):
    """``_cdist_forward(x1 [.., P, M], x2 [.., R, M], p)``: the p-norm of every row difference,
    [.., P, R]; ``_pdist_forward(x [N, M], p)``: of every pair i < j of rows, in order."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, aten.CdistForwardOp):
            a, b = shape_of(op.x1), shape_of(op.x2)
            if len(a) < 2 or len(b) < 2 or a[-1] != b[-1]:
                return notify_match_failure(op, f"cdist of {list(a)} and {list(b)}")
            ops = OpList()
            left = ops.reshape(op.x1, (*a[:-1], 1, a[-1]))
            right = ops.reshape(op.x2, (*b[:-2], 1, b[-2], b[-1]))
            diff = ops.add(SubOp(left, right))
            y = _distance(ops, diff, float(op.p.value.data), len(shape_of(diff)) - 1)
        elif isinstance(op, aten.PdistForwardOp):
            n, m = shape_of(op.self)
            i, j = np.triu_indices(n, 1)
            ops = OpList()

            def rows(index):
                table = (index[:, None] * m + np.arange(m)[None, :]).astype(np.int64)
                return ops.add(TakeOp(op.self, ops.add(ConstantOp(dense_from_numpy(table, i64)))))

            if len(i) == 0:
                empty = ConstantOp(dense_from_numpy(np.zeros(0, np.float32), element_type(op.self)))
                return rewriter.replace(op, [empty], [empty.results[0]])
            y = _distance(ops, ops.add(SubOp(rows(i), rows(j))), float(op.p.value.data), 1)
        else:
            return
        rewriter.replace(op, ops, [ops.reshape(y, shape_of(op.result))])


def populate_nn_patterns() -> list[RewritePattern]:
    return [GeneralConvolutionPattern(), MaxPoolWithIndicesPattern(), NativeNormPattern(), DistancePattern()]
