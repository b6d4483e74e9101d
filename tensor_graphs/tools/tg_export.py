"""`tg-export`: a PyTorch model → aten-level ``model.mlir`` + ``model.safetensors``.

    tg-export path/to/model.py:make_model --input 1x256 -o model.mlir
    tg-export my_package.models:MLP --input 4x8 --input 4x16
    tg-export bert.py:layer --input 1xseqx768 --dim seq=1:512    # a dynamic size (torch.export.Dim)

The spec names a callable returning an ``nn.Module`` (a factory or a class, called without
arguments) or an ``nn.Module`` instance. Each ``--input`` is one float32 input of that shape,
filled with random numbers (only the shapes matter for export). A dim written as a name is
dynamic: ``--dim NAME=MIN:MAX[:EXAMPLE]`` gives its range (and the example's size, default
``max(MIN, 2)``: torch.export treats sizes 0 and 1 as special); the module keeps the symbol.

Bad input (a spec that does not name a model, a model that torch.export cannot export) prints
ONE line and exits with status 1; unsupported ops are listed all at once, one per line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path


class CliError(Exception):
    """A user error: printed as one line, exit code 1."""


def parse_shape(text: str) -> tuple[int | str, ...]:
    """``"1x256"`` -> ``(1, 256)``; ``"1xseqx768"`` -> ``(1, "seq", 768)`` (a dynamic dim, by the
    name of its ``--dim``); ``"scalar"`` or ``""`` -> ``()``."""
    if text in ("", "scalar"):
        return ()
    dims: list[int | str] = []
    for d in text.split("x"):
        if d.isidentifier():
            dims.append(d)
            continue
        try:
            dims.append(int(d))
        except ValueError:
            raise CliError(f"--input '{text}' is not a shape like 1x256 (or 1xseqx256 with --dim seq=1:512)") from None
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise CliError(f"--input '{text}' has a negative dim")
    return tuple(dims)


def parse_dims(texts: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """``["seq=1:512"]`` -> ``{"seq": (1, 512, 2)}``: each dynamic size's range and example size."""
    out: dict[str, tuple[int, int, int]] = {}
    for text in texts:
        name, sep, rest = text.partition("=")
        parts = rest.split(":")
        try:
            lo, hi, *example = (int(p) for p in parts)
        except ValueError:
            lo = hi = -1
            example = []
        if not sep or not name.isidentifier() or len(parts) not in (2, 3) or not 0 <= lo <= hi:
            raise CliError(f"--dim '{text}' should be NAME=MIN:MAX or NAME=MIN:MAX:EXAMPLE with 0 <= MIN <= MAX")
        size = example[0] if example else min(max(lo, 2), hi)
        if not lo <= size <= hi:
            raise CliError(f"--dim '{text}': the example size {size} is outside {lo}..{hi}")
        out[name] = (lo, hi, size)
    return out


def dynamic_spec(shapes: Sequence[tuple[int | str, ...]], dims: dict[str, tuple[int, int, int]]):
    """The example shapes (each named dim at its example size) and torch.export's
    ``dynamic_shapes`` (None when every dim is static); one ``Dim`` per name."""
    import torch

    used = {d for s in shapes for d in s if isinstance(d, str)}
    if missing := sorted(used - set(dims)):
        raise CliError(f"--input names the dynamic dim(s) {', '.join(missing)}: give each a --dim NAME=MIN:MAX")
    if unused := sorted(set(dims) - used):
        raise CliError(f"--dim {', '.join(unused)}: no --input names it")
    objs = {name: torch.export.Dim(name, min=lo, max=hi) for name, (lo, hi, _) in dims.items()}
    examples = [tuple(dims[d][2] if isinstance(d, str) else d for d in s) for s in shapes]
    spec = tuple({i: objs[d] for i, d in enumerate(s) if isinstance(d, str)} or None for s in shapes)
    return examples, spec if used else None


