"""`absorb-attention-layouts`: the head/sequence transposes around a `tg.attention` become its
layout flags.

PyTorch attention modules project to ``[B, S, H*D]``, view that as ``[B, S, H, D]``, transpose to
``[B, H, S, D]`` for SDPA, and transpose the result back before the output projection: four
copies of a layer's activations (three in, one out) that only reorder heads and positions. An
attention kernel reads a row of q, k or v, and writes a row of its output, at any stride, so
this pass gives those transposes to the attention as flags (``q_seq_major``, ``k_seq_major``,
``v_seq_major``, ``out_seq_major``: that buffer stored ``[..., S, H, D]``) and the copies go:

- a transpose swapping dims -3 and -2 that feeds q, k or v toggles that operand's flag;
- a transpose swapping dims -3 and -2 that is the only user of the result toggles ``out``'s;
- a sequence-major q, k or v sliced out of a wider projection's output (GPT-2's ``c_attn``: q, k
  and v side by side) is read in place: the whole output and a head range (``k_heads = array<i64:
  first, count>``), no slice copied;
- a `tg.rope` between a transpose and the attention (Llama, Qwen: the rotation is applied after
  the transpose) moves before the transpose, its cos and sin transposed to match (only size-1
  dims move in the usual ``[B, 1, S, D]``: a view), so that the transpose reaches the attention;
  likewise a `tg.rms_norm` between the transpose and such a rope (Gemma-3's q/k norm after the
  transpose): a norm over the last dim does not see the order of the others.

The KV cache keeps its heads-major layout: an attention over a cache takes no ``k_seq_major`` or
``v_seq_major`` (`introduce-kv-cache` transposes seq-major keys into the cache's layout).
Producers left without users are erased by `dce`.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects.tensor import AttentionOp, ReshapeOp, RmsNormOp, RopeOp, SliceOp, TransposeOp, shape_of
from tensor_graphs.transforms.dce import live_uses


def _swaps_heads_and_positions(op: Operation | None) -> bool:
    """``op`` is a transpose by ``[0, ..., n-4, n-2, n-3, n-1]``: an attention operand's heads
    and positions swapped, the rest in place."""
    if not isinstance(op, TransposeOp):
        return False
    n = len(op.permutation)
    return n >= 3 and op.permutation == (*range(n - 3), n - 2, n - 3, n - 1)


def _swap_perm(rank: int) -> tuple[int, ...]:
    return (*range(rank - 3), rank - 2, rank - 3, rank - 1)


def _rebuild(op: AttentionOp, operands: list[SSAValue], seq_major: tuple[bool, ...], heads: tuple | None = None) -> AttentionOp:
    heads = op.head_ranges if heads is None else heads
    new = AttentionOp(*operands[:3], op.mask, op.scale.value.data, op.is_causal, op.uses_kv_cache, seq_major, heads)
    new.result.name_hint = op.result.name_hint
    return new


class AbsorbOperandTranspose(RewritePattern):
    """A transpose of heads and positions feeding q, k or v toggles that operand's flag.

    %t = tg.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
    %o = tg.attention %t, %k, %v {scale = 0.25 : f32} : (tensor<1x4x8x16xf32>, ...) -> tensor<1x4x8x16xf32>
    =>
    %o = tg.attention %x, %k, %v {scale = 0.25 : f32, q_seq_major = true} : (tensor<1x8x4x16xf32>, ...) -> tensor<1x4x8x16xf32>

    Not for k and v of an attention over a KV cache (the cache is heads-major).
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AttentionOp, rewriter: PatternRewriter) -> None:
        operands, flags = [op.q, op.k, op.v], list(op.seq_major)
        for i in range(1 if op.uses_kv_cache else 3):
            owner = operands[i].owner
            if _swaps_heads_and_positions(owner):
                assert isinstance(owner, TransposeOp)
                operands[i], flags[i] = owner.input, not flags[i]
                rewriter.replace(op, _rebuild(op, operands, tuple(flags)))
                return


