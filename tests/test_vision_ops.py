"""Convolution, pooling, normalisation and resizing ops against PyTorch, each compiled alone.

Tolerance: 1e-5 absolute on outputs of magnitude ~1 (float32 sums in another order: what these
reach is 1e-7..5e-7; pooling and nearest resizing are exact). Shapes are odd on purpose: tails
of every loop, windows hanging off the edges, taps wholly in the padding.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import tensor_graphs as tg
from tensor_graphs.transforms import winograd_convolution

nn = torch.nn
ATOL = 1e-5


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _check(model: nn.Module, *args: torch.Tensor, atol: float = ATOL) -> str:
    model.eval()
    fn = tg.compile(model, args)
    with torch.no_grad():
        expected = model(*args)
    got = fn(*args)
    assert got.shape == expected.shape
    if atol == 0.0:
        assert torch.equal(got, expected)
    else:
        diff = (got - expected).abs().max().item()
        assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"
    return fn.ir("tg")


CONVOLUTIONS = {
    "3x3-pad1-bias": (nn.Conv2d(3, 8, 3, padding=1), (2, 3, 9, 7)),
    "3x3-stride2-nobias": (nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), (1, 3, 9, 7)),
    "dilated-rect": (nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(2, 1), dilation=(2, 3)), (2, 4, 11, 10)),
    "pad-beyond-taps": (nn.Conv2d(2, 3, 2, padding=3), (1, 2, 4, 5)),
    "1x1": (nn.Conv2d(8, 16, 1), (2, 8, 5, 5)),
    "1x1-stride2": (nn.Conv2d(8, 16, 1, stride=2), (2, 8, 5, 5)),
    "depthwise-7x7": (nn.Conv2d(8, 8, 7, padding=3, groups=8), (2, 8, 9, 9)),
    "grouped": (nn.Conv2d(8, 12, 3, padding=1, groups=4), (1, 8, 6, 6)),
    "patchify": (nn.Conv2d(3, 16, 4, stride=4), (1, 3, 16, 12)),
    "conv1d": (nn.Conv1d(4, 8, 5, padding=2, stride=2), (2, 4, 20)),
    "conv1d-depthwise-dilated": (nn.Conv1d(6, 6, 3, padding=2, dilation=2, groups=6), (1, 6, 11)),
}


@pytest.mark.parametrize("name", list(CONVOLUTIONS))
def test_convolution(name):
    torch.manual_seed(0)
    conv, shape = CONVOLUTIONS[name]
    ir = _check(nn.Sequential(conv, nn.ReLU()), torch.randn(*shape))
    assert "tg.matmul" in ir and "activation = \"relu\"" in ir, "the ReLU is the GEMM's epilogue"
    assert ("tg.im2col" in ir) == (conv.kernel_size != (1,) * len(conv.kernel_size) or conv.stride != (1,) * len(conv.stride))


#: One image (the packed GEMM path: the weight as A, the windows packed into the GEMM's column
#: panels by the graph, fused with the im2col): windows a whole number of panels or not, K above
#: the target's K block (several passes over the panels), 1x1 at stride 1 (a packing of x alone).
#: Sums of up to 1152 products: the 1e-5 tolerance holds (what they reach is ~4e-6).
PACKED_CONVOLUTIONS = {
    "3x3-panels-whole": (nn.Conv2d(5, 12, 3, padding=1), (1, 5, 8, 8)),
    "3x3-panels-tail": (nn.Conv2d(5, 12, 3, padding=1), (1, 5, 7, 7)),
    "3x3-deep-k": (nn.Conv2d(64, 20, 3, padding=1), (1, 64, 9, 9)),
    "5x5-stride2-dilated": (nn.Conv2d(3, 7, 5, stride=2, padding=3, dilation=2), (1, 3, 17, 15)),
    "1x1": (nn.Conv2d(24, 40, 1), (1, 24, 7, 7)),
    "1x1-stride2": (nn.Conv2d(24, 40, 1, stride=2, bias=False), (1, 24, 9, 9)),
    "7x7-stem": (nn.Conv2d(3, 16, 7, stride=2, padding=3), (1, 3, 32, 32)),
    "conv1d": (nn.Conv1d(6, 10, 3, padding=1), (1, 6, 40)),
    # a weight too large to stay in L2 per K block, few pixels: the row blocks loop outside the
    # panels (A-stationary), in one K block and in several; 49 pixels: a last panel of one column
    "1x1-wide-7x7": (nn.Conv2d(256, 1024, 1), (1, 256, 7, 7)),
    "3x3-wide-7x7": (nn.Conv2d(128, 512, 3, padding=1), (1, 128, 7, 7)),
}


@pytest.mark.parametrize("name", list(PACKED_CONVOLUTIONS))
def test_convolution_packed_gemm(name, monkeypatch):
    # the im2col GEMM itself: winograd-convolution would take the stride-1 3x3 ones
    monkeypatch.setattr(winograd_convolution, "MIN_CHANNELS", 1 << 30)
    torch.manual_seed(0)
    conv, shape = PACKED_CONVOLUTIONS[name]
    model = nn.Sequential(conv, nn.ReLU()).eval()
    x = torch.randn(*shape)
    _check(model, x)
    fn = tg.compile(model, (x,))
    ir = fn.ir("buf")
    assert ir.count("buf.packed_matmul") == 1 and "buf.matmul" not in ir, ir
    # one im2col, writing the panels (fuse-im2col-panels folded the plain windows into it)
    assert ir.count("buf.im2col") == 1 and "panels = " in ir, ir
    plain = tg.compile(model, (x,), pack_weights=False).ir("buf")
    assert "buf.matmul" in plain and "panels = " not in plain, "pack_weights=False: BLAS on the windows"


#: A-stationary packed GEMMs (a weight as A with more rows than the pixels' panels have columns,
#: or too large for half of L2 per K block): the threads split the row blocks. A last, partial
#: panel after whole ones is one more panel of each row block, its K blocks' sums added into the
#: output (14 x 14: 196 pixels, K = 1152); a partial panel alone (7 x 7 on AVX-512's 64-column
#: panels) runs all of K at once.
A_STATIONARY = {
    "1x1-wide-7x7": "1x1-wide-7x7",
    "1x1-deep-7x7": (nn.Conv2d(512, 1024, 1), (1, 512, 7, 7)),
    "3x3-wide-7x7": "3x3-wide-7x7",
    "3x3-wide-14x14": (nn.Conv2d(128, 512, 3, padding=1), (1, 128, 14, 14)),
}


@pytest.mark.parametrize("name", list(A_STATIONARY))
def test_a_stationary_convolution_threads_agree(name, monkeypatch):
    """At 1 and 2 threads, within 1e-5 of PyTorch and bit for bit the same (each output element
    is computed by the same code on whichever thread)."""
    monkeypatch.setattr(winograd_convolution, "MIN_CHANNELS", 1 << 30)
    torch.manual_seed(0)
    spec = A_STATIONARY[name]
    conv, shape = PACKED_CONVOLUTIONS[spec] if isinstance(spec, str) else spec
    model = nn.Sequential(conv, nn.ReLU()).eval()
    x = torch.randn(*shape)
    before = tg.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            tg.set_num_threads(threads)
            _check(model, x)
            outs.append(tg.compile(model, (x,))(x))
    finally:
        tg.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])


class ConvAddRelu(nn.Module):
    """``relu(conv(x) + r)``: a residual after a convolution without bias."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.conv = conv

    def forward(self, x, r):
        return torch.relu(self.conv(x) + r)


