"""The kernel paths of a `tg`-level graph: per op, the variants that could run it.

`convert-tensor-to-buffer` asks the kernel registry (`lowering.tensor_to_buffer.kernels`) which
variant runs each op: the first that applies, unless the op pins one with the discardable
attribute ``tg.kernel`` (`kernels.KERNEL_ATTR`), which a tuner writes and `tg-opt` replays::

    %y = tg.matmul %x, %w {tg.kernel = "matmul.blas"} : (...) -> tensor<128x2304xf32>

`kernel_paths` lists, for every op that has a choice to make, the variant chosen today, every
variant that applies and why each other one does not: what a tuner enumerates and measures
(issue 14; the target-dependent parameters, such as a GEMM's K block ``tg.k_block``, and the
tg-level alternatives are not enumerated yet).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation

from tensor_graphs.lowering.tensor_to_buffer.kernels import KERNEL_ATTR, NoKernelError, op_name, select_kernel, variants_for


@dataclass(frozen=True)
class OpPaths:
    """The choice one op offers: ``chosen`` (what `select_kernel` takes now: the pinned variant
    or the first that applies), every variant that ``applicable`` runs it, and the others with
    the reason they cannot (``rejected``)."""

    op: Operation
    chosen: str
    applicable: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return op_name(self.op)


def kernel_paths(module: ModuleOp, *, pack_weights: bool = True, choices_only: bool = True) -> Iterator[OpPaths]:
    """The kernel paths of every `tg` op of ``module`` with registered variants, in program
    order; with ``choices_only``, only the ops with two applicable variants or more. Variants
    that read a weight packed at load time are left out without ``pack_weights``."""
    for op in module.walk():
        variants = [v for v in variants_for(op) if pack_weights or not getattr(v, "packs_weights", False)]
        if not variants:
            continue
        reasons = [(v.name, v.applies(op)) for v in variants]
        applicable = tuple(name for name, why in reasons if why is None)
        if choices_only and len(applicable) < 2:
            continue
        try:
            chosen = select_kernel(op, pack_weights=pack_weights).name
        except NoKernelError:
            chosen = ""
        yield OpPaths(op, chosen, applicable, tuple((name, why) for name, why in reasons if why is not None))


def pin(op: Operation, variant: str) -> None:
    """Make ``op`` run by ``variant`` (``tg.kernel``); checked when the graph is lowered."""
    op.attributes[KERNEL_ATTR] = StringAttr(variant)
