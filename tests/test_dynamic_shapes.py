"""One compiled graph for every size in a range (torch.export's ``Dim``): numerics at many sizes
against eager (block boundaries of the GEMM and attention tiles included), the checks of every
call, threads at different sizes, memory (no overlap at any size; ``fn.memory.at``,
``tg.estimate_memory``), the generated code's own range check, and the torch.compile backend
with Dynamo's symbolic sizes.

Tolerances: float32 against eager float32, the same arithmetic in another order; the largest
errors observed are stated beside each check."""

from __future__ import annotations

import random
import threading
import warnings

import pytest
import torch
from torch.export import Dim

import tensor_graphs as tg
from tensor_graphs.diagnostics import parse_module
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.symbolic import symbols_of


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    # a wide layer (packed GEMM + relu), a narrow one (BLAS), GELU, a layer of 8 outputs
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 40), torch.nn.GELU(),
                               torch.nn.Linear(40, 8)).eval()


@pytest.fixture(scope="module")
def mlp():
    model = _mlp()
    fn = tg.compile(model, (torch.randn(4, 64),), dynamic_shapes={"input": {0: Dim("batch", min=1, max=300)}})
    return model, fn


@torch.no_grad()
def test_one_mlp_graph_serves_every_batch_size(mlp):
    model, fn = mlp
    assert [s.name for s in fn.signature.inputs] == ["input"] and fn.signature.symbols == (("batch", 1, 300),)
    for n in (1, 2, 3, 5, 6, 7, 13, 64, 299, 300):  # every tail of the GEMMs' 6- or 4-row tiles
        x = torch.randn(n, 64)
        out = fn(x)
        assert out.shape == (n, 8)
        torch.testing.assert_close(out, model(x), rtol=1e-6, atol=1e-6)  # observed <= 2.4e-7


def test_calls_are_checked_before_anything_runs(mlp):
    _, fn = mlp
    with pytest.raises(ValueError, match=r"input 0 \('input'\) dim 0 has size 301, outside the range of its size symbol "
                       r"batch: \[1, 300\] \(shape \[301, 64\], compiled for float32\[batch, 64\]\)"):
        fn(torch.randn(301, 64))
    with pytest.raises(ValueError, match=r"input 0 \('input'\) has shape \[5, 63\], expected float32\[batch, 64\] "
                       r"\(dim 1 is compiled as 64\)"):
        fn(torch.randn(5, 63))


def test_two_inputs_disagreeing_on_a_symbol_name_both():
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return torch.relu(x + y)

    n = Dim("n", min=1, max=64)
    fn = tg.compile(Add(), (torch.randn(3, 4), torch.randn(3, 4)), dynamic_shapes=({0: n}, {0: n}))
    x = torch.randn(9, 4)
    torch.testing.assert_close(fn(x, x), torch.relu(x + x), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"input 1 \('y'\) dim 0 has size 4, but its size n is 3 with n = 3 \(from input 0 "
                       r"\('x'\) dim 0, range \[1, 64\]\): the inputs disagree on a size symbol"):
        fn(torch.randn(3, 4), torch.randn(4, 4))


def test_the_generated_code_checks_its_sizes_itself(mlp):
    """A caller of the native function that passes a size out of range gets an error status."""
    _, fn = mlp
    slot = fn._slots[0]
    slot.dims[1] = 301
    status = fn._fn(*slot.args)
    assert status and "the size symbol batch (dims[1]) is outside its range [1, 300]" in str(fn.signature.status_error(status))


