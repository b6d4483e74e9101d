"""A model file from someone else is data, not code (issue 29): hostile ``model.mlir`` +
``model.safetensors`` pairs through ``tg-run`` and ``tg.load``.

Every case runs in a child process of its own (`hostile_runner`: one process imports
tensor_graphs, then forks a child per case), so that a crash fails the test instead of ending the
run. Each hostile case must end with exit status 1, one line on stderr and no traceback, no
signal, and no result (tg-run prints its outputs only after a run). The cases: every reproducer
of the issue rebuilt from a small exported MLP (``Linear(8, 16) -> ReLU -> Linear(16, 4)``), a
``Linear(1024, 1024) -> ReLU -> Linear(1024, 4)`` and an embedding; mutations of the real
safetensors header (a seeded generator over its fields: dtype, shape, offsets, entries); and
truncations of both files at every tenth byte. A hypothesis test checks the header reader
in-process on generated headers (it runs no native code).
"""

from __future__ import annotations

import json
import os
import random
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

import tensor_graphs as tg
from tensor_graphs.frontend.weights import WeightsFileError, map_safetensors

RUNNER = Path(__file__).with_name("hostile_runner.py")


# --------------------------------------------------------------------------- the files


def _export(model: torch.nn.Module, example: tuple, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tg.export(model.eval(), example, directory / f"{name}.mlir")
    return directory / f"{name}.mlir"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, Path]:
    """The real pairs the cases are made from: {name: path of the .mlir}."""
    root = tmp_path_factory.mktemp("pairs")
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    big = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 4))
    return {
        "mlp": _export(mlp, (torch.randn(2, 8),), root, "mlp"),
        "big": _export(big, (torch.randn(1, 1024),), root, "big"),
        "emb": _export(torch.nn.Embedding(100, 4), (torch.tensor([[1, 2, 3]]),), root, "emb"),
    }


def _header(path: Path) -> tuple[dict, bytes]:
    """A safetensors file's header (a dict) and its data bytes."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _write_raw(path: Path, header, data: bytes, length: int | None = None) -> None:
    """A safetensors file of ``header`` (any JSON, or bytes as they are) and ``data``; ``length``
    overrides the header length field."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


class Case:
    """One hostile pair in a directory of its own: the module text and the weights file."""

    def __init__(self, root: Path, name: str):
        self.name = name
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.mlir = self.dir / "model.mlir"
        self.weights = self.dir / "model.safetensors"

    def module(self, text: str, weights_file: str | None = "model.safetensors") -> Case:
        """The module text, its ``tg.weights_file`` set to ``weights_file`` (None: removed)."""
        from xdsl.dialects.builtin import StringAttr

        from tensor_graphs.diagnostics import parse_module

        module = parse_module(text, self.name)
        module.attributes.pop("tg.weights_file", None)
        if weights_file is not None:
            module.attributes["tg.weights_file"] = StringAttr(weights_file)
        self.mlir.write_text(str(module))
        return self

    def arrays(self, arrays: dict[str, np.ndarray]) -> Case:
        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(self.weights))
        return self

    def run(self, *extra: str) -> dict:
        return {"name": self.name, "mode": "tg-run", "argv": [str(self.mlir), "-n", "1", *extra]}

    def load(self, **kw) -> dict:
        return {"name": self.name + " (tg.load)", "mode": "load", "path": str(self.mlir), **kw}


def _arrays(mlir: Path) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in map_safetensors(mlir.with_suffix(".safetensors")).items()}


