"""The GPU path (issue 15) under Triton's interpreter: ``tg.compile(model, inputs, device="cuda")``
with ``TRITON_INTERPRET=1`` runs every Triton kernel the lowering emits on the CPU (NumPy
semantics, float32), so each kernel family is checked here against PyTorch without a GPU, at
small shapes: elementwise and movement, reductions and softmax, the norms, embedding, rope,
the GEMM with its epilogue, attention (causal, GQA, additive mask), and 2-layer GPT-2 and
Qwen3 end to end. Tolerance: 1e-5 of the output's largest magnitude (float32 sums in another
order; ``tl.dot`` at IEEE float32, no TF32)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from torch.utils._pytree import tree_flatten
from tensor_graphs.runtime_support.triton_graph import _fp32_precision

pytest.importorskip("triton")

TOL = 1e-5


if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1 (tests/conftest.py sets it before torch is imported)",
                allow_module_level=True)


#: what the tuning records of this run's device are keyed by: the interpreter, or the GPU
DEVICE_RECORDS = "Triton interpreter on " if os.environ.get("TRITON_INTERPRET") == "1" else "(cuda, sm_"


def _check(model, *inputs, tol=TOL):
    model = model.eval()
    fn = tg.compile(model, inputs, device="cuda")
    with torch.no_grad():
        ref = model(*inputs)
    got = fn(*inputs)
    refs, ref_spec = tree_flatten(ref)
    gots, got_spec = tree_flatten(got)
    assert got_spec == ref_spec, "the output structure differs from eager's"
    for g, r in zip(gots, refs):
        g = g.cpu()  # on a GPU the outputs stay there
        assert g.shape == r.shape
        if not r.is_floating_point():  # integers and bools: exact
            assert torch.equal(g, r)
            continue
        assert torch.equal(g.isnan(), r.isnan()), "NaN where eager has none, or none where it has one"
        g, r = g.nan_to_num(0.0), r.nan_to_num(0.0)
        scale = max(r.abs().max().item(), 1.0)
        assert (g - r).abs().max().item() <= tol * scale, (g - r).abs().max().item()
    return fn


class Elementwise(torch.nn.Module):
    def forward(self, x, b):
        y = torch.sigmoid(x) * x + b                      # a fused chain with a broadcast
        z = torch.cat([y.transpose(0, 1)[:, 1:], torch.tanh(y).t()[:, :1]], dim=1)  # transpose, slice, concat
        return torch.exp(-z.abs()) - torch.nn.functional.gelu(z), (x > 0).float() * 2.0


class MathFunctions(torch.nn.Module):
    """Core ATen's elementwise functions lowered as scalar bodies (`codegen/triton/expressions_math.py`)."""

    def forward(self, x, u):
        return (torch.acos(u), torch.asin(u), torch.atan(x), torch.atan2(x, u), torch.tan(u), torch.sinh(x),
                torch.cosh(x), torch.asinh(x), torch.acosh(x.abs() + 1), torch.atanh(u * 0.9), torch.expm1(x),
                torch.log1p(x.abs()), torch.round(x * 3), torch.trunc(x * 3), torch.exp2(x),
                torch.nn.functional.elu(x), torch.div(x, 0.3, rounding_mode="trunc"), torch.isnan(x / x.round()))


def test_math_functions_in_triton():
    """Each within 1e-5 of the output's magnitude, as the rest of this file (Cephes' atanf and
    Kahan's expm1/log1p over tl.exp/tl.log reach ~1e-7)."""
    torch.manual_seed(0)
    _check(MathFunctions(), torch.randn(64) * 2, torch.rand(64) * 1.8 - 0.9)


class MoreReductions(torch.nn.Module):
    """Every reduction kind and the arg reductions (a NaN and ties in the data)."""

    def forward(self, x, i):
        return (x.amin(1), x.prod(0), (x > 1).any(1), (x > -3).all(), x.argmax(1), x.argmin(0), torch.max(x, 1),
                x.var(1), i.amin(0), i.prod(1), i.argmax(1), i.argmin(0), i.sum(1))


def test_reductions_in_triton():
    torch.manual_seed(0)
    x = torch.randn(5, 70)
    x[1, 3] = float("nan")
    x[2, 9] = x[2, 40] = 9.0
    _check(MoreReductions(), x, torch.randint(-3, 4, (5, 70)))


def test_elementwise_and_movement():
    torch.manual_seed(0)
    fn = _check(Elementwise(), torch.randn(6, 9), torch.randn(9))
    assert "@triton.jit" in fn.ir("triton") and "tl.store" in fn.ir("triton")


