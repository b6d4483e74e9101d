"""`tg-run model.mlir`: compile a module (aten, tg, buf or llvm level) and run it.

    tg-run model.mlir                       # random inputs, median time per call
    tg-run model.mlir --input x.npy -n 200  # given inputs
    tg-run --profile model.mlir             # + time per kernel: the top 30, then per kind
    tg-run --tune cached --explain model.mlir   # tuned kernel paths (tg-tune), and why each
    tg-run bert.mlir --size seq=128         # a graph of dynamic sizes, at these (default: each maximum)

Bad input (an unreadable or malformed module, missing weights or weights that do not match the
module, inputs of the wrong shape or dtype, a run-time check of the graph failing) prints ONE
line and exits with status 1. A module is data (`frontend.untrusted`): one holding native code
(the llvm level) runs only with ``--trust-native-code``, and its ``tg.weights_file`` must be a
file of its own directory (``--weights FILE`` names any other).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _summary(name: str, a: np.ndarray) -> str:
    flat = a.reshape(-1)
    if flat.size == 0:
        return f"{name}: {a.dtype}{list(a.shape)}  (empty)"
    head = ", ".join(f"{v:.6g}" for v in flat[:4])
    return (
        f"{name}: {a.dtype}{list(a.shape)}  min {flat.min():.6g}  max {flat.max():.6g}  "
        f"mean {flat.mean():.6g}  [{head}{', ...' if flat.size > 4 else ''}]"
    )


class RunError(Exception):
    """Bad input to tg-run: printed as one line, exit status 1."""


def _load_input(path: str, index: int, spec) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except OSError as e:
        raise RunError(f"cannot read --input {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise RunError(f"--input {path} (input {index}, '{spec.name}') is not a .npy array: {' '.join(str(e).split())}") from None


def read_module(module_path: str, weights_path: str | None, error: type[Exception] = RunError, trust_native_code: bool = False):
    """Parse and verify the module at ``module_path`` and map its weights (``weights_path``, else
    the module's ``tg.weights_file`` beside it), each checked against what the module declares:
    (module, weights). A file that cannot be read, or a module holding native code without
    ``trust_native_code`` (`frontend.untrusted`), raises ``error`` saying which (tg-run's and
    tg-tune's one line)."""
    from tensor_graphs.diagnostics import parse_module, verify_module
    from tensor_graphs.frontend import load_weights
    from tensor_graphs.frontend.untrusted import NativeCodeError, check_trusted

    path = Path(module_path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror}") from None
    module = parse_module(data, str(path))
    try:
        check_trusted(module, str(path), trust_native_code)
    except NativeCodeError as e:
        raise error(str(e)) from None
    verify_module(module)
    try:
        return module, load_weights(module, path, mmap=True, path=weights_path)  # as tg.load: read in place, not copied
    except FileNotFoundError as e:
        raise error(str(e)) from None
    except OSError as e:
        raise error(f"cannot read the weights file {e.filename or weights_path}: {e.strerror or e}") from None
    except ValueError as e:
        raise error(" ".join(str(e).split())) from None


def _compile(args):
    """Parse, verify and compile the module of ``args``: (CompiledGraph, seconds, the example
    inputs it was tuned on or None)."""
    import tensor_graphs as tg

    module, weights = read_module(args.module, args.weights, trust_native_code=args.trust_native_code)
    tuning, inputs = None, None
    if args.tune != "off":
        from tensor_graphs.tools.tg_tune import TuneError, _module_inputs
        from tensor_graphs.tuning.compile import Tuning, open_db

        try:
            inputs = _module_inputs(module, args.input, np.random.default_rng(args.seed))
        except TuneError as e:
            raise RunError(str(e)) from None
        tuning = Tuning(args.tune, args.tolerance, inputs, open_db(args.db))
    t0 = time.perf_counter()
    fn = tg.compile_module(module, weights, keep_ir=False, profile=args.profile, target=args.target, tuning=tuning)
    return fn, time.perf_counter() - t0, inputs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tg-run", description=__doc__.splitlines()[0])
    ap.add_argument("module", help="a .mlir file at the aten, tg, buf or llvm level")
    ap.add_argument("--input", action="append", default=[], metavar="X.npy", help="input arrays in order (default: random)")
    ap.add_argument("--weights", help="safetensors file (default: the module's tg.weights_file beside it)")
    ap.add_argument("--trust-native-code", action="store_true",
                    help="run a module that holds native code (the llvm level): its functions run as they are, "
                         "with your privileges; only for a file whose source you trust")
    ap.add_argument("-n", "--repeat", type=int, default=100, help="timed calls (default 100)")
    ap.add_argument("--threads", type=int, default=1, help="threads of the parallel kernels (default 1)")
    ap.add_argument("--target", default=None, metavar="NAME",
                    help="the machine to compile for: host (default; TG_TARGET when set), an ISA level "
                         "(x86-64, x86-64-v2, x86-64-v3, x86-64-v4) or a CPU name (znver3, sapphirerapids, ...)")
    ap.add_argument("--size", action="append", default=[], metavar="NAME=N",
                    help="a dynamic graph's size symbol at which to run random inputs (repeatable; default: each "
                         "symbol's maximum)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--past", type=int, default=None,
                    help="for a graph with state (a KV cache): positions already cached (default 0); states start zeroed")
    ap.add_argument("--profile", action="store_true",
                    help="time every kernel call: print the 30 slowest kernels and the time per kind of kernel")
    ap.add_argument("--tune", choices=("off", "cached", "missing", "all"), default="off",
                    help="kernel paths from the timing database (see tg-tune): off (default: the heuristic), cached, "
                         "missing (measure what is not recorded), all")
    ap.add_argument("--tolerance", type=float, default=1e-5,
                    help="with --tune: max error of a path, relative to the largest reference magnitude (default 1e-5)")
    ap.add_argument("--db", default=None, help="with --tune: the timing database (default: TG_TUNING_DB, else the user cache)")
    ap.add_argument("--explain", action="store_true",
                    help="print each kernel's path, why it was chosen, and the alternatives' times and errors")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except RunError as e:
        print(f"tg-run: error: {e}", file=sys.stderr)
    except ValueError as e:
        from tensor_graphs.target import TargetError

        if not isinstance(e, TargetError):
            return _one_line(e)
        print(f"tg-run: error: {e}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a user's module: one line, never a traceback
        return _one_line(e)
    return 1


def _sizes(given: list[str], symbols) -> dict[str, int]:
    """``--size NAME=N`` for each size symbol (name, min, max) of the graph; its maximum when not
    given. A RunError for a malformed one, an unknown name or a size out of range."""
    sizes = {name: hi for name, _, hi in symbols}
    ranges = {name: (lo, hi) for name, lo, hi in symbols}
    for text in given:
        name, sep, value = text.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise RunError(f"--size {text}: expected NAME=N (an integer)")
        name = name.strip()
        if name not in ranges:
            raise RunError(f"--size {text}: the graph has no size symbol {name!r} "
                           f"({', '.join(f'{n} in [{lo}, {hi}]' for n, lo, hi in symbols) or 'its sizes are static'})")
        lo, hi = ranges[name]
        if not lo <= int(value) <= hi:
            raise RunError(f"--size {text}: {name} must be in [{lo}, {hi}]")
        sizes[name] = int(value)
    return sizes


def _one_line(e: Exception) -> int:
    """Print ``e`` as tg-run's one error line (the traceback with ``TG_TRACEBACK=1``); exit status 1."""
    from xdsl.utils.exceptions import DiagnosticException

    from tensor_graphs.diagnostics import IRError

    if isinstance(e, IRError):
        print(e, file=sys.stderr)
    elif isinstance(e, DiagnosticException):  # a pass rejected the module: its own message
        print(f"tg-run: error: {str(e).strip()}", file=sys.stderr)
    elif os.environ.get("TG_TRACEBACK"):
        raise e
    else:
        print(f"tg-run: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
    return 1


def _run(args) -> int:
    import tensor_graphs as tg

    if args.repeat < 1:
        raise RunError(f"-n/--repeat must be at least 1, got {args.repeat}")
    if args.threads < 1:
        raise RunError(f"--threads must be at least 1, got {args.threads}")
    tg.set_num_threads(args.threads)
    fn, compile_s, tuned_inputs = _compile(args)
    rng = np.random.default_rng(args.seed)
    specs = fn.signature.inputs
    if tuned_inputs is not None:
        inputs = tuned_inputs
    elif args.input:
        if len(args.input) != len(specs):
            names = ", ".join(f"{s.name}: {s}" for s in specs)
            raise RunError(f"the graph takes {len(specs)} input(s) ({names}); {len(args.input)} --input given")
        inputs = [_load_input(p, i, s) for i, (p, s) in enumerate(zip(args.input, specs))]
    else:
        sizes = _sizes(args.size, fn.signature.symbols)
        inputs = [rng.standard_normal(fn._binder.shape(s, [sizes[n] for n, _, _ in fn.signature.symbols])
                                      if fn.signature.symbols else s.shape).astype(s.dtype) for s in specs]
    call = {"past": args.past if args.past is not None else 0} if fn.signature.states else {}
    try:
        out = fn(*inputs, **call)
    except (TypeError, ValueError, IndexError, RuntimeError) as e:
        raise RunError(str(e)) from None
    outs = out if isinstance(out, tuple) else (out,)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        fn(*inputs, **call)
        times.append(time.perf_counter() - t0)
    report = fn.profile(*inputs, repeat=args.repeat, warmup=0, **call) if args.profile else None

    memory = fn.memory
    if fn.signature.symbols:  # at this run's sizes (the inputs')
        values = fn._binder.dims([tuple(x.shape) for x in inputs])
        memory = memory.at(**{n: v for (n, _, _), v in zip(fn.signature.symbols, values)})
    print(f"compiled {Path(args.module).name} in {compile_s:.3f} s for {fn.target.describe()}; {memory}")
    for spec, x in zip(specs, inputs):
        print(_summary(f"input  {spec.name}", x))
    for i, o in enumerate(outs):
        print(_summary(f"output {i}", o))
    profiled = " (profiled: each kernel call also reads the clock)" if args.profile else ""
    print(f"median time per call: {statistics.median(times) * 1e6:.1f} us over {len(times)} calls ({args.threads} thread(s)){profiled}")
    if report is not None:
        print()
        print(report.format(top=30))
    if args.explain:
        print()
        print(fn.explain())
    return 0


if __name__ == "__main__":
    sys.exit(main())
