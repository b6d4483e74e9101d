"""Kernel paths: the registry of `buf` kernels that can run each `tg` op.

An op may run by more than one path (a fused kernel or its decomposition, BLAS or an emitted
loop, ...). `convert-tensor-to-buffer` never hard-wires the choice: it asks this registry.
Each :class:`KernelVariant` says whether it applies to a given op (and why not) and how to
build the `buf` op that computes it into a given output buffer. Today
:func:`select_kernel` takes the first variant that applies; a tuner can instead enumerate
:func:`applicable_kernels`, time each, and pass its pick as ``choose``.

```python
register_kernel(tg.ReluOp, KernelVariant("relu.loop", build=lambda op, ins, out: buf.ReluOp(ins, [out])))
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import Float32Type, TensorType, UnregisteredOp
from xdsl.ir import Operation, SSAValue

from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects import tensor as tg

#: ``applies(op)``: ``None`` when the variant can run ``op``, else the reason it cannot.
Applies = Callable[[Operation], "str | None"]
#: ``build(op, inputs, output)``: the `buf` kernel op computing ``op`` from ``inputs`` (the
#: buffers of ``op``'s operands, in operand order) into ``output``. Not inserted anywhere.
Build = Callable[[Operation, Sequence[SSAValue], SSAValue], buf.KernelOp]


def _always(op: Operation) -> str | None:
    return None


@dataclass(frozen=True)
class KernelVariant:
    """One way to run a `tg` op as a `buf` kernel call."""

    name: str
    build: Build
    applies: Applies = field(default=_always)
    description: str = ""


def op_name(op: Operation) -> str:
    """The op's name as written, also for ops parsed with ``--allow-unregistered-dialect``."""
    return op.op_name.data if isinstance(op, UnregisteredOp) else op.name


class NoKernelError(ValueError):
    """No registered kernel variant can run an op; the message lists every variant's reason."""


#: tg op class -> its kernel variants, in order of preference.
KERNELS: dict[type[Operation], list[KernelVariant]] = {}


def register_kernel(op_cls: type[Operation], variant: KernelVariant, *, prefer: bool = False) -> KernelVariant:
    """Add ``variant`` for ``op_cls`` (last, or first with ``prefer=True``); replaces one of the same name."""
    variants = [v for v in KERNELS.get(op_cls, []) if v.name != variant.name]
    if prefer:
        variants.insert(0, variant)
    else:
        variants.append(variant)
    KERNELS[op_cls] = variants
    return variant


def variants_for(op: Operation) -> list[KernelVariant]:
    """Every registered variant for ``op``'s class (applicable or not)."""
    return list(KERNELS.get(type(op), []))


def applicable_kernels(op: Operation) -> list[KernelVariant]:
    """The variants that can run ``op``, in order of preference (what a tuner enumerates)."""
    return [v for v in variants_for(op) if v.applies(op) is None]


def select_kernel(op: Operation, choose: Callable[[Operation, list[KernelVariant]], KernelVariant] | None = None) -> KernelVariant:
    """The variant that runs ``op``: the first applicable one, or ``choose(op, applicable)``.

    Raises :class:`NoKernelError` naming the op and each variant's reason when none applies.
    """
    variants = variants_for(op)
    if not variants:
        raise NoKernelError(
            f"no buf kernel is registered for '{op_name(op)}' "
            "(register one with tensor_graphs.lowering.tensor_to_buffer.kernels.register_kernel)"
        )
    reasons = [(v, v.applies(op)) for v in variants]
    ok = [v for v, why in reasons if why is None]
    if not ok:
        why = "; ".join(f"{v.name}: {r}" for v, r in reasons)
        raise NoKernelError(f"no buf kernel can run this '{op_name(op)}': {why}")
    return choose(op, ok) if choose is not None else ok[0]


# --------------------------------------------------------------------------- the built-in paths


def _all_f32(op: Operation) -> str | None:
    for v in (*op.operands, *op.results):
        el = v.type.element_type if isinstance(v.type, TensorType) else None
        if not isinstance(el, Float32Type):
            return f"cblas_sgemm needs f32 operands, got {v.type}"
    return None


def _matmul(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
    assert isinstance(op, tg.MatmulOp)
    props = {k: op.properties[k] for k in ("transpose_a", "transpose_b", "alpha", "beta")}
    return buf.MatmulOp(ins, [out], props)


def _same_props(kernel: type[buf.KernelOp], *names: str) -> Build:
    def build(op: Operation, ins: Sequence[SSAValue], out: SSAValue) -> buf.KernelOp:
        return kernel(ins, [out], {n: op.properties[n] for n in names if n in op.properties})

    return build


register_kernel(tg.MatmulOp, KernelVariant("matmul.blas", _matmul, _all_f32, "one cblas_sgemm per batch"))
for _tg_op, _buf_op in (
    (tg.AddOp, buf.AddOp),
    (tg.SubOp, buf.SubOp),
    (tg.MulOp, buf.MulOp),
    (tg.DivOp, buf.DivOp),
    (tg.ReluOp, buf.ReluOp),
):
    register_kernel(_tg_op, KernelVariant(f"{_buf_op.name.removeprefix('buf.')}.loop", _same_props(_buf_op)))
register_kernel(tg.TransposeOp, KernelVariant("transpose.loop", _same_props(buf.TransposeOp, "perm")))
register_kernel(
    tg.BiasActivationOp,
    KernelVariant("bias_activation.loop", _same_props(buf.BiasActivationOp, "activation"), description="one sweep"),
)
