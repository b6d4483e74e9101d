"""The LAPACK (and BLAS ``trsm``) routines `tg.lapack` / `buf.lapack` call: one table, read by the
tg verifier (result shapes), the evaluator (the routine called through ctypes) and the LLVM
emitter (the same routine called from the graph), so the three cannot disagree.

Every routine works on one matrix problem at a time over the operands' common batch dims (the
dims before each operand's last ``rank``). Its *slots* are the per-problem arrays it writes: one
of them is the op's result (``output``), the others live in the kernel's scratch. A slot listed
in ``copies`` starts as a copy of that operand (LAPACK factors in place). ``args`` is the
LAPACKE (row-major) or CBLAS argument list: ints, `Char` (LAPACK's ``char`` options), `Slot`,
`Operand` (pointers to the current problem's arrays) and `Alpha` (a scalar of the element type).
A LAPACKE routine returns ``info``: ``info`` is then a slot too (an int32 per problem), and a
negative one (an argument LAPACKE rejected) is always an error.

=========  ===================================================  ==================================
routine    operands (per problem)                               slots
=========  ===================================================  ==================================
getrf      a [m, n]                                             lu [m, n], pivots [min(m, n)], info
getrs      lu [n, n], pivots [n] (int32), b [n, k]               x [n, k], info
potrf      a [n, n]                                             l [n, n] (one triangle), info
geqrf      a [m, n]                                             qr [m, n], tau [min(m, n)], info
orgqr      a [m, n], tau [k]                                    q [m, n], info
ormqr      a [r, c], tau [k], c [m, n]                          out [m, n], info
syevd      a [n, n]                                             vectors [n, n], values [n], info
gesdd      a [m, n]                                             u, s [min(m, n)], vt, work, info
sytrf      a [n, n]                                             ld [n, n], pivots [n], info
sytrs      ld [n, n], pivots [n] (int32), b [n, k]               x [n, k], info
trsm       a [r, r], b [m, n]                                   x [m, n]
=========  ===================================================  ==================================

Parameters (``params``): ``trans`` (getrs, ormqr: ``N``/``T``), ``uplo`` (potrf, syevd, sytrf, sytrs: ``U``/``L``),
``jobz`` (syevd ``V``/``N``; gesdd ``A``/``S``/``N``), ``side`` (ormqr ``L``/``R``), and for trsm
``left``, ``upper``, ``transpose``, ``unit`` (0/1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tensor_graphs.dialects.shapes import ShapeError

#: LAPACKE/CBLAS row-major layout and CBLAS's enums (cblas.h)
ROW_MAJOR = 101
CBLAS = {"notrans": 111, "trans": 112, "upper": 121, "lower": 122, "nonunit": 131, "unit": 132, "left": 141, "right": 142}


@dataclass(frozen=True)
class Char:
    """A LAPACK ``char`` option (``'U'``, ``'N'``, ...)."""

    value: str


@dataclass(frozen=True)
class Slot:
    """A pointer to the current problem's slot."""

    name: str


@dataclass(frozen=True)
class Operand:
    """A pointer to the current problem's part of operand ``index``."""

    index: int


@dataclass(frozen=True)
class Alpha:
    """A scalar argument of the element type."""

    value: float


