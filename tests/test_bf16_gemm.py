"""The bf16 GEMM (`matmul.packed_bf16`): the weight packed as bf16 pairs along K, the activations
rounded to bf16 once per call, float32 sums, on AMX tiles (`kernels_amx`), AVX512-BF16 dot
products or their emulation with FMAs (`bf16_dot`), whichever the target has.

Each engine must compute the product of the rounded operands: checked against NumPy in float64
over the bf16-rounded activations and weights at 2e-6 of the output's magnitude (float32 sums
over K <= 2304: observed <= 1.3e-6), and against float32 eager within what the two roundings give
(1e-2 of the magnitude; observed 2-3e-3). The emulation runs on every CPU; the native engines
where the CPU has them (each also compiled for a CPU that has it, whatever this one is, and its
instructions checked in the assembly)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from xdsl.context import Context

import tensor_graphs as tg
from pinned_gemms import pinned_graph
from tensor_graphs.dialects.packing import from_bf16, to_bf16
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target
from tensor_graphs.tuning.paths import Candidate, kernel_paths, pin

GELU = torch.nn.GELU(approximate="tanh")


def _gelu(y: np.ndarray) -> np.ndarray:
    return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))


#: engine -> (the target it is compiled for, the instruction that must be in its code)
ENGINES = {
    "emulated": (None, None),
    "avx512bf16": ("cooperlake", "vdpbf16ps"),
    "amx": ("sapphirerapids", "tdpbf16ps"),
}


def _emulating_target() -> str:
    """This CPU's ISA level without bf16 instructions (AVX-512's 16 lanes where it has them)."""
    return Target.host().level


def _graph(model: torch.nn.Module, x: torch.Tensor, target: str, monkeypatch, dynamic_shapes=None):
    """``model`` imported and lowered to tg, every GEMM pinned to matmul.packed_bf16 for ``target``
    (the emulating target is told it has AVX512-BF16, so that the variant is offered there)."""
    emulated = frozenset({"avx512bf16"}) if target == _emulating_target() else frozenset()
    return pinned_graph(model, (x,), target, "matmul.packed_bf16", monkeypatch, emulated=emulated, dynamic_shapes=dynamic_shapes)


def _runnable(engine: str) -> str:
    """The target ``engine`` runs under on this CPU (skips when the CPU lacks its instructions)."""
    target, _ = ENGINES[engine]
    if target is None:
        return _emulating_target()
    missing = Target.named(target).missing_on_host()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(missing)}: the {engine} engine is checked by its emulation and its assembly")
    return target


def _expected(model: torch.nn.Sequential, x: np.ndarray) -> np.ndarray:
    """The product of the bf16-rounded operands in float64, bias and GELU after it."""
    lin = model[0]
    w = from_bf16(to_bf16(lin.weight.detach().numpy())).astype(np.float64)
    y = from_bf16(to_bf16(x)).astype(np.float64) @ w.T
    if lin.bias is not None:
        y = y + lin.bias.detach().numpy()
    return _gelu(y) if len(model) > 1 else y


def _check(got: np.ndarray, model: torch.nn.Sequential, x: torch.Tensor) -> None:
    expected = _expected(model, x.numpy())
    scale = max(np.abs(expected).max(), 1.0)
    assert np.abs(got - expected).max() <= 2e-6 * scale
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.abs(got - ref).max() <= 1e-2 * max(np.abs(ref).max(), 1.0)


# rows (tails of 16 and 32 rows, of the register tiles' 6), K (AMX's multiples of 32, and not),
# N (partial panels and partial column tiles of 16), bias, GELU; the last two have fewer panels
# than twice the cores: on AMX each panel's rows are split into groups (`kernels_amx.row_groups`).
# With GELU and whole 32-row blocks, AMX defers each block's activation into the next block's K
# steps: 2 rows a step (K 768), 4 (K 256), 6 with a guard past row 32 and a K tail (K 200)
SHAPES = [(1, 64, 16, True, False), (5, 96, 40, True, True), (17, 768, 200, False, True), (33, 130, 64, True, False),
          (64, 768, 1000, True, True), (130, 2304, 48, False, False), (100, 256, 128, True, True),
          (70, 200, 96, True, True)]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("rows,k,n,bias,act", SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_gemm_computes_the_rounded_product(engine, rows, k, n, bias, act, threads, monkeypatch):
    torch.manual_seed(rows * 7 + k)
    layers = [torch.nn.Linear(k, n, bias=bias)] + ([GELU] if act else [])
    model = torch.nn.Sequential(*layers).eval()
    x = torch.randn(rows, k)
    graph = _graph(model, x, _runnable(engine), monkeypatch)
    before = tg.get_num_threads()
    tg.set_num_threads(threads)
    try:
        fn = tg.compile_module(graph.module, graph.weights, target=_runnable(engine))
        got = fn(x.numpy())
    finally:
        tg.set_num_threads(before)
    _check(got, model, x)


def _compiled_with_residual(model: torch.nn.Module, x: torch.Tensor, r: torch.Tensor, engine: str, separate: bool,
                            monkeypatch):
    """``model(x, r)`` compiled for ``engine``'s target with its GEMM pinned to matmul.packed_bf16
    (``separate``: with ``separate_epilogue``)."""
    from tensor_graphs.lowering.tensor_to_buffer import kernels
    from tensor_graphs.target import record

    target = _runnable(engine)
    named = Target.named(target)
    if target == _emulating_target():
        monkeypatch.setattr(kernels, "_target_of", lambda op: dataclasses.replace(named, extensions=named.extensions | {"avx512bf16"}))
    graph = import_model(model, (x, r))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    record(graph.module, named)
    for p in kernel_paths(graph.module):
        if p.name == "tg.matmul":
            pin(p.op, Candidate("matmul.packed_bf16", {"separate_epilogue": 1} if separate else {}))
    return tg.compile_module(graph.module, graph.weights, target=target)


class _Residual(torch.nn.Module):
    """``relu(x @ W.T + b + r)``: a bias and a residual in the GEMM's epilogue."""

    def __init__(self, k: int, n: int):
        super().__init__()
        self.fc = torch.nn.Linear(k, n)

    def forward(self, x, r):
        return torch.relu(self.fc(x) + r)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("separate", [False, True], ids=["on_each_tile", "swept"])
