"""`absorb-blas-flags`: fold the ops around a `tg.matmul` into its cblas_sgemm flags.

``tg.matmul`` computes ``alpha * op(a) @ op(b) + beta * acc``; a GEMM applies the transposes, the
scale and the accumulation for free. This pass moves them into the flags:

- a transpose of the last two dims feeding ``a``/``b`` toggles ``transpose_a``/``transpose_b``;
- a multiply/divide of ``a``/``b`` by a scalar constant scales ``alpha``;
- a multiply/divide of the product by a scalar constant scales ``alpha`` (and ``beta``);
- an add/sub of a broadcastable tensor to an accumulator-free product becomes ``acc``.

Producers that lose their last user (the transpose, the scaling mul) are left for `dce`; "no other
user" means no other *live* user, so dead ops left by earlier rewrites do not block a rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, f32, f64
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tensor_graphs.dialects.shapes import is_broadcastable_to
from tensor_graphs.dialects.tensor import (
    AddOp,
    DivOp,
    MatmulOp,
    MulOp,
    SubOp,
    TransposeOp,
    shape_of,
)
from tensor_graphs.transforms.dce import erase_with_dead_users, only_live_user_is
from tensor_graphs.transforms.fusion.common import scalar_scale


def _rebuild(
    mm: MatmulOp,
    lhs: SSAValue | None = None,
    rhs: SSAValue | None = None,
    acc: SSAValue | None = None,
    **flags: float | bool,
) -> MatmulOp:
    """A copy of ``mm`` with the given operands and flags changed."""
    transpose_a, transpose_b, alpha, beta = mm.flags
    current = dict(transpose_a=transpose_a, transpose_b=transpose_b, alpha=alpha, beta=beta)
    current.update(flags)
    return MatmulOp(
        lhs if lhs is not None else mm.lhs,
        rhs if rhs is not None else mm.rhs,
        acc if acc is not None else mm.acc,
        result_type=mm.result.type,
        **current,  # type: ignore[arg-type]
    )


def _swaps_last_two(op: TransposeOp) -> bool:
    """True for perm ``[0, ..., n-3, n-1, n-2]``: batch dims stay, the matrix is transposed."""
    n = len(op.permutation)
    return n >= 2 and op.permutation == (*range(n - 2), n - 1, n - 2)


def _scale_of(value: SSAValue) -> tuple[SSAValue, float] | None:
    """``(x, c)`` when ``value`` is ``x * c``, ``c * x`` or ``x / c`` (see fusion.common.scalar_scale)."""
    scaled = scalar_scale(value)
    return None if scaled is None else scaled[:2]


def _holds_scale(mm: MatmulOp, *scales: float) -> bool:
    """Whether ``mm``'s flags (f32 attributes) hold ``scales`` exactly for its dtype: any value for
    a float32 product, a float64 product's only where float32 holds them, none for integers
    (an integer product keeps its multiplications where torch does them)."""
    el = mm.result.type.element_type  # type: ignore[attr-defined]
    if el == f32:
        return True
    return el == f64 and all(float(np.float32(c)) == c for c in scales)


class AbsorbTransposeIntoFlags(RewritePattern):
    """A transpose of the last two dims of a matmul operand becomes its transpose flag.

    %t = tg.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
    %y = tg.matmul %x, %t : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    =>
    %y = tg.matmul %x, %w {transpose_b = true} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MatmulOp, rewriter: PatternRewriter) -> None:
        transpose_a, transpose_b, _, _ = op.flags
        lhs, rhs = op.lhs.owner, op.rhs.owner
        if isinstance(lhs, TransposeOp) and _swaps_last_two(lhs):
            rewriter.replace(op, _rebuild(op, lhs=lhs.input, transpose_a=not transpose_a))
        elif isinstance(rhs, TransposeOp) and _swaps_last_two(rhs):
            rewriter.replace(op, _rebuild(op, rhs=rhs.input, transpose_b=not transpose_b))