Arg = int | Char | Slot | Operand | Alpha
Dims = Mapping[str, int]
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Routine:
    """One routine: how its per-problem sizes follow from the operands, its slots and its call."""

    #: the per-problem rank of each operand (2: a matrix, 1: a vector)
    ranks: tuple[int, ...]
    #: the operands' per-problem shapes and the params -> named sizes
    dims: Callable[[Sequence[Shape], Mapping[str, object]], dict[str, int]]
    #: slot -> (``"float"`` (the element type) or ``"i32"``, its shape from the sizes)
    slots: Mapping[str, tuple[str, Callable[[Dims], Shape]]]
    #: the call's arguments from the sizes and params
    args: Callable[[Dims, Mapping[str, object]], list[Arg]]
    #: slot -> the operand it starts as a copy of
    copies: Mapping[str, int] = field(default_factory=dict)
    #: LAPACKE (returns info) or CBLAS (returns nothing)
    library: str = "lapacke"
    #: what a positive info means (for the run-time error of a checked call)
    failure: str = ""
    #: why operands of these per-problem shapes do not fit the routine (None: they do)
    invalid: Callable[[Sequence[Shape], Mapping[str, object]], str | None] = lambda shapes, params: None

    def symbol(self, name: str, double: bool) -> str:
        """The exported name in scipy-openblas32 (``scipy_LAPACKE_sgetrf``, ``scipy_cblas_dtrsm``)."""
        prefix = "d" if double else "s"
        return f"scipy_LAPACKE_{prefix}{name}" if self.library == "lapacke" else f"scipy_cblas_{prefix}{name}"

    def all_slots(self) -> dict[str, tuple[str, Callable[[Dims], Shape]]]:
        """The slots, with ``info`` for a LAPACKE routine."""
        extra = {"info": ("i32", lambda d: ())} if self.library == "lapacke" else {}
        return {**self.slots, **extra}


def _ld(n: int) -> int:
    return max(n, 1)


def _mn(shapes: Sequence[Shape], params: Mapping[str, object]) -> dict[str, int]:
    m, n = shapes[0]
    return {"m": m, "n": n, "k": min(m, n)}


def _square(shapes: Sequence[Shape], params: Mapping[str, object]) -> dict[str, int]:
    return {"n": shapes[0][-1]}


def _getrs_dims(shapes: Sequence[Shape], params: Mapping[str, object]) -> dict[str, int]:
    return {"n": shapes[0][-1], "k": shapes[2][-1]}


def _orgqr_dims(shapes: Sequence[Shape], params: Mapping[str, object]) -> dict[str, int]:
    (m, n), (k,) = shapes[0], shapes[1]
    return {"m": m, "n": n, "k": k}


def _ormqr_dims(shapes: Sequence[Shape], params: Mapping[str, object]) -> dict[str, int]:
    (_, c), (k,), (m, n) = shapes
    return {"lda": c, "k": k, "m": m, "n": n}


def _gesdd_dims(shapes: Sequence[Shape], params: Mapping[str, object]) -> dict[str, int]:
    m, n = shapes[0]
    k = min(m, n)
    jobz = params.get("jobz", "S")
    return {"m": m, "n": n, "k": k, "ucols": m if jobz == "A" else (k if jobz == "S" else 0),
            "vtrows": n if jobz == "A" else (k if jobz == "S" else 0)}


def _trsm_dims(shapes: Sequence[Shape], params: Mapping[str, object]) -> dict[str, int]:
    m, n = shapes[1]
    return {"m": m, "n": n, "r": shapes[0][-1]}


def _square_first(shapes: Sequence[Shape], params: Mapping[str, object]) -> str | None:
    return None if shapes[0][0] == shapes[0][1] else f"a square matrix, got {list(shapes[0])}"


def _solve_fits(shapes: Sequence[Shape], params: Mapping[str, object]) -> str | None:
    """A factored [n, n] matrix, its [n] pivots and a right-hand side of n rows."""
    (r, c), (p,), (b, _) = shapes
    return None if r == c == p == b else f"a factored [n, n] matrix, [n] pivots and [n, k] rows, got {[list(x) for x in shapes]}"


def _orgqr_fits(shapes: Sequence[Shape], params: Mapping[str, object]) -> str | None:
    (m, n), (k,) = shapes
    return None if m >= n >= k else f"m >= n >= k (reflectors), got [{m}, {n}] and {k} reflectors"