def test_bf16_gemm_epilogue_with_a_residual(engine, separate, monkeypatch):
    """Bias, residual and ReLU on each block of the output (AMX: each 32 x 32 block; the
    register tiles: each tile), or in one sweep after (``tg.separate_epilogue``), 37 rows (a
    tail of 5), a partial panel of 36 columns."""
    torch.manual_seed(11)
    model = _Residual(96, 100).eval()
    x, r = torch.randn(37, 96), torch.randn(37, 100)
    fn = _compiled_with_residual(model, x, r, engine, separate, monkeypatch)
    assert fn.ir("buf").count("buf.packed_matmul") == 1 and "buf.binary" not in fn.ir("buf")
    got = fn(x.numpy(), r.numpy())
    y = _expected(torch.nn.Sequential(model.fc), x.numpy()) + r.numpy()
    expected = np.maximum(y, 0.0)
    assert np.abs(got - expected).max() <= 2e-6 * np.abs(expected).max()


class _GatedResidual(torch.nn.Module):
    """``r + 0.3 * (x @ W.T + b) * sigmoid(r)``: a tail of the GEMM's output and one more operand
    (`fuse-gemm-elementwise`: the GEMM's epilogue body of two arguments)."""

    def __init__(self, k: int, n: int):
        super().__init__()
        self.fc = torch.nn.Linear(k, n)

    def forward(self, x, r):
        return r + 0.3 * self.fc(x) * torch.sigmoid(r)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("separate", [False, True], ids=["on_each_tile", "swept"])
