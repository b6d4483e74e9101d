"""The int8 GEMM (`matmul.packed_int8`): the weight as int8 per output column in quads along K
(packed at load time), the activations quantised to int8 per row at run time (`buf.quantize_rows`),
int32 sums by AMX tiles (``tdpbusd``, where the target has AMX-INT8 and K is a multiple of 64),
``vpdpbusd`` (AVX512-VNNI on zmm, AVX-VNNI on ymm) or its emulation (every byte widened to 32
bits), scaled back to float32 in the GEMM's epilogue.

Each engine must compute the product of the quantised operands exactly up to float32's rounding
of the scaling: checked against NumPy in float64 over the same codes at 2e-6 of the output's
magnitude (observed <= 2e-7), and against float32 eager within what the two quantisations give
(3e-2 of the magnitude; observed 1.3-1.4e-2). The emulation runs on every CPU with 256-bit vectors
or more; the native engines where the CPU has them (each also compiled for a CPU that has it,
whatever this one is, and its instructions checked in the assembly)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.context import Context

import tensor_graphs as tg
from pinned_gemms import pinned_graph
from tensor_graphs.dialects.packing import int8_scales
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target
from tensor_graphs.tuning.paths import kernel_paths

GELU = torch.nn.GELU(approximate="tanh")

#: engine -> (the target it is compiled for: None for this CPU's ISA level without VNNI, the
#: instruction and register that must be in its code)
ENGINES = {"emulated": (None, None), "avx512vnni": ("icelake-server", "zmm"), "avxvnni": ("alderlake", "ymm"),
           "amx": ("sapphirerapids", "tmm")}


def _emulating_target() -> str:
    """This CPU's ISA level (no VNNI extension: the byte dot products emulated)."""
    level = Target.host().level
    if Target.named(level).vector_bits < 256:
        pytest.skip(f"the int8 GEMM needs 256-bit vectors at least; this CPU's level is {level}")
    return level


def _runnable(engine: str) -> str:
    """The target ``engine`` runs under on this CPU (skips when the CPU lacks its instructions)."""
    target, _ = ENGINES[engine]
    if target is None:
        return _emulating_target()
    missing = Target.named(target).missing_on_host()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(missing)}: the {engine} engine is checked by its emulation and its assembly")
    return target


def _graph(model: torch.nn.Module, inputs: tuple, target: str, monkeypatch, dynamic_shapes=None, params=None):
    """``model`` imported and lowered to tg, every GEMM pinned to matmul.packed_int8 for ``target``
    (the emulating target is told it has VNNI, so that the variant is offered there; its code,
    compiled for the target as it is, emulates the instruction)."""
    emulated = frozenset({"avx512vnni", "avxvnni"}) if target == _emulating_target() else frozenset()
    return pinned_graph(model, inputs, target, "matmul.packed_int8", monkeypatch, emulated=emulated,
                        dynamic_shapes=dynamic_shapes, params=params)


