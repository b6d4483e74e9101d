"""GEMMs that write bf16 (`narrow-gemm-output`): a bf16 model's convolutions whose epilogue rounds,
and a float32 model's convolutions on bf16 panels read only by the next convolution's im2col.

Narrowing is exact: a GEMM's bf16 output holds the values its float32 output held (the rounded
values, or those the reader would round as it packs them), so every output must be bit for bit
that of the same graph compiled without the pass, on every engine (AMX tiles, AVX512-BF16 dot
products, their emulation with FMAs; at 1 and 2 threads). A bf16 model's GEMM that writes a bf16
activation several ops read (`fuse-gemm-elementwise`), and an epilogue body reading a bf16
residual, are checked against eager within the model's roundings. (The pass's rewrite of loops
and epilogue bodies that read a narrowed buffer: its lit test.)"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from xdsl.dialects.builtin import UnitAttr

import tensor_graphs as tg
import tensor_graphs.transforms.fuse_gemm_elementwise as fuse_gemm_elementwise
import tensor_graphs.transforms.narrow_gemm_output as narrow_pass
import tensor_graphs.tuning.compile as tuned_compile
import tensor_graphs.tuning.tuner as tuner
from pinned_gemms import pinned_graph
from tensor_graphs.target import Target
from test_bf16_conv import ENGINES, _compiled, _runnable


def _narrowing_everywhere(engine: str, monkeypatch) -> None:
    """Off AMX the passes leave every GEMM writing float32 (`narrow_gemm_output.tiles_whole_k`);
    the register tiles' bf16 output (all of K in one block, from the stack tile) is forced there,
    as hand-written buf IR could ask for it, so that it is checked on every CPU."""
    if engine != "amx":
        for module in (narrow_pass, fuse_gemm_elementwise):
            monkeypatch.setattr(module, "tiles_whole_k", lambda op, target: True)


def _without_narrowing(monkeypatch, compile_it):
    """``compile_it()`` with `narrow-gemm-output` doing nothing (and no compile cache, whose
    graph entries are keyed by the module a compile starts from, not by what its passes do)."""
    with monkeypatch.context() as m:
        m.setattr(narrow_pass.NarrowGemmOutput, "match_and_rewrite", lambda self, op, rewriter: None)
        m.setenv("TG_CACHE", "off")
        return compile_it()


def _bf16_gemm_outputs(fn) -> int:
    """How many of the graph's GEMMs write bf16."""
    lines = [line for line in fn.ir("buf").splitlines() if "buf.packed_matmul" in line]
    return sum(1 for line in lines if "xbf16>" in line.split("outs(")[1].split(")")[0])


def _with_threads(threads: int, run):
    before = tg.get_num_threads()
    tg.set_num_threads(threads)
    try:
        return run()
    finally:
        tg.set_num_threads(before)