def test_bf16_gemm_epilogue_body_of_two_operands(engine, separate, monkeypatch):
    """The body takes the sum and the residual's value (AMX: after each 32 x 32 block's tiles,
    none of it deferred or added as the tiles are stored; the register tiles: each tile; or one
    sweep after), 37 rows, a partial panel; against the float64 value of the rounded product
    within 2e-6 of the magnitude."""
    torch.manual_seed(12)
    model = _GatedResidual(96, 100).eval()
    x, r = torch.randn(37, 96), torch.randn(37, 100)
    fn = _compiled_with_residual(model, x, r, engine, separate, monkeypatch)
    buf_ir = fn.ir("buf")
    assert buf_ir.count("buf.packed_matmul") == 1 and "buf.fused_elementwise" not in buf_ir and "epilogue {" in buf_ir
    got = fn(x.numpy(), r.numpy())
    rr = r.numpy().astype(np.float64)
    expected = rr + 0.3 * _expected(torch.nn.Sequential(model.fc), x.numpy()) / (1 + np.exp(-rr))
    assert np.abs(got - expected).max() <= 2e-6 * np.abs(expected).max()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_bf16_gemm_over_run_time_rows(engine, monkeypatch):
    """One graph for rows 1 to 80 (a size symbol): each call's row tails (of AMX's 16 and 32
    rows, of the register tiles') computed right."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(192, 80), GELU).eval()
    rows = torch.export.Dim("rows", min=1, max=80)
    target = _runnable(engine)
    graph = _graph(model, torch.randn(8, 192), target, monkeypatch, dynamic_shapes=({0: rows},))
    fn = tg.compile_module(graph.module, graph.weights, target=target)
    for m in (1, 2, 15, 16, 17, 31, 32, 33, 47, 80):
        x = torch.randn(m, 192)
        _check(fn(x.numpy()), model, x)


def assembly(module, target: str) -> str:
    """A tg-level ``module`` lowered for 2 threads, compiled (verified) to ``target``'s assembly."""
    import llvmlite.binding as llvm

    from tensor_graphs.codegen.llvm.jit import _target_machine, to_llvm_ir

    build_pipeline("convert-tensor-to-buffer{threads=2},plan-memory,convert-buffer-to-llvm").apply(Context(), module)
    mod = llvm.parse_assembly(to_llvm_ir(module))
    mod.verify()
    return _target_machine(2, Target.named(target)).emit_assembly(mod)


@pytest.mark.parametrize("engine,k", [("avx512bf16", 256), ("amx", 256), ("amx", 130)])
def test_bf16_gemm_compiles_to_its_instructions(engine, k, monkeypatch):
    """Compiled for a CPU with the engine's instructions (whatever this CPU is): the GEMM's code
    is ``vdpbf16ps`` on zmm registers, or AMX tile products under a tile configuration (K = 130:
    its tail of 2 words under a configuration of its own)."""
    target, instruction = ENGINES[engine]
    model = torch.nn.Sequential(torch.nn.Linear(k, 128)).eval()
    asm = assembly(_graph(model, torch.randn(40, k), target, monkeypatch).module, target)
    ops = [line for line in asm.splitlines() if instruction in line]
    if engine == "amx":
        assert len(ops) >= 4 and "ldtilecfg" in asm and "tilerelease" in asm
        assert "vdpbf16ps" not in asm
        # whole rows and tail rows (2); with a K tail, each block's whole-K and tail configurations too
        assert asm.count("ldtilecfg") == 2 if k % 32 == 0 else asm.count("ldtilecfg") > 4
    else:
        assert len(ops) >= 4 * 4 and all("zmm" in line for line in ops)
        assert "tdpbf16ps" not in asm


def test_amx_row_groups_give_every_core_work():
    """Few panels: each one's rows in groups of whole 32-row blocks, about two items per core;
    an A larger than half the L2 over several panels: groups whose rows of A fit in it."""
    from tensor_graphs.codegen.llvm.kernels_amx import row_groups

    assert row_groups(48, 128, 2) == 1 and row_groups(4, 512, 2) == 1  # enough panels
    assert row_groups(1, 512, 2) == 4 and row_groups(2, 130, 2) == 2 and row_groups(3, 512, 2) == 2
    assert row_groups(1, 40, 2) == 1 and row_groups(1, None, 2) == 1  # one block; run-time rows
    mib = 1 << 20
    assert row_groups(2, 2048, 2, 4 * mib, 2 * mib) == 4 and row_groups(48, 2048, 2, 4 * mib, 2 * mib) == 4
    assert row_groups(1, 2048, 2, 4 * mib, 2 * mib) == 4  # one panel: A is read once anyway (the cores' 4)
    assert row_groups(7, 64, 2, 4 * mib, 2 * mib) == 2 and row_groups(48, 2048, 2, mib, 2 * mib) == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_amx_gemm_over_row_groups_that_fit_the_cache(threads, monkeypatch):
    """A (200 x 768 bf16, 300 KiB) over a target whose L2 is 128 KiB: 5 row groups (the last with
    the 8 tail rows) over every panel (the last of 8 columns), items group-major."""
    import dataclasses

    from tensor_graphs.target import Caches

    name = _runnable("amx")
    host = Target.named(name)
    target = dataclasses.replace(host, caches=Caches(host.caches.l1d, 128 * 1024, host.caches.l3, host.caches.line))
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(768, 200), GELU).eval()
    x = torch.randn(200, 768)
    graph = _graph(model, x, name, monkeypatch)
    before = tg.get_num_threads()
    tg.set_num_threads(threads)
    try:
        got = tg.compile_module(graph.module, graph.weights, target=target)(x.numpy())
    finally:
        tg.set_num_threads(before)
    _check(got, model, x)


