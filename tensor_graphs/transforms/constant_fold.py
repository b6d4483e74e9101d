"""`constant-fold`: an op whose operands are all `tg.constant` becomes a `tg.constant`.

Two kinds of op fold:

- a tg op: its value comes from the NumPy reference interpreter (`transforms/evaluate.py`), so
  folding is exactly as correct as the reference;
- an aten op (operands all constants, or none at all: ``aten.arange``, ``aten.full``): its value
  comes from ``transforms/evaluate_aten.evaluate_aten_op``; ops it does not know (it raises
  ``NotImplementedError``) stay. This is what removes the mask-building ops (arange, comparisons,
  triu, bitwise ops, ...) before buffers exist.

`tg.weight` is never folded: weights are bound at run time. Results larger than
``max_elements`` stay unfolded so the IR does not balloon (the default lets a 1024x1024 causal
mask, or a 4096x4096 one, fold); results are written with one ``tobytes`` (``dense_from_numpy``),
so a million-element mask folds in milliseconds. Constants left without users by a fold are
erased with it.

    tg-opt model.mlir -p constant-fold{max_elements=4096}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
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
from tensor_graphs.dialects.tensor import ConstantOp, WeightOp, YieldOp
from tensor_graphs.transforms.dce import erase_dead_producers
from tensor_graphs.transforms.evaluate import EVALUATORS, array_to_dense, dense_to_array, evaluate_op

AtenEvaluator = Callable[[Operation, list[np.ndarray]], list[np.ndarray]]


def _aten_evaluator() -> AtenEvaluator | None:
    """``evaluate_aten_op`` when the frontend provides it (imported lazily), else None."""
    try:
        from tensor_graphs.transforms.evaluate_aten import evaluate_aten_op
    except ImportError:
        return None
    return evaluate_aten_op


def _fits(op: Operation, max_elements: int) -> bool:
    return all(
        isinstance(r.type, TensorType) and numel(r.type.get_shape()) <= max_elements for r in op.results
    )


@dataclass
class FoldConstantOperands(RewritePattern):
    """Evaluates an op whose operands are all constants and replaces it with the result.

    %a = tg.constant dense<2.0> : tensor<2xf32>
    %b = tg.constant dense<3.0> : tensor<2xf32>
    %c = tg.mul %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    =>
    %c = tg.constant dense<6.0> : tensor<2xf32>

    %r = aten.arange {end = 4.0 : f64} : () -> tensor<4xi64>
    =>
    %r = tg.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
    """

    max_elements: int
    aten: AtenEvaluator | None

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        is_aten = op.name.startswith("aten.")
        if is_aten:
            if self.aten is None or not op.results:
                return
        elif isinstance(op, ConstantOp | WeightOp | YieldOp) or type(op) not in EVALUATORS or not op.operands:
            return
        if not all(isinstance(v.owner, ConstantOp) for v in op.operands) or not _fits(op, self.max_elements):
            return
        operands = [dense_to_array(v.owner.value) for v in op.operands]  # type: ignore[attr-defined]
        if is_aten:
            try:
                folded: Sequence[np.ndarray] = self.aten(op, operands)  # type: ignore[misc]
            except NotImplementedError:
                return
        else:
            folded = [evaluate_op(op, operands)]
        if len(folded) != len(op.results):
            return
        constants = [ConstantOp(array_to_dense(np.asarray(a), r.type)) for a, r in zip(folded, op.results)]  # type: ignore[arg-type]
        for c, r in zip(constants, op.results):
            c.result.name_hint = r.name_hint
        operand_values = list(op.operands)
        rewriter.replace(op, constants, [c.result for c in constants])
        erase_dead_producers(operand_values, rewriter)


@dataclass(frozen=True)
class ConstantFoldPass(ModulePass):
    """Replaces every tg or aten op computed only from constants by its value (up to ``max_elements``)."""

    name = "constant-fold"

    max_elements: int = 1 << 24

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = FoldConstantOperands(self.max_elements, _aten_evaluator())
        PatternRewriteWalker(GreedyRewritePatternApplier([pattern], dce_enabled=False)).rewrite_module(op)
