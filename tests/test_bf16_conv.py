"""Convolutions in bf16 (`matmul.packed_rhs_bf16`; a 3x3 at stride 1, `tg.winograd_conv`, by its
direct path in bf16, `winograd_conv.direct_bf16`): the weight as bf16 rows packed at load time
(`packing.Bf16RowsLayout`, K padded to even), the windows written by `buf.im2col` straight into
panels of bf16 pairs along K (each value rounded to bf16 as it is moved), float32 sums on AMX
tiles, AVX512-BF16 dot products or their emulation with FMAs, the float32 epilogue.

Each engine must compute the convolution of the rounded operands: checked against PyTorch's in
float64 over the bf16-rounded input and weight at 2e-6 of the output's magnitude (float32 sums:
observed <= 1e-7), and against float32 eager within what the roundings give (1e-2 of the
magnitude; observed 2-4e-3). The emulation runs on every CPU with AVX2 or more; the native engines
where the CPU has them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.context import Context

import tensor_graphs as tg
from pinned_gemms import pinned_graph
from tensor_graphs.dialects.packing import from_bf16, to_bf16
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target
from tensor_graphs.tuning.paths import kernel_paths

#: engine -> the target it is compiled for (None: this CPU's ISA level, bf16 dot products emulated)
ENGINES = {"emulated": None, "avx512bf16": "cooperlake", "amx": "sapphirerapids"}


def _runnable(engine: str) -> str:
    target = ENGINES[engine]
    if target is None:
        level = Target.host().level
        if Target.named(level).vector_bits < 256:
            pytest.skip(f"the bf16 GEMMs' emulation is tested on AVX2 and up; this CPU's level is {level}")
        return level
    missing = Target.named(target).missing_on_host()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(missing)}: the {engine} engine is checked by its emulation")
    return target


def _compiled(model: torch.nn.Module, x: torch.Tensor, engine: str, monkeypatch, dynamic_shapes=None,
              pinned: tuple[str, str] = ("tg.matmul", "matmul.packed_rhs_bf16")):
    """``model`` with every convolution's GEMM pinned to matmul.packed_rhs_bf16 (``pinned``: an op
    and its variant) for the engine's target (the emulating target is told it has AVX512-BF16, so
    that the variant is offered)."""
    target = _runnable(engine)
    emulated = frozenset({"avx512bf16"}) if ENGINES[engine] is None else frozenset()
    graph = pinned_graph(model, (x,), target, pinned[1], monkeypatch, emulated=emulated, dynamic_shapes=dynamic_shapes,
                         op=pinned[0])
    fn = tg.compile_module(graph.module, graph.weights, target=target)
    buffers = fn.ir("buf")
    assert "bf16rows" in buffers  # the weight's rows, the windows' panels:
    assert any("buf.im2col" in line and "bf16" in line.split("outs(")[1] for line in buffers.splitlines() if "outs(" in line)
    return fn


def _expected(conv: torch.nn.Conv2d, x: torch.Tensor) -> np.ndarray:
    """The convolution of the bf16-rounded input and weight in float64, bias and ReLU after."""
    xr = torch.from_numpy(from_bf16(to_bf16(x.numpy()))).double()
    wr = torch.from_numpy(from_bf16(to_bf16(conv.weight.detach().numpy()))).double()
    y = torch.nn.functional.conv2d(xr, wr, conv.bias.detach().double(), conv.stride, conv.padding, conv.dilation)
    return torch.relu(y).numpy()


def _check(got: np.ndarray, model: torch.nn.Sequential, x: torch.Tensor) -> None:
    expected = _expected(model[0], x)
    assert np.abs(got - expected).max() <= 2e-6 * np.abs(expected).max()
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()


# (images, channels, size, out channels, kernel, stride, padding): an odd K (3 x 3 x 3 = 27: a zero
# row pads it), two images (a batch of GEMMs sharing the weight), a 1x1 window (the input rows
# packed as they are), a stride of 2, K = 32 and 288 (AMX's multiples of 32; strided: a 3x3 at stride 1
# would be a Winograd convolution), partial panels; an odd C whose last channel is alone in its
# pair of channels (`_im2col_pairs`): 1x1 (its rows the input's, two images), 2x2 (an even T)
SHAPES = [(1, 3, 12, 20, 3, 1, 1), (2, 3, 12, 20, 3, 1, 1), (1, 16, 9, 70, 1, 1, 0), (2, 8, 11, 33, 3, 2, 1),
          (1, 32, 8, 64, 1, 1, 0), (1, 32, 9, 40, 3, 2, 1), (2, 5, 7, 24, 1, 1, 0), (1, 3, 9, 16, 2, 1, 0)]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_bf16_conv_computes_the_rounded_convolution(engine, shape, monkeypatch):
    n, c, h, cout, k, stride, pad = shape
    torch.manual_seed(sum(shape))
    model = torch.nn.Sequential(torch.nn.Conv2d(c, cout, k, stride, pad), torch.nn.ReLU()).eval()
    x = torch.randn(n, c, h, h)
    fn = _compiled(model, x, engine, monkeypatch)
    _check(fn(x.numpy()), model, x)


#: 3x3 convolutions at stride 1 are `tg.winograd_conv` (`winograd-convolution`); their direct path in
#: bf16: (images, channels, size, out channels): K = 9 x 32 (AMX's multiples of 32), an odd K (153)
#: over two images (a batch of GEMMs), a partial panel
WINOGRAD_SHAPES = [(1, 32, 10, 64), (2, 17, 9, 20), (1, 64, 13, 40)]
DIRECT_BF16 = ("tg.winograd_conv", "winograd_conv.direct_bf16")


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("shape", WINOGRAD_SHAPES, ids=[str(s) for s in WINOGRAD_SHAPES])
def test_bf16_direct_conv_computes_the_rounded_convolution(engine, shape, monkeypatch):
    n, c, h, cout = shape
    torch.manual_seed(sum(shape))
    model = torch.nn.Sequential(torch.nn.Conv2d(c, cout, 3, 1, 1), torch.nn.ReLU()).eval()
    x = torch.randn(n, c, h, h)
    fn = _compiled(model, x, engine, monkeypatch, pinned=DIRECT_BF16)
    _check(fn(x.numpy()), model, x)


def test_bf16_direct_conv_over_a_run_time_batch(monkeypatch):
    """The direct path in bf16 of one graph for 1 to 3 images (a size symbol)."""
    torch.manual_seed(9)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, 1, 1), torch.nn.ReLU()).eval()
    batch = torch.export.Dim("batch", min=1, max=3)
    fn = _compiled(model, torch.randn(2, 16, 8, 8), "emulated", monkeypatch, dynamic_shapes=({0: batch},), pinned=DIRECT_BF16)
    for n in (1, 3):
        x = torch.randn(n, 16, 8, 8)
        _check(fn(x.numpy()), model, x)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_bf16_conv_over_a_run_time_batch(engine, monkeypatch):
    """One graph for 1 to 4 images (a size symbol): each call's images packed and multiplied (on
    AMX: the batch's items counted at run time)."""
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Conv2d(5, 24, 3, 1, 1), torch.nn.ReLU()).eval()
    batch = torch.export.Dim("batch", min=1, max=4)
    fn = _compiled(model, torch.randn(2, 5, 10, 10), engine, monkeypatch, dynamic_shapes=({0: batch},))
    for n in (1, 3, 4):
        x = torch.randn(n, 5, 10, 10)
        _check(fn(x.numpy()), model, x)