class _Chain(torch.nn.Module):
    """``h = relu(a(x))``, ``y = relu(b(h) + h)`` (a bias and a residual: on AMX the sums start from
    the bias, the residual added from memory), then a strided 3x3 and a 1x1 over it: ``y`` and the
    3x3's output are read only by the next convolution's im2col into bf16 panels (``h`` also as a
    residual: it stays float32). 2 images (a batch of GEMMs), 72 and 24 channels (on AMX: two
    whole 32-row blocks, the second's K steps running the first's deferred epilogue, then 8 tail
    rows; 24 tail rows alone), 11 x 11 and 6 x 6 positions (partial panels)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(64, 72, 1)
        self.b = torch.nn.Conv2d(72, 72, 1)
        self.c = torch.nn.Conv2d(72, 24, 3, stride=2, padding=1)
        self.d = torch.nn.Conv2d(24, 8, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.d(torch.relu(self.c(torch.relu(self.b(h) + h))))


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("threads", [1, 2])
def test_a_float32_models_convolutions_write_bf16_for_bf16_panels(engine, threads, monkeypatch):
    """Every convolution pinned to bf16 panels: the second and third write bf16 (their readers
    pack bf16 panels), the first float32 (a residual too), the last the float32 output; bit for
    bit the graph that writes float32."""
    torch.manual_seed(3)
    _narrowing_everywhere(engine, monkeypatch)
    model, x = _Chain().eval(), torch.randn(2, 64, 11, 11)
    monkeypatch.setenv("TG_CACHE", "off")  # (a graph compiled before with the passes as they are)
    narrowed = _with_threads(threads, lambda: _compiled(model, x, engine, monkeypatch))
    wide = _with_threads(threads, lambda: _without_narrowing(monkeypatch, lambda: _compiled(model, x, engine, monkeypatch)))
    assert _bf16_gemm_outputs(narrowed) == 2 and _bf16_gemm_outputs(wide) == 0
    got = _with_threads(threads, lambda: narrowed(x.numpy()))
    assert np.array_equal(got, _with_threads(threads, lambda: wide(x.numpy())))
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.abs(got - ref).max() <= 2e-2 * np.abs(ref).max()  # two roundings of the activations (observed 5e-3)


class _Residual(torch.nn.Module):
    """``h = relu(a(x))`` read by a convolution, as its residual, and by an elementwise loop."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(16, 48, 1)
        self.b = torch.nn.Conv2d(48, 48, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return torch.relu(self.b(h) + h), h * torch.sigmoid(h)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("threads", [1, 2])
def test_a_bf16_models_gemms_write_its_bf16_activations(engine, threads, monkeypatch):
    """A bf16 model whose activation ``h`` several ops read: the first convolution's GEMM writes
    ``h`` as bf16 itself (`fuse-gemm-elementwise`: the loop that rounded it, in its epilogue);
    the second's epilogue body takes ``h`` as its bf16 residual and writes the bf16 output.
    Within 2^-7 of eager's largest output (a rounding per layer; observed 2^-9)."""
    torch.manual_seed(4)
    _narrowing_everywhere(engine, monkeypatch)
    model = _Residual().eval().to(torch.bfloat16)
    x = torch.randn(1, 16, 13, 13).to(torch.bfloat16)
    target = _runnable(engine)
    monkeypatch.setenv("TG_CACHE", "off")  # (a graph compiled before with the passes as they are)
    fn = _with_threads(threads, lambda: tg.compile(model, (x,), target=target))
    buffers = fn.ir("buf")
    assert _bf16_gemm_outputs(fn) == 2 and buffers.count("buf.packed_matmul") == 2
    assert re.search(r"\^bb0\(%\w+: f32, %\w+: bf16\)", buffers)  # the residual read as bf16 in the epilogue body
    got = _with_threads(threads, lambda: fn(x))
    with torch.no_grad():
        refs = model(x)
    for g, r in zip(got, refs):
        assert g.dtype == torch.bfloat16 and (g.double() - r.double()).abs().max() <= 2.0 ** -7 * r.double().abs().max()


class _StemPool(torch.nn.Module):
    """ResNet's stem, smaller: a convolution at stride 2 (3x3: a 7x7's 49 taps take seconds to
    compile), ReLU, a 3x3 max pool at stride 2, then a 1x1 convolution: the pool is the stem's
    only reader, the 1x1's panels the pool's."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 40, 3, stride=2, padding=1)
        self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.head = torch.nn.Conv2d(40, 8, 1)

    def forward(self, x):
        return self.head(self.pool(torch.relu(self.stem(x))))


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("threads", [1, 2])
def test_a_max_pool_between_convolutions_runs_on_bf16(engine, threads, monkeypatch):
    """A max pool whose readers pack bf16 panels runs on bf16, and the GEMM it reads writes bf16:
    the largest of rounded values is the rounded largest. Bit for bit the graph that writes and
    pools float32, NaN where it has NaN (a NaN and infinities in the input)."""
    torch.manual_seed(5)
    _narrowing_everywhere(engine, monkeypatch)
    model, x = _StemPool().eval(), torch.randn(2, 3, 30, 30)
    x[0, 1, 4, 4], x[1, 2, 9, 17], x[1, 0, 20, 3] = float("nan"), float("inf"), -float("inf")
    monkeypatch.setenv("TG_CACHE", "off")  # (a graph compiled before with the passes as they are)
    narrowed = _with_threads(threads, lambda: _compiled(model, x, engine, monkeypatch))
    wide = _with_threads(threads, lambda: _without_narrowing(monkeypatch, lambda: _compiled(model, x, engine, monkeypatch)))
    assert _bf16_gemm_outputs(narrowed) == 1 and _bf16_gemm_outputs(wide) == 0
    assert re.search(r"buf\.im2col ins\(%\w+ : memref<2x40x15x15xbf16>\) outs\(%\w+ : memref<2x40x8x8xbf16>\).*reduce = \"max\"",
                     narrowed.ir("buf"))
    got = _with_threads(threads, lambda: narrowed(x.numpy()))
    assert np.isnan(got).any() and np.array_equal(got, _with_threads(threads, lambda: wide(x.numpy())), equal_nan=True)


def test_a_bf16_max_pool_too_large_for_the_stack_takes_the_tap_by_tap_path(monkeypatch):
    """The same on the pooling's tap-by-tap path (a plane over `window_reduce.MAX_PLANE_BYTES`,
    here made 0): each tap's bf16 plane combined into the output by the same exact maximum."""
    from tensor_graphs.codegen.llvm import window_reduce

    monkeypatch.setattr(window_reduce, "MAX_PLANE_BYTES", 0)
    test_a_max_pool_between_convolutions_runs_on_bf16("emulated", 1, monkeypatch)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("threads", [1, 2])
