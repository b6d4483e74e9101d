"""3-D convolutions and average pooling composed of the 2-D and matrix ops tensor_graphs lowers:
entries of `compositions.compositions`, checked against eager by
``tests/test_decompositions.py``.

=============================  ===============================================================
op                             composition
=============================  ===============================================================
``convolution`` of 5-D input   one 2-D convolution per depth tap ``kd``: the depth positions it
                               reads (padded, strided, dilated) folded into the batch, the
                               products summed over ``kd`` (transposed: each tap's result
                               spread over the output depths it writes, then cropped)
``avg_pool3d``                 separable: per spatial dim a [in, out] matrix of its windows
                               (padding reads nothing), divided per dim by torch's count
                               (``count_include_pad``: the window clipped to the padded input;
                               else its valid elements) or once by ``divisor_override``
``_adaptive_avg_pool3d``       separable: per dim the [in, out] matrix of its bins, each 1/size
``_upsample_bilinear2d_aa``    separable: per dim torch's antialiased triangle-filter weights
``_embedding_bag``             the rows gathered, reduced over a [bags, indices] membership mask
``grid_sampler_3d``            torch's 2-D decomposition grown by a dim: 8 weighted corners
                               (trilinear) or the rounded one (nearest)
=============================  ===============================================================

A 2-D or 1-D ``convolution`` is lowered as it is (`compositions.PARTIAL`: only 3-D calls take
this composition).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def is_3d_convolution(args: tuple, kwargs: dict) -> bool:
    """Whether a ``convolution`` call has a 5-D input (three spatial dims)."""
    x = args[0] if args else kwargs.get("input")
    return isinstance(x, torch.Tensor) and x.dim() == 5


def _fold_depth(x: torch.Tensor) -> torch.Tensor:
    """[N, C, D, H, W] -> [N * D, C, H, W]."""
    n, c, d, h, w = x.shape
    return x.permute(0, 2, 1, 3, 4).reshape(n * d, c, h, w)


def _unfold_depth(y: torch.Tensor, n: int) -> torch.Tensor:
    """[N * D, O, H, W] -> [N, O, D, H, W]."""
    nd, o, h, w = y.shape
    return y.reshape(n, nd // n, o, h, w).permute(0, 2, 1, 3, 4)


def _conv3d(x, weight, bias, stride, padding, dilation, groups):
    (sd, *s2), (pd, *p2), (dd, *d2) = stride, padding, dilation
    kd = weight.shape[2]
    n, depth = x.shape[0], x.shape[2] + 2 * pd
    out_depth = (depth - dd * (kd - 1) - 1) // sd + 1
    x = torch.constant_pad_nd(x, [0, 0, 0, 0, pd, pd]) if pd else x
    total = None
    for k in range(kd):
        taps = x[:, :, k * dd : k * dd + sd * (out_depth - 1) + 1 : sd]
        y = aten.convolution(_fold_depth(taps), weight[:, :, k], None, s2, p2, d2, False, [0, 0], groups)
        total = y if total is None else total + y
    return _unfold_depth(total, n)


def _conv_transpose3d(x, weight, bias, stride, padding, dilation, output_padding, groups):
    (sd, *s2), (pd, *p2), (dd, *d2), (od, *o2) = stride, padding, dilation, output_padding
    kd = weight.shape[2]
    n, depth = x.shape[0], x.shape[2]
    spread = (depth - 1) * sd + 1  # one tap's inputs land every sd-th output depth
    full = spread + dd * (kd - 1) + od
    total = None
    for k in range(kd):
        y = _unfold_depth(aten.convolution(_fold_depth(x), weight[:, :, k], None, s2, p2, d2, True, o2, groups), n)
        if sd > 1:  # zeros between the depths
            gaps = y.new_zeros((*y.shape[:3], sd - 1, *y.shape[3:]))
            y = torch.cat([y.unsqueeze(3), gaps], 3).reshape(*y.shape[:2], depth * sd, *y.shape[3:])[:, :, :spread]
        y = torch.constant_pad_nd(y, [0, 0, 0, 0, k * dd, full - spread - k * dd])
        total = y if total is None else total + y
    out_depth = full - 2 * pd
    return total[:, :, pd : pd + out_depth]


def convolution_3d(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """A 3-D ``convolution`` by 2-D ones (module doc); other ranks never reach it."""
    if transposed:
        y = _conv_transpose3d(input, weight, bias, stride, padding, dilation, output_padding, groups)
    else:
        y = _conv3d(input, weight, bias, stride, padding, dilation, groups)
    return y if bias is None else y + bias.reshape(1, -1, 1, 1, 1)


def _along(x: torch.Tensor, dim: int, matrix: torch.Tensor) -> torch.Tensor:
    """``x`` with dim ``dim`` of size ``in`` mapped by ``matrix`` [in, out]."""
    return torch.matmul(x.movedim(dim, -1), matrix.to(x.dtype)).movedim(-1, dim)


def _pool_size(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """torch's ``pooling_output_shape``: the last window must start inside the input or its left
    padding."""
    out = (size + 2 * p - k + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _window_matrix(size: int, k: int, s: int, p: int, ceil_mode: bool, include_pad: bool, divide: bool) -> torch.Tensor:
    """[size, out]: 1 where input ``i`` is in window ``o`` (divided by its count when ``divide``)."""
    out = _pool_size(size, k, s, p, ceil_mode)
    i = torch.arange(size).unsqueeze(1)
    start = torch.arange(out) * s - p
    end = torch.clamp(start + k, max=size + p)
    member = (i >= start) & (i < end)
    if not divide:
        return member.to(torch.float64)
    count = (end - start) if include_pad else (torch.clamp(end, max=size) - torch.clamp(start, min=0))
    return member.to(torch.float64) / count.to(torch.float64)


def _window_counts(size: int, k: int, s: int, p: int, ceil_mode: bool, include_pad: bool) -> torch.Tensor:
    """[out]: torch's divisor along one dim (`_window_matrix`'s counts), int64."""
    start = torch.arange(_pool_size(size, k, s, p, ceil_mode)) * s - p
    end = torch.clamp(start + k, max=size + p)
    return (end - start) if include_pad else (torch.clamp(end, max=size) - torch.clamp(start, min=0))


def _avg_pool3d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """Float: each dim's window matrix divided by its count (the counts multiply); integers:
    the window sums exactly, then divided toward zero by the count's product (or the override),
    as torch's integer kernel."""
    ks = list(kernel_size) * (3 // len(kernel_size))
    st = list(stride) * (3 // len(stride)) if len(stride) else ks
    pad = [padding] * 3 if isinstance(padding, int) else list(padding) * (3 // len(padding))
    floating = self.is_floating_point()
    x, count = self, None
    for axis in range(3):
        dim = self.dim() - 3 + axis
        args = (self.shape[dim], ks[axis], st[axis], pad[axis], ceil_mode)
        x = _along(x, dim, _window_matrix(*args, count_include_pad, floating and divisor_override is None))
        if not floating:
            c = _window_counts(*args, count_include_pad).reshape([-1 if a == axis else 1 for a in range(3)])
            count = c if count is None else count * c
    if floating:
        return x if divisor_override is None else x / divisor_override
    return torch.div(x, divisor_override if divisor_override is not None else count, rounding_mode="trunc")


def _adaptive_matrix(size: int, out: int) -> torch.Tensor:
    """[size, out]: bin ``o`` is ``[floor(o size / out), ceil((o + 1) size / out))``, averaged."""
    o = torch.arange(out)
    start, end = (o * size) // out, -((-(o + 1) * size) // out)
    i = torch.arange(size).unsqueeze(1)
    return ((i >= start) & (i < end)).to(torch.float64) / (end - start).to(torch.float64)


def _adaptive_avg_pool3d(self, output_size):
    x = self
    for axis in range(3):
        dim = self.dim() - 3 + axis
        x = _along(x, dim, _adaptive_matrix(self.shape[dim], output_size[axis]))
    return x


SPATIAL_COMPOSITIONS = {
    "avg_pool3d.default": _avg_pool3d,
    "_adaptive_avg_pool3d.default": _adaptive_avg_pool3d,
}


def _aa_weights(size: int, out: int, align_corners: bool, scale_given: float | None) -> torch.Tensor:
    """[size, out] antialiased bilinear (triangle filter) weights, as torch's
    ``_compute_weights_aa``: the filter widened by the scale when downsampling, each output's
    weights normalised to sum 1."""
    if align_corners:
        scale = (size - 1) / (out - 1) if out > 1 else 0.0
    else:
        scale = 1.0 / scale_given if scale_given else size / out
    support = scale if scale >= 1.0 else 1.0  # interp_size / 2 = 1, times the scale when downsampling
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    j = torch.arange(size, dtype=torch.float64).unsqueeze(1)
    center = scale * (torch.arange(out, dtype=torch.float64) + 0.5)
    xmin = torch.clamp(torch.trunc(center - support + 0.5), min=0)
    xmax = torch.clamp(torch.trunc(center + support + 0.5), max=size)
    inside = (j >= xmin) & (j < xmax)
    w = torch.where(inside, torch.clamp(1.0 - ((j - center + 0.5) * invscale).abs(), min=0.0), 0.0)
    total = w.sum(0)
    return torch.where(total != 0, w / torch.where(total != 0, total, 1.0), w)


def _upsample_bilinear2d_aa(self, output_size, align_corners, scales_h=None, scales_w=None):
    """``_upsample_bilinear2d_aa`` (``interpolate(..., antialias=True)``): separable, a weight
    matrix per spatial dim (`_aa_weights`)."""
    h, w = self.shape[-2:]
    x = _along(self, self.dim() - 2, _aa_weights(h, output_size[0], align_corners, scales_h))
    return _along(x, self.dim() - 1, _aa_weights(w, output_size[1], align_corners, scales_w))


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                   include_last_offset=False, padding_idx=-1):
    """``_embedding_bag(_forward_only)``: each bag (``indices[offsets[b]:offsets[b + 1]]``, the
    last to the end unless ``include_last_offset``) reduced by sum (times ``per_sample_weights``),
    mean or max over a [bags, indices] membership mask; ``padding_idx`` rows take no part; an empty
    bag gives zeros. The other three results (offset2bag, bag sizes, max positions) as torch's."""
    count = indices.shape[0]
    starts = offsets[:-1] if include_last_offset else offsets
    ends = torch.cat([offsets[1:], offsets.new_full((1,), count)])[: starts.shape[0]] if not include_last_offset else offsets[1:]
    position = torch.arange(count)
    member = (position >= starts.unsqueeze(-1)) & (position < ends.unsqueeze(-1))  # [bags, indices]
    if padding_idx >= 0:
        member = member & (indices != padding_idx)
    rows = weight[indices]  # [indices, dim]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(-1)
    taken = member.to(weight.dtype)
    sizes = member.sum(-1)
    if mode == 2:  # max
        masked = torch.where(member.unsqueeze(-1), rows.unsqueeze(0), -torch.inf)
        out = torch.where(sizes.unsqueeze(-1) > 0, masked.amax(1), 0.0)
        arg = torch.where(sizes.unsqueeze(-1) > 0, indices[masked.argmax(1)], -1)
    else:
        out = taken @ rows
        if mode == 1:
            out = out / sizes.clamp(min=1).unsqueeze(-1).to(weight.dtype)
        arg = torch.zeros(out.shape[0] if mode == 2 else 0, dtype=torch.int64)
    offset2bag = (position.unsqueeze(0) >= starts.unsqueeze(-1)).sum(0) - 1
    return out, offset2bag, sizes, arg


SPATIAL_COMPOSITIONS.update({
    "_upsample_bilinear2d_aa.default": _upsample_bilinear2d_aa,
    "_embedding_bag_forward_only.default": _embedding_bag,
    "_embedding_bag.default": _embedding_bag,
})


def _source_index(coords: torch.Tensor, size: int, padding_mode: int, align_corners: bool) -> torch.Tensor:
    """A grid coordinate in [-1, 1] as an input position along a dim of ``size``, padded as
    torch's grid sampler (0 zeros: as it is; 1 border: clamped; 2 reflection: reflected, clamped),
    as ``torch._decomp``'s ``grid_sampler_2d``."""
    mul = (size * 0.5 - 0.5) if align_corners else (size * 0.5)
    x = coords * mul + (size * 0.5 - 0.5)
    if padding_mode == 1:
        return torch.clamp(x, 0, size - 1)
    if padding_mode == 2:
        twice_low, twice_high = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        if twice_low == twice_high:
            x = torch.zeros_like(x)
        else:
            low, span = twice_low / 2, (twice_high - twice_low) / 2
            distance = (x - low).abs()
            extra = torch.fmod(distance, span)
            flips = (distance / span).floor().to(torch.int8)
            x = torch.where(flips & 1 == 0, extra + low, span + low - extra)
        return torch.clamp(x, 0, size - 1)
    return x


def _grid_sampler_3d(input, grid, interpolation_mode=0, padding_mode=0, align_corners=False):
    """``grid_sampler_3d``: trilinear (the 8 corners, each weighted, those outside the input
    reading nothing) or nearest (``round``, half to even as torch's nearbyint) sampling of
    ``input`` [N, C, D, H, W] at ``grid`` [N, oD, oH, oW, 3] (x, y, z), torch's 2-D
    decomposition grown by one dim."""
    if interpolation_mode not in (0, 1):
        return NotImplemented
    n, c, depth, height, width = input.shape
    od, oh, ow = grid.shape[1:4]
    sizes = (width, height, depth)
    ix, iy, iz = (_source_index(grid[..., k], sizes[k], padding_mode, align_corners) for k in range(3))
    batch = torch.arange(n).view(n, 1, 1, 1, 1)
    channel = torch.arange(c).view(1, c, 1, 1, 1)

    def corner(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, w) -> torch.Tensor:
        inside = (x >= 0) & (x < width) & (y >= 0) & (y < height) & (z >= 0) & (z < depth)
        xs, ys, zs = (torch.where(inside, t, 0).to(torch.int64).view(n, 1, od, oh, ow) for t in (x, y, z))
        weight = torch.where(inside, w, 0).view(n, 1, od, oh, ow)
        return input[batch, channel, zs, ys, xs] * weight

    if interpolation_mode == 1:
        return corner(ix.round(), iy.round(), iz.round(), torch.ones_like(ix))
    x0, y0, z0 = ix.floor(), iy.floor(), iz.floor()
    total = None
    for dx in (0, 1):
        for dy in (0, 1):
            for dz in (0, 1):
                x, y, z = x0 + dx, y0 + dy, z0 + dz
                w = ((ix - x0) if dx else (x0 + 1 - ix)) * ((iy - y0) if dy else (y0 + 1 - iy)) * ((iz - z0) if dz else (z0 + 1 - iz))
                term = corner(x, y, z, w)
                total = term if total is None else total + term
    return total


SPATIAL_COMPOSITIONS["grid_sampler_3d.default"] = _grid_sampler_3d