def test_bf16_gemm_is_offered_where_the_target_has_bf16():
    """The variant is a path for the tuner (never the heuristic's choice) on a target with
    AVX512-BF16 or AMX, refused with the reason elsewhere and for an odd K."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 32)).eval()
    for target, offered in (("sapphirerapids", True), ("znver4", True), ("x86-64-v4", False), ("haswell", False)):
        graph = import_model(model, (torch.randn(4, 64),))
        build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
        from tensor_graphs.target import record

        record(graph.module, Target.named(target))
        paths = [p for p in kernel_paths(graph.module) if p.name == "tg.matmul"][0]
        assert ("matmul.packed_bf16" in paths.applicable) == offered
        assert paths.applicable[0] == "matmul.packed"
        if not offered:
            assert dict(paths.rejected)["matmul.packed_bf16"] == f"the target ({target}) has no bf16 dot products (AVX512-BF16)"
    odd = import_model(torch.nn.Sequential(torch.nn.Linear(63, 32)).eval(), (torch.randn(4, 63),))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), odd.module)
    paths = [p for p in kernel_paths(odd.module) if p.name == "tg.matmul"][0]
    assert dict(paths.rejected)["matmul.packed_bf16"] == "K = 63 is odd: bf16 pairs along K need an even K"


class _ThreeProjections(torch.nn.Module):
    """Q, K and V of one x (an attention's projections), summed."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(64, 32) for _ in range(3))

    def forward(self, x):
        return self.q(x) + self.k(x) * self.v(x)


def test_bf16_gemms_of_one_lhs_share_its_cast(monkeypatch):
    """Three GEMMs of one activation round it to bf16 once (one buf.cast, read by all three)."""
    torch.manual_seed(5)
    model = _ThreeProjections().eval()
    x = torch.randn(20, 64)
    target = _emulating_target()
    graph = _graph(model, x, target, monkeypatch)
    fn = tg.compile_module(graph.module, graph.weights, target=target)
    buffers = fn.ir("buf")
    assert buffers.count("buf.cast") == 1 and buffers.count("buf.packed_matmul") == 3
    with torch.no_grad():
        ref = model(x).numpy()
    xr = from_bf16(to_bf16(x.numpy())).astype(np.float64)
    q, k, v = ((xr @ from_bf16(to_bf16(p.weight.detach().numpy())).astype(np.float64).T + p.bias.detach().numpy())
               for p in (model.q, model.k, model.v))
    got = fn(x.numpy())
    expected = q + k * v
    assert np.abs(got - expected).max() <= 2e-6 * np.abs(expected).max()
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()


@pytest.mark.parametrize("rows", [1, 37, 128])
def test_a_bf16_model_runs_its_gemms_on_bf16_operands(rows):
    """A bf16 model (``model.to(torch.bfloat16)``): each GEMM of a bf16 weight and bf16 values
    (the input widened, a fused GELU's result rounded to bf16) runs on the bf16 operands
    themselves, the heuristic's choice on any CPU (AMX, vdpbf16ps or their emulation): the weights
    packed once as bf16 pairs, never widened per call. Products of bf16 values are exact in
    float32, so the output is eager's within one bf16 rounding of the largest output (2^-8 of it;
    the sums' order differs)."""
    torch.manual_seed(rows)
    model = torch.nn.Sequential(torch.nn.Linear(96, 200), torch.nn.GELU(), torch.nn.Linear(200, 64)).eval()
    model = model.to(torch.bfloat16)
    x = torch.randn(rows, 96).to(torch.bfloat16)
    fn = tg.compile(model, (x,))
    buffers = fn.ir("buf")
    assert buffers.count("buf.packed_matmul") == 2 and "buf.matmul" not in buffers
    assert "xbf16>, memref<" in buffers.split("buf.packed_matmul ins(")[1]  # a bf16 lhs
    assert "memref<200x96xf32>" not in buffers and "memref<64x200xf32>" not in buffers  # no widened weight
    with torch.no_grad():
        ref = model(x).float()
    got = fn(x).float()
    assert got.dtype == torch.float32 and (got - ref).abs().max() <= 2.0 ** -8 * ref.abs().max()
