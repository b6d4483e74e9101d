"""The packed GEMM (`buf.packed_matmul` over a `buf.packed_weight`) against float64 NumPy.

Every register-tile shape the emitter specialises on is covered: row counts below, at and above
one tile (on AVX-512: MR = 6/8/12/16 rows for panels of 64/48/32/16 columns; on AVX2 6/12 rows
for 16/8 columns; `test_targets` derives the shapes from each target's tile) with a tail block, widths that
fill whole panels and ones that end in a partial last panel, K = 1, a matrix-vector product
(M = 1), folded batch dims, alpha/beta with every accumulator broadcast the kernel reads in
place, and every activation of the epilogue; at 1 and 2 threads (which must agree bit for bit:
each output element is computed by the same code on whichever thread). Tolerance: rtol 1e-5,
atol 1e-5 * sqrt(K) (a K-long f32 dot product, reassociated by the FMAs).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from xdsl.utils.exceptions import VerifyException

import tensor_graphs as tg
from tensor_graphs.codegen.llvm.kernels import LoweringError
from tensor_graphs.dialects.functions import ACTIVATIONS, apply_unary
from tensor_graphs.dialects.packing import PanelLayout
from tensor_graphs.target import resolve
from test_codegen_llvm import compile_text, memref, run

rng = np.random.default_rng(0)


def panel_columns(n: int) -> int:
    """The panel width the default target (``TG_TARGET``, else the host) packs ``n`` columns in."""
    return resolve(None).panel_columns_for(n)


def rand(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def packed_module(a_shape, w_shape, transposed: bool, out_shape, acc_shape=None, attrs: str = "") -> str:
    n = out_shape[-1]
    k = a_shape[-1]
    nr = panel_columns(n)
    packed_type = memref((-(-n // nr), k, nr))
    ins = [("%a", memref(a_shape)), ("%wp", packed_type)]
    args = [f"%a: {memref(a_shape)}"]
    if acc_shape is not None:
        args.append(f"%c: {memref(acc_shape)}")
        ins.append(("%c", memref(acc_shape)))
    args.append(f"%o: {memref(out_shape)}")
    source = f"array<i64: {n}, {k}>" if transposed else f"array<i64: {k}, {n}>"
    t = f"{{transposed = true, source_shape = {source}}} " if transposed else f"{{source_shape = {source}}} "
    return f"""
