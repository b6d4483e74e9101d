"""ATen ops that PyTorch's tables do not decompose, written as compositions of ATen ops that
tensor_graphs lowers: the last resort of `decompositions` (PyTorch's own tables come first).

Each entry is a function of the op's arguments in ``torch`` calls, as a ``torch._decomp`` entry
is; ``ExportedProgram.run_decompositions`` traces it into the graph in place of the op. Each is
checked against eager PyTorch, NaN and ties included, by ``tests/test_decompositions.py``.
Constants are built by traced ops (``arange``, ``eye``, comparisons), never ``torch.tensor`` of
Python data: that records ``lift_fresh_copy``/``detach_``, and once a table holding the entry has
run, a later ``torch.export`` of the op itself fails on the non-functional graph.

=====================  ==========================================================================
op                     composition
=====================  ==========================================================================
``searchsorted``       the count of boundaries below each value (``<=`` for ``right``): one
                       broadcast comparison and a sum (a NaN value goes last, as torch's binary
                       search puts it); ``bucketize`` is it with the arguments swapped
``addbmm``             ``beta * self + alpha * bmm(batch1, batch2).sum(0)``
``index_reduce``        ``scatter_reduce`` with the index spread along ``dim``
``scatter(reduce=)``   ``scatter_reduce`` (``add`` is ``sum``, ``multiply`` ``prod``)
``polygamma``          ``digamma`` for order 0, torch's trigamma for 1, the Hurwitz zeta above
                       (Cephes' sums at a fixed count, masked)
``put``                ``index_put`` into the flattened input
``as_strided_scatter`` ``put`` at the view's offsets (computed from size, stride, offset)
``_trilinear``         (``F.bilinear``) the inputs unsqueezed, multiplied and summed
``frexp``              ``log2`` in float64, corrected by one either way
``adaptive_max_pool2d`` each bin gathered (padded by repeating its last element), max and position
``mode``               counts by a pairwise comparison; the smallest of the most frequent (NaN
                       last), its last position
``torch_nn::_linear_cross_entropy_batch_chunked(_no_reduction)``
                       (``F.linear_cross_entropy``) ``cross_entropy(linear(x))`` whole
``histogram``          edges as torch's linspace over the range (or min/max), a membership
                       comparison per bin, summed (weighted), ``density`` divided
``empty_permuted``     ``empty`` of the size
``segment_reduce``     a [segments, length] membership mask from the lengths or offsets, the
                       reduction over it from ``initial``
``nonzero_static``     each row ``r`` the element whose running count of nonzeros is ``r + 1``,
                       unravelled; ``fill_value`` past the count
``median``, ``nanmedian``, ``kthvalue``
                       a stable ``sort`` along ``dim`` (NaN last), then the value and position at
                       the wanted rank (the first NaN's when ``median`` meets one)
=====================  ==========================================================================
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tensor_graphs.frontend.linalg_compositions import LINALG_COMPOSITIONS
from tensor_graphs.frontend.spatial_compositions import SPATIAL_COMPOSITIONS, convolution_3d, is_3d_convolution

aten = torch.ops.aten


def _searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    """``torch.searchsorted``: per value, how many boundaries sort before it (torch's
    ``lower_bound``: ``!(boundary >= v)``; ``upper_bound`` for ``right``: ``!(boundary > v)``)."""
    if sorter is not None:
        sorted_sequence = sorted_sequence.gather(-1, sorter)
    right = right or side == "right"
    values = values if isinstance(values, torch.Tensor) else torch.scalar_tensor(values, dtype=sorted_sequence.dtype)
    common = torch.promote_types(sorted_sequence.dtype, values.dtype)
    seq, v = sorted_sequence.to(common), values.to(common)
    if seq.dim() == 1:
        before = (seq <= v.unsqueeze(-1)) if right else (seq < v.unsqueeze(-1))
    else:
        before = (seq.unsqueeze(-2) <= v.unsqueeze(-1)) if right else (seq.unsqueeze(-2) < v.unsqueeze(-1))
    count = before.sum(-1)
    if common.is_floating_point:  # a NaN value: every boundary is "before" it
        count = torch.where(torch.isnan(v), seq.shape[-1], count)
    return count.to(torch.int32 if out_int32 else torch.int64)


def _searchsorted_scalar(sorted_sequence, value, *, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted(sorted_sequence, value, out_int32=out_int32, right=right, side=side, sorter=sorter)


def _addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """``beta * self + alpha * sum_b batch1[b] @ batch2[b]`` (``beta = 0`` ignores ``self``, NaN too)."""
    product = torch.bmm(batch1, batch2).sum(0)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product.expand(torch.broadcast_shapes(self.shape, product.shape)).clone()
    return (self * beta if beta != 1 else self) + product


def _without(shape: torch.Size, dim: int) -> list[int]:
    return [*shape[:dim], *shape[dim + 1 :]]


def _sorted_pick(x: torch.Tensor, dim: int, rank: torch.Tensor, keepdim: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The value at ``rank`` of a stable ascending sort along ``dim`` (NaN last), with its position
    in ``x``."""
    values, positions = torch.sort(x, dim=dim, stable=True)
    rank = rank.unsqueeze(dim)
    picked, where = values.gather(dim, rank), positions.gather(dim, rank)
    return (picked, where) if keepdim else (picked.squeeze(dim), where.squeeze(dim))


