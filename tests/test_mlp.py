"""MLPs through every level match PyTorch in fp32 (rtol 1e-4, atol 1e-5)."""

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from conftest import mlp

RTOL, ATOL = 1e-4, 1e-5

CONFIGS = [
    # (layer sizes, batch, bias, relu)
    pytest.param((1, 1), 1, True, False, id="depth1-width1-batch1"),
    pytest.param((16, 32), 7, False, False, id="depth1-nobias-batch7"),
    pytest.param((64, 128, 64), 1, True, True, id="depth2-relu-batch1"),
    pytest.param((256, 1024, 1024, 256), 64, True, True, id="depth3-width1024-batch64"),
    pytest.param((2048, 512, 256, 128, 10), 256, True, True, id="depth4-width2048-batch256"),
    pytest.param((33, 17, 9), 3, False, True, id="depth2-odd-sizes-nobias"),
    pytest.param((8, 2048, 8), 2, True, True, id="depth2-wide-hidden"),
]


@pytest.mark.parametrize("sizes,batch,bias,relu", CONFIGS)
def test_mlp_matches_pytorch(sizes, batch, bias, relu):
    model = mlp(sizes, bias=bias, relu=relu)
    x = torch.randn(batch, sizes[0])
    fn = tg.compile(model, (x,))
    with torch.no_grad():
        expected = model(x).numpy()
    got = fn(x.numpy())
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    # a second call with new data reuses the arena and weights
    x2 = torch.randn(batch, sizes[0])
    with torch.no_grad():
        np.testing.assert_allclose(fn(x2.numpy()), model(x2).numpy(), rtol=RTOL, atol=ATOL)


def test_torch_in_torch_out():
    model = mlp((8, 16, 4))
    x = torch.randn(3, 8)
    fn = tg.compile(model, (x,))
    y = fn(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(y, model(x), rtol=RTOL, atol=ATOL)


def test_mlp_fuses_bias_and_relu_and_absorbs_transposes():
    fn = tg.compile(mlp((16, 32, 8)), (torch.randn(2, 16),))
    tg_ir = fn.ir("tg")
    assert "tg.transpose" not in tg_ir, tg_ir
    assert "transpose_b = true" in tg_ir
    assert "tg.bias_activation" in tg_ir or "tg.relu" not in tg_ir
    buf_ir = fn.ir("buf")
    assert "buf.alloc" not in buf_ir and "buf.arena" in buf_ir
    assert "scipy_cblas_sgemm" in fn.ir("llvm")


def test_three_dim_input_batches_into_one_gemm():
    model = mlp((12, 24, 6))
    x = torch.randn(2, 5, 12)
    fn = tg.compile(model, (x,))
    with torch.no_grad():
        np.testing.assert_allclose(fn(x.numpy()), model(x).numpy(), rtol=RTOL, atol=ATOL)


def test_memory_report_counts_weights_once():
    model = mlp((256, 1024, 1024, 256))
    fn = tg.compile(model, (torch.randn(1, 256),))
    params = sum(p.numel() * 4 for p in model.parameters())
    # every N is a multiple of 64: the packed copies hold exactly the weight matrices, no padding
    matrices = sum(m.weight.numel() * 4 for m in model if isinstance(m, torch.nn.Linear))
    assert fn.memory.packed_bytes == matrices
    assert fn.memory.weight_bytes == params - matrices  # the biases, read where they are
    assert 0 < fn.memory.arena_bytes <= 2 * 1024 * 4 + 128
    unpacked = tg.compile(model, (torch.randn(1, 256),), pack_weights=False)
    assert unpacked.memory.weight_bytes == params and unpacked.memory.packed_bytes == 0