def _ormqr_fits(shapes: Sequence[Shape], params: Mapping[str, object]) -> str | None:
    (r, c), (k,), (m, n) = shapes
    rows = m if params.get("side", "L") == "L" else n
    return None if r == rows and k <= c and k <= r else f"reflectors [{r}, {c}] with {k} taus do not fit [{m}, {n}] ({params.get('side', 'L')})"


def _trsm_fits(shapes: Sequence[Shape], params: Mapping[str, object]) -> str | None:
    (r, c), (m, n) = shapes
    side = m if params.get("left", 1) else n
    return None if r == c == side else f"a square [{side}, {side}] triangle for [{m}, {n}], got [{r}, {c}]"


def _trsm_args(d: Dims, p: Mapping[str, object]) -> list[Arg]:
    return [ROW_MAJOR, CBLAS["left" if p["left"] else "right"], CBLAS["upper" if p["upper"] else "lower"],
            CBLAS["trans" if p["transpose"] else "notrans"], CBLAS["unit" if p["unit"] else "nonunit"],
            d["m"], d["n"], Alpha(1.0), Operand(0), _ld(d["r"]), Slot("x"), _ld(d["n"])]


ROUTINES: dict[str, Routine] = {
    "getrf": Routine(
        ranks=(2,), dims=_mn,
        slots={"lu": ("float", lambda d: (d["m"], d["n"])), "pivots": ("i32", lambda d: (d["k"],))},
        copies={"lu": 0},
        args=lambda d, p: [ROW_MAJOR, d["m"], d["n"], Slot("lu"), _ld(d["n"]), Slot("pivots")],
        failure="the matrix is singular (a zero pivot in U)"),
    "getrs": Routine(
        ranks=(2, 1, 2), dims=_getrs_dims,
        slots={"x": ("float", lambda d: (d["n"], d["k"]))}, copies={"x": 2},
        args=lambda d, p: [ROW_MAJOR, Char(str(p.get("trans", "N"))), d["n"], d["k"], Operand(0), _ld(d["n"]),
                           Operand(1), Slot("x"), _ld(d["k"])], invalid=_solve_fits),
    "potrf": Routine(
        ranks=(2,), dims=_square,
        slots={"l": ("float", lambda d: (d["n"], d["n"]))}, copies={"l": 0},
        args=lambda d, p: [ROW_MAJOR, Char(str(p.get("uplo", "L"))), d["n"], Slot("l"), _ld(d["n"])],
        failure="the matrix is not positive-definite", invalid=_square_first),
    "geqrf": Routine(
        ranks=(2,), dims=_mn,
        slots={"qr": ("float", lambda d: (d["m"], d["n"])), "tau": ("float", lambda d: (d["k"],))},
        copies={"qr": 0},
        args=lambda d, p: [ROW_MAJOR, d["m"], d["n"], Slot("qr"), _ld(d["n"]), Slot("tau")]),
    "orgqr": Routine(
        ranks=(2, 1), dims=_orgqr_dims,
        slots={"q": ("float", lambda d: (d["m"], d["n"]))}, copies={"q": 0},
        args=lambda d, p: [ROW_MAJOR, d["m"], d["n"], d["k"], Slot("q"), _ld(d["n"]), Operand(1)], invalid=_orgqr_fits),
    "ormqr": Routine(
        ranks=(2, 1, 2), dims=_ormqr_dims,
        slots={"out": ("float", lambda d: (d["m"], d["n"]))}, copies={"out": 2},
        args=lambda d, p: [ROW_MAJOR, Char(str(p.get("side", "L"))), Char(str(p.get("trans", "N"))), d["m"], d["n"], d["k"],
                           Operand(0), _ld(d["lda"]), Operand(1), Slot("out"), _ld(d["n"])], invalid=_ormqr_fits),
    "syevd": Routine(
        ranks=(2,), dims=_square,
        slots={"vectors": ("float", lambda d: (d["n"], d["n"])), "values": ("float", lambda d: (d["n"],))},
        copies={"vectors": 0},
        args=lambda d, p: [ROW_MAJOR, Char(str(p.get("jobz", "V"))), Char(str(p.get("uplo", "L"))), d["n"], Slot("vectors"),
                           _ld(d["n"]), Slot("values")],
        failure="the eigenvalue algorithm failed to converge", invalid=_square_first),
    "gesdd": Routine(
        ranks=(2,), dims=_gesdd_dims,
        slots={"work": ("float", lambda d: (d["m"], d["n"])), "s": ("float", lambda d: (d["k"],)),
               "u": ("float", lambda d: (d["m"], d["ucols"])), "vt": ("float", lambda d: (d["vtrows"], d["n"]))},
        copies={"work": 0},
        args=lambda d, p: [ROW_MAJOR, Char(str(p.get("jobz", "S"))), d["m"], d["n"], Slot("work"), _ld(d["n"]), Slot("s"),
                           Slot("u"), _ld(d["ucols"]), Slot("vt"), _ld(d["n"])],
        failure="the SVD algorithm failed to converge"),
    "sytrf": Routine(
        ranks=(2,), dims=_square,
        slots={"ld": ("float", lambda d: (d["n"], d["n"])), "pivots": ("i32", lambda d: (d["n"],))},
        copies={"ld": 0},
        args=lambda d, p: [ROW_MAJOR, Char(str(p.get("uplo", "L"))), d["n"], Slot("ld"), _ld(d["n"]), Slot("pivots")],
        failure="the matrix is singular (a zero block of D)", invalid=_square_first),
    "sytrs": Routine(
        ranks=(2, 1, 2), dims=_getrs_dims,
        slots={"x": ("float", lambda d: (d["n"], d["k"]))}, copies={"x": 2},
        args=lambda d, p: [ROW_MAJOR, Char(str(p.get("uplo", "L"))), d["n"], d["k"], Operand(0), _ld(d["n"]),
                           Operand(1), Slot("x"), _ld(d["k"])], invalid=_solve_fits),
    "trsm": Routine(
        ranks=(2, 2), dims=_trsm_dims, library="cblas",
        slots={"x": ("float", lambda d: (d["m"], d["n"]))}, copies={"x": 1}, args=_trsm_args, invalid=_trsm_fits),
}


