"""`fuse-attention`: scaled dot-product attention written out by hand becomes one `tg.attention`.

Two patterns:

1. ``FuseHandWrittenAttention`` — ``matmul(q, k^T) -> scale -> [mask] -> softmax(last dim) -> matmul(., v)``:

   - ``k^T`` is the matmul's ``transpose_b``, a `tg.transpose` (its permutation composed with the
     swap of the last two dims: ``k = transpose(y, [0, 2, 1, 3])`` when ``k^T = transpose(y, [0, 2, 3, 1])``),
     or else any value (``k`` is then a new transpose of it); ``v`` likewise when the second matmul
     has ``transpose_b``;
   - the scale is any product of scalar constants: multiplies/divides of the scores, of ``q`` or of
     ``k``, and the matmul's ``alpha`` (what `absorb-blas-flags` makes of them);
   - the mask (optional) is an additive mask (``scores + mask``, either order, or the matmul's
     accumulator with ``beta = 1`` after `absorb-blas-flags`) or a ``masked_fill``
     (``select(cond, fill, scores)`` / ``select(cond, scores, fill)`` with ``fill`` a splat
     ``<= -1e4``, e.g. ``-inf`` or ``finfo.min``).

   Every op from the first matmul to the softmax must have no other live user (they disappear).

       %kt = tg.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
       %s  = tg.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
       %c  = tg.constant dense<0.353553385> : tensor<f32>
       %ss = tg.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
       %m  = tg.select %causal_bool, %ss, %neg_inf : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
       %p  = tg.softmax %m {dim = 3 : i64} : tensor<1x2x4x4xf32>
       %o  = tg.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
       =>
       %o = tg.attention %q, %k, %v {scale = 0.353553385 : f32, causal = true} : (...) -> tensor<1x2x4x8xf32>

2. ``FoldCausalMaskIntoAttention`` — a `tg.attention` whose mask is a constant: a causal pattern
   (0 where key ``j <= i + Sk - Sq``, ``<= -1e4`` elsewhere, any broadcast) becomes ``causal = true``
   without mask, an all-zero mask goes. This is what a folded SDPA mask (GPT-2) needs.

       %o = tg.attention %q, %k, %v mask %tril {scale = 1.25e-01 : f32} : (...)
       =>
       %o = tg.attention %q, %k, %v {scale = 1.25e-01 : f32, causal = true} : (...)

3. ``ReadSharedKVHeads`` — grouped-query attention written with ``repeat_kv`` (K and V heads
   repeated G times by unsqueeze -> expand -> reshape, as transformers' Llama/Qwen3 do) reads the
   Hkv shared heads directly: query head h uses kv head h // G, which is `tg.attention`'s own
   convention, so the repeated copies are never materialised::

       %k5 = tg.reshape %k : (tensor<1x2x7x16xf32>) -> tensor<1x2x1x7x16xf32>
       %kb = tg.broadcast %k5 : (tensor<1x2x1x7x16xf32>) -> tensor<1x2x2x7x16xf32>
       %kr = tg.reshape %kb : (tensor<1x2x2x7x16xf32>) -> tensor<1x4x7x16xf32>
       (the same for v)
       %o  = tg.attention %q, %kr, %vr {...} : (tensor<1x4x7x16xf32>, tensor<1x4x7x16xf32>, ...)
       =>
       %o  = tg.attention %q, %k, %v {...} : (tensor<1x4x7x16xf32>, tensor<1x2x7x16xf32>, ...)

A constant boolean mask that is not causal becomes a constant additive mask; a non-constant one
becomes ``select(cond, 0, fill)`` (or the reverse), an additive mask the kernel adds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from tensor_graphs.dialects.shapes import is_broadcastable_to, permute_shape
from tensor_graphs.dialects.tensor import (
    AddOp,
    AttentionOp,
    BroadcastOp,
    ConstantOp,
    MatmulOp,
    ReshapeOp,
    SelectOp,
    SoftmaxOp,
    TransposeOp,
    shape_of,
)
from tensor_graphs.transforms.dce import erase_dead_producers, only_live_user_is
from tensor_graphs.transforms.evaluate import array_to_dense, causal_allowed, constant_array, splat_constant
from tensor_graphs.transforms.fusion.common import float32_kernel, scalar_scale, used_only_inside
from tensor_graphs.transforms.value_range import index_local_array

#: A mask value at or below this counts as "masked out" (``-inf``, ``finfo(f32).min``, ``-1e4``...).
LARGE_NEGATIVE = -1e4


# --------------------------------------------------------------------------- masks


def _last_two(array: np.ndarray, sq: int, sk: int) -> np.ndarray | None:
    """``array`` broadcast to ``[..., sq, sk]`` (its own leading dims), or None if it does not broadcast."""
    a = array.reshape((1,) * max(0, 2 - array.ndim) + array.shape)
    try:
        return np.broadcast_to(a, (*a.shape[:-2], sq, sk))
    except ValueError:
        return None


def is_causal_bool(allowed: np.ndarray, sq: int, sk: int) -> bool:
    """``allowed`` (true = visible) is the causal pattern, broadcast over any leading dims."""
    a = _last_two(allowed, sq, sk)
    return sk >= sq and a is not None and bool(np.all(a == causal_allowed(sq, sk)))


def is_causal_additive(mask: np.ndarray, sq: int, sk: int) -> bool:
    """``mask`` is 0 where the causal pattern allows and ``<= LARGE_NEGATIVE`` elsewhere."""
    m = _last_two(mask, sq, sk)
    if sk < sq or m is None:
        return False
    allowed = np.broadcast_to(causal_allowed(sq, sk), m.shape)
    return bool(np.all(m[allowed] == 0) and np.all(m[~allowed] <= LARGE_NEGATIVE))


@dataclass
class _Mask:
    """What masks the scores: an additive mask, or a bool ``cond`` that masks where it is ``masked_when``."""

    additive: SSAValue | None = None
    cond: SSAValue | None = None
    masked_when: bool = True
    fill: float = -np.inf


def _resolve_mask(mask: _Mask, sq: int, sk: int) -> tuple[list[Operation], SSAValue | None, bool]:
    """(new ops, additive mask or None, causal) for the attention op."""
    if mask.cond is not None:
        cond = constant_array(mask.cond)
        if cond is not None:
            allowed = cond != mask.masked_when
            if is_causal_bool(allowed, sq, sk):
                return [], None, True
            values = np.where(allowed, np.float32(0.0), np.float32(mask.fill))
            const = ConstantOp(array_to_dense(values, TensorType(f32, cond.shape)))
            return [const], const.result, False
        zero = ConstantOp(array_to_dense(np.float32(0.0), TensorType(f32, ())))
        fill = ConstantOp(array_to_dense(np.float32(mask.fill), TensorType(f32, ())))
        branches = (fill.result, zero.result) if mask.masked_when else (zero.result, fill.result)
        select = SelectOp(mask.cond, *branches)
        return [zero, fill, select], select.result, False
    if mask.additive is not None:
        values = constant_array(mask.additive)
        if values is not None:
            if is_causal_additive(values, sq, sk):
                return [], None, True
            if not np.any(values):
                return [], None, False
        return [], mask.additive, False
    return [], None, False


# --------------------------------------------------------------------------- scores


def _peel_scales(value: SSAValue) -> tuple[SSAValue, float]:
    """``value`` without its scalar-constant scalings, and their product (the ops may stay)."""
    scale = 1.0
    while (s := scalar_scale(value)) is not None:
        value, c, _ = s
        scale *= c
    return value, scale


@dataclass
class _Operand:
    """An attention operand: ``value``, or ``transpose(value, perm)`` when ``perm`` is set (the
    transpose is created only once the rewrite is certain, so a failed match leaves no op behind)."""

    value: SSAValue
    perm: tuple[int, ...] | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        s = shape_of(self.value)
        return s if self.perm is None else permute_shape(s, self.perm)

    def materialize(self) -> tuple[list[Operation], SSAValue]:
        if self.perm is None:
            return [], self.value
        t = TransposeOp(self.value, self.perm)
        return [t], t.result


def _untransposed(value: SSAValue, transposed: bool) -> _Operand:
    """``value`` with its last two dims swapped when ``transposed`` (the matmul's flag is not set):
    through a `tg.transpose` (composed; none when the result is its input) or a new one."""
    if not transposed:
        return _Operand(value)
    n = len(shape_of(value))
    t = value.owner
    if isinstance(t, TransposeOp):
        perm = t.permutation
        perm = (*perm[:-2], perm[-1], perm[-2])
        return _Operand(t.input) if perm == tuple(range(n)) else _Operand(t.input, perm)
    return _Operand(value, (*range(n - 2), n - 1, n - 2))


@dataclass
class _Scores:
    q: SSAValue
    k: _Operand
    scale: float
    mask: _Mask
    #: ops from the softmax input back to the q@k^T matmul (all disappear)
    chain: list[Operation] = field(default_factory=list)


def _match_product(value: SSAValue) -> _Scores | None:
    """``[scalings of] matmul(q', k'^T [, acc])``: scales peeled, ``acc`` taken as additive mask."""
    chain: list[Operation] = []
    post = 1.0
    while (s := scalar_scale(value)) is not None:
        value, c, op = s
        post *= c
        chain.append(op)
    mm = value.owner
    if not isinstance(mm, MatmulOp) or mm.activation.data != "none":
        return None
    transpose_a, transpose_b, alpha, beta = mm.flags
    if transpose_a:
        return None
    chain.append(mm)
    mask = _Mask()
    if mm.acc is not None:
        if not np.isclose(beta * post, 1.0, rtol=1e-6):
            return None
        mask.additive = mm.acc
    q, q_scale = _peel_scales(mm.lhs)
    rhs, k_scale = _peel_scales(mm.rhs)
    k = _untransposed(rhs, not transpose_b)
    if k.perm is None:
        k.value, more = _peel_scales(k.value)
        k_scale *= more
    return _Scores(q, k, post * alpha * q_scale * k_scale, mask, chain)


def _match_scores(value: SSAValue) -> _Scores | None:
    """The softmax input: ``product [+ mask]`` or ``masked_fill(product)``."""
    op = value.owner
    if isinstance(op, AddOp):
        for s, m in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            if s.type != op.result.type or m.type.element_type != f32:  # type: ignore[attr-defined]
                continue
            scores = _match_product(s)
            if scores is not None and scores.mask.additive is None:
                scores.mask.additive = m
                scores.chain.insert(0, op)
                return scores
    if isinstance(op, SelectOp):
        for scores_value, fill_value, masked_when in ((op.on_false, op.on_true, True), (op.on_true, op.on_false, False)):
            fill = splat_constant(fill_value)
            if fill is None or fill > LARGE_NEGATIVE or scores_value.type != op.result.type:
                continue
            scores = _match_product(scores_value)
            if scores is not None and scores.mask.additive is None:
                scores.mask = _Mask(cond=op.cond, masked_when=masked_when, fill=fill)
                scores.chain.insert(0, op)
                return scores
    return _match_product(value)


# --------------------------------------------------------------------------- patterns


def _shapes_ok(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> bool:
    """The shape rules of tg.attention (checked before any op is built)."""
    return (
        len(q) >= 3 and len(k) == len(q) and len(v) == len(q)
        and q[-1] == k[-1] and k[-2] == v[-2] and k[:-2] == v[:-2] and q[:-3] == k[:-3]
        and k[-3] > 0 and q[-3] % k[-3] == 0
    )


class FuseHandWrittenAttention(RewritePattern):
    """``softmax(q @ k^T * scale [+ mask]) @ v`` is one tg.attention (see the module doc for the IR)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MatmulOp, rewriter: PatternRewriter) -> None:
        transpose_a, transpose_b, alpha, _ = op.flags
        if transpose_a or alpha != 1.0 or op.acc is not None or op.activation.data != "none":
            return
        softmax = op.lhs.owner
        if not isinstance(softmax, SoftmaxOp) or not only_live_user_is(softmax.result, op):
            return
        if softmax.dim.value.data != len(shape_of(softmax.result)) - 1:
            return
        scores = _match_scores(softmax.input)
        if scores is None or not used_only_inside([softmax, *scores.chain], op):
            return
        v = _untransposed(op.rhs, transpose_b)
        q_shape, k_shape, v_shape = shape_of(scores.q), scores.k.shape, v.shape
        if not _shapes_ok(q_shape, k_shape, v_shape) or (*q_shape[:-1], v_shape[-1]) != shape_of(op.result):
            return
        mask = scores.mask
        mask_value = mask.cond if mask.cond is not None else mask.additive
        if mask_value is not None and not is_broadcastable_to(shape_of(mask_value), shape_of(softmax.result)):
            return
        if not float32_kernel(scores.q, softmax.result):
            return
        # The match is certain: build.
        mask_ops, additive, causal = _resolve_mask(mask, q_shape[-2], k_shape[-2])
        k_ops, k = scores.k.materialize()
        v_ops, v_value = v.materialize()
        attn = AttentionOp(scores.q, k, v_value, additive, scores.scale, causal)
        attn.result.name_hint = op.result.name_hint
        operands = list(op.operands)
        rewriter.replace(op, [*k_ops, *v_ops, *mask_ops, attn], [attn.result])
        erase_dead_producers(operands, rewriter)


