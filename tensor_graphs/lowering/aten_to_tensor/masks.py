"""aten → tg: the mask builders (arange, full, ones, diff, ...).

These have no tg lowering yet: they compute constants (causal masks, position ids), and
``constant-fold`` evaluates them with PyTorch before this pass runs (comparisons and boolean
logic on run-time data have a lowering of their own, ``comparisons.py``; so have ``cumsum``,
``reductions.py``, and tensor indexing, ``take.py``). One that is still
here was computed from something that is not a constant, which tensor_graphs does not support
for these ops yet. The pattern records why, and the pass reports it with
every other op left over; the frontend finds the same ops before any pass runs
(:func:`run_time_mask_builders`) and lists them in its one error with every other unsupported
construct, with their place in the model. The exceptions are the ops whose value depends on
their operand's shape only (``zeros_like``, ``new_ones``, ...): they become a splat ``tg.constant``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from tensor_graphs.dialects import aten
from tensor_graphs.dialects.tensor import BroadcastOp, ConstantOp, IotaOp, WeightOp, shape_of
from tensor_graphs.lowering.aten_to_tensor.common import constant, element_type, notify_match_failure

#: ops whose value is one number everywhere, whatever their operand holds -> that number (None: fill_value)
SHAPE_ONLY: dict[type[aten.AtenOp], float | None] = {
    aten.OnesLikeOp: 1,
    aten.ZerosLikeOp: 0,
    aten.FullLikeOp: None,
    aten.NewOnesOp: 1,
    aten.NewZerosOp: 0,
    aten.NewFullOp: None,
    aten.EmptyLikeOp: 0,  # any value is empty_like's; zeros make the graph deterministic
}

#: ops that only constant-fold removes -> what they are, for the message that says they met run-time data
FOLD_ONLY: dict[type[aten.AtenOp], str] = {
    aten.ArangeOp: "a tensor creation",
    aten.ArangeStartOp: "a tensor creation",
    aten.ArangeStartStepOp: "a tensor creation",
    aten.FullOp: "a tensor creation",
    aten.OnesOp: "a tensor creation",
    aten.ZerosOp: "a tensor creation",
    aten.ScalarTensorOp: "a tensor creation",
}

#: what to do about a mask builder that meets run-time data
RUN_TIME_MASK_FIX = (
    "make the mask a constant (built from shapes, torch.arange or a buffer), build it from what runs on "
    "run-time data (comparisons, &, |, ~, torch.where, arithmetic), or compute it outside the model and "
    "pass it in"
)


def describe_source(value: SSAValue) -> str:
    """Where a run-time value comes from, in the user's terms: an input, a weight, an op."""
    if isinstance(value, BlockArgument):
        return f"the model input '{value.name_hint}'" if value.name_hint else "a model input"
    owner = value.owner
    if isinstance(owner, WeightOp):
        return f"the weight '{owner.weight_name.data}'"
    if isinstance(owner, aten.UnsupportedOp):
        return f"the result of the unsupported {owner.properties['target'].data}"  # type: ignore[attr-defined]
    return f"the result of {owner.name}" + (f" (%{value.name_hint})" if value.name_hint else "")


def run_time_mask_problem(op: Operation, operand: int) -> str:
    """Why the mask builder ``op`` cannot be compiled: its operand ``operand`` is computed at run time."""
    what = FOLD_ONLY.get(type(op), "a mask-building op")  # type: ignore[arg-type]
    return (
        f"{what} on values computed at run time (operand {operand} is {describe_source(op.operands[operand])}): "
        "tensor_graphs evaluates this op only while compiling (to build constant masks such as a causal "
        "mask); on run-time data it is not supported yet"
    )


def run_time_mask_builders(body: Block) -> list[tuple[Operation, int]]:
    """The mask builders in ``body`` (a function body) that will meet run-time data, with the
    index of such an operand: what `FoldOnlyPattern` will report after ``constant-fold``.

    A value is known while compiling when it is a constant, the splat of a shape-only op, or
    computed from known values only; function arguments and weights are not. A mask builder
    that only feeds ``aten.unsupported`` ops (``torch.cond``'s predicate) is left to them.
    """
    run_time: set[SSAValue] = set(body.args)
    found: list[tuple[Operation, int]] = []
    for op in body.ops:
        if isinstance(op, WeightOp):
            run_time.update(op.results)
            continue
        if isinstance(op, ConstantOp) or type(op) in SHAPE_ONLY:
            continue
        late = [i for i, v in enumerate(op.operands) if v in run_time]
        if late:
            run_time.update(op.results)
            if type(op) in FOLD_ONLY:
                found.append((op, late[0]))
    # users come after their producers: decide the last ones first
    left_to_unsupported: set[Operation] = set()
    for op, _ in reversed(found):
        users = [use.operation for r in op.results for use in r.uses]
        if users and all(isinstance(u, aten.UnsupportedOp) or u in left_to_unsupported for u in users):
            left_to_unsupported.add(op)
    return [(op, i) for op, i in found if op not in left_to_unsupported]


