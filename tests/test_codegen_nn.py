"""buf -> llvm -> native for the NN kernels (softmax, layer norm, flash attention, matmul
epilogues), against float64 NumPy references, on hand-written planned `buf` modules.

Tolerances: rtol = atol = 1e-5 (float32 kernels, float64 references); the layer norm of a large
mean and a small variance: rtol = atol = 1e-6 (outputs |x| <= ~3.3; observed max abs diff 2.6e-7
on an AVX2 Zen 3, AMD EPYC znver3).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensor_graphs.codegen.llvm.kernels_attention as attention
import tensor_graphs.codegen.llvm.kernels_matmul_epilogue as matmul_epilogue
import tensor_graphs.codegen.llvm.kernels_softmax_norm as softmax_norm
import tensor_graphs as tg
from tensor_graphs.codegen.llvm.convert_buffer_to_llvm import ConvertBufferToLLVMPass
from tensor_graphs.codegen.llvm.jit import call_native, to_llvm_ir
from tensor_graphs.codegen.llvm.kernels import REGISTRY, LoweringError
from tensor_graphs.context import make_context
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.functions import ACTIVATIONS, apply_unary
from tensor_graphs.target import resolve as resolve_target
from tensor_graphs.lowering.tensor_to_buffer.scratch import attention_scratch_elements, attention_tiles
from tensor_graphs.target import resolve
from test_codegen_llvm import compile_text, memref, parse, run, run_kernel

RTOL = ATOL = 1e-5
rng = np.random.default_rng(1)
#: the FMA over a vector of the default target (TG_TARGET, else the host): 16 lanes on AVX-512, 8 on AVX2
FMA_VECTOR = f'@"llvm.fma.v{resolve(None).float_lanes}f32"'


def rand(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_nn_emitters_are_registered():
    for op in (buf.SoftmaxOp, buf.LayerNormOp, buf.RmsNormOp):
        assert REGISTRY[op].__module__ == softmax_norm.__name__
    assert REGISTRY[buf.AttentionOp].__module__ == attention.__name__
    assert REGISTRY[buf.MatmulOp] is matmul_epilogue._emit_matmul


# --------------------------------------------------------------------------- softmax


def softmax_ref(x: np.ndarray, dim: int, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(dim, keepdims=True)
    s = np.exp(x - m).sum(dim, keepdims=True)
    return (x - m - np.log(s)) if log else np.exp(x - m) / s


SOFTMAX_CASES = [
    ((4, 37), 1),  # last dim
    ((1000,), 0),  # one row
    ((2, 3, 300), 2),
    ((3, 5, 7), 1),  # middle dim
    ((2, 9, 300), 1),  # middle dim, inner wider than one tile (256 + 44)
    ((6, 4), 0),  # first dim
    ((5, 1), 1),  # a row of one
    ((300, 257), 1),  # last dim, large: the rows are split among the threads
]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", SOFTMAX_CASES, ids=[f"{list(s)}-dim{d}" for s, d in SOFTMAX_CASES])
def test_softmax(shape, dim, log):
    x = rand(*shape) * 3
    out = run_kernel("softmax", [x], shape, f"{{dim = {dim} : i64, log = {str(log).lower()}}}")
    np.testing.assert_allclose(out, softmax_ref(x, dim, log), rtol=RTOL, atol=ATOL)


def test_softmax_with_masked_entries():
    x = rand(3, 40)
    x[0, 5:] = -np.inf
    x[1, :] = -1e30
    out = run_kernel("softmax", [x], x.shape, "{dim = 1 : i64}")
    np.testing.assert_allclose(out, softmax_ref(x, 1, False), rtol=RTOL, atol=ATOL)
    assert np.all(out[0, 5:] == 0)


def test_softmax_in_place():
    text = f"""
builtin.module {{
  func.func @forward(%x: {memref((4, 33))}, %o: {memref((4, 33))}) attributes {{tg.num_outputs = 1 : i64}} {{
    buf.copy ins(%x : {memref((4, 33))}) outs(%o : {memref((4, 33))})
    buf.softmax ins(%o : {memref((4, 33))}) outs(%o : {memref((4, 33))}) {{dim = 1 : i64}}
    func.return
  }}
}}"""
    x = rand(4, 33)
    np.testing.assert_allclose(run(compile_text(text), [x])[0], softmax_ref(x, 1, False), rtol=RTOL, atol=ATOL)


def test_softmax_loops_vectorise():
    native = compile_text(
        f"""
