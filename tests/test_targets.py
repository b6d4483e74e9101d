"""The target model (`tensor_graphs.target`) and the kernels compiled for each target family.

Every numerics test here runs once per family of `conftest.TARGET_FAMILIES` (the `target`
fixture: ``x86-64`` (SSE2, 4 float lanes), ``x86-64-v3`` (AVX2, 8), ``x86-64-v4`` (AVX-512, 16)
where this CPU has it), so that code for a target other than the host's is checked on the
machine at hand. The shapes derive from each target's own register tile, so that the tails they
exercise are that target's tails. Tolerances are those of the kernel tests they extend:
packed GEMM rtol 1e-5 / atol 1e-5 * sqrt(K); norms, softmax, attention rtol = atol = 1e-5;
the fused gelu_tanh chain 2e-6; model logits as in `test_gpt2` / `test_qwen3`.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from conftest import SMALL_QWEN3, LogitsOnly, check_logits, parse
from tensor_graphs.target import CPUS, LEVELS, TARGET_ATTR, Caches, Target, TargetError, _caches, of_module, record, resolve
from test_codegen_kernels import GELU_TANH_BODY, kernel_module
from test_codegen_kernels import run_kernel as run_typed_kernel
from test_codegen_llvm import compile_text, run, run_kernel
from test_codegen_nn import attention_module, attention_ref, layer_norm_ref, rms_norm_ref, softmax_ref
from test_packed_gemm import check, packed_module

transformers = pytest.importorskip("transformers")
rng = np.random.default_rng(12)
RTOL = ATOL = 1e-5


def rand(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def vector(target: Target) -> str:
    return f"<{target.float_lanes} x float>"


# --------------------------------------------------------------------------- the model


def test_levels_and_their_vector_shapes():
    generic, v3, v4 = (Target.named(n) for n in ("x86-64", "x86-64-v3", "x86-64-v4"))
    assert (generic.float_lanes, generic.vector_registers, generic.fma, generic.family) == (4, 16, False, "sse")
    assert (v3.float_lanes, v3.vector_registers, v3.fma, v3.family) == (8, 16, True, "avx2")
    assert (v4.float_lanes, v4.vector_registers, v4.fma, v4.family) == (16, 32, True, "avx512")
    # BLIS's sgemm tiles: 6 x 16 on AVX2 (12 accumulators of 16 ymm), 6 x 64 on AVX-512 (24 of 32 zmm)
    assert v3.gemm_tile() == (6, 2) and v3.panel_columns == 16
    assert v4.gemm_tile() == (6, 4) and v4.panel_columns == 64
    assert generic.gemm_tile() == (6, 2) and generic.panel_columns == 8
    for t in (generic, v3, v4):
        for vectors in range(1, t.gemm_tile()[1] + 1):
            mr, v = t.gemm_tile(vectors)
            assert mr * v + v + 1 <= t.vector_registers, (t.name, vectors)  # accumulators + panel row + broadcast


def test_panel_width_follows_the_target():
    v3, v4 = Target.named("x86-64-v3"), Target.named("x86-64-v4")
    ns = (1, 16, 17, 32, 48, 63, 64, 65, 50257)
    assert [v4.panel_columns_for(n) for n in ns] == [16, 16, 32, 32, 48, 64, 64, 64, 64]
    assert [v3.panel_columns_for(n) for n in ns] == [8, 16, 16, 16, 16, 16, 16, 16, 16]


def test_attention_blocks_follow_the_l2():
    from dataclasses import replace

    from tensor_graphs.lowering.tensor_to_buffer.scratch import attention_block, attention_tiles

    host = Target.named("x86-64-v3")
    with_l2 = lambda kib: replace(host, caches=replace(host.caches, l2=kib << 10))  # noqa: E731
    # (q, k, v blocks + scores + acc + kt) * 4 bytes <= L2 / 2, the largest multiple of 16 up to 64
    assert [attention_block(64, 64, with_l2(kib)) for kib in (1024, 512, 192, 128, 64, 16)] == [64, 64, 64, 32, 16, 16]
    assert [attention_block(d, d, with_l2(512)) for d in (64, 128, 256)] == [64, 64, 48]  # wide heads: smaller
    t = attention_tiles((1, 2, 130, 64), (1, 2, 7, 64), (1, 2, 7, 64), with_l2(128))
    assert (t.br, t.bc) == (32, 7)  # clamped to the sequence


def test_gpt2_with_small_attention_blocks(gpt2_two_layers):
    """A target with a 32 KiB L2 gets 16 x 16 attention tiles: seq 40 crosses three query and key
    blocks (the last a partial one) under the causal mask."""
    from dataclasses import replace

    host = Target.host()
    small = replace(host, caches=replace(host.caches, l2=32 << 10))
    ids = torch.randint(0, 301, (1, 40), generator=torch.Generator().manual_seed(5))
    fn = tg.compile(gpt2_two_layers, (ids,), target=small)
    check_logits(gpt2_two_layers, fn, ids, 1e-4)
    assert "l2 = 32768" in fn.ir("buf")


def test_cpu_names_carry_their_level_and_extensions():
    spr = Target.named("sapphirerapids")
    assert spr.level == "x86-64-v4" and {"amx-tile", "avx512bf16", "avx512vnni"} <= spr.extensions
    assert Target.named("znver3").level == "x86-64-v3" and Target.named("znver3").llvm_cpu == "znver3"
    assert all(level in LEVELS for level, _ in CPUS.values())


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(TargetError, match=r"unknown target 'pentium4'.*x86-64-v3.*znver3"):
        Target.named("pentium4")
    with pytest.raises(TypeError, match="must be a name"):
        resolve(3)  # type: ignore[arg-type]


def test_tg_target_environment_variable(monkeypatch):
    monkeypatch.setenv("TG_TARGET", "x86-64-v2")
    assert resolve(None).name == "x86-64-v2" and resolve("x86-64").name == "x86-64"
    monkeypatch.delenv("TG_TARGET")
    assert resolve(None).name == "host"


def test_host_is_detected():
    host = Target.host()
    assert host.level in LEVELS and host.cores >= 1 and host.caches.l1d > 0 and host.host_features
    assert host.missing_on_host() == [] and not Target.named(host.level).missing_on_host()
    assert host.describe().startswith(f"host (cpu {host.llvm_cpu}, {host.level}")


def test_amx_only_where_linux_lends_its_state(monkeypatch):
    """A CPU with AMX whose kernel refuses the tile state (arch_prctl, before Linux 5.16) is a
    host without AMX: its extensions and LLVM features drop amx-*, so no AMX code is made for it
    (it would die of SIGILL at the first tile instruction)."""
    import llvmlite.binding as llvm

    from tensor_graphs import target as target_module

    real = llvm.get_host_cpu_features

    def with_amx():
        features = real()
        for f in ("amx-tile", "amx-bf16", "amx-int8"):
            features[f] = True
        return features

    monkeypatch.setattr(llvm, "get_host_cpu_features", with_amx)
    monkeypatch.setattr(target_module, "amx_state_permitted", lambda: False)
    refused = target_module._host_target.__wrapped__()  # (the cached host target is not this one)
    assert not {e for e in refused.extensions if e.startswith("amx")}
    assert "+amx" not in refused.host_features and "-amx-tile" in refused.host_features
    monkeypatch.setattr(target_module, "amx_state_permitted", lambda: True)
    assert {"amx-tile", "amx-bf16", "amx-int8"} <= target_module._host_target.__wrapped__().extensions


def test_caches_from_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"), ("3", "Unified", "105M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
        (d / "coherency_line_size").write_text("64\n")
    assert _caches(tmp_path) == Caches(48 << 10, 2 << 20, 105 << 20, 64)
    assert _caches(tmp_path / "absent") == Caches()


def test_module_records_its_target():
    from xdsl.dialects.builtin import ModuleOp

    module = ModuleOp([])
    record(module, Target.named("znver3"))
    assert TARGET_ATTR in module.attributes
    again = of_module(module)
    assert (again.name, again.llvm_cpu, again.level) == ("znver3", "znver3", "x86-64-v3")
    fresh = ModuleOp([])
    assert of_module(fresh, "x86-64").name == "x86-64" and of_module(fresh).name == "x86-64"  # recorded once


def test_code_for_a_cpu_this_one_is_not_is_refused():
    missing = [n for n in ("x86-64-v4", "sapphirerapids") if Target.named(n).missing_on_host()]
    if not missing:
        pytest.skip("this CPU runs every target named here")
    model = torch.nn.Linear(8, 8).eval()
    with pytest.raises(TargetError, match=rf"target {missing[0]} needs .* which this CPU .* lacks"):
        tg.compile(model, (torch.randn(2, 8),), target=missing[0])


def test_a_lowered_module_keeps_its_target():
    model = torch.nn.Linear(20, 40).eval()
    fn = tg.compile(model, (torch.randn(3, 20),), target="x86-64")
    buf_ir = fn.ir("buf")
    assert 'tg.target = {name = "x86-64"' in buf_ir and "memref<5x20x8xf32>" in buf_ir  # 8-column panels
    with pytest.raises(ValueError, match="already at the buf level, lowered for target x86-64"):
        tg.compile_module(parse(buf_ir), target="x86-64-v3")


# --------------------------------------------------------------------------- kernels, per target


def gemm_shapes(target: Target) -> list[tuple[int, int, int]]:
    """(M, K, N) around the target's register tiles: one tile, a tile and a row, two tiles and a
    tail, for the widest panel and for each narrower one; a panel and a column; a matrix-vector
    product with a partial last panel; odd K throughout."""
    lanes = target.float_lanes
    mr, vectors = target.gemm_tile()
    nr = target.panel_columns
    shapes = [(1, 37, 3 * nr + 5), (mr, 32, nr), (mr + 1, 7, nr + 1), (2 * mr + 1, 5, 2 * nr + 2), (3, 1, nr - 1)]
    for v in range(1, vectors):
        mr_v = target.gemm_tile(v)[0]
        shapes += [(mr_v, 9, v * lanes), (2 * mr_v + 3, 17, v * lanes - 1)]
    return shapes


@pytest.mark.parametrize("transposed", [True, False], ids=["w[N,K]", "w[K,N]"])
def test_packed_gemm_tails(target, transposed):
    for m, k, n in gemm_shapes(target):
        a = rand(m, k)
        w = rand(n, k) if transposed else rand(k, n)
        native = compile_text(packed_module((m, k), w.shape, transposed, (m, n)))
        (out,) = run(native, [a], {"w": w})
        check(out, a.astype(np.float64) @ (w.T if transposed else w).astype(np.float64), k)
        assert vector(target) in native.llvm_ir, (m, k, n)
        fused(target, native.llvm_ir)


def fused(target: Target, ir: str) -> None:
    """FMAs where the target has them; else a multiply and an add (never libm's fmaf per element)."""
    assert ("@llvm.fma" in ir) == target.fma and "fmaf" not in ir


def test_packed_gemm_epilogue(target):
    m, k, n = 2 * target.gemm_tile()[0] + 1, 33, 2 * target.panel_columns + 3
    a, w, bias = rand(m, k), rand(n, k), rand(n)
    native = compile_text(packed_module((m, k), w.shape, True, (m, n), (n,), '{beta = 1.0 : f32, activation = "gelu"}'))
    (out,) = run(native, [a, bias], {"w": w})
    pre = (a.astype(np.float64) @ w.T.astype(np.float64) + bias).astype(np.float32)
    from tensor_graphs.dialects.functions import apply_unary

    np.testing.assert_allclose(out, apply_unary("gelu", pre), rtol=2e-5, atol=2e-5 * np.sqrt(k))


def test_packed_gemm_k_blocks(target):
    """K over several K blocks of the target's size (`Target.gemm_k_block`): the first from zeros,
    the middle ones (a loop) and the last (alpha, bias, activation) from the sums stored so far;
    rows in two tiles and a tail, a partial last panel (one K block: its rows live in a stack tile)."""
    from tensor_graphs.dialects.functions import apply_unary

    mr, nr = target.gemm_tile()[0], target.panel_columns
    m, k, n = 2 * mr + 1, 3 * target.gemm_k_block(nr) + 37, 2 * nr + 3
    a, w, bias = rand(m, k), rand(n, k), rand(n)
    attrs = '{alpha = 0.5 : f32, beta = 1.0 : f32, activation = "gelu"}'
    native = compile_text(packed_module((m, k), w.shape, True, (m, n), (n,), attrs))
    (out,) = run(native, [a, bias], {"w": w})
    pre = (0.5 * (a.astype(np.float64) @ w.T.astype(np.float64)) + bias).astype(np.float32)
    np.testing.assert_allclose(out, apply_unary("gelu", pre), rtol=2e-5, atol=2e-5 * np.sqrt(k))


@pytest.mark.parametrize("m,k_block", [(3, 7), (20, 50), (20, 1)])
def test_packed_gemm_k_block_attribute(target, m, k_block):
    """``tg.k_block`` on the op sets the K block (a tuner's knob), at any row count: K = 50 in
    blocks of at most 7 is 8 balanced blocks (7 x 7 + 1); a block of 50 or more is one pass."""
    k, n = 50, target.panel_columns + 1
    a, w = rand(m, k), rand(k, n)
    native = compile_text(packed_module((m, k), w.shape, False, (m, n), attrs=f"{{tg.k_block = {k_block} : i64}}"))
    (out,) = run(native, [a], {"w": w})
    check(out, a.astype(np.float64) @ w.astype(np.float64), k)


def test_packed_gemm_k_block_must_be_positive():
    from tensor_graphs.codegen.llvm.kernels import LoweringError

    with pytest.raises(LoweringError, match="tg.k_block must be positive, got 0"):
        compile_text(packed_module((4, 8), (8, 16), False, (4, 16), attrs="{tg.k_block = 0 : i64}"))


ATTENTION = {
    # name: (B, H, Hkv, Sq, Sk, D, Dv, causal)
    "blocks_plus_one": (1, 2, 2, 65, 65, 8, 8, False),
    "causal_gqa": (1, 4, 2, 37, 37, 64, 64, True),
    "decode": (1, 2, 2, 1, 70, 16, 16, True),
}


@pytest.mark.parametrize("case", list(ATTENTION))
def test_attention(target, case):
    bsz, h, hkv, sq, sk, d, dv, causal = ATTENTION[case]
    q, k, v = rand(bsz, h, sq, d), rand(bsz, hkv, sk, d), rand(bsz, hkv, sk, dv)
    mask = (rng.random((sq, sk)) < 0.2).astype(np.float32) * -1e9 if not causal else None
    native = compile_text(attention_module(q.shape, k.shape, v.shape, None if mask is None else mask.shape, 0.25, causal))
    out = run(native, [q, k, v] + ([mask] if mask is not None else []))[0]
    np.testing.assert_allclose(out, attention_ref(q, k, v, mask, 0.25, causal), rtol=RTOL, atol=ATOL)
    assert vector(target) in native.llvm_ir


@pytest.mark.parametrize("shape", [(3, 37), (130, 768)])
def test_norms_and_softmax(target, shape):
    x, w, b = rand(*shape) * 2 + 1, rand(shape[-1]), rand(shape[-1])
    out = run_kernel("layer_norm", [x, w, b], shape, "{eps = 1.000000e-05 : f32}")
    np.testing.assert_allclose(out, layer_norm_ref(x, w, b, 1e-5), rtol=RTOL, atol=ATOL)
    out = run_kernel("rms_norm", [x, w], shape, "{eps = 1.000000e-06 : f32}")
    np.testing.assert_allclose(out, rms_norm_ref(x, w, 1e-6), rtol=RTOL, atol=ATOL)
    for dim in (0, 1):
        out = run_kernel("softmax", [x], shape, f"{{dim = {dim} : i64}}")
        np.testing.assert_allclose(out, softmax_ref(x, dim, False), rtol=RTOL, atol=ATOL)


def test_fused_elementwise(target):
    from tensor_graphs.dialects.functions import apply_unary

    native = compile_text(kernel_module("fused_elementwise", [((9, 67), "f32")], ((9, 67), "f32"), body=GELU_TANH_BODY))
    assert vector(target) in native.llvm_ir and f"<{2 * target.float_lanes} x float>" not in native.llvm_ir
    fused(target, native.llvm_ir)
    x = rand(9, 67) * 3
    out = run_typed_kernel("", [x], x.shape, native=native)
    np.testing.assert_allclose(out, apply_unary("gelu_tanh", x), rtol=2e-6, atol=2e-6)


# --------------------------------------------------------------------------- models, per target


@pytest.fixture(scope="module")
def gpt2_two_layers():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=96, n_head=4, vocab_size=301, n_positions=64)
    return LogitsOnly(transformers.GPT2LMHeadModel(config).eval())


@pytest.fixture(scope="module")
def small_qwen3():
    torch.manual_seed(0)
    return LogitsOnly(transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SMALL_QWEN3)).eval())


def test_gpt2_logits(target, gpt2_two_layers):
    ids = torch.randint(0, 301, (2, 19), generator=torch.Generator().manual_seed(3))
    fn = tg.compile(gpt2_two_layers, (ids,))
    check_logits(gpt2_two_layers, fn, ids, 1e-4)
    assert f'name = "{target.name}"' in fn.ir("buf") and vector(target) in fn.ir("llvm")
    panels = {int(w) for w in re.findall(r"buf.packed_weight .* : memref<\d+x\d+x(\d+)xf32>", fn.ir("buf"))}
    assert panels and max(panels) == target.panel_columns


def test_qwen3_logits(target, small_qwen3):
    ids = torch.randint(0, SMALL_QWEN3["vocab_size"], (1, 23), generator=torch.Generator().manual_seed(4))
    fn = tg.compile(small_qwen3, (ids,))
    check_logits(small_qwen3, fn, ids, 1e-4)
