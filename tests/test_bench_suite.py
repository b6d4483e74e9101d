"""`tg-bench` (benchmarks/suite.py): its FLOP counts, sgemm ceiling, report and chart, without timing engines.

The FLOPs the suite divides by are counted from weight shapes (``roofline.weight_gemms``,
``roofline.attention_flops``); here they must equal what ``torch.utils.flop_counter`` counts on
the eager model, for the models the suite runs (tiny configurations).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tensor_graphs.tools import tg_bench

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def suite():
    path = tg_bench.find_suite()
    assert path == ROOT / "benchmarks" / "suite.py"
    return tg_bench.load_suite(path)


def counted(model, *args, **kw) -> int:
    """FLOPs by torch's counter, with transformers' eager attention (the counter has no formula for the
    CPU flash-attention kernel that SDPA dispatches to; eager attention is two counted matmuls)."""
    for m in model.modules():
        if getattr(m, "config", None) is not None:
            m.config._attn_implementation = "eager"
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(*args, **kw)
    return fc.get_total_flops()


def test_flops_of_the_mlp_match_torch_flop_counter(suite):
    roofline = suite.roofline
    model = suite.mlp.build()
    gemms = roofline.weight_gemms(model, 64)
    assert [(g.m, g.k, g.n) for g in gemms] == [(64, 256, 1024), (64, 1024, 1024), (64, 1024, 256)]
    assert sum(g.flops for g in gemms) == counted(model, torch.randn(64, 256))


def test_flops_of_gpt2_all_logits_match_torch_flop_counter(suite):
    roofline = suite.roofline
    model = suite.gpt2.LogitsOnly(suite.decode.build_gpt2(True)).eval()
    c, seq = model.model.config, 24
    ids = torch.randint(0, c.vocab_size, (1, seq))
    ours = sum(g.flops for g in roofline.weight_gemms(model, seq))  # Conv1D weights [K, N] and the LM head
    ours += roofline.attention_flops(c.n_layer, c.n_head, c.n_embd // c.n_head, seq, seq)
    assert ours == counted(model, ids)


def test_flops_of_a_qwen3_prefill_with_last_logits_match_torch_flop_counter(suite):
    roofline = suite.roofline
    model = suite.decode.build_qwen3(True)
    c, seq = model.config, 16
    layers, _, head_dim = suite.decode.kv_shape(model)
    gemms = roofline.weight_gemms(model, seq, lm_head=model.get_output_embeddings(), lm_rows=1)
    assert [g.m for g in gemms].count(1) == 1  # only the LM head, for the last position
    ours = sum(g.flops for g in gemms) + roofline.attention_flops(layers, c.num_attention_heads, head_dim, seq, seq)
    ids = torch.randint(0, c.vocab_size, (1, seq))
    assert ours == counted(model, ids, use_cache=False, logits_to_keep=1)


def test_flops_of_the_encoder_block_match_torch_flop_counter(suite):
    model = suite.EncoderBlock(64, 4, 128).eval()
    x = torch.randn(1, 20, 64)
    ours = sum(g.flops for g in suite.roofline.weight_gemms(model, 20))
    ours += suite.roofline.attention_flops(1, 4, 16, 20, 20)
    assert ours == counted(model, x)


def test_sgemm_gflops_runs_the_shapes_it_is_given(suite):
    roofline = suite.roofline
    gemms = [roofline.Gemm(32, 64, 48), roofline.Gemm(32, 48, 16, trans_b=False)]
    assert roofline.sgemm_gflops(gemms, threads=1, repeat=2) > 0
    assert "OpenBLAS" in roofline.openblas_config()


def fake_run(suite):
    R = suite.Result
    run = suite.Run([1, 2], quick=True)
    run.sgemm = {1: [100.0, 110.0], 2: [190.0]}
    run.peaks = {1: {"fma": [112.0, 115.0], "vnni": [400.0]}, 2: {"fma": [220.0]}}
    run.bandwidth = run.bandwidth_start = {1: 20e9, 2: 30e9}
    peers = ["tensor_graphs", "eager", "torch.compile", "onnxruntime"]
    run.results = [
        R("gpt2-prefill", "GPT-2", "prefill 128", 1, "ms", {"tensor_graphs": 40.0, "eager": 50.0, "onnxruntime": 80.0},
          [*peers, "onnxruntime-opt"], {"torch.compile": "boom"}, flops=4e9, gemm_flops=3.5e9, gemm_gflops=90.0,
          gemm_bound=True, tokens=128),
        R("mlp", "MLP", "batch 1", 2, "ms", {"tensor_graphs": 0.1, "eager": 0.05}, peers, flops=3e6,
          gemm_flops=3e6, gemm_gflops=5.0, tokens=1),
        R("qwen3", "Qwen3", "decode @128", 2, "tok/s", {"tensor_graphs": 5.0, "eager": 4.0, "torch.compile": 6.0},
          peers, bytes_per_token=3e9, ceiling=10.0),
    ]
    run.compile_rows = [("GPT-2", "tensor_graphs", "tg.compile", 12.0)]
    run.note("a note")
    return run


def test_result_ratios_are_time_ratios_for_both_units(suite):
    prefill, mlp_row, decode_row = fake_run(suite).results
    assert prefill.fastest_peer() == "eager" and prefill.tg_ratio() == pytest.approx(0.8)
    assert prefill.tg_gflops() == pytest.approx(100.0)
    assert mlp_row.tg_ratio() == pytest.approx(2.0) and mlp_row.gemv
    assert decode_row.fastest_peer() == "torch.compile" and decode_row.tg_ratio() == pytest.approx(6.0 / 5.0)


def test_report_has_the_tables_ratios_and_ceilings(suite, tmp_path):
    run = fake_run(suite)
    args = suite.parse_args(["--quick", "--out", str(tmp_path / "B.md")], "tg-bench")
    text = suite.report(run, args, ["tg-bench", "--quick"], suite.datetime.now(suite.timezone.utc), (0.1, 0.2), 1024)
    assert "| 1 | 100.0, 110.0 | 110.0 | 20.0 | 20.0 |" in text  # sgemm: the best measurement is the ceiling
    row = next(ln for ln in text.splitlines() if ln.startswith("| GPT-2 | prefill 128 | 1 |"))
    assert "40.0 (1.00x)" in row and "failed" in row and "**0.80** (eager)" in row and "87% float32 peak" in row
    assert "| n/a |" in next(ln for ln in text.splitlines() if ln.startswith("| MLP | batch 1 |"))  # no ORT-opt
    assert "| GPT-2 | prefill 128 ◆ | 1 | 4 (3.5) | 100.0 | 87% (float32) | 91% | 90.0 | 111% |" in text
    assert "| MLP | batch 1 | 2 | 0.003 (0.003) | 30.0 | GEMV | GEMV | 5.0 | GEMV |" in text  # no share of a peak
    assert "| 1 | fma (float32) | 112, 115 | 115 |" in text and "| 1 | vnni (int8) | 400 | 400 |" in text
    assert "at 1 thread(s): float32 115, int8 400 GOP/s" in text
    assert "| Qwen3 | decode @128 | 2 | 3000.0 | 10.0 | 5 | 50% | 6 (torch.compile) |" in text
    assert "50% BW" in text and "2*M*N*K" in text and "`tg-bench --quick`" in text
    assert "benchmarks.quick.png" in text and "- a note" in text
    assert "speed varied" not in text  # 100 and 110 GFLOP/s: within the spread a run is allowed


def test_report_warns_when_the_machine_speed_varied(suite, tmp_path):
    run = fake_run(suite)
    run.sgemm[2] = [300.0, 160.0, 310.0]
    args = suite.parse_args(["--quick", "--out", str(tmp_path / "B.md")], "tg-bench")
    text = suite.report(run, args, ["tg-bench", "--quick"], suite.datetime.now(suite.timezone.utc), (0.1, 0.2), 1024)
    assert "**The machine's speed varied during this run** (slowest sgemm measurement: 2 thread(s) 48% below" in text
    assert suite.speed_varied({1: [100.0, 90.0]}) is None


def test_targets_of_each_row(suite, tmp_path):
    """GEMM-bound prefill: <= 1.0x and >= 85% of its precision's peak; MLP batch 1 and decode
    (overhead-bound): also <= 0.7x; decode: also >= 1.25x the peer's tok/s and >= 85% of the
    bandwidth ceiling."""
    run = fake_run(suite)
    args = suite.parse_args(["--quick", "--out", str(tmp_path / "B.md")], "tg-bench")
    text = suite.report(run, args, ["tg-bench", "--quick"], suite.datetime.now(suite.timezone.utc), (0.1, 0.2), 1024)
    lines = text.splitlines()
    assert "### Targets (2 of 8 met)" in text
    prefill = next(ln for ln in lines if ln.startswith("| GPT-2 | prefill 128 | 1 | <="))
    assert prefill.endswith("<= 1.0x fastest peer: met; >= 85% of float32 peak: met |")  # 100 of 115 GFLOP/s
    ceilings = suite.Ceilings.of(run)
    held = dict(suite.row_targets(run.results[0]))[">= 85% of float32 peak"]
    assert ceilings.peak(run.results[0]) == 115.0
    run.results[0].precision = "int8"  # 100 of int8's 400: missed
    assert held(run.results[0], ceilings) is False
    run.results[0].precision = "bf16"  # no bf16 unit measured: the row cannot say
    assert held(run.results[0], ceilings) is None
    mlp_row = next(ln for ln in lines if ln.startswith("| MLP | batch 1 | 2 | <="))
    assert mlp_row.endswith("<= 1.0x fastest peer: **missed**; <= 0.7x: **missed** |")
    decode_row = next(ln for ln in lines if ln.startswith("| Qwen3 | decode @128 | 2 | <="))
    assert decode_row.endswith("<= 1.0x fastest peer: **missed**; <= 0.7x: **missed**; >= 1.25x peer tok/s: **missed**; "
                               ">= 85% of bandwidth: **missed** |")
    assert suite.overhead_bound(suite.Result("encoder", "Encoder block (BertLayer d 256, 4 heads, FFN 1024)",
                                             "seq 128", 1, "ms"))
    # the tuned engine is never a peer; it is held to the heuristic's time (3% of noise allowed)
    row = suite.Result("mlp", "MLP", "batch 64", 1, "ms", {"tensor_graphs": 10.0, "tg-tuned": 10.2, "onnxruntime": 9.0})
    assert row.fastest_peer() == "onnxruntime" and row.tg_ratio() == pytest.approx(10 / 9)
    checks = dict(suite.row_targets(row))
    assert checks["tuned <= heuristic"](row, {}) is True
    row.values["tg-tuned"] = 10.5
    assert checks["tuned <= heuristic"](row, {}) is False


def test_reduced_precision_engines_have_their_errors_beside_their_times(suite):
    """tensor_graphs at 1e-2 and OpenVINO bf16: never a float32 row's fastest peer; their errors in
    the row's cells; held to 1.8x tensor_graphs' float32 and to OpenVINO bf16's time at no larger error."""
    row = suite.Result("gpt2-prefill", "GPT-2", "prefill 128", 1, "ms",
                       {"tensor_graphs": 10.0, "tg-lowp": 5.0, "onnxruntime": 9.0, "openvino-bf16": 4.0},
                       ["tensor_graphs", "tg-lowp", "onnxruntime", "openvino-bf16"], gemm_bound=True,
                       errors={"tensor_graphs": 2e-7, "tg-lowp": 3e-3, "onnxruntime": 3e-7, "openvino-bf16": 1e-2})
    assert row.fastest_peer() == "onnxruntime" and row.tg_ratio() == pytest.approx(10 / 9)
    assert suite.cell(row, "tg-lowp") == "5 (1.25x, err 3.0e-03)" and suite.cell(row, "tensor_graphs").endswith("err 2.0e-07)")
    checks = dict(suite.row_targets(row))
    speedup, against_ov = checks["tuned@1e-2 >= 1.8x tg float32"], checks["tuned@1e-2 <= 1.0x OpenVINO bf16 at <= its error"]
    assert speedup(row, {}) is True and against_ov(row, {}) is False  # 5 ms against OpenVINO's 4
    row.values["tg-lowp"] = 3.9
    assert against_ov(row, {}) is True
    row.errors["tg-lowp"] = 2e-2  # faster, but less accurate than OpenVINO bf16
    assert against_ov(row, {}) is False
    row.values["tg-lowp"] = 6.0
    assert speedup(row, {}) is False
    assert suite._compile_label("tg-lowp:2")[0] == "tensor_graphs"
    assert suite._compile_label("openvino-bf16 compile_model:1") == ("OpenVINO bf16", "compile_model (CPU, bf16, LATENCY, 1 stream), 1 thread(s)")