#: Stride-1 3x3 convolutions of one image that `winograd-convolution` takes (F(2x2, 3x3)):
#: tile rows and columns whole or hanging over the edge (odd sizes), no padding, padding on one
#: axis only, tiles in several panels and a partial one, more tiles per row than a vector holds
#: and fewer, deep K (one panel: one K block; several panels, the last partial: several K
#: blocks, the partial panel's sums added through the stack), a 1-pixel output. The transforms add a few float32
#: roundings to each output (coefficients +-1, +-1/2): what these reach is 1e-6..3e-6, under
#: the file's 1e-5 on outputs of magnitude ~1..3.
WINOGRAD_CONVOLUTIONS = {
    "pad1-even": (nn.Conv2d(16, 16, 3, padding=1), (1, 16, 10, 10)),
    "pad1-odd": (nn.Conv2d(16, 32, 3, padding=1), (1, 16, 7, 7)),
    "valid-odd": (nn.Conv2d(32, 16, 3), (1, 32, 9, 13)),
    "pad-one-axis": (nn.Conv2d(16, 24, 3, padding=(1, 0)), (1, 16, 5, 6)),
    "wide-rows": (nn.Conv2d(16, 16, 3, padding=1, bias=False), (1, 16, 12, 75)),
    "deep-k": (nn.Conv2d(320, 48, 3, padding=1), (1, 320, 6, 6)),
    "deep-k-partial-panels": (nn.Conv2d(640, 16, 3, padding=1), (1, 640, 12, 11)),
    "one-pixel": (nn.Conv2d(16, 16, 3), (1, 16, 3, 3)),
    "conv1d-like": (nn.Conv2d(16, 16, 3, padding=1), (1, 16, 1, 40)),
}


