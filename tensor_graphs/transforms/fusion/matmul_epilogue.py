"""`fuse-matmul-epilogue`: bias and activation after a GEMM run as its output is written.

``tg.matmul`` computes ``activation(alpha * op(a) @ op(b) + beta * acc)``; the bias is the
accumulator (``beta = 1``), so bias and activation cost no extra sweep over memory. Two patterns:

1. ``FuseActivationIntoMatmul`` — an activation (a key of ``functions.ACTIVATIONS``: relu, gelu,
   gelu_tanh, silu, sigmoid, tanh) of a matmul result that has no other live user and no
   activation yet::

       %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32} : (...) -> tensor<2x8xf32>
       %g = tg.gelu %y {approximate = "tanh"} : tensor<2x8xf32>
       =>
       %g = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "gelu_tanh"} : (...) -> tensor<2x8xf32>

   An activation whose only live user is an elementwise op it would be fused with (same shape:
   `fuse-elementwise`'s group) stays where it is, for that op's loop: there it costs nothing
   either, and a GEMM the GPU path hands to the vendor library (cuBLAS applies no activation)
   would need a sweep over its output for it. A SwiGLU's gate (``silu(x @ Wg) * (x @ Wu)``)::

       %g = tg.matmul %x, %wg {transpose_b = true} : (...) -> tensor<40x32xf32>
       %s = tg.silu %g : tensor<40x32xf32>
       %u = tg.matmul %x, %wu {transpose_b = true} : (...) -> tensor<40x32xf32>
       %m = tg.mul %s, %u : (...) -> tensor<40x32xf32>          (unchanged: silu and mul one loop)

   A reshape between the product and the activation (GPT-2's ``addmm -> view -> gelu``) is
   looked through: an elementwise function commutes with a reshape::

       %y = tg.matmul %x, %w, %b ... -> tensor<7x3072xf32>
       %v = tg.reshape %y : (tensor<7x3072xf32>) -> tensor<1x7x3072xf32>
       %g = tg.gelu %v {approximate = "tanh"} : tensor<1x7x3072xf32>
       =>
       %m = tg.matmul %x, %w, %b {..., activation = "gelu_tanh"} ... -> tensor<7x3072xf32>
       %g = tg.reshape %m : (tensor<7x3072xf32>) -> tensor<1x7x3072xf32>

2. ``FuseBiasActivationIntoMatmul`` — ``tg.bias_activation(matmul, bias)`` of an accumulator-free
   matmul with no other live user, when the bias broadcasts to the product::

       %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
       %r = tg.bias_activation %y, %b {activation = "relu"} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
       =>
       %r = tg.matmul %x, %w, %b {beta = 1.0 : f32, activation = "relu"} : (...) -> tensor<2x8xf32>

Run it after `fuse-bias-activation` and `absorb-blas-flags` (which move the bias add into ``acc``).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects.functions import ACTIVATIONS
from tensor_graphs.dialects.shapes import is_broadcastable_to
from tensor_graphs.dialects.tensor import (
    BiasActivationOp,
    ElementwiseUnaryOp,
    GeluOp,
    MatmulOp,
    ReshapeOp,
    shape_of,
)
from tensor_graphs.transforms.dce import erase_with_dead_users, live_uses, only_live_user_is
from tensor_graphs.transforms.fusion.elementwise import fusable


def _with_epilogue(mm: MatmulOp, activation: str, acc: SSAValue | None = None, beta: float | None = None) -> MatmulOp:
    transpose_a, transpose_b, alpha, mm_beta = mm.flags
    return MatmulOp(
        mm.lhs,
        mm.rhs,
        acc if acc is not None else mm.acc,
        transpose_a=transpose_a,
        transpose_b=transpose_b,
        alpha=alpha,
        beta=beta if beta is not None else mm_beta,
        activation=activation,
        result_type=mm.result.type,
    )


def _feeds_an_elementwise_loop(activation: Operation) -> bool:
    """The activation's only live user is an elementwise op that `fuse-elementwise` would put
    it in the same loop with (the group's condition: fusable, the same shape)."""
    uses = live_uses(activation.results[0])
    if len(uses) != 1:
        return False
    user = uses[0].operation
    return (fusable(user) and user.parent is activation.parent
            and shape_of(user.results[0]) == shape_of(activation.results[0]))


def _fusable_product(value: SSAValue, user: Operation) -> MatmulOp | None:
    mm = value.owner
    if not isinstance(mm, MatmulOp) or mm.activation.data != "none" or not only_live_user_is(mm.result, user):
        return None
    return mm


class FuseActivationIntoMatmul(RewritePattern):
    """An activation of a matmul result becomes the matmul's ``activation`` (see the module doc)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, ElementwiseUnaryOp | GeluOp) or op.fn not in ACTIVATIONS or op.fn == "none":
            return
        if _feeds_an_elementwise_loop(op):
            return
        source = op.input.owner
        reshape = source if isinstance(source, ReshapeOp) and only_live_user_is(source.result, op) else None
        mm = _fusable_product(reshape.input if reshape else op.input, reshape or op)
        if mm is None:
            return
        if reshape is None and op.result.type != mm.result.type:
            return
        fused = _with_epilogue(mm, op.fn)
        if reshape is None:
            fused.result.name_hint = op.result.name_hint or mm.result.name_hint
            rewriter.replace(op, fused)
        else:
            new_shape = ReshapeOp(fused.result, shape_of(op.result))
            new_shape.result.name_hint = op.result.name_hint
            rewriter.replace(op, [fused, new_shape], [new_shape.result])
            erase_with_dead_users(reshape, rewriter)
        erase_with_dead_users(mm, rewriter)


class FuseBiasActivationIntoMatmul(RewritePattern):
    """``bias_activation(matmul, bias)`` becomes ``matmul(acc = bias, beta = 1, activation)``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: BiasActivationOp, rewriter: PatternRewriter) -> None:
        mm = _fusable_product(op.input, op)
        if mm is None or mm.acc is not None or op.result.type != mm.result.type:
            return
        bias = op.bias
        if bias.type.element_type != mm.result.type.element_type or not is_broadcastable_to(shape_of(bias), shape_of(mm.result)):  # type: ignore[attr-defined]
            return
        fused = _with_epilogue(mm, op.activation.data, acc=bias, beta=1.0)
        fused.result.name_hint = op.result.name_hint or mm.result.name_hint
        rewriter.replace(op, fused)
        erase_with_dead_users(mm, rewriter)


@dataclass(frozen=True)
class FuseMatmulEpiloguePass(ModulePass):
    """Moves activations and bias_activation after a tg.matmul into its epilogue."""

    name = "fuse-matmul-epilogue"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [FuseActivationIntoMatmul(), FuseBiasActivationIntoMatmul()], dce_enabled=False
            )
        ).rewrite_module(op)