class FoldCausalMaskIntoAttention(RewritePattern):
    """A constant causal mask of a tg.attention becomes ``causal = true``; a zero mask goes (also
    a splat zero broadcast to a symbolic shape). At a symbolic sequence length (queries and keys
    the same size), a mask computed from aranges alone is judged at the largest size
    (`value_range.index_local_array`: what it is there, it is at every size)."""

    def __init__(self) -> None:
        #: symbolic masks judged so far (the layers of a model share theirs): causal, or None
        #: (zero: False; neither: missing from the rewrite)
        self._judged: dict[SSAValue, bool | None] = {}

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AttentionOp, rewriter: PatternRewriter) -> None:
        if op.mask is None:
            return
        q, k = op.heads_major_shapes()[:2]
        if splat_constant(op.mask) == 0.0:  # zero everywhere, of any shape (a symbolic one too)
            causal = False
        elif constant_array(op.mask) is not None:
            _, mask, causal = _resolve_mask(_Mask(additive=op.mask), q[-2], k[-2])
            if mask is not None:
                return
        elif not isinstance(q[-2], int) and sympy.sympify(q[-2] - k[-2]) == 0:
            if op.mask not in self._judged:
                self._judged[op.mask] = _symbolic_mask(op.mask)
            causal = self._judged[op.mask]
            if causal is None:
                return
        else:
            return
        attn = AttentionOp(op.q, op.k, op.v, None, op.scale.value.data, causal or op.is_causal, op.uses_kv_cache, op.seq_major,
                           op.head_ranges)
        attn.result.name_hint = op.result.name_hint
        operands = list(op.operands)
        rewriter.replace(op, attn)
        erase_dead_producers(operands, rewriter)