def _rank_of_median(x: torch.Tensor, dim: int, skip_nan: bool) -> torch.Tensor:
    """The rank of the lower median along ``dim``: of the numbers (``nanmedian``), or, where a
    row holds a NaN and ``skip_nan`` is false, the first NaN's (``median`` is NaN there)."""
    n = x.shape[dim]
    if not x.is_floating_point():
        return torch.full(_without(x.shape, dim), (n - 1) // 2, dtype=torch.int64)
    nans = torch.isnan(x).sum(dim)
    if skip_nan:
        return torch.clamp((n - nans - 1) // 2, min=0)
    return torch.where(nans > 0, n - nans, (n - 1) // 2)


def _median_dim(self, dim=0, keepdim=False, *, skip_nan=False):
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.int64)
    dim = dim % self.dim()
    return _sorted_pick(self, dim, _rank_of_median(self, dim, skip_nan), keepdim)


def _median(self):
    """``torch.median(x)``: the lower median of all elements (NaN when one is)."""
    return _median_dim(self.reshape(-1), 0)[0]


def _nanmedian(self):
    return _median_dim(self.reshape(-1), 0, skip_nan=True)[0]


def _nanmedian_dim(self, dim=0, keepdim=False):
    return _median_dim(self, dim, keepdim, skip_nan=True)


def _kthvalue(self, k, dim=-1, keepdim=False):
    """``torch.kthvalue``: the ``k``-th smallest along ``dim`` (1-based; NaN counts as largest)."""
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.int64)
    dim = dim % self.dim()
    rank = torch.full(_without(self.shape, dim), k - 1, dtype=torch.int64)
    return _sorted_pick(self, dim, rank, keepdim)


def _mode(self, dim=-1, keepdim=False):
    """``torch.mode``: the most frequent value along ``dim``, the smallest among equally frequent
    ones (NaN sorts last, each NaN its own value), and the last position holding it (the first
    NaN for a NaN mode), as torch's
    CPU kernel (a sort, then runs of equal values): counts by one pairwise comparison."""
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.int64)
    dim = dim % self.dim()
    x = self.movedim(dim, -1)
    work = x.to(torch.uint8) if x.dtype == torch.bool else x
    floating = work.is_floating_point()
    nan = torch.isnan(work) if floating else torch.zeros_like(work, dtype=torch.bool)
    counts = torch.where(nan, 1, (work.unsqueeze(-1) == work.unsqueeze(-2)).sum(-1))
    candidate = (counts == counts.amax(-1, keepdim=True)) & ~nan
    top = torch.finfo(work.dtype).max if floating else torch.iinfo(work.dtype).max
    value = torch.where(candidate, work, top).amin(-1, keepdim=True)
    if floating:  # no number among the most frequent: every element NaN
        value = torch.where(candidate.any(-1, keepdim=True), value, float("nan"))
    positions = torch.arange(x.shape[-1]).expand(x.shape)
    index = torch.where(work == value, positions, -1).amax(-1, keepdim=True)
    if floating:  # a NaN mode: the first NaN, as eager
        first_nan = torch.where(nan, positions, x.shape[-1]).amin(-1, keepdim=True)
        index = torch.where(torch.isnan(value), first_nan, index)
    value, index = value.to(self.dtype).movedim(-1, dim), index.movedim(-1, dim)
    return (value, index) if keepdim else (value.squeeze(dim), index.squeeze(dim))


