"""Every dtype of the one table (`tensor_graphs.dtypes`) as model inputs, outputs, weights and
intermediates, against eager PyTorch.

How results are judged:
- float16 / bfloat16 / float64: the error of tensor_graphs' result against a float64 run of the
  same model (its weights as the dtype holds them, widened exactly) is at most twice eager's
  error plus the dtype's atol (torch.testing's default atol for the dtype); float16/bfloat16 ops
  compute in float32 and round after every op (`widen-dtypes`), as eager does, so most results
  agree with eager bit for bit;
- integers and bool: exactly equal to eager, dtype included (wrapping arithmetic, uint8 too).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.dialects import arith
import torch.nn.functional as F

import tensor_graphs as tg
from tensor_graphs import dtypes
from tensor_graphs.codegen.llvm import scalar

LOW = [torch.float16, torch.bfloat16]
FLOATS = [torch.float64, *LOW]
INTEGERS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
#: torch.testing's default atol per dtype (the "dtype's atol" of the rule)
ATOL = {torch.float64: 1e-7, torch.float32: 1e-5, torch.float16: 1e-5, torch.bfloat16: 1e-5}


def _f64_reference(model: torch.nn.Module, inputs: tuple) -> object:
    """The model in float64 (weights widened exactly from the dtype's values) on the inputs widened."""
    import copy

    m64 = copy.deepcopy(model).double()
    return m64(*[x.double() if x.is_floating_point() else x for x in inputs])


def _check_float_rule(model: torch.nn.Module, inputs: tuple) -> None:
    fn = tg.compile(model, inputs)
    out, eager, ref = fn(*inputs), model(*inputs), _f64_reference(model, inputs)
    for o, e, r in zip(torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(eager),
                       torch.utils._pytree.tree_leaves(ref)):
        assert o.dtype == e.dtype and o.shape == e.shape
        ours = (o.double() - r).abs().max().item()
        theirs = (e.double() - r).abs().max().item()
        assert ours <= 2 * theirs + ATOL[e.dtype], f"error {ours:.3g} against float64, eager's {theirs:.3g}"


class _Block(torch.nn.Module):
    """A pre-norm transformer block: RMSNorm, causal SDPA, a SiLU-gated MLP, a residual, and a
    LayerNorm + GELU + softmax head: the ops LLM checkpoints run in bf16/f16."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.out = torch.nn.Linear(d, d)
        self.gate, self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, -1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        h = x + self.out(a)
        h = h + self.down(F.silu(self.gate(h)) * self.up(h))
        return torch.softmax(F.gelu(self.ln(h)), -1)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_transformer_block_in_each_float_dtype(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = _Block().to(dtype).eval()
    _check_float_rule(model, (torch.randn(2, 8, 32).to(dtype),))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_conv_pool_batchnorm_in_each_float_dtype(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 2 * 2, 5),
    ).to(dtype).eval()
    _check_float_rule(model, (torch.randn(2, 3, 8, 8).to(dtype),))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_a_low_precision_model_over_a_symbolic_batch(dtype: torch.dtype) -> None:
    """A float16 / bfloat16 model exported with a symbolic batch: `widen-dtypes` keeps the size
    expressions of the dims it widens (it dropped them, and compiling failed with a symbolic-shape
    error); each batch within the low-precision rule (twice eager's error plus the dtype's atol)."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 8, 1), torch.nn.Flatten(),
        torch.nn.Linear(8 * 6 * 6, 5),
    ).to(dtype).eval()
    batch = torch.export.Dim("batch", min=1, max=4)
    fn = tg.compile(model, (torch.randn(2, 4, 6, 6).to(dtype),), dynamic_shapes=({0: batch},))
    for n in (1, 3, 4):
        x = torch.randn(n, 4, 6, 6).to(dtype)
        out, eager, ref = fn(x), model(x), _f64_reference(model, (x,))
        assert out.dtype == dtype and out.shape == (n, 5)
        ours, theirs = (out.double() - ref).abs().max().item(), (eager.double() - ref).abs().max().item()
        assert ours <= 2 * theirs + ATOL[dtype], f"batch {n}: error {ours:.3g} against float64, eager's {theirs:.3g}"