def _symbolic_mask(mask: SSAValue) -> bool | None:
    """A mask over a symbolic length computed from aranges alone (`index_local_array`, at the
    largest size): True when causal, False when zero everywhere, None otherwise."""
    values = index_local_array(mask)
    if values is None or values.dtype.kind != "f":
        return None
    n = values.shape[-1]
    if is_causal_additive(values, n, n):
        return True
    return None if np.any(values) else False


def _shared_heads(value: SSAValue) -> tuple[SSAValue, tuple[int, ...]] | None:
    """``(x, shape)`` when ``value`` is ``reshape(broadcast(x))`` repeating each of Hkv heads G
    times: the broadcast result is [..., Hkv, G, S, D] from an x of [..., Hkv, 1, S, D] (any
    reshape of it), the final reshape [..., Hkv * G, S, D]; ``shape`` is [..., Hkv, S, D]."""
    reshape = value.owner
    if not isinstance(reshape, ReshapeOp) or not isinstance(reshape.input.owner, BroadcastOp):
        return None
    expand = reshape.input.owner
    b, out = shape_of(expand.result), shape_of(reshape.result)
    if len(b) != len(out) + 1 or len(out) < 3:
        return None
    if b[:-4] != out[:-3] or b[-4] * b[-3] != out[-3] or b[-2:] != out[-2:]:
        return None
    source = expand.input
    src = shape_of(source)
    unit = (*b[:-3], 1, *b[-2:])
    if tuple(src) != unit and not (len(src) == len(unit) - 1 and tuple(src) == (*b[:-3], *b[-2:])):
        return None  # the broadcast must repeat along the group dim only
    return source, (*b[:-3], *b[-2:])