class AbsorbHeadSlice(RewritePattern):
    """A sequence-major q, k or v that is a slice of whole heads of a wider projection's output
    (GPT-2's ``c_attn``: q, k and v side by side along its last dim) is read in place: the
    attention takes the whole output, viewed ``[..., S, heads, D]``, and a head range.

    %s = tg.slice %qkv {dim = 2 : i64, start = 128 : i64} : (tensor<1x8x384xf32>) -> tensor<1x8x128xf32>
    %k = tg.reshape %s : (tensor<1x8x128xf32>) -> tensor<1x8x4x32xf32>
    %o = tg.attention %q, %k, %v {scale = 0.25 : f32, k_seq_major = true} : (..., tensor<1x8x4x32xf32>, ...) -> ...
    =>
    %all = tg.reshape %qkv : (tensor<1x8x384xf32>) -> tensor<1x8x12x32xf32>
    %o = tg.attention %q, %all, %v {scale = 0.25 : f32, k_seq_major = true, k_heads = array<i64: 4, 4>} : (..., tensor<1x8x12x32xf32>, ...) -> ...

    The slice must take whole heads (its start and the last dim multiples of D, unit step). Not
    for k and v of an attention over a KV cache.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AttentionOp, rewriter: PatternRewriter) -> None:
        operands, ranges = [op.q, op.k, op.v], list(op.head_ranges)
        for i in range(1 if op.uses_kv_cache else 3):
            if not op.seq_major[i] or ranges[i] is not None:
                continue
            view = _whole_heads(operands[i])
            if view is None:
                continue
            source, (first, count) = view
            xs = shape_of(source)
            d = shape_of(operands[i])[-1]
            wide = ReshapeOp(source, (*xs[:-1], xs[-1] // d, d))
            wide.result.name_hint = f"{source.name_hint or 'heads'}_heads"
            operands[i], ranges[i] = wide.result, (first, count)
            rewriter.replace(op, [wide, _rebuild(op, operands, op.seq_major, tuple(ranges))])
            return


def _whole_heads(value: SSAValue) -> tuple[SSAValue, tuple[int, int]] | None:
    """``(x, (first, count))`` when ``value`` (``[..., S, H, D]``) is ``reshape(slice(x))`` of
    whole heads along ``x``'s last dim (``[..., S, N]``), else None."""
    reshape = value.owner
    if not isinstance(reshape, ReshapeOp) or not isinstance(slice_ := reshape.input.owner, SliceOp):
        return None
    dim, start, step = slice_.bounds
    xs, rs = shape_of(slice_.input), shape_of(value)
    if step != 1 or dim != len(xs) - 1 or len(rs) != len(xs) + 1 or tuple(xs[:-1]) != tuple(rs[:-2]):
        return None
    heads, d = rs[-2], rs[-1]
    if d == 0 or start % d or xs[-1] % d or shape_of(slice_.result)[-1] != heads * d:
        return None
    return slice_.input, (start // d, heads)


class AbsorbResultTranspose(RewritePattern):
    """A transpose of heads and positions that is the only user of an attention toggles ``out``'s flag.

    %o = tg.attention %q, %k, %v {scale = 0.25 : f32} : (...) -> tensor<1x4x8x16xf32>
    %t = tg.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
    =>
    %t = tg.attention %q, %k, %v {scale = 0.25 : f32, out_seq_major = true} : (...) -> tensor<1x8x4x16xf32>
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: TransposeOp, rewriter: PatternRewriter) -> None:
        attn = op.input.owner
        if not isinstance(attn, AttentionOp) or not _swaps_heads_and_positions(op):
            return
        if [use.operation for use in live_uses(attn.result)] != [op]:
            return
        flags = list(attn.seq_major)
        flags[3] = not flags[3]
        new = _rebuild(attn, [attn.q, attn.k, attn.v], tuple(flags))
        new.result.name_hint = attn.result.name_hint or op.result.name_hint
        rewriter.replace(op, new)


def _feeds_query_or_key(rope: Operation) -> bool:
    """``rope``'s one live user is a `tg.attention` that takes it as q (or as k, without a KV
    cache): there its transpose is absorbed."""
    users = live_uses(rope.results[0])
    if len(users) != 1 or not isinstance(attn := users[0].operation, AttentionOp):
        return False
    return users[0].index in ((0,) if attn.uses_kv_cache else (0, 1))


def _only_user(value: SSAValue, user: Operation) -> bool:
    return [use.operation for use in live_uses(value)] == [user]


class RmsNormBeforeTranspose(RewritePattern):
    """An RMS norm between a heads/positions transpose and a rope that feeds an attention's q or
    k runs on the transpose's input instead (`RopeBeforeTranspose` then moves the rope).

    %t = tg.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
    %n = tg.rms_norm %t, %w : (tensor<1x4x8x16xf32>, tensor<16xf32>) -> tensor<1x4x8x16xf32>
    %r = tg.rope %n, %cos, %sin ...            (%r: q or k of a tg.attention)
    =>
    %m = tg.rms_norm %x, %w : (tensor<1x8x4x16xf32>, tensor<16xf32>) -> tensor<1x8x4x16xf32>
    %n = tg.transpose %m {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
    %r = tg.rope %n, %cos, %sin ...
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: RmsNormOp, rewriter: PatternRewriter) -> None:
        transpose = op.input.owner
        if not _swaps_heads_and_positions(transpose) or not _only_user(transpose.results[0], op):  # type: ignore[union-attr]
            return
        users = live_uses(op.result)
        if len(users) != 1 or not isinstance(rope := users[0].operation, RopeOp) or rope.input is not op.result:
            return
        if not _feeds_query_or_key(rope):
            return
        assert isinstance(transpose, TransposeOp)
        norm = RmsNormOp(transpose.input, op.weight, op.eps.value.data)
        norm.result.name_hint = op.result.name_hint
        back = TransposeOp(norm.result, transpose.permutation)
        back.result.name_hint = transpose.result.name_hint
        rewriter.replace(op, [norm, back], [back.result])