class _Arith(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return (x + y, x - y, x * y, x // 3, x > y, torch.maximum(x, y), x.sum(-1), x.argmax(-1),
                x.max(-1), torch.where(x > y, x, y), x.abs(), -x, torch.clamp(x, 1, 50), x @ y.transpose(0, 1),
                x.float() / 3, x.cumsum(-1), ~x, x & y, (x.double() * 1.5).to(x.dtype), x % 7, torch.fmod(x, -3),
                x.ceil(), x.sign())


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_arithmetic_wraps_as_eager(dtype: torch.dtype) -> None:
    info = torch.iinfo(dtype)
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(max(info.min, -1000), min(info.max, 1000) + 1, (4, 6), generator=gen).to(dtype)
    y = torch.randint(max(info.min, -1000), min(info.max, 1000) + 1, (4, 6), generator=gen).to(dtype)
    x[0, :2] = info.max  # overflowing sums and products wrap
    y[0, :2] = info.max
    model = _Arith()
    out, eager = tg.compile(model, (x, y))(x, y), model(x, y)
    for i, (o, e) in enumerate(zip(torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(eager))):
        assert o.dtype == e.dtype and torch.equal(o, e), f"output {i}: {o} != {e}"


class _IntegerOps(torch.nn.Module):
    """Integer pow (square-and-multiply, negative exponents as torch's powi), the shifts (by any
    amount: 0 or the sign beyond the width), pooling (max: padded with the dtype's minimum; avg:
    the sum divided toward zero), scaled addmm, sort and argmax."""

    def forward(self, a: torch.Tensor, b: torch.Tensor):
        small = b.clamp(0, 70) if a.dtype != torch.uint8 else b.clamp(0, 9)
        out = (a ** small, a << small, a >> small, torch.square(a),
               F.max_pool2d(a[None, None], 3, stride=2, padding=1), torch.sort(a, dim=1, stable=True), torch.argmax(a, 0))
        if a.dtype == torch.int64:  # eager's avg_pool2d takes no other integer dtype
            out += (F.avg_pool2d(a[None, None], 2, padding=1), F.avg_pool2d(-a[None, None], 3, stride=1, count_include_pad=False))
        return out + ((torch.addmm(a, a[:, :4], b[:4], beta=2, alpha=3),) if a.dtype in (torch.int64, torch.int32) else ())


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_ops_as_eager(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(4)
    a = torch.randint(-20 if dtype != torch.uint8 else 0, 21, (6, 6), generator=gen).to(dtype)
    b = torch.randint(-3 if dtype != torch.uint8 else 0, 12, (6, 6), generator=gen).to(dtype)
    out, eager = tg.compile(_IntegerOps(), (a, b))(a, b), _IntegerOps()(a, b)
    for o, e in zip(torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(eager), strict=True):
        assert o.dtype == e.dtype and torch.equal(o, e)


class _FloatFunctionsOfIntegers(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        return (torch.exp(x), torch.log(x), torch.sqrt(x), torch.sin(x), torch.tanh(x), torch.sigmoid(x), torch.acos(x),
                torch.log1p(x), torch.reciprocal(x), torch.rsqrt(x), torch.erf(x), torch.expm1(x))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool], ids=str)
def test_float_functions_of_integers_promote(dtype: torch.dtype) -> None:
    """A float function of an integer or bool tensor computes in float32 (torch's default dtype)
    and returns float32: within 1 float32 ulp of eager (the same libm/SLEEF-free functions give
    0 here but the float32 kernels are not eager's), NaN where eager has NaN."""
    x = torch.arange(-4, 8).reshape(3, 4)
    x = (x > 1) if dtype == torch.bool else x.clamp_min(0).to(dtype) if dtype == torch.uint8 else x
    model = _FloatFunctionsOfIntegers()
    for o, e in zip(tg.compile(model, (x,))(x), model(x), strict=True):
        assert o.dtype == e.dtype == torch.float32
        torch.testing.assert_close(o, e, rtol=1.2e-7, atol=0, equal_nan=True)


class _Logic(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return (a & b, a | b, a ^ b, ~a, a.sum(-1), a.any(-1), a.all(-1), a + b, a * b, torch.where(a, 1.5, -2.0), a.float().mean(),
                torch.max(a, 1), torch.min(a, 0), torch.sort(a, dim=1, stable=True), a.scatter_add(1, torch.zeros_like(a[:, :2], dtype=torch.long), b[:, :2]))


def test_bool_tensors_as_eager() -> None:
    gen = torch.Generator().manual_seed(3)
    a, b = torch.rand(3, 5, generator=gen) > 0.5, torch.rand(3, 5, generator=gen) > 0.5
    out, eager = tg.compile(_Logic(), (a, b))(a, b), _Logic()(a, b)
    for o, e in zip(torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(eager)):
        assert o.dtype == e.dtype and torch.equal(o, e)


class _Convert(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        return x.to(torch.bfloat16), x.to(torch.float16), x.to(torch.bfloat16).to(torch.float16), x.to(torch.int32), x.to(torch.uint8), x.to(torch.bool)


def test_conversions_round_as_torch() -> None:
    """float32 -> bfloat16 ties to even and keeps NaN quiet; float64 -> float16 rounds twice as
    c10's Half does (through float32); floats to integers truncate."""
    one = 1.0
    ties = [one + 2**-8, one + 3 * 2**-8, -(one + 2**-8), 3.0e38, -0.0, float("inf"), float("nan"), 65504.0, 65520.0, 1e-8, 2.5, -7.9]
    x = torch.tensor(ties, dtype=torch.float64)
    x[:5] = x[:5].float().double()
    out, eager = tg.compile(_Convert(), (x,))(x), _Convert()(x)
    for o, e in zip(out, eager):
        assert o.dtype == e.dtype
        if e.is_floating_point():  # bit for bit (the sign of zero too); a NaN is a NaN (torch's payloads vary by path)
            nan = e.isnan()
            assert torch.equal(o.isnan(), nan)
            assert torch.equal(o[~nan].view(torch.int16), e[~nan].view(torch.int16))
        else:  # out of range and NaN too: the x86 result eager gives (the minimum; low bits for uint8)
            assert torch.equal(o, e)


class _Bf16Closed(torch.nn.Module):
    """Ops whose bf16 result is one of their bf16 operands (or its sign changed)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return (torch.relu(x), x.clamp(-1.0, 2.0), x.abs(), -x, torch.where(x > y, x, y), torch.maximum(x, y),
                torch.minimum(x, y), torch.nn.functional.hardtanh(x))


def test_bf16_results_of_max_min_abs_neg_select_are_taken_not_rounded(monkeypatch) -> None:
    """A body's ``truncf`` of a value that is a bf16 already (`scalar.bf16_exact`: a ReLU's
    ``max(extf(x), 0)``) takes its high half instead of rounding it: on edge values (NaN,
    infinities, signed zeros, bf16 subnormals, the largest) the results are bit for bit those of
    the same graph rounding (and eager's values, NaN where eager has NaN), and the kernels have no
    rounding bias in them."""
    edge = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 2.0**-133, -(2.0**-130), 3.3e38, -3.3e38, 1.5, -2.75, 2.0]
    x = torch.tensor(edge * 2, dtype=torch.float32).to(torch.bfloat16)
    y = torch.tensor(edge[::-1] * 2, dtype=torch.float32).to(torch.bfloat16)
    monkeypatch.setenv("TG_CACHE", "off")
    fn = tg.compile(_Bf16Closed(), (x, y))
    assert "32767" not in fn.ir("llvm")  # (the rounding bias 0x7FFF)
    monkeypatch.setitem(scalar.ARITH, arith.TruncFOp, scalar._convert)
    rounding = tg.compile(_Bf16Closed(), (x, y))
    assert "32767" in rounding.ir("llvm")
    for o, r, e in zip(fn(x, y), rounding(x, y), _Bf16Closed()(x, y)):
        nan = e.isnan()
        assert o.dtype == e.dtype and torch.equal(o.isnan(), nan) and torch.equal(o[~nan], e[~nan])
        assert torch.equal(o[~nan].view(torch.int16), r[~nan].view(torch.int16))


class _Remainders(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return torch.remainder(x, y), torch.fmod(x, y), x % 2.5, torch.fmod(x, -1.5), 7.5 % y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_remainder_and_fmod_as_eager(dtype: torch.dtype) -> None:
    """``remainder`` takes the divisor's sign, ``fmod`` the dividend's (C's), both exact: eager's
    bits, NaN for a zero divisor, the dividend for an infinite one, -0.0 kept."""
    gen = torch.Generator().manual_seed(3)
    x, y = (torch.randn(256, generator=gen) * 20).to(dtype), (torch.randn(256, generator=gen) * 3).to(dtype)
    y[0], x[1], y[2], x[3], y[4] = 0.0, float("inf"), float("inf"), -0.0, -0.0
    for o, e in zip(tg.compile(_Remainders(), (x, y))(x, y), _Remainders()(x, y)):
        nan = e.isnan()
        assert o.dtype == e.dtype and torch.equal(o.isnan(), nan) and torch.equal(o[~nan], e[~nan])


class _Constants(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        return (x + torch.tensor([-1.0, 1.0, 2.5], dtype=torch.bfloat16), torch.arange(-1, 2, 1, dtype=torch.bfloat16),
                torch.tensor([True, False, True]) & (x > 0), torch.tensor([3, -4, 5]) * x.long(),
                torch.arange(3, dtype=torch.float64) + x.double())


def test_constants_of_every_dtype_bind_as_their_buffers_hold_them(tmp_path, monkeypatch) -> None:
    """A constant the graph reads at run time is bound as its buffer's bytes (a bfloat16 one as
    its bits: it used to be bound as float32 values, [-1, 1] read back as [0, -1]), also through
    the compile cache's saved signature."""
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    x = torch.tensor([0.5, -2.0, 3.0], dtype=torch.bfloat16)
    for _ in range(2):  # compiled, then from the cache
        for o, e in zip(tg.compile(_Constants(), (x,))(x), _Constants()(x)):
            assert o.dtype == e.dtype and torch.equal(o, e)


class _NumbersAgainstHalves(torch.nn.Module):
    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor):
        y = x.to(self.dtype)
        return y - 0.7123, 0.31 + y, y * 0.7123, y / 0.7123, 0.5 - y, y + torch.tensor(0.2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_number_against_a_half_tensor_rounds_as_each_kernel_does(dtype: torch.dtype) -> None:
    """eager's add and sub convert a number (or a 0-d tensor) to the tensor's dtype first
    (``bf16_y - 0.7123`` is ``y - bf16(0.7123)``), its mul and div read it unrounded:
    `widen-dtypes` does the same, so every result has eager's bits."""
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    module = _NumbersAgainstHalves(dtype)
    for o, e in zip(tg.compile(module, (x,))(x), module(x)):
        assert o.dtype == e.dtype and torch.equal(o, e)


def test_bf16_weights_are_bound_without_a_copy_and_saved_as_BF16(tmp_path) -> None:
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU()).to(torch.bfloat16).eval()
    x = torch.randn(3, 16).to(torch.bfloat16)
    fn = tg.compile(model, (x,))
    assert torch.equal(fn(x).view(torch.int16), model(x).view(torch.int16))
    path = tmp_path / "m.mlir"
    tg.export(model, (x,), path)
    header = path.with_suffix(".safetensors").read_bytes()
    assert b'"dtype":"BF16"' in header
    loaded = tg.load(path)
    assert torch.equal(loaded(x).view(torch.int16), model(x).view(torch.int16))


def test_numpy_holds_bfloat16_as_float32_values() -> None:
    row = dtypes.of_name("bfloat16")
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, np.nan, -np.inf], np.float32)
    bits = dtypes.bf16_bits(values)
    assert bits.tolist()[:3] == [0x3F80, 0x3F80, 0x3F82] and bits[3] == 0x7FC0 and bits[4] == 0xFF80
    assert np.array_equal(dtypes.round_values(values, row)[:3], [1.0, 1.0, 1 + 2**-6])
    eager = torch.from_numpy(values).bfloat16()
    assert torch.equal(torch.from_numpy(bits[[0, 1, 2, 4]].view(np.int16)), eager[[0, 1, 2, 4]].view(torch.int16))
    assert eager[3].isnan()


