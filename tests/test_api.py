"""The JIT API: one native call, IR at each level, memory report, and every error path."""

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from conftest import mlp


@pytest.fixture(scope="module")
def fn():
    return tg.compile(mlp((8, 16, 4)), (torch.randn(2, 8),))


def test_ir_at_every_level(fn):
    assert "aten.linear" in fn.ir("aten")
    assert "tg.matmul" in fn.ir("tg")
    assert "buf.matmul" in fn.ir("buf")
    llvm_ir = fn.ir("llvm")
    assert "define" in llvm_ir and "scipy_cblas_sgemm" in llvm_ir


def test_unknown_ir_level(fn):
    with pytest.raises(ValueError, match="no IR recorded at level 'ptx'"):
        fn.ir("ptx")


def test_wrong_argument_count(fn):
    with pytest.raises(TypeError, match=r"expected 1 input\(s\)"):
        fn()
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(TypeError, match=r"expected 1 input\(s\).*got 2"):
        fn(x, x)


def test_wrong_shape(fn):
    with pytest.raises(ValueError, match=r"input 0 .* has shape \[3, 8\], expected \[2, 8\]"):
        fn(np.zeros((3, 8), np.float32))
    with pytest.raises(ValueError, match=r"has shape \[2, 8, 1\]"):
        fn(torch.zeros(2, 8, 1))


def test_wrong_dtype(fn):
    with pytest.raises(TypeError, match=r"input 0 .* has dtype float64, expected float32"):
        fn(np.zeros((2, 8)))
    with pytest.raises(TypeError, match=r"has dtype torch.int64"):
        fn(torch.zeros(2, 8, dtype=torch.int64))


def test_non_contiguous_inputs_are_read_as_eager_reads_them(fn):
    """A transposed or strided input (NumPy or torch) is copied to a contiguous one for the call,
    as eager reads any strides: the same result as the contiguous input's, bit for bit."""
    x = torch.randn(8, 2)
    want = fn(x.t().contiguous())
    assert torch.equal(fn(x.t()), want)
    assert np.array_equal(fn(x.numpy().T), want.numpy())
    wide = torch.randn(2, 16)
    assert torch.equal(fn(wide[:, ::2]), fn(wide[:, ::2].contiguous()))


def test_wrong_kind(fn):
    with pytest.raises(TypeError, match="must be a NumPy array or a torch.Tensor, got list"):
        fn([[0.0] * 8] * 2)


def test_mixed_kinds(fn):
    two = tg.compile(TwoInputs(), (torch.randn(2, 3), torch.randn(2, 3)))
    with pytest.raises(TypeError, match="not a mix"):
        two(np.zeros((2, 3), np.float32), torch.zeros(2, 3))


class TwoInputs(torch.nn.Module):
    def forward(self, a, b):
        return a * b + a, torch.relu(a - b)


def test_multiple_inputs_and_outputs():
    model = TwoInputs()
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    fn = tg.compile(model, (a, b))
    y0, y1 = fn(a.numpy(), b.numpy())
    e0, e1 = model(a, b)
    np.testing.assert_allclose(y0, e0.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y1, e1.numpy(), rtol=1e-6, atol=1e-6)


class ReturnsInput(torch.nn.Module):
    def forward(self, x):
        return x, x.reshape(-1), torch.relu(x)


def test_outputs_that_alias_inputs_are_copies():
    x = torch.randn(3, 4)
    fn = tg.compile(ReturnsInput(), (x,))
    a, b, c = fn(x.numpy())
    np.testing.assert_array_equal(a, x.numpy())
    np.testing.assert_array_equal(b, x.numpy().reshape(-1))
    assert not np.shares_memory(a, x.numpy())