def _empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``empty_permuted``: an uninitialised tensor of ``size`` (the physical order of its strides
    does not exist in a graph of contiguous values)."""
    return torch.empty(size, dtype=dtype)


def _nonzero_static(self, *, size, fill_value=-1):
    """``nonzero_static``: the coordinates of the first ``size`` nonzero elements in row-major
    order, rows past the count filled with ``fill_value``: element ``i`` is the ``r``-th nonzero
    when it is nonzero and ``r`` nonzeros precede it (a cumsum), matched against each row."""
    flat = (self != 0).reshape(-1)
    rank = torch.cumsum(flat.to(torch.int64), 0) - 1
    rows = torch.arange(size).unsqueeze(-1)
    hit = flat & (rank == rows)
    where = (hit.to(torch.int64) * torch.arange(flat.shape[0])).sum(-1)
    coords, rest = [], where
    for extent in reversed(self.shape):
        coords.append(rest % extent)
        rest = rest // extent
    coords = torch.stack(coords[::-1], -1) if coords else torch.zeros((size, 0), dtype=torch.int64)
    return torch.where(hit.any(-1, keepdim=True), coords, fill_value)


def _segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """``segment_reduce``: each segment of ``data`` along ``axis`` (from 1-D ``lengths`` or
    ``offsets``) reduced over a [segments, length] membership mask, starting from ``initial``
    (sum 0, prod 1, max -inf, min inf); mean divides ``initial + sum`` by the count, an empty
    segment's mean is ``initial`` (NaN without)."""
    bounds = lengths if lengths is not None else offsets
    if bounds is None or bounds.dim() != 1 or indices is not None:
        return NotImplemented
    if lengths is not None:
        ends = torch.cumsum(lengths, 0)
        starts = ends - lengths
    else:
        starts, ends = offsets[:-1], offsets[1:]
    x = data.movedim(axis, 0)
    position = torch.arange(x.shape[0])
    member = ((position >= starts.unsqueeze(-1)) & (position < ends.unsqueeze(-1))).reshape(-1, x.shape[0], *([1] * (x.dim() - 1)))
    count = member.sum(1)
    start = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": -torch.inf, "min": torch.inf}[reduce]
    init = start if initial is None else initial
    if reduce in ("sum", "mean"):
        out = torch.where(member, x.unsqueeze(0), 0).sum(1) + init
        if reduce == "mean":
            empty = init if initial is not None else torch.nan
            out = torch.where(count > 0, out / count.clamp(min=1), empty)
    elif reduce == "prod":
        out = torch.where(member, x.unsqueeze(0), 1).prod(1) * init
    else:
        picked = torch.where(member, x.unsqueeze(0), start)
        out = picked.amax(1) if reduce == "max" else picked.amin(1)
        out = torch.maximum(out, torch.full_like(out, init)) if reduce == "max" else torch.minimum(out, torch.full_like(out, init))
    return out.to(data.dtype).movedim(0, axis)