builtin.module {{
  func.func @forward({", ".join(args)}) attributes {{tg.num_outputs = 1 : i64}} {{
    %wp = buf.packed_weight "w" {t}: {packed_type}
    buf.packed_matmul ins({", ".join(v for v, _ in ins)} : {", ".join(t for _, t in ins)}) outs(%o : {memref(out_shape)}) {attrs}
    func.return
  }}
}}"""


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = tg.get_num_threads()
    tg.set_num_threads(request.param)
    yield request.param
    tg.set_num_threads(before)


def check(got: np.ndarray, want: np.ndarray, k: int) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.sqrt(k)))


SHAPES = [  # (M, K, N): N sets the panel width (AVX-512: 64 from 64 on, else N rounded up to 16)
    (1, 64, 64),  # matrix-vector
    (1, 300, 200),  # matrix-vector, partial last panel
    (6, 32, 64),  # one full register tile
    (7, 32, 64),  # a tile and a 1-row tail
    (13, 5, 130),  # 2 tiles + 1 row; 2 full panels + 2 columns
    (8, 48, 48),  # panels of 48: one tile of 8 rows
    (9, 17, 47),  # one partial panel of 48
    (12, 7, 32),  # panels of 32: 12-row tiles
    (25, 9, 31),
    (16, 3, 16),  # panels of 16: 16-row tiles
    (40, 1, 17),  # K = 1
    (33, 70, 257),
    (3, 8, 2565),  # 41 panels, the last of 5 columns: each thread takes several guided chunks
]


@pytest.mark.parametrize("transposed", [True, False], ids=["w[N,K]", "w[K,N]"])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_packed_matmul(m, k, n, transposed, threads):
    a = rand(m, k)
    w = rand(n, k) if transposed else rand(k, n)
    native = compile_text(packed_module((m, k), w.shape, transposed, (m, n)))
    (out,) = run(native, [a], {"w": w})
    ref = a.astype(np.float64) @ (w.T if transposed else w).astype(np.float64)
    check(out, ref, k)


@pytest.mark.parametrize(
    "acc_shape",
    [(37,), (1, 37), (9, 37), (9, 1), ()],
    ids=["bias", "row", "residual", "column", "scalar"],
)
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-1.5, 0.25)])
def test_alpha_beta_accumulator(acc_shape, alpha, beta, threads):
    m, k, n = 9, 20, 37
    a, w, c = rand(m, k), rand(n, k), rand(*acc_shape)
    attrs = f"{{alpha = {alpha} : f32, beta = {beta} : f32}}"
    native = compile_text(packed_module((m, k), w.shape, True, (m, n), acc_shape, attrs))
    (out,) = run(native, [a, c], {"w": w})
    ref = alpha * (a.astype(np.float64) @ w.T.astype(np.float64)) + beta * c.astype(np.float64)
    check(out, ref, k)


@pytest.mark.parametrize("activation", [a for a in ACTIVATIONS if a != "none"])
def test_epilogue_activation_with_bias(activation, threads):
    m, k, n = 14, 33, 70
    a, w, bias = rand(m, k), rand(n, k), rand(n)
    attrs = f'{{beta = 1.0 : f32, activation = "{activation}"}}'
    native = compile_text(packed_module((m, k), w.shape, True, (m, n), (n,), attrs))
    (out,) = run(native, [a, bias], {"w": w})
    pre = (a.astype(np.float64) @ w.T.astype(np.float64) + bias).astype(np.float32)
    want = apply_unary(activation, pre)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5 * np.sqrt(k))


def test_batch_dims_fold_into_rows(threads):
    a, w, c = rand(2, 3, 5, 24), rand(24, 80), rand(2, 3, 5, 80)
    attrs = "{beta = 1.0 : f32}"
    native = compile_text(packed_module(a.shape, w.shape, False, (2, 3, 5, 80), c.shape, attrs))
    (out,) = run(native, [a, c], {"w": w})
    check(out, a.astype(np.float64) @ w.astype(np.float64) + c, 24)


def test_threads_agree_bit_for_bit():
    a, w, bias = rand(50, 96), rand(1000, 96), rand(1000)
    native = compile_text(packed_module(a.shape, w.shape, True, (50, 1000), (1000,), '{beta = 1.0 : f32, activation = "gelu"}'))
    before = tg.get_num_threads()
    try:
        outs = []
        for t in (1, 2, 3):
            tg.set_num_threads(t)
            outs.append(run(native, [a, bias], {"w": w})[0])
    finally:
        tg.set_num_threads(before)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_parallel_kernel_runs_a_worker_through_libgomp():
    # 2 M K N = 2.1 MFLOP: enough work for several threads (`Target.thread_work`)
    native = compile_text(packed_module((64, 64), (256, 64), True, (64, 256)))
    ir = native.llvm_ir
    assert resolve(None).thread_work.threads(2 * 64 * 64 * 256, 0) >= 2
    assert "@GOMP_parallel" in ir and "@tg_num_threads" in ir
    assert "__par0(ptr" in ir and f"<{resolve(None).float_lanes} x float>" in ir and "fma" in ir


def test_a_kernel_takes_no_more_threads_than_its_work_pays_for():
    """A GEMM of 16 KFLOP runs in the kernel itself, with no team to wake however many threads
    are set; a larger one caps the team at the threads its FLOPs pay for."""
    small = compile_text(packed_module((4, 8), (256, 8), True, (4, 256))).llvm_ir
    assert "@GOMP_parallel" not in small and "__par0" not in small
    work = resolve(None).thread_work
    m = 3 * work.flops_per_thread // (2 * 64 * 256) + 1  # FLOPs for 3 threads, not 4
    ir = compile_text(packed_module((m, 64), (256, 64), True, (m, 256))).llvm_ir
    assert work.threads(2 * m * 64 * 256, 0) == 3
    assert re.search(r"@llvm\.[su]min\.i32\(i32 %[\w.]+, i32 3\)", ir), "the team is capped at 3 threads"


def test_accumulator_sharing_the_output_is_rejected():
    text = f"""
