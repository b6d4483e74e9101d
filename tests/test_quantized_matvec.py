"""Matrix-vector products over bf16 and int8 weight panels (`buf.quantized_matvec`, the variants
matmul.bf16_weights and matmul.int8_weights): the kernel must compute exactly the product of
the rounded weights, so it is checked against NumPy over those weights (float64) at 1e-5 of the
output's magnitude, on each target family, at 1 and 2 threads, with partial panels, K not a
multiple of the accumulator chains, a bias and activations. The rounding itself (the error
against the float32 weights) is what the tuner measures and holds to a tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.context import Context

import tensor_graphs as tg
from tensor_graphs.dialects.packing import (
    INT4_DOT_SCHEME,
    INT4_SCHEMES,
    Int4Scheme,
    PanelLayout,
    from_bf16,
    from_bf16_pairs,
    int4_dequantize,
    int4_quantize,
    int8_scales,
    to_bf16,
)
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.tuning.paths import kernel_paths, pin

ACTS = {"none": lambda y: y, "relu": lambda y: np.maximum(y, 0.0),
        "gelu_tanh": lambda y: 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))}
TORCH_ACTS = {"none": torch.nn.Identity(), "relu": torch.nn.ReLU(), "gelu_tanh": torch.nn.GELU(approximate="tanh")}


def rounded_weight(w: np.ndarray, fmt: str) -> np.ndarray:
    """The [N, K] weight as the panels hold it, in float64."""
    if fmt == "bf16":
        return from_bf16(to_bf16(w)).astype(np.float64)
    scales = int8_scales(w).astype(np.float64)
    q = np.clip(np.rint(w / scales[:, None]), -127, 127)
    return q * scales[:, None]


def _compile(model, x, variant):
    graph = import_model(model, (x,))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    gemms = [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"]
    assert gemms and all(variant in p.applicable for p in gemms)
    for p in gemms:
        pin(p.op, variant)
    return tg.compile_module(graph.module, graph.weights)


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
@pytest.mark.parametrize("rows,k,n,act,bias", [(1, 96, 200, "gelu_tanh", True), (3, 37, 64, "relu", False),
                                              (8, 130, 17, "none", True), (1, 768, 1000, "none", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_matvec_over_cheaper_weights(target, fmt, rows, k, n, act, bias, threads):
    torch.manual_seed(rows * 1000 + k)
    model = torch.nn.Sequential(torch.nn.Linear(k, n, bias=bias), TORCH_ACTS[act]).eval()
    x = torch.randn(rows, k)
    tg.set_num_threads(threads)
    try:
        fn = _compile(model, x, f"matmul.{fmt}_weights")
        got = fn(x.numpy())
    finally:
        tg.set_num_threads(1)
    assert "buf.quantized_matvec" in fn.ir("buf")
    w = model[0].weight.detach().numpy()
    y = x.numpy().astype(np.float64) @ rounded_weight(w, fmt).T
    if bias:
        y += model[0].bias.detach().numpy()
    expected = ACTS[act](y)
    scale = max(np.abs(expected).max(), 1.0)
    assert np.abs(got - expected).max() <= 1e-5 * scale
    # and the rounding error against the float32 weights is what these formats give
    with torch.no_grad():
        error = np.abs(got - model(x).numpy()).max() / np.abs(model(x).numpy()).max()
    assert error <= (2e-2 if fmt == "int8" else 5e-3)


def test_int8_panels_round_trip():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    w[3] = 0.0  # a zero row: scale 1, zeros
    q = PanelLayout("w", 16, True, "int8").pack(w)
    s = PanelLayout("w", 16, True, "int8scales").pack(w)
    assert q.dtype == np.int8 and q.shape == (3, 24, 16) and s.shape == (3, 16)
    dequant = (q.astype(np.float64) * s[:, None, :]).transpose(0, 2, 1).reshape(48, 24)[:40]
    assert np.array_equal(dequant, rounded_weight(w, "int8"))
    assert np.all(s.reshape(-1)[40:] == 0)
    b = PanelLayout("w", 16, False, "bf16").pack(w.T.copy())
    # each row of 16 as 8 words: column j in the high half, column j + 8 in the low half
    words = b.view(np.uint32)
    assert int(words[0, 5, 2]) >> 16 == int(to_bf16(w[2:3, 5])[0]) and int(words[0, 5, 2]) & 0xFFFF == int(to_bf16(w[10:11, 5])[0])
    rows = from_bf16(from_bf16_pairs(b))
    assert np.array_equal(rows.transpose(0, 2, 1).reshape(48, 24)[:40], from_bf16(to_bf16(w)))


def test_bf16_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, np.inf, np.nan], np.float32)
    got = from_bf16(to_bf16(x))
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == 1.0 + 2**-6 and got[3] == -2.5 and got[4] == np.inf
    assert np.isnan(got[5])


# --------------------------------------------------------------------------- AVX512-BF16 dot products

BF16_DOT_TARGETS = ("sapphirerapids", "znver4")


def _bf16_dot_graph(rows: int, k: int, n: int, act: str, bias: bool, target: str | None):
    torch.manual_seed(rows * 1000 + k)
    model = torch.nn.Sequential(torch.nn.Linear(k, n, bias=bias), TORCH_ACTS[act]).eval()
    x = torch.randn(rows, k)
    graph = import_model(model, (x,))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    if target is not None:
        from tensor_graphs.target import Target, record

        record(graph.module, Target.named(target))
    return model, x, graph


def test_bf16_k_pairs_round_trip():
    """The bf16k panels pair rows 2kk and 2kk+1 of each column in one word (low, high), with a
    zero row for an odd K: what vdpbf16ps multiplies pairwise."""
    from tensor_graphs.dialects.packing import from_bf16_k_pairs

    rng = np.random.default_rng(1)
    w = rng.standard_normal((40, 25)).astype(np.float32)  # [N, K], K odd
    packed = PanelLayout("w", 16, True, "bf16k").pack(w)
    assert packed.dtype == np.uint16 and packed.shape == (3, 13, 32)
    assert PanelLayout.from_slot_name(PanelLayout("w", 16, True, "bf16k").slot_name) == PanelLayout("w", 16, True, "bf16k")
    words = packed.view(np.uint32)  # [3, 13, 16]
    assert int(words[1, 4, 3]) & 0xFFFF == int(to_bf16(w[19:20, 8])[0]) and int(words[1, 4, 3]) >> 16 == int(to_bf16(w[19:20, 9])[0])
    assert np.all(words[:, 12] >> 16 == 0), "the odd K's last pair holds a zero"
    rows = from_bf16(from_bf16_k_pairs(packed, 25))
    assert np.array_equal(rows.transpose(0, 2, 1).reshape(48, 25)[:40], from_bf16(to_bf16(w)))


def test_bf16_dot_applies_only_where_the_target_has_it():
    _, _, graph = _bf16_dot_graph(1, 64, 100, "none", True, None)
    paths = [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"][0]
    from tensor_graphs.target import Target

    if "avx512bf16" in Target.host().extensions:
        assert "matmul.bf16_dot" in paths.applicable
    else:
        assert ("matmul.bf16_dot", "the target (host) has no AVX512-BF16 dot products") in paths.rejected
    _, _, graph = _bf16_dot_graph(1, 64, 100, "none", True, "sapphirerapids")
    assert "matmul.bf16_dot" in [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"][0].applicable


@pytest.mark.parametrize("cpu", BF16_DOT_TARGETS)
def test_bf16_dot_compiles_to_vdpbf16ps(cpu):
    """On a CPU with AVX512-BF16 (compiled for it here, whatever this CPU is), the kernel's inner
    loop is vdpbf16ps on zmm registers, 4 chains per 16 columns, and no library call."""
    from tensor_graphs.codegen.llvm.jit import _target_machine, to_llvm_ir
    from tensor_graphs.passes import build_pipeline as pipeline
    from tensor_graphs.target import Target

    _, _, graph = _bf16_dot_graph(2, 67, 100, "relu", True, cpu)
    for p in kernel_paths(graph.module):
        if p.name == "tg.matmul":
            pin(p.op, "matmul.bf16_dot")
    pipeline("convert-tensor-to-buffer{threads=2},plan-memory,convert-buffer-to-llvm").apply(Context(), graph.module)
    import llvmlite.binding as llvm

    ir = to_llvm_ir(graph.module)
    assert "llvm.x86.avx512bf16.dpbf16ps.512" in ir
    mod = llvm.parse_assembly(ir)
    mod.verify()
    asm = _target_machine(2, Target.named(cpu)).emit_assembly(mod)
    dots = [line for line in asm.splitlines() if "vdpbf16ps" in line]
    assert len(dots) >= 4 * 4 and all("zmm" in line for line in dots)  # 4 chains x 64 columns / 16


@pytest.mark.parametrize("rows,k,n,act,bias", [(1, 96, 200, "gelu_tanh", True), (3, 37, 64, "relu", False), (1, 768, 1000, "none", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_dot_matvec_runs_right(rows, k, n, act, bias, threads, monkeypatch):
    """The product of the bf16-rounded weights and activations, accumulated in float32, at 1e-5
    of the output's magnitude; the error against float32 within what the two roundings give. On
    a CPU with AVX512-BF16 this runs vdpbf16ps; elsewhere the variant is offered anyway (as if
    the target had it) and the kernel runs with the instruction emulated (`bf16_dot.dot_pairs`): the
    packing, the pairing of the activations and the epilogue are checked on every CPU."""
    import dataclasses

    from tensor_graphs.lowering.tensor_to_buffer import kernels
    from tensor_graphs.target import Target

    host = Target.host()
    if "avx512bf16" not in host.extensions:
        monkeypatch.setattr(kernels, "_target_of", lambda op: dataclasses.replace(host, extensions=host.extensions | {"avx512bf16"}))
    model, x, graph = _bf16_dot_graph(rows, k, n, act, bias, None)
    for p in kernel_paths(graph.module):
        if p.name == "tg.matmul":
            pin(p.op, "matmul.bf16_dot")
    tg.set_num_threads(threads)
    try:
        fn = tg.compile_module(graph.module, graph.weights)
        got = fn(x.numpy())
    finally:
        tg.set_num_threads(1)
    xr = from_bf16(to_bf16(x.numpy())).astype(np.float64)
    y = xr @ rounded_weight(model[0].weight.detach().numpy(), "bf16").T
    if bias:
        y += model[0].bias.detach().numpy()
    expected = ACTS[act](y)
    assert np.abs(got - expected).max() <= 1e-5 * max(np.abs(expected).max(), 1.0)
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.abs(got - ref).max() / np.abs(ref).max() <= 1e-2


def test_panels_of_an_odd_count_of_vectors_are_refused_with_the_reason():
    """The bf16 and int8 panels pair their halves: N = 48 on AVX-512 (panels of 3 vectors) is
    refused when the paths are listed (it failed in the kernel, after the tuner had chosen it)."""
    _, _, graph = _bf16_dot_graph(2, 64, 48, "none", False, "x86-64-v4")
    paths = [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"][0]
    reason = "panels of 48 columns on x86-64-v4 are not an even number of vectors of 16 floats"
    assert dict(paths.rejected)["matmul.bf16_weights"] == reason == dict(paths.rejected)["matmul.int8_weights"]
    assert dict(paths.rejected)["matmul.int4_weights"] == reason == dict(paths.rejected)["matmul.int4zp_weights"]
    _, _, graph = _bf16_dot_graph(2, 64, 64, "none", False, "x86-64-v4")
    assert {"matmul.bf16_weights", "matmul.int8_weights"} <= set(
        [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"][0].applicable)


INT4 = {"matmul.int4_weights": Int4Scheme(32, False), "matmul.int4zp_weights": Int4Scheme(128, True)}


@pytest.mark.parametrize("variant", list(INT4))
@pytest.mark.parametrize("rows,k,n,act,bias", [(1, 96, 200, "gelu_tanh", True), (3, 300, 64, "relu", False),
                                              (8, 130, 17, "none", True), (1, 768, 1000, "none", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_matvec_over_int4_weights(target, variant, rows, k, n, act, bias, threads):
    """The int4 kernel computes the product of the dequantised weights: against NumPy in float64
    at 2e-6 of the output's magnitude (float32 sums of the codes, the zero point taken out per
    group: observed <= 4.3e-7); full groups and a tail of K (96, 130, 300 by 32 and 128)."""
    scheme = INT4[variant]
    torch.manual_seed(rows * 1000 + k)
    model = torch.nn.Sequential(torch.nn.Linear(k, n, bias=bias), TORCH_ACTS[act]).eval()
    x = torch.randn(rows, k)
    tg.set_num_threads(threads)
    try:
        fn = _compile(model, x, variant)
        got = fn(x.numpy())
    finally:
        tg.set_num_threads(1)
    assert f'format = "{scheme.name}"' in fn.ir("buf")
    w = model[0].weight.detach().numpy()
    y = x.numpy().astype(np.float64) @ int4_dequantize(*int4_quantize(w, scheme), scheme.group).T
    if bias:
        y += model[0].bias.detach().numpy()
    expected = ACTS[act](y)
    assert np.abs(got - expected).max() <= 2e-6 * max(np.abs(expected).max(), 1.0)
    with torch.no_grad():  # and the weights' rounding is int4's (observed 5-8% of the largest output)
        ref = model(x).numpy()
    assert 1e-3 <= np.abs(got - ref).max() / np.abs(ref).max() <= 0.15


@pytest.mark.parametrize("scheme", INT4_SCHEMES, ids=lambda s: s.name)
def test_int4_quantisation_and_its_panels(scheme):
    """Codes and zero points in 0..15; each weight within half a step of its code but the clipped
    ones (within a step, as llama.cpp's Q4_0 and min-max GPTQ); a zero
    group is all zeros; the panels hold column j in the low nibble, j + NR/2 in the high one."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 200)).astype(np.float32)
    w[3] = 0.0
    codes, scales, zeros = int4_quantize(w, scheme)
    assert codes.max() <= 15 and zeros.max() <= 15 and codes.shape == w.shape
    assert scales.shape == zeros.shape == (40, -(-200 // scheme.group))
    step = np.abs(from_bf16(scales))[:, np.arange(200) // scheme.group]
    error = np.abs(int4_dequantize(codes, scales, zeros, scheme.group) - w)
    # rounded to the nearest code: half a step, but for the codes clipped at 15 (the group's
    # largest magnitude's opposite, symmetric; the top of the range once the zero point is
    # rounded, with zero points): one step, plus the scale's rounding to bf16 (2^-8 relative)
    # times the codes (8, 15) (observed 1.011 and 1.05 steps)
    assert (error <= step * (1 + (15 if scheme.zero_points else 8) * 2**-8) + 1e-7).all()
    assert (error <= 0.5 * step * (1 + 2**-7) + 1e-7).mean() >= 0.99
    assert (error[3] == 0).all() and (from_bf16(scales[3]) == 0).all()
    if not scheme.zero_points:
        assert (zeros == 8).all()
    nr = 16
    layout = {part: PanelLayout("w", nr, True, part) for part in scheme.parts}
    packed = layout[scheme.name].pack(w)
    assert packed.dtype == np.uint8 and packed.shape == (3, 200, nr // 2)
    unpacked = np.concatenate([packed & 15, packed >> 4], axis=-1)  # [panels, K, nr]
    assert (unpacked.transpose(0, 2, 1).reshape(48, 200)[:40] == codes).all()
    assert (unpacked.transpose(0, 2, 1).reshape(48, 200)[40:] == 0).all()
    s = layout[f"{scheme.name}scales"].pack(w)
    assert s.dtype == np.uint16 and (s.transpose(0, 2, 1).reshape(48, -1)[:40] == scales).all()
    if scheme.zero_points:
        z = layout[f"{scheme.name}zeros"].pack(w)
        assert (z.transpose(0, 2, 1).reshape(48, -1)[:40] == zeros).all()
    assert PanelLayout.from_slot_name(layout[scheme.name].slot_name) == layout[scheme.name]


class _Residual(torch.nn.Module):
    """``fc(x) + r``: fuse-gemm-addend makes ``r`` the product's accumulator (a transformer's
    residual after its down or output projection)."""

    def __init__(self, k: int, n: int):
        super().__init__()
        self.fc = torch.nn.Linear(k, n, bias=False)

    def forward(self, x, r):
        return self.fc(x) + r


@pytest.mark.parametrize("variant", ["matmul.bf16_weights", "matmul.int8_weights", *INT4])
def test_a_residual_is_the_accumulator_of_the_cheaper_matvec(variant):
    """An accumulator of the output's shape (not only a bias [N]) is added in the epilogue, row
    by row: against the product of the rounded weights plus ``r`` at 2e-6 of the magnitude."""
    torch.manual_seed(0)
    model, x, r = _Residual(96, 200).eval(), torch.randn(3, 96), torch.randn(3, 200)
    graph = import_model(model, (x, r))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    gemm = next(p for p in kernel_paths(graph.module) if p.name == "tg.matmul")
    assert variant in gemm.applicable, dict(gemm.rejected).get(variant)
    pin(gemm.op, variant)
    fn = tg.compile_module(graph.module, graph.weights)
    got = fn(x.numpy(), r.numpy())
    assert "memref<3x200xf32>) outs(" in next(ln for ln in fn.ir("buf").splitlines() if "buf.quantized_matvec" in ln)
    w = model.fc.weight.detach().numpy()
    fmt = variant.split(".")[1].removesuffix("_weights")
    if fmt in ("int4", "int4zp"):
        scheme = INT4[variant]
        rounded = int4_dequantize(*int4_quantize(w, scheme), scheme.group)
    else:
        rounded = rounded_weight(w, fmt)
    expected = x.numpy().astype(np.float64) @ rounded.T + r.numpy()
    assert np.abs(got - expected).max() <= 2e-6 * np.abs(expected).max()


def q8_rows(x: np.ndarray) -> np.ndarray:
    """The rows of ``x`` as the int4-dot kernel quantises them (int8 per group of 32 along K,
    scale max|x| / 127, rounded half to even), in float64."""
    out = np.zeros(x.shape, np.float64)
    for g in range(0, x.shape[1], 32):
        block = x[:, g:g + 32].astype(np.float32)
        peak = np.abs(block).max(axis=1, keepdims=True)
        inverse = np.where(peak > 0, np.float32(127.0) / np.where(peak > 0, peak, 1), 0).astype(np.float32)
        out[:, g:g + 32] = np.clip(np.rint(block * inverse), -127, 127) * (peak * np.float32(1 / 127)).astype(np.float64)
    return out


#: the int4-dot kernel's targets: the families (x86-64: refused), and CPUs with VNNI (run where this CPU can)
INT4_DOT_TARGETS = ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "cascadelake", "alderlake"]


@pytest.mark.parametrize("cpu", INT4_DOT_TARGETS)
@pytest.mark.parametrize("rows,k,n,act,bias", [(1, 96, 200, "gelu_tanh", True), (3, 300, 64, "relu", False),
                                              (8, 130, 17, "none", True), (1, 3072, 768, "none", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_int4_dot_matvec(cpu, rows, k, n, act, bias, threads, monkeypatch):
    """int4 weights (Q4_0) times the rows quantised to int8 per 32 (Q8_0), by vpdpbusd or its
    pmaddubsw emulation: against NumPy in float64 over both roundings at 2e-6 of the magnitude
    (exact integer sums, float32 scaling: observed <= 2.7e-7), K with a tail (96, 130, 300)."""
    from tensor_graphs.target import Target

    model, x, graph = _bf16_dot_graph(rows, k, n, act, bias, cpu)
    paths = next(p for p in kernel_paths(graph.module) if p.name == "tg.matmul")
    if cpu == "x86-64":
        assert ("matmul.int4_dot", "the target (x86-64) has no byte dot products (SSSE3's pmaddubsw)") in paths.rejected
        return
    if Target.named(cpu).missing_on_host():
        pytest.skip(f"this CPU cannot run {cpu}'s code (its instructions: test_int4_dot_compiles_to_its_instructions)")
    monkeypatch.setenv("TG_TARGET", cpu)
    pin(paths.op, "matmul.int4_dot")
    tg.set_num_threads(threads)
    try:
        got = tg.compile_module(graph.module, graph.weights)(x.numpy())
    finally:
        tg.set_num_threads(1)
    w = model[0].weight.detach().numpy()
    y = q8_rows(x.numpy()) @ int4_dequantize(*int4_quantize(w, INT4_DOT_SCHEME), 32).T
    if bias:
        y += model[0].bias.detach().numpy()
    expected = ACTS[act](y)
    assert np.abs(got - expected).max() <= 2e-6 * max(np.abs(expected).max(), 1.0)
    with torch.no_grad():  # the roundings: int4's, mostly (observed 5-8% of the largest output)
        ref = model(x).numpy()
    assert 1e-3 <= np.abs(got - ref).max() / np.abs(ref).max() <= 0.15


@pytest.mark.parametrize("cpu, instruction", [("cascadelake", "vpdpbusd\t%zmm"), ("alderlake", "{vex}\tvpdpbusd\t%ymm"),
                                              ("x86-64-v3", "vpmaddubsw\t%ymm"), ("x86-64-v4", "vpmaddubsw\t%zmm")])
def test_int4_dot_compiles_to_its_instructions(cpu, instruction):
    """VNNI where the CPU has it (AVX512-VNNI on zmm, AVX-VNNI on ymm), else pmaddubsw: checked in
    the code compiled for each, from any host."""
    import llvmlite.binding as llvm

    from tensor_graphs.codegen.llvm.jit import _target_machine, to_llvm_ir
    from tensor_graphs.passes import build_pipeline as pipeline
    from tensor_graphs.target import Target

    _, _, graph = _bf16_dot_graph(1, 256, 128, "none", False, cpu)
    pin(next(p for p in kernel_paths(graph.module) if p.name == "tg.matmul").op, "matmul.int4_dot")
    pipeline("convert-tensor-to-buffer{threads=1},plan-memory,convert-buffer-to-llvm").apply(Context(), graph.module)
    mod = llvm.parse_assembly(to_llvm_ir(graph.module))
    mod.verify()
    asm = _target_machine(2, Target.named(cpu)).emit_assembly(mod)
    assert instruction in asm
    assert ("vpmaddubsw" in asm) == ("vpmaddubsw" in instruction)


def test_int4_dot_panels_and_a_nan():
    """The int4dot panels: row o of a panel holds K rows 8o..8o+7, column j in bytes 4j..4j+3, byte t
    with row 8o+t low and 8o+4+t high; a NaN in a row's group reaches that row's outputs."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 100)).astype(np.float32)
    packed = PanelLayout("w", 16, True, "int4dot").pack(w)
    assert packed.shape == (3, 13, 64) and packed.dtype == np.uint8
    codes = int4_quantize(w, INT4_DOT_SCHEME)[0]
    four = packed.reshape(3, 13, 16, 4)  # [panel, octet, column, t]
    unpacked = np.zeros((3, 16, 104), np.uint8)
    for t in range(4):
        unpacked[:, :, t::8] = (four[..., t] & 15).transpose(0, 2, 1)
        unpacked[:, :, 4 + t::8] = (four[..., t] >> 4).transpose(0, 2, 1)
    assert (unpacked.reshape(48, 104)[:40, :100] == codes).all() and (unpacked.reshape(48, 104)[:, 100:] == 0).all()
    model, x, graph = _bf16_dot_graph(2, 64, 32, "none", True, None)
    pin(next(p for p in kernel_paths(graph.module) if p.name == "tg.matmul").op, "matmul.int4_dot")
    x[1, 40] = float("nan")
    got = tg.compile_module(graph.module, graph.weights)(x.numpy())
    assert np.isfinite(got[0]).all() and np.isnan(got[1]).all()