class LapackShapeError(ShapeError):
    """Operands a routine cannot take."""


def problem(routine: str, shapes: Sequence[Shape], params: Mapping[str, object]) -> tuple[Shape, list[Shape], dict[str, int]]:
    """The common batch dims, each operand's per-problem shape and the named sizes of one call of
    ``routine`` over operands of ``shapes``."""
    r = ROUTINES.get(routine)
    if r is None:
        raise LapackShapeError(f"unknown routine '{routine}' (known: {', '.join(ROUTINES)})")
    if len(shapes) != len(r.ranks):
        raise LapackShapeError(f"{routine} takes {len(r.ranks)} operand(s), got {len(shapes)}")
    batches, per = set(), []
    for shape, rank in zip(shapes, r.ranks):
        if len(shape) < rank:
            raise LapackShapeError(f"{routine}: an operand of shape {list(shape)} has fewer than {rank} dims")
        batches.add(tuple(shape[: len(shape) - rank]))
        per.append(tuple(shape[len(shape) - rank:]))
    if len(batches) != 1:
        raise LapackShapeError(f"{routine}: the operands' batch dims differ: {sorted(map(list, batches))}")
    if (why := r.invalid(per, params)) is not None:
        raise LapackShapeError(f"{routine}: {why}")
    return batches.pop(), per, r.dims(per, params)


def slot_shape(routine: str, slot: str, dims: Dims) -> tuple[str, Shape]:
    """``(kind, per-problem shape)`` of ``slot``."""
    slots = ROUTINES[routine].all_slots()
    if slot not in slots:
        raise LapackShapeError(f"{routine} has no output '{slot}' (it has {', '.join(slots)})")
    kind, shape = slots[slot]
    return kind, shape(dims)
