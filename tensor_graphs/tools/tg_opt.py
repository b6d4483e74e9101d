"""`tg-opt`: mlir-opt for tensor_graphs modules.

    tg-opt model.mlir -p convert-aten-to-tensor,canonicalize
    tg-opt model.mlir --pass-pipeline='builtin.module(convert-aten-to-tensor,canonicalize)'
    tg-opt model.mlir -p convert-buffer-to-llvm -t llvm      # print LLVM IR
    tg-opt --list-ops                                        # every ATen op: lowered, decomposed or unsupported

Bad input of any kind (a missing or unreadable file, text that is not UTF-8 or not MLIR, an
unknown op, pass or option, IR that does not verify, a pass that rejects the module) prints ONE
line, ``file:line:col: error: ...`` where there is a position, and exits with status 1; no
Python traceback (``TG_TRACEBACK=1`` shows one for an internal error).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain

from tensor_graphs.codegen.llvm.jit import CodegenError
from tensor_graphs.context import DIALECTS
from tensor_graphs.diagnostics import IRError, parse_module, verify_module
from tensor_graphs.passes import PASSES

_PIPELINE_RE = re.compile(r"^builtin\.module\((.*)\)$", re.S)


def translate_pass_pipeline(argv: Sequence[str]) -> list[str]:
    """Rewrite MLIR's ``--pass-pipeline='builtin.module(a,b)'`` into xDSL's ``-p a,b``."""
    out: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--pass-pipeline":
            arg = "--pass-pipeline=" + next(it, "")
        if arg.startswith("--pass-pipeline="):
            spec = arg.split("=", 1)[1].strip().strip("'\"")
            m = _PIPELINE_RE.match(spec)
            if m is None:
                raise SystemExit(
                    f"tg-opt: --pass-pipeline expects 'builtin.module(pass1,pass2,...)', got '{spec}'"
                )
            out += ["-p", m.group(1)]
        else:
            out.append(arg)
    return out


@dataclass(frozen=True)
class LLVMIRTarget(Target):
    """``-t llvm``: the module (already at the llvm dialect level) printed as LLVM IR."""

    name = "llvm"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from tensor_graphs.codegen.llvm.jit import to_llvm_ir

        print(to_llvm_ir(module), file=output)


@dataclass(frozen=True)
class TritonTarget(Target):
    """``-t triton``: the Triton kernels of a module lowered by `convert-tensor-to-triton` (their
    Python source), then its launch plan as comments."""

    name = "triton"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from tensor_graphs.codegen.triton.convert_tensor_to_triton import program_text
        from tensor_graphs.codegen.triton.expressions import TritonCodegenError

        try:
            output.write(program_text(module))
        except TritonCodegenError as e:
            raise CodegenError(f"-t triton: {e}") from None


class TgOptMain(xDSLOptMain):
    """xDSL's opt driver with tensor_graphs' dialects, passes and ``-t llvm``, reading any file
    as MLIR text with source locations (`diagnostics.parse_module`) and verifying SSA dominance
    too (`diagnostics.verify_module`) before the first pass and after each one."""

    #: the pass running now (named by an unexpected failure)
    current_pass: str | None = None

    def register_all_dialects(self) -> None:
        for name, factory in DIALECTS.items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        for name, factory in PASSES.items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets["llvm"] = lambda: LLVMIRTarget
        self.available_targets["triton"] = lambda: TritonTarget

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        # every input is MLIR text, whatever its file name ends with
        return parse_module(
            chunk.read(), self.get_input_name(), self.ctx, implicit_module=not self.args.no_implicit_module, line_offset=start_offset
        )

    def setup_pipeline(self) -> None:
        super().setup_pipeline()
        #: verify before the first pass and after each (ours: xDSL's checks plus dominance, located)
        self.verify = not self.args.disable_verify
        self.args.disable_verify = True  # xDSL's callback still times and prints; it verifies no more
        xdsl_callback = self.pipeline.callback

        def callback(previous, module: ModuleOp, following) -> None:
            if self.verify and previous is not None:
                verify_module(module, after=previous.name)
            if xdsl_callback is not None:
                xdsl_callback(previous, module, following)
            self.current_pass = following.name if following is not None else None

        self.pipeline = dataclasses.replace(self.pipeline, callback=callback)

    def apply_passes(self, module: ModuleOp) -> None:
        if self.verify:
            verify_module(module)
        super().apply_passes(module)
        self.current_pass = None

    def run(self) -> None:
        """Each input chunk (``--split-input-file``): parse, run the passes, print. With
        ``--verify-diagnostics`` (or ``--parsing-diagnostics``) an error is printed as one line to
        stdout, and the next chunk runs; otherwise it propagates (``main`` prints it and exits 1)."""
        chunks, file_extension = self.prepare_input()
        output = self.prepare_output()
        diagnose = self.args.verify_diagnostics or self.args.parsing_diagnostics
        try:
            for i, (chunk, offset) in enumerate(chunks):
                try:
                    if i > 0:
                        output.write("// -----\n")
                    module = self.parse_chunk(chunk, file_extension, offset)
                    if module is not None:
                        self.apply_passes(module)
                        output.write(self.output_resulting_program(module))
                    output.flush()
                except DiagnosticException as e:
                    if not diagnose:
                        raise
                    print(diagnostic(e))
                finally:
                    chunk.close()
        finally:
            if output is not sys.stdout:
                output.close()


def diagnostic(e: BaseException) -> str:
    """What to print for a diagnostic: an `IRError` is one ``file:line:col: error: ...`` line; a
    pass's own error keeps its text (one line, or a list of every op it could not handle),
    without the module xDSL attaches to it as a note."""
    text = str(e).strip()
    return text if isinstance(e, IRError) else "error: " + text


def _pipeline_error(e: BaseException, spec: str | None) -> str:
    """An unusable ``-p`` as one line: which pass is unknown (with the nearest names), which
    option a pass does not have or cannot take (with the options it has)."""
    from xdsl.passes import get_pass_option_infos
    from xdsl.utils.arg_spec import ArgSpec, parse_pipeline

    text = " ".join(str(e).split())
    try:
        specs = list(parse_pipeline(spec or ""))
    except ArgSpecParseError as bad:
        return f"error: cannot parse the pass pipeline '{spec}': {' '.join(str(bad).split())}"
    for pass_spec in specs:
        if pass_spec.name not in PASSES:
            close = difflib.get_close_matches(pass_spec.name, PASSES, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            return f"error: unknown pass '{pass_spec.name}'{hint}; the passes are: {', '.join(PASSES)}"
        cls = PASSES[pass_spec.name]()
        options = {o.name: o for o in get_pass_option_infos(cls) if o.name != "name"}
        listed = ", ".join(f"{n.replace('_', '-')}: {o.expected_type.strip(chr(39))}" for n, o in options.items()) or "none"
        for name, value in pass_spec.normalize_parameter_names().parameters.items():
            if name not in options:
                return f"error: pass '{pass_spec.name}' has no option '{name.replace('_', '-')}' (its options: {listed})"
            try:
                cls.from_spec(ArgSpec(pass_spec.name, {name: value}))
            except (ValueError, TypeError):
                given = ",".join(str(v) for v in value) or "nothing"
                return (
                    f"error: option '{name.replace('_', '-')}' of pass '{pass_spec.name}' takes "
                    f"{options[name].expected_type.strip(chr(39))}, got '{given}'"
                )
    return f"error: bad pass pipeline '{spec}': {text}"


def _main(argv: Sequence[str]) -> int:
    if "--list-ops" in argv:  # the op registry (`frontend.decompositions`): which ATen ops are lowered, decomposed, unsupported
        from tensor_graphs.frontend.decompositions import format_routes

        print(format_routes())
        return 0
    try:
        args = translate_pass_pipeline(argv)
    except SystemExit as e:
        print(e.code, file=sys.stderr)
        return 1
    spec = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-p", "--passes")), None)
    try:
        tool = TgOptMain(description="tensor_graphs modular optimizer driver", args=args)
    except (ValueError, TypeError, ArgSpecParseError) as e:  # the pipeline: unknown pass, bad option
        print(f"tg-opt: {_pipeline_error(e, spec)}", file=sys.stderr)
        return 1
    try:
        tool.run()
    except (IRError, DiagnosticException, CodegenError) as e:
        # bad input, or a pass or the LLVM target rejected the module: one clear line
        print(diagnostic(e) if isinstance(e, IRError) else f"tg-opt: {diagnostic(e)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of the output went away (| head): nothing to say
        return 1
    except OSError as e:
        print(f"tg-opt: error: cannot read {e.filename or 'the input'}: {e.strerror}", file=sys.stderr)
        return 1
    except RecursionError:
        where = f" in pass '{tool.current_pass}'" if tool.current_pass else ""
        print(f"tg-opt: error: the module is nested too deeply{where} (Python's recursion limit)", file=sys.stderr)
        return 1
    except Exception as e:  # a defect of tensor_graphs, not of the input: still one line
        if os.environ.get("TG_TRACEBACK"):
            raise
        where = f" in pass '{tool.current_pass}'" if tool.current_pass else ""
        message = " ".join(str(e).split())
        print(
            f"tg-opt: internal error{where}: {type(e).__name__}: {message} "
            "(a bug in tensor_graphs: please report it with the input; TG_TRACEBACK=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    raise SystemExit(_main(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
