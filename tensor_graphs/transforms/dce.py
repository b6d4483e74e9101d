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


#: How many ops `live_uses` looks at before it calls a user live. Dead code left by rewrites is a
#: few ops; a live op's path to the ``func.return`` can be the rest of the model, so an exact
#: answer would cost O(model) per question. Calling a dead user live only blocks a rewrite.
LIVENESS_SEARCH_LIMIT = 64


def is_dead(op: Operation, limit: int | None = None) -> bool:
    """``op`` has no side effects and every user of its results is dead too.

    Iterative depth-first search over the users (no recursion limit on deep graphs), stopping
    at the first user with effects (a ``func.return``). With ``limit``, an op whose users reach
    further than ``limit`` ops counts as live (a conservative answer, for matching).
    """
    seen: set[int] = set()
    stack = [op]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if limit is not None and len(seen) > limit:
            return False
        if not would_be_trivially_dead(current):
            return False
        stack.extend(use.operation for result in current.results for use in result.uses)
    return True


def live_uses(value: SSAValue) -> list[Use]:
    """The uses of ``value`` by ops that are not dead (a user whose dead cone is larger than
    ``LIVENESS_SEARCH_LIMIT`` counts as live: safe, it only keeps a rewrite from matching)."""
    return [use for use in value.uses if not is_dead(use.operation, LIVENESS_SEARCH_LIMIT)]


def only_live_user_is(value: SSAValue, user: Operation) -> bool:
    """``user`` uses ``value`` and no other live op does (dead users left by rewrites do not count)."""
    return any(use.operation is user for use in value.uses) and all(
        use.operation is user for use in live_uses(value)
    )


def erase_with_dead_users(
    op: Operation, rewriter: PatternRewriter, producers: list[Operation] | None = None
) -> None:
    """Erase ``op`` after the dead ops that still use it (the caller has replaced its live uses).

    A live user left behind is a bug in the caller: ``rewriter.erase`` then raises instead of
    leaving the IR broken. ``producers`` (optional) collects the producers of every erased op's
    operands, for callers that go on erasing what became dead.
    """
    for result in op.results:
        for use in list(result.uses):
            user = use.operation
            if user.parent is not None and is_dead(user):
                erase_with_dead_users(user, rewriter, producers)
    if producers is not None:
        producers.extend(v.owner for v in op.operands if isinstance(v, OpResult))
    rewriter.erase(op)


def erase_dead_producers(values: Iterable[SSAValue], rewriter: PatternRewriter) -> None:
    """Erase the producers of ``values`` that a rewrite has just left dead, and theirs in turn
    (including the producers of dead users erased on the way).

    For passes that clean up after themselves (`canonicalize`, `constant-fold`, fusion); unrelated
    dead ops elsewhere in the function stay for `dce`.
    """
    work = [v.owner for v in values if isinstance(v, OpResult)]
    while work:
        op = work.pop()
        if op.parent is None or not is_dead(op, LIVENESS_SEARCH_LIMIT):
            continue
        erase_with_dead_users(op, rewriter, work)