def _linear_cross_entropy(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
                          batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph, compute_input_grad,
                          compute_linear_weight_grad, compute_linear_bias_grad):
    """``torch_nn::_linear_cross_entropy_batch_chunked`` (``F.linear_cross_entropy``'s chunked
    path) in inference: ``cross_entropy(linear(input))`` whole (the chunks only bound eager's
    memory; a compiled graph plans its own), the gradient slots empty as its fake says; asked
    for gradients (training), it stays and is refused."""
    if compute_input_grad or compute_linear_weight_grad or compute_linear_bias_grad:
        return NotImplemented
    logits = torch.nn.functional.linear(input, linear_weight, linear_bias)
    loss = torch.nn.functional.cross_entropy(logits, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                                             label_smoothing=label_smoothing)
    empty = input.new_zeros((0, 0))
    return loss, empty, empty.clone(), input.new_zeros((0,))


def _linear_cross_entropy_none(input, linear_weight, target, linear_bias, weight, ignore_index, batch_chunk_size,
                               acc_policy, acc_dtype):
    """The ``reduction='none'`` op: the per-sample losses of ``cross_entropy(linear(input))``."""
    logits = torch.nn.functional.linear(input, linear_weight, linear_bias)
    return torch.nn.functional.cross_entropy(logits, target, weight=weight, reduction="none", ignore_index=ignore_index)


#: library custom ops (namespace::name) -> composition
LIBRARY_COMPOSITIONS: dict[str, Any] = {
    "torch_nn::_linear_cross_entropy_batch_chunked": _linear_cross_entropy,
    "torch_nn::_linear_cross_entropy_batch_chunked_no_reduction": _linear_cross_entropy_none,
}


def _linspace_like_torch(start: torch.Tensor, end: torch.Tensor, steps: int) -> torch.Tensor:
    """torch's CPU ``linspace`` of run-time ends: the first half ``start + i step``, the second
    ``end - (steps - 1 - i) step`` (so both ends are exact)."""
    i = torch.arange(steps, dtype=start.dtype)
    step = (end - start) / max(steps - 1, 1)
    return torch.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i))


def _histogram(self, bins=100, *, range=None, weight=None, density=False):
    """``histogram(x, bins)``: ``bins + 1`` edges over ``range`` (the data's min and max when
    absent, widened by 1/2 each way when equal) as torch's linspace, each element counted (or
    weighted) in the bin ``[e_i, e_i+1)`` holding it (the last bin closed), NaN and elements
    outside not at all; ``density`` divides by the total and the bin widths."""
    x = self.reshape(-1)
    if range is not None:
        lo, hi = torch.full((), float(range[0]), dtype=self.dtype), torch.full((), float(range[1]), dtype=self.dtype)
    else:
        empty = x.numel() == 0
        lo = torch.zeros((), dtype=self.dtype) if empty else x.amin()
        hi = torch.zeros((), dtype=self.dtype) if empty else x.amax()
    same = lo == hi
    lo, hi = torch.where(same, lo - 0.5, lo), torch.where(same, hi + 0.5, hi)
    edges = _linspace_like_torch(lo, hi, bins + 1)
    return _histogram_counts(x, edges, weight, density), edges


def _histogram_counts(x: torch.Tensor, edges: torch.Tensor, weight, density: bool) -> torch.Tensor:
    """How many elements of ``x`` (or how much weight) fall in each ``[e_i, e_i+1)``, the last
    bin closed."""
    bins = edges.shape[0] - 1
    v = x.unsqueeze(-1)
    inside = (v >= edges[:-1]) & ((v < edges[1:]) | ((torch.arange(bins) == bins - 1) & (v <= edges[1:])))
    w = torch.ones_like(x) if weight is None else weight.reshape(-1).to(x.dtype)
    hist = (inside.to(x.dtype) * w.unsqueeze(-1)).sum(0)
    return hist / (hist.sum() * (edges[1:] - edges[:-1])) if density else hist


def _histogram_edges(self, bins, *, weight=None, density=False):
    """``histogram(x, edges)``: the counts over the given edges (`_histogram_counts`)."""
    edges = bins.to(self.dtype)
    return _histogram_counts(self.reshape(-1), edges, weight, density), edges.clone()


