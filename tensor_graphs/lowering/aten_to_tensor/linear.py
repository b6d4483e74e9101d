"""aten → tg: linear algebra (linear, mm, matmul, bmm, addmm), lowered primitively.

Transposes stay explicit ``tg.transpose`` ops and biases explicit ``tg.add`` ops here; the
``absorb-blas-flags`` and fusion passes fold them into ``tg.matmul`` later.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import AddOp, MatmulOp, MulOp, TransposeOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import OpList, element_type, notify_match_failure, scalar_constant


class LinearPattern(RewritePattern):
    """``y = x @ w^T + b`` as transpose + matmul + add.

    ```mlir
    %y = aten.linear %x, %w, %b : (tensor<2x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<2x6xf32>
    // becomes
    %wt = tg.transpose %w {perm = array<i64: 1, 0>} : (tensor<6x8xf32>) -> tensor<8x6xf32>
    %mm = tg.matmul %x, %wt : (tensor<2x8xf32>, tensor<8x6xf32>) -> tensor<2x6xf32>
    %y = tg.add %mm, %b : (tensor<2x6xf32>, tensor<6xf32>) -> tensor<2x6xf32>
    ```
    A rank-1 ``x`` is reshaped to ``1xK`` and back.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.LinearOp, rewriter: PatternRewriter) -> None:
        x_shape, w_shape = shape_of(op.input), shape_of(op.weight)
        if len(w_shape) != 2 or len(x_shape) == 0:
            return notify_match_failure(op, f"expected a rank-2 weight and rank >= 1 input, got {list(w_shape)} and {list(x_shape)}")
        ops = OpList()
        x = ops.reshape(op.input, (1, x_shape[0])) if len(x_shape) == 1 else op.input
        wt = ops.add(TransposeOp(op.weight, (1, 0)))
        y = ops.add(MatmulOp(x, wt))
        y = ops.reshape(y, (*x_shape[:-1], w_shape[0]))
        if op.bias is not None:
            y = ops.add(AddOp(y, op.bias, op.result.type))
        rewriter.replace(op, ops, [y])


class MmPattern(RewritePattern):
    """``aten.mm`` (rank 2) and ``aten.bmm`` (rank 3) are plain ``tg.matmul``.

    ```mlir
    %y = aten.bmm %a, %b : (tensor<4x2x3xf32>, tensor<4x3x5xf32>) -> tensor<4x2x5xf32>
    // becomes
    %y = tg.matmul %a, %b : (tensor<4x2x3xf32>, tensor<4x3x5xf32>) -> tensor<4x2x5xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, (aten.MmOp, aten.BmmOp)):
            rewriter.replace(op, MatmulOp(op.self, op.mat2, result_type=op.result.type))


class MatmulPattern(RewritePattern):
    """``torch.matmul``: rank-1 operands become matrices (``1xK`` / ``Kx1``) and the extra dim is dropped.

    ```mlir
    %y = aten.matmul %v, %m : (tensor<3xf32>, tensor<2x3x5xf32>) -> tensor<2x5xf32>
    // becomes
    %v2 = tg.reshape %v : (tensor<3xf32>) -> tensor<1x3xf32>
    %p = tg.matmul %v2, %m : (tensor<1x3xf32>, tensor<2x3x5xf32>) -> tensor<2x1x5xf32>
    %y = tg.reshape %p : (tensor<2x1x5xf32>) -> tensor<2x5xf32>
    ```
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: aten.MatmulOp, rewriter: PatternRewriter) -> None:
        a_shape, b_shape = shape_of(op.self), shape_of(op.other)
        if not a_shape or not b_shape:
            return notify_match_failure(op, "expected operands of rank >= 1")
        ops = OpList()
        a = ops.reshape(op.self, (1, a_shape[0])) if len(a_shape) == 1 else op.self
        b = ops.reshape(op.other, (b_shape[0], 1)) if len(b_shape) == 1 else op.other
        y = ops.add(MatmulOp(a, b))
        y = ops.reshape(y, shape_of(op.result))
        rewriter.replace(op, ops, [y])


class AddmmPattern(RewritePattern):
    """``addmm`` and ``baddbmm``: ``beta * self + alpha * (mat1 @ mat2)`` (batched for ``baddbmm``);
    the scalings appear only when not 1 (``beta = 0`` drops ``self``).

    ```mlir
    %y = aten.addmm %b, %x, %w {alpha = 2.0 : f64} : (tensor<4xf32>, tensor<5x6xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
    // becomes
    %mm = tg.matmul %x, %w : (tensor<5x6xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
    %c = tg.constant dense<2.0> : tensor<f32>
    %s = tg.mul %mm, %c : (tensor<5x4xf32>, tensor<f32>) -> tensor<5x4xf32>
    %y = tg.add %s, %b : (tensor<5x4xf32>, tensor<4xf32>) -> tensor<5x4xf32>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, aten.AddmmOp):
            a, b = op.mat1, op.mat2
        elif isinstance(op, aten.BaddbmmOp):  # BLOOM's ALiBi: beta * alibi + alpha * (q @ k)
            a, b = op.batch1, op.batch2
        else:
            return
        alpha, beta = op.alpha.value.data, op.beta.value.data
        el = element_type(op.result)  # the scalings in the result's type (integer GEMMs: integers)
        ops = OpList()
        y = ops.add(MatmulOp(a, b))
        if alpha != 1.0:
            y = ops.add(MulOp(y, ops.add(scalar_constant(alpha, el))))
        if beta != 0.0:
            acc = op.self
            if beta != 1.0:
                acc = ops.add(MulOp(acc, ops.add(scalar_constant(beta, el))))
            y = ops.add(AddOp(y, acc, op.result.type))
        rewriter.replace(op, ops, [y])


def populate_linear_patterns() -> list[RewritePattern]:
    return [LinearPattern(), MmPattern(), MatmulPattern(), AddmmPattern()]