@pytest.mark.parametrize("dtype", [*FLOATS, *INTEGERS, torch.bool], ids=str)
def test_zero_dim_results_and_inputs_keep_shape(dtype: torch.dtype) -> None:
    class M(torch.nn.Module):
        def forward(self, x, s):
            return x.sum(), s * 2 if dtype != torch.bool else s

    x = (torch.arange(6).reshape(2, 3) % 2).to(dtype)
    s = torch.tensor(3).to(dtype)
    out, eager = tg.compile(M(), (x, s))(x, s), M()(x, s)
    for o, e in zip(out, eager):
        assert o.shape == e.shape == () and o.dtype == e.dtype and torch.equal(o, e)


def test_a_dtype_outside_the_table_is_named() -> None:
    x = torch.randn(3, dtype=torch.complex64)
    with pytest.raises(dtypes.DTypeError, match=r"complex64.*tensor_graphs takes a tensor of float64, float32"):
        tg.compile(torch.nn.Identity(), (x,))


def test_square_of_bool_promotes_to_int64_as_eager():
    """``torch.square``/``**`` of a bool tensor by an integer is int64 (the aten verifier had
    demanded the input's type: an internal error)."""
    class Square(torch.nn.Module):
        def forward(self, b):
            return torch.square(b), b**3

    b, model = torch.tensor([True, False, True]), Square()
    for g, e in zip(tg.compile(model, (b,))(b), model(b), strict=True):
        assert g.dtype == e.dtype == torch.int64 and torch.equal(g, e)