def _index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """``index_reduce``: ``scatter_reduce`` with ``index`` along ``dim`` spread over ``source``."""
    dim = dim % max(self.dim(), 1)
    shape = [1] * source.dim()
    if source.dim():
        shape[dim] = -1
    spread = index.reshape(shape).expand(source.shape) if source.dim() else index.reshape(())
    return torch.scatter_reduce(self, dim, spread, source, reduce, include_self=include_self)


_SCATTER_REDUCE = {"add": "sum", "multiply": "prod"}


def _scatter_reduce_src(self, dim, index, src, *, reduce):
    """``scatter(..., reduce='add'|'multiply')``, the older spelling of ``scatter_reduce``."""
    return torch.scatter_reduce(self, dim, index, src, _SCATTER_REDUCE[reduce], include_self=True)


def _scatter_reduce_value(self, dim, index, value, *, reduce):
    return _scatter_reduce_src(self, dim, index, torch.full(index.shape, value, dtype=self.dtype), reduce=reduce)


def _trigamma(x: torch.Tensor) -> torch.Tensor:
    """torch's ``trigamma`` (float64 here): the reflection below 1/2, six recurrence steps, the
    asymptotic series."""
    reflect = x < 0.5
    sin_pi_x = torch.sin(math.pi * x)
    result = torch.where(reflect, -(math.pi * math.pi) / (sin_pi_x * sin_pi_x), torch.zeros_like(x))
    x = torch.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / x
    return torch.where(reflect, -result, result)


#: Cephes' zeta: the Euler-Maclaurin coefficients (2k)! / B_2k
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)
#: the direct sum's most terms: 9, or until ``q + i`` passes 9 (``q`` down to -40)
_ZETA_TERMS = 50


def _zeta(x: float, q: torch.Tensor) -> torch.Tensor:
    """The Hurwitz zeta ``sum_k (k + q)^-x`` of float64 ``q`` as torch's (Cephes') ``zeta``: the
    direct sum while ``i < 9`` or ``q + i <= 9`` (masked, a fixed count), then the Euler-Maclaurin
    tail; inf at the poles (``x = 1``, ``q`` a non-positive integer), NaN for ``x < 1`` or a
    negative non-integer ``q`` with ``x`` not an integer."""
    s, a, b = q.pow(-x), q, torch.zeros_like(q)
    for i in range(_ZETA_TERMS):
        active = (a <= 9) if i >= 9 else torch.ones_like(q, dtype=torch.bool)
        a = torch.where(active, a + 1, a)
        term = a.pow(-x)
        s, b = torch.where(active, s + term, s), torch.where(active, term, b)
    w = a
    s = s + b * w / (x - 1) - 0.5 * b
    coefficient, k = torch.ones_like(q), 0.0
    for c in _ZETA_A:
        coefficient = coefficient * (x + k)
        b = b / w
        s = s + coefficient * b / c
        k += 1
        coefficient = coefficient * (x + k)
        b = b / w
        k += 1
    pole = (q <= 0) & (q == torch.floor(q))
    s = torch.where(pole, math.inf, s)
    if x != math.floor(x):
        s = torch.where((q < 0) & ~pole, math.nan, s)
    return s


def _polygamma(n, self):
    """``polygamma(n, x)``: ``digamma`` for n = 0, torch's ``trigamma`` for 1, and
    ``(-1)^(n+1) n! zeta(n + 1, x)`` above (`_zeta`), in float64, rounded once."""
    out = self.dtype if self.is_floating_point() else torch.get_default_dtype()
    if n == 0:
        return torch.digamma(self.to(out))
    x = self.to(torch.float64)
    value = _trigamma(x) if n == 1 else ((1.0 if n % 2 else -1.0) * math.factorial(n)) * _zeta(n + 1.0, x)
    return value.to(out)


def _bucketize(self, boundaries, *, out_int32=False, right=False):
    """``bucketize(x, boundaries)`` is ``searchsorted(boundaries, x)`` (torch's own reference
    searches with a loop on data, which torch.export cannot trace)."""
    return _searchsorted(boundaries, self, out_int32=out_int32, right=right)