class Reductions(torch.nn.Module):
    def forward(self, x):
        return (x.sum(dim=(0, 2)), x.mean(dim=-1, keepdim=True), x.amax(dim=1), torch.softmax(x, dim=1),
                torch.log_softmax(x, dim=-1))


def test_reductions_and_softmax():
    torch.manual_seed(0)
    _check(Reductions(), torch.randn(3, 5, 37))


class Norms(torch.nn.Module):
    def __init__(self, d=48):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.w = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return self.ln(x), rms


def test_layer_and_rms_norm():
    torch.manual_seed(0)
    fn = _check(Norms(), torch.randn(2, 7, 48))
    assert "layer_norm" in fn.ir("triton") and "rms_norm" in fn.ir("triton")


def test_a_row_wider_than_one_block_is_looped():
    torch.manual_seed(0)
    fn = _check(Norms(5000), torch.randn(2, 5000))
    assert "range(0, 5000, 4096)" in fn.ir("triton")


class Gemms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(40, 70)
        self.proj = torch.nn.Linear(70, 40)

    def forward(self, x, y):
        h = torch.nn.functional.gelu(self.fc(x), approximate="tanh")   # bias + activation epilogue
        r = self.proj(h) + x                                            # residual
        return r, torch.matmul(y, y.transpose(-1, -2))                 # batched, transposed


@pytest.mark.parametrize("rows", [5, 16])
def test_gemm_with_its_epilogue(rows):
    """Few rows: one Triton kernel (tl.dot, the epilogue fused); 32 rows or more: the vendor
    library's GEMM (torch.matmul, cuBLAS on a GPU) then the epilogue as one Triton sweep, or a
    bias added by the library itself (torch.addmm)."""
    torch.manual_seed(0)
    fn = _check(Gemms(), torch.randn(3, rows, 40), torch.randn(2, 9, 24))
    src = fn.ir("triton")
    assert 'input_precision="ieee"' in src
    assert ("torch.matmul[" in src) == (rows * 3 >= 32) and ("matmul_epilogue" in src) == (rows * 3 >= 32)
    assert ("torch.addmm[" in src) == (rows * 3 >= 32)


class Attention(torch.nn.Module):
    def __init__(self, causal, gqa, masked):
        super().__init__()
        self.causal, self.gqa, self.masked = causal, gqa, masked

    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask if self.masked else None, is_causal=self.causal, enable_gqa=self.gqa)


@pytest.mark.parametrize("causal,gqa,masked", [(False, False, False), (True, False, False), (True, True, False),
                                                (False, True, True)])
def test_attention(causal, gqa, masked):
    torch.manual_seed(0)
    heads_kv = 2 if gqa else 4
    q, k, v = torch.randn(2, 4, 19, 16), torch.randn(2, heads_kv, 19, 16), torch.randn(2, heads_kv, 19, 8)
    mask = torch.randn(2, 1, 19, 19)
    fn = _check(Attention(causal, gqa, masked), q, k, v, mask)
    assert "attention" in fn.ir("triton")


def test_attention_split_over_key_ranges():
    """Few queries over many keys (a decode step at a long context): each query block's keys in
    ranges, partial softmaxes combined (flash-decoding) by default; with a padding-masked query
    (every key masked: 0) and a causal block too."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1024, 16), torch.randn(1, 2, 1024, 8)
    fn = _check(Attention(False, False, False), q, k, v, torch.zeros(1, 1, 1, 1024))
    assert "attention_part" in fn.ir("triton") and "attention_combine" in fn.ir("triton") and "scratch=" in fn.ir("triton")
    assert fn.memory.arena_bytes >= fn._graph.arena_bytes + 4 * 4 * 2 * 1 * (8 + 2)  # the scratch of 4 ranges counted
    _check(Attention(True, True, False), torch.randn(1, 4, 3, 16), k, v, torch.zeros(1, 1, 3, 1024))  # causal, grouped heads
    mask = torch.randn(1, 1, 3, 1024)
    mask[:, :, 1] = float("-inf")
    qq = torch.randn(1, 4, 3, 16)
    got = tg.compile(Attention(False, True, True).eval(), (qq, k, v, mask), device="cuda")
    with torch.no_grad():
        ref = Attention(False, True, True)(qq, k, v, mask)
    out = got(qq, k, v, mask).cpu()
    assert (out[:, :, 1] == 0).all()  # torch gives NaN there; tensor_graphs 0, as on the CPU
    keep = torch.tensor([0, 2])
    assert (out[:, :, keep] - ref[:, :, keep]).abs().max() <= TOL * ref[:, :, keep].abs().max()


@pytest.mark.parametrize("queries,heads,keys,causal,mask_heads", [
    (1, 8, 40, False, 8),     # a decode step: 4 query heads a kv head, a mask per head
    (3, 8, 40, True, 0),      # a few queries (12 packed rows of 16), causal
    (3, 8, 40, False, 1),     # ... a mask broadcast over the heads
    (2, 4, 1024, False, 4),   # packed and split over key ranges (flash-decoding), a mask per head
    (2, 4, 1024, True, 0),    # ... causal
])
def test_attention_packs_a_kv_heads_group(queries, heads, keys, causal, mask_heads):
    """Grouped-query heads whose queries all fit one block: a program per (batch, kv head), its
    rows every query of the group's heads (each row's own head, position and mask row), the kv
    head's keys read once for the group."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, heads, queries, 16), torch.randn(2, 2, keys, 16), torch.randn(2, 2, keys, 8)
    mask = torch.randn(2, max(mask_heads, 1), queries, keys)
    fn = _check(Attention(causal, True, mask_heads > 0), q, k, v, mask)
    text = fn.ir("triton")
    assert f"hq = hk * {heads // 2} + rm // {queries}" in text
    assert ("attention_part" in text) == (keys == 1024)