builtin.module {{
  func.func @forward(%x: {memref((8, 1024))}, %o: {memref((8, 1024))}) attributes {{tg.num_outputs = 1 : i64}} {{
    buf.softmax ins(%x : {memref((8, 1024))}) outs(%o : {memref((8, 1024))}) {{dim = 1 : i64}}
    func.return
  }}
}}"""
    )
    ir = native.llvm_ir
    assert "llvm.vector.reduce.fmax" in ir  # the row max
    assert "llvm.vector.reduce.fadd" in ir  # the sum of exponentials


# --------------------------------------------------------------------------- layer norm


def layer_norm_ref(x, w, b, eps):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


@pytest.mark.parametrize("shape", [(4, 768), (2, 3, 50), (7,), (5, 1), (130, 768)])  # the last: rows on threads
@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_layer_norm(shape, eps):
    x, w, b = rand(*shape) * 2 + 3, rand(shape[-1]), rand(shape[-1])
    out = run_kernel("layer_norm", [x, w, b], shape, f"{{eps = {eps:e} : f32}}")
    np.testing.assert_allclose(out, layer_norm_ref(x, w, b, eps), rtol=RTOL, atol=ATOL)


def test_layer_norm_large_mean_small_variance():
    # a one-pass E[x^2] - E[x]^2 would lose every digit here; the two-pass form keeps them
    x = (1000.0 + 0.01 * rand(3, 256)).astype(np.float32)
    w, b = np.ones(256, np.float32), np.zeros(256, np.float32)
    out = run_kernel("layer_norm", [x, w, b], x.shape, "{eps = 1.0e-05 : f32}")
    np.testing.assert_allclose(out, layer_norm_ref(x, w, b, 1e-5), rtol=1e-6, atol=1e-6)  # observed 2.6e-7


# --------------------------------------------------------------------------- rms norm


def rms_norm_ref(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


@pytest.mark.parametrize("shape", [(4, 1024), (2, 3, 50), (7,), (5, 1), (3, 128), (2, 70, 1024)])  # the last: rows on threads
@pytest.mark.parametrize("eps", [1e-6, 1e-12])
def test_rms_norm(shape, eps):
    x, w = rand(*shape) * 2 + 1, rand(shape[-1])
    out = run_kernel("rms_norm", [x, w], shape, f"{{eps = {eps:e} : f32}}")
    np.testing.assert_allclose(out, rms_norm_ref(x, w, eps), rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- attention


def attention_ref(q, k, v, mask, scale, causal):
    """float64 attention; a row whose every score is masked gives 0 (the kernel's choice)."""
    group = q.shape[-3] // k.shape[-3]
    k = np.repeat(k.astype(np.float64), group, axis=-3)
    v = np.repeat(v.astype(np.float64), group, axis=-3)
    s = scale * (q.astype(np.float64) @ np.swapaxes(k, -1, -2))
    if mask is not None:
        s = s + mask
    sq, sk = s.shape[-2:]
    if causal:
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq), -np.inf, s)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    return np.where(l > 0, (p @ v) / np.where(l > 0, l, 1.0), 0.0)


def attention_module(q_shape, k_shape, v_shape, mask_shape=None, scale=0.125, causal=False, scratch=True, slots=1) -> str:
    """One buf.attention; its scratch holds ``slots`` sets of tiles (it runs on up to that many threads)."""
    out_shape = (*q_shape[:-1], v_shape[-1])
    shapes = [q_shape, k_shape, v_shape] + ([mask_shape] if mask_shape is not None else [])
    names = ["%q", "%k", "%v", "%mask"][: len(shapes)]
    args = ", ".join(f"{n}: {memref(s)}" for n, s in zip(names, shapes)) + f", %o: {memref(out_shape)}"
    n = attention_scratch_elements(q_shape, k_shape, v_shape, resolve_target(), slots)
    size = (4 * n + 63) // 64 * 64
    outs = f"%o, %s : {memref(out_shape)}, memref<{n}xf32>" if scratch else f"%o : {memref(out_shape)}"
    return f"""
builtin.module attributes {{tg.arena_size = {size} : i64}} {{
  func.func @forward({args}) attributes {{tg.num_outputs = 1 : i64}} {{
    %arena = buf.arena : memref<{size}xi8>
    %s = buf.view %arena[0] : memref<{size}xi8> -> memref<{n}xf32>
    buf.attention ins({", ".join(names)} : {", ".join(memref(s) for s in shapes)}) outs({outs}) {{scale = {scale} : f32, causal = {str(causal).lower()}}}
    func.return
  }}
}}"""


