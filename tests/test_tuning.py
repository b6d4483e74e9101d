"""Kernel-path tuning (issue 14): enumeration with parameters, measurement (time and error
against the float64 evaluator), selection within a tolerance, the whole-graph check, explain,
tg-tune and tg-run --explain. Outputs are checked against PyTorch at 1e-5 (magnitudes ~1).

Records are written to a database in the test's tmp_path; selections that must not depend on
this machine's timings use records written by the test itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.context import Context

import tensor_graphs as tg
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target
from tensor_graphs.tuning.database import Machine, Record, TuningDatabase
from tensor_graphs.tuning.measure import errors, standalone
from tensor_graphs.tuning.paths import Candidate, candidates, kernel_paths, pin
from tensor_graphs.tuning.tuner import ToleranceError, _signature

TOL = 1e-5


class Mlp(torch.nn.Module):
    def __init__(self, d=64, h=256):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(d, h), torch.nn.Linear(h, d), torch.nn.Linear(d, h)

    def forward(self, x):
        return torch.relu(self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x))))))


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return Mlp().eval(), torch.randn(16, 64)


@pytest.fixture
def db(tmp_path):
    with TuningDatabase(tmp_path / "tuning.sqlite") as d:
        yield d


def _tg(model, x):
    graph = import_model(model, (x,))
    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    return graph


def _gemms(module):
    return [p for p in kernel_paths(module) if p.name == "tg.matmul"]


def _compiled_right(graph, model, x, threads: int):
    """``graph`` compiled and run at ``threads`` threads, its output checked against ``model``'s at TOL."""
    tg.set_num_threads(threads)
    try:
        fn = tg.compile_module(graph.module, graph.weights)
        with torch.no_grad():
            assert (fn(x) - model(x)).abs().max().item() <= TOL
    finally:
        tg.set_num_threads(1)
    return fn


