"""`dce`: erase ops without side effects whose results nobody uses.

Liveness runs to a fixpoint (a chain of dead pure ops goes in one run). An op counts as free of
side effects when it declares so (the `Pure` trait: every tg op, including `tg.weight`); ops
with unknown effects, terminators and symbols (``func.func``) always stay.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, OpResult, SSAValue, Use
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.transforms.dead_code_elimination import region_dce, would_be_trivially_dead


@dataclass(frozen=True)
class DeadCodeEliminationPass(ModulePass):
    """Removes unused side-effect-free ops until none is left."""

    name = "dce"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        region_dce(op.body)


# --------------------------------------------------------------------------- helpers for patterns
#
# Rewrites leave dead ops behind for this pass (greedy drivers run with DCE off). A pattern that
# asks "is this value used only here?" must not count those dead users, or the order of passes
# would decide what fuses; these helpers look through them.


def is_dead(op: Operation) -> bool:
    """``op`` has no side effects and every user of its results is dead too."""
    return would_be_trivially_dead(op) and all(
        is_dead(use.operation) for result in op.results for use in result.uses
    )


def live_uses(value: SSAValue) -> list[Use]:
    """The uses of ``value`` by ops that are not dead."""
    return [use for use in value.uses if not is_dead(use.operation)]


def only_live_user_is(value: SSAValue, user: Operation) -> bool:
    """``user`` uses ``value`` and no other live op does (dead users left by rewrites do not count)."""
    return any(use.operation is user for use in value.uses) and all(
        use.operation is user for use in live_uses(value)
    )


def erase_with_dead_users(op: Operation, rewriter: PatternRewriter) -> None:
    """Erase ``op`` after the dead ops that still use it (the caller has replaced its live uses).

    A live user left behind is a bug in the caller: ``rewriter.erase`` then raises instead of
    leaving the IR broken.
    """
    for result in op.results:
        for use in list(result.uses):
            user = use.operation
            if user.parent is not None and is_dead(user):
                erase_with_dead_users(user, rewriter)
    rewriter.erase(op)


def erase_dead_producers(values: Iterable[SSAValue], rewriter: PatternRewriter) -> None:
    """Erase the producers of ``values`` that a rewrite has just left dead, and theirs in turn.

    For passes that clean up after themselves (`canonicalize`, `constant-fold`); unrelated dead
    ops elsewhere in the function stay for `dce`.
    """
    work = [v.owner for v in values if isinstance(v, OpResult)]
    while work:
        op = work.pop()
        if op.parent is None or not is_dead(op):
            continue
        work.extend(v.owner for v in op.operands if isinstance(v, OpResult))
        erase_with_dead_users(op, rewriter)