@torch.no_grad()
def test_threads_calling_one_graph_at_different_sizes_each_get_their_result(mlp):
    model, fn = mlp
    sizes = [1, 300, 7, 150, 64, 2, 299, 33] * 3
    inputs = {n: torch.randn(n, 64) for n in set(sizes)}
    expected = {n: model(x) for n, x in inputs.items()}
    failures: list[str] = []
    barrier = threading.Barrier(4)

    def worker(k: int) -> None:
        barrier.wait()
        for n in sizes[k::4]:
            out = fn(inputs[n])
            if out.shape != (n, 8) or not torch.allclose(out, expected[n], rtol=1e-6, atol=1e-6):
                failures.append(f"size {n}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def _bert_layer(d: int = 64) -> torch.nn.Module:
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    torch.manual_seed(0)
    layer = BertLayer(BertConfig(hidden_size=d, num_attention_heads=4, intermediate_size=2 * d)).eval()

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            out = self.layer(x)
            return out[0] if isinstance(out, tuple) else out

    return Layer().eval()


@pytest.fixture(scope="module")
def bert_layer():
    model = _bert_layer()
    fn = tg.compile(model, (torch.randn(2, 16, 64),), dynamic_shapes={"x": {1: Dim("seq", min=1, max=256)}})
    return model, fn


@torch.no_grad()
def test_a_bert_layer_serves_every_sequence_length(bert_layer):
    model, fn = bert_layer
    for n in (1, 2, 5, 63, 64, 65, 129, 256):  # around the attention's 64-row blocks
        x = torch.randn(2, n, 64)
        out = fn(x)
        assert out.shape == model(x).shape
        torch.testing.assert_close(out, model(x), rtol=1e-6, atol=3e-6)  # observed <= 1.2e-6


def test_no_two_live_buffers_overlap_at_any_size(bert_layer):
    """plan-memory plans at the top of each range; the overlap check holds at both ends of the
    range and at random sizes between (each buffer then uses a prefix of its slot)."""
    _, fn = bert_layer
    module = parse_module(fn.ir("buf"), "bert_layer.buf.mlir")
    (lo, hi), = symbols_of(module).values()
    arenas = [op for op in module.walk() if isinstance(op, buf.ArenaOp)]
    views = [op for op in module.walk() if isinstance(op, buf.ViewOp)]
    assert arenas and any("seq" in str(v.result.type) for v in views)
    rng = random.Random(0)
    for seq in (lo, hi, *(rng.randint(lo, hi) for _ in range(20))):
        for arena in arenas:
            buf.verify_arena_lifetimes(arena, {"seq": seq})
        for v in views:
            assert v.offset.value.data + buf.nbytes(v.result.type, {"seq": seq}) <= arena.size


def test_memory_answers_for_given_sizes_and_estimate_memory_agrees(bert_layer):
    model, fn = bert_layer
    at_16 = fn.memory.at(seq=16)
    assert at_16.io_bytes == 2 * (2 * 16 * 64 * 4) and at_16.arena_bytes == fn.memory.arena_bytes  # input + output
    assert fn.memory.io_bytes == 2 * (2 * 256 * 64 * 4) and "(at seq=16)" in str(at_16)
    with pytest.raises(ValueError, match=r"size symbol seq = 300 is outside its range \[1, 256\]"):
        fn.memory.at(seq=300)
    with pytest.raises(ValueError, match=r"no size symbol 'batch': this graph has seq"):
        fn.memory.at(batch=2)
    estimate = tg.estimate_memory(model, inputs=(torch.randn(2, 16, 64),), dynamic_shapes={"x": {1: Dim("seq", min=1, max=256)}})
    assert (estimate.arena_bytes, estimate.packed_bytes, estimate.at(seq=16).io_bytes) == (
        fn.memory.arena_bytes, fn.memory.packed_bytes, at_16.io_bytes)


@pytest.mark.parametrize("which", ["bert", "gpt2"])
@torch.no_grad()
def test_transformers_models_compile_once_for_every_length(which):
    """Position ids sliced to the length, the masks transformers builds from aranges, indexing
    and concatenations over the symbolic length: all at run time."""
    torch.manual_seed(0)
    if which == "bert":
        from transformers import BertConfig, BertModel

        inner = BertModel(BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2,
                                     vocab_size=500)).eval()
        run = lambda ids: inner(input_ids=ids).last_hidden_state  # noqa: E731
    else:
        from transformers import GPT2Config, GPT2LMHeadModel

        inner = GPT2LMHeadModel(GPT2Config(n_embd=64, n_head=4, n_layer=2, vocab_size=500, n_positions=256)).eval()
        run = lambda ids: inner(input_ids=ids, use_cache=False).logits  # noqa: E731

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return run(ids)

    model = Model().eval()
    fn = tg.compile(model, (torch.randint(0, 500, (1, 16)),), dynamic_shapes={"ids": {1: Dim("seq", min=1, max=256)}})
    for n in (1, 16, 65, 256):
        ids = torch.randint(0, 500, (1, n))
        torch.testing.assert_close(fn(ids), model(ids), rtol=1e-6, atol=3e-6)  # observed <= 1.2e-6