def test_decode_over_cheaper_weights_is_held_to_llama_cpp(suite):
    """tg-int8 / tg-int4 against llama.cpp Q8_0 / Q4_0: tokens/s at least theirs at a logits error
    no larger; quantised llama.cpp is never a float32 row's fastest peer (its F32 is); the cells
    give each one's logits error and greedy-token agreement."""
    engines = ["tensor_graphs", "tg-int8", "tg-int4", "onnxruntime", "llama.cpp F32", "llama.cpp Q8_0", "llama.cpp Q4_0"]
    row = suite.Result("qwen3", "Qwen3", "decode @128", 1, "tok/s",
                       {"tensor_graphs": 13.0, "tg-int8": 40.0, "tg-int4": 50.0, "onnxruntime": 7.0, "llama.cpp F32": 12.0,
                        "llama.cpp Q8_0": 38.0, "llama.cpp Q4_0": 55.0}, engines,
                       errors={"tg-int8": 0.05, "tg-int4": 0.2, "llama.cpp F32": 1e-4, "llama.cpp Q8_0": 0.06, "llama.cpp Q4_0": 0.3},
                       agreement={"tg-int8": 1.0, "tg-int4": 0.97, "llama.cpp F32": 1.0, "llama.cpp Q8_0": 1.0, "llama.cpp Q4_0": 0.95})
    assert row.fastest_peer() == "llama.cpp F32"
    assert suite.cell(row, "tg-int4") == "50.0 (1.10x, err 0.2, 97% tokens)"
    checks = dict(suite.row_targets(row))
    int8, int4 = checks["tg int8 >= llama.cpp Q8_0 tok/s at <= its error"], checks["tg int4 >= llama.cpp Q4_0 tok/s at <= its error"]
    assert int8(row, {}) is True and int4(row, {}) is False  # 50 tok/s against Q4_0's 55
    row.values["tg-int4"] = 56.0
    assert int4(row, {}) is True
    row.errors["tg-int8"] = 0.07  # faster than Q8_0 but a larger error
    assert int8(row, {}) is False
    del row.errors["llama.cpp Q4_0"]
    assert int4(row, {}) is None
    assert suite.decode.engine_class("tg-int4").kwargs == {"weight_format": "int4dot"}
    assert suite.decode.engine_class("tg-int8").reports_error and not suite.decode.engine_class("tensor_graphs").reports_error
    assert suite.gpt2.not_installed("llama.cpp Q4_0") in (None, "llama_cpp is not installed (pip install -e '.[bench]')")


