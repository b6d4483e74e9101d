"""`constant-fold`: an op whose operands are all `tg.constant` becomes a `tg.constant`.

Two kinds of op fold:

- a tg op: its value comes from the NumPy reference interpreter (`transforms/evaluate.py`), so
  folding is exactly as correct as the reference;
- an aten op (operands all constants, or none at all: ``aten.arange``, ``aten.full``): its value
  comes from ``transforms/evaluate_aten.evaluate_aten_op``; ops it does not know (it raises
  ``NotImplementedError``) stay. This is what removes the mask-building ops (arange, comparisons,
  triu, bitwise ops, ...) before buffers exist.

  A value of an element type without a NumPy equivalent (bf16: a constant cannot hold it) is
  not folded alone: an op reading it folds with it, the aten ops computing it from constants
  evaluated in torch on the way (Falcon's ALiBi bias: slopes cast to bf16, times the positions,
  cast back to f32, becomes one f32 constant)::

      %s = aten.to.dtype %slopes {dtype = "bfloat16"} : (tensor<4x1xf32>) -> tensor<4x1xbf16>
      %m = aten.mul.Tensor %s, %positions : (tensor<4x1xbf16>, tensor<1x1x7xi64>) -> tensor<1x4x7xbf16>
      %f = aten.to.dtype %m {dtype = "float32"} : (tensor<1x4x7xbf16>) -> tensor<1x4x7xf32>
      =>
      %f = tg.constant dense<...> : tensor<1x4x7xf32>

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
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tensor_graphs.dialects.dense import numpy_dtype_of
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


def _numpy_less(value: SSAValue) -> bool:
    """``value``'s element type has no NumPy equivalent (bf16): no constant can hold it."""
    try:
        numpy_dtype_of(value.type.element_type)  # type: ignore[attr-defined]
    except TypeError:
        return True
    return False


def _torch_cone(value: SSAValue, max_elements: int, memo: dict) -> object | None:
    """``value`` as a torch tensor, computed from constants by aten ops in torch, when it has no
    NumPy equivalent (bf16) and its producers all are constants or such ops; else None."""
    if value in memo:
        return memo[value]
    op = value.owner
    result = None
    if isinstance(op, Operation) and op.name.startswith("aten.") and _numpy_less(value) and _fits(op, max_elements):
        from tensor_graphs.transforms.evaluate_aten import evaluate_aten_tensors

        operands = []
        for v in op.operands:
            operand = (dense_to_array(v.owner.value)  # type: ignore[attr-defined]
                       if isinstance(v.owner, ConstantOp) else _torch_cone(v, max_elements, memo))
            if operand is None:
                break
            operands.append(operand)
        else:
            try:
                result = evaluate_aten_tensors(op, operands)[list(op.results).index(value)]
            except NotImplementedError:
                result = None
    memo[value] = result
    return result


def _erase_unused_cone(memo: dict, rewriter: PatternRewriter) -> None:
    """Erase the ops of a fold's torch-evaluated cone (`_torch_cone`) that nothing uses any more
    (aten ops are not known to be free of effects, so `erase_dead_producers` leaves them)."""
    ops = {v.owner for v, t in memo.items() if t is not None}
    changed = True
    while changed:
        changed = False
        for cone_op in list(ops):
            if cone_op.parent is not None and all(not r.uses for r in cone_op.results):
                producers = list(cone_op.operands)
                rewriter.erase_op(cone_op)
                ops.discard(cone_op)
                erase_dead_producers(producers, rewriter)
                changed = True


def _fits(op: Operation, max_elements: int) -> bool:
    """Every result a static tensor of at most ``max_elements`` (a symbolic size is not a constant)."""
    return all(
        isinstance(r.type, TensorType) and DYNAMIC_INDEX not in r.type.get_shape()
        and numel(r.type.get_shape()) <= max_elements for r in op.results
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
        if not _fits(op, self.max_elements) or any(_numpy_less(r) for r in op.results):
            return  # (a bf16 result folds with the op that reads it: the module doc)
        operands: list = []
        memo: dict = {}
        for v in op.operands:
            if isinstance(v.owner, ConstantOp):
                operands.append(dense_to_array(v.owner.value))  # type: ignore[attr-defined]
            elif is_aten and self.aten is not None and (t := _torch_cone(v, self.max_elements, memo)) is not None:
                operands.append(t)
            else:
                return
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
        _erase_unused_cone(memo, rewriter)
        erase_dead_producers(operand_values, rewriter)


@dataclass(frozen=True)
class ConstantFoldPass(ModulePass):
    """Replaces every tg or aten op computed only from constants by its value (up to ``max_elements``)."""

    name = "constant-fold"

    max_elements: int = 1 << 24

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = FoldConstantOperands(self.max_elements, _aten_evaluator())
        PatternRewriteWalker(GreedyRewritePatternApplier([pattern], dce_enabled=False)).rewrite_module(op)
