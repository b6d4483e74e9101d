"""`tg-run model.mlir`: compile a module (aten, tg, buf or llvm level) and run it.

    tg-run model.mlir                       # random inputs, median time per call
    tg-run model.mlir --input x.npy -n 200  # given inputs
    tg-run --profile model.mlir             # + time per kernel: the top 30, then per kind
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _summary(name: str, a: np.ndarray) -> str:
    flat = a.reshape(-1)
    head = ", ".join(f"{v:.6g}" for v in flat[:4])
    return (
        f"{name}: {a.dtype}{list(a.shape)}  min {flat.min():.6g}  max {flat.max():.6g}  "
        f"mean {flat.mean():.6g}  [{head}{', ...' if flat.size > 4 else ''}]"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tg-run", description=__doc__.splitlines()[0])
    ap.add_argument("module", help="a .mlir file at the aten, tg, buf or llvm level")
    ap.add_argument("--input", action="append", default=[], metavar="X.npy", help="input arrays in order (default: random)")
    ap.add_argument("--weights", help="safetensors file (default: the module's tg.weights_file beside it)")
    ap.add_argument("-n", "--repeat", type=int, default=100, help="timed calls (default 100)")
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--past", type=int, default=None,
                    help="for a graph with state (a KV cache): positions already cached (default 0); states start zeroed")
    ap.add_argument("--profile", action="store_true",
                    help="time every kernel call: print the 30 slowest kernels and the time per kind of kernel")
    args = ap.parse_args(argv)

    from xdsl.parser import Parser

    import tensor_graphs as tg
    from tensor_graphs.context import make_context
    from tensor_graphs.frontend import load_weights

    path = Path(args.module)
    try:
        text = path.read_text()
    except OSError as e:
        print(f"tg-run: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        module = Parser(make_context(), text, str(path)).parse_module()
        module.verify()
        if args.weights:
            from safetensors.numpy import load_file

            weights = load_file(args.weights)
        else:
            weights = load_weights(module, path)
        t0 = time.perf_counter()
        fn = tg.compile_module(module, weights, keep_ir=False, profile=args.profile)
        compile_s = time.perf_counter() - t0
    except Exception as e:  # a user's module: report, don't dump a traceback
        print(f"tg-run: {type(e).__name__}: {e}", file=sys.stderr)
        return 1

    tg.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    specs = fn.signature.inputs
    if args.input:
        inputs = [np.load(p) for p in args.input]
    else:
        inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in specs]
    call = {"past": args.past if args.past is not None else 0} if fn.signature.states else {}
    try:
        out = fn(*inputs, **call)
    except (TypeError, ValueError, RuntimeError) as e:
        print(f"tg-run: {e}", file=sys.stderr)
        return 2
    outs = out if isinstance(out, tuple) else (out,)
    times = []
    for _ in range(max(args.repeat, 1)):
        t0 = time.perf_counter()
        fn(*inputs, **call)
        times.append(time.perf_counter() - t0)
    report = fn.profile(*inputs, repeat=max(args.repeat, 1), warmup=0, **call) if args.profile else None

    print(f"compiled {path.name} in {compile_s:.3f} s; {fn.memory}")
    for spec, x in zip(specs, inputs):
        print(_summary(f"input  {spec.name}", x))
    for i, o in enumerate(outs):
        print(_summary(f"output {i}", o))
    profiled = " (profiled: each kernel call also reads the clock)" if args.profile else ""
    print(f"median time per call: {statistics.median(times) * 1e6:.1f} us over {len(times)} calls ({args.threads} BLAS thread(s)){profiled}")
    if report is not None:
        print()
        print(report.format(top=30))
    return 0


if __name__ == "__main__":
    sys.exit(main())
