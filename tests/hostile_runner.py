"""Run many cases of ``tg-run`` or ``tg.load`` on files, each in a child process of its own.

    python tests/hostile_runner.py cases.json > results.json

``cases.json`` is a list of ``{"name", "mode": "tg-run" | "load", "argv" | "path" (+ "weights",
"trust")}``. The runner imports tensor_graphs once, then forks one child per case, so that a
case that crashes (a signal) ends only its child; the child's stdout and stderr go to files. Each
result: ``{"name", "status"`` (the exit status, None when a signal ended it), ``"signal"``,
``"stdout"``, ``"stderr"}``. A ``load`` case calls ``tg.load`` and then the graph on random
inputs; it prints ``RESULT`` and exits 0 when that worked, else prints one line
``tg.load: <error type>: <message>`` (as tg-run would) and exits 1.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile


def _load_case(case: dict) -> int:
    import numpy as np

    import tensor_graphs as tg

    try:
        fn = tg.load(case["path"], weights=case.get("weights"), trust_native_code=case.get("trust", False), keep_ir=False)
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in fn.signature.inputs]
        fn(*inputs)
    except Exception as e:  # noqa: BLE001 - what a user of the API would see, as one line
        print(f"tg.load: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    print("RESULT")
    return 0


def _child(case: dict, out: str, err: str) -> None:
    """In the forked child: stdout and stderr to the files, the case, then exit with its status."""
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    status = 70
    try:
        if case["mode"] == "tg-run":
            from tensor_graphs.tools import tg_run

            status = tg_run.main(case["argv"])
        else:
            status = _load_case(case)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - a traceback reaches the user: the test sees it
        import traceback

        traceback.print_exc()
        status = 71
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def run(cases: list[dict]) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        for case in cases:
            pid = os.fork()
            if pid == 0:
                _child(case, out, err)
            _, status = os.waitpid(pid, 0)
            with open(out, errors="replace") as f_out, open(err, errors="replace") as f_err:
                results.append({
                    "name": case["name"],
                    "status": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                    "signal": signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else None,
                    "stdout": f_out.read(),
                    "stderr": f_err.read(),
                })
    return results


#: a module whose parsing and verifying imports what every case needs
WARM = """builtin.module {
  func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    %r = aten.relu %x : (tensor<2xf32>) -> tensor<2xf32>
    func.return %r : tensor<2xf32>
  }
}
"""


def _warm() -> None:
    """Import, once and before the forks, what each child would otherwise import again (the
    dialects, the verifiers, the weights reader, tg-run); nothing here starts a thread."""
    import tensor_graphs  # noqa: F401
    import tensor_graphs.frontend.untrusted  # noqa: F401
    import tensor_graphs.frontend.weights  # noqa: F401
    import tensor_graphs.runtime_support.bound_weights  # noqa: F401
    from tensor_graphs.diagnostics import parse_module, verify_module
    from tensor_graphs.tools import tg_run  # noqa: F401

    verify_module(parse_module(WARM, "warm.mlir"))
    tensor_graphs.set_num_threads(1)  # loads libgomp and OpenBLAS (held to one thread: no pool to fork)


def main() -> int:
    os.environ.setdefault("TG_CACHE", "off")  # every case compiles for itself
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before OpenBLAS loads: it starts no threads to fork
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    _warm()

    json.dump(run(cases), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