@pytest.mark.parametrize("keys", [19, 1024])
def test_attention_with_batch_x_heads_on_grid_axis_0(monkeypatch, keys):
    """Batch x heads past CUDA's 65535 programs along grid axis 1 (an encoder's large batch) go
    on axis 0, the query blocks on axis 1: here with the limit lowered to 1, over 2 x 4 heads
    with one key range, and over 2 x 2 kv heads of 3 queries per head packed with their group
    in four ranges (flash-decoding, its combine kernel too)."""
    from tensor_graphs.codegen.triton import kernels_attention

    monkeypatch.setattr(kernels_attention, "MAX_GRID_YZ", 1)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 19 if keys == 19 else 3, 16), torch.randn(2, 2, keys, 16), torch.randn(2, 2, keys, 8)
    fn = _check(Attention(True, True, False), q, k, v, torch.zeros(1))
    text = fn.ir("triton")
    assert "unit = tl.program_id(0)" in text and "pid = tl.program_id(1)" in text
    assert ("attention_combine[(4, 1)]" in text) == (keys == 1024)


class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.e = torch.nn.Embedding(50, 12)

    def forward(self, ids):
        return self.e(ids) * 2.0


def test_embedding_and_its_index_check():
    torch.manual_seed(0)
    model = Embed().eval()
    fn = _check(model, torch.randint(0, 50, (3, 7)))
    bad = torch.randint(0, 50, (3, 7))
    bad[1, 4] = 50
    # the CPU graph's message, from the kernel's flag read once the plan ran
    with pytest.raises(IndexError, match=r"index out of range \[0, 50\): input '.*' holds 50 at \[1, 4\]"):
        fn(bad)
    good = torch.randint(0, 50, (3, 7))  # the flag is cleared: the next call runs
    with torch.no_grad():
        torch.testing.assert_close(fn(good).cpu(), model(good), rtol=0, atol=0)


def _logits(model):
    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(ids).logits

    return Logits()


def test_gpt2_two_layers():
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300,
                                                                  n_positions=64)).eval()
    _check(_logits(model), torch.randint(0, 300, (1, 12)))


def test_qwen3_two_layers():
    """Qwen3: rope, RMS norms, GQA, SiLU-gated MLP."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, intermediate_size=128, vocab_size=300, max_position_embeddings=64)
    model = transformers.Qwen3ForCausalLM(config).eval()
    fn = _check(_logits(model), torch.randint(0, 300, (1, 12)))
    assert "rope" in fn.ir("triton")


def test_numpy_in_numpy_out_and_input_checks():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).eval()
    fn = tg.compile(model, (torch.randn(2, 8),), device="cuda")
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    got = fn(x)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, model(torch.from_numpy(x)).detach().numpy(), atol=1e-6)
    with pytest.raises(ValueError, match=r"input 0 has shape \[3, 8\], expected \[2, 8\]"):
        fn(np.zeros((3, 8), np.float32))
    with pytest.raises(TypeError, match="input 0 has dtype torch.float64, expected torch.float32"):
        fn(np.zeros((2, 8)))


def test_without_a_gpu_cuda_fails_clearly(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(tg.DeviceError, match=r"device='cuda': torch sees no CUDA GPU here .* TRITON_INTERPRET=1"):
        tg.compile(torch.nn.Linear(4, 4), (torch.randn(1, 4),), device="cuda")
    with pytest.raises(tg.DeviceError, match="device must be 'cpu' or 'cuda', got 'tpu'"):
        tg.compile(torch.nn.Linear(4, 4), (torch.randn(1, 4),), device="tpu")


@pytest.mark.parametrize("arch", ["gpt2", "qwen3"])
def test_decoder_on_the_gpu_path(arch):
    """compile_decoder(device="cuda"): the prefill and decode graphs as Triton kernels over one
    KV cache (device tensors shared by both graphs; attention over the first past + n positions,
    `past` a run-time argument of the kernels): greedy tokens and logits as the CPU decoder's."""
    import transformers

    torch.manual_seed(0)
    if arch == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300,
                                                                      n_positions=64)).eval()
    else:
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=300, max_position_embeddings=64)).eval()
    ids = torch.randint(0, 300, (1, 11))
    gpu = tg.compile_decoder(model, max_seq=40, prefill_chunk=8, device="cuda")
    cpu = tg.compile_decoder(model, max_seq=40, prefill_chunk=8)
    a, b = np.asarray(gpu.prefill(ids)), np.asarray(cpu.prefill(ids))
    assert np.abs(a - b).max() <= TOL * np.abs(b).max()
    for t in (3, 7, 11, 250):
        a, b = np.asarray(gpu.decode(torch.tensor([[t]]))), np.asarray(cpu.decode(torch.tensor([[t]])))
        assert np.abs(a - b).max() <= TOL * np.abs(b).max()
    assert gpu.position == cpu.position == 15
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=6, do_sample=False)
    gpu.reset()
    assert torch.equal(torch.as_tensor(gpu.generate(ids, max_new_tokens=6)), ref)