def test_forward_rows_record_every_engines_error_against_float64(suite):
    """`gpt2.bench_forward` checks a float32 engine against eager to MAX_ABS and a reduced-precision
    one against float64 to REDUCED_MAX_ERROR (a broken engine is not timed), and gives each
    engine's max |y - y64| / max |y64| per thread count."""
    gpt2 = suite.gpt2
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8)).eval()
    x = torch.randn(3, 16)
    with torch.no_grad():
        y = model(x)

    def engine(scale):
        return lambda model, x, threads, cache: (lambda: y * scale)

    makers = {"eager": engine(1.0), "tg-lowp": engine(1.004), "openvino-bf16": engine(1.5)}
    errors: dict = {}
    rows, _, failures = gpt2.bench_forward(model, x, list(makers), [1], 1, makers=makers, warmup=0, errors=errors)
    y64 = gpt2.reference64(model, x)
    assert errors[1]["tg-lowp"] == pytest.approx(gpt2.relative_error(y * 1.004, y64)) and errors[1]["tg-lowp"] < 1e-2
    assert errors[1]["eager"] < 1e-6 and errors[1]["openvino-bf16"] > gpt2.REDUCED_MAX_ERROR
    assert set(rows[0][1]) == {"eager", "tg-lowp"} and "openvino-bf16 (1 thread(s)): output differs" in failures[0]


