"""A convolution's GEMM packs its own panels, a chunk at a time (`fuse-panels-into-gemm`,
`codegen.llvm.panel_packing`): the windows' `buf.im2col` moves into the GEMM's ``packing``
region, and each thread writes a chunk of its panels into a scratch that fits in L2 right before
its tiles read them; where the GEMM's blocking takes no chunks (AMX row groups over few panels,
A-stationary row blocks) or one panel outgrows the chunk, all panels are written first.

The panels hold the same values either way, so the output must be the same bits as the graph
compiled without the pass (the standalone `buf.im2col` kernel, then the GEMM), at one and two
threads: float32 panels (a float32 model, the register tiles on the host's and the AVX2
target's vectors) and bf16 pairs (a bf16 model, on AMX, AVX512-BF16 or the emulation; also
against the float64 convolution of its bf16 values within 2^-8 of the largest output: one bf16
rounding, as `test_bf16_conv`). Shapes at ResNet-50's sizes, so that a thread's panels span many
chunks."""

from __future__ import annotations

import pytest
import torch

import tensor_graphs as tg
from tensor_graphs.codegen.llvm import panel_packing
from tensor_graphs.codegen.llvm.panel_packing import PanelPacker
from tensor_graphs.driver import cpu
from tensor_graphs.target import Target
from test_bf16_conv import ENGINES, _runnable

#: (channels, size, out channels, kernel, stride, padding), one image: ResNet-50's stem (K = 147: a
#: K tail on AMX) and a 3x3 of its first stage (panels of several MB: chunks where the host's L2
#: takes 8 output rows a chunk), an odd C with a partial last panel, a 1x1 over few panels (all
#: first: they fit in L2), a 3x3 over 512 channels at 7 x 7 (one panel outgrows a chunk)
SHAPES = [(3, 224, 64, 7, 2, 3), (64, 56, 64, 3, 1, 1), (33, 62, 48, 3, 1, 1), (256, 14, 512, 1, 1, 0),
          (512, 7, 512, 3, 1, 1)]
#: float32 panels: 3x3 at stride 1 is a Winograd convolution in a float32 model, so strided here
FLOAT_SHAPES = [(3, 224, 64, 7, 2, 3), (64, 112, 64, 3, 2, 1), (33, 71, 48, 3, 2, 1), (256, 28, 128, 1, 1, 0),
                (512, 14, 512, 3, 2, 1)]
#: small convolutions packed in chunks of a few panels whatever the host's caches (`_forced`):
#: chunks that end inside an output row, a partial last panel, an odd C, a 1x1, strides
SMALL_SHAPES = [(33, 13, 48, 3, 1, 1), (3, 30, 16, 7, 2, 3), (16, 9, 24, 1, 1, 0), (8, 17, 20, 3, 2, 1)]


def _conv(shape: tuple, dtype: torch.dtype, images: int = 1) -> tuple[torch.nn.Module, torch.Tensor]:
    c, h, cout, k, stride, pad = shape
    torch.manual_seed(sum(shape))
    model = torch.nn.Sequential(torch.nn.Conv2d(c, cout, k, stride, pad), torch.nn.ReLU()).eval().to(dtype)
    return model, torch.randn(images, c, h, h).to(dtype)


def _exact(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    conv = model[0]
    return torch.relu(torch.nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double(), conv.stride,
                                                 conv.padding))


def _at_threads(fn, x: torch.Tensor) -> list[torch.Tensor]:
    outs, before = [], tg.get_num_threads()
    try:
        for threads in (1, 2):
            tg.set_num_threads(threads)
            outs.append(torch.as_tensor(fn(x)))
    finally:
        tg.set_num_threads(before)
    return outs


def _fused_and_not(model: torch.nn.Module, x: torch.Tensor, target: str, monkeypatch) -> tuple[list, list, bool]:
    """The outputs at 1 and 2 threads of ``model`` compiled for ``target`` with the GEMM packing
    its panels, then without `fuse-panels-into-gemm`; and whether the GEMM packed them in chunks."""
    monkeypatch.setenv("TG_CACHE", "off")  # (a graph from the cache would not be generated again)
    chunked: list[bool] = []
    chunks = PanelPacker.chunks
    monkeypatch.setattr(PanelPacker, "chunks", lambda self, *a, **k: chunked.append(True) or chunks(self, *a, **k))
    fn = tg.compile(model, (x,), target=target)
    assert "packing {" in fn.ir("buf")
    fused = _at_threads(fn, x)
    original = cpu.buffer_pipeline
    monkeypatch.setattr(cpu, "buffer_pipeline", lambda *a: tuple(p for p in original(*a) if p != "fuse-panels-into-gemm"))
    plain = tg.compile(model, (x,), target=target)
    assert "packing {" not in plain.ir("buf") and "buf.im2col" in plain.ir("buf")
    return fused, _at_threads(plain, x), bool(chunked)


