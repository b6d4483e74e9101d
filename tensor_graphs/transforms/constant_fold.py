"""`constant-fold`: a tg op whose operands are all `tg.constant` becomes a `tg.constant`.

The value comes from the NumPy reference interpreter (`transforms/evaluate.py`), so folding is
exactly as correct as the reference. `tg.weight` is never folded: weights are bound at run time.
Results larger than ``max_elements`` stay unfolded so the IR does not balloon. Constants left
without users by a fold are erased with it.

    tg-opt model.mlir -p constant-fold{max_elements=4096}
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.tensor import ConstantOp, WeightOp
from tensor_graphs.transforms.dce import erase_dead_producers
from tensor_graphs.transforms.evaluate import EVALUATORS, array_to_dense, constant_array, evaluate_op


@dataclass
class FoldConstantOperands(RewritePattern):
    """Evaluates an op whose operands are all constants and replaces it with the result.

    %a = tg.constant dense<2.0> : tensor<2xf32>
    %b = tg.constant dense<3.0> : tensor<2xf32>
    %c = tg.mul %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    =>
    %c = tg.constant dense<6.0> : tensor<2xf32>
    """

    max_elements: int

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, ConstantOp | WeightOp) or type(op) not in EVALUATORS:
            return
        if not op.operands or len(op.results) != 1:
            return
        result_type = op.results[0].type
        if not isinstance(result_type, TensorType) or numel(result_type.get_shape()) > self.max_elements:
            return
        operands = [constant_array(v) for v in op.operands]
        if any(a is None for a in operands):
            return
        folded = evaluate_op(op, operands)  # type: ignore[arg-type]
        operand_values = list(op.operands)
        rewriter.replace(op, ConstantOp(array_to_dense(folded, result_type)))
        erase_dead_producers(operand_values, rewriter)


@dataclass(frozen=True)
class ConstantFoldPass(ModulePass):
    """Replaces every tg op computed only from constants by its value (up to ``max_elements``)."""

    name = "constant-fold"

    max_elements: int = 1 << 20

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FoldConstantOperands(self.max_elements)], dce_enabled=False)
        ).rewrite_module(op)
