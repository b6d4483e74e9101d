"""`tg-export`: model spec → .mlir + .safetensors; bad specs exit 1 with one line."""

import subprocess
import sys
from pathlib import Path

import pytest

from tensor_graphs.tools.tg_export import main

MODEL_PY = '''
import torch

class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

def make():
    return Small()

instance = Small()
not_a_model = 42

class Unsupported(torch.nn.Module):
    def forward(self, x):
        return torch.special.erfcx(torch.special.i1(x))

def unsupported_model():
    return Unsupported()
'''


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.py"
    path.write_text(MODEL_PY)
    return path


def test_factory_spec(model_file: Path, tmp_path: Path, capsys):
    out = tmp_path / "out" / "model.mlir"
    out.parent.mkdir()
    assert main([f"{model_file}:make", "--input", "2x8", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "model.safetensors (4 weights" in printed
    text = out.read_text()
    assert "aten.linear" in text and 'tg.weights_file = "model.safetensors"' in text
    assert (out.parent / "model.safetensors").is_file()


def test_instance_and_class_specs(model_file: Path, tmp_path: Path):
    assert main([f"{model_file}:instance", "--input", "1x8", "-o", str(tmp_path / "a.mlir")]) == 0
    assert main([f"{model_file}:Small", "--input", "1x8", "-o", str(tmp_path / "b.mlir")]) == 0
    assert (tmp_path / "b.safetensors").is_file()


def test_module_spec(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["torch.nn:ReLU", "--input", "3x4"]) == 0
    assert (tmp_path / "ReLU.mlir").is_file()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nocolon", "--input", "1x8"], "should be 'path/to/file.py:factory'"),
        (["missing.py:make", "--input", "1x8"], "model file 'missing.py' does not exist"),
        (["{model}:nope", "--input", "1x8"], "has no attribute 'nope'"),
        (["{model}:not_a_model", "--input", "1x8"], "neither an nn.Module nor a callable"),
        (["{model}:make", "--input", "2x1.5"], "is not a shape like 1x256"),
        (["{model}:make", "--input", "qx8"], "--input names the dynamic dim(s) q: give each a --dim NAME=MIN:MAX"),
        (["{model}:make", "--input", "qx8", "--dim", "q=4:2"], "--dim 'q=4:2' should be NAME=MIN:MAX"),
        (["{model}:make", "--input", "qx8", "--dim", "q=1:8:9"], "the example size 9 is outside 1..8"),
        (["{model}:make", "--input", "2x8", "--dim", "q=1:8"], "--dim q: no --input names it"),
        (["{model}:make"], "give at least one --input"),
        (["no_such_module_xyz:f", "--input", "1x8"], "cannot import module 'no_such_module_xyz'"),
        (["{model}:make", "--input", "2x7"], "torch.export could not export Small"),
    ],
)
def test_errors_exit_1_with_one_line(argv, message, model_file: Path, tmp_path: Path, capsys):
    argv = [a.replace("{model}", str(model_file)) for a in argv] + ["-o", str(tmp_path / "m.mlir")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("tg-export: error:") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_named_dim_is_exported_dynamic(model_file: Path, tmp_path: Path):
    out = tmp_path / "dyn.mlir"
    assert main([f"{model_file}:make", "--input", "batchx8", "--dim", "batch=1:64", "-o", str(out)]) == 0
    text = out.read_text()
    assert "tg.symbols = {batch = array<i64: 1, 64>}" in text and '%x: tensor<?x8xf32, ["batch"]>' in text


def test_unsupported_ops_are_listed(model_file: Path, tmp_path: Path, capsys):
    assert main([f"{model_file}:unsupported_model", "--input", "2x8", "-o", str(tmp_path / "g.mlir")]) == 1
    err = capsys.readouterr().err
    assert "2 unsupported ops:\n  aten::special_i1 (float32 " in err and "\n  aten::special_erfcx (float32 " in err
    assert "write it with supported ops" in err  # what to do


def test_console_script(model_file: Path, tmp_path: Path):
    exe = Path(sys.executable).parent / "tg-export"
    ok = subprocess.run([str(exe), f"{model_file}:make", "--input", "2x8", "-o", str(tmp_path / "m.mlir")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([str(exe), f"{model_file}:nope", "--input", "2x8"], capture_output=True, text=True)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
