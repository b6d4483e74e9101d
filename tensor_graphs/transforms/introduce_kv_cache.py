"""`introduce-kv-cache`: causal self-attention reads its keys and values from a KV cache.

A graph traced for ``S`` new tokens computes each layer's keys and values for those tokens
only. This pass gives every `tg.attention` (in program order: layer ``i``) two persistent
`tg.state` tensors of ``capacity`` positions, writes the new keys/values into them at the
graph's run-time position ``past`` with `tg.cache_write` (in place), and lets the attention
read the caches (``kv_cache``: the first ``past + S`` positions are keys)::

    %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true}
        : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
    =>  (capacity = 64)
    %kc0 = tg.state "kv.0.key" : tensor<1x2x64x16xf32>
    %vc0 = tg.state "kv.0.value" : tensor<1x2x64x16xf32>
    %kw = tg.cache_write %k into %kc0 {axis = 2 : i64} : (...) -> tensor<1x2x64x16xf32>
    %vw = tg.cache_write %v into %vc0 {axis = 2 : i64} : (...) -> tensor<1x2x64x16xf32>
    %o = tg.attention %q, %kw, %vw {scale = 0.25 : f32, causal = true, kv_cache = true} : ...

The same graph then serves any position: a prefill chunk of ``S`` tokens at ``past = 0, S,
2S, ...`` and, traced with ``S = 1``, each decode step. ``S`` may be a size symbol (a prefill
of any length up to its maximum, which must fit the cache). The cache holds ``Hkv`` heads (after
`fuse-attention` has removed repeat_kv), so grouped-query attention caches no copies.

Only self-attention fits: each attention must be causal (or have one query, where causal and
not are the same), take no mask, and read as many keys as it has queries; anything else fails
with a message naming the attention. The function records ``tg.kv_capacity``.

With ``padding_mask``, every cached attention also reads one more state, ``kv.mask``: an
additive key-padding mask over the cache's positions (``[B, 1, 1, capacity]``, 0 where a
position holds a real token, -inf where it holds padding), which the runtime writes (the
decoder, from a batch's ``attention_mask``: left-padded prompts of different lengths). All
layers share it; zeros (its initial value) mask nothing::

    %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true}
        : (tensor<3x4x8x16xf32>, tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>) -> tensor<3x4x8x16xf32>
    =>  (capacity = 64, padding_mask = true)
    %kc0 = tg.state "kv.0.key" : tensor<3x2x64x16xf32>
    %vc0 = tg.state "kv.0.value" : tensor<3x2x64x16xf32>
    %mask = tg.state "kv.mask" : tensor<3x1x1x64xf32>
    %kw = tg.cache_write %k into %kc0 {axis = 2 : i64} : (...) -> tensor<3x2x64x16xf32>
    %vw = tg.cache_write %v into %vc0 {axis = 2 : i64} : (...) -> tensor<3x2x64x16xf32>
    %o = tg.attention %q, %kw, %vw mask %mask {scale = 0.25 : f32, causal = true, kv_cache = true} : ...

Without it the graph is exactly as before (no mask operand, no work for one unpadded prompt).

    tg-opt model.mlir -p introduce-kv-cache{capacity=2048}
    tg-opt model.mlir -p 'introduce-kv-cache{capacity=2048 padding_mask=true}'
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.dialects.symbolic import symbols_of, upper_bound
from tensor_graphs.dialects.tensor import AttentionOp, CacheWriteOp, SliceOp, StateOp, TransposeOp, shape_of

PASS = "introduce-kv-cache"
#: the additive key-padding mask over the cache's positions (``padding_mask``): [*batch, 1, 1, capacity]
MASK_STATE = "kv.mask"


def state_names(layer: int) -> tuple[str, str]:
    """Names of layer ``layer``'s key and value caches."""
    return f"kv.{layer}.key", f"kv.{layer}.value"


def _why_not(op: AttentionOp) -> str | None:
    q, k = op.heads_major_shapes()[:2]
    if op.mask is not None:
        return "it has an explicit mask (only causal self-attention can read a cache)"
    if k[-2] != q[-2]:
        return f"it reads {k[-2]} keys for {q[-2]} queries (not self-attention over the new tokens)"
    if not op.is_causal and q[-2] != 1:
        return "it is not causal"
    return None


