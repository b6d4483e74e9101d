"""tg-opt, tg-run and tg-export on malformed input: exit status 1, one line, never a traceback.

A corpus with one file per class of bad input (every class a user reported: syntax errors,
unknown ops and dialects, type mismatches, undefined / duplicate / used-before-defined values,
truncated, empty, binary and non-UTF-8 files, nesting too deep for the parser, a tensor too
large to plan, a verifier failure), plus a missing file, an unknown pass and a bad pass option.
Each runs in-process through the tools' ``main`` (stderr captured); a few also run as console
scripts, where a traceback would show.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tensor_graphs.tools import tg_export, tg_opt, tg_run

BIN = Path(sys.executable).parent

FUNC = "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {{\n{body}\n  func.return %y : tensor<2xf32>\n}}\n"
ADD = "  %y = tg.add %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>"
HUGE = "tensor<100000000000x100000000000xf32>"

#: name -> (file content, a pass pipeline, what the one line must say, with its position)
CORPUS: dict[str, tuple[bytes, str, str]] = {
    "syntax": (FUNC.format(body="  %y = tg.add %a %a").encode(), "canonicalize", "syntax.mlir:2:18: error: Expected ','"),
    "unknown_op": (FUNC.format(body="  %y = tg.frobnicate %a : (tensor<2xf32>) -> tensor<2xf32>").encode(), "canonicalize",
                   "unknown_op.mlir:2:22: error: Operation tg.frobnicate is not registered: dialect 'tg' has no op"),
    "unknown_dialect": (FUNC.format(body="  %y = zz.add %a : (tensor<2xf32>) -> tensor<2xf32>").encode(), "canonicalize",
                        "unknown_dialect.mlir:2:15: error: Operation zz.add is not registered: there is no dialect 'zz'"),
    "type_mismatch": (FUNC.format(body=ADD.replace("(tensor<2xf32>, tensor<2xf32>)", "(tensor<2xf32>, tensor<3xf32>)")).encode(),
                      "canonicalize", "type_mismatch.mlir:2:19: error: operand is used with type tensor<3xf32>"),
    "undefined": (FUNC.format(body=ADD.replace("%a, %a", "%a, %b")).encode(), "canonicalize",
                  "undefined.mlir:2:19: error: %b is used but never defined"),
    "duplicate": (FUNC.format(body=ADD + "\n" + ADD).encode(), "canonicalize", "duplicate.mlir:3:3: error: SSA value %y is already defined"),
    "use_before_def": (FUNC.format(body=ADD.replace("%y = tg.add %a, %a", "%y = tg.add %z, %a") + "\n" + ADD.replace("%y", "%z")).encode(),
                       "canonicalize,convert-tensor-to-buffer",
                       "use_before_def.mlir:2:3: error: 'tg.add' op (%y): operand #0 %z is used before it is defined"),
    "verifier": (b"func.func @f(%a: tensor<1x1024xf32>, %b: tensor<256xf32>) -> tensor<1x1024xf32> {\n"
                 b"  %y = tg.add %a, %b : (tensor<1x1024xf32>, tensor<256xf32>) -> tensor<1x1024xf32>\n"
                 b"  func.return %y : tensor<1x1024xf32>\n}\n", "canonicalize",
                 "verifier.mlir:2:3: error: 'tg.add' op (%y): shapes [1, 1024], [256] do not broadcast"),
    "truncated": (b"builtin.module {\n", "canonicalize", "truncated.mlir:2:1: error: unexpected end of input"),
    "truncated_function": (FUNC.format(body=ADD).encode()[:-2], "canonicalize",
                           "truncated_function.mlir:4:1: error: unexpected end of input"),
    "empty": (b"", "canonicalize", "empty.mlir:1:1: error: the input is empty"),
    "whitespace": (b"\n  \n", "canonicalize", "whitespace.mlir:1:1: error: the input is empty"),
    "binary": (bytes(range(256)) * 4, "canonicalize", "binary.mlir:2:118: error: not UTF-8 text (byte 0x80): this looks like binary data"),
    "latin1": (FUNC.format(body="  // caf\xe9\n" + ADD).encode("latin-1"), "canonicalize",
               "latin1.mlir:2:9: error: not UTF-8 text (byte 0xe9): this looks like text in another encoding"),
    "nested": (b"builtin.module {" * 3000 + b"}" * 3000, "canonicalize", "nested.mlir: error: the input is nested too deeply"),
    "too_large_to_plan": (
        f"func.func @f(%a: {HUGE}) -> {HUGE} {{\n  %y = tg.exp %a : {HUGE}\n  %z = tg.exp %y : {HUGE}\n"
        f"  func.return %z : {HUGE}\n}}\n".encode(),
        "convert-tensor-to-buffer,plan-memory", "plan-memory: in @f: its buffers need 4.000e+22 bytes, more than any arena can address",
    ),
}


#: what tg-run says where it differs from tg-opt (it compiles the whole pipeline: the two exps
#: fuse into one loop, so no intermediate is planned and code generation finds the size)
RUN_EXPECTED = {"too_large_to_plan": "tg-run: error: convert-buffer-to-llvm: in @f: %a (memref<100000000000x100000000000xf32>) holds 4.000e+22 bytes"}


def _check_one_line(code: int, err: str, expected: str) -> None:
    assert code == 1, err
    assert "Traceback" not in err, err
    assert err.count("\n") == 1, err
    assert expected in err, err


@pytest.mark.parametrize("name", CORPUS)
def test_tg_opt_malformed_input(name, tmp_path, capsys):
    content, passes, expected = CORPUS[name]
    path = tmp_path / f"{name}.mlir"
    path.write_bytes(content)
    code = tg_opt._main([str(path), "-p", passes])
    _check_one_line(code, capsys.readouterr().err, expected)


@pytest.mark.parametrize("name", [n for n in CORPUS if n != "use_before_def"])
def test_tg_run_malformed_input(name, tmp_path, capsys):
    content, _, expected = CORPUS[name]
    expected = RUN_EXPECTED.get(name, expected)
    path = tmp_path / f"{name}.mlir"
    path.write_bytes(content)
    code = tg_run.main([str(path), "-n", "1"])
    _check_one_line(code, capsys.readouterr().err, expected)


def test_tg_run_use_before_definition(tmp_path, capsys):
    content, _, expected = CORPUS["use_before_def"]
    path = tmp_path / "use_before_def.mlir"
    path.write_bytes(content)
    _check_one_line(tg_run.main([str(path), "-n", "1"]), capsys.readouterr().err, expected)


GOOD = FUNC.format(body=ADD)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["{missing}", "-p", "canonicalize"], "tg-opt: error: cannot read {missing}: No such file or directory"),
        (["{good}", "-p", "does-not-exist"], "tg-opt: error: unknown pass 'does-not-exist'"),
        (["{good}", "-p", "canonicalise"], "unknown pass 'canonicalise' (did you mean canonicalize?)"),
        (["{good}", "-p", "convert-tensor-to-buffer{threads=abc}"],
         "tg-opt: error: option 'threads' of pass 'convert-tensor-to-buffer' takes int, got 'abc'"),
        (["{good}", "-p", "convert-tensor-to-buffer{thread=2}"],
         "pass 'convert-tensor-to-buffer' has no option 'thread' (its options: pack-weights: bool, threads: int)"),
        (["{good}", "-p", "canonicalize{"], "tg-opt: error: cannot parse the pass pipeline 'canonicalize{'"),
        (["{good}", "--pass-pipeline=canonicalize"], "expects 'builtin.module(pass1,pass2,...)'"),
        (["{good}", "-t", "llvm"], "tg-opt: error: cannot translate to LLVM IR"),
    ],
)
def test_tg_opt_bad_arguments(argv, expected, tmp_path, capsys):
    good = tmp_path / "good.mlir"
    good.write_text(GOOD)
    missing = tmp_path / "missing.mlir"
    argv = [a.replace("{good}", str(good)).replace("{missing}", str(missing)) for a in argv]
    code = tg_opt._main(argv)
    _check_one_line(code, capsys.readouterr().err, expected.replace("{missing}", str(missing)))


def test_tg_run_bad_arguments(tmp_path, capsys):
    good = tmp_path / "good.mlir"
    good.write_text(GOOD)
    _check_one_line(tg_run.main([str(tmp_path / "nope.mlir")]), capsys.readouterr().err, "tg-run: error: cannot read")
    _check_one_line(tg_run.main([str(good), "--input", str(tmp_path / "x.npy")]), capsys.readouterr().err, "cannot read --input")
    (tmp_path / "x.npy").write_bytes(b"not numpy")
    _check_one_line(tg_run.main([str(good), "--input", str(tmp_path / "x.npy")]), capsys.readouterr().err, "is not a .npy array")
    _check_one_line(tg_run.main([str(good), "-n", "0"]), capsys.readouterr().err, "-n/--repeat must be at least 1")


def test_tg_run_prints_an_empty_output(tmp_path, capsys):
    """A graph with a 0-size output runs and says so (its summary used to crash on min())."""
    path = tmp_path / "empty.mlir"
    path.write_text(
        "func.func @f(%a: tensor<0x4xf32>) -> tensor<0x4xf32> {\n  %y = tg.exp %a : tensor<0x4xf32>\n  func.return %y : tensor<0x4xf32>\n}\n"
    )
    assert tg_run.main([str(path), "-n", "1"]) == 0, capsys.readouterr().err
    assert "output 0: float32[0, 4]  (empty)" in capsys.readouterr().out


def test_tg_export_model_torch_export_rejects(tmp_path, capsys):
    model = tmp_path / "model.py"
    model.write_text(
        "import torch\n"
        "class Branchy(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x + 1 if x.sum().item() > 0 else x - 1\n"
    )
    code = tg_export.main([f"{model}:Branchy", "--input", "2x3", "-o", str(tmp_path / "m.mlir")])
    _check_one_line(code, capsys.readouterr().err, "tg-export: error:")


@pytest.mark.parametrize("tool, name", [("tg-opt", "binary"), ("tg-opt", "nested"), ("tg-run", "truncated"), ("tg-run", "latin1")])
def test_console_scripts_print_no_traceback(tool, name, tmp_path):
    content, passes, expected = CORPUS[name]
    path = tmp_path / f"{name}.mlir"
    path.write_bytes(content)
    argv = [str(BIN / tool), str(path)] + (["-p", passes] if tool == "tg-opt" else ["-n", "1"])
    r = subprocess.run(argv, capture_output=True, text=True)
    _check_one_line(r.returncode, r.stderr, expected)