def test_torch_compile_stays_compiled_for_symbolic_sizes(monkeypatch):
    from tensor_graphs.frontend import dynamo_backend

    monkeypatch.setattr(dynamo_backend, "DYNAMIC_MAX", 16)  # small: a call past it compiles once more
    model = _mlp()
    compiled = []
    original = tg.compile

    def counting(*args, **kwargs):
        compiled.append(kwargs.get("dynamic_shapes") is not None)
        return original(*args, **kwargs)

    monkeypatch.setattr(tg, "compile", counting)
    torch._dynamo.reset()
    f = torch.compile(model, backend="tensor_graphs", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", dynamo_backend.EagerFallbackWarning)
        for n in (2, 3, 9, 16, 40, 7):
            x = torch.randn(n, 64)
            torch.testing.assert_close(f(x), model(x), rtol=1e-6, atol=1e-6)  # observed <= 2.4e-7
    assert compiled == [True, True]  # bound 16, then 64 for the call of 40 (and 7 reuses it)
    torch._dynamo.reset()


@pytest.mark.parametrize("k,n", [(64, 256), (300, 100), (768, 3072)])
@torch.no_grad()
def test_a_packed_gemm_at_every_row_count(k, n):
    """Every row count up to 40 and around the blocks: each tail of the register tile, each
    prefetch plan, one pass over K below two row blocks and K blocks above; every 4th count up
    to 200, a tail in the fewest row blocks of each plan of a wider prefetch spread (those of
    7 * 6 + 1 rows and up on AVX-512)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.GELU()).eval()
    fn = tg.compile(model, (torch.randn(64, k),), dynamic_shapes=({0: Dim("rows", min=1, max=512)},))
    assert "packed_matmul" in fn.ir("buf")
    for m in [*range(1, 41), *range(41, 200, 4), 63, 64, 65, 255, 512]:
        x = torch.randn(m, k)
        torch.testing.assert_close(fn(x), model(x), rtol=1e-5, atol=1e-5)  # observed <= 4.3e-6 (K = 768)


class _ConvNet(torch.nn.Module):
    """A ResNet's ops at a small size: a strided 7x7 stem, max pooling, 3x3 and 1x1 convolutions with
    biases, ReLUs and a residual, average pooling and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 7, stride=2, padding=3)
        self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.a = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(16, 32, 1)
        self.skip = torch.nn.Conv2d(16, 32, 1)
        self.avg = torch.nn.AvgPool2d(2)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.stem(x)))
        y = torch.relu(self.b(torch.relu(self.a(x))) + self.skip(x))
        return self.head(self.avg(y).mean((2, 3)))


@torch.no_grad()
def test_convolutions_and_poolings_over_a_dynamic_batch():
    """im2col windows, poolings and the convolutions' packed GEMMs (each image's windows in its
    own panels, one packed GEMM per image by the same weight, counted at run time) serve every
    batch size of one graph."""
    torch.manual_seed(0)
    model = _ConvNet().eval()
    fn = tg.compile(model, (torch.randn(4, 3, 32, 32),), dynamic_shapes=({0: Dim("batch", min=1, max=9)},))
    assert "buf.im2col" in fn.ir("buf") and "memref<?x3x32x32xf32" in fn.ir("buf")
    for n in (1, 2, 5, 9):
        x = torch.randn(n, 3, 32, 32)
        torch.testing.assert_close(fn(x), model(x), rtol=1e-5, atol=1e-5)  # observed <= 1.2e-6