class ReadSharedKVHeads(RewritePattern):
    """K/V repeated per query group (repeat_kv) feed `tg.attention` as the shared heads instead."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AttentionOp, rewriter: PatternRewriter) -> None:
        if any(op.seq_major[1:3]) or op.head_ranges[1:] != (None, None):
            return  # k, v of [..., S, Hkv * G, D] or a head range: not the repeat_kv form
        k, v = _shared_heads(op.k), _shared_heads(op.v)
        if k is None or v is None or k[1][:-2] != v[1][:-2]:
            return
        heads = op.heads_major_shapes()[0][-3]
        if heads % k[1][-3]:
            return
        new_ops: list[Operation] = []
        kv: list[SSAValue] = []
        for source, shape in (k, v):
            if isinstance(source.owner, ReshapeOp):  # look through the unsqueeze of repeat_kv
                source = source.owner.input
            if tuple(shape_of(source)) == tuple(shape):
                kv.append(source)
            else:
                r = ReshapeOp(source, shape)
                new_ops.append(r)
                kv.append(r.result)
        attn = AttentionOp(op.q, kv[0], kv[1], op.mask, op.scale.value.data, op.is_causal, op.uses_kv_cache, op.seq_major,
                           op.head_ranges)
        attn.result.name_hint = op.result.name_hint
        operands = list(op.operands)
        rewriter.replace(op, [*new_ops, attn], [attn.result])
        erase_dead_producers(operands, rewriter)


@dataclass(frozen=True)
class FuseAttentionPass(ModulePass):
    """Fuses hand-written attention into tg.attention and turns constant causal masks into ``causal``."""

    name = "fuse-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [FuseHandWrittenAttention(), FoldCausalMaskIntoAttention(), ReadSharedKVHeads()], dce_enabled=False
            )
        ).rewrite_module(op)