class RopeBeforeTranspose(RewritePattern):
    """A rope between a heads/positions transpose and the attention it feeds (as q or k) runs on
    the transpose's input instead, so that the transpose reaches the attention.

    %t = tg.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
    %r = tg.rope %t, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
    %o = tg.attention %r, %k, %v ...
    =>
    %c = tg.transpose %cos {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x1x8x16xf32>) -> tensor<1x8x1x16xf32>
    %s = tg.transpose %sin {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x1x8x16xf32>) -> tensor<1x8x1x16xf32>
    %y = tg.rope %x, %c, %s : (tensor<1x8x4x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>) -> tensor<1x8x4x16xf32>
    %r = tg.transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
    %o = tg.attention %r, %k, %v ...

    (a transpose moving only size-1 dims, as of cos and sin here, is a view in the buffer
    lowering). Only when the rope's one live user is an attention that can absorb it and the
    transpose's one live user is the rope: elsewhere the transpose would only move. A rope with
    a norm prologue (`fuse-rms-norm-rope` run first) keeps it.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: RopeOp, rewriter: PatternRewriter) -> None:
        transpose = op.input.owner
        if not _swaps_heads_and_positions(transpose):
            return
        assert isinstance(transpose, TransposeOp)
        if not _feeds_query_or_key(op) or not _only_user(transpose.result, op):
            return
        rank = len(shape_of(op.input))
        perm = _swap_perm(rank)
        new_ops: list[Operation] = []
        tables: list[SSAValue] = []
        for table in (op.cos, op.sin):
            shape, name = shape_of(table), table.name_hint or "table"
            if len(shape) < rank:  # broadcast from the left: give it the input's rank first
                padded = ReshapeOp(table, (*(1,) * (rank - len(shape)), *shape))
                padded.result.name_hint = f"{name}_padded"
                new_ops.append(padded)
                table = padded.result
            moved = TransposeOp(table, perm)
            moved.result.name_hint = f"{name}_seq_major"
            new_ops.append(moved)
            tables.append(moved.result)
        # a norm prologue (fuse-rms-norm-rope) goes with it: over the last dim, blind to the others
        rope = RopeOp(transpose.input, *tables, op.norm, op.eps.value.data if op.eps is not None else None)
        rope.result.name_hint = op.result.name_hint
        back = TransposeOp(rope.result, perm)
        back.result.name_hint = transpose.result.name_hint
        rewriter.replace(op, [*new_ops, rope, back], [back.result])


class AbsorbAttentionLayoutsPass(ModulePass):
    """Folds the head/sequence transposes around tg.attention into its layout flags."""

    name = "absorb-attention-layouts"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [RmsNormBeforeTranspose(), RopeBeforeTranspose(), AbsorbOperandTranspose(), AbsorbResultTranspose(),
                 AbsorbHeadSlice()],
                dce_enabled=False,
            )
        ).rewrite_module(op)