def _forced(monkeypatch, panels: int, shape: tuple) -> None:
    """Chunks of ``panels`` panels of 64 float32 columns' bytes for any convolution (more of the
    narrower ones), whatever the host's L2."""
    c, _, _, k, *_ = shape
    monkeypatch.setattr(panel_packing, "SPILL_L2_SHARE", 1 << 40)
    monkeypatch.setattr(panel_packing, "MIN_CHUNK_ROWS", 0)
    monkeypatch.setattr(panel_packing, "MAX_CHUNK_BYTES", panels * 4 * c * k * k * 64)  # (NR <= 64 columns a panel)


def _check_bf16(fused: list, plain: list, model: torch.nn.Module, x: torch.Tensor) -> None:
    exact = _exact(model, x)
    for got, expected in zip(fused, plain):
        assert torch.equal(got, expected)
        assert (got.double() - exact).abs().max() <= 2.0 ** -8 * exact.abs().max()


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_a_gemm_packs_its_bf16_pairs(engine, shape, monkeypatch):
    model, x = _conv(shape, torch.bfloat16)
    fused, plain, _ = _fused_and_not(model, x, _runnable(engine), monkeypatch)
    _check_bf16(fused, plain, model, x)


@pytest.mark.parametrize("target", ["host", "haswell"])
@pytest.mark.parametrize("shape", FLOAT_SHAPES, ids=[str(s) for s in FLOAT_SHAPES])
def test_a_gemm_packs_its_float_panels(target, shape, monkeypatch):
    model, x = _conv(shape, torch.float32)
    fused, plain, _ = _fused_and_not(model, x, Target.host().name if target == "host" else target, monkeypatch)
    for got, expected in zip(fused, plain):
        assert torch.equal(got, expected)


def _small_cases() -> list[tuple[tuple, str]]:
    """(shape, engine): each small shape on every bf16 engine and, but for a 3x3 at stride 1 (a
    Winograd convolution in float32), on the float32 ones."""
    return [(shape, engine) for shape in SMALL_SHAPES for engine in [*ENGINES, "float32", "float32-avx2"]
            if not (engine.startswith("float32") and shape[3] == 3 and shape[4] == 1)]


@pytest.mark.parametrize("panels", [1, 3])
@pytest.mark.parametrize(("shape", "engine"), _small_cases(), ids=[f"{s}-{e}" for s, e in _small_cases()])
def test_chunks_of_any_size(shape, engine, panels, monkeypatch):
    """Chunks the size of 1 and 3 panels of 64 float32 columns (1 to 12 panels of the narrower
    layouts: the packer's run-time bounds at every place in the image),
    bf16 pairs on each engine and float32 panels on the host's and the AVX2 target's vectors."""
    _forced(monkeypatch, panels, shape)
    dtype = torch.float32 if engine.startswith("float32") else torch.bfloat16
    target = {"float32": Target.host().name, "float32-avx2": "haswell"}.get(engine) or _runnable(engine)
    model, x = _conv(shape, dtype)
    fused, plain, chunked = _fused_and_not(model, x, target, monkeypatch)
    assert chunked
    if dtype == torch.bfloat16:
        _check_bf16(fused, plain, model, x)
    for got, expected in zip(fused, plain):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("forced", [False, True], ids=["resnet_sized", "chunks_of_2"])
def test_a_batch_packs_each_images_panels(engine, forced, monkeypatch):
    """Three images: a batch of GEMMs whose panels AMX packs image by image, a chunk at a time
    (a thread's items may start and end inside an image); the other engines write them all first."""
    shape = (33, 13, 48, 3, 1, 1) if forced else (64, 56, 64, 3, 1, 1)
    if forced:
        _forced(monkeypatch, 2, shape)
    model, x = _conv(shape, torch.bfloat16, images=3)
    fused, plain, chunked = _fused_and_not(model, x, _runnable(engine), monkeypatch)
    assert chunked == (engine == "amx") or not forced
    _check_bf16(fused, plain, model, x)
