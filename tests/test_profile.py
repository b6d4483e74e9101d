"""Per-kernel profiling: ``compile(..., profile=True)``, ``fn.profile``, ``tg-run --profile``.

What is checked, on an MLP, a big-matmul graph, a small transformer block and a KV-cache
decoder:

* every kernel of the graph appears once in the report, with one call per run, and the shares
  sum to 100% of the measured time (which is close to, and not above, the wall time);
* the slowest kernel of a graph dominated by a large GEMM is that matmul, and the by-kind
  summary puts matmul first;
* a profiled graph computes exactly what the plain one does (the kernels are the same code);
* a graph compiled without profiling has no clock in its LLVM IR and ``fn.profile`` says how to
  get one; a profiled graph with KV-cache states finds its counters after the states.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from conftest import mlp
from tensor_graphs.runtime_support.profile import ProfileReport
from test_transformer_blocks import Stack

BIN = Path(sys.executable).parent
REPEAT = 5


def kernel_functions(fn) -> dict[int, str]:
    """Kernel index -> kind, from the kernel functions (``@forward__3_matmul``) of the LLVM IR
    (not their parallel workers, ``@forward__3_packed_matmul__par0``)."""
    entry = fn.signature.entry
    found = re.findall(rf'define internal [^@]*@"?{entry}__(\d+)_(\w+?)"?\(', fn.ir("llvm"))
    return {int(i): kind for i, kind in found if not re.search(r"__par\d+$", kind)}


def check_report(fn, report: ProfileReport, runs: int) -> None:
    """Every kernel once, one call per run, shares summing to 1, measured <= wall. A kernel
    whose code equals an earlier one's calls that function (no function of its own)."""
    kinds = kernel_functions(fn)
    assert len(report.kernels) == len(fn.signature.profile) > 0
    assert sorted(k.index for k in report.kernels) == list(range(len(report.kernels)))
    assert set(kinds) <= set(range(len(report.kernels))) and 0 in kinds
    for k in report.kernels:
        assert k.kind == kinds.get(k.index, k.kind)
        assert k.calls == runs
        assert k.total_ns >= 0
    assert sum(k.share for k in report.kernels) == pytest.approx(1.0)
    assert sum(k.share for k in report.by_kind().values()) == pytest.approx(1.0)
    assert report.measured_ns == sum(k.total_ns for k in report.kernels) > 0
    assert report.measured_ns <= report.wall_ns
    times = [k.total_ns for k in report.kernels]
    assert times == sorted(times, reverse=True)


@pytest.fixture(scope="module")
def mlp_pair():
    torch.manual_seed(0)
    model = mlp((64, 256, 256, 32))
    x = torch.randn(16, 64)
    return model, x, tg.compile(model, (x,), profile=True), tg.compile(model, (x,))


def test_mlp_report_covers_every_kernel(mlp_pair):
    _, x, fn, _ = mlp_pair
    report = fn.profile(x, repeat=REPEAT)
    check_report(fn, report, REPEAT)
    # the first two layers' weights are packed; the last has 32 < 64 columns, packed in one panel of 32
    assert {k.kind for k in report.kernels} == {"packed_matmul"}
    assert report.kernels[0].label.startswith("buf.packed_matmul 16x")


def test_profiled_results_equal_plain(mlp_pair):
    model, x, fn, plain = mlp_pair
    np.testing.assert_array_equal(fn(x).numpy(), plain(x).numpy())
    with torch.no_grad():
        np.testing.assert_allclose(fn(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_plain_graph_has_no_clock(mlp_pair):
    _, x, fn, plain = mlp_pair
    assert "clock_gettime" in fn.ir("llvm")
    assert "clock_gettime" not in plain.ir("llvm")
    assert plain.signature.profile is None
    assert fn.profiled and not plain.profiled
    with pytest.raises(RuntimeError, match="compiled without profiling.*profile=True"):
        plain.profile(x)


def test_counters_accumulate_and_reset(mlp_pair):
    _, x, fn, _ = mlp_pair
    fn(x)
    fn(x)
    report = tg.profile(fn, x, repeat=3, warmup=0)  # the calls before are not counted
    assert {k.calls for k in report.kernels} == {3}
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        fn.profile(x, repeat=0)


def test_report_text(mlp_pair):
    _, x, fn, _ = mlp_pair
    report = fn.profile(x, repeat=2)
    text = str(report)
    assert text.startswith("profile of @forward: 2 run(s), 3 kernels")
    lines = text.splitlines()
    assert lines[1].split() == ["share", "us/run", "us/call", "calls", "kernel"]
    assert lines[2].endswith(report.kernels[0].label)
    assert "kind" in text and "packed_matmul" in lines[-1]
    short = report.format(top=1)
    assert "... 2 more kernels" in short and report.kernels[1].label not in short


def test_largest_kernel_of_a_big_matmul_graph_is_the_matmul():
    torch.manual_seed(0)
    # ~0.5 GFLOP of GEMM against ~1 MB of layer norm and tanh: robust to a busy machine
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024, bias=False), torch.nn.LayerNorm(1024), torch.nn.Tanh()).eval()
    x = torch.randn(256, 1024)
    fn = tg.compile(model, (x,), profile=True)
    report = fn.profile(x, repeat=3)
    check_report(fn, report, 3)
    top = report.kernels[0]
    assert top.label == "buf.packed_matmul 256x1024 @ 1024x1024 (%linear)", report
    assert top.share > 0.5, report
    assert next(iter(report.by_kind())) == "packed_matmul"
    assert {"packed_matmul", "layer_norm"} <= set(report.by_kind())


