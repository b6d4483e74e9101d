"""Emitters of the elementwise `buf` kernels: `add/sub/mul/div/binary`, `relu/unary`,
`bias_activation`, `select`, `cast` and `fused_elementwise`. Importing this module registers
them into :data:`kernels.REGISTRY` (``convert_buffer_to_llvm`` imports it).

Each op is ONE strided loop nest over the output (`kernels.emit_elementwise`, rows split among
the threads when large), with stride 0 on broadcast dims: contiguous dims collapse, so the
common case is one flat loop that LLVM vectorises, and an input that does not vary along the
inner loops is loaded outside them. Scalar math comes from `scalar.py` (vectorisable
polynomials, no libm calls for exp/tanh/erf/log). Splat IR constants become immediates. An
input may be the output itself (same bytes): these kernels run in place. A `cast` to the
element type it already has is a copy (`kernels_movement`).
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import AnyFloat, IntegerType, f32, f64, i1
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import (
    REGISTRY,
    SYMBOLIC_KERNELS,
    KernelContext,
    LoweringError,
    _element,
    _require_float,
    _require_same_element,
    _scalar_errors,
    check_no_overlap,
    emit_elementwise,
)
from tensor_graphs.codegen.llvm.kernels_movement import _emit_copy
from tensor_graphs.codegen.llvm.loops import FunctionBuilder
from tensor_graphs.codegen.llvm.scalar import INT_UNARY, emit_arith_body, emit_binary, emit_convert, emit_unary, select
from tensor_graphs.dialects import buffer as buf

_BINARY: dict[type[Operation], str] = {buf.AddOp: "add", buf.SubOp: "sub", buf.MulOp: "mul", buf.DivOp: "div"}


def _emit_binary(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.ElementwiseBinaryKernel)
    el = _require_same_element(op, [*op.inputs, op.output])
    fn = op.fn.data if isinstance(op, buf.BinaryOp) else _BINARY[type(op)]
    if not isinstance(el, AnyFloat | IntegerType) or el == i1 and fn not in ("mul", "add", "max", "min"):
        raise LoweringError(f"{op.name}: no codegen for {el} elements")
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    with _scalar_errors(op):
        emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: emit_binary(b, fn, v[0], v[1]))


def _emit_unary(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.UnaryOp | buf.ReluOp)
    el = _require_same_element(op, [*op.inputs, op.output])
    fn = op.fn.data if isinstance(op, buf.UnaryOp) else "relu"
    if isinstance(el, IntegerType) and fn not in INT_UNARY:
        raise LoweringError(f"{op.name}: '{fn}' has no codegen for {el} elements ({', '.join(INT_UNARY)} do)")
    if not isinstance(el, IntegerType) and el not in (f32, f64):
        raise LoweringError(f"{op.name}: '{fn}' is emitted for f32 and f64, got {el}")
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    with _scalar_errors(op):
        emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: emit_unary(b, fn, v[0]))


def _emit_bias_activation(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.BiasActivationOp)
    _require_float(op, [*op.inputs, op.output])
    act = op.activation.data
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    with _scalar_errors(op):
        emit_elementwise(
            ctx, op.output, list(op.inputs), lambda b, v: emit_unary(b, act, b.add(llvm.FAddOp(v[0], v[1])))
        )


def _emit_select(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.SelectOp)
    cond, a, c = op.inputs
    if _element(cond) != i1:
        raise LoweringError(f"{op.name}: the condition must be an i1 buffer, got {cond.type}")
    _require_same_element(op, [a, c, op.output])
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: select(b, v[0], v[1], v[2]))


def _emit_cast(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.CastOp)
    to = _element(op.output)
    if to == _element(op.inputs[0]):
        _emit_copy(ctx, op)  # type: ignore[arg-type]
        return
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    with _scalar_errors(op):
        emit_elementwise(ctx, op.output, list(op.inputs), lambda b, v: emit_convert(b, v[0], to))


def _emit_fused_elementwise(ctx: KernelContext, op: Operation) -> None:
    assert isinstance(op, buf.FusedElementwiseOp)
    block = op.body.block
    for k, (arg, v) in enumerate(zip(block.args, op.inputs)):
        if arg.type != _element(v):
            raise LoweringError(f"{op.name}: body argument {k} is {arg.type}, input {k} holds {_element(v)}")
    check_no_overlap(ctx, op, op.output, op.inputs, in_place_ok=True)
    el = _element(op.output)

    def body(b: FunctionBuilder, vals: list[SSAValue]) -> SSAValue:
        result = emit_arith_body(b, block, vals)
        if result.type != el:
            raise LoweringError(f"{op.name}: the body yields {result.type}, the output holds {el}")
        return result

    with _scalar_errors(op):
        emit_elementwise(ctx, op.output, list(op.inputs), body)


REGISTRY[buf.AddOp] = _emit_binary
REGISTRY[buf.SubOp] = _emit_binary
REGISTRY[buf.MulOp] = _emit_binary
REGISTRY[buf.DivOp] = _emit_binary
REGISTRY[buf.BinaryOp] = _emit_binary
REGISTRY[buf.ReluOp] = _emit_unary
REGISTRY[buf.UnaryOp] = _emit_unary
REGISTRY[buf.BiasActivationOp] = _emit_bias_activation
REGISTRY[buf.SelectOp] = _emit_select
REGISTRY[buf.CastOp] = _emit_cast
REGISTRY[buf.FusedElementwiseOp] = _emit_fused_elementwise

# one nest over the output (`emit_elementwise`): its outermost rows may be counted at run time
SYMBOLIC_KERNELS.update((buf.AddOp, buf.SubOp, buf.MulOp, buf.DivOp, buf.BinaryOp, buf.ReluOp, buf.UnaryOp,
                         buf.BiasActivationOp, buf.SelectOp, buf.FusedElementwiseOp))