def _rounded(weight: torch.Tensor, fmt: str) -> torch.Tensor:
    """``weight`` ([N, K], nn.Linear's) as the GPU's copy in ``fmt`` holds it, back in float32."""
    if fmt == "bf16":
        return weight.to(torch.bfloat16).float()
    peak = weight.abs().amax(dim=1, keepdim=True)
    scale = torch.where(peak > 0, peak / 127.0, torch.ones_like(peak))
    return torch.clamp(torch.round(weight / scale), -127, 127) * scale


@pytest.mark.parametrize("fmt, error", [("bf16", 1e-2), ("int8", 3e-2)])
def test_weight_formats_for_the_decode_step_on_the_gpu_path(fmt, error):
    """compile_decoder(device="cuda", weight_format=...): the matrix-vector products (the decode
    step's GEMMs, the prefill's LM head over the last token) read bfloat16 or int8 (a scale per
    output column) copies of their weights, made once on the device: the logits within 1e-5 of
    the float32 decoder of the model with those weights rounded so (the same products, float32
    sums), within ``error`` of the model's own; the prefill's chunk GEMMs stay float32; the
    copies are in the memory report."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen3Config(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, intermediate_size=128, vocab_size=300, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    model = transformers.Qwen3ForCausalLM(config).eval()
    rounded = transformers.Qwen3ForCausalLM(config).eval()
    rounded.load_state_dict(model.state_dict())
    with torch.no_grad():
        for m in rounded.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.copy_(_rounded(m.weight, fmt))
    ids = torch.randint(0, 300, (1, 3))  # a prefill of several one-token steps (each a few seconds interpreted)
    kw = dict(max_seq=32, prefill_chunk=1, device="cuda")  # every step a matrix-vector product
    low, same = tg.compile_decoder(model, weight_format=fmt, **kw), tg.compile_decoder(rounded, **kw)
    seq = ids
    for token in (None, 3, 250):
        if token is not None:
            seq = torch.cat([seq, torch.tensor([[token]])], dim=1)
        a, b = (np.asarray(d.prefill(ids) if token is None else d.decode(torch.tensor([[token]]))) for d in (low, same))
        with torch.no_grad():
            c = model(seq).logits[:, -1].numpy()
        assert np.abs(a - b).max() <= TOL * np.abs(b).max() and np.abs(a - c).max() <= error * np.abs(c).max()
    plan = low.decode_graph.ir("triton")
    assert plan.count(f"_gemv_{fmt}[") == 8 and ".to(tl.float32)" in plan  # 7 in the layer and the LM head
    assert low.memory.weight_bytes > same.memory.weight_bytes
    chunked = tg.compile_decoder(model, weight_format=fmt, max_seq=32, prefill_chunk=8, device="cuda")
    assert chunked.prefill_graph.ir("triton").count(f"_gemv_{fmt}[") == 1  # the chunk's GEMMs stay float32


def test_a_batch_of_left_padded_prompts_on_the_gpu_path():
    """batch 2, prompts of different lengths left-padded: the key-padding mask is a state on the
    device (written by the decoder between calls, read by the attention kernel); greedy tokens
    as transformers' generate with the attention mask."""
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300,
                                                                  n_positions=64)).eval()
    ids = torch.randint(1, 300, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, :4] = 0
    ids[1, :4] = 0
    dec = tg.compile_decoder(model, max_seq=32, batch=2, prefill_chunk=8, device="cuda")
    assert dec.states["kv.mask"].device.type in ("cpu", "cuda")
    mem = dec.memory
    assert mem.state_bytes == sum(t.numel() * t.element_size() for t in dec.states.values())
    assert mem.arena_bytes > 0 and mem.weight_bytes > 0 and mem.output_bytes == 2 * 2 * 300 * 4  # two graphs' [2, V] logits
    assert "CompiledDecoder" in repr(dec)
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(torch.as_tensor(dec.generate(ids, max_new_tokens=5, attention_mask=mask)), ref)