class FoldOnlyPattern(RewritePattern):
    """Never rewrites: records why a mask builder is still here.

    ```mlir
    %m = aten.arange {end = 8 : i64} : () -> tensor<8xi64>
    // stays when constant-fold did not run first, and the pass reports
    //   aten.arange: only constant-fold removes this op; run constant-fold before convert-aten-to-tensor
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if type(op) not in FOLD_ONLY:
            return
        for i, v in enumerate(op.operands):
            if not isinstance(v.owner, ConstantOp):
                return notify_match_failure(op, f"{run_time_mask_problem(op, i)}; {RUN_TIME_MASK_FIX}")
        notify_match_failure(op, "only constant-fold removes this op; run constant-fold before convert-aten-to-tensor")


class SymbolicArangePattern(RewritePattern):
    """``arange`` up to a symbolic size (its result's length is an expression of the size
    symbols, which constant-fold leaves alone): a ``tg.iota`` counting at run time.

    ```mlir
    %p = aten.arange.start {start = 0.0 : f64, end = -9.2e18 : f64} : () -> tensor<?xi64, ["seq"]>
    // becomes
    %p = tg.iota {start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : tensor<?xi64, ["seq"]>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (aten.ArangeOp, aten.ArangeStartOp, aten.ArangeStartStepOp)):
            return
        if DYNAMIC_INDEX not in op.result.type.get_shape():
            return
        start = _scalar(op.start) if not isinstance(op, aten.ArangeOp) else 0.0
        step = _scalar(op.step) if isinstance(op, aten.ArangeStartStepOp) else 1.0
        if start is None or step is None:
            return notify_match_failure(op, "an arange up to a symbolic size takes a constant start and step")
        rewriter.replace(op, IotaOp(start, step, op.result.type))


def _scalar(attr) -> float | None:
    """A Scalar property's number (None: not a number)."""
    value = getattr(getattr(attr, "value", None), "data", None)
    return float(value) if isinstance(value, (int, float)) else None


#: tensor creations of one number everywhere -> that number (None: fill_value); constant-fold
#: evaluates them, except at a symbolic size (`ShapeOnlyPattern`)
SYMBOLIC_FILLS: dict[type[aten.AtenOp], float | None] = {aten.OnesOp: 1, aten.ZerosOp: 0, aten.FullOp: None}


class ShapeOnlyPattern(RewritePattern):
    """``zeros_like``, ``ones_like``, ``full_like``, ``new_zeros``, ``new_ones``, ``new_full``: a
    splat constant; at a symbolic size (and ``ones``, ``zeros``, ``full`` there: `torch.ones(x.shape)`),
    a rank-0 constant broadcast to it.

    ```mlir
    %z = aten.zeros_like %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    // becomes
    %z = tg.constant dense<0.000000e+00> : tensor<2x3xf32>

    %m = aten.ones {size = array<i64: 1, -9223372036854775808>, dtype = "int64"} : tensor<1x?xi64, ["seq"]>
    // becomes
    %c = tg.constant dense<1> : tensor<i64>
    %m = tg.broadcast %c : (tensor<i64>) -> tensor<1x?xi64, ["seq"]>
    ```
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, aten.AtenOp) or len(op.results) != 1:
            return
        symbolic = DYNAMIC_INDEX in op.results[0].type.get_shape()  # type: ignore[attr-defined]
        fills = SHAPE_ONLY if not symbolic else {**SHAPE_ONLY, **SYMBOLIC_FILLS}
        if type(op) not in fills:
            return
        value = fills[type(op)]
        if value is None:
            value = op.fill_value.value.data
        if not symbolic:
            rewriter.replace(op, constant(value, shape_of(op.result), element_type(op.result)))
            return
        scalar = constant(value, (), element_type(op.result))
        rewriter.replace(op, [scalar, BroadcastOp(scalar.result, shape_of(op.result))])


def populate_mask_patterns() -> list[RewritePattern]:
    return [ShapeOnlyPattern(), SymbolicArangePattern(), FoldOnlyPattern()]
