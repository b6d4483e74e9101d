"""`tg-opt`: mlir-opt for tensor_graphs modules.

    tg-opt model.mlir -p convert-aten-to-tensor,canonicalize
    tg-opt model.mlir --pass-pipeline='builtin.module(convert-aten-to-tensor,canonicalize)'
    tg-opt model.mlir -p convert-buffer-to-llvm -t llvm      # print LLVM IR
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain

from tensor_graphs.context import DIALECTS
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


class TgOptMain(xDSLOptMain):
    def register_all_dialects(self) -> None:
        for name, factory in DIALECTS.items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        for name, factory in PASSES.items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets["llvm"] = lambda: LLVMIRTarget


def main(argv: Sequence[str] | None = None) -> None:
    from xdsl.utils.exceptions import DiagnosticException

    from tensor_graphs.codegen.llvm.jit import CodegenError

    args = translate_pass_pipeline(sys.argv[1:] if argv is None else argv)
    try:
        TgOptMain(description="tensor_graphs modular optimizer driver", args=args).run()
    except (DiagnosticException, CodegenError) as e:
        # a pass or the LLVM target rejected the module: one clear message, no traceback
        print(f"tg-opt: error: {e}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