def test_gpu_decoder_tuned_and_options_not_there_yet_refused(tmp_path):
    """compile_decoder(device="cuda", tune=...): each graph's GPU variants from the database
    (here: a second or so of measuring, the rest left to the heuristic), the weights on the device
    once for all the graphs (the heuristic twins included), greedy tokens as transformers'."""
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=16))
    dec = tg.compile_decoder(model.eval(), max_seq=16, prefill_chunk=4, device="cuda", tune="missing", tolerance=1e-2,
                             tuning_db=tmp_path / "t.db", max_tuning_seconds=0.5)
    reports = [g.tuning for g in (dec.prefill_graph, dec.decode_graph)]
    assert all(r is not None and r.measured >= 1 and DEVICE_RECORDS in r.machine for r in reports)
    assert "kernel paths (tune='missing'" in dec.explain()
    assert dec.prefill_graph._graph.weights is dec.decode_graph._graph.weights  # one device copy of each weight
    ids = torch.randint(0, 50, (1, 5))
    with torch.no_grad():
        assert torch.equal(torch.as_tensor(dec.generate(ids, max_new_tokens=4)), model.generate(ids, max_new_tokens=4, do_sample=False))
    with pytest.raises(ValueError, match=r"weight_format='bf16dot' is not on the GPU path \(there: 'bf16', 'int8'"):
        tg.compile_decoder(model, max_seq=16, weight_format="bf16dot", device="cuda")


def test_profile_times_each_op_of_a_gpu_graph():
    """fn.profile on the GPU path: every buf op with launches timed (events on a GPU, the host
    clock under the interpreter), labelled as on the CPU with its kernels, by kind; the
    decoder's graphs too (``past=``)."""
    import transformers

    torch.manual_seed(0)
    model = Reductions().eval()
    x = torch.randn(3, 5, 7)
    fn = tg.compile(model, (x,), device="cuda", profile=True)
    report = fn.profile(x, repeat=3)
    assert report.runs == 3 and fn.profiled
    assert len(report.kernels) == len(fn._graph.labels) and all(k.calls == 3 for k in report.kernels)
    assert {"reduce", "softmax"} <= set(report.by_kind()) and "[k" in report.kernels[0].label
    assert 0 < report.measured_ns <= report.wall_ns and "profile of @" in str(report)
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        fn.profile(x, repeat=0)

    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=16))
    dec = tg.compile_decoder(lm.eval(), max_seq=16, prefill_chunk=4, device="cuda", profile=True)
    step = dec.decode_graph
    inputs = [torch.zeros_like(t) for t in step._graph.inputs]  # token ids, positions...: zeros do
    with pytest.raises(TypeError, match="pass past="):
        step.profile(*inputs)
    kinds = step.profile(*inputs, repeat=2, past=3).by_kind()
    assert {"attention", "matmul", "embedding"} <= set(kinds)


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 96), torch.nn.Linear(96, 32)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_autograd_and_inference_mode_do_not_reach_the_graph(monkeypatch):
    """An input that requires grad is read as data (cuBLAS's ``out=`` calls take no autograd; the
    slot it is copied into must not start requiring grad, breaking every later call), and a
    graph compiled under ``torch.inference_mode()`` is called outside it (its tensors are not
    inference tensors). The library GEMM runs at IEEE float32 whatever the process set
    (``set_float32_matmul_precision("high")`` would make it TF32 behind its name), torch's
    setting restored after; `matmul.library_tf32`'s at TF32."""
    torch.manual_seed(0)
    model = TwoLayers().eval()
    x = torch.randn(40, 64)  # 40 rows: cuBLAS (`matmul.library`)
    with torch.inference_mode():
        fn = tg.compile(model, (x,), device="cuda")
    with torch.no_grad():
        ref = model(x)
    assert "torch.addmm" in fn.ir("triton")
    leaf = x.clone().requires_grad_()
    with torch.no_grad():
        ref2 = model(2.0 * x)
    # a leaf that requires grad, a plain tensor, a tensor with a grad_fn
    for arg, want in ((leaf, ref), (x, ref), (leaf * 2.0, ref2)):
        got = fn(arg).cpu()
        assert not got.requires_grad
        assert (got - want).abs().max().item() <= TOL * max(want.abs().max().item(), 1.0)
    seen = []
    real = torch.addmm
    monkeypatch.setattr(torch, "addmm", lambda *a, **k: (seen.append(torch.backends.cuda.matmul.fp32_precision), real(*a, **k))[1])
    torch.set_float32_matmul_precision("high")
    try:
        before = torch.backends.cuda.matmul.fp32_precision
        # a graph called for the first times under "high": on a GPU the first call runs the
        # launches, the second captures them as a CUDA graph (cuBLAS chooses its kernel then:
        # a replay calls no Python) and replays; the third replays. Every one IEEE: within TOL
        # of the float32 reference (TF32 would be ~1e-3 off).
        fresh = tg.compile(model, (x,), device="cuda")
        for _ in range(3):
            got = fresh(x).cpu()
            assert (got - ref).abs().max().item() <= TOL * max(ref.abs().max().item(), 1.0)
        assert seen and set(seen) == {"ieee"}
        assert torch.backends.cuda.matmul.fp32_precision == before
        with _fp32_precision(True):  # what `matmul.library_tf32`'s calls run in
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert torch.backends.cuda.matmul.fp32_precision == before
    finally:
        torch.set_float32_matmul_precision("highest")