def test_rounded_activations_write_the_residual_as_bf16(engine, threads, monkeypatch):
    """With the module's `narrow_gemm_output.ROUND_ACTIVATIONS` (the tuner's whole-graph path), the
    activation ``h`` that the second convolution adds as its residual is written as bf16 too, and
    that GEMM's epilogue widens it: three GEMMs write bf16 where two did. Inexact (``h`` rounded
    where it is added): within 2^-8 of the float32 graph's largest output (observed 2.8e-3),
    and of eager's within the roundings of the bf16 panels."""
    torch.manual_seed(3)
    _narrowing_everywhere(engine, monkeypatch)
    model, x = _Chain().eval(), torch.randn(2, 64, 11, 11)
    monkeypatch.setenv("TG_CACHE", "off")
    wide = _with_threads(threads, lambda: _compiled(model, x, engine, monkeypatch))

    def rounding_compile():
        target = _runnable(engine)
        emulated = frozenset({"avx512bf16"}) if ENGINES[engine] is None else frozenset()
        graph = pinned_graph(model, (x,), target, "matmul.packed_rhs_bf16", monkeypatch, emulated=emulated)
        graph.module.attributes[narrow_pass.ROUND_ACTIVATIONS] = UnitAttr()
        return tg.compile_module(graph.module, graph.weights, target=target)

    rounded = _with_threads(threads, rounding_compile)
    assert _bf16_gemm_outputs(wide) == 2 and _bf16_gemm_outputs(rounded) == 3
    got, base = (_with_threads(threads, lambda f=f: f(x.numpy())) for f in (rounded, wide))
    assert not np.array_equal(got, base) and np.abs(got - base).max() <= 2.0 ** -8 * np.abs(base).max()
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.abs(got - ref).max() <= 2e-2 * np.abs(ref).max()


class _Stream(torch.nn.Module):
    """A residual stream: ``h = relu(a(x))``, ``y = relu(b(h) + h)``, then ``c(y)``: ``h`` is
    read by b's panels and as b's residual (float32, unless rounded); ``y`` by c's panels only."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Conv2d(256, 256, 1) for _ in range(3))

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(torch.relu(self.b(h) + h))


def test_the_tuner_tries_rounded_activations_as_a_whole_graph_path(tmp_path, monkeypatch):
    """Tuned at 1e-2 on a CPU with AMX-BF16, a float32 model whose convolutions go to bf16 panels
    is compiled once more with its residual rounded (`tuning.compile._rounded_activations`):
    `fn.explain()` gives that graph's error and time against the tuned graph's and says which
    was kept (the faster; timing decides, so either); the graph returned is within the
    tolerance of eager, and writes the residual as bf16 where it says "taken"."""
    if "amx-bf16" not in Target.host().extensions:
        pytest.skip("the rounded activations are tried where AMX's tiles run the bf16 GEMMs")
    torch.manual_seed(3)
    model, x = _Stream().eval(), torch.randn(1, 256, 28, 28)
    monkeypatch.setattr(tuned_compile, "_faster", lambda fn, heuristic, inputs, call: fn)  # (the bf16 paths' graph)
    monkeypatch.setattr(tuner, "measure", _bf16_panels_first(tuner.measure))
    fn = tg.compile(model, (x,), tune="missing", tolerance=1e-2, tuning_db=tmp_path / "db.sqlite")
    assert sum("* matmul.packed_rhs_bf16" in line for line in fn.explain().splitlines()) == 3
    said = [line for line in fn.explain().splitlines() if "rounded to bf16" in line]
    assert len(said) == 1 and re.search(r"whole-graph error [0-9.e-]+, [0-9.]+ ms against [0-9.]+ ms per call: (not )?taken", said[0])
    assert _bf16_gemm_outputs(fn) == (2 if said[0].endswith(": taken") else 1)
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.abs(fn(x.numpy()) - ref).max() <= 1e-2 * np.abs(ref).max()



def _bf16_panels_first(measure):
    """The tuner's `measure` with bf16 panels' times made 1 ns: the tuner puts every GEMM on them
    whatever the timing of a small model on a busy host says (the test suite's shards run side by
    side), so that the whole-graph step has its case; their errors are measured as they are."""

    def measured(alone, candidate, *args, **kwargs):
        m = measure(alone, candidate, *args, **kwargs)
        if candidate.variant == "matmul.packed_rhs_bf16":
            m = dataclasses.replace(m, times_ns=tuple(1.0 for _ in m.times_ns))
        return m

    return measured