def test_chart_labels_tell_the_encoder_blocks_apart(suite):
    row = suite.Result("encoder", "Encoder block (BertLayer d 256, 4 heads, FFN 1024)", "seq 128", 1, "ms")
    assert suite.chart_label(row) == "Encoder d 256\nseq 128"
    assert suite.chart_label(suite.Result("qwen3", "Qwen3", "prefill 128 (last logits)", 1, "ms")) == "Qwen3\nprefill 128"


def test_chart_is_a_png(suite, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "c.png"
    assert suite.write_chart(fake_run(suite).results, [1, 2], str(path), "t") is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_options(suite):
    a = suite.parse_args(["--threads", "2", "--only", "mlp", "qwen3", "--json"], "tg-bench")
    assert (a.threads, a.only, a.out, a.chart, a.json) == ([2], ["mlp", "qwen3"], "BENCHMARKS.md", "benchmarks.png",
                                                          "benchmarks.json")
    assert suite.parse_args(["--quick", "--out", "d/R.md"], None).chart == os.path.join("d", "benchmarks.quick.png")
    with pytest.raises(SystemExit):
        suite.parse_args(["--only", "resnet"], None)
    with pytest.raises(SystemExit):
        suite.parse_args(["--threads", "0"], None)


def test_tg_bench_without_a_checkout_says_where_the_suite_is(monkeypatch, capsys):
    monkeypatch.setattr(tg_bench, "find_suite", lambda: None)
    assert tg_bench.main(["--quick"]) == 2
    assert "cannot find benchmarks/suite.py" in capsys.readouterr().err


def test_tg_bench_finds_the_suite_through_the_environment(monkeypatch, tmp_path):
    (tmp_path / "suite.py").write_text("")
    monkeypatch.setenv(tg_bench.ENV, str(tmp_path))
    assert tg_bench.find_suite() == tmp_path / "suite.py"


def test_tg_bench_help_runs_from_the_command_line():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "tensor_graphs.tools.tg_bench", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage: tg-bench" in out.stdout and "--quick" in out.stdout


def test_kernel_profile_prints_where_a_workload_spends_its_time():
    """benchmarks/kernel_profile.py: the bench's MLP at batch 1, profiled kernel by kernel."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_profile.py"), "mlp-b1", "--repeat", "3"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "mlp-b1, 1 thread(s):" in r.stdout and "profile of @forward: 3 run(s), 3 kernels" in r.stdout
    assert "buf.packed_matmul 1x256 @ 256x1024 relu" in r.stdout and "packed_matmul" in r.stdout.splitlines()[-1]


# --------------------------------------------------------------------------- --target, the peers' ISA, OpenVINO


def test_target_defaults_to_tg_target_else_the_host(suite, monkeypatch):
    monkeypatch.delenv("TG_TARGET", raising=False)
    assert suite.parse_args([], None).target.name == "host"
    monkeypatch.setenv("TG_TARGET", "x86-64-v2")
    assert suite.parse_args([], None).target.level == "x86-64-v2"
    a = suite.parse_args(["--target", "x86-64", "--no-force-isa"], None)  # --target wins over TG_TARGET
    assert (a.target.name, a.force_isa) == ("x86-64", False)
    assert suite.parse_args([], None).force_isa


@pytest.mark.parametrize("argv, env, where", [(["--target", "nonsense"], None, "--target: unknown target 'nonsense'"),
                                              ([], "bogus", "$TG_TARGET: unknown target 'bogus'")])
def test_a_bad_target_is_a_one_line_argparse_error(suite, monkeypatch, capsys, argv, env, where):
    monkeypatch.delenv("TG_TARGET", raising=False)
    if env:
        monkeypatch.setenv("TG_TARGET", env)
    with pytest.raises(SystemExit) as e:
        suite.parse_args(argv, "tg-bench")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"tg-bench: error: {where}") and "x86-64-v3" in err[-1]  # it lists the names


def test_a_target_this_cpu_cannot_run_is_refused(suite, capsys):
    from tensor_graphs.target import Target

    if Target.host().level == "x86-64-v4":
        pytest.skip("this CPU runs every ISA level")
    with pytest.raises(SystemExit):
        suite.parse_args(["--target", "x86-64-v4"], "tg-bench")
    assert "cannot run here" in capsys.readouterr().err.strip().splitlines()[-1]


def test_avx2_target_on_an_avx512_host_holds_the_peers_to_avx2(suite):
    plan = suite.isa_plan("x86-64-v4", "x86-64-v3", {})
    assert plan.to_set == {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2",
                           "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                           "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3"}
    assert plan.switches.simdlen == 256
    text = "\n".join(plan.notes)
    assert plan.notes[0].startswith("tensor_graphs is compiled for AVX2 (x86-64-v3), below the host's AVX-512")
    assert "OpenBLAS (the sgemm ceiling; tensor_graphs' BLAS calls): OPENBLAS_CORETYPE=Haswell" in text
    assert "torch.compile (inductor): cpp.simdlen=256" in text and "OpenVINO: ONEDNN_MAX_CPU_ISA=AVX2" in text
    assert "ONNX Runtime: not forced (no ISA switch)" in plan.notes


def test_isa_switches_set_before_the_run_are_kept(suite):
    plan = suite.isa_plan("x86-64-v4", "x86-64-v3", {"OPENBLAS_CORETYPE": "SkylakeX", "ATEN_CPU_CAPABILITY": "avx2"},
                          inductor_march=False)
    assert "OPENBLAS_CORETYPE" not in plan.to_set and "ATEN_CPU_CAPABILITY" not in plan.to_set
    assert "ONEDNN_MAX_CPU_ISA" in plan.to_set
    text = "\n".join(plan.notes)
    assert "OPENBLAS_CORETYPE=SkylakeX (set before the run: kept)" in text
    assert "ATEN_CPU_CAPABILITY=avx2," in text  # the same value: nothing to say
    assert "-march=native (this torch has no cpp.march)" in text


def test_nothing_is_forced_at_the_host_level_or_with_no_force_isa(suite):
    avx2 = suite.isa_plan("x86-64-v3", "x86-64-v3", {})
    assert (avx2.switches, avx2.to_set) == (None, {})
    assert avx2.notes == ["the host is AVX2 (x86-64-v3) and tensor_graphs is compiled for that level: the peers "
                          "already run at it; nothing forced"]
    assert suite.isa_plan("x86-64-v4", "x86-64-v4", {}).to_set == {}
    off = suite.isa_plan("x86-64-v4", "x86-64-v3", {}, force=False)
    assert off.to_set == {} and off.notes[0].startswith("not forced (--no-force-isa)")
    below = suite.isa_plan("x86-64-v3", "x86-64-v2", {})  # SSE code on an AVX2 host: the peers at SSE4
    assert below.to_set["ATEN_CPU_CAPABILITY"] == "default" and below.switches.simdlen == 0
    assert suite.isa_plan("x86-64-v3", "x86-64", {}).notes[-1].endswith("they run at x86-64-v2")


def test_the_target_and_the_peers_isa_are_in_the_report(suite, tmp_path):
    run = fake_run(suite)
    run.host_isa, run.target = "host (cpu skylake-avx512, x86-64-v4: ...)", "x86-64-v3 (cpu x86-64-v3, ...)"
    run.isa_notes = suite.isa_plan("x86-64-v4", "x86-64-v3", {}).notes
    args = suite.parse_args(["--quick", "--out", str(tmp_path / "B.md")], "tg-bench")
    text = suite.report(run, args, ["tg-bench"], suite.datetime.now(suite.timezone.utc), (0.1, 0.2), 1024)
    assert "- **Host ISA**: host (cpu skylake-avx512, x86-64-v4: ...)" in text
    assert "- **tensor_graphs compiled for** (`--target`): x86-64-v3 (cpu x86-64-v3, ...)" in text
    assert "- **Peers' ISA**: tensor_graphs is compiled for AVX2" in text
    assert "  - ONNX Runtime: not forced (no ISA switch)" in text


def test_openvino_is_a_peer_everywhere(suite):
    assert "openvino" in suite.ENGINES and "openvino" in suite.gpt2.MAKERS and "openvino" in suite.decode.CLASSES
    assert suite.LABELS["openvino"] == "OpenVINO" and suite.SHORT["openvino"] and suite.COLORS["openvino"]
    r = suite.Result("mlp", "MLP", "batch 1", 1, "ms", {"tensor_graphs": 1.0, "eager": 2.0, "openvino": 0.5})
    assert r.fastest_peer() == "openvino"
    step = suite._compile_label("openvino compile_model:2")
    assert step == ("OpenVINO", "compile_model (CPU, f32, LATENCY, 1 stream), 2 thread(s)")


def test_openvino_matches_eager_on_a_tiny_mlp(suite):
    pytest.importorskip("openvino")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    x = torch.randn(4, 32)
    cache: dict = {}
    run = suite.gpt2.make_openvino(model, x, 1, cache)
    with torch.no_grad():
        expected = model(x).numpy()
    assert abs(suite.gpt2.as_numpy(run()) - expected).max() <= suite.gpt2.MAX_ABS
    assert cache["ov_how"] == "TorchScript trace" and "compile:openvino compile_model:1" in cache


def test_a_peer_not_installed_is_skipped_with_a_note(suite, monkeypatch):
    monkeypatch.setattr(suite.gpt2, "not_installed", lambda e: "openvino is not installed" if e == "openvino" else None)
    run = suite.Run([1], quick=True)
    assert suite.installed(run, ["tensor_graphs", "eager", "openvino"]) == ["tensor_graphs", "eager"]
    assert run.notes == ["OpenVINO: skipped: openvino is not installed"]
    assert suite.reexec_argv()[0] == __import__("sys").executable


def test_flops_of_the_conv_rows_match_torch_flop_counter(suite):
    """ResNet (tiny): every conv's and the head's GEMMs; groups and strides counted as torch does."""
    model = suite.build_resnet50(True)
    x = torch.randn(1, 3, 64, 64)
    assert sum(g.flops for g in suite.roofline.conv_gemms(model, x)) == counted(model, x)
    grouped = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=4)
    x = torch.randn(2, 8, 9, 9)
    assert sum(g.flops for g in suite.roofline.conv_gemms(grouped, x)) == counted(grouped, x)


def test_the_dynamic_engine_compiles_once_per_model_and_is_held_to_the_static_time(suite):
    """"tg-dynamic": one tg.compile with dynamic_shapes (a size-1 first row doubled for
    torch.export) serves every row of the model; its compile counted at the first row only; the
    row's target is within 5% of the static compile."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    run = suite.Run([1], quick=True)
    make = suite.forward_makers(run, "MLP", dynamic=(0, "batch", 64))["tg-dynamic"]
    first, second = {}, {}
    with torch.no_grad():
        for x, cache in ((torch.randn(1, 32), first), (torch.randn(9, 32), second)):
            call = make(model, x, 1, cache)
            torch.testing.assert_close(call(), model(x), rtol=1e-6, atol=1e-6)  # float32 GEMMs: observed <= 5e-7
    assert "compile:tg-dynamic" in first and not second and len(run.dynamic_graphs) == 1
    row = suite.Result("mlp", "MLP", "batch 9", 1, "ms", {"tensor_graphs": 10.0, "tg-dynamic": 10.4, "eager": 9.0},
                       engines=["tensor_graphs", "tg-dynamic", "eager"])
    assert row.fastest_peer() == "eager"  # never a peer
    check = dict(suite.row_targets(row))["dynamic <= 1.05x static"]
    assert check(row, {}) is True
    row.values["tg-dynamic"] = 10.6
    assert check(row, {}) is False
    assert suite._compile_label("tg-dynamic")[0] == "tensor_graphs"