def _run_all(cases: list[dict], cwd: Path) -> list[dict]:
    spec = cwd / "cases.json"
    spec.write_text(json.dumps(cases))
    env = {**os.environ, "TG_CACHE": "off", "PYTHONPATH": os.pathsep.join([str(RUNNER.parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("TG_TRACEBACK", None)
    done = subprocess.run([sys.executable, str(RUNNER), str(spec)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"the runner itself failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout)


def _refused(result: dict) -> str | None:
    """Why ``result`` is not a clean refusal (None when it is one)."""
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    if result["signal"] is not None:
        return f"ended by {result['signal']}"
    if result["status"] != 1:
        return f"exit status {result['status']}"
    if "Traceback" in result["stderr"]:
        return "a traceback"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr"
    if result["stdout"].strip():
        return "a result on stdout"
    return None


def _assert_refused(results: list[dict], *, says: dict[str, str] | None = None) -> None:
    bad = [f"{r['name']}: {why}\n    stderr: {r['stderr'][-600:]!r}" for r in results if (why := _refused(r))]
    assert not bad, "hostile cases not refused cleanly:\n" + "\n".join(bad)
    for r in results:
        if says and r["name"] in says:
            assert says[r["name"]] in r["stderr"], (r["name"], r["stderr"])


# --------------------------------------------------------------------------- the issue's reproducers


def _weight_cases(root: Path, pairs: dict[str, Path]) -> tuple[list[dict], dict[str, str]]:
    """Weights that do not match the module (item 1 of the issue)."""
    mlp_text, mlp = pairs["mlp"].read_text(), _arrays(pairs["mlp"])
    big_text, big = pairs["big"].read_text(), _arrays(pairs["big"])
    emb_text, emb = pairs["emb"].read_text(), _arrays(pairs["emb"])
    cases, says = [], {}

    def add(name, text, arrays, message, *extra):
        case = Case(root, name).module(text).arrays(arrays)
        cases.extend([case.run(*extra), case.load()])
        says[name] = message

    add("bias shorter than declared", mlp_text, {**mlp, "0.bias": mlp["0.bias"][:1]},
        "weight '0.bias' in weights file")
    add("weight transposed", mlp_text, {**mlp, "0.weight": np.ascontiguousarray(mlp["0.weight"].T)},
        "is [8, 16] (float32), but the module declares [16, 8] (float32)")
    add("big bias of one element", big_text, {**big, "0.bias": big["0.bias"][:1]}, "is [1] (float32), but the module declares [1024]")
    add("embedding table of one row", emb_text, {"weight": emb["weight"][:1]}, "is [1, 4] (float32), but the module declares [100, 4]")
    huge_table = emb_text.replace("100x4xf32", "100000x64xf32").replace("1x3x4xf32", "1x3x64xf32")
    add("embedding declared [100000, 64], stored [1, 64]", huge_table, {"weight": np.zeros((1, 64), np.float32)},
        "is [1, 64] (float32), but the module declares [100000, 64]")
    add("weight of another dtype", mlp_text, {**mlp, "2.bias": mlp["2.bias"].astype(np.float64)},
        "is [4] (float64), but the module declares [4] (float32)")
    add("a weight missing", mlp_text, {k: v for k, v in mlp.items() if k != "2.bias"}, "lacks 1 weight(s) the module reads: 2.bias")
    relu_of = ('builtin.module {{\n  func.func @forward(%x: tensor<1xf32>) -> tensor<{shape}xf32> {{\n'
               '    %w = tg.weight "0.weight" : tensor<{shape}xf32>\n'
               '    %r = aten.relu %w : (tensor<{shape}xf32>) -> tensor<{shape}xf32>\n'
               '    func.return %r : tensor<{shape}xf32>\n  }}\n}}\n')
    add("weight declared 16x1000000", relu_of.format(shape="16x1000000"), mlp, "but the module declares [16, 1000000]")
    add("1000x1000 weight fed to relu", relu_of.format(shape="1000x1000"), mlp, "but the module declares [1000, 1000]")
    return cases, says


def _header_cases(root: Path, pairs: dict[str, Path]) -> tuple[list[dict], dict[str, str]]:
    """Malformed safetensors headers (item 2)."""
    text = pairs["mlp"].read_text()
    header, data = _header(pairs["mlp"].with_suffix(".safetensors"))
    first = min((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    second = min((k for k in header if k not in ("__metadata__", first)), key=lambda k: header[k]["data_offsets"][0])
    cases, says = [], {}

    def add(name, head, body=data, message="", length=None):
        case = Case(root, name).module(text)
        _write_raw(case.weights, head, body, length)
        cases.extend([case.run(), case.load()])
        says[name] = message

    def entry(name, **fields):
        return {**header, name: {**header[name], **fields}}

    size = header[first]["data_offsets"][1]
    add("negative data_offsets", entry(first, data_offsets=[-32, -32 + size]), message="has a negative offset")
    add("overlapping data_offsets", entry(second, data_offsets=[0, header[second]["data_offsets"][1] - header[second]["data_offsets"][0]]),
        message="overlaps the tensor before it")
    add("header length 1e12", header, length=10**12, message="over the 100000000 allowed")
    add("header longer than the file", header, length=len(json.dumps(header)) + 10_000, message="truncated?")
    add("header a JSON list", list(header.items()), message="its header is a JSON list, not an object")
    add("entry not an object", {**header, first: [1, 2, 3]}, message="is described by a JSON list")
    add("data_offsets missing", {**header, first: {k: v for k, v in header[first].items() if k != "data_offsets"}},
        message="has no data_offsets")
    add("dtype unknown", entry(first, dtype="F8_E4M3"), message="which tensor_graphs does not read")
    add("shape negative", entry(first, shape=[-16, -8]), message="expected a list of non-negative integers")
    add("shape of floats", entry(first, shape=[16.0, 8.0]), message="expected a list of non-negative integers")
    add("offsets of strings", entry(first, data_offsets=["0", "512"]), message="expected [begin, end], two integers")
    add("bytes past the end", header, data[:-4], message="the tensors cover")
    add("a gap between tensors", entry(first, data_offsets=[4, size + 4]), data + bytes(4), message="leaves a gap")
    add("shape not the byte count", entry(first, shape=[16, 9]), message="holds")
    add("header not UTF-8", b'{"\xff\xfe": 1}', message="not JSON")
    add("metadata not strings", {**header, "__metadata__": {"format": 3}}, message="__metadata__ is not an object of strings")
    add("nested too deeply", b"[" * 100_000 + b"]" * 100_000, message="not JSON")
    return cases, says


def _location_cases(root: Path, pairs: dict[str, Path]) -> tuple[list[dict], dict[str, str]]:
    """tg.weights_file naming a file outside the module's directory (item 3)."""
    text = pairs["mlp"].read_text()
    outside = root / "outside.safetensors"
    outside.write_bytes(pairs["mlp"].with_suffix(".safetensors").read_bytes())  # a real weights file, elsewhere
    cases, says = [], {}
    for name, weights_file in (("weights_file absolute", str(outside)), ("weights_file ..", "../outside.safetensors"),
                               ("weights_file in a subdirectory", "sub/model.safetensors"), ("weights_file /etc/passwd", "/etc/passwd")):
        case = Case(root, name).module(text, weights_file)
        cases.extend([case.run(), case.load()])
        says[name] = "is not a file name in the module's own directory"
    link = Case(root, "weights_file a link out of the directory").module(text, "linked.safetensors")
    (link.dir / "linked.safetensors").symlink_to(outside)
    cases.extend([link.run(), link.load()])
    says[link.name] = "outside the module's directory"
    return cases, says


def _native_code_case(root: Path, pairs: dict[str, Path], marker: str) -> tuple[Case, Path]:
    """An llvm-level module of the MLP whose forward calls ``system`` on its input (item 4); the
    input file holds ``touch <marker>``."""
    fn = tg.load(pairs["mlp"])
    case = Case(root, "llvm module calling system")
    buf = case.dir / "buf.mlir"
    buf.write_text(fn.ir("buf"))
    lowered = subprocess.run([sys.executable, "-m", "tensor_graphs.tools.tg_opt", str(buf), "-p", "convert-buffer-to-llvm"],
                             capture_output=True, text=True, check=True).stdout
    evil = lowered.replace("  llvm.func @scipy_cblas_sgemm(", "  llvm.func @system(!llvm.ptr) -> i32\n  llvm.func @scipy_cblas_sgemm(", 1)
    evil = evil.replace("    %input = llvm.load %inputs : !llvm.ptr -> !llvm.ptr\n",
                        "    %input = llvm.load %inputs : !llvm.ptr -> !llvm.ptr\n"
                        "    %pwn = llvm.call @system(%input) : (!llvm.ptr) -> i32\n", 1)
    assert "@system(%input)" in evil
    case.mlir.write_text(evil)
    case.arrays(_arrays(pairs["mlp"]))
    command = f"touch {marker}".encode() + b"\0"
    cmd = case.dir / "cmd.npy"
    np.save(cmd, np.frombuffer(command + bytes(64 - len(command)), np.float32).reshape(2, 8))
    return case, cmd


def test_the_issue_reproducers_are_refused_cleanly(pairs, tmp_path):
    cases, says = [], {}
    for make in (_weight_cases, _header_cases, _location_cases):
        more, text = make(tmp_path, pairs)
        cases += more
        says.update(text)
    evil, cmd = _native_code_case(tmp_path, pairs, "pwned")
    cases += [evil.run("--input", str(cmd), "--weights", str(evil.weights)), evil.load(weights=str(evil.weights))]
    says[evil.name] = "refusing to run this module: it holds native code ('llvm.func' @system"
    results = _run_all(cases, tmp_path)
    assert not (tmp_path / "pwned").exists(), "the module's native code ran"
    _assert_refused(results, says=says)


def test_native_code_runs_when_the_caller_trusts_it(pairs, tmp_path):
    """The opt-in is real: with --trust-native-code the same module runs, and so its call."""
    evil, cmd = _native_code_case(tmp_path, pairs, "pwned")
    (result,) = _run_all([evil.run("--input", str(cmd), "--weights", str(evil.weights), "--trust-native-code")], tmp_path)
    assert result["status"] == 0, result["stderr"]
    assert (tmp_path / "pwned").exists()


def test_the_intact_pairs_run(pairs, tmp_path):
    """The harness itself: the real pairs give results, by tg-run and by tg.load."""
    cases = []
    for name, mlir in pairs.items():
        cases += [{"name": name, "mode": "tg-run", "argv": [str(mlir), "-n", "1"]},
                  {"name": name + " (tg.load)", "mode": "load", "path": str(mlir)}]
    for r in _run_all(cases, tmp_path):
        assert r["status"] == 0 and r["signal"] is None, (r["name"], r["stderr"])
        assert ("output 0:" in r["stdout"]) if "tg.load" not in r["name"] else ("RESULT" in r["stdout"])


# --------------------------------------------------------------------------- buf level from a file


BUF_OVERLAP = """builtin.module {
  func.func @forward(%x: memref<16xf32>, %y: memref<16xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<128xi8>
    %a = buf.view %arena[0] : memref<128xi8> -> memref<16xf32>
    %b = buf.view %arena[0] : memref<128xi8> -> memref<16xf32>
    buf.relu ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
    buf.relu ins(%x : memref<16xf32>) outs(%b : memref<16xf32>)
    buf.add ins(%a, %b : memref<16xf32>, memref<16xf32>) outs(%y : memref<16xf32>)
    func.return
  }
}
"""


def test_buf_modules_from_a_file_are_held_to_the_planner_invariants(pairs, tmp_path):
    """Item 5: buffers live at once that overlap, and packed weights larger than the weights
    they pack, are refused (the verifier, then the weights check)."""
    fn = tg.load(pairs["mlp"])
    buf_text = fn.ir("buf")
    mlp = _arrays(pairs["mlp"])
    (nr,) = re.findall(r"source_shape = array<i64: 16, 8>\} : memref<1x8x(\d+)xf32>", buf_text)
    overlap = Case(tmp_path, "views live together overlap").module(BUF_OVERLAP, None)
    larger = Case(tmp_path, "packed weight larger than its source").module(
        buf_text.replace(f"memref<1x8x{nr}xf32>", f"memref<4x8x{nr}xf32>")).arrays(mlp)
    smaller_file = Case(tmp_path, "packed weight's file weight smaller").module(buf_text).arrays({**mlp, "0.weight": mlp["0.weight"][:8]})
    results = _run_all([c.run() for c in (overlap, larger, smaller_file)] + [c.load() for c in (overlap, larger, smaller_file)], tmp_path)
    _assert_refused(results, says={
        overlap.name: "overlap but are live at the same time",
        larger.name: f"packing '0.weight' of shape [16, 8] as panels gives [1, 8, {nr}], not the declared [4, 8, {nr}]",
        smaller_file.name: f"is [8, 8] (float32), but the module's kernels read it packed as '0.weight@panels{nr}t' [1, 8, {nr}] (float32), "
                           "made from a weight of [16, 8]"})


# --------------------------------------------------------------------------- generated cases

#: field -> values a mutation of a header entry may set it to
MUTATIONS = {
    "dtype": ["F64", "I8", "BOOL", "F8", "", 7, None, ["F32"]],
    "shape": [[], [0], [1], [16, 9], [3, 3, 3], [-1], [2**62, 2**62], [1.5], "16", None, [True]],
    "data_offsets": [[0], [0, 0], [1, 2], [-8, 0], [0, 2**63], [2**40, 2**40 + 4], ["a", "b"], None, [0, 1, 2]],
}


def _mutated_headers(header: dict, count: int, seed: int) -> list[tuple[str, dict]]:
    """``count`` headers, each the real one with one field of one entry changed (seeded)."""
    rng = random.Random(seed)
    names = sorted(k for k in header if k != "__metadata__")
    out = []
    while len(out) < count:
        name, field = rng.choice(names), rng.choice(sorted(MUTATIONS))
        value = rng.choice(MUTATIONS[field])
        if header[name].get(field) == value:
            continue
        out.append((f"{name}.{field}={json.dumps(value)}", {**header, name: {**header[name], field: value}}))
    return out


def test_generated_and_truncated_pairs_are_refused_cleanly(pairs, tmp_path):
    """Mutated headers (one field of one entry, seeded) and both files of the MLP cut at every
    tenth byte: each refused cleanly, never a result."""
    mlir = pairs["mlp"]
    text, weights = mlir.read_bytes(), mlir.with_suffix(".safetensors").read_bytes()
    header, data = _header(mlir.with_suffix(".safetensors"))
    cases = []
    for label, head in _mutated_headers(header, 60, seed=29):
        case = Case(tmp_path, f"header {len(cases)} {label}".replace("/", "_")).module(text.decode())
        _write_raw(case.weights, head, data)
        cases.append(case.run())
    content_end = len(text.rstrip())
    for cut in range(0, content_end, 10):
        case = Case(tmp_path, f"mlir cut at {cut}")
        case.mlir.write_bytes(text[:cut])
        case.weights.write_bytes(weights)
        cases.append(case.run())
    for cut in range(0, len(weights), 10):
        case = Case(tmp_path, f"safetensors cut at {cut}").module(text.decode())
        case.weights.write_bytes(weights[:cut])
        cases.append(case.run())
    _assert_refused(_run_all(cases, tmp_path))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_header_reader_accepts_only_what_fits(tmp_path, data):
    """`map_safetensors` on generated headers: a `WeightsFileError`, or tensors that each lie
    inside the file's data, of their shape's byte count, one after another."""
    n = data.draw(st.integers(0, 3))
    sizes = data.draw(st.lists(st.integers(0, 64), min_size=n, max_size=n))
    ints = st.one_of(st.integers(-2**64, 2**64), st.integers(-8, 80))
    header = {}
    offset = 0
    for i, size in enumerate(sizes):
        begin = data.draw(st.one_of(st.just(offset), ints))
        end = data.draw(st.one_of(st.just(begin + 4 * size if isinstance(begin, int) else 0), ints))
        shape = data.draw(st.one_of(st.just([size]), st.lists(st.integers(-2, 2**40), max_size=3)))
        dtype = data.draw(st.sampled_from(["F32", "F32", "I64", "U8", "BF16", "X"]))
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
        offset = end if isinstance(end, int) else offset
    body = bytes(data.draw(st.integers(0, 300)))
    path = tmp_path / "h.safetensors"
    _write_raw(path, header, body)
    try:
        tensors = map_safetensors(path)
    except WeightsFileError:
        return
    covered = 0
    for name in sorted(tensors, key=lambda k: header[k]["data_offsets"][0]):
        begin, end = header[name]["data_offsets"]
        assert begin == covered and end <= len(body)
        assert tensors[name].nbytes == end - begin and list(tensors[name].shape) == header[name]["shape"]
        covered = end
    assert covered == len(body)
