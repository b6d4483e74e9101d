"""tg-opt and tg-run from the command line, including their error paths."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from conftest import mlp
from tensor_graphs.tools.tg_opt import translate_pass_pipeline

BIN = Path(sys.executable).parent

TG_FUNC = """
func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = tg.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  %s = tg.reshape %r : (tensor<6xf32>) -> tensor<2x3xf32>
  func.return %s : tensor<2x3xf32>
}
"""


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


def test_pass_pipeline_translation():
    assert translate_pass_pipeline(["m.mlir", "--pass-pipeline=builtin.module(a,b{x=1})"]) == ["m.mlir", "-p", "a,b{x=1}"]
    assert translate_pass_pipeline(["--pass-pipeline", "builtin.module(a)"]) == ["-p", "a"]
    with pytest.raises(SystemExit, match="expects 'builtin.module"):
        translate_pass_pipeline(["--pass-pipeline=canonicalize"])


def test_tg_opt_both_pipeline_spellings_agree(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_text(TG_FUNC)
    a = run(BIN / "tg-opt", f, "-p", "canonicalize")
    b = run(BIN / "tg-opt", f, "--pass-pipeline=builtin.module(canonicalize)")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    assert "tg.reshape" not in a.stdout


def test_tg_opt_unknown_pass(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_text(TG_FUNC)
    r = run(BIN / "tg-opt", f, "-p", "no-such-pass")
    assert r.returncode != 0
    assert "no-such-pass" in r.stderr


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    path = d / "model.mlir"
    tg.export(mlp((8, 16, 4)), (torch.randn(2, 8),), path)
    return path


def test_tg_run_random_inputs(exported):
    r = run(BIN / "tg-run", exported, "-n", "5")
    assert r.returncode == 0, r.stderr
    assert "output 0: float32[2, 4]" in r.stdout
    assert "median time per call" in r.stdout


def test_tg_run_given_inputs_match_torch(exported, tmp_path):
    torch.manual_seed(0)
    model = mlp((8, 16, 4))
    tg.export(model, (torch.randn(2, 8),), tmp_path / "m.mlir")
    x = np.arange(16, dtype=np.float32).reshape(2, 8) / 10
    np.save(tmp_path / "x.npy", x)
    r = run(BIN / "tg-run", tmp_path / "m.mlir", "--input", tmp_path / "x.npy", "-n", "1")
    assert r.returncode == 0, r.stderr
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    assert f"min {expected.min():.6g}" in r.stdout


def test_tg_run_missing_file(tmp_path):
    r = run(BIN / "tg-run", tmp_path / "nope.mlir")
    assert r.returncode == 1 and "cannot read" in r.stderr


def test_tg_run_wrong_input_shape(exported, tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((3, 8), np.float32))
    r = run(BIN / "tg-run", exported, "--input", tmp_path / "bad.npy")
    assert r.returncode == 1 and "expected [2, 8]" in r.stderr


def test_tg_run_missing_weights(exported, tmp_path):
    lonely = tmp_path / "lonely.mlir"
    lonely.write_text(exported.read_text())
    r = run(BIN / "tg-run", lonely)
    assert r.returncode == 1 and "safetensors" in r.stderr


def test_tg_run_tg_level_module(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_text(TG_FUNC)
    r = run(BIN / "tg-run", f, "-n", "2")
    assert r.returncode == 0, r.stderr
    assert "output 0: float32[2, 3]" in r.stdout


def test_tg_opt_pass_error_is_one_line(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_text(TG_FUNC)
    r = run(BIN / "tg-opt", f, "-p", "convert-buffer-to-llvm")
    assert r.returncode == 1
    assert r.stderr.startswith("tg-opt: error:") and "Traceback" not in r.stderr


def test_tg_opt_llvm_target_needs_llvm_level(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_text(TG_FUNC)
    r = run(BIN / "tg-opt", f, "-t", "llvm")
    assert r.returncode == 1
    assert "lower it with convert-buffer-to-llvm first" in r.stderr and "Traceback" not in r.stderr


def test_tg_opt_prints_llvm_ir(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_text(TG_FUNC)
    passes = "canonicalize,convert-tensor-to-buffer,plan-memory,convert-buffer-to-llvm"
    r = run(BIN / "tg-opt", f, "-p", passes, "-t", "llvm")
    assert r.returncode == 0, r.stderr
    assert "define i32 @" in r.stdout.replace('"', "")