def test_bf16_conv_is_offered_where_the_target_has_bf16():
    """A path for the tuner (never the heuristic's choice) on a target with AVX512-BF16 or AMX,
    refused with the reason elsewhere."""
    from tensor_graphs.target import record

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3)).eval()
    for target, offered in (("sapphirerapids", True), ("znver4", True), ("x86-64-v4", False), ("haswell", False)):
        graph = import_model(model, (torch.randn(1, 3, 9, 9),))
        build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
        record(graph.module, Target.named(target))
        (gemm,) = [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"]
        assert ("matmul.packed_rhs_bf16" in gemm.applicable) == offered and gemm.applicable[0] != "matmul.packed_rhs_bf16"
        if not offered:
            assert dict(gemm.rejected)["matmul.packed_rhs_bf16"] == f"the target ({target}) has no bf16 dot products (AVX512-BF16)"


def test_bf16_direct_conv_is_offered_where_the_target_has_bf16():
    """A 3x3 convolution at stride 1 (`tg.winograd_conv`): its bf16 direct path is the tuner's, never
    the heuristic's, on a target with AVX512-BF16 or AMX; refused with the reason elsewhere."""
    from tensor_graphs.target import record

    model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1)).eval()
    for target, offered in (("sapphirerapids", True), ("znver4", True), ("haswell", False)):
        graph = import_model(model, (torch.randn(1, 16, 9, 9),))
        build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
        record(graph.module, Target.named(target))
        (conv,) = [p for p in kernel_paths(graph.module) if p.name == "tg.winograd_conv"]
        assert ("winograd_conv.direct_bf16" in conv.applicable) == offered and conv.applicable[0] == "winograd_conv.packed"
        if not offered:
            assert dict(conv.rejected)["winograd_conv.direct_bf16"] == f"the target ({target}) has no bf16 dot products (AVX512-BF16)"


