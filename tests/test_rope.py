"""RoPE (rotate-half): `fuse-rope` turns the formula into one `tg.rope`, which lowers to
`buf.rope` and one native kernel; results match PyTorch.

* ``x * cos + rotate_half(x) * sin`` written in PyTorch, for several shapes and table
  broadcasts (per-position tables shared by heads and batches, full-shape tables, tables of
  one position): one tg.rope, no concat / neg / slice left, rtol = atol = 1e-5;
* `tg.rope` written directly at the tg level, tables broadcast along the last dim too;
* the kernel's inner loop is vectorised;
* a small Qwen3 (positions folded into constant tables, and positions as a run-time input):
  logits within 1e-4 of PyTorch's, and exactly two tg.rope per layer (q and k).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from conftest import SMALL_QWEN3, op_counts, parse
from tensor_graphs.api import compile_module
from tensor_graphs.transforms.evaluate import evaluate_op

RTOL = ATOL = 1e-5


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """As in transformers' modeling_llama / modeling_qwen3."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Rope(torch.nn.Module):
    def forward(self, x, cos, sin):
        return x * cos + rotate_half(x) * sin


class UnsqueezedRope(torch.nn.Module):
    """transformers' apply_rotary_pos_emb: [B, S, D] tables unsqueezed at the head dim."""

    def forward(self, q, k, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def tables(shape, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(shape, generator=g) * 6.0
    return torch.cos(angle), torch.sin(angle)


ROPE_CASES = {
    # name: (x shape, table shape)
    "heads_share_rows": ((1, 4, 8, 16), (1, 1, 8, 16)),
    "batch_and_heads_share_rows": ((2, 3, 5, 8), (5, 8)),
    "full_shape_tables": ((3, 7, 6), (3, 7, 6)),
    "one_position": ((2, 4, 1, 32), (1, 1, 1, 32)),
    "rank_1": ((10,), (10,)),
    "odd_rows_long_dim": ((1, 2, 3, 128), (1, 1, 3, 128)),
}


@pytest.mark.parametrize("case", ROPE_CASES)
def test_rope_formula_fuses_and_matches_torch(case):
    x_shape, t_shape = ROPE_CASES[case]
    x = torch.randn(x_shape, generator=torch.Generator().manual_seed(1))
    cos, sin = tables(t_shape)
    fn = tg.compile(Rope(), (x, cos, sin))
    ops = op_counts(fn.ir("tg"))
    assert ops["tg.rope"] == 1, fn.ir("tg")
    assert ops["tg.concat"] == ops["tg.neg"] == ops["tg.slice"] == 0, ops
    assert op_counts(fn.ir("buf"))["buf.rope"] == 1
    np.testing.assert_allclose(fn(x, cos, sin).numpy(), Rope()(x, cos, sin).numpy(), rtol=RTOL, atol=ATOL)


def test_unsqueezed_tables_shared_by_q_and_k():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 4, 6, 16, generator=g), torch.randn(2, 2, 6, 16, generator=g)
    cos, sin = tables((2, 6, 16))
    fn = tg.compile(UnsqueezedRope(), (q, k, cos, sin))
    assert op_counts(fn.ir("tg"))["tg.rope"] == 2, fn.ir("tg")
    for got, want in zip(fn(q, k, cos, sin), UnsqueezedRope()(q, k, cos, sin)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)


TG_ROPE = """
func.func @forward(%x: tensor<{x}xf32>, %cos: tensor<{t}xf32>, %sin: tensor<{t}xf32>) -> tensor<{x}xf32> {{
  %y = tg.rope %x, %cos, %sin : (tensor<{x}xf32>, tensor<{t}xf32>, tensor<{t}xf32>) -> tensor<{x}xf32>
  func.return %y : tensor<{x}xf32>
}}
"""


@pytest.mark.parametrize(
    ("x_shape", "t_shape"),
    [
        ((2, 3, 4, 8), (4, 8)),
        ((2, 3, 4, 8), (4, 1)),
        ((4, 6), (1,)),
        ((2, 5, 12), (2, 1, 12)),
        ((1, 16, 65, 128), (65, 128)),  # large: its rows are split among the threads
        ((3, 70, 512), (1, 70, 512)),
    ],
)
def test_tg_rope_kernel_matches_torch_and_evaluator(x_shape, t_shape):
    text = TG_ROPE.format(x="x".join(map(str, x_shape)), t="x".join(map(str, t_shape)))
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    cos, sin = rng.standard_normal(t_shape).astype(np.float32), rng.standard_normal(t_shape).astype(np.float32)
    want = Rope()(*map(torch.from_numpy, (x, cos, sin))).numpy()
    module = parse(text)
    op = next(o for o in module.walk() if o.name == "tg.rope")
    np.testing.assert_allclose(evaluate_op(op, [x, cos, sin]), want, rtol=RTOL, atol=ATOL)
    fn = compile_module(module)
    np.testing.assert_allclose(fn(x, cos, sin), want, rtol=RTOL, atol=ATOL)


TG_ROPE_NORM = """
func.func @forward(%x: tensor<{x}xf32>, %cos: tensor<{t}xf32>, %sin: tensor<{t}xf32>, %w: tensor<{d}xf32>) -> tensor<{x}xf32> {{
  %y = tg.rope %x, %cos, %sin norm %w {{eps = 1.0e-05 : f32}} : (tensor<{x}xf32>, tensor<{t}xf32>, tensor<{t}xf32>, tensor<{d}xf32>) -> tensor<{x}xf32>
  func.return %y : tensor<{x}xf32>
}}
"""


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize(
    ("x_shape", "t_shape"),
    [
        ((2, 3, 4, 8), (4, 8)),
        ((2, 3, 4, 8), (4, 1)),            # tables broadcast along the last dim
        ((1, 65, 16, 128), (65, 1, 128)),  # Qwen3's q: sequence-major, its rows split among the threads
        ((2, 10240), (10240,)),            # a row wider than Triton's row block (4096): looped
    ],
)
def test_rope_with_a_norm_prologue(x_shape, t_shape, device):
    """`tg.rope ... norm %w` (fuse-rms-norm-rope) = rope(rms_norm(x, w)): the evaluator and the
    CPU and Triton (interpreter) kernels against PyTorch, rtol = atol = 1e-5 (the norm's sum of
    squares in float32, in another order)."""
    if device == "cuda":
        pytest.importorskip("triton")
    text = TG_ROPE_NORM.format(x="x".join(map(str, x_shape)), t="x".join(map(str, t_shape)), d=x_shape[-1])
    rng = np.random.default_rng(4)
    x = rng.standard_normal(x_shape).astype(np.float32) * 3
    cos, sin = rng.standard_normal(t_shape).astype(np.float32), rng.standard_normal(t_shape).astype(np.float32)
    w = rng.standard_normal(x_shape[-1]).astype(np.float32)
    tx = torch.from_numpy(x)
    normed = tx * torch.rsqrt(tx.pow(2).mean(-1, keepdim=True) + 1e-5) * torch.from_numpy(w)
    want = Rope()(normed, torch.from_numpy(cos), torch.from_numpy(sin)).numpy()
    module = parse(text)
    op = next(o for o in module.walk() if o.name == "tg.rope")
    np.testing.assert_allclose(evaluate_op(op, [x, cos, sin, w]), want, rtol=RTOL, atol=ATOL)
    fn = compile_module(module, device=device)
    got = fn(x, cos, sin, w)
    got = got.cpu().numpy() if isinstance(got, torch.Tensor) else got
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    if device == "cuda":
        assert "rms_norm_rope" in fn.ir("triton")


def test_rope_kernel_inner_loop_is_vectorised():
    fn = compile_module(parse(TG_ROPE.format(x="1x4x8x64", t="1x1x8x64")))
    assert re.search(r"fmul <\d+ x float>", fn.ir("llvm")), "the rope loop was not vectorised"


# --------------------------------------------------------------------------- Qwen3

transformers = pytest.importorskip("transformers")

QWEN3 = SMALL_QWEN3


class Logits(torch.nn.Module):
    """``ids -> logits``: the rotary tables fold to constants."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids, use_cache=False).logits


class LogitsAtPositions(torch.nn.Module):
    """``(ids, positions) -> logits``: the rotary tables are computed at run time."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, pos):
        mask = torch.ones(ids.shape, dtype=torch.long)
        return self.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=False).logits


