"""`tg-tune`: measure every kernel path of a model (time and error) into the timing database.

    tg-tune path/to/model.py:make_model --input 1x256        # a model, as for tg-export
    tg-tune model.mlir                                       # an aten- or tg-level module
    tg-tune model.mlir --max-seconds 120 --threads 2         # stop after 2 minutes; resumable
    tg-tune model.mlir --all --tolerance 1e-3                # measure everything again

Each kernel path (variant and parameters, `tensor_graphs.tuning.paths`) is compiled alone at
its shapes, timed and compared with the float64 NumPy evaluator on the example inputs (random,
or ``--input-file X.npy`` per input for a .mlir module); every record goes to the database
(``--db``, else ``TG_TUNING_DB``, else the user cache) as soon as it is made, so a run stopped
by ``--max-seconds`` or Ctrl-C goes on where it stopped the next time. Then the choice for
each kernel within ``--tolerance`` is printed (what ``tg.compile(..., tune="cached")`` and
``tg-run --tune cached --explain`` will take).

Bad input prints ONE line and exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import numpy as np


class TuneError(Exception):
    """Bad input to tg-tune: printed as one line, exit status 1."""


def _module_inputs(module, files: list[str], rng) -> list[np.ndarray]:
    """The example inputs of a .mlir module: the files given, else random ones of its types."""
    from xdsl.dialects import func

    from tensor_graphs.dialects.dense import numpy_dtype_of

    fns = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    if len(fns) != 1:
        raise TuneError(f"the module must hold one function with a body, it holds {len(fns)}")
    types = fns[0].function_type.inputs.data
    if files:
        if len(files) != len(types):
            raise TuneError(f"the graph takes {len(types)} input(s); {len(files)} --input-file given")
        try:
            return [np.load(f, allow_pickle=False) for f in files]
        except (OSError, ValueError) as e:
            raise TuneError(f"cannot read an --input-file: {' '.join(str(e).split())}") from None
    out = []
    for t in types:
        dtype = numpy_dtype_of(t.get_element_type())
        x = rng.standard_normal(tuple(t.get_shape()))
        out.append(np.abs(x).astype(dtype) if np.issubdtype(dtype, np.integer) else x.astype(dtype))
    return out


def _load(args, rng):
    """(module, weights, example inputs) of the model ``args`` names."""
    if args.model.endswith(".mlir"):
        from tensor_graphs.tools.tg_run import read_module

        module, weights = read_module(args.model, args.weights, TuneError)
        return module, weights, _module_inputs(module, args.input_file, rng)
    import torch

    from tensor_graphs.frontend.importer import import_model
    from tensor_graphs.tools.tg_export import CliError, build_model, load_object, parse_shape

    if not args.input:
        raise TuneError("a model spec needs its input shapes: --input SHAPE (e.g. --input 1x256), one per input")
    try:
        shapes = [parse_shape(s) for s in args.input]
        model = build_model(load_object(args.model), args.model)
    except CliError as e:
        raise TuneError(str(e)) from None
    gen = torch.Generator().manual_seed(args.seed)
    inputs = tuple(torch.randn(s, generator=gen, dtype=torch.float32) for s in shapes)
    graph = import_model(model, inputs)
    return graph.module, graph.weights, [x.numpy() for x in inputs]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tg-tune", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="path/to/file.py:factory, package.module:attr, or an aten/tg-level .mlir file")
    ap.add_argument("--input", action="append", default=[], metavar="SHAPE", help="a model spec's float32 input shape (repeat per input)")
    ap.add_argument("--input-file", action="append", default=[], metavar="X.npy", help="a .mlir module's inputs in order (default: random)")
    ap.add_argument("--weights", help="a .mlir module's safetensors file (default: its tg.weights_file beside it)")
    ap.add_argument("--tolerance", type=float, default=1e-5,
                    help="max error (relative to the largest reference magnitude) of an eligible path (default 1e-5)")
    ap.add_argument("--all", action="store_true", help="measure every path again (default: only those not recorded)")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop measuring after this long (resume by running again)")
    ap.add_argument("--threads", type=int, default=1, help="threads of the parallel kernels (records are per thread count)")
    ap.add_argument("--db", default=None, help="the timing database file (default: TG_TUNING_DB, else the user cache)")
    ap.add_argument("--target", default=None, metavar="NAME", help="the machine to compile for (default: this CPU)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random example inputs")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        import tensor_graphs as tg
        from tensor_graphs.tuning.database import TuningDatabaseError

        if args.threads < 1:
            raise TuneError(f"--threads must be at least 1, got {args.threads}")
        if not args.tolerance >= 0:
            raise TuneError(f"--tolerance must be a non-negative number, got {args.tolerance}")
        tg.set_num_threads(args.threads)
        module, weights, inputs = _load(args, np.random.default_rng(args.seed))
        try:
            report = tg.tune_module(module, weights, inputs, tolerance=args.tolerance, tune="all" if args.all else "missing",
                                    tuning_db=args.db, max_seconds=args.max_seconds, target=args.target,
                                    progress=not args.no_progress)
        except TuningDatabaseError as e:
            raise TuneError(str(e)) from None
    except TuneError as e:
        print(f"tg-tune: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tg-tune: interrupted; the paths measured so far are recorded (run again to go on)", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a user's model: one line, never a traceback
        if os.environ.get("TG_TRACEBACK"):
            raise
        print(f"tg-tune: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    print(report.format(all_kernels=False))
    left = f"; {report.unmeasured} left: run again to go on" if report.unmeasured else ""
    print(f"tg-tune: {report.measured} path(s) measured in {report.seconds:.1f} s{left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