#: a bf16 model's convolutions (images, channels, size, out channels, kernel, stride, padding): a
#: 3x3 at stride 1, a 1x1 over two images with an odd C, a strided 3x3 with a partial panel, the
#: 7x7 stem's shape (K = 147: odd, a K tail on AMX)
BF16_MODEL_SHAPES = [(1, 16, 12, 32, 3, 1, 1), (2, 5, 9, 24, 1, 1, 0), (1, 8, 11, 20, 3, 2, 1), (1, 3, 20, 16, 7, 2, 3)]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("shape", BF16_MODEL_SHAPES, ids=[str(s) for s in BF16_MODEL_SHAPES])
def test_a_bf16_models_convolution_runs_on_its_bf16_operands(engine, shape):
    """A bf16 model (``model.to(torch.bfloat16)``): each convolution's GEMM runs on the bf16
    operands (`matmul.bf16_operands_rhs`), the heuristic's choice on any CPU: the weight's bf16
    rows packed once, never widened per call, the windows packed into bf16 pairs (exactly: they
    are bf16 values). Products of bf16 values are exact in float32, so the output is the float64
    convolution of the bf16 values rounded to bf16 once (within 2^-8 of the largest output; the
    float32 sums' error is far below)."""
    n, c, h, cout, k, stride, pad = shape
    torch.manual_seed(sum(shape))
    model = torch.nn.Sequential(torch.nn.Conv2d(c, cout, k, stride, pad), torch.nn.ReLU()).eval().to(torch.bfloat16)
    x = torch.randn(n, c, h, h).to(torch.bfloat16)
    fn = tg.compile(model, (x,), target=_runnable(engine))
    buffers = fn.ir("buf")
    assert "bf16rows" in buffers and buffers.count("buf.packed_matmul") == 1 and "buf.matmul" not in buffers
    assert f"memref<{cout}x{c}x{k}x{k}xf32>" not in buffers  # no widened weight
    conv = model[0]
    exact = torch.relu(torch.nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double(), stride, pad))
    got = fn(x)
    assert got.dtype == torch.bfloat16 and (got.double() - exact).abs().max() <= 2.0 ** -8 * exact.abs().max()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_bf16_resnet_block_runs_its_convolutions_on_bf16_operands(engine):
    """A bf16 bottleneck block (1x1, 3x3, 1x1 convolutions, a residual, max pooling before it):
    every convolution on bf16 operands, none widened; the first two convolutions' ReLU and
    rounding to bf16 in their GEMM's epilogue (`fuse-gemm-elementwise`: the loop's body
    ``round(relu(round(y)))`` applied as each output is written). On AMX tiles they write it as
    bf16 (`narrow-gemm-output`), and the residual and its ReLU run in the last one's epilogue,
    which writes the block's bf16 output itself; on the register tiles the GEMMs write float32
    and the residual is a loop. Within 2^-7 of the largest output of the float64 block over
    the same bf16 weights (each layer's output is rounded to bf16, up to 2^-8 of it, three layers
    and the residual; observed 0.74 x 2^-8 on every engine)."""
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = torch.nn.MaxPool2d(3, 2, 1)
            self.a, self.b, self.c = torch.nn.Conv2d(64, 32, 1), torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.Conv2d(32, 64, 1)

        def forward(self, x):
            x = self.pool(x)
            return torch.relu(self.c(torch.relu(self.b(torch.relu(self.a(x))))) + x)

    model = Block().eval().to(torch.bfloat16)
    x = torch.randn(1, 64, 26, 26).to(torch.bfloat16)
    fn = tg.compile(model, (x,), target=_runnable(engine))
    buffers = fn.ir("buf")
    assert buffers.count('layout = "bf16rows"') == 3 and buffers.count("buf.packed_matmul") == 3 and "buf.matmul" not in buffers
    gemm_outputs = [line.split("outs(")[1].split(")")[0] for line in buffers.splitlines() if "buf.packed_matmul" in line]
    if engine == "amx":
        assert buffers.count("} epilogue {") == 3 and buffers.count("buf.fused_elementwise") == 0
        assert all("xbf16>" in out for out in gemm_outputs), gemm_outputs  # no float32 activations between them
    else:
        assert buffers.count("} epilogue {") == 2 and buffers.count("buf.fused_elementwise") == 1
        assert not any("xbf16>" in out for out in gemm_outputs), gemm_outputs
    with torch.no_grad():
        exact = model.double()(x.double())
    got = fn(x).double()
    assert (got - exact).abs().max() <= 2.0 ** -7 * exact.abs().max()
