"""Compile a lowered module's Triton kernels for a GPU that is not here: Triton's own compiler to
a cubin for an NVIDIA compute capability (``GPUTarget("cuda", 90, 32)``: an H100), in a child
process without ``TRITON_INTERPRET`` (Triton chooses interpreter or compiler once, when it is
imported). What it tells without a GPU:

* whether each kernel compiles for that GPU at all (the interpreter runs programs a GPU compile
  rejects: `tests/test_triton_sm90.py`);
* with ``resources=True``, what ptxas says each kernel uses (``ptxas -v`` on Triton's PTX):
  registers per thread, spilled bytes, the stack frame, and Triton's shared memory: what decides
  how many programs a multiprocessor holds at once (`benchmarks/gpu_kernels.py`); and how many
  of its global loads and stores are vector accesses (``vector_accesses``).

Each kernel is compiled as the runtime's launches specialize it: the pointer arguments the
runtime binds 16-byte aligned marked so (a launch's fourth entry, one flag per argument:
`signatures.aligned`; without it, all of them), as Triton's launcher does (`specialization`).

    results = compile_programs([{"what": "qwen3 forward", "source": <kernels' source>,
                                 "launches": [["k3_rms_norm", ["*fp32", "*fp32", "*fp32"], None]]}],
                               capability=90, resources=True)
    # -> [{"what": ..., "kernel": "k3_rms_norm", "signature": [...], "warps": 4, "ok": True,
    #      "registers": 24, "spill_stores": 0, "spill_loads": 0, "stack": 0, "shared": 0, "vector_accesses": 2}]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: ptxas -v's lines: "Used 40 registers, ..." and "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
_REGISTERS = re.compile(r"Used (\d+) registers")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
#: a vector load or store of global memory in PTX (``ld.global.v4.b32``: 16 bytes at once)
_VECTOR_ACCESS = re.compile(r"\b(?:ld|st)\.global(?:\.\w+)*?\.v[248]\.")


def compile_programs(programs: list[dict], capability: int = 90, resources: bool = False,
                     cache_dir: str | None = None, timeout: float = 900) -> list[dict]:
    """Every ``(kernel, signature, warps)`` of each program compiled for ``capability`` in a
    child process; one result per launch (``ok``, else ``error``: the compiler's last line), with
    its resources when asked; a kernel repeated under another name (the same source, signature
    and warps) is compiled once. ``cache_dir``: Triton's cache for the child (default: a fresh one,
    so that nothing is taken from an earlier compile)."""
    with tempfile.TemporaryDirectory(prefix="tg-offline-") as tmp:
        path, out = Path(tmp) / "programs.json", Path(tmp) / "results.json"
        path.write_text(json.dumps(programs))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["TRITON_CACHE_DIR"] = cache_dir or str(Path(tmp) / "triton-cache")
        args = [sys.executable, "-m", __name__, str(path), str(out), str(capability), "1" if resources else "0"]
        try:
            done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the offline Triton compile of {sum(len(p['launches']) for p in programs)} kernel(s) "
                               f"took over {timeout:.0f} s") from None
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the offline Triton compile failed (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def _ptxas_resources(ptx: str, capability: int) -> dict[str, int]:
    """``ptxas -v``'s account of the one kernel in ``ptx`` (Triton's own ptxas and arch name)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        done = subprocess.run([get_ptxas(capability).path, "-v", f"--gpu-name={sm_arch_from_capability(capability)}", str(src),
                               "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    log = done.stderr + done.stdout
    if done.returncode != 0:
        raise RuntimeError(f"ptxas -v failed (exit {done.returncode}): {log.strip()[-300:]}")
    registers, frame = _REGISTERS.search(log), _FRAME.search(log)
    if registers is None or frame is None:
        raise RuntimeError(f"unexpected ptxas -v output:\n{log}")
    stack, stores, loads = (int(g) for g in frame.groups())
    return {"registers": int(registers.group(1)), "spill_stores": stores, "spill_loads": loads, "stack": stack,
            "vector_accesses": len(_VECTOR_ACCESS.findall(ptx))}


def specialization(signature: list[str], aligned: list[bool] | None = None) -> dict[tuple[int], list[list]]:
    """Triton's ``attrs`` marking the pointer arguments of ``signature`` that are aligned (all
    when ``aligned`` is None) `signatures.POINTER_ALIGNMENT`-byte divisible, as Triton's
    launcher specializes a kernel on the pointers it is given (vector loads and stores where
    contiguous). Without them the compile is of the unspecialized kernel, one element a load,
    whose registers are not what runs."""
    from tensor_graphs.codegen.triton.signatures import POINTER_ALIGNMENT

    flags = aligned if aligned is not None else [True] * len(signature)
    return {(k,): [["tt.divisibility", POINTER_ALIGNMENT]] for k, (t, ok) in enumerate(zip(signature, flags)) if t.startswith("*") and ok}


def _launch_key(module: Any, name: str, signature: list[str], warps: int | None, aligned: list[bool] | None) -> tuple:
    """What a launch's compile depends on, its kernel's name aside: the kernel's own source with
    its name replaced, the module's other Triton functions (the helpers it may call: the same
    prelude in every program `convert-tensor-to-triton` emits), the signature, the warps and the
    aligned pointers. The layers of a model and the variants pinned one op at a time repeat most
    kernels under other names (a third to a half of the launches of `tests/test_triton_sm90.py`),
    and each compile takes about 0.2 s."""
    import triton

    fn = getattr(module, name)
    helpers = tuple(sorted((k, v.src) for k, v in vars(module).items()
                           if isinstance(v, triton.runtime.JITFunction) and k != name and not re.fullmatch(r"k\d+_\w+", k)))
    own = re.sub(rf"\b{re.escape(name)}\b", "<kernel>", fn.src)
    return own, helpers, tuple(signature), warps, None if aligned is None else tuple(aligned)


def _compile_in_this_process(programs: list[dict], capability: int, resources: bool) -> list[dict]:
    """The child's work (`compile_programs`): Triton imported here, as a compiler; a launch whose
    compile an earlier one already did (`_launch_key`) takes that one's outcome."""
    import importlib.util

    results: list[dict[str, Any]] = []
    done: dict[tuple, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, program in enumerate(programs):
            path = Path(tmp) / f"tg_offline_{k}.py"  # Triton reads a kernel's source from its file
            path.write_text(program["source"])
            spec = importlib.util.spec_from_file_location(f"tg_offline_{k}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
                loaded = None
            except Exception as e:  # the source itself: every launch of the program fails with it
                loaded = f"the kernels' source does not load: {type(e).__name__}: {e}"
            for name, signature, warps, *rest in program["launches"]:
                result: dict[str, Any] = {"what": program["what"], "kernel": name, "signature": signature, "warps": warps or 4}
                try:
                    if loaded is not None:
                        raise RuntimeError(loaded)
                    if not hasattr(module, name):
                        raise RuntimeError(f"no kernel '{name}' in the source")
                    key = _launch_key(module, name, signature, warps, rest[0] if rest else None)
                    if key not in done:
                        done[key] = _compile_launch(getattr(module, name), signature, warps, rest[0] if rest else None,
                                                    capability, resources)
                    result.update(done[key])
                except Exception as e:  # the source itself, not the compiler (which `_compile_launch` reports)
                    text = str(e).strip()
                    result.update(ok=False, error=text.splitlines()[-1][:300] if text else repr(e))
                results.append(result)
    return results


def _compile_launch(fn: Any, signature: list[str], warps: int | None, aligned: list[bool] | None, capability: int,
                    resources: bool) -> dict[str, Any]:
    """One kernel compiled for ``capability``: ``ok`` with Triton's shared memory and warps (and
    ptxas's resources), or ``ok=False`` with the compiler's last line."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        source = ASTSource(fn=fn, signature=dict(zip(fn.arg_names, signature)), constexprs={}, attrs=specialization(signature, aligned))
        compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": warps} if warps else {})
        result: dict[str, Any] = dict(ok=True, shared=int(compiled.metadata.shared), warps=int(compiled.metadata.num_warps))
        if resources:
            result.update(_ptxas_resources(compiled.asm["ptx"], capability))
        return result
    except Exception as e:  # the compiler's own message, for the caller to report
        text = str(e).strip()
        return dict(ok=False, error=text.splitlines()[-1][:300] if text else repr(e))


if __name__ == "__main__":  # the child of `compile_programs`
    programs_path, out_path, capability_arg, resources_arg = sys.argv[1:5]
    found = _compile_in_this_process(json.loads(Path(programs_path).read_text()), int(capability_arg), resources_arg == "1")
    Path(out_path).write_text(json.dumps(found))