def introduce_kv_cache(fn: func.FuncOp, capacity: int, padding_mask: bool = False) -> int:
    """Rewrite the attentions of ``fn`` to read KV caches of ``capacity`` positions (and, with
    ``padding_mask``, the key-padding mask state `MASK_STATE`); returns how many."""
    attentions = [op for op in fn.walk() if isinstance(op, AttentionOp) and not op.uses_kv_cache]
    if not attentions:
        return 0
    block = fn.body.block
    last_state: StateOp | None = None  # states go first in the function, in layer order
    mask: StateOp | None = None
    for layer, op in enumerate(attentions):
        where = f"@{fn.sym_name.data}: attention #{layer} ({op.result.name_hint or 'unnamed'})"
        if (reason := _why_not(op)) is not None:
            raise PassFailedException(f"{PASS}: in {where}: cannot cache its keys: {reason}")
        seq = op.heads_major_shapes()[1][-2]
        most = seq if isinstance(seq, int) else upper_bound((seq,), symbols_of(fn))[0]  # a symbolic count: its largest
        if most > capacity:
            raise PassFailedException(f"{PASS}: in {where}: {most} new tokens do not fit a cache of {capacity} positions")
        cached = []
        for name, value, seq_major, heads in zip(state_names(layer), (op.k, op.v), op.seq_major[1:3], op.head_ranges[1:]):
            if heads is not None:  # the heads it reads of a wider buffer, copied out first
                rank = len(shape_of(value))
                part = SliceOp(value, rank - 2 if seq_major else rank - 3, heads[0], heads[1])
                block.insert_op_before(part, op)
                value = part.result
            if seq_major:  # a cache is heads-major: the new keys are transposed into its layout
                rank = len(shape_of(value))
                heads_major = TransposeOp(value, (*range(rank - 3), rank - 2, rank - 3, rank - 1))
                block.insert_op_before(heads_major, op)
                value = heads_major.result
            shape = shape_of(value)
            state = StateOp(name, TensorType(value.type.element_type, (*shape[:-2], capacity, shape[-1])))  # type: ignore[attr-defined]
            state.result.name_hint = name.replace(".", "_")
            if last_state is None:
                block.insert_op_before(state, block.first_op)  # type: ignore[arg-type]
            else:
                block.insert_op_after(state, last_state)
            last_state = state
            write = CacheWriteOp(state.result, value, axis=len(shape) - 2)
            block.insert_op_before(write, op)
            cached.append(write.result)
        if padding_mask:
            batch = shape_of(op.q)[:-3]
            if mask is None:
                mask = StateOp(MASK_STATE, TensorType(op.q.type.element_type, (*batch, 1, 1, capacity)))  # type: ignore[attr-defined]
                mask.result.name_hint = "kv_mask"
                block.insert_op_after(mask, last_state)  # type: ignore[arg-type]
                last_state = mask
            elif shape_of(mask.result)[:-3] != batch:
                raise PassFailedException(
                    f"{PASS}: in {where}: its batch {list(batch)} differs from the first attention's "
                    f"{list(shape_of(mask.result)[:-3])} (one padding mask serves every layer)"
                )
        new = AttentionOp(
            op.q, cached[0], cached[1], mask.result if mask is not None else None, op.scale.value.data, op.is_causal,
            kv_cache=True, seq_major=(op.seq_major[0], False, False, op.seq_major[3]), heads=(op.head_ranges[0], None, None),
        )
        block.insert_op_before(new, op)
        new.result.name_hint = op.result.name_hint
        op.result.replace_all_uses_with(new.result)
        block.erase_op(op)
    fn.attributes["tg.kv_capacity"] = IntegerAttr(capacity, i64)
    return len(attentions)


@dataclass(frozen=True)
class IntroduceKVCachePass(ModulePass):
    """Every causal self-attention reads (and appends to) a KV cache of ``capacity`` positions;
    with ``padding_mask`` also the key-padding mask state ``kv.mask`` (see the module docstring)."""

    name = "introduce-kv-cache"

    capacity: int = 0
    padding_mask: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.capacity <= 0:
            raise PassFailedException(f"{PASS}: needs capacity > 0 (the cache's positions), e.g. {PASS}{{capacity=2048}}")
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp) and fn.body.blocks:
                introduce_kv_cache(fn, self.capacity, self.padding_mask)