def load_object(spec: str):
    """``path/to/file.py:attr`` or ``package.module:attr`` -> the attribute."""
    source, sep, attr = spec.rpartition(":")
    if not sep or not source or not attr:
        raise CliError(f"model spec '{spec}' should be 'path/to/file.py:factory' or 'package.module:attr'")
    if source.endswith(".py") or "/" in source or "\\" in source:
        path = Path(source)
        if not path.is_file():
            raise CliError(f"model file '{path}' does not exist")
        mod_spec = importlib.util.spec_from_file_location(f"_tg_export_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise CliError(f"cannot load '{path}' as a Python module")
        module = importlib.util.module_from_spec(mod_spec)
        sys.path.insert(0, str(path.resolve().parent))
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:
            raise CliError(f"importing '{path}' failed: {type(e).__name__}: {e}") from None
        finally:
            sys.path.pop(0)
    else:
        try:
            module = importlib.import_module(source)
        except ImportError as e:
            raise CliError(f"cannot import module '{source}': {e}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CliError(f"'{source}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj


def build_model(obj, spec: str):
    import torch

    if isinstance(obj, torch.nn.Module):
        return obj
    if not callable(obj):
        raise CliError(f"'{spec}' is a {type(obj).__name__}, neither an nn.Module nor a callable returning one")
    try:
        model = obj()
    except Exception as e:
        raise CliError(f"calling '{spec}' failed: {type(e).__name__}: {e}") from None
    if not isinstance(model, torch.nn.Module):
        raise CliError(f"'{spec}' returned a {type(model).__name__}, not an nn.Module")
    return model


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tg-export", description="Export a PyTorch model to aten-level MLIR + safetensors.")
    parser.add_argument("model", help="path/to/file.py:factory or package.module:attr")
    parser.add_argument("--input", action="append", default=[], metavar="SHAPE",
                        help="one float32 input shape, e.g. 1x256, or 1xseqx256 with a dynamic dim (repeat per input)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=MIN:MAX",
                        help="the range of a dynamic dim an --input names (NAME=MIN:MAX[:EXAMPLE])")
    parser.add_argument("-o", "--output", type=Path, help="the .mlir file to write (default: <attr>.mlir)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random example inputs")
    args = parser.parse_args(argv)
    try:
        if not args.input:
            raise CliError("give at least one --input SHAPE (e.g. --input 1x256)")
        shapes, spec = dynamic_spec([parse_shape(s) for s in args.input], parse_dims(args.dim))
        obj = load_object(args.model)
        model = build_model(obj, args.model)
        import torch

        from tensor_graphs.frontend import UnsupportedOpsError, export_model

        gen = torch.Generator().manual_seed(args.seed)
        inputs = tuple(torch.randn(s, generator=gen, dtype=torch.float32) for s in shapes)
        out = args.output or Path(args.model.rpartition(":")[2].split(".")[-1] + ".mlir")
        if out.parent != Path("") and not out.parent.is_dir():
            raise CliError(f"output directory '{out.parent}' does not exist")
        try:
            # torch.export prints the partial graph of a model it cannot export to stderr; the
            # one line below says what went wrong
            with contextlib.redirect_stderr(io.StringIO()):
                graph = export_model(model, inputs, out, spec)
        except UnsupportedOpsError as e:  # every unsupported op, one per line
            print(f"tg-export: error: {e}", file=sys.stderr)
            return 1
        except (TypeError, ValueError) as e:
            raise CliError(str(e).splitlines()[0]) from None
        except Exception as e:  # noqa: BLE001 - torch.export's own errors: one line, no traceback
            if os.environ.get("TG_TRACEBACK"):
                raise
            first = next((line for line in str(e).splitlines() if line.strip()), "")
            raise CliError(f"exporting {type(model).__name__} failed: {type(e).__name__}: {first}") from None
    except CliError as e:
        print(f"tg-export: error: {e}", file=sys.stderr)
        return 1
    n_ops = sum(1 for op in graph.module.walk() if op.dialect_name() == "aten")
    n_bytes = sum(a.nbytes for a in graph.weights.values())
    print(f"wrote {out} ({n_ops} aten ops, {len(graph.input_names)} inputs, {graph.num_outputs} outputs)")
    print(f"wrote {out.with_suffix('.safetensors')} ({len(graph.weights)} weights, {n_bytes} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
