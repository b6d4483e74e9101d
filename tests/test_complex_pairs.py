"""Complex values between real ones as pairs of reals (issue 30; `frontend/complex_pairs.py`).

Tolerance: float32 results within 1e-6 of eager's (2.4e-7 observed for the rotary product: eager's
complex multiply rounds its two products and sum in another order; 8.3e-7 for the two-layer
Llama 4 text model whose outputs reach 2.9).
"""

from __future__ import annotations

import pytest
import torch

import tensor_graphs as tg
from tensor_graphs.frontend.complex_pairs import has_complex_values, split_complex
from tensor_graphs.frontend.unsupported import UnsupportedOpsError


class ComplexRotary(torch.nn.Module):
    """Llama's ``apply_rotary_emb``: a complex buffer (``torch.polar``), ``view_as_complex`` of
    the input's pairs, a complex product, ``view_as_real`` back; and the same with the complex
    factor made at run time from the positions (``polar`` of run-time angles, conj, real/imag)."""

    def __init__(self, d: int = 8, s: int = 16):
        super().__init__()
        self.inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(s).float(), self.inv_freq)
        self.register_buffer("freqs_cis", torch.polar(torch.ones(s, d // 2), freqs), persistent=False)

    def forward(self, x, positions):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        f = self.freqs_cis[: x.shape[1]].view(1, x.shape[1], 1, -1)
        rotated = torch.view_as_real(xc * f).flatten(3)
        angles = positions[..., None].float() * self.inv_freq
        g = torch.polar(torch.ones_like(angles), angles)[:, :, None, :] * 2.0
        back = torch.view_as_real(xc * g.conj() + xc).flatten(3)
        return rotated, back, (xc * f).real, (xc - f).imag, (xc * f).abs()


def _inputs():
    torch.manual_seed(0)
    return torch.randn(2, 16, 4, 8), torch.arange(16).repeat(2, 1)


def test_complex_rotary_as_pairs_of_reals():
    model, (x, positions) = ComplexRotary(), _inputs()
    fn = tg.compile(model, (x, positions), keep_ir=True)
    assert "complex" not in fn.ir("aten")
    for got, want in zip(fn(x, positions), model(x, positions), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_the_callers_program_is_not_changed():
    model, (x, positions) = ComplexRotary(), _inputs()
    ep = torch.export.export(model, (x, positions))
    split = split_complex(ep)
    assert has_complex_values(ep) and not has_complex_values(split)
    assert ep.constants["freqs_cis"].dtype == torch.complex64  # a non-persistent buffer: a constant
    assert split.constants["freqs_cis"].dtype == torch.float32 and split.constants["freqs_cis"].shape == (16, 4, 2)


class ComplexExp(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.exp(torch.view_as_complex(x)))


def test_a_complex_op_without_a_pair_rule_is_refused_by_name():
    with pytest.raises(UnsupportedOpsError, match=r"(?s)aten::exp.*complex64"):
        tg.compile(ComplexExp(), (torch.randn(3, 2),))


class Spectra(torch.nn.Module):
    """FFTs whose results come back real: irfft (odd and even lengths, ortho), hfft2 (a c2c, a
    conjugate and a c2r), irfftn over a cropped signal, |rfft| and a spectrum as view_as_real."""

    def forward(self, x):
        return (torch.fft.irfft(x, n=7, norm="ortho"), torch.fft.irfft(x), torch.fft.hfft2(x), torch.fft.irfftn(x, s=(3, 6)),
                torch.fft.rfft(x, dim=0).abs(), torch.view_as_real(torch.fft.fft2(x, norm="forward")))


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 5e-7), (torch.float64, 2e-15)])
def test_ffts_with_real_results_as_dft_products_on_pairs(dtype, tol):
    """_fft_r2c/_fft_c2c/_fft_c2r on pairs: products with cos/sin tables (angles from ``j k mod
    n`` in float64): within ``tol`` of pocketfft's, relative to the largest value (observed
    6.6e-8 and 2.1e-16 on a Zen 3). A complex result (fft.fft itself) stays refused by name."""
    torch.manual_seed(0)
    x = torch.randn(4, 5, dtype=dtype)
    model = Spectra()
    fn = tg.compile(model, (x,))
    for got, want in zip(fn(x), model(x), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert float((got - want).abs().max()) <= tol * max(1.0, float(want.abs().max()))
    with pytest.raises(UnsupportedOpsError, match=r"(?s)aten::_fft_r2c.*complex64"):
        tg.compile(Fn(torch.fft.rfft), (x.float(),))


class Fn(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


def test_llama4_text_model_with_its_complex_rotary():
    """transformers' Llama 4 text model (random weights, 2 layers): its rotary embedding is
    ``torch.polar`` and ``view_as_complex`` products."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama4.modeling_llama4 import Llama4TextModel

    cfg = transformers.Llama4TextConfig(
        hidden_size=64, intermediate_size=128, intermediate_size_mlp=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=100, num_local_experts=2, num_experts_per_tok=1,
        no_rope_layers=[1, 1], attention_chunk_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    model = Llama4TextModel(cfg).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).last_hidden_state

    ids = torch.randint(0, 100, (1, 12))
    fn = tg.compile(Hidden(), (ids,))
    with torch.no_grad():
        torch.testing.assert_close(fn(ids), Hidden()(ids), rtol=0, atol=2e-6)
