"""aten → tg: resizing NCHW images (``upsample_nearest2d``, ``upsample_bilinear2d``,
``upsample_bicubic2d``; ``F.interpolate``), both ``align_corners`` ways.

Every such resize is separable: ``y = R_h @ x @ R_w^T`` with constant interpolation matrices
``R`` [out, in] whose rows hold the taps' weights as PyTorch computes them (float32 source
indices, bilinear clamping, the bicubic convolution with A = -0.75 and border-clamped taps
summed). Two GEMMs over [N, C] batches then do the arithmetic. Nearest resizing by whole factors
(the 2x of a diffusion UNet) is a broadcast instead: every pixel copied into a k x k block.
"""

from __future__ import annotations

import numpy as np
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.dense import dense_from_numpy
from tensor_graphs.dialects.tensor import BroadcastOp, ConstantOp, MatmulOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, notify_match_failure

#: the bicubic convolution's parameter (PyTorch's and OpenCV's)
CUBIC_A = -0.75


def _scale(size: int, out: int, align_corners: bool, factor: float | None) -> np.float32:
    """PyTorch's ``area_pixel_compute_scale`` (source pixels per output pixel), in float32."""
    if align_corners:
        return np.float32((size - 1) / (out - 1)) if out > 1 else np.float32(0.0)
    if factor is not None and factor > 0:
        return np.float32(1.0 / factor)
    return np.float32(size) / np.float32(out)


def _source(scale: np.float32, out: int, align_corners: bool, cubic: bool) -> np.ndarray:
    """``area_pixel_compute_source_index`` for every output index (float32)."""
    dst = np.arange(out, dtype=np.float32)
    if align_corners:
        return scale * dst
    src = scale * (dst + np.float32(0.5)) - np.float32(0.5)
    return src if cubic else np.maximum(src, np.float32(0.0))


def nearest_indices(size: int, out: int, factor: float | None) -> np.ndarray:
    """``upsample_nearest``'s source index of each output index."""
    if out == size:
        return np.arange(out)
    if out == 2 * size:
        return np.arange(out) >> 1
    scale = _scale(size, out, False, factor)
    return np.minimum(np.floor(np.arange(out, dtype=np.float32) * scale).astype(np.int64), size - 1)


def nearest_matrix(size: int, out: int, factor: float | None) -> np.ndarray:
    m = np.zeros((out, size), np.float32)
    m[np.arange(out), nearest_indices(size, out, factor)] = 1.0
    return m


def bilinear_matrix(size: int, out: int, align_corners: bool, factor: float | None) -> np.ndarray:
    src = _source(_scale(size, out, align_corners, factor), out, align_corners, cubic=False)
    lo = src.astype(np.int64)
    hi = lo + (lo < size - 1)
    w_hi = src - lo.astype(np.float32)
    w_lo = np.float32(1.0) - w_hi
    m = np.zeros((out, size), np.float32)
    rows = np.arange(out)
    np.add.at(m, (rows, lo), w_lo)
    np.add.at(m, (rows, hi), w_hi)
    return m


def bicubic_matrix(size: int, out: int, align_corners: bool, factor: float | None) -> np.ndarray:
    src = _source(_scale(size, out, align_corners, factor), out, align_corners, cubic=True)
    base = np.floor(src)
    t = (src - base).astype(np.float32)
    a = np.float32(CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = np.float32(1.0)
    weights = [far(t + one), near(t), near(one - t), far(one - t + one)]
    m = np.zeros((out, size), np.float32)
    rows = np.arange(out)
    for k, w in enumerate(weights):
        np.add.at(m, (rows, np.clip(base.astype(np.int64) - 1 + k, 0, size - 1)), w.astype(np.float32))
    return m


_MATRICES = {
    aten.UpsampleNearest2dVecOp: lambda size, out, align, factor: nearest_matrix(size, out, factor),
    aten.UpsampleBilinear2dVecOp: bilinear_matrix,
    aten.UpsampleBicubic2dVecOp: bicubic_matrix,
}


class ResizePattern(RewritePattern):
    """``upsample_{nearest,bilinear,bicubic}2d.vec``: ``R_h @ (x @ R_w^T)``, or a broadcast for
    nearest resizing by whole factors.

    ```mlir
    %y = aten.upsample_bilinear2d.vec %x {align_corners = false, scale_factors = array<f64: 2.0, 2.0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
    // becomes
    %rwt = tg.constant ... : tensor<4x8xf32>
    %rh = tg.constant ... : tensor<8x4xf32>
    %t = tg.matmul %x, %rwt : (tensor<1x3x4x4xf32>, tensor<4x8xf32>) -> tensor<1x3x4x8xf32>
    %y = tg.matmul %rh, %t : (tensor<8x4xf32>, tensor<1x3x4x8xf32>) -> tensor<1x3x8x8xf32>

    %z = aten.upsample_nearest2d.vec %x {scale_factors = array<f64: 2.0, 2.0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
    // becomes
    %r = tg.reshape %x : (tensor<1x3x4x4xf32>) -> tensor<1x3x4x1x4x1xf32>
    %b = tg.broadcast %r : (tensor<1x3x4x1x4x1xf32>) -> tensor<1x3x4x2x4x2xf32>
    %z = tg.reshape %b : (tensor<1x3x4x2x4x2xf32>) -> tensor<1x3x8x8xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        build = _MATRICES.get(type(op))
        if build is None:
            return
        shape, result = shape_of(op.input), shape_of(op.result)
        if len(shape) != 4:
            return notify_match_failure(op, f"expected an NCHW input, got {list(shape)}")
        n, c, h, w = shape
        oh, ow = result[2:]
        factors = tuple(op.scale_factors.get_values()) if op.scale_factors is not None else (None, None)
        align = bool(op.align_corners.value.data) if hasattr(op, "align_corners") else False
        ops = OpList()
        if isinstance(op, aten.UpsampleNearest2dVecOp) and oh % h == 0 and ow % w == 0 and all(
            np.array_equal(nearest_indices(size, out, f), np.arange(out) // (out // size)) for size, out, f in ((h, oh, factors[0]), (w, ow, factors[1]))
        ):
            x = ops.reshape(op.input, (n, c, h, 1, w, 1))
            y = ops.add(BroadcastOp(x, (n, c, h, oh // h, w, ow // w)))
        else:
            el = element_type(op.input)
            rh = ops.add(ConstantOp(dense_from_numpy(build(h, oh, align, factors[0]), el)))
            rwt = ops.add(ConstantOp(dense_from_numpy(np.ascontiguousarray(build(w, ow, align, factors[1]).T), el)))
            y = ops.add(MatmulOp(rh, ops.add(MatmulOp(op.input, rwt))))
        rewriter.replace(op, ops, [ops.reshape(y, result)])


def populate_resize_patterns() -> list[RewritePattern]:
    return [ResizePattern()]