def test_library_precision_from_several_threads():
    """Threads running `matmul.library` and `matmul.library_tf32` calls at once take turns with
    torch's process-wide precision setting: each call sees its own, and the setting is the
    program's again after."""
    import threading
    import time

    before = torch.backends.cuda.matmul.fp32_precision
    wrong = []

    def work(tf32: bool) -> None:
        for _ in range(100):
            with _fp32_precision(tf32):
                time.sleep(0.0002)  # a GEMM queued (the GIL released)
                if torch.backends.cuda.matmul.fp32_precision != ("tf32" if tf32 else "ieee"):
                    wrong.append(tf32)

    threads = [threading.Thread(target=work, args=(t,)) for t in (True, False, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and torch.backends.cuda.matmul.fp32_precision == before


def test_tune_chooses_gpu_variants_measured_on_the_device(tmp_path, monkeypatch):
    """tune= on the GPU path: each GEMM's GPU variants (cuBLAS or tl.dot, IEEE or TF32, the gemv
    for a few rows) measured alone on the device, recorded for it (here Triton's interpreter,
    whose records never mix with a GPU's), the fastest within the tolerance pinned
    (tg.gpu_kernel) and the whole graph checked; tune="cached" measures nothing again. One timed
    run per candidate under the interpreter (its times say nothing of a GPU's: what is checked
    here is that every candidate is built, run, recorded with its error and chosen from)."""
    from tensor_graphs.tuning import measure

    monkeypatch.setattr(measure, "INTERPRETED_RUNS", 1)
    torch.manual_seed(0)
    model = TwoLayers().eval()
    db = tmp_path / "tuning.db"
    for rows, variants in ((40, {"matmul.library", "matmul.library_tf32", "matmul.dot", "matmul.dot_tf32"}),
                           (2, {"matmul.library", "matmul.library_tf32", "matmul.dot", "matmul.dot_tf32", "matmul.gemv",
                                "matmul.gemv_bf16", "matmul.gemv_int8"})):
        x = torch.randn(rows, 64)
        fn = tg.compile(model, (x,), device="cuda", tune="missing", tolerance=1e-2, tuning_db=db)
        with torch.no_grad():
            assert (fn(x).cpu() - model(x)).abs().max() <= 1e-2 * model(x).abs().max()
        report = fn.tuning
        assert DEVICE_RECORDS in report.machine and report.measured == sum(len(c.paths) for c in report.choices)
        assert len(report.choices) == 2 and all({p.candidate.variant for p in c.paths} == variants for c in report.choices)
        if rows == 2:  # the gemv's columns per program are a parameter: the default (8 here) and the others
            assert {str(p.candidate) for p in report.choices[0].paths} >= {"matmul.gemv", "matmul.gemv block_n=16",
                                                                           "matmul.gemv block_n=64"}
        assert all(c.reason.startswith("fastest measured within the tolerance") for c in report.choices)
        assert "matmul." in fn.explain()
        again = tg.compile(model, (x,), device="cuda", tune="cached", tolerance=1e-2, tuning_db=db)
        assert again.tuning.measured == 0 and [c.chosen for c in again.tuning.choices] == [c.chosen for c in report.choices]
    # attention's variants and their blocks and warps: every one built, run and within 1e-5 (TF32's
    # within 1e-2 on a GPU; the interpreter's dots are float32 whatever the precision asked)
    q, k, v, mask = torch.randn(1, 2, 9, 16), torch.randn(1, 1, 9, 16), torch.randn(1, 1, 9, 8), torch.randn(1, 1, 9, 9)
    fn = tg.compile(Attention(True, True, False).eval(), (q, k, v, mask), device="cuda", tune="missing", tuning_db=db)
    (choice,) = fn.tuning.choices
    params = {name for p in choice.paths for name in p.candidate.params}
    assert params == {"block_m", "block_n", "warps", "splits"} and all(p.failed is None for p in choice.paths)
    assert all(p.record.max_rel_err <= (1e-2 if p.candidate.variant.endswith("tf32") else TOL) for p in choice.paths)
    # nothing within a tolerance of 0: the heuristic's variants, as without tuning
    strict = tg.compile(model, (x,), device="cuda", tune="cached", tolerance=0.0, tuning_db=db)
    assert all(not c.tuned for c in strict.tuning.choices) and "tg.gpu_kernel" not in strict.ir("buf")
    assert "compiled without tune=" in tg.compile(model, (x,), device="cuda").explain()


def test_library_attention_is_measured_where_torchs_sdpa_means_the_same(tmp_path):
    """``attention.library`` (PyTorch's SDPA, `codegen.triton.paths`) is one of the candidates
    tune= measures for an attention without a mask or KV cache (grouped heads, causal over as
    many keys as queries), within 1e-5 like the others; with a mask, a KV cache or causal over
    more keys than queries it is rejected, saying why."""
    from xdsl.parser import Parser

    from tensor_graphs.context import make_context as _context
    from tensor_graphs.tuning.paths import gpu_kernel_paths

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    fn = tg.compile(Attention(True, True, False).eval(), (q, k, v, torch.zeros(1)), device="cuda", tune="missing",
                    tuning_db=tmp_path / "tuning.db")
    (choice,) = fn.tuning.choices
    (library,) = [p for p in choice.paths if p.candidate.variant == "attention.library"]
    assert library.failed is None and library.record.max_rel_err <= TOL
    with torch.no_grad():
        ref = Attention(True, True, False)(q, k, v, None)
    assert (fn(q, k, v, torch.zeros(1)).cpu() - ref).abs().max() <= TOL * ref.abs().max()

    def rejected(text: str) -> str:
        (paths,) = gpu_kernel_paths(Parser(_context(), text).parse_module())
        assert "attention.library" not in paths.applicable
        return dict(paths.rejected)["attention.library"]

    masked = tg.compile(Attention(False, True, True).eval(), (q, k, v, torch.randn(1, 1, 8, 8)), device="cuda")
    assert "an additive mask" in rejected(masked.ir("tg"))
    # (torch's causal over more keys, top-left, comes in as a mask; tg's own is bottom-right)
    one = """builtin.module {
  func.func @f(%q: tensor<1x4x1x16xf32>, %k: tensor<1x2x40x16xf32>) -> tensor<1x4x1x16xf32> {
    %o = tg.attention %q, %k, %k {scale = 0.25 : f32, FLAG = true} : (tensor<1x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>) -> tensor<1x4x1x16xf32>
    func.return %o : tensor<1x4x1x16xf32>
  }
}"""
    assert "causal with 40 keys against 1 query" in rejected(one.replace("FLAG", "causal"))
    assert "a KV cache" in rejected(one.replace("FLAG", "kv_cache"))


class Powers(torch.nn.Module):
    def forward(self, x, e):
        return torch.pow(x, 2.0) + torch.pow(x, 3.0), torch.pow(x.abs() + 0.5, e), torch.pow(x, e)


def test_pow_follows_the_sign_rules():
    """pow as C's: negative bases with odd/even integer exponents, NaN for fractional ones."""
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    x[0, 0] = 0.0
    e = torch.tensor([2.0, 3.0, 0.5, -1.0, 0.0])
    fn = tg.compile(Powers().eval(), (x, e), device="cuda")
    for g, r in zip(fn(x, e), Powers()(x, e)):
        g = g.cpu()
        assert torch.equal(torch.isnan(g), torch.isnan(r))
        ok = ~torch.isnan(r)
        assert torch.allclose(g[ok], r[ok], rtol=1e-5, atol=1e-6)


class WideRows(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1), torch.log_softmax(x, dim=-1), x.amax(dim=-1)


def test_a_masked_chunk_and_nans_in_rows():
    """A softmax row whose first 4096-wide chunk is all -inf (a mask over a large vocabulary)
    stays finite; a NaN in a row makes its max NaN, as PyTorch's."""
    torch.manual_seed(0)
    x = torch.randn(3, 5000)
    x[0, :4096] = float("-inf")
    x[2, 17] = float("nan")
    fn = tg.compile(WideRows().eval(), (x,), device="cuda")
    for g, r in zip(fn(x), WideRows()(x)):
        g = g.cpu()
        assert torch.equal(torch.isnan(g), torch.isnan(r)) and torch.equal(torch.isinf(g), torch.isinf(r))
        ok = torch.isfinite(r)
        assert torch.allclose(g[ok], r[ok], rtol=1e-5, atol=1e-6)


class Gemv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(200, 70)
        self.w = torch.nn.Parameter(torch.randn(70, 45) * 0.1)   # a [K, N] weight (transformers' Conv1D)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return h @ self.w + h[..., :45]


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_matrix_vector_products(rows):
    """A decode step's GEMMs (at most 4 rows): one gemv kernel per GEMM, a weight tile per K
    step for every row, with the bias, activation and residual; up to 2 rows each row's products
    kept in a tile and summed over K after the loop, more rows summed at every step."""
    from tensor_graphs.codegen.triton.paths import GEMV_DEFERRED_MAX_ROWS

    torch.manual_seed(0)
    fn = _check(Gemv(), torch.randn(1, rows, 200))
    src = fn.ir("triton")
    assert src.count("_gemv[") == 2 and "tl.dot(" not in src
    deferred = rows <= GEMV_DEFERRED_MAX_ROWS
    assert ("acc0 = tl.sum(acc0, 0)" in src) == deferred and ("acc0 += tl.sum(" in src) == (not deferred)


class ConvNet(torch.nn.Module):
    """Convolutions (strided, padded, dilated, a 1x1), batch norm folded, pooling, a residual."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=2, dilation=2)
        self.c3 = torch.nn.Conv2d(8, 8, 1)
        self.pool = torch.nn.MaxPool2d(2)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        z = self.c2(y)
        return self.pool(torch.relu(self.c3(z) + z)), torch.nn.functional.avg_pool2d(y, 2)


def test_convolutions_and_pooling():
    """A vision model's ops: im2col windows (padding, stride, dilation), GEMMs, pooling."""
    torch.manual_seed(0)
    model = ConvNet().eval()
    model.bn.running_mean.uniform_(-0.5, 0.5)
    model.bn.running_var.uniform_(0.5, 1.5)
    fn = _check(model, torch.randn(2, 3, 12, 10))
    assert "im2col" in fn.ir("triton")


def test_diffusion_unet():
    """diffusers' UNet2DModel (the zoo's tiny one): time embedding, group norms, convolutions,
    resampling, attention blocks, skip connections, all on the Triton path."""
    from test_zoo import _unet

    torch.manual_seed(0)
    fn = _check(_unet().eval(), torch.randn(1, 3, 16, 16), torch.tensor([10]))
    assert "im2col" in fn.ir("triton") and "attention" in fn.ir("triton")


class _BFloat16AtRunTime(torch.nn.Module):
    def forward(self, x):
        y = x.to(torch.bfloat16)
        return y.float().sum(-1, keepdim=True) * y.float()  # the bf16 value a buffer (two readers, one a reduction)


def test_a_bfloat16_buffer_at_run_time_is_refused_saying_so():
    """The GPU path binds no bf16 buffers: a model computing in bfloat16 itself is refused with the
    reason (it said "bf16 constants are not supported", about no constant)."""
    with pytest.raises(TypeError, match="a bfloat16 buffer at run time: the model computes in bfloat16 itself"):
        tg.compile(_BFloat16AtRunTime().eval(), (torch.randn(4, 8),), device="cuda")


class _OtherDtypes(torch.nn.Module):
    def forward(self, x, i, h):
        return (x.sum(-1, keepdim=True) * x + 1).exp(), i * 3 + 1, i > 2, (h.float().sum(-1, keepdim=True) * h) + 1


def test_float64_float16_and_integer_models_run():
    """Buffers of other dtypes than float32 bind on the GPU path (float16 ops compute in float32
    and round, as on the CPU): float64 to 1e-12 (2.3e-13 observed), integers and bools exactly,
    float16 to one half-precision ulp of the values (observed exact)."""
    torch.manual_seed(0)
    x, h = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8).half()
    i = torch.randint(0, 5, (4, 8), dtype=torch.int32)
    fn = _check(_OtherDtypes(), x, i, torch.zeros_like(h), tol=1e-12)
    got, want = fn(x, i, h)[3].cpu().float(), _OtherDtypes()(x, i, h)[3].float()
    assert (got - want).abs().max().item() <= 2**-10 * want.abs().max().item()