@pytest.mark.parametrize("name", list(WINOGRAD_CONVOLUTIONS))
def test_convolution_winograd(name):
    torch.manual_seed(0)
    conv, shape = WINOGRAD_CONVOLUTIONS[name]
    model = nn.Sequential(conv, nn.ReLU()).eval()
    x = torch.randn(*shape)
    ir = _check(model, x)
    assert ir.count("tg.winograd_conv") == 1 and "tg.im2col" not in ir, ir
    assert 'activation = "relu"' in ir, "the ReLU is the output transform's epilogue"
    buf_ir = tg.compile(model, (x,)).ir("buf")
    for kernel in ("buf.winograd_input", "buf.packed_matmul", "buf.winograd_output", 'layout = "winograd2"'):
        assert buf_ir.count(kernel) == 1, (kernel, buf_ir)
    plain = tg.compile(model, (x,), pack_weights=False).ir("tg")
    assert "winograd" not in plain, "pack_weights=False: no weight transformed at load, the im2col GEMM on BLAS"


def test_convolution_winograd_residual_and_scale():
    """A residual after the convolution (the output transform's accumulator, through
    fuse-matmul-epilogue or a separate add), a convolution feeding another."""
    torch.manual_seed(0)
    model = ConvAddRelu(nn.Conv2d(24, 24, 3, padding=1, bias=False)).eval()
    x, r = torch.randn(1, 24, 11, 9), torch.randn(1, 24, 11, 9)
    _check(model, x, r)
    chain = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.SiLU(), nn.Conv2d(32, 16, 3, padding=1)).eval()
    ir = _check(chain, torch.randn(1, 16, 14, 14))
    assert ir.count("tg.winograd_conv") == 2, ir


class TwoBranches(nn.Module):
    """``relu(main(x) + shortcut(x))``: a ResNet block's end, both branches convolutions."""

    def __init__(self, main: nn.Module, shortcut: nn.Module):
        super().__init__()
        self.main, self.shortcut = main, shortcut

    def forward(self, x):
        return torch.relu(self.main(x) + self.shortcut(x))


@pytest.mark.parametrize("bias", [True, False])
def test_residual_joins_the_gemm_epilogue(bias):
    """fuse-gemm-addend: the residual add + ReLU after a packed GEMM run in its epilogue (the
    GEMM's fourth input after its bias, or its accumulator): an identity shortcut, and a
    shortcut convolution computed after the main branch (the later GEMM takes the other's
    output). 1e-5 like the rest of the file."""
    torch.manual_seed(0)
    identity = ConvAddRelu(nn.Conv2d(64, 64, 1, bias=bias)).eval()
    x, r = torch.randn(1, 64, 9, 9), torch.randn(1, 64, 9, 9)
    _check(identity, x, r)
    branches = TwoBranches(nn.Conv2d(32, 64, 1, bias=bias), nn.Conv2d(32, 64, 1, stride=2, bias=bias)).eval()
    branches.main = nn.Sequential(nn.Conv2d(32, 64, 1, stride=2, bias=bias), nn.Conv2d(64, 64, 1, bias=bias))
    xs = torch.randn(1, 32, 14, 14)
    _check(branches, xs)
    for model, args in ((identity, (x, r)), (branches, (xs,))):
        ir = tg.compile(model, args).ir("buf")
        assert "buf.bias_activation" not in ir and 'activation = "relu"' in ir, ir