def test_candidates_are_variants_and_their_parameters(mlp):
    model, x = mlp
    fc1 = _gemms(_tg(model, x).module)[0]  # K = 64
    target = Target.host()
    one = candidates(fc1, target, threads=1)
    assert Candidate("matmul.packed") in one and Candidate("matmul.blas") in one
    assert Candidate("matmul.packed", {"k_block": 32}) not in one
    assert [c.params["k_block"] for c in one if "k_block" in c.params] == [kb for kb in (64, 128, 256, 512) if kb < 64]
    rows = target.gemm_tile(target.panel_columns // target.float_lanes)[0]
    assert {c.params["mr"] for c in one if "mr" in c.params} == {rows // 2, rows - 2} - {rows}
    two = candidates(fc1, target, threads=2)
    assert Candidate("matmul.packed", {"threads": 1}) in two and Candidate("matmul.packed", {"threads": 1}) not in one
    assert Candidate("matmul.packed", {"chunks": 1}) in two and Candidate("matmul.packed", {"chunks": 1}) not in one
    # fc1 has a bias and a relu: the epilogue fused (default) or a sweep after, on either GEMM
    assert Candidate("matmul.packed", {"separate_epilogue": 1}) in one and Candidate("matmul.blas", {"separate_epilogue": 1}) in one
    # its weight is read by fc1 alone: narrower panels are a path (one vector wide at least)
    widths = {c.params["nr"] for c in one if "nr" in c.params}
    assert widths and all(w % target.float_lanes == 0 and w < target.panel_columns for w in widths)


def test_a_form_is_shared_by_ops_of_the_same_computation(mlp):
    model, x = mlp
    graph = _tg(model, x)
    fc1, fc2, fc3 = (p.op for p in _gemms(graph.module))
    a, b, c = standalone(fc1), standalone(fc2), standalone(fc3)
    assert a.form == c.form, "fc1 and fc3: the same shapes and epilogue, other weights"
    assert a.form != b.form
    assert a.weights == {"w0": "fc1.weight", "w1": "fc1.bias"}
    assert "fc1" not in str(a.module) and "tg.kernel" not in str(a.module)


LANES = Target.host().float_lanes


@pytest.mark.parametrize("candidate", [Candidate("matmul.packed", {"k_block": 16}), Candidate("matmul.packed", {"threads": 1}),
                                       Candidate("matmul.packed", {"mr": 3}), Candidate("matmul.packed", {"nr": LANES}),
                                       Candidate("matmul.packed", {"separate_epilogue": 1}),
                                       Candidate("matmul.packed", {"chunks": 1}), Candidate("matmul.blas"),
                                       Candidate("matmul.blas", {"separate_epilogue": 1})])
def test_a_pinned_candidate_runs_right(mlp, candidate):
    """The pinned parameters reach the kernel (two GEMMs alike but for their K block are two
    kernels) and the result stays right."""
    model, x = mlp
    graph = _tg(model, x)
    gemms = _gemms(graph.module)
    pin(gemms[0].op, candidate)
    fn = _compiled_right(graph, model, x, threads=2)
    for name, value in candidate.params.items():
        assert f"tg.{name} = {value} : i64" in fn.ir("buf")
    if candidate.variant == "matmul.packed":
        assert fn.ir("llvm").count("_packed_matmul(") >= 3, "fc1 (pinned) and fc3 (default) must not share a kernel"


def test_errors_are_relative_to_the_largest_magnitude():
    ref = np.array([100.0, 1e-9, -3.0], np.float32)
    out = ref + np.array([0.0, 1e-6, 0.0], np.float32)
    abs_err, rel_err = errors(out, ref)
    assert abs_err == pytest.approx(1e-6, rel=1e-3) and rel_err == pytest.approx(1e-8, rel=1e-3)
    assert errors(np.array([np.nan]), np.array([1.0]))[0] == np.inf
    assert errors(np.array([np.nan]), np.array([np.nan])) == (0.0, 0.0)


def test_cheaper_arithmetic_is_not_measured_under_a_tolerance_it_cannot_meet(db):
    """A matrix-vector product's bf16 and int8 weight paths round by far more than 1e-5: tuned at
    1e-5 they are not measured (the report says why); at 1e-2 they are, with their errors."""
    torch.manual_seed(1)
    model, x = torch.nn.Linear(64, 64).eval(), torch.randn(2, 64)
    report = tg.tune(model, (x,), tuning_db=db, tolerance=1e-5, progress=False)
    (choice,) = report.choices
    skipped = {r.candidate.variant: r.failed for r in choice.paths if r.failed}
    assert skipped["matmul.int8_weights"] == "not measured: its arithmetic errs by 0.001 or more, over the tolerance"
    assert skipped["matmul.bf16_weights"] == "not measured: its arithmetic errs by 0.0001 or more, over the tolerance"
    assert all(r.record is None for r in choice.paths if r.candidate.variant in skipped)
    loose = tg.tune(model, (x,), tuning_db=db, tolerance=1e-2, progress=False)
    errs = {r.candidate.variant: r.record.max_rel_err for r in loose.choices[0].paths if r.record is not None}
    assert 1e-4 < errs["matmul.bf16_weights"] < 1e-2 and 1e-3 < errs["matmul.int8_weights"] < 5e-2


def test_a_convolutions_gemm_is_measured_alone(db):
    """A convolution's GEMM reads its weight through a reshape ([Cout, C, KH, KW] as [Cout, K]):
    measured alone, the weight and its reshape come along, so that its paths (packed at load time)
    are measured, each with its error (float32's ~1e-7; bf16's, where the CPU has it, ~1e-3)."""
    torch.manual_seed(2)
    model, x = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1).eval(), torch.randn(1, 8, 12, 12)
    report = tg.tune(model, (x,), tuning_db=db, tolerance=1e-2, progress=False)
    (choice,) = [c for c in report.choices if c.label.startswith("tg.matmul")]
    errs = {r.candidate.variant: r.record.max_rel_err for r in choice.paths if r.record is not None and not r.candidate.params}
    assert not any((r.failed or "").startswith("cannot be measured alone") for r in choice.paths)
    assert errs["matmul.packed_rhs"] < 1e-6 and errs["matmul.blas"] < 1e-6
    if "matmul.packed_rhs_bf16" in errs:
        assert 1e-4 < errs["matmul.packed_rhs_bf16"] < 1e-2


def test_tune_measures_records_and_resumes(mlp, db):
    model, x = mlp
    first = tg.tune(model, (x,), tuning_db=db, max_seconds=0.0, progress=False)
    assert first.measured == 1 and first.unmeasured > 0, "the limit stops measuring after the first path"
    rest = tg.tune(model, (x,), tuning_db=db, progress=False)
    assert rest.measured == first.unmeasured, "the second run measures only what the first left"
    again = tg.tune(model, (x,), tuning_db=db, progress=False)
    assert again.measured == 0
    records = list(db.records(Machine.this()))
    assert len(records) == first.measured + rest.measured
    # every op's variants at their defaults were measured before any parameter sweep (a time
    # limit cuts the sweeps, not whole ops)
    swept = [bool(r.signature.params) for r in sorted(records, key=lambda r: r.measured_at)]
    assert swept == sorted(swept) and swept.count(False) >= 3, swept
    for r in records:
        assert r.runs >= 5 and 0 < r.p20_ns <= r.median_ns <= r.p80_ns
        assert r.max_rel_err <= 1e-6, (r.signature, r.max_rel_err)  # fp32 GEMMs of K <= 256 (bf16 ones: not measured)
    fn = tg.compile(model, (x,), tune="cached", tuning_db=db)
    with torch.no_grad():
        assert (fn(x) - model(x)).abs().max().item() <= TOL
    text = fn.explain(all_kernels=False)
    assert text.count("(fastest measured within the tolerance") == 3 and "no record" not in text


def _record(db, model, x, candidate_for, median_ns, rel_err):
    """Write a record for every GEMM's candidate ``candidate_for(paths)``."""
    graph = _tg(model, x)
    for p in _gemms(graph.module):
        alone = standalone(p.op)
        c = candidate_for(p)
        db.put(Record(_signature(p, alone, c), Machine.this(), median_ns, median_ns, median_ns, 5, rel_err, rel_err))


def test_selection_is_the_fastest_within_the_tolerance(mlp, db):
    model, x = mlp
    _record(db, model, x, lambda p: Candidate("matmul.packed"), 1000.0, 1e-7)
    _record(db, model, x, lambda p: Candidate("matmul.blas"), 10.0, 1e-3)  # faster, too inaccurate
    fn = tg.compile(model, (x,), tune="cached", tuning_db=db)
    assert "buf.matmul " not in fn.ir("buf")
    assert "rejected over it: matmul.blas (1.0e-03)" in fn.explain()
    # the records are made up: keep the tuned graph even if the heuristic one runs faster here
    graph = import_model(model, (x,))
    fn = tg.compile_module(graph.module, graph.weights, verify=False,
                           tuning=tg.api.Tuning("cached", 1e-2, (x,), db, keep_faster=False))
    assert fn.ir("buf").count("buf.matmul ") == 3 and fn.explain().count("* matmul.blas") == 3
    assert 'tg.kernel = "matmul.blas"' in fn.ir("tg")
    with torch.no_grad():
        assert (fn(x) - model(x)).abs().max().item() <= TOL
    assert fn.tuning.graph_error is not None and fn.tuning.graph_error <= 1e-2


def test_no_record_means_the_heuristic(mlp, db):
    model, x = mlp
    fn = tg.compile(model, (x,), tune="cached", tuning_db=db)
    assert fn.explain(all_kernels=False).count("heuristic: no record") == 3
    assert fn.tuning.graph_error is None, "nothing tuned: nothing to check"
    off = tg.compile(model, (x,))
    assert "heuristic: tune='off'" in off.explain()


def test_the_whole_graph_check_fails_beyond_the_tolerance(mlp, db):
    """Records claiming BLAS exact and fastest: at a tolerance below what BLAS's different
    summation order gives over three GEMMs, the compile fails and says why."""
    model, x = mlp
    _record(db, model, x, lambda p: Candidate("matmul.blas"), 10.0, 0.0)
    _record(db, model, x, lambda p: Candidate("matmul.packed"), 1000.0, 0.0)
    with pytest.raises(ToleranceError, match=r"differs from the fp32 path's by .* at best, over the tolerance 1e-12 "
                                             r"\(whole-graph error .* with each kernel within 1e-12, .* within 1.5625e-14\)"):
        tg.compile(model, (x,), tune="cached", tolerance=1e-12, tuning_db=db)


def test_bad_arguments(mlp, db):
    model, x = mlp
    with pytest.raises(ValueError, match="tune must be one of 'off', 'cached', 'missing', 'all', got 'sometimes'"):
        tg.compile(model, (x,), tune="sometimes", tuning_db=db)
    with pytest.raises(ValueError, match="tolerance must be a non-negative number"):
        tg.compile(model, (x,), tune="cached", tolerance=-1.0, tuning_db=db)


def test_tg_tune_and_tg_run_explain(tmp_path, capsys):
    from tensor_graphs.tools import tg_run, tg_tune

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).eval()
    path = tmp_path / "m.mlir"
    tg.export(model, (torch.randn(8, 32),), path)
    db = str(tmp_path / "db.sqlite")
    assert tg_tune.main([str(path), "--db", db, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "path(s) measured" in out and "matmul.blas" in out and "* matmul." in out
    assert tg_run.main([str(path), "--tune", "cached", "--db", db, "--explain", "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("fastest measured within the tolerance") == 2
    assert tg_tune.main([str(tmp_path / "missing.mlir"), "--db", db]) == 1
    assert "tg-tune: error: cannot read" in capsys.readouterr().err
    assert tg_tune.main(["os:path", "--db", db]) == 1
    assert "needs its input shapes" in capsys.readouterr().err


def test_the_kernels_are_held_tighter_until_the_graph_is_within(mlp, db):
    """Records say BLAS is faster and within the tolerance per kernel (half of it), but the three
    BLAS GEMMs together differ from the packed ones by more than a tolerance below float32's
    rounding: the next, stricter per-kernel tolerance leaves the heuristic paths, and says why."""
    model, x = mlp
    _record(db, model, x, lambda p: Candidate("matmul.blas"), 10.0, 0.5e-9)
    _record(db, model, x, lambda p: Candidate("matmul.packed"), 1000.0, 0.0)
    fn = tg.compile(model, (x,), tune="cached", tolerance=1e-9, tuning_db=db)
    assert "buf.matmul " not in fn.ir("buf")
    assert "with each kernel within 1e-09: over 1e-09; the heuristic paths are left" in fn.explain()


#: int4 logits of the tiny GPT-2 below against float32's, relative to their largest (observed
#: 0.043-0.106 over the four calls, both schemes; int8 3-6e-3)
INT4_BOUND = 0.2


def test_a_decoder_over_cheaper_weights(db):
    """compile_decoder(weight_format=...) runs the matrix-vector products over bf16 / int8 panels
    (the prefill graph's GEMMs of a chunk of tokens stay float32); tuned at 1e-2 its whole-graph error
    is within 1e-2 of the float32 decoder's logits."""
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=300,
                                                                  n_positions=64)).eval()
    ids = torch.randint(0, 300, (1, 5))
    fp32 = tg.compile_decoder(model, max_seq=32, prefill_chunk=16)
    ref = [np.asarray(fp32.prefill(ids))] + [np.asarray(fp32.decode(torch.tensor([[t]]))) for t in (3, 7, 11)]
    for fmt, bound in (("bf16", 1e-2), ("int8", 5e-2), ("int4", INT4_BOUND), ("int4zp", INT4_BOUND), ("int4dot", INT4_BOUND)):
        dec = tg.compile_decoder(model, max_seq=32, prefill_chunk=16, weight_format=fmt, keep_ir=True)
        # every GEMM of the decode graph (2 layers x 4 and the LM head); of the prefill graph's only the
        # LM head, of the last token's row
        assert dec.decode_graph.ir("buf").count("buf.quantized_matvec") == 9
        assert dec.prefill_graph.ir("buf").count("buf.quantized_matvec") == 1
        assert fmt[:4] != "int4" or {"int4": "int4g32", "int4zp": "int4zg128", "int4dot": "int4dot"}[fmt] in dec.decode_graph.ir("buf")
        got = [np.asarray(dec.prefill(ids))] + [np.asarray(dec.decode(torch.tensor([[t]]))) for t in (3, 7, 11)]
        for a, b in zip(got, ref):
            assert np.abs(a - b).max() <= bound * np.abs(b).max(), fmt
    tuned = tg.compile_decoder(model, max_seq=32, prefill_chunk=16, tune="missing", tolerance=1e-2, tuning_db=db.path)
    text = tuned.explain()
    assert "prefill graph" in text and "decode graph" in text and "matmul.int8_weights" in text
    got = [np.asarray(tuned.prefill(ids))] + [np.asarray(tuned.decode(torch.tensor([[t]]))) for t in (3, 7, 11)]
    assert max(np.abs(a - b).max() / np.abs(b).max() for a, b in zip(got, ref)) <= 1e-2 * 4  # four calls, each within 1e-2
    with pytest.raises(ValueError, match="weight_format must be one of 'bf16', 'int8', 'bf16dot', 'int4', 'int4zp', 'int4dot' or None, got 'fp8'"):
        tg.compile_decoder(model, max_seq=32, weight_format="fp8")
    from tensor_graphs.target import Target

    if "avx512bf16" not in Target.host().extensions:  # not silently float32
        with pytest.raises(ValueError, match="weight_format='bf16dot': the target .* has no AVX512-BF16 dot products"):
            tg.compile_decoder(model, max_seq=32, weight_format="bf16dot")


class ConvNet(torch.nn.Module):
    """Two stride-1 3x3 convolutions (Winograd's): a bias + ReLU, then a residual + ReLU."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.c2 = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        return torch.relu(self.c2(y) + y)


@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_or_not_is_a_path(threads):
    """The tg-level alternative to winograd-convolution is a path of its op
    (winograd_conv.direct: the convolution's GEMM as before the pass): pinned, it matches
    PyTorch at 1e-5 with a bias and with a residual; the tuner enumerates it."""
    torch.manual_seed(0)
    model, x = ConvNet().eval(), torch.randn(1, 16, 12, 10)
    graph = _tg(model, x)
    convs = [p for p in kernel_paths(graph.module) if p.name == "tg.winograd_conv"]
    assert len(convs) == 2 and all(p.chosen == "winograd_conv.packed" and "winograd_conv.direct" in p.applicable
                                   for p in convs)
    assert Candidate("winograd_conv.direct") in candidates(convs[0], Target.host(), threads)
    for p in convs:
        pin(p.op, "winograd_conv.direct")
    fn = _compiled_right(graph, model, x, threads)
    assert "buf.winograd_input" not in fn.ir("buf") and fn.ir("buf").count("buf.packed_matmul") == 2


def test_a_register_tile_the_registers_cannot_hold_is_refused(mlp):
    from tensor_graphs.codegen.llvm.kernels import LoweringError

    model, x = mlp
    graph = _tg(model, x)
    pin(_gemms(graph.module)[0].op, Candidate("matmul.packed", {"mr": 40}))
    with pytest.raises(LoweringError, match=r"tg.mr must be 1 to \d+ rows for tiles of \d vector\(s\) on .*, got 40"):
        tg.compile_module(graph.module, graph.weights)


def test_bad_panel_width_and_epilogue_choices_are_refused(mlp):
    from xdsl.utils.exceptions import PassFailedException

    from tensor_graphs.diagnostics import IRError

    model, x = mlp
    graph = _tg(model, x)
    pin(_gemms(graph.module)[0].op, Candidate("matmul.packed", {"nr": LANES + 1}))
    with pytest.raises(PassFailedException, match=rf"tg.nr must be whole vectors of {LANES} floats up to \d+ columns"):
        tg.compile_module(graph.module, graph.weights)
    graph = _tg(model, x)
    pin(_gemms(graph.module)[0].op, Candidate("matmul.packed", {"separate_epilogue": 2}))
    with pytest.raises(IRError, match="tg.separate_epilogue must be 0 or 1, got 2"):  # the verifier's, before lowering
        tg.compile_module(graph.module, graph.weights)
