"""Token-by-token generation over compiled native functions that share one KV cache.

A :class:`CompiledDecoder` holds two compiled graphs of the same model, both reading and
appending to the same persistent KV-cache state (allocated once for ``capacity`` positions,
updated in place by the generated code):

- ``prefill``: a chunk of ``chunk`` tokens at the run-time position ``past``. A prompt of any
  length ``P <= max_seq`` runs as ``ceil(P / chunk)`` calls at ``past = 0, chunk, 2 chunk, ...``;
  the last chunk is padded on the right. Padding is harmless: causal attention never lets a real
  token see a later (padded) one, and the cache rows the padding writes lie past the prompt,
  where the next token's write lands before any read.
- ``decode``: one token at ``past = position``.

Both are compiled once; every prompt length and every position reuses them (``past`` travels
in the native ABI's ``dims[0]``).

A batch of prompts of different lengths runs as transformers runs it: left-padded to one length,
with an ``attention_mask`` (1 = token, 0 = padding; int or bool, the shape of ``input_ids``).
A decoder compiled with ``padding`` (`compile_decoder`'s default for ``batch > 1``) has one more
state, ``kv.mask``: an additive mask over the cache's positions (0 for a token, -inf for
padding) that every attention reads, in the prompt and in every decode step. The padded
positions keep their slots in the cache (the cache position is the column, the same for every
row) and stay masked; each generated token's slot is unmasked as it is written (transformers
appends a 1 to the mask). The position ids are transformers' ``cumsum(mask) - 1`` (0 at
padding), then one more per generated token, so every row gets the tokens it would get alone.
Columns that are padding in every row are dropped first; a mask without zeros left is no mask,
which is all a decoder compiled without ``padding`` accepts. Right padding runs as it does in
transformers (the next token comes from the last column, a pad), with the same warning.

A call is all or nothing: when ``prefill``, ``extend``, ``decode`` or ``generate`` fails (a token
id out of range in the third chunk, say), the decoder is left as it was before the call: the
same ``position`` and the same cached keys and values (the rows below the old position that the
call had overwritten are put back). A decoder holds one sequence, so it runs one call at a time:
a call from a second thread while one is running raises ``RuntimeError``. For several sequences
at once, give each thread its own: ``dec.clone()`` shares the compiled code and the (packed)
weights and has its own KV cache and arenas.

```python
dec = tensor_graphs.compile_decoder(model, max_seq=256)
logits = dec.prefill(ids)          # [B, V]: the last prompt token's logits
logits = dec.decode(next_ids)      # [B, V]; dec.position == P + 1
tokens = dec.generate(ids, max_new_tokens=20)   # greedy, like transformers' generate(do_sample=False)

dec = tensor_graphs.compile_decoder(model, max_seq=256, batch=3)    # padding=True (batch > 1)
tokens = dec.generate(ids, 20, attention_mask=mask)   # ids, mask [3, P]: left-padded prompts
```
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from tensor_graphs.runtime_support.executable import CompiledGraph
from tensor_graphs.transforms.introduce_kv_cache import MASK_STATE

#: The axis of a KV-cache state that indexes positions (``introduce-kv-cache`` lays a cache out
#: as [batch, kv heads, positions, head dim]).
POSITION_AXIS = -2


@dataclass(frozen=True)
class DecoderMemory:
    """Bytes a compiled decoder holds (or, from `estimate_memory`, would hold)."""

    #: the arenas of the prefill and decode graphs (intermediates, planned)
    arena_bytes: int
    #: model weights read where they are (the torch parameters' own memory) and IR constants
    weight_bytes: int
    #: the KV cache: 2 x layers x batch x kv heads x capacity x head dim x 4 bytes (+ the
    #: padding mask, batch x capacity x 4 bytes, when compiled with ``padding``)
    state_bytes: int
    #: the logits a prefill chunk and a decode step return ([B, V] each, allocated per call)
    output_bytes: int = 0
    #: the GEMMs' weights packed into column panels (copies, shared by both graphs)
    packed_bytes: int = 0

    @property
    def kv_cache_bytes(self) -> int:
        return self.state_bytes

    @property
    def total_bytes(self) -> int:
        return self.arena_bytes + self.weight_bytes + self.packed_bytes + self.state_bytes + self.output_bytes

    @property
    def new_bytes(self) -> int:
        """What compiling allocates beyond the weights (which stay where they are)."""
        return self.arena_bytes + self.packed_bytes + self.state_bytes + self.output_bytes

    def __str__(self) -> str:
        mib = 1 << 20
        return (
            f"arena {self.arena_bytes / mib:.1f} MiB, weights {self.weight_bytes / mib:.1f} MiB, "
            f"packed weights {self.packed_bytes / mib:.1f} MiB, KV cache {self.state_bytes / mib:.1f} MiB, "
            f"outputs {self.output_bytes / mib:.1f} MiB"
        )


class CompiledDecoder:
    """Prefill and decode native functions over one KV cache; see the module docstring."""

    def __init__(
        self,
        graphs: Sequence[CompiledGraph],
        *,
        chunk: int,
        max_seq: int,
        capacity: int,
        batch: int,
        max_position: int | None = None,
    ):
        self._graphs = list(graphs)
        self._prefill_fn = self._graphs[0]
        self._decode_fn = self._graphs[-1]
        self.chunk = chunk
        self.max_seq = max_seq
        self.capacity = capacity
        self.batch = batch
        #: positions past this get clamped (only padding ever reaches them)
        self._last_position = min(capacity, max_position or capacity) - 1
        self._position = 0
        self._ids = np.zeros((batch, 1), dtype=np.int64)
        self._pos = np.zeros((batch, 1), dtype=np.int64)
        #: the rows of the B x S final hidden states whose logits a call returns: each sequence's
        #: last token (a decode step: row b; a prefill call of S columns: b * S + last real index)
        self._decode_rows = np.arange(batch, dtype=np.int64)
        self._max_position = max_position
        #: the prefill graph takes any count of tokens up to ``chunk`` (a size symbol): the last
        #: call of a prompt runs exactly what is left, unpadded
        self._exact = bool(getattr(getattr(self._prefill_fn, "signature", None), "symbols", ()))
        #: why the prefill runs padded chunks where a prefill of any length was tried (`explain`)
        self.prefill_note: str | None = None
        #: the additive key-padding mask [B, capacity] (a view of the ``kv.mask`` state): 0 where
        #: a cache position holds a token, -inf where padding; None when compiled without padding
        mask = self.states.get(MASK_STATE)
        self._mask = None if mask is None else mask.reshape(batch, capacity)
        assert self._mask is None or _same_memory(self._mask, mask)
        #: each row's next position id after a padded prompt (transformers' cumsum(mask) - 1 ...);
        #: None while the position ids are the cache positions. Replaced, never updated in place.
        self._next_pos: np.ndarray | None = None
        #: held by the call running now: one sequence, one call at a time
        self._busy = threading.Lock()

    def clone(self) -> CompiledDecoder:
        """A decoder for another sequence: the same compiled functions and weights (packed ones
        included, nothing is compiled or packed again), its own empty KV cache and arenas. One
        per thread serves several sequences at once."""
        prefill = self._prefill_fn.sharing()
        graphs = [prefill] + [g.sharing(prefill.states) for g in self._graphs[1:]]
        twin = CompiledDecoder(
            graphs, chunk=self.chunk, max_seq=self.max_seq, capacity=self.capacity, batch=self.batch,
            max_position=self._max_position,
        )
        twin.prefill_note = self.prefill_note
        return twin

    @contextmanager
    def _call(self, positions: int, *, reset: bool) -> Iterator[None]:
        """Run one public call that writes ``positions`` cache positions from the current one (from
        0 with ``reset``), all or nothing: if it raises, ``position`` and the cached rows below it
        are put back as they were. A second call meanwhile (from another thread) raises."""
        if not self._busy.acquire(blocking=False):
            raise RuntimeError(
                "this CompiledDecoder is running a call on another thread: it holds one sequence "
                "(its KV cache), so it runs one call at a time; give each thread its own decoder "
                "(dec.clone() shares the compiled code and weights) or serialise the calls with a lock"
            )
        writes_from = 0 if reset else self._position
        position, next_pos = self._position, self._next_pos
        overwritten = range(writes_from, min(position, writes_from + positions))
        saved = [(a, name, _copy(_rows(a, name, overwritten))) for name, a in self.states.items()] if overwritten else []
        try:
            yield
        except BaseException:
            for a, name, rows in saved:
                _rows(a, name, overwritten)[...] = rows
            self._position, self._next_pos = position, next_pos
            raise
        finally:
            self._busy.release()

    # ------------------------------------------------------------------ state

    @property
    def position(self) -> int:
        """Tokens currently in the KV cache."""
        return self._position

    def reset(self) -> None:
        """Forget the cached tokens (the cache memory is kept and simply overwritten)."""
        with self._call(0, reset=True):
            self._position = 0
            self._next_pos = None

    @property
    def states(self) -> dict[str, np.ndarray]:
        """The KV-cache arrays by name (shared by both graphs)."""
        return self._prefill_fn.states

    @property
    def memory(self) -> DecoderMemory:
        p = self._prefill_fn.memory
        if not hasattr(self._prefill_fn, "signature"):  # graphs on a GPU (`triton_graph`): device bytes
            return DecoderMemory(arena_bytes=sum(g.memory.arena_bytes for g in self._graphs), weight_bytes=p.weight_bytes,
                                 state_bytes=p.state_bytes, output_bytes=sum(g.output_bytes for g in self._graphs))
        arena = sum(g.signature.arena_size for g in self._graphs)
        out = sum(sum(int(np.prod(s.shape)) * s.dtype.itemsize for s in g.signature.outputs) for g in self._graphs)
        # the weights and packed weights are shared (counted once); each graph binds its own IR constants
        sizes: dict[int, tuple[int, bool]] = {}
        for g in self._graphs:
            for name, a in g.bound_weights.items():
                sizes[id(a)] = (a.nbytes, name in g.signature.packed)
        return DecoderMemory(
            arena_bytes=arena,
            weight_bytes=sum(n for n, packed in sizes.values() if not packed),
            state_bytes=p.state_bytes,
            output_bytes=out,
            packed_bytes=sum(n for n, packed in sizes.values() if packed),
        )

    @property
    def padding(self) -> bool:
        """Whether the attentions read a key-padding mask (prompts may be padded differently)."""
        return self._mask is not None

    @property
    def prefill_graph(self) -> CompiledGraph:
        return self._prefill_fn

    @property
    def decode_graph(self) -> CompiledGraph:
        return self._decode_fn

    # ------------------------------------------------------------------ running

    def explain(self, all_kernels: bool = False) -> str:
        """Each graph's kernel paths and why (`CompiledGraph.explain`): the prefill graph's,
        then the decode graph's; by default only the kernels with a choice."""
        parts = [("prefill", self._prefill_fn)] + ([("decode", self._decode_fn)] if self._decode_fn is not self._prefill_fn else [])
        how = (f"prefill: calls of up to {self.chunk} tokens, the last exactly what is left (a size symbol)" if self._exact
               else self.prefill_note or f"prefill: padded chunks of {self.chunk} tokens")
        return how + "\n\n" + "\n\n".join(f"{name} graph: {fn.explain(all_kernels)}" for name, fn in parts)

    def _ids_array(self, ids, what: str) -> tuple[np.ndarray, bool]:
        is_torch = not isinstance(ids, np.ndarray)
        if is_torch:
            try:
                ids = ids.detach().cpu().numpy()
            except AttributeError:
                raise TypeError(f"{what} must be a NumPy array or a torch.Tensor of int64 token ids, got {type(ids).__name__}") from None
        if ids.ndim != 2 or ids.shape[0] != self.batch:
            raise ValueError(f"{what} must have shape [{self.batch}, tokens] (batch {self.batch}), got {list(ids.shape)}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"{what} must hold integer token ids, got {ids.dtype}")
        return np.ascontiguousarray(ids, dtype=np.int64), is_torch

    @staticmethod
    def _out(logits: np.ndarray, as_torch: bool):
        if as_torch:
            import torch

            return torch.from_numpy(logits)
        return logits

    def _check_room(self, new: int) -> None:
        if self._position + new > self.max_seq:
            raise ValueError(
                f"{self._position} cached + {new} new tokens exceed max_seq = {self.max_seq}; "
                f"compile with a larger max_seq or call reset()"
            )

    def _padded(self, n: int) -> int:
        """Cache positions that running ``n`` tokens writes (a chunked run of a static prefill graph
        pads its last chunk)."""
        return n if n == 1 or self._exact else -(-n // self.chunk) * self.chunk

    def _mask_array(self, mask, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """``attention_mask`` checked against ``ids`` [B, P]; returns (ids, mask) with the columns
        that are padding in every row dropped and the mask as bool, or None when nothing is left
        to mask (no mask given, or all ones)."""
        if mask is None:
            return ids, None
        if not isinstance(mask, np.ndarray):
            try:
                mask = mask.detach().cpu().numpy()
            except AttributeError:
                raise TypeError(
                    f"attention_mask must be a NumPy array or a torch.Tensor of 0/1 (int or bool), got {type(mask).__name__}"
                ) from None
        if not (np.issubdtype(mask.dtype, np.integer) or mask.dtype == np.bool_):
            raise TypeError(f"attention_mask must hold 0/1 as integers or bools (like transformers' int64 mask), got {mask.dtype}")
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask has shape {list(mask.shape)}; it must match input_ids {list(ids.shape)}")
        if mask.dtype != np.bool_:
            if ((mask != 0) & (mask != 1)).any():
                raise ValueError("attention_mask must hold only 0 (padding) and 1 (token)")
            mask = mask != 0
        empty = ~mask.any(axis=1)
        if empty.any():
            raise ValueError(
                f"attention_mask row {int(np.flatnonzero(empty)[0])} is all zeros: a prompt needs at least one token"
            )
        if mask.all():
            return ids, None
        drop = int(mask.any(axis=0).argmax())  # leading columns that are padding in every row
        ids, mask = ids[:, drop:], np.ascontiguousarray(mask[:, drop:])
        if mask.all():
            return ids, None
        if self._mask is None:
            raise ValueError(
                "attention_mask pads the rows differently, but this decoder was compiled without a padding "
                "mask; compile it with compile_decoder(..., padding=True) (the default for batch > 1)"
            )
        if not mask[:, -1].all():
            warnings.warn(
                "right padding in attention_mask: as in transformers, the next token of a right-padded row "
                "comes from its last column, a pad, which makes poor generations; pad prompts on the left "
                "(a tokenizer's padding_side='left')",
                UserWarning,
                stacklevel=3,
            )
        return ids, mask

    def prefill(self, input_ids, attention_mask=None):
        """Reset the cache, run the prompt ``input_ids`` [B, P] and return its last token's logits
        [B, V]. ``attention_mask`` [B, P] (1 = token, 0 = padding): left-padded prompts."""
        ids, as_torch = self._ids_array(input_ids, "input_ids")
        ids, mask = self._mask_array(attention_mask, ids)
        with self._call(self._padded(ids.shape[1]), reset=True):
            self._position = 0
            self._next_pos = None
            return self._out(self._extend(ids, mask), as_torch)

    def extend(self, ids: np.ndarray) -> np.ndarray:
        """Append the tokens ``ids`` [B, n] to the cache (in chunks); the last one's logits [B, V]."""
        ids, _ = self._ids_array(ids, "ids")
        with self._call(self._padded(ids.shape[1]), reset=False):
            return self._extend(ids)

    def _extend(self, ids: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Run ``ids`` [B, n] from the current position; ``mask`` (bool [B, n], only for a prompt
        after a reset) marks its padding."""
        n = ids.shape[1]
        if n == 0:
            raise ValueError("no tokens to run: input_ids has 0 columns")
        self._check_room(n)
        if n == 1 and mask is None:
            return self._step(ids)
        if mask is not None:  # transformers' position ids: cumsum(mask) - 1, 0 at padding
            positions = np.cumsum(mask, axis=1, dtype=np.int64) - 1
            positions[~mask] = 0
        elif self._next_pos is not None:  # tokens after a padded prompt
            positions = self._next_pos[:, None] + np.arange(n, dtype=np.int64)
        else:
            positions = None  # the cache positions
        c = self.chunk
        logits = None
        for start in range(0, n, c):
            piece = ids[:, start : start + c]
            real = piece.shape[1]
            width = real if self._exact else c  # a static prefill graph pads the last chunk to c
            chunk_ids = np.zeros((self.batch, width), dtype=np.int64)
            chunk_ids[:, :real] = piece
            past = self._position
            if positions is None:
                at = np.minimum(np.arange(past, past + width, dtype=np.int64), self._last_position)
                chunk_pos = np.ascontiguousarray(np.broadcast_to(at, (self.batch, width)))
            else:
                chunk_pos = np.zeros((self.batch, width), dtype=np.int64)
                chunk_pos[:, :real] = positions[:, start : start + real]
            if self._mask is not None:  # the chunk's cache positions: its tokens, its padding, the chunk's own padding
                cols = self._mask[:, past : past + width]
                cols[:, :real] = 0.0 if mask is None else _like(cols, np.where(mask[:, start : start + real], 0.0, -np.inf))
                cols[:, real:] = -np.inf
            logits = self._prefill_fn(chunk_ids, chunk_pos, self._decode_rows * width + (real - 1), past=past)
            self._position = past + real
        if positions is not None:
            self._next_pos = positions[:, -1] + 1  # transformers: the last column's position + 1
        assert logits is not None
        return logits

    def _step(self, ids: np.ndarray) -> np.ndarray:
        self._ids[:] = ids
        past = self._position
        if self._next_pos is None:
            self._pos[:] = past
        else:
            self._pos[:, 0] = self._next_pos
        if self._mask is not None:
            self._mask[:, past] = 0.0  # the new token (transformers appends a 1 to the mask)
        logits = self._decode_fn(self._ids, self._pos, self._decode_rows, past=past)
        self._position = past + 1
        if self._next_pos is not None:
            self._next_pos = self._next_pos + 1
        return logits

    def decode(self, token_ids):
        """Append one token per row (``token_ids`` [B, 1]) and return its logits [B, V]."""
        ids, as_torch = self._ids_array(token_ids, "token_ids")
        if ids.shape[1] != 1:
            raise ValueError(f"decode takes one token per row ([{self.batch}, 1]), got {list(ids.shape)}; use prefill/extend for more")
        with self._call(1, reset=False):
            if self._position == 0:
                raise ValueError("decode before prefill: run prefill(input_ids) first")
            self._check_room(1)
            return self._out(self._step(ids), as_torch)

    def generate(
        self,
        input_ids,
        max_new_tokens: int,
        *,
        attention_mask=None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
    ):
        """Greedy decoding: ``input_ids`` [B, P] followed by up to ``max_new_tokens`` tokens.

        As transformers does: ``attention_mask`` [B, P] (1 = token, 0 = padding; int or bool)
        lets a batch hold prompts of different lengths, left-padded (see the module docstring);
        a row that has produced an ``eos_token_id`` (kept in the output) continues with
        ``pad_token_id`` (default: the first eos id), and generation stops once every row has.
        Returns ``input_ids`` (padding included) and the new tokens, of the kind of
        ``input_ids`` (NumPy or torch), int64.
        """
        full, as_torch = self._ids_array(input_ids, "input_ids")
        ids, mask = self._mask_array(attention_mask, full)
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if (need := ids.shape[1] + max(max_new_tokens - 1, 0)) > self.max_seq:
            raise ValueError(
                f"{ids.shape[1]} prompt + {max_new_tokens} new tokens need {need} cached positions, "
                f"more than max_seq = {self.max_seq}; compile with a larger max_seq"
            )
        eos = [] if eos_token_id is None else ([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id))
        pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
        out = [full]
        if max_new_tokens:
            with self._call(max(self._padded(ids.shape[1]), need), reset=True):
                self._position = 0
                self._next_pos = None
                out += self._greedy(ids, mask, max_new_tokens, eos, pad)
        result = np.concatenate(out, axis=1)
        return self._out(result, as_torch)

    def _greedy(
        self, ids: np.ndarray, mask: np.ndarray | None, max_new_tokens: int, eos: list[int], pad: int
    ) -> list[np.ndarray]:
        """The new tokens [B, 1] of greedy decoding after the prompt ``ids`` (cache reset)."""
        out = []
        logits = self._extend(ids, mask)
        done = np.zeros(self.batch, dtype=bool)
        for step in range(max_new_tokens):
            token = logits.argmax(axis=-1).astype(np.int64)[:, None]
            token[done, 0] = pad
            out.append(token)
            if eos:
                done |= np.isin(token[:, 0], eos)
            if done.all() or step == max_new_tokens - 1:
                break
            logits = self._step(token)
        return out

    def __repr__(self) -> str:
        return (
            f"<CompiledDecoder batch {self.batch}, max_seq {self.max_seq}, prefill chunk {self.chunk}, "
            f"{'padding mask, ' if self.padding else ''}position {self._position}; {self.memory}>"
        )


def _same_memory(a, b) -> bool:
    """``a`` is a view of ``b``'s memory (NumPy arrays, or torch tensors of a GPU graph's states)."""
    return np.shares_memory(a, b) if isinstance(a, np.ndarray) else a.data_ptr() == b.data_ptr()


def _like(dst, values: np.ndarray):
    """``values`` as ``dst`` holds them: the array itself, or a tensor on ``dst``'s device."""
    if isinstance(dst, np.ndarray):
        return values
    import torch

    return torch.as_tensor(values, dtype=dst.dtype, device=dst.device)


def _copy(rows):
    """A copy of some cached rows: a NumPy array's, or a torch tensor's on its device (a graph
    compiled for a GPU keeps its cache there)."""
    return rows.copy() if isinstance(rows, np.ndarray) else rows.clone()


def _rows(state: np.ndarray, name: str, positions: range) -> np.ndarray:
    """The view of ``state`` (named ``name``) at cache ``positions`` (a contiguous range): along
    `POSITION_AXIS` for a key or value cache, along the last axis for the padding mask."""
    index = [slice(None)] * state.ndim
    index[-1 if name == MASK_STATE else POSITION_AXIS] = slice(positions.start, positions.stop)
    return state[tuple(index)]