class _WideConvNet(torch.nn.Module):
    """Convolutions wide enough for Winograd (3x3, >= 16 channels) and for an A-stationary GEMM
    (a 1x1 convolution whose 1024 x 512 weight overflows L2), with residuals in their epilogues."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(32, 48, 3, padding=1)
        self.b = torch.nn.Conv2d(48, 32, 3, padding=1)
        self.up = torch.nn.Conv2d(32, 512, 1)
        self.wide = torch.nn.Conv2d(512, 1024, 1)
        self.skip = torch.nn.Conv2d(512, 1024, 1)

    def forward(self, x):
        x = torch.relu(self.b(torch.relu(self.a(x))) + x)
        u = torch.relu(self.up(x))
        return torch.relu(self.wide(u) + self.skip(u))


@pytest.mark.parametrize("dynamic", [True, False])
@torch.no_grad()
def test_winograd_and_wide_convolutions_over_a_batch(dynamic):
    """A batch of images (its size a symbol, or static) through Winograd convolutions (16 GEMMs
    per image by one transformed weight), A-stationary GEMMs over chunks of the images' panels,
    and residuals added in the GEMMs' epilogues: every image as eager computes it."""
    torch.manual_seed(0)
    model = _WideConvNet().eval()
    spec = ({0: Dim("batch", min=1, max=9)},) if dynamic else None
    fn = tg.compile(model, (torch.randn(3, 32, 7, 7),), dynamic_shapes=spec)
    ir = fn.ir("buf")
    assert ir.count("buf.winograd_input") == 2 and "buf.matmul" not in ir
    assert ir.count("buf.packed_matmul") == 5, ir  # 2 Winograd batches, 3 convolutions, the skip's residual fused
    for n in (1, 2, 5, 9) if dynamic else (3,):
        x = torch.randn(n, 32, 7, 7)
        torch.testing.assert_close(fn(x), model(x), rtol=1e-5, atol=1e-5)  # observed <= 2e-6


@pytest.mark.parametrize("dynamic", [True, False])
@torch.no_grad()
def test_a_batch_of_gemms_with_partial_panels_over_k_blocks(dynamic):
    """A strided 3x3 convolution whose 11 x 11 output pixels end in a partial panel on every
    target and whose K (256 x 9) takes several K blocks: each image's whole panels by K blocks,
    its partial one in one pass over K, the bias and ReLU in the epilogue of both."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(256, 64, 3, stride=2, padding=1), torch.nn.ReLU()).eval()
    spec = ({0: Dim("batch", min=1, max=6)},) if dynamic else None
    fn = tg.compile(model, (torch.randn(3, 256, 22, 22),), dynamic_shapes=spec)
    assert "buf.im2col" in fn.ir("buf") and "buf.packed_matmul" in fn.ir("buf")
    for n in (1, 2, 5) if dynamic else (3,):
        x = torch.randn(n, 256, 22, 22)
        torch.testing.assert_close(fn(x), model(x), rtol=1e-5, atol=1e-5)  # observed <= 6e-6 (sums of 2304 products)


def test_a_symbolic_spatial_size_is_refused_at_compile_time():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.MaxPool2d(2)).eval()
    with pytest.raises(ValueError, match=r"aten.conv2d \(float32 \[2, 3, h, 32\].*a convolution's or pooling's input "
                       r"\[2, 3, h, 32\] has a symbolic channel or spatial size: .* only the batch \(dim 0\) may be dynamic"):
        tg.compile(model, (torch.randn(2, 3, 32, 32),), dynamic_shapes=({2: Dim("h", min=8, max=64)},))


@torch.no_grad()
def test_tensors_created_at_a_symbolic_size():
    """``torch.ones(x.shape)``, ``zeros``, ``full`` and ``new_ones`` at a dynamic size: a scalar
    broadcast to it (constant-fold evaluates them only at static sizes)."""

    class Fills(torch.nn.Module):
        def forward(self, x):
            ones = torch.ones(x.shape, dtype=torch.long)
            return x * ones + torch.zeros(x.shape[0], 1) + torch.full((x.shape[0], 3), 2.5) - x.new_ones(x.shape[0], 3)

    model = Fills()
    fn = tg.compile(model, (torch.randn(4, 3),), dynamic_shapes=({0: Dim("n", min=1, max=64)},))
    for n in (1, 5, 64):
        x = torch.randn(n, 3)
        assert torch.equal(fn(x), model(x))  # exact: one multiply by 1, adds of 0 and 2.5 - 1