@pytest.fixture(scope="module")
def qwen3():
    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**QWEN3)).eval()


def _check_rope_ir(tg_ir: str) -> None:
    ops = op_counts(tg_ir)
    assert ops["tg.rope"] == 2 * QWEN3["num_hidden_layers"], ops
    # q's and k's per-head norms run inside their ropes (fuse-rms-norm-rope): 2 norms a layer left, and the final one
    ropes = [line for line in tg_ir.splitlines() if "tg.rope" in line]
    assert all(" norm %" in line for line in ropes), ropes
    assert ops["tg.rms_norm"] == 2 * QWEN3["num_hidden_layers"] + 1, ops
    assert ops["tg.neg"] == 0 and ops["tg.slice"] == 0, ops
    # the only concat left (run-time positions) builds the tables: cat(freqs, freqs)
    concats = [line for line in tg_ir.splitlines() if "tg.concat" in line]
    assert all(re.search(r"tg\.concat (%\w+), \1 ", line) for line in concats), concats


@pytest.mark.parametrize("seq", [1, 8])
def test_qwen3_constant_tables(qwen3, seq):
    ids = torch.randint(0, QWEN3["vocab_size"], (1, seq), generator=torch.Generator().manual_seed(seq))
    model = Logits(qwen3)
    fn = tg.compile(model, (ids,))
    _check_rope_ir(fn.ir("tg"))
    assert op_counts(fn.ir("tg"))["tg.concat"] == 0
    with torch.no_grad():
        want = model(ids)
    assert (fn(ids) - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("seq", [1, 8])
def test_qwen3_run_time_positions(qwen3, seq):
    ids = torch.randint(0, QWEN3["vocab_size"], (1, seq), generator=torch.Generator().manual_seed(seq))
    pos = torch.arange(seq)[None]
    model = LogitsAtPositions(qwen3)
    fn = tg.compile(model, (ids, pos))
    _check_rope_ir(fn.ir("tg"))
    assert op_counts(fn.ir("tg"))["tg.cos"] == 1
    for p in (pos, pos + 5):  # other positions, same compiled function
        with torch.no_grad():
            want = model(ids, p)
        assert (fn(ids, p) - want).abs().max().item() <= 1e-4
