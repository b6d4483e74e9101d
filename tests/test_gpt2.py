"""GPT-2 from `transformers` end to end: logits match PyTorch (max abs diff <= 1e-4, fp32; logits
of magnitude ~3, observed 7.0e-6 on an AVX2 Zen 3, AMD EPYC znver3).

The models are randomly initialised (seed 0) and in eval mode; the compiled function is the
wrapper ``ids -> model(ids, use_cache=False).logits`` with int64 token ids. Besides numerics,
GPT-2 small (124M) is checked for what the pipeline must do to it: 12 fused `tg.attention` ops,
no unfused softmax or GELU at the tg level, compile() within 15 s, and an arena at most a quarter
of the sum of the intermediate tensor sizes at seq 128.

The 124M model is built once per module, and its seq-128 compilation is shared by the
correctness, structure, compile-time and memory tests (each shape compiles once).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # in the test extra; absent only outside `make test`

import tensor_graphs as tg  # noqa: E402
from conftest import LogitsOnly, op_counts  # noqa: E402
from conftest import check_logits as check_logits_within  # noqa: E402

#: Logits tolerance: max |tg - torch| over all logits (fp32 on both sides; logits |x| <= ~3.2).
#: About 10x the largest observed (7.0e-6, GPT-2 small at seq 1024, on an AVX2 Zen 3, AMD EPYC
#: znver3): other CPUs' GEMM kernels sum in other orders.
MAX_ABS = 1e-4
#: compile() of GPT-2 small at seq 128 (issue 3: "at most 15 s on this machine").
COMPILE_BUDGET_S = 15.0
#: arena bytes / sum of intermediate tensor bytes at seq 128.
ARENA_FRACTION = 0.25


def gpt2(seed: int = 0, **config) -> LogitsOnly:
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config)).eval()
    return LogitsOnly(model).eval()


def token_ids(batch: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq), generator=g, dtype=torch.int64)


def check_logits(model: LogitsOnly, fn, ids: torch.Tensor) -> float:
    return check_logits_within(model, fn, ids, MAX_ABS)


# --------------------------------------------------------------------------- GPT-2 small (124M)


@pytest.fixture(scope="module")
def small():
    """GPT-2 small, random init (seed 0), eval; built once for the module."""
    return gpt2()


@pytest.fixture(scope="module")
def small_seq128(small):
    """GPT-2 small compiled for ids [1, 128], with its compile time (s) and phase stats. A tiny
    GPT-2 is compiled first, untimed: the budget is GPT-2 small's compile, not the process's
    first torch.export and LLVM initialisation (the serial phase of tests/run_sharded.py runs this
    in a fresh process)."""
    tiny = gpt2(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    tg.compile(tiny, (token_ids(1, 8, 64, seed=1),))
    ids = token_ids(1, 128, small.model.config.vocab_size, seed=128)
    stats = tg.CompileStats()
    t0 = time.perf_counter()
    fn = tg.compile(small, (ids,), stats=stats)
    seconds = time.perf_counter() - t0
    phases = ", ".join(f"{k} {v:.2f}s" for k, v in stats.seconds.items())
    print(f"\ncompile GPT-2 small, ids [1, 128]: {seconds:.2f} s ({phases})")
    return fn, ids, seconds, stats


@pytest.mark.parametrize(
    "batch,seq",
    [
        pytest.param(1, 1, id="b1-s1"),
        pytest.param(1, 7, id="b1-s7"),
        pytest.param(1, 1024, id="b1-s1024"),
        pytest.param(4, 32, id="b4-s32"),
    ],
)
def test_gpt2_small_logits_match_pytorch(small, batch, seq):
    ids = token_ids(batch, seq, small.model.config.vocab_size, seed=1000 * batch + seq)
    fn = tg.compile(small, (ids,))
    diff = check_logits(small, fn, ids)
    print(f"\nGPT-2 small ids [{batch}, {seq}]: max abs diff {diff:.2e}")
    # a second call with other tokens reuses the arena and the bound weights
    ids2 = token_ids(batch, seq, small.model.config.vocab_size, seed=7 + seq)
    check_logits(small, fn, ids2)


def test_gpt2_small_logits_match_pytorch_seq128(small, small_seq128):
    fn, ids, _, _ = small_seq128
    diff = check_logits(small, fn, ids)
    print(f"\nGPT-2 small ids [1, 128]: max abs diff {diff:.2e}")
    check_logits(small, fn, token_ids(1, 128, small.model.config.vocab_size, seed=5))
    # NumPy in -> NumPy out gives the same logits
    with torch.no_grad():
        expected = small(ids).numpy()
    got = fn(ids.numpy())
    assert isinstance(got, np.ndarray)
    assert np.abs(got - expected).max() <= MAX_ABS


def test_gpt2_small_tg_level_is_fused(small_seq128):
    """12 blocks -> 12 `tg.attention`; no softmax or GELU left as its own sweep over memory."""
    fn = small_seq128[0]
    tg_ir = fn.ir("tg")
    ops = op_counts(tg_ir)
    summary = ", ".join(f"{k} x{v}" for k, v in sorted(ops.items()))
    assert ops["tg.attention"] == 12, f"expected 12 tg.attention ops, got {ops['tg.attention']}: {summary}"
    assert ops["tg.softmax"] == 0, f"unfused softmax left: {summary}"
    # GPT-2's MLP uses the tanh GELU; once fused it is neither a tg.gelu nor its pieces
    for standalone in ("tg.gelu", "tg.tanh", "tg.pow", "tg.erf"):
        assert ops[standalone] == 0, f"standalone {standalone} left (GELU not fused): {summary}"
    # ... and it went somewhere: a GEMM epilogue or a fused_elementwise body
    assert 'activation = "gelu' in tg_ir or ops["tg.fused_elementwise"] > 0, summary
    assert not any(k.startswith("aten.") for k in ops), f"aten ops left at the tg level: {summary}"


@pytest.mark.serial
def test_gpt2_small_compiles_within_budget(small_seq128):
    _, _, seconds, stats = small_seq128
    print(f"\ncompile() GPT-2 small seq 128: {seconds:.2f} s; phases: {stats.seconds}")
    assert seconds <= COMPILE_BUDGET_S, f"compile() took {seconds:.1f} s > {COMPILE_BUDGET_S} s: {stats.seconds}"


def test_gpt2_small_arena_reuses_memory(small_seq128):
    fn = small_seq128[0]
    arena, total = fn.memory.arena_bytes, fn.memory.intermediate_bytes
    assert f"tg.intermediate_bytes = {total} : i64" in fn.ir("buf")
    mib = 1 << 20
    print(f"\nGPT-2 small seq 128: arena {arena / mib:.1f} MiB, intermediates {total / mib:.1f} MiB "
          f"({arena / total:.3f}); {fn.memory}")
    assert 0 < arena <= ARENA_FRACTION * total, (
        f"arena {arena} bytes > {ARENA_FRACTION} x intermediates {total} bytes"
    )


# --------------------------------------------------------------------------- GPT2Config(n_layer=2)


@pytest.fixture(scope="module")
def two_layer():
    return gpt2(seed=1, n_layer=2)


@pytest.mark.parametrize(
    "batch,seq",
    [
        pytest.param(1, 1, id="b1-s1"),
        pytest.param(1, 17, id="b1-s17"),
        pytest.param(2, 64, id="b2-s64"),
        pytest.param(3, 5, id="b3-s5"),
    ],
)
def test_gpt2_two_layers_logits_match_pytorch(two_layer, batch, seq):
    ids = token_ids(batch, seq, two_layer.model.config.vocab_size, seed=seq)
    fn = tg.compile(two_layer, (ids,))
    check_logits(two_layer, fn, ids)
    ops = op_counts(fn.ir("tg"))
    assert ops["tg.attention"] == 2 and ops["tg.softmax"] == 0, ops


@pytest.mark.parametrize("seq", [1, 12, 40])
def test_gpt2_two_layers_eager_attention_fuses(seq):
    """attn_implementation='eager': matmul -> scale -> additive mask -> softmax -> matmul, by hand."""
    model = gpt2(seed=2, n_layer=2, attn_implementation="eager")
    ids = token_ids(1, seq, model.model.config.vocab_size, seed=seq + 3)
    fn = tg.compile(model, (ids,))
    check_logits(model, fn, ids)
    ops = op_counts(fn.ir("tg"))
    assert ops["tg.attention"] == 2 and ops["tg.softmax"] == 0, ops


def test_gpt2_two_layers_with_small_config_and_gelu_erf():
    """A narrower GPT-2 with the erf GELU ('gelu') and a different eps: config knobs reach the kernels."""
    model = gpt2(seed=3, n_layer=2, n_embd=64, n_head=4, n_positions=96, vocab_size=1000,
                 activation_function="gelu", layer_norm_epsilon=1e-6)
    for batch, seq in ((1, 96), (2, 10)):
        ids = token_ids(batch, seq, 1000, seed=seq)
        fn = tg.compile(model, (ids,))
        check_logits(model, fn, ids)