class AbsorbOperandScaleIntoAlpha(RewritePattern):
    """A matmul operand scaled by a scalar constant scales ``alpha`` instead.

    %c = tg.constant dense<0.5> : tensor<f32>
    %s = tg.mul %x, %c : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %y = tg.matmul %s, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    =>
    %y = tg.matmul %x, %w {alpha = 0.5 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MatmulOp, rewriter: PatternRewriter) -> None:
        alpha = op.flags[2]
        if (scaled := _scale_of(op.lhs)) is not None and _holds_scale(op, alpha * scaled[1]):
            x, c = scaled
            rewriter.replace(op, _rebuild(op, lhs=x, alpha=alpha * c))
        elif (scaled := _scale_of(op.rhs)) is not None and _holds_scale(op, alpha * scaled[1]):
            x, c = scaled
            rewriter.replace(op, _rebuild(op, rhs=x, alpha=alpha * c))


class AbsorbResultScaleIntoAlpha(RewritePattern):
    """A matmul result (used only here) scaled by a scalar constant scales ``alpha`` and ``beta``.

    %y = tg.matmul %x, %w, %b {beta = 1.0 : f32} : (...) -> tensor<2x8xf32>
    %s = tg.mul %y, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>      // %c = 0.5
    =>
    %s = tg.matmul %x, %w, %b {alpha = 0.5 : f32, beta = 0.5 : f32} : (...) -> tensor<2x8xf32>
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MulOp | DivOp, rewriter: PatternRewriter) -> None:
        scaled = _scale_of(op.result)
        if scaled is None:
            return
        product, c = scaled
        mm = product.owner
        if not isinstance(mm, MatmulOp) or not only_live_user_is(mm.result, op):
            return
        _, _, alpha, beta = mm.flags
        if not _holds_scale(mm, alpha * c, beta * c):
            return
        rewriter.replace(op, _rebuild(mm, alpha=alpha * c, beta=beta * c if mm.acc is not None else beta))
        erase_with_dead_users(mm, rewriter)


class AbsorbAddIntoAccumulator(RewritePattern):
    """``product + X`` (either order) or ``product - X`` becomes the matmul's accumulator, when the
    matmul has no accumulator, no other user, and ``X`` broadcasts to its result.
    ``X - product`` becomes an accumulator too, with ``alpha`` negated.

    %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    %z = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    =>
    %z = tg.matmul %x, %w, %b {beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AddOp | SubOp, rewriter: PatternRewriter) -> None:
        is_sub = isinstance(op, SubOp)
        # (product, other, alpha sign, beta)
        candidates = [(op.lhs, op.rhs, 1.0, -1.0 if is_sub else 1.0), (op.rhs, op.lhs, -1.0 if is_sub else 1.0, 1.0)]
        for product, other, alpha_sign, beta in candidates:
            mm = product.owner
            if not isinstance(mm, MatmulOp) or mm.acc is not None or other is product:
                continue
            if not only_live_user_is(mm.result, op):
                continue
            if op.result.type != mm.result.type or not is_broadcastable_to(shape_of(other), shape_of(mm.result)):
                continue
            if other.type.element_type != mm.result.type.element_type:  # type: ignore[attr-defined]
                continue
            rewriter.replace(op, _rebuild(mm, acc=other, alpha=mm.flags[2] * alpha_sign, beta=beta))
            erase_with_dead_users(mm, rewriter)
            return


@dataclass(frozen=True)
class AbsorbBlasFlagsPass(ModulePass):
    """Moves transposes, scalar scales and additions around tg.matmul into its GEMM flags."""

    name = "absorb-blas-flags"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [
                    AbsorbTransposeIntoFlags(),
                    AbsorbOperandScaleIntoAlpha(),
                    AbsorbResultScaleIntoAlpha(),
                    AbsorbAddIntoAccumulator(),
                ],
                dce_enabled=False,
            )
        ).rewrite_module(op)