def _put(self, index, source, accumulate=False):
    """``put``: ``index_put`` into the flattened input (negative indices count from the end)."""
    flat = self.reshape(-1).index_put((index.reshape(-1),), source.reshape(-1), accumulate)
    return flat.reshape(self.shape)


def _strided_offsets(size, stride, storage_offset) -> torch.Tensor:
    """The element offsets of an ``as_strided`` view, of its shape (aten ops that fold)."""
    offsets = torch.full(list(size), storage_offset or 0, dtype=torch.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        offsets = offsets + (torch.arange(n, dtype=torch.int64) * st).reshape(shape)
    return offsets


def _as_strided_scatter(self, src, size, stride, storage_offset=None):
    """``as_strided_scatter``: ``src`` written at the view's offsets (the last write wins where
    the view overlaps itself, as torch's copy does)."""
    return _put(self.contiguous(), _strided_offsets(size, stride, storage_offset), src)


def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """``_trilinear`` (``F.bilinear``'s kernel): the three inputs unsqueezed at their ``expand``
    dims, multiplied (broadcast) and summed over ``sumdim``."""
    def spread(t, dims):
        for d in sorted(dims):
            t = t.unsqueeze(d)
        return t

    product = spread(i1, expand1) * spread(i2, expand2) * spread(i3, expand3)
    return product.sum(list(sumdim)) if sumdim else product


def _frexp(self):
    """``frexp``: mantissa in [0.5, 1) with the sign, and the int32 exponent, from ``log2`` in
    float64 corrected by one either way (exact: powers of two scale exactly); 0, inf and NaN
    keep themselves with exponent 0."""
    x = self.to(torch.float64)
    finite = torch.isfinite(x) & (x != 0)
    safe = torch.where(finite, x, torch.ones_like(x))
    e = torch.floor(torch.log2(torch.abs(safe))) + 1
    m = safe * torch.exp2(-e)
    big, small = torch.abs(m) >= 1, torch.abs(m) < 0.5
    e = torch.where(big, e + 1, torch.where(small, e - 1, e))
    m = torch.where(big, m * 0.5, torch.where(small, m * 2, m))
    mantissa = torch.where(finite, m, x).to(self.dtype)
    return mantissa, torch.where(finite, e, torch.zeros_like(e)).to(torch.int32)


def _bin_gather(n: int, out: int) -> tuple[torch.Tensor, int]:
    """[out, k] positions of adaptive pooling's bins ``[floor(i n / out), ceil((i + 1) n / out))``
    along a dim of ``n``, each bin padded to the widest ``k`` by repeating its last position
    (aten ops on aranges: constants once folded)."""
    i = torch.arange(out, dtype=torch.int64)
    start, end = (i * n) // out, ((i + 1) * n + out - 1) // out
    k = max(-(-(j + 1) * n // out) - (j * n // out) for j in range(out))
    taps = start[:, None] + torch.arange(k, dtype=torch.int64)[None, :]
    return torch.minimum(taps, end[:, None] - 1), k


def _adaptive_max_pool2d(self, output_size):
    """``adaptive_max_pool2d`` for any sizes (torch's decomposition takes whole bins only): each
    output's bin gathered (a bin narrower than the widest repeats its last element, which changes
    neither the max nor the first position of it), the max and its flat position ``h * W + w``."""
    x = self if self.dim() == 4 else self.unsqueeze(0)
    h, w = x.shape[-2:]
    (oh, ow) = output_size
    rows, kh = _bin_gather(h, oh)
    cols, kw = _bin_gather(w, ow)
    windows = x[:, :, rows[:, :, None, None], cols[None, None, :, :]]  # [N, C, OH, KH, OW, KW]
    windows = windows.permute(0, 1, 2, 4, 3, 5).reshape(*x.shape[:2], oh, ow, kh * kw)
    values, which = windows.max(-1)
    flat = (rows[:, :, None, None] * w + cols[None, None, :, :]).permute(0, 2, 1, 3).reshape(oh, ow, kh * kw)
    positions = flat.expand(*x.shape[:2], oh, ow, kh * kw).gather(-1, which.unsqueeze(-1)).squeeze(-1)
    return (values, positions) if self.dim() == 4 else (values.squeeze(0), positions.squeeze(0))


#: op name (``packet.overload``) -> its composition
COMPOSITIONS: dict[str, Any] = {
    "searchsorted.Tensor": _searchsorted,
    "searchsorted.Scalar": _searchsorted_scalar,
    "addbmm.default": _addbmm,
    "median.default": _median,
    "median.dim": _median_dim,
    "nanmedian.default": _nanmedian,
    "nanmedian.dim": _nanmedian_dim,
    "kthvalue.default": _kthvalue,
    "mode.default": _mode,
    "empty_permuted.default": _empty_permuted,
    "nonzero_static.default": _nonzero_static,
    "segment_reduce.default": _segment_reduce,
    "histogram.bin_ct": _histogram,
    "histogram.bins_tensor": _histogram_edges,
    "index_reduce.default": _index_reduce,
    "scatter.reduce": _scatter_reduce_src,
    "scatter.value_reduce": _scatter_reduce_value,
    "polygamma.default": _polygamma,
    "bucketize.Tensor": _bucketize,
    "put.default": _put,
    "as_strided_scatter.default": _as_strided_scatter,
    "_trilinear.default": _trilinear,
    "frexp.Tensor": _frexp,
    "adaptive_max_pool2d.default": _adaptive_max_pool2d,
    **LINALG_COMPOSITIONS,
    **SPATIAL_COMPOSITIONS,
}

def _is_training_batch_norm(args: tuple, kwargs: dict) -> bool:
    """Whether a ``batch_norm`` call normalises by the batch's statistics (``training=True``)."""
    return bool(args[5] if len(args) > 5 else kwargs.get("training", False))


def _training_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    """``batch_norm(training=True)``: the batch's mean and biased variance normalise ``input``;
    the running statistics given are updated in place as eager updates them (``momentum``, the
    unbiased variance), which the compiled call writes back into the caller's tensors."""
    out, _, _, mean, var = aten._native_batch_norm_legit_functional(
        input, weight, bias, running_mean, running_var, True, momentum, eps) if running_mean is not None else (
        *aten._native_batch_norm_legit.no_stats(input, weight, bias, True, momentum, eps), None, None)
    if running_mean is not None:
        running_mean.copy_(mean)
        running_var.copy_(var)
    return out


#: lowered ops whose calls of some kinds are composed instead: name -> (which calls, composition)
PARTIAL = {
    "convolution.default": (is_3d_convolution, convolution_3d),
    "batch_norm.default": (_is_training_batch_norm, _training_batch_norm),
}


#: compositions used in place of PyTorch's own entry: adaptive_max_pool2d's covers fewer cases
#: (whole bins only); the linalg ones' record ``_linalg_check_errors`` (a side effect) or reach
#: ops with no LAPACK lowering
PREFERRED: tuple[str, ...] = ("adaptive_max_pool2d.default", *LINALG_COMPOSITIONS)


def compositions() -> dict[torch._ops.OpOverload, Any]:
    """:data:`COMPOSITIONS` by ``OpOverload``."""
    out = {}
    for name, f in COMPOSITIONS.items():
        packet, _, overload = name.partition(".")
        out[getattr(getattr(aten, packet), overload)] = f
    try:  # registers torch_nn's ops (PyTorch releases with linear_cross_entropy)
        import torch.nn.modules.linear_cross_entropy  # noqa: F401
    except ImportError:
        pass
    for name, f in LIBRARY_COMPOSITIONS.items():
        namespace, _, op = name.partition("::")
        packet = getattr(getattr(torch.ops, namespace), op, None)
        if packet is not None:
            out[packet.default] = f
    return out