def test_weights_are_bound_not_copied():
    """pack_weights=False: the graph reads the parameters' own memory."""
    model = mlp((8, 16, 4))
    fn = tg.compile(model, (torch.randn(2, 8),), pack_weights=False)
    assert fn.memory.packed_bytes == 0 and "packed" not in fn.ir("buf")
    w = model[0].weight
    with torch.no_grad():
        w.mul_(2.0)  # the compiled graph sees the same memory
    x = torch.randn(2, 8)
    with torch.no_grad():
        np.testing.assert_allclose(fn(x.numpy()), model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_packed_weights_are_a_snapshot_until_repack():
    """By default a GEMM's weight is packed once, at load time; repack() refreshes the copies."""
    model = mlp((8, 16, 4))
    fn = tg.compile(model, (torch.randn(2, 8),))
    assert "buf.packed_matmul" in fn.ir("buf")
    assert fn.memory.packed_bytes == 1 * 8 * 16 * 4  # fc0: [16, 8] -> one panel of 16 columns
    x = torch.randn(2, 8)
    with torch.no_grad():
        before = model(x).numpy()
        model[0].weight.mul_(2.0)
        after = model(x).numpy()
    np.testing.assert_allclose(fn(x.numpy()), before, rtol=1e-4, atol=1e-5)
    fn.repack()
    np.testing.assert_allclose(fn(x.numpy()), after, rtol=1e-4, atol=1e-5)


def test_call_allocates_only_outputs():
    """Intermediates live in the arena bound at compile time: a call's peak allocation is its
    output plus interpreter noise, far below the arena (~1 MiB here) and not growing with calls."""
    import tracemalloc

    fn = tg.compile(mlp((64, 4096, 4096, 8)), (torch.randn(32, 64),))
    assert fn.memory.arena_bytes >= 32 * 4096 * 4
    x = np.zeros((32, 64), np.float32)
    fn(x)
    tracemalloc.start()
    for _ in range(20):
        fn(x)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 32 * 8 * 4 + 16384, peak


def test_memory_report(fn):
    m = fn.memory
    # fc0's [16, 8] weight is read packed (one panel of 16 columns), the rest as it is
    assert m.packed_bytes == 16 * 8 * 4
    assert m.weight_bytes == (16 + 4 * 16 + 4) * 4
    assert m.total_bytes == m.arena_bytes + m.weight_bytes + m.packed_bytes
    assert m.arena_bytes >= 0 and m.state_bytes == 0
    assert "arena" in str(m)


def test_compile_stats():
    stats = tg.CompileStats()
    tg.compile(mlp((4, 4)), (torch.randn(1, 4),), stats=stats)
    assert stats.total > 0 and "llvm jit" in stats.seconds


def test_memory_report_shows_reuse():
    fn = tg.compile(mlp((64, 256, 256, 256, 8)), (torch.randn(16, 64),))
    m = fn.memory
    # four intermediates of 16x256 floats (matmul outputs / activations), planned into less
    assert m.intermediate_bytes >= 3 * 16 * 256 * 4
    assert 0 < m.arena_bytes < m.intermediate_bytes


class ReturnsMask(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x), torch.ones(2, 3, dtype=torch.bool)


def test_bool_output_in_torch_mode():
    x = torch.randn(2, 3)
    fn = tg.compile(ReturnsMask(), (x,))
    y, mask = fn(x)
    assert mask.dtype == torch.bool and bool(mask.all())
    y2, mask2 = fn(x.numpy())
    assert mask2.dtype == np.bool_ and mask2.all()


def test_the_garbage_collector_is_paused_while_compiling_and_restored_after():
    """`driver.collector`: paused during a compile (nested and concurrent compiles share the pause),
    running again after it, and left off when the caller had turned it off."""
    import gc

    from tensor_graphs.driver.collector import paused_collector

    assert gc.isenabled()
    with paused_collector():
        assert not gc.isenabled()
        with paused_collector():  # a compile inside a compile (the tuner's candidates)
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    model = torch.nn.Linear(4, 3).eval()
    tg.compile(model, (torch.randn(2, 4),))
    assert gc.isenabled()
    gc.disable()
    try:
        tg.compile(model, (torch.randn(2, 4),))
        assert not gc.isenabled()
    finally:
        gc.enable()