def quantize_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The codes (float64, in [-127, 127]) and per-row scales of `buf.quantize_rows`, in NumPy's
    float32 as the kernel computes them."""
    a = a.astype(np.float32)
    most = np.abs(a).max(-1, keepdims=True)
    inv = np.where(most > 0, np.float32(127) / most, np.float32(0)).astype(np.float32)
    codes = np.rint(np.clip((a * inv).astype(np.float32), -127, 127))
    return codes.astype(np.float64), (most * np.float32(1 / 127)).astype(np.float32).astype(np.float64)


def quantized_linear(x: np.ndarray, lin: torch.nn.Linear) -> np.ndarray:
    """``x @ W.T + b`` over the int8 codes of both, in float64."""
    w = lin.weight.detach().numpy()
    sw = int8_scales(w).astype(np.float64)
    qw = np.clip(np.rint(w / sw[:, None].astype(np.float32)), -127, 127).astype(np.float64)
    qx, sx = quantize_rows(x)
    y = (qx @ qw.T) * sx * sw[None, :]
    return y + lin.bias.detach().numpy() if lin.bias is not None else y


def _gelu(y: np.ndarray) -> np.ndarray:
    return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))


def _check(got: np.ndarray, model: torch.nn.Sequential, x: torch.Tensor) -> None:
    y = quantized_linear(x.numpy(), model[0])
    expected = _gelu(y) if len(model) > 1 else y
    scale = max(np.abs(expected).max(), 1.0)
    assert np.abs(got - expected).max() <= 2e-6 * scale
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.abs(got - ref).max() <= 3e-2 * max(np.abs(ref).max(), 1.0)


# rows (tails of the register tiles' 6), K (not a multiple of 4; several K blocks), N (partial
# panels), bias, GELU; the last on AMX: each 32-row block's GELU deferred into the next block's 3
# K steps, 11 rows a step (a guard past row 32)
SHAPES = [(1, 64, 16, True, False), (5, 97, 40, True, True), (17, 768, 200, False, True), (33, 130, 64, True, False),
          (64, 3001, 300, True, True), (130, 2304, 48, False, False), (70, 192, 96, True, True)]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("rows,k,n,bias,act", SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_int8_gemm_computes_the_quantised_product(engine, rows, k, n, bias, act, threads, monkeypatch):
    torch.manual_seed(rows * 7 + k)
    model = torch.nn.Sequential(*[torch.nn.Linear(k, n, bias=bias)] + ([GELU] if act else [])).eval()
    x = torch.randn(rows, k)
    graph = _graph(model, (x,), _runnable(engine), monkeypatch)
    before = tg.get_num_threads()
    tg.set_num_threads(threads)
    try:
        got = tg.compile_module(graph.module, graph.weights, target=_runnable(engine))(x.numpy())
    finally:
        tg.set_num_threads(before)
    _check(got, model, x)


@pytest.mark.parametrize("params", [{}, {"k_block": 64}, {"mr": 3}], ids=["default", "k_block_64", "mr_3"])
def test_int8_gemm_blocking(params, monkeypatch):
    """The tuner's parameters (K blocks: the int32 sums of each block added to the float32 ones;
    fewer tile rows) compute the same product; 1100 rows by two panels also take the
    A-stationary order where the host's L2 makes it."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 100)).eval()
    x = torch.randn(1100, 1024)
    target = _runnable("emulated")
    graph = _graph(model, (x,), target, monkeypatch, params=params)
    _check(tg.compile_module(graph.module, graph.weights, target=target)(x.numpy()), model, x)


class _Residual(torch.nn.Module):
    """``relu(x @ W.T + b + r)``: a bias and a residual in the GEMM's epilogue."""

    def __init__(self, k: int, n: int):
        super().__init__()
        self.fc = torch.nn.Linear(k, n)

    def forward(self, x, r):
        return torch.relu(self.fc(x) + r)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_int8_gemm_epilogue_with_a_residual(engine, monkeypatch):
    """The scales, then bias, residual and ReLU on each tile (AMX: each 32 x 32 block), 37 rows
    (a tail of 1; of AMX's 32: 5), a partial panel of 36 columns."""
    torch.manual_seed(11)
    model = _Residual(128, 100).eval()
    x, r = torch.randn(37, 128), torch.randn(37, 100)
    target = _runnable(engine)
    graph = _graph(model, (x, r), target, monkeypatch)
    fn = tg.compile_module(graph.module, graph.weights, target=target)
    assert fn.ir("buf").count("buf.packed_matmul") == 1 and "buf.binary" not in fn.ir("buf")
    got = fn(x.numpy(), r.numpy())
    expected = np.maximum(quantized_linear(x.numpy(), model.fc) + r.numpy(), 0.0)
    assert np.abs(got - expected).max() <= 2e-6 * np.abs(expected).max()