builtin.module {{
  func.func @forward(%a: {memref((4, 8))}, %o: {memref((4, 64))}) attributes {{tg.num_outputs = 1 : i64}} {{
    %wp = buf.packed_weight "w" {{transposed = true, source_shape = array<i64: 64, 8>}} : {memref((1, 8, 64))}
    buf.packed_matmul ins(%a, %wp, %o : {memref((4, 8))}, {memref((1, 8, 64))}, {memref((4, 64))}) outs(%o : {memref((4, 64))}) {{beta = 1.0 : f32}}
    func.return
  }}
}}"""
    with pytest.raises(LoweringError, match="overlaps the output"):
        compile_text(text)


def test_accumulator_without_one_row_stride_is_rejected():
    text = packed_module((2, 3, 8), (64, 8), True, (2, 3, 64), (3, 64), "{beta = 1.0 : f32}")
    with pytest.raises(LoweringError, match="one row stride"):
        compile_text(text)


def test_panel_count_is_verified():
    nr = panel_columns(64)
    panels = 64 // nr
    more = packed_module((4, 8), (64, 8), True, (4, 64)).replace(f"memref<{panels}x8x{nr}xf32>", f"memref<{panels + 1}x8x{nr}xf32>")
    # the packed weight must be what packing its source gives
    with pytest.raises(VerifyException, match=rf"packing 'w' of shape \[64, 8\] as panels gives \[{panels}, 8, {nr}\], "
                                              rf"not the declared \[{panels + 1}, 8, {nr}\]"):
        compile_text(more)
    # a consistent packed weight of a wider source: the GEMM's N needs fewer panels
    wider = more.replace("source_shape = array<i64: 64, 8>", f"source_shape = array<i64: {64 + nr}, 8>")
    with pytest.raises(VerifyException, match=f"needs {panels} panels of {nr} columns"):
        compile_text(wider)


# --------------------------------------------------------------------------- the layout


@pytest.mark.parametrize("n,k,transposed", [(130, 7, True), (130, 7, False), (64, 3, True), (20, 5, False)])
def test_panel_layout(n, k, transposed):
    b = rand(k, n)  # the GEMM's B[K, N]
    layout = PanelLayout("w", panel_columns(n), transposed)
    packed = layout.pack(np.ascontiguousarray(b.T) if transposed else b)
    nr = layout.nr
    assert packed.shape == layout.shape(b.T.shape if transposed else b.shape) == (-(-n // nr), k, nr)
    assert packed.ctypes.data % 64 == 0 and packed.flags.c_contiguous
    for p in range(packed.shape[0]):
        cols = b[:, p * nr : (p + 1) * nr]
        np.testing.assert_array_equal(packed[p, :, : cols.shape[1]], cols)
        assert not packed[p, :, cols.shape[1] :].any()
    assert PanelLayout.from_slot_name(layout.slot_name) == layout
    assert PanelLayout.from_slot_name("fc.weight") is None and PanelLayout.from_slot_name("x@panelsQ") is None


# --------------------------------------------------------------------------- through the compiler


def test_linear_layers_take_the_packed_path_and_match_torch(threads):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(40, 100), torch.nn.GELU(), torch.nn.Linear(100, 100), torch.nn.ReLU(), torch.nn.Linear(100, 8)
    ).eval()
    x = torch.randn(3, 7, 40)
    fn = tg.compile(model, (x,))
    buf_ir = fn.ir("buf")
    assert buf_ir.count("buf.packed_matmul") == 2 and buf_ir.count("buf.matmul") == 1  # N = 8 < 16 stays BLAS
    with torch.no_grad():
        np.testing.assert_allclose(fn(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    plain = tg.compile(model, (x,), pack_weights=False)
    assert "packed" not in plain.ir("buf")
    np.testing.assert_allclose(fn(x).numpy(), plain(x).numpy(), rtol=1e-5, atol=1e-5)


class _QuickGelu(torch.nn.Module):
    """CLIP's ``x * sigmoid(1.702 x)`` after a linear layer: no activation the GEMM names (not
    SiLU's 1.0), one elementwise loop over the GEMM's output alone."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(48, 80)

    def forward(self, x):
        y = self.fc(x)
        return y * torch.sigmoid(1.702 * y)