def test_convolution_winograd_weights_follow_the_model():
    """The transformed weight is a load-time copy: `repack()` after changing the model's
    parameters in place brings it up to date, as for packed panels."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1)).eval()
    x = torch.randn(1, 16, 8, 8)
    fn = tg.compile(model, (x,))
    with torch.no_grad():
        model[0].weight.mul_(-2.0)
        expected = model(x)
    fn.repack()
    assert (fn(x) - expected).abs().max().item() <= ATOL


def _trained(bn: nn.modules.batchnorm._BatchNorm) -> nn.Module:
    with torch.no_grad():
        bn.running_mean.normal_(0.0, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_(1.0, 0.2)
        bn.bias.normal_(0.0, 0.2)
    return bn


@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_folds_into_the_convolution(bias):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=bias), _trained(nn.BatchNorm2d(8)), nn.ReLU())
    ir = _check(model, torch.randn(2, 3, 6, 6))
    assert "batch_norm" not in ir and "rsqrt" not in ir
    assert 'tg.weight "0.weight.bn_folded"' in ir and 'tg.weight "0.bias.bn_folded"' in ir
    assert '"1.running_mean"' not in ir and '"0.weight"' not in ir, "the unfolded weights leave the graph"


def test_batch_norm_folds_into_a_bf16_convolution():
    """A bf16 model's batch norm folds too, its folded weights rounded to bf16, so that the
    convolution stays one of bf16 operands (`matmul.bf16_operands_rhs`) and its rounding and ReLU
    join the GEMM (`fuse-gemm-elementwise`): one kernel. Its error against the float64 model is
    eager bfloat16's order (eager rounds the convolution's output before the batch norm, we the
    folded weights): within the low-precision rule, twice eager's plus 8e-3 (observed: 5.3e-3
    against eager's 4.6e-3, outputs up to 1.2)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), _trained(nn.BatchNorm2d(32)), nn.ReLU(), nn.Conv2d(32, 8, 1))
    model = model.eval().to(torch.bfloat16)
    x = torch.randn(2, 16, 9, 9).to(torch.bfloat16)
    fn = tg.compile(model, (x,))
    ir, buffers = fn.ir("tg"), fn.ir("buf")
    assert 'tg.weight "0.weight.bn_folded" : tensor<32x16x3x3xbf16>' in ir and "rsqrt" not in ir
    assert "} epilogue {" in buffers and buffers.count("buf.fused_elementwise") == 0
    with torch.no_grad():
        eager = model(x).double()
        ref = copy.deepcopy(model).double()(x.double())
    ours, theirs = (fn(x).double() - ref).abs().max().item(), (eager - ref).abs().max().item()
    assert ours <= 2 * theirs + 8e-3, f"error {ours:.3g} against float64, eager's {theirs:.3g}"


def test_batch_norm_alone_is_a_scale_and_shift():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), _trained(nn.BatchNorm1d(8)))
    ir = _check(model, torch.randn(4, 6))
    assert "bn_folded" not in ir


def test_batch_norm_after_a_shared_convolution_is_not_folded():
    """A convolution whose output has other users keeps its weights; the norm stays a norm."""

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), _trained(nn.BatchNorm2d(4))

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y

    torch.manual_seed(0)
    ir = _check(Twice(), torch.randn(1, 3, 6, 6))
    assert "bn_folded" not in ir


POOLS = {
    "max-2": (nn.MaxPool2d(2), (1, 2, 8, 6)),
    "max-3s2p1-ceil": (nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), (1, 2, 8, 7)),
    "max-dilated": (nn.MaxPool2d(2, stride=1, dilation=2), (1, 2, 6, 7)),
    "max1d": (nn.MaxPool1d(3, stride=2), (2, 3, 9)),
    "avg-2": (nn.AvgPool2d(2), (1, 2, 8, 6)),
    "avg-3s2p1": (nn.AvgPool2d(3, stride=2, padding=1), (1, 2, 8, 7)),
    "avg-no-pad-count-ceil": (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False, ceil_mode=True), (1, 2, 8, 7)),
    "avg-divisor": (nn.AvgPool2d(2, divisor_override=3), (1, 2, 4, 4)),
    "adaptive-1x1": (nn.AdaptiveAvgPool2d(1), (2, 4, 7, 5)),
    "adaptive-whole-bins": (nn.AdaptiveAvgPool2d((4, 2)), (1, 2, 8, 6)),
    "adaptive-overlapping": (nn.AdaptiveAvgPool2d((3, 4)), (1, 2, 8, 7)),
    "adaptive1d": (nn.AdaptiveAvgPool1d(3), (1, 2, 8)),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pooling(name):
    torch.manual_seed(0)
    pool, shape = POOLS[name]
    _check(pool, torch.randn(*shape))
    if name.startswith(("max", "avg")):  # fuse-im2col-reduce: each window reduced as it is read
        ir = tg.compile(pool, (torch.randn(*shape),)).ir("buf")
        assert "buf.reduce" not in ir and ir.count("reduce = ") == 1, ir


def test_max_pool_propagates_infinities():
    x = torch.randn(1, 1, 4, 4)
    x[0, 0, 0, 0] = float("inf")
    x[0, 0, 3, 3] = float("-inf")
    _check(nn.MaxPool2d(2), x, atol=0.0)