@pytest.mark.parametrize("engine", ["emulated", "avx512vnni", "amx"])
def test_int8_gemm_over_run_time_rows(engine, monkeypatch):
    """One graph for rows 1 to 80 (a size symbol): the rows quantised and each call's row tails
    computed right."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(192, 80), GELU).eval()
    rows = torch.export.Dim("rows", min=1, max=80)
    target = _runnable(engine)
    graph = _graph(model, (torch.randn(8, 192),), target, monkeypatch, dynamic_shapes=({0: rows},))
    fn = tg.compile_module(graph.module, graph.weights, target=target)
    for m in (1, 2, 5, 6, 7, 31, 80):
        x = torch.randn(m, 192)
        _check(fn(x.numpy()), model, x)


def test_int8_gemm_rows_of_nan_inf_and_zeros(monkeypatch):
    """A row holding a NaN gives NaN across its output row, as eager's; one holding an infinity
    too (its scale is not finite: eager gives +-inf or NaN there); a row of zeros gives the bias
    exactly; the other rows are untouched."""
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(70, 48)).eval()
    x = torch.randn(6, 70)
    x[1, 5], x[3, 69], x[4] = float("nan"), float("inf"), 0.0
    target = _runnable("emulated")
    graph = _graph(model, (x,), target, monkeypatch)
    got = tg.compile_module(graph.module, graph.weights, target=target)(x.numpy())
    assert np.isnan(got[1]).all() and np.isnan(got[3]).all()
    assert np.array_equal(got[4], model[0].bias.detach().numpy())
    finite = [0, 2, 5]
    expected = quantized_linear(x.numpy()[finite], model[0])
    assert np.abs(got[finite] - expected).max() <= 2e-6 * np.abs(expected).max()


def test_int8_gemms_of_one_input_share_its_quantised_rows(monkeypatch):
    """Two GEMMs of the same activation (a Q and a K projection) quantise it once."""

    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k = torch.nn.Linear(64, 32), torch.nn.Linear(64, 48)

        def forward(self, x):
            return self.q(x).sum(-1) + self.k(x).sum(-1)

    torch.manual_seed(4)
    model = TwoHeads().eval()
    x = torch.randn(9, 64)
    target = _runnable("emulated")
    graph = _graph(model, (x,), target, monkeypatch)
    fn = tg.compile_module(graph.module, graph.weights, target=target)
    assert fn.ir("buf").count("buf.quantize_rows") == 1
    expected = quantized_linear(x.numpy(), model.q).sum(-1) + quantized_linear(x.numpy(), model.k).sum(-1)
    assert np.abs(fn(x.numpy()) - expected).max() <= 2e-6 * np.abs(expected).max() * 32


@pytest.mark.parametrize("engine", ["avx512vnni", "avxvnni", "amx"])
def test_int8_gemm_compiles_to_its_instructions(engine, monkeypatch):
    """Compiled for a CPU with VNNI (whatever this one is): the GEMM's inner loop is ``vpdpbusd``
    on the target's vectors (zmm for AVX512-VNNI, ymm for AVX-VNNI: its VEX form); with AMX-INT8,
    ``tdpbusd`` on tiles under a tile configuration."""
    import llvmlite.binding as llvm

    from tensor_graphs.codegen.llvm.jit import _target_machine, to_llvm_ir

    target, register = ENGINES[engine]
    model = torch.nn.Sequential(torch.nn.Linear(256, 128)).eval()
    graph = _graph(model, (torch.randn(40, 256),), target, monkeypatch)
    build_pipeline("convert-tensor-to-buffer{threads=2},plan-memory,convert-buffer-to-llvm").apply(Context(), graph.module)
    mod = llvm.parse_assembly(to_llvm_ir(graph.module))
    mod.verify()
    asm = _target_machine(2, Target.named(target)).emit_assembly(mod)
    if engine == "amx":
        assert asm.count("tdpbusd") >= 4 and "ldtilecfg" in asm and "tilerelease" in asm and "vpdpbusd" not in asm
        return
    ops = [line for line in asm.splitlines() if "vpdpbusd" in line]
    assert len(ops) >= 4 * 6 and all(register in line for line in ops)
    assert "vpmulld" not in asm and "tdpbusd" not in asm  # no emulation, no tiles


def test_int8_gemm_is_offered_where_the_target_has_vnni():
    """The variant is a path for the tuner (never the heuristic's choice) on a target with VNNI
    (AVX512-VNNI, AVX-VNNI on 256-bit vectors) or AMX-INT8, refused with the reason elsewhere and
    for a K whose int32 sums could overflow."""
    from tensor_graphs.target import record

    model = torch.nn.Sequential(torch.nn.Linear(64, 32)).eval()
    for target, offered in (("sapphirerapids", True), ("znver4", True), ("icelake-server", True), ("alderlake", True),
                            ("x86-64-v4", False), ("haswell", False)):
        graph = import_model(model, (torch.randn(4, 64),))
        build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
        record(graph.module, Target.named(target))
        (gemm,) = [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"]
        assert ("matmul.packed_int8" in gemm.applicable) == offered and gemm.applicable[0] == "matmul.packed"
        if not offered:
            assert dict(gemm.rejected)["matmul.packed_int8"] == \
                f"the target ({target}) has no int8 dot products (AVX512-VNNI or AVX-VNNI)"
    long = import_model(torch.nn.Sequential(torch.nn.Linear(70000, 16)).eval(), (torch.randn(2, 70000),))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), long.module)
    (gemm,) = [p for p in kernel_paths(long.module) if p.name == "tg.matmul"]
    assert "int32 sums of 255 x 127 products could overflow" in dict(gemm.rejected)["matmul.packed_int8"]
