"""Compiled graphs and decoders called from several threads, and decoder calls that fail half-way.

* Eight threads calling ONE compiled graph (an MLP, a 2-layer GPT-2), 1,000 calls each, every
  thread its own input (half as NumPy arrays, half as torch tensors), get results identical bit
  for bit to the same graph called from one thread: each overlapping call runs on its own arena
  from the graph's pool (``fn.memory.arenas``), at 1 and at 2 threads per parallel kernel.
* A graph or decoder that holds state (a KV cache) runs one call at a time: a call while one is
  running raises RuntimeError; ``dec.clone()`` gives each thread its own sequence, and clones
  decoding in parallel produce the tokens each produces alone.
* A decoder call that fails (a token id out of range in the third prefill chunk, in a decode
  step, in generate's prompt; a prompt too long) leaves the decoder exactly as it was before the
  call: the same position, the same cache bytes.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extra

import tensor_graphs as tg  # noqa: E402
from conftest import LogitsOnly, mlp  # noqa: E402

THREADS = 8
CALLS = 1000
VOCAB = 120
TINY_GPT2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=None)


def _gpt2():
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY_GPT2)).eval()


def _inputs(kind: str, seed: int):
    rng = np.random.default_rng(seed)
    if kind == "mlp":
        return rng.standard_normal((1, 256)).astype(np.float32)
    return rng.integers(0, VOCAB, (1, 16)).astype(np.int64)


@pytest.fixture(scope="module", params=["mlp", "gpt2"])
def graph(request):
    if request.param == "mlp":
        model = mlp([256, 1024, 1024, 256])
    else:
        model = LogitsOnly(_gpt2())
    example = torch.from_numpy(_inputs(request.param, 0))
    return request.param, tg.compile(model, (example,))


def _run_threads(work, n: int = THREADS) -> list:
    """Run ``work(t)`` on ``n`` threads started together; re-raise the first failure."""
    start = threading.Barrier(n)
    results: list = [None] * n
    errors: list[BaseException] = []

    def body(t: int) -> None:
        start.wait()
        try:
            results[t] = work(t)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("kernel_threads", [1, 2])
def test_threads_calling_one_graph_agree_bit_for_bit(graph, kernel_threads):
    kind, fn = graph
    saved = tg.get_num_threads()
    tg.set_num_threads(kernel_threads)
    try:
        inputs = [_inputs(kind, 100 + t) for t in range(THREADS)]
        expected = [fn(x) for x in inputs]  # one thread

        def work(t: int) -> int:
            x = inputs[t] if t % 2 == 0 else torch.from_numpy(inputs[t])
            mismatches = 0
            for _ in range(CALLS):
                y = fn(x)
                y = y if isinstance(y, np.ndarray) else y.numpy()
                mismatches += not np.array_equal(y, expected[t])
            return mismatches

        assert _run_threads(work) == [0] * THREADS
    finally:
        tg.set_num_threads(saved)
    assert 1 <= fn.memory.arenas <= THREADS
    assert fn.memory.total_bytes >= fn.memory.arena_bytes * fn.memory.arenas


def test_an_error_in_one_thread_leaves_the_others_right():
    """A call that fails (a token id out of range) gives its arena back; the others are unaffected."""
    fn = tg.compile(LogitsOnly(_gpt2()), (torch.zeros((1, 8), dtype=torch.int64),))
    good = _inputs("gpt2", 7)[:, :8]
    bad = good.copy()
    bad[0, 3] = VOCAB + 5
    expected = fn(good)

    def work(t: int) -> tuple[int, int]:
        wrong = raised = 0
        for _ in range(200):
            if t % 2:
                try:
                    fn(bad)
                except IndexError:
                    raised += 1
            else:
                wrong += not np.array_equal(fn(good), expected)
        return wrong, raised

    results = _run_threads(work, 4)
    assert [r[0] for r in results] == [0] * 4
    assert [r[1] for r in results] == [0, 200, 0, 200]


# --------------------------------------------------------------------------- decoders

CHUNK = 16
MAX_SEQ = 60


@pytest.fixture(scope="module")
def decoder():
    return tg.compile_decoder(_gpt2(), max_seq=MAX_SEQ, prefill_chunk=CHUNK)


def _snapshot(dec) -> tuple[int, dict[str, np.ndarray]]:
    """The decoder's position and the cached keys and values of its positions (the cache rows
    past the position hold nothing: a call writes them before any attention reads them)."""
    return dec.position, {name: a[:, :, : dec.position].copy() for name, a in dec.states.items()}


def _assert_unchanged(dec, snapshot) -> None:
    position, states = snapshot
    assert dec.position == position
    for name, a in dec.states.items():
        assert np.array_equal(a[:, :, :position], states[name]), f"state {name} changed"


def _prompt(length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, VOCAB, (1, length)).astype(np.int64)


def test_a_failed_prefill_leaves_the_decoder_as_it_was(decoder):
    decoder.prefill(_prompt(20, 1))
    decoder.decode(np.array([[5]]))
    before = _snapshot(decoder)
    assert before[0] == 21
    prompt = _prompt(40, 2)
    prompt[0, 35] = VOCAB  # in the third chunk: the first two have run (and written the cache)
    with pytest.raises(IndexError):
        decoder.prefill(prompt)
    _assert_unchanged(decoder, before)
    with pytest.raises(IndexError):
        decoder.generate(prompt, 3)
    _assert_unchanged(decoder, before)
    with pytest.raises(IndexError):
        decoder.extend(prompt[:, 5:])  # 35 tokens: the bad one in the second chunk
    _assert_unchanged(decoder, before)
    with pytest.raises(IndexError):
        decoder.decode(np.array([[VOCAB + 1]]))
    _assert_unchanged(decoder, before)
    with pytest.raises(ValueError, match="exceed max_seq"):
        decoder.extend(_prompt(MAX_SEQ, 3))
    _assert_unchanged(decoder, before)
    # and it continues the first sequence as if nothing had happened
    reference = decoder.clone()
    reference.prefill(_prompt(20, 1))
    reference.decode(np.array([[5]]))
    assert np.array_equal(decoder.decode(np.array([[7]])), reference.decode(np.array([[7]])))


def test_a_decoder_runs_one_call_at_a_time(decoder):
    """While a call holds the decoder (another thread's), a second call raises."""
    decoder.prefill(_prompt(5, 4))
    before = _snapshot(decoder)
    assert decoder._busy.acquire(blocking=False)  # what a running call holds
    try:
        for call in (lambda: decoder.decode(np.array([[1]])), lambda: decoder.prefill(_prompt(3, 5)), decoder.reset):
            with pytest.raises(RuntimeError, match="one call at a time.*clone"):
                call()
    finally:
        decoder._busy.release()
    _assert_unchanged(decoder, before)
    graph = decoder.decode_graph
    assert graph._running.acquire(blocking=False)
    try:
        with pytest.raises(RuntimeError, match="one call at a time"):
            graph(np.array([[1]]), np.array([[5]]), np.array([0]), past=5)
    finally:
        graph._running.release()


def test_clones_decode_in_parallel_like_alone(decoder):
    """Each thread its own sequence on a clone: the tokens of each match a run alone."""
    prompts = [_prompt(10 + 7 * t, 10 + t) for t in range(4)]
    alone = [decoder.generate(p, 12) for p in prompts]
    clones = [decoder.clone() for _ in prompts]
    assert all(c.prefill_graph.packed.keys() == decoder.prefill_graph.packed.keys() for c in clones)
    assert all(
        c.prefill_graph.packed[k] is decoder.prefill_graph.packed[k] for c in clones for k in c.prefill_graph.packed
    )  # packed weights shared, not repacked

    def work(t: int) -> bool:
        return all(np.array_equal(clones[t].generate(prompts[t], 12), alone[t]) for _ in range(5))

    assert _run_threads(work, len(prompts)) == [True] * len(prompts)