def run_attention(q, k, v, mask=None, scale=0.125, causal=False, slots=1) -> np.ndarray:
    text = attention_module(q.shape, k.shape, v.shape, None if mask is None else mask.shape, scale, causal, slots=slots)
    return run(compile_text(text), [q, k, v] + ([mask] if mask is not None else []))[0]


@pytest.fixture
def three_threads():
    before = tg.get_num_threads()
    tg.set_num_threads(3)
    yield
    tg.set_num_threads(before)


ATTENTION_CASES = {
    # name: (B, H, Hkv, Sq, Sk, D, Dv, causal)
    "small": (1, 2, 2, 7, 7, 8, 8, False),
    "two_blocks_plus_one": (2, 2, 2, 65, 65, 8, 8, False),
    "causal_square": (1, 2, 2, 130, 130, 64, 64, True),
    "causal_square_one_block": (2, 1, 1, 7, 7, 8, 8, True),
    "causal_decode": (1, 2, 2, 1, 17, 64, 64, True),
    "decode_long": (1, 2, 2, 1, 130, 8, 8, False),
    "causal_sq_lt_sk": (1, 2, 2, 7, 130, 8, 8, True),
    "causal_sq_lt_sk_blocks": (1, 1, 1, 65, 130, 8, 8, True),
    "causal_sq_gt_sk_rows_fully_masked": (1, 2, 2, 130, 7, 8, 8, True),
    "gqa": (2, 4, 2, 7, 65, 8, 8, False),
    "gqa_causal": (1, 4, 2, 65, 65, 64, 64, True),
    "gqa_decode": (1, 4, 1, 1, 65, 8, 8, True),
    "value_dim_differs": (1, 2, 2, 9, 70, 8, 16, True),
    "one_key": (1, 1, 1, 5, 1, 8, 8, False),
}


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention(case):
    bsz, h, hkv, sq, sk, d, dv, causal = ATTENTION_CASES[case]
    q, k, v = rand(bsz, h, sq, d), rand(bsz, hkv, sk, d), rand(bsz, hkv, sk, dv)
    scale = 1.0 / np.sqrt(d)
    out = run_attention(q, k, v, None, scale, causal)
    np.testing.assert_allclose(out, attention_ref(q, k, v, None, scale, causal), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("slots", [2, 3])
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention_on_threads_equals_one_thread(case, slots, three_threads):
    """3 threads asked for, at most ``slots`` used (one scratch set each; fewer when there are
    fewer (batch, head, query block) items): bit for bit the result of one thread."""
    bsz, h, hkv, sq, sk, d, dv, causal = ATTENTION_CASES[case]
    q, k, v = rand(bsz, h, sq, d), rand(bsz, hkv, sk, d), rand(bsz, hkv, sk, dv)
    np.testing.assert_array_equal(run_attention(q, k, v, None, 0.3, causal, slots=slots), run_attention(q, k, v, None, 0.3, causal))


def test_attention_scratch_slots():
    tiles = attention_tiles((1, 2, 130, 64), (1, 2, 7, 64), (1, 2, 7, 32), resolve_target())
    assert tiles.slot_elements % 16 == 0 and tiles.slot_elements >= tiles.elements
    for slots in (1, 2, 5):
        n = attention_scratch_elements((1, 2, 130, 64), (1, 2, 7, 64), (1, 2, 7, 32), resolve_target(), slots)
        assert tiles.slots(n) == slots and tiles.slots(n - 1) == slots - 1


def test_attention_rank_3_and_extra_batch_dims():
    for qs, ks in [((2, 7, 8), (1, 9, 8)), ((2, 3, 2, 5, 8), (2, 3, 1, 66, 8))]:
        q, k, v = rand(*qs), rand(*ks), rand(*ks)
        out = run_attention(q, k, v, None, 0.3, True)
        np.testing.assert_allclose(out, attention_ref(q, k, v, None, 0.3, True), rtol=RTOL, atol=ATOL)


MASKS = {
    # name: (q shape, kv shape, mask shape, causal)
    "full_per_query": ((2, 2, 7, 8), (2, 2, 65, 8), (1, 1, 7, 65), False),
    "padding_per_batch": ((2, 2, 7, 8), (2, 2, 65, 8), (2, 1, 1, 65), False),
    "padding_per_batch_causal": ((2, 2, 70, 8), (2, 2, 70, 8), (2, 1, 1, 70), True),
    "per_head": ((1, 4, 9, 8), (1, 2, 9, 8), (4, 9, 9), True),
    "rank_2": ((1, 2, 66, 8), (1, 2, 66, 8), (66, 66), False),
    "key_column_broadcast": ((1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 1), False),
    "decode": ((2, 2, 1, 8), (2, 2, 17, 8), (2, 1, 1, 17), True),
}


@pytest.mark.parametrize("case", list(MASKS))
def test_attention_additive_mask(case, three_threads):
    qs, ks, ms, causal = MASKS[case]
    q, k, v, mask = rand(*qs), rand(*ks), rand(*ks), rand(*ms)
    out = run_attention(q, k, v, mask, 0.3, causal)
    np.testing.assert_allclose(out, attention_ref(q, k, v, mask, 0.3, causal), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(run_attention(q, k, v, mask, 0.3, causal, slots=2), out)  # on 2 threads


def test_attention_fully_masked_rows_are_zero_not_nan():
    q, k, v = rand(1, 2, 7, 8), rand(1, 2, 70, 8), rand(1, 2, 70, 8)
    mask = np.zeros((1, 1, 7, 70), np.float32)
    mask[..., 2, :] = -np.inf  # query 2 sees nothing
    mask[..., 3, :64] = -np.inf  # query 3 sees only the second key block
    mask[..., 4, 64:] = -np.inf  # query 4 sees only the first key block
    out = run_attention(q, k, v, mask, 0.3, False)
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out[..., 2, :], 0.0)
    np.testing.assert_allclose(out, attention_ref(q, k, v, mask, 0.3, False), rtol=RTOL, atol=ATOL)


def test_attention_scratch_layout_is_the_planners():
    t = attention_tiles((1, 2, 130, 64), (1, 2, 7, 64), (1, 2, 7, 32), resolve_target())
    assert (t.br, t.bc, t.bc_pad, t.dv_pad) == (64, 7, 16, 32)
    # scores [64 x 16] | m 64 | l 64 | acc [64 x 32] | kt [64 x 16]; Dv = 32 is whole vectors: no vp
    assert (t.m, t.l, t.acc, t.kt, t.vp) == (1024, 1088, 1152, 3200, 4224)
    assert attention_scratch_elements((1, 2, 130, 64), (1, 2, 7, 64), (1, 2, 7, 32), resolve_target()) == 4224
    odd = attention_tiles((1, 1, 5, 8), (1, 1, 70, 8), (1, 1, 70, 8), resolve_target())  # Dv = 8: value rows padded to 16
    assert odd.pads_values and odd.elements == odd.vp + 64 * 16
    assert all(off % 16 == 0 for off in (odd.m, odd.l, odd.acc, odd.kt, odd.vp))


def test_attention_without_scratch_is_a_clear_error():
    text = attention_module((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8), scratch=False)
    with pytest.raises(LoweringError, match="no scratch buffer"):
        ConvertBufferToLLVMPass().apply(make_context(), parse(text))


def test_attention_scratch_too_small_is_a_clear_error():
    n = attention_scratch_elements((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8), resolve_target())
    text = attention_module((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8)).replace(f"memref<{n}xf32>", f"memref<{n - 1}xf32>")
    with pytest.raises(LoweringError, match="scratch must hold at least"):
        ConvertBufferToLLVMPass().apply(make_context(), parse(text))


def _llvm_ir(text: str) -> str:
    module = parse(text)
    ConvertBufferToLLVMPass().apply(make_context(), module)
    return to_llvm_ir(module)


def test_attention_is_tiled_gemms_and_causal_skips_blocks():
    ir = _llvm_ir(attention_module((1, 1, 256, 64), (1, 1, 256, 64), (1, 1, 256, 64), causal=True))
    # S = Q K^T and acc += P V are register tiles of FMAs over the target's vectors (kernels_gemm),
    # no BLAS, no seq x seq buffer
    assert "scipy_cblas" not in ir and FMA_VECTOR in ir
    # the causal key-block bound: (q0 + rows - 1 + Sk - Sq) / Bc + 1 (other divisions split the
    # (batch, head, query block) items among the threads)
    by_bc = re.compile(r'sdiv i64 %"[^"]+", 64\b')
    assert by_bc.search(ir)
    assert not by_bc.search(_llvm_ir(attention_module((1, 1, 256, 64), (1, 1, 256, 64), (1, 1, 256, 64))))


def test_decode_attention_is_one_row_tiles():
    """Sq = 1: one-row register tiles (matrix-vector products), no BLAS call."""
    ir = _llvm_ir(attention_module((1, 4, 1, 64), (1, 4, 100, 64), (1, 4, 100, 64), causal=True))
    assert "scipy_cblas" not in ir and FMA_VECTOR in ir


def test_causal_attention_skips_key_blocks_above_the_diagonal():
    """Sq = Sk = 256 in 64-blocks: query block i visits key blocks 0..i only (10 of 16 tiles).
    NaNs in the last key block would poison every row that read it."""
    q_shape = (1, 1, 256, 64)
    text = attention_module(q_shape, q_shape, q_shape, causal=True)
    q, k, v = rand(*q_shape), rand(*q_shape), rand(*q_shape)
    v[..., 192:, :] = np.nan  # only the last query block may read the last key block
    k[..., 192:, :] = np.nan
    out = run(compile_text(text), [q, k, v])[0]
    assert not np.isnan(out[..., :192, :]).any()


# --------------------------------------------------------------------------- matmul epilogues


def _op(x: np.ndarray, t: bool) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if t else x


EPILOGUE_CASES = {
    # name: (a, b, acc, transpose_a, transpose_b)
    "linear_bias": ((5, 20), (300, 20), (300,), False, True),
    "linear_no_bias": ((5, 20), (300, 20), None, False, True),
    "plain_rows_and_cols_over_a_tile": ((300, 20), (20, 513), None, False, False),
    "batched_folds": ((2, 3, 20), (600, 20), (600,), False, True),
    "batched_per_batch": ((2, 260, 20), (2, 20, 300), (260, 300), False, False),
    "transpose_a_per_batch": ((3, 20, 270), (3, 20, 9), (3, 1, 9), True, False),
    "acc_per_row": ((260, 20), (20, 513), (260, 1), False, False),
    "acc_not_row_collapsible": ((2, 3, 20), (20, 7), (2, 1, 7), False, False),
    "gemv_row": ((1, 20), (300, 20), (300,), False, True),
    "gemv_col": ((260, 20), (20, 1), None, False, False),
    "gemv_per_batch": ((3, 1, 20), (3, 20, 30), (30,), False, False),
}


@pytest.mark.parametrize("activation", [a for a in ACTIVATIONS if a != "none"])
@pytest.mark.parametrize("case", list(EPILOGUE_CASES))
def test_matmul_epilogue(case, activation):
    sa, sb, sacc, ta, tb = EPILOGUE_CASES[case]
    a, b = rand(*sa), rand(*sb)
    ins = [a, b] + ([rand(*sacc)] if sacc is not None else [])
    beta = 0.5 if sacc is not None else 0.0
    y = 1.5 * (_op(a, ta).astype(np.float64) @ _op(b, tb)) + (beta * ins[2] if sacc is not None else 0.0)
    ref = apply_unary(activation, y)
    attrs = (
        f"{{transpose_a = {str(ta).lower()}, transpose_b = {str(tb).lower()}, alpha = 1.5 : f32, "
        f'beta = {beta} : f32, activation = "{activation}"}}'
    )
    out = run_kernel("matmul", ins, ref.shape, attrs)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_matmul_epilogue_runs_per_tile():
    # K = 1: 0.36 MFLOP, too little for a second thread: the tiles run in the kernel
    text = f"""
builtin.module {{
  func.func @forward(%a: {memref((300, 1))}, %w: {memref((600, 1))}, %bias: {memref((600,))}, %o: {memref((300, 600))}) attributes {{tg.num_outputs = 1 : i64}} {{
    buf.matmul ins(%a, %w, %bias : {memref((300, 1))}, {memref((600, 1))}, {memref((600,))}) outs(%o : {memref((300, 600))}) {{transpose_b = true, beta = 1.0 : f32, activation = "relu"}}
    func.return
  }}
}}"""
    ir = _llvm_ir(text)
    # tiles of 256 x 256: (full, tail) rows x (full, tail) columns = 4 sgemm call sites,
    # each with its own bias copy before and activation after, all ldc = N = 600
    assert "GOMP_parallel" not in ir
    assert ir.count('call ccc void @"scipy_cblas_sgemm"') == 4
    assert ir.count("i32 600)") == 4
    for mb, nb in [(256, 256), (44, 256), (256, 88), (44, 88)]:
        assert f"i32 {mb}, i32 {nb}, i32 1" in ir


def test_parallel_tiles_are_two_per_thread():
    """Rows per tile: 256, halved (multiples of 16, at least 16) until two tiles per thread."""
    from tensor_graphs.codegen.llvm.kernels_matmul_epilogue import parallel_tile_rows

    assert parallel_tile_rows(256, 196, 2) == 64  # ResNet's 3x3 convs at 14x14: one 256x256 tile
    assert parallel_tile_rows(2048, 49, 2) == 256  # 8 row tiles already
    assert parallel_tile_rows(64, 3136, 2) == 256  # 13 column tiles
    assert parallel_tile_rows(256, 196, 1) == 256  # one thread: no split
    assert parallel_tile_rows(20, 100, 8) == 16


@pytest.mark.parametrize("batched", [False, True])
def test_matmul_tiles_spread_over_threads(batched):
    """23 MFLOP (x2 batches) pay for threads: the 256 x 256 tiles (the last ones clipped) are work
    items, one sgemm call site with run-time sizes; bias copied in and ReLU applied per tile.
    Batched: the weight is the lhs, broadcast over the batch (a convolution's GEMM)."""
    if batched:
        sa, sw, so, flags = (600, 64), (2, 64, 300), (2, 600, 300), ""
        bias_shape = (600, 1)
    else:
        sa, sw, so, flags = (300, 64), (600, 64), (300, 600), "transpose_b = true, "
        bias_shape = (600,)
    text = f"""
builtin.module {{
  func.func @forward(%a: {memref(sa)}, %w: {memref(sw)}, %bias: {memref(bias_shape)}, %o: {memref(so)}) attributes {{tg.num_outputs = 1 : i64}} {{
    buf.matmul ins(%a, %w, %bias : {memref(sa)}, {memref(sw)}, {memref(bias_shape)}) outs(%o : {memref(so)}) {{{flags}beta = 1.0 : f32, activation = "relu"}}
    func.return
  }}
}}"""
    ir = _llvm_ir(text)
    assert "GOMP_parallel" in ir
    assert ir.count('call ccc void @"scipy_cblas_sgemm"') == 1
    native = compile_text(text)
    a, w, bias = rand(*sa), rand(*sw), rand(*bias_shape)
    out = np.empty(so, np.float32)
    call_native(native, None, {}, [a, w, bias], [out])
    wt = w.astype(np.float64)
    ref = np.maximum(a.astype(np.float64) @ (np.swapaxes(wt, -1, -2) if not batched else wt) + bias, 0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_matmul_epilogue_in_place_accumulator():
    # out = relu(x @ w + out): the accumulator is the output itself
    text = f"""
builtin.module {{
  func.func @forward(%x: {memref((4, 8))}, %w: {memref((8, 300))}, %o: {memref((4, 300))}) attributes {{tg.num_outputs = 1 : i64}} {{
    buf.matmul ins(%x, %w, %o : {memref((4, 8))}, {memref((8, 300))}, {memref((4, 300))}) outs(%o : {memref((4, 300))}) {{beta = 1.0 : f32, activation = "relu"}}
    func.return
  }}
}}"""
    native = compile_text(text)
    x, w = rand(4, 8), rand(8, 300)
    out = rand(4, 300)
    ref = np.maximum(x.astype(np.float64) @ w + out, 0)
    call_native(native, None, {}, [x, w], [out])
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_matmul_without_activation_is_the_plain_emitter():
    ir = _llvm_ir(
        f"""
builtin.module {{
  func.func @forward(%a: {memref((300, 64))}, %w: {memref((600, 64))}, %o: {memref((300, 600))}) attributes {{tg.num_outputs = 1 : i64}} {{
    buf.matmul ins(%a, %w : {memref((300, 64))}, {memref((600, 64))}) outs(%o : {memref((300, 600))}) {{transpose_b = true}}
    func.return
  }}
}}"""
    )
    assert ir.count('call ccc void @"scipy_cblas_sgemm"') == 1