@pytest.mark.parametrize("target", [None, "x86-64-v3"], ids=["host", "avx2"])
def test_an_elementwise_loop_after_a_gemm_runs_in_its_epilogue(target, threads):
    """`fuse-gemm-elementwise`: the loop's body becomes the packed GEMM's epilogue (no loop is
    left), the same values as eager within float32's rounding (observed 5.6e-8 of the magnitude;
    the tolerance 5e-7)."""
    torch.manual_seed(0)
    model = _QuickGelu().eval()
    x = torch.randn(37, 48)
    fn = tg.compile(model, (x,), target=target)
    buf_ir = fn.ir("buf")
    assert "} epilogue {" in buf_ir and "buf.fused_elementwise" not in buf_ir
    with torch.no_grad():
        ref = model(x)
    assert (fn(x) - ref).abs().max() <= 5e-7 * ref.abs().max()


class _TokensOfFeatureMap(torch.nn.Module):
    """diffusers' attention input: a feature map [B, C, H, W] viewed as tokens [B, HW, C] (a
    transpose that absorb-blas-flags folds into the GEMM as ``transpose_a``), then a linear."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(48, 40)

    def forward(self, x):
        return self.proj(x.flatten(2).transpose(1, 2))


def test_transposed_lhs_is_copied_for_the_packed_gemm(threads):
    torch.manual_seed(0)
    model = _TokensOfFeatureMap().eval()
    x = torch.randn(1, 48, 5, 6)
    fn = tg.compile(model, (x,))
    assert "transpose_a = true" in fn.ir("tg")
    buf_ir = fn.ir("buf")
    assert "buf.packed_matmul" in buf_ir and "buf.matmul" not in buf_ir and "buf.transpose" in buf_ir
    with torch.no_grad():
        np.testing.assert_allclose(fn(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_set_num_threads_rejects_nonsense():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="positive thread count"):
            tg.set_num_threads(bad)


# --------------------------------------------------------------------------- a tied embedding


def test_tied_embedding_gathers_from_the_packed_lm_head():
    """GPT-2 ties wte to the LM head: the head packs it, and the embedding gathers its rows from
    those panels (rows 64 floats apart), so the table is bound once. Logits match PyTorch
    (max abs 1e-4); an index out of range still names the table."""
    transformers = pytest.importorskip("transformers")
    from conftest import LogitsOnly

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=48, n_head=2, vocab_size=203, n_positions=32)
    model = LogitsOnly(transformers.GPT2LMHeadModel(config).eval())
    ids = torch.randint(0, 203, (2, 9))
    fn = tg.compile(model, (ids,))
    buf_ir = fn.ir("buf")
    nr = panel_columns(203)
    panels = f"memref<{-(-203 // nr)}x48x{nr}xf32>"
    (name,) = set(re.findall(r'buf.packed_weight "([\w.]+)" \{transposed = true, source_shape = array<i64: 203, 48>\} : ' + panels, buf_ir))
    assert name in ("model.lm_head.weight", "model.transformer.wte.weight")  # torch.export keeps one of the tied names
    assert "buf.packed_embedding" in buf_ir and f'buf.weight "{name}"' not in buf_ir
    assert fn.memory.packed_bytes >= 203 * 48 * 4 and fn.memory.weight_bytes < 203 * 48 * 4
    with torch.no_grad():
        np.testing.assert_allclose(fn(ids).numpy(), model(ids).numpy(), rtol=1e-4, atol=1e-4)
    ids[1, 3] = 203
    # named as the model's embedding wrote it, whichever tied name torch.export kept
    with pytest.raises(IndexError, match=r"embedding 'model\.transformer\.wte\.weight'.*: index out of range \[0, 203\)"):
        fn(ids)
    plain = tg.compile(model, (ids.clamp(max=202),), pack_weights=False)
    assert "buf.embedding" in plain.ir("buf") and "packed" not in plain.ir("buf")


def test_tied_embedding_gathers_from_the_table_when_the_lm_head_packs_its_own(monkeypatch):
    """A tuner's LM head on another variant (here every GEMM pinned to matmul.blas, which reads
    the weight as stored; a bf16 or int8 head reads panels of its own) leaves no float32 panels to
    share: the embedding copies its rows from the table, not a cache line per element from
    panels packed for it alone. Logits match PyTorch (max abs 1e-4)."""
    transformers = pytest.importorskip("transformers")
    from conftest import LogitsOnly
    from pinned_gemms import pinned_graph

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=48, n_head=2, vocab_size=203, n_positions=32)
    model = LogitsOnly(transformers.GPT2LMHeadModel(config).eval())
    ids = torch.randint(0, 203, (2, 9))
    graph = pinned_graph(model, (ids,), "host", "matmul.blas", monkeypatch)
    fn = tg.compile_module(graph.module, graph.weights, target="host")
    buf_ir = fn.ir("buf")
    assert "buf.packed_embedding" not in buf_ir and "buf.embedding" in buf_ir and "buf.packed_weight" not in buf_ir
    with torch.no_grad():
        np.testing.assert_allclose(fn(ids.numpy()), model(ids).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(3, 32, 20), (1, 3, 32, 20)])
@torch.no_grad()
def test_a_weight_times_a_batch_of_activations(shape):
    """``W @ x`` for a batch of activation matrices: ``[B, K, N]`` is one packed GEMM per matrix
    by the same weight (the activations packed by the graph); a batch along two dims stays a
    BLAS matmul. Both as eager computes them (observed <= 3e-6)."""

    class WeightTimes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 32))

        def forward(self, x):
            return torch.matmul(self.w, x)

    torch.manual_seed(0)
    model = WeightTimes().eval()
    x = torch.randn(*shape)
    fn = tg.compile(model, (x,))
    assert ("buf.packed_matmul" in fn.ir("buf")) == (len(shape) == 3)
    torch.testing.assert_close(fn(x), model(x), rtol=1e-5, atol=1e-5)


class _ScaledGate(torch.nn.Module):
    """A residual tail of two operands no fused activation names: ``x + 0.3 * y * sigmoid(x)``
    after a linear layer (a scaled, gated residual); one elementwise loop over the GEMM's output
    and the residual."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(48, 48)

    def forward(self, x):
        return x + 0.3 * self.fc(x) * torch.sigmoid(x)


@pytest.mark.parametrize("target", [None, "x86-64-v3"], ids=["host", "avx2"])
def test_a_two_operand_loop_after_a_gemm_runs_in_its_epilogue(target, threads):
    """`fuse-gemm-elementwise`: a loop over the GEMM's output and one more operand becomes the
    GEMM's epilogue of two arguments, the operand the GEMM's last input (its accumulator here:
    the bias is added before, beta 1); no loop is left; eager's values within float32's rounding
    (tolerance 5e-7 of the magnitude)."""
    torch.manual_seed(0)
    model = _ScaledGate().eval()
    x = torch.randn(37, 48)
    fn = tg.compile(model, (x,), target=target)
    buf_ir = fn.ir("buf")
    assert "buf.fused_elementwise" not in buf_ir and buf_ir.count("^bb0(%") == 1
    assert any(line.strip().startswith("^bb0(") and line.count(": f32") == 2 for line in buf_ir.splitlines())
    with torch.no_grad():
        ref = model(x)
    assert (fn(x) - ref).abs().max() <= 5e-7 * ref.abs().max()