@pytest.mark.parametrize("path", ["plane", "tap-by-tap"])
def test_max_pool_propagates_nan_and_keeps_the_first_of_equal_zeros(path, monkeypatch):
    """NaN in any tap makes its windows NaN, on both paths (`window_reduce`: each window as it is
    written, from a padded plane on the stack; and the tap-by-tap planes, for a plane over
    `MAX_PLANE_BYTES`). Of -0.0 and +0.0 the plane path keeps the first in the window's
    row-major order, as torch.max_pool2d does (the tap-by-tap path's ``llvm.maximum`` takes +0.0)."""
    from tensor_graphs.codegen.llvm import window_reduce

    if path == "tap-by-tap":
        monkeypatch.setattr(window_reduce, "MAX_PLANE_BYTES", 0)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 11)
    x[0, 0, 0, 0] = x[0, 2, 4, 5] = x[1, 1, 8, 10] = float("nan")
    x[1, 0, 3:6, 3:6] = -1.0  # windows whose maximum is a zero: -0.0 first, then +0.0 (in other rows too)
    x[1, 0, 3, 4], x[1, 0, 4, 3], x[1, 0, 5, 5] = -0.0, 0.0, 0.0
    pool = nn.MaxPool2d(3, stride=2, padding=1).eval()
    fn = tg.compile(pool, (x,))
    got, expected = fn(x), pool(x)
    assert torch.equal(got.isnan(), expected.isnan()) and got.isnan().sum() == 4
    assert torch.equal(got.nan_to_num(), expected.nan_to_num())
    if path == "plane":
        assert torch.equal(got.signbit(), expected.signbit())


@pytest.mark.parametrize("threads", [1, 2])
def test_stem_max_pool_over_threads(threads):
    """ResNet-50's stem max pool (64 planes of 112 x 112, split among the threads), exact."""
    torch.manual_seed(0)
    before = tg.get_num_threads()
    tg.set_num_threads(threads)
    try:
        _check(nn.MaxPool2d(3, stride=2, padding=1), torch.randn(1, 64, 112, 112), atol=0.0)
    finally:
        tg.set_num_threads(before)


@pytest.mark.parametrize("groups", [1, 2, 8])
def test_group_norm(groups):
    torch.manual_seed(0)
    gn = nn.GroupNorm(groups, 8)
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()
    _check(gn, 3.0 + 2.0 * torch.randn(2, 8, 5, 3))


RESIZES = [
    dict(mode="nearest", scale_factor=2),
    dict(mode="nearest", scale_factor=3),
    dict(mode="nearest", size=(8, 11)),
    dict(mode="nearest", scale_factor=(1.5, 0.5)),
    *(dict(mode=m, align_corners=a, **s) for m in ("bilinear", "bicubic") for a in (False, True)
      for s in (dict(scale_factor=2), dict(size=(8, 11)), dict(size=(3, 4)), dict(scale_factor=2.3))),
]


@pytest.mark.parametrize("kw", RESIZES, ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
def test_resize(kw):
    torch.manual_seed(0)
    ir = _check(Fn(lambda x: F.interpolate(x, **kw)), torch.randn(2, 3, 5, 7))
    whole = kw["mode"] == "nearest" and kw.get("scale_factor") in (2, 3)
    assert ("tg.broadcast" in ir) == whole and ("tg.matmul" in ir) != whole


PADS = [((1, 2, 5, 6), (1, 2, 2, 1)), ((2, 3, 7), (3, 0)), ((1, 2, 5, 6), (0, 0, 4, 1))]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", PADS, ids=lambda v: "x".join(map(str, v)))
def test_pad_modes(mode, shape, pad):
    _check(Fn(lambda x: F.pad(x, pad, mode=mode)), torch.randn(*shape), atol=0.0)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_convolution_padding_modes(mode):
    torch.manual_seed(0)
    _check(nn.Conv2d(3, 4, 3, padding=1, padding_mode=mode), torch.randn(1, 3, 6, 5))


@pytest.mark.parametrize("layer", [nn.LSTM, nn.GRU, nn.RNN])
def test_recurrent_layers_are_rejected_by_name(layer):
    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = layer(4, 8, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    with pytest.raises(Exception, match=rf"recurrent layers \({layer.__name__}\) are not supported.*unrolled"):
        tg.compile(Wrap().eval(), (torch.randn(2, 5, 4),))