def test_transformer_block():
    torch.manual_seed(0)
    model = Stack(1, 64, heads=4, attention="sdpa_causal", gelu="tanh", fused_qkv=True).eval()
    x = torch.randn(2, 16, 64)
    fn = tg.compile(model, (x,), profile=True)
    plain = tg.compile(model, (x,))
    report = fn.profile(x, repeat=REPEAT)
    check_report(fn, report, REPEAT)
    kinds = report.by_kind()
    assert {"packed_matmul", "attention", "layer_norm"} <= set(kinds)
    assert kinds["packed_matmul"].kernels == 4 and kinds["attention"].kernels == 1
    # q, k, v and the output read and written [B, S, H, D], q, k and v in place in the fused qkv
    # projection's output (absorb-attention-layouts): the shapes as stored, the heads read
    assert any(k.label.startswith("buf.attention q 2x16x12x16 kv 2x16x12x16 causal seq-major q,k,v,out heads q[0:4] k[4:8] v[8:12]")
               for k in report.kernels)
    np.testing.assert_array_equal(fn(x).numpy(), plain(x).numpy())


def test_compile_module_profile_needs_an_unlowered_module(mlp_pair):
    model, x, _, _ = mlp_pair
    from tensor_graphs.context import make_context
    from tensor_graphs.frontend import import_model
    from tensor_graphs.passes import DEFAULT_PIPELINE, build_pipeline

    graph = import_model(model, (x,))
    build_pipeline(DEFAULT_PIPELINE).apply(make_context(), graph.module)
    with pytest.raises(ValueError, match="already at the llvm level"):
        tg.compile_module(graph.module, graph.weights, profile=True)


def test_decoder_with_states_profiles_after_the_states():
    transformers = pytest.importorskip("transformers")
    from conftest import SMALL_QWEN3

    torch.manual_seed(0)
    config = transformers.Qwen3Config(**dict(SMALL_QWEN3, max_position_embeddings=64, bos_token_id=0, eos_token_id=None))
    model = transformers.Qwen3ForCausalLM(config).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    ids = torch.randint(1, SMALL_QWEN3["vocab_size"], (1, 6))
    dec = tg.compile_decoder(model, max_seq=16, prefill_chunk=4, profile=True)
    with torch.inference_mode():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
    assert dec.generate(ids, 4).tolist() == expected.tolist()
    graph = dec.decode_graph
    assert graph.signature.states and graph.profiled
    one = np.zeros((1, 1), np.int64)
    report = graph.profile(one, one, np.zeros(1, np.int64), repeat=2, past=3)
    check_report(graph, report, 2)
    assert "cache_write" in report.by_kind() and "attention" in report.by_kind()


def test_tg_run_profile(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "model.mlir"
    tg.export(mlp((32, 64, 8)), (torch.randn(4, 32),), path)
    r = subprocess.run([str(BIN / "tg-run"), "--profile", str(path), "-n", "3"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "median time per call" in out and "profile of @forward: 3 run(s), 2 kernels" in out
    assert "#0 buf.packed_matmul 4x32 @ 32x64 relu" in out  # the 8-column layer stays a BLAS buf.matmul
    assert {tuple(line.split()[-2:]) for line in out.rstrip().splitlines()[-2:]} == {("1", "packed_matmul"), ("1", "matmul")}
