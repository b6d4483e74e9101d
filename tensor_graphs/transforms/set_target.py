"""`set-target`: record the machine a module is compiled for (its ``tg.target`` attribute).

Every pass below the tg level shapes its output for the module's target (`tensor_graphs.target`):
`convert-tensor-to-buffer` packs weights in panels as wide as the target's GEMM tile,
`convert-buffer-to-llvm` emits vectors of its width, the JIT hands LLVM its CPU and features.
A module that records no target gets the default (``TG_TARGET``, else this CPU) from the first
pass that needs one; this pass names it instead, so that a pipeline (and a lit test) gives the
same IR on any machine::

    tg-opt model.mlir -p set-target{target=x86-64-v3},convert-tensor-to-buffer,plan-memory

```mlir
builtin.module { ... }
// becomes
builtin.module attributes {tg.target = {name = "x86-64-v3", cpu = "x86-64-v3", level = "x86-64-v3", ...}} { ... }
```

Printing IR for a target needs no such CPU; running its code does (the JIT refuses otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.target import TargetError, record, resolve


@dataclass(frozen=True)
class SetTargetPass(ModulePass):
    """Record ``target`` (an ISA level, a CPU name or ``host``; empty: ``TG_TARGET``, else the
    host) as the module's ``tg.target``."""

    name = "set-target"

    target: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        try:
            record(op, resolve(self.target or None))
        except TargetError as e:
            raise PassFailedException(f"{self.name}: {e}") from None
