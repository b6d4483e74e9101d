"""PyTorch's OpInfo database (``op_db``) swept through ``tg.compile``: one case per op, dtype and
sample, each run in a forked child of its own. Used by ``benchmarks/opinfo_sweep.py`` (the whole
sweep, a table) and by tests (``cases(ops=[...])`` then ``run_case``); no tests in here.

    from opinfo_harness import cases, run_cases, summarize, warm   # tests/ on sys.path
    warm()                                   # imports what a compile needs, once, before forking
    outcomes = list(run_cases(cases(ops=["sin", "add"])))
    print(summarize(outcomes))

**Cases.** For every OpInfo of ``op_db`` (named ``name`` or ``name.variant``; ``special.*``,
``linalg.*``, ``nn.functional.*``, ``fft.*`` ... keep their namespace as their ``family``), for
each requested dtype the OpInfo supports on the CPU, its first ``samples`` samples of
``op.sample_inputs("cpu", dtype, requires_grad=False)``. The samples draw random tensors: the
enumeration seeds torch, ``random`` and NumPy (0) first, so a case (op, dtype, index) rebuilds the
same sample in the child. `SampleModule` wraps a sample: every tensor of ``sample.input``,
``args`` and ``kwargs`` (lists and tuples of tensors included) is an input of ``forward``,
everything else (numbers, dtypes, shapes, None) a constant; ``forward`` returns the op's result
as it is.

**One case, in a forked child** (`run_cases`; the parent imported torch, tensor_graphs and op_db,
and never compiles):

1. eager: the module on the sample (twice, under two seeds: a result that differs, or an
   exported graph with a ``nondeterministic_seeded`` op (``rand``, ``dropout``, ``empty``:
   OpInfo's random ops seed themselves, so eager alone rarely shows it), is marked ``random``:
   its values are not compared (tensor_graphs' random numbers are not torch's), only the
   structure, shapes and dtypes);
2. ``torch.export.export(module, inputs)``: a failure (or eager's own) is outcome ``export``, as
   is tensor_graphs' ``ValueError("torch.export could not export ...")``; ``export`` cases are
   left out of every denominator;
3. ``fn = tg.compile(module, inputs)``; ``got = fn(*inputs)``, compared with eager.

**Outcomes.** ``pass``; ``wrong`` (it ran, but the number or kind of results, a shape, a dtype or
a value differs: ``detail`` says which); ``refused`` (``UnsupportedOpsError``, or a
``TypeError``/``ValueError``/``NotImplementedError`` raised by a ``raise`` statement in
tensor_graphs' own code whose message has none of the internal-error shapes); ``internal`` (a
``KeyError``, ``IndexError``, ``AttributeError``, ``AssertionError``, ``RecursionError``,
``ZeroDivisionError``, a message with ``NoneType`` or another internal-error shape (``object is
not subscriptable``, ``unexpected keyword argument`` ...), one raised outside tensor_graphs (torch,
xDSL, llvmlite, Python) or any other type; ``location``: the innermost tensor_graphs frame,
``file:line``); ``crash`` (the child died of a signal); ``timeout`` (``signal.alarm`` in the
child after ``timeout_s``, SIGKILL from the parent after ``timeout_s + 10``); ``harness`` (this
module failed, not tensor_graphs: should not happen).

**Structure.** tensor_graphs returns eager's structure (tuples, lists, named tuples, dicts,
nested, Python numbers and None among the tensors): a different nesting, container type (a
plain tuple for a named tuple, a tensor for a 1-tuple), dict key or leaf type is ``wrong``
(``structure``); a NumPy array where eager has a tensor (tensor_graphs' result for a model with
no tensor input) counts as a tensor, noted in ``note``. Then leaf by leaf; Python numbers must be
equal.

**Tolerance.** Each tensor must have eager's shape and dtype. Integer and bool results must equal
eager's exactly, except the indices of the `TIE_ORDER` ops (sort, topk, argsort, msort, median,
nanmedian, kthvalue, mode), whose order of equal values torch leaves unspecified: those must pick
the same values of the input (`same_picks`). The values of `UNINITIALISED` ops (``empty_like``)
are not compared. Floating (and complex, compared as (re, im) pairs) results: NaN where eager has
NaN, the same ±inf where eager has ±inf (except where a float16/bfloat16 eager overflowed an
intermediate: its ±inf where the float64 result rounded to that dtype is finite, and
tensor_graphs' value is finite: compared with the float64 result there, noted); elsewhere, with ``ref`` the op run on the sample with its
floating inputs converted to float64 (integer and bool inputs unchanged; where ``ref`` is not
finite but eager is, eager stands in)::

    tg_err    = max |got   - ref|
    eager_err = max |eager - ref|
    pass  when  tg_err <= 2 * eager_err + atol(dtype) * max(1, max |ref|)

with ``atol``: float32 1e-5, float64 1e-12, float16 1e-3, bfloat16 8e-3 (the result's dtype).
When the float64 reference cannot be computed (the op refuses float64, or its result is not
shaped as eager's), ``ref`` is eager itself: ``tg_err <= atol(dtype) * max(1, max |eager|)``.
``tg_err`` and ``eager_err`` (the largest over the leaves) are in the outcome.
"""

from __future__ import annotations

import os

os.environ.setdefault("TG_CACHE", "off")  # every case compiles for itself
os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before OpenBLAS loads: it starts no threads to fork

import json  # noqa: E402
import linecache  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from collections.abc import Callable, Iterable, Iterator, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from itertools import islice  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

OUTCOMES = ("pass", "wrong", "refused", "internal", "crash", "timeout", "export", "harness")

#: atol per result dtype, relative to max(1, max |ref|)
ATOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-3, torch.bfloat16: 8e-3,
        torch.complex64: 1e-5, torch.complex128: 1e-12, torch.complex32: 1e-3}

INTERNAL_TYPES = (KeyError, IndexError, AttributeError, AssertionError, RecursionError, ZeroDivisionError)
#: messages of errors Python itself raises (a bug in the code that ran, not a refusal)
INTERNAL_SHAPES = re.compile(
    r"NoneType|object is not (subscriptable|iterable|callable)|unhashable type|"
    r"unexpected keyword argument|required positional argument|positional arguments? but \d+ w|"
    r"unsupported operand type|can't multiply sequence|object cannot be interpreted as|"
    r"not supported between instances|must be real number, not|object of type '.*' has no len|"
    r"too many values to unpack|not enough values to unpack|invalid literal for int\(\)|"
    r"has no attribute|cannot unpack non-iterable"
)

_TG_DIR = None  # tensor_graphs' package directory, set by _tg_dir()


def _tg_dir() -> str:
    global _TG_DIR
    if _TG_DIR is None:
        import tensor_graphs

        _TG_DIR = os.path.dirname(os.path.abspath(tensor_graphs.__file__)) + os.sep
    return _TG_DIR


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One sample of one OpInfo at one dtype: enough to rebuild it in the child."""

    op: str  #: ``op.name``
    variant: str  #: ``op.variant_test_name`` ("" when none)
    dtype: str  #: ``"float32"``
    index: int  #: the sample's position in ``op.sample_inputs`` (seeded)
    family: str = "torch"  #: ``special``, ``linalg``, ``nn.functional``, ``fft``, ... else ``torch``

    @property
    def name(self) -> str:
        """The OpInfo's name: ``op`` or ``op.variant``."""
        return f"{self.op}.{self.variant}" if self.variant else self.op

    @property
    def id(self) -> str:
        return f"{self.name}-{self.dtype}-{self.index}"


def _op_db():
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


_OPS: dict[tuple[str, str], object] = {}


def find_op(name: str, variant: str = ""):
    """The OpInfo named ``name`` with ``variant_test_name`` ``variant``."""
    if not _OPS:
        for op in _op_db():
            _OPS.setdefault((op.name, op.variant_test_name), op)
    return _OPS[(name, variant)]


def _family(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else "torch"


def _seed() -> None:
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


def _samples(op, dtype: torch.dtype, n: int) -> list:
    """The first ``n`` samples of ``op`` at ``dtype`` on the CPU, seeded: the same every time."""
    _seed()
    return list(islice(op.sample_inputs("cpu", dtype, requires_grad=False), n))


def sample_of(case: Case):
    """Rebuild ``case``'s OpInfo and sample."""
    op = find_op(case.op, case.variant)
    samples = _samples(op, getattr(torch, case.dtype), case.index + 1)
    return op, samples[case.index]


def cases(dtypes: Sequence[torch.dtype | str] = (torch.float32,), samples: int = 2,
          ops: Iterable[str] | None = None, skipped: list | None = None) -> list[Case]:
    """Every (OpInfo, dtype, sample index) to run: each dtype the OpInfo supports on the CPU, its
    first ``samples`` samples. ``ops``: only these OpInfos (``name`` matches every variant of
    it, ``name.variant`` one). OpInfos whose samples cannot be enumerated are appended to
    ``skipped`` as ``(name, dtype, error)``."""
    wanted = set(ops) if ops is not None else None
    dtypes = [getattr(torch, d) if isinstance(d, str) else d for d in dtypes]
    out = []
    for op in _op_db():
        name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        if wanted is not None and op.name not in wanted and name not in wanted:
            continue
        supported = op.supported_dtypes("cpu")
        for dtype in dtypes:
            if dtype not in supported:
                continue
            try:
                n = len(_samples(op, dtype, samples))
            except Exception as e:  # noqa: BLE001 - an OpInfo whose samples fail is reported, not run
                if skipped is not None:
                    skipped.append((name, str(dtype).removeprefix("torch."), f"{type(e).__name__}: {_first_line(e)}"))
                continue
            d = str(dtype).removeprefix("torch.")
            out.extend(Case(op.name, op.variant_test_name, d, i, _family(op.name)) for i in range(n))
    return out


def op_names() -> list[str]:
    """Every OpInfo's name (``name`` or ``name.variant``), in ``op_db``'s order."""
    names: dict[str, None] = {}
    for op in _op_db():
        names.setdefault(f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name)
    return list(names)


def slice_cases(dtypes: Sequence[str], f32_stride: int, other_stride: int) -> list[Case]:
    """A fixed share of the corpus (what ``tests/test_opinfo.py`` runs): the first sample of
    every ``f32_stride``-th OpInfo at float32, and of every ``other_stride``-th at each other
    dtype, the k-th dtype of ``dtypes`` starting at OpInfo ``3 k mod other_stride`` (the
    dtypes do not all take the same ops)."""
    names = op_names()
    chosen = []
    for k, dtype in enumerate(dtypes):
        stride, offset = (f32_stride, 0) if dtype == "float32" else (other_stride, (3 * k) % other_stride)
        ops = set(names[offset::stride])
        chosen += [c for c in cases([dtype], samples=1, ops=ops) if c.name in ops]
    return chosen


# --------------------------------------------------------------------------- the module


class SampleModule(torch.nn.Module):
    """``forward(*tensors)`` = ``op.op(sample.input, *sample.args, **sample.kwargs)``: the
    sample's tensors (in lists and tuples too) are the inputs, everything else is constant.
    ``self.inputs``: the tensors, in ``forward``'s order."""

    def __init__(self, op, sample):
        super().__init__()
        leaves, self._spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
        self._slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        self._constants = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        self.inputs = tuple(leaves[i] for i in self._slots)
        self._fn = op.op

    def forward(self, *tensors):
        leaves = list(self._constants)
        for i, t in zip(self._slots, tensors):
            leaves[i] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self._spec)
        return self._fn(inp, *args, **kwargs)


def _to64(x: torch.Tensor) -> torch.Tensor:
    if x.is_floating_point():
        return x.detach().to(torch.float64)
    if x.is_complex():
        return x.detach().to(torch.complex128)
    return x.detach().clone()


def _clone(inputs: Sequence[torch.Tensor]) -> tuple:
    return tuple(x.detach().clone() for x in inputs)


# --------------------------------------------------------------------------- comparing


def _is_container(x) -> bool:
    return isinstance(x, (tuple, list, dict)) and not isinstance(x, torch.Size)


def _leaves(x) -> list:
    """A result's leaves: tuples, lists, named tuples and dicts (in key order) flattened, depth
    first."""
    if isinstance(x, dict):
        return [leaf for item in x.values() for leaf in _leaves(item)]
    if _is_container(x):
        return [leaf for item in x for leaf in _leaves(item)]
    return [x]


def _shape_of(x) -> str:
    """How a result is nested: ``Tensor``, ``tuple[Tensor, Tensor]``, ``max[Tensor, Tensor]``,
    ``dict[a: Tensor]``; a NumPy array (tensor_graphs' result when the model has no tensor input)
    counts as a Tensor."""
    if isinstance(x, dict):
        return f"dict[{', '.join(f'{k}: {_shape_of(v)}' for k, v in x.items())}]"
    if _is_container(x):
        return f"{type(x).__name__}[{', '.join(_shape_of(i) for i in x)}]"
    return "Tensor" if isinstance(x, np.ndarray) else type(x).__name__


def _real(x: torch.Tensor) -> torch.Tensor:
    """A float64 view of the values: complex as (re, im) pairs."""
    if x.is_complex():
        return torch.view_as_real(x.resolve_conj().to(torch.complex128))
    return x.to(torch.float64)


def _atol(dtype: torch.dtype) -> float:
    return ATOL.get(dtype, 1e-5)


def _as_tensor(x):
    return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x


#: OpInfos whose index results may order equal values differently from eager (torch documents
#: their tie order as unspecified; tensor_graphs' sort is stable, eager's ``stable=False`` is not)
TIE_ORDER: frozenset[str] = frozenset({"sort", "topk", "argsort", "msort", "median", "nanmedian", "kthvalue", "mode"})

#: ops whose values are unspecified (uninitialised memory): their structure, shapes and dtypes
#: are compared, not their values
UNINITIALISED: frozenset[str] = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                                           "empty_permuted"})


#: OpInfos whose singular or eigen vectors are defined up to a sign per vector (LAPACK builds
#: differ: torch's MKL, tensor_graphs' OpenBLAS): tensor_graphs' vectors are flipped to eager's
#: before comparing, U's columns and V's with the same signs -> (leaf of the vectors whose
#: columns give the signs, leaves flipped along columns, leaves flipped along rows)
SIGN_FREE: dict[str, tuple[int, tuple[int, ...], tuple[int, ...]]] = {
    "linalg.svd": (0, (0,), (2,)), "svd": (0, (0, 2), ()), "linalg.eigh": (1, (1,), ()),
}


def align_signs(op: str, eager, got):
    """``got`` with its vectors flipped to the signs of eager's (see :data:`SIGN_FREE`)."""
    spec = SIGN_FREE.get(op)
    if spec is None or not isinstance(got, tuple) or not isinstance(eager, tuple) or len(got) != len(eager):
        return got
    source, columns, rows = spec
    leaves = [_as_tensor(x) for x in got]
    e, g = eager[source], leaves[source]
    if not isinstance(g, torch.Tensor) or g.dim() < 2 or g.shape != e.shape or g.numel() == 0:
        return got
    k = min(g.shape[-1], *(leaves[i].shape[-2] for i in rows)) if rows else g.shape[-1]
    signs = torch.sign((g[..., :k] * e[..., :k]).sum(-2))
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    for i in columns:
        leaves[i] = torch.cat([leaves[i][..., :k] * signs.unsqueeze(-2), leaves[i][..., k:]], -1)
    for i in rows:
        leaves[i] = torch.cat([leaves[i][..., :k, :] * signs.unsqueeze(-1), leaves[i][..., k:, :]], -2)
    return type(got)(leaves) if type(got) is tuple else type(got)(tuple(leaves))


def same_picks(source: torch.Tensor, eager_idx: torch.Tensor, got_idx: torch.Tensor) -> bool:
    """``got_idx`` picks the same values of ``source`` as ``eager_idx`` along some dim (indices of
    an unstable sort or a top-k that order ties differently, or of a median or k-th value among
    equal ones, whose dim may be reduced away); NaN picks NaN."""
    if source.dim() == 0 or got_idx.shape != eager_idx.shape or (got_idx.numel() and got_idx.min() < 0):
        return False
    for d in range(source.dim()):
        e, g = eager_idx, got_idx
        if e.dim() == source.dim() - 1:  # the dim was reduced: picks along d
            e, g = e.unsqueeze(d), g.unsqueeze(d)
        if e.dim() != source.dim() or (g.numel() and g.max() >= source.shape[d]):
            continue
        try:
            a, b = source.gather(d, e), source.gather(d, g)
        except RuntimeError:
            continue
        if torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                 and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))):
            return True
    return False


def compare(eager, got, ref=None, values: bool = True, tie_source: torch.Tensor | None = None) -> dict:
    """``got`` (tensor_graphs' result) against ``eager``'s, with ``ref`` (the float64 result or
    None): ``{"ok", "detail", "tg_err", "eager_err", "note"}`` (see the module's docstring).
    ``values=False`` (a random op): the structure, shapes and dtypes only. ``tie_source``: the
    input of a `TIE_ORDER` op; an integer result that differs passes when it picks the same
    values of it (`same_picks`), noted."""
    e_leaves = _leaves(eager)
    g_leaves = [_as_tensor(x) for x in _leaves(got)]
    r_leaves = _leaves(ref) if ref is not None else None
    if r_leaves is not None and len(r_leaves) != len(e_leaves):
        r_leaves = None
    out = {"ok": True, "detail": None, "tg_err": 0.0, "eager_err": 0.0, "note": None}
    e_shape, g_shape = _shape_of(eager), _shape_of(got)
    if e_shape != g_shape or len(g_leaves) != len(e_leaves):
        return {**out, "ok": False, "detail": f"structure: eager {e_shape[:200]}, tensor_graphs {g_shape[:200]}"}
    if any(isinstance(x, np.ndarray) for x in _leaves(got)):
        out["note"] = "tensor_graphs returned NumPy arrays (no tensor input)"
    for k, (e, g) in enumerate(zip(e_leaves, g_leaves)):
        where = f"result {k}: " if len(e_leaves) > 1 else ""
        if not isinstance(e, torch.Tensor):
            if isinstance(g, torch.Tensor) or type(g) is not type(e):
                return {**out, "ok": False, "detail": f"structure: {where}eager {type(e).__name__}, tensor_graphs {type(g).__name__}"}
            if e != g and not (isinstance(e, float) and e != e and g != g):
                return {**out, "ok": False, "detail": f"value: {where}eager {e!r}, tensor_graphs {g!r}"}
            continue
        if not isinstance(g, torch.Tensor):
            return {**out, "ok": False, "detail": f"structure: {where}eager Tensor, tensor_graphs {type(g).__name__}"}
        if tuple(g.shape) != tuple(e.shape):
            return {**out, "ok": False, "detail": f"shape: {where}eager {tuple(e.shape)}, tensor_graphs {tuple(g.shape)}"}
        if g.dtype != e.dtype:
            return {**out, "ok": False, "detail": f"dtype: {where}eager {e.dtype}, tensor_graphs {g.dtype}"}
        e = e.detach()
        if not values:
            continue
        if not (e.is_floating_point() or e.is_complex()):
            if not torch.equal(g, e) and tie_source is not None and same_picks(tie_source, e, g):
                out["note"] = ((out["note"] + "; ") if out["note"] else "") + f"{where}ties ordered otherwise than eager's"
                continue
            if not torch.equal(g, e):
                bad = int((g != e).sum())
                return {**out, "ok": False, "detail": f"value: {where}{bad} of {e.numel()} elements differ (exact)"}
            continue
        r = r_leaves[k] if r_leaves is not None else None
        if not isinstance(r, torch.Tensor) or tuple(r.shape) != tuple(e.shape) or not (r.is_floating_point() or r.is_complex()):
            r = None
        e64, g64 = _real(e), _real(g)
        e_nan, g_nan = torch.isnan(e64), torch.isnan(g64)
        if not torch.equal(e_nan, g_nan):
            return {**out, "ok": False, "detail": f"value: {where}NaN in {int(g_nan.sum())} places, eager in {int(e_nan.sum())}; {int((e_nan != g_nan).sum())} differ"}
        overflow = _eager_overflow(e, e64, g64, r)
        e_inf = torch.isinf(e64) & ~overflow
        if not torch.equal(e_inf, torch.isinf(g64)) or not torch.equal(e64[e_inf], g64[e_inf]):
            return {**out, "ok": False, "detail": f"value: {where}±inf differ ({int(e_inf.sum())} in eager, {int(torch.isinf(g64).sum())} in tensor_graphs)"}
        if bool(overflow.any()):
            out["note"] = ((out["note"] + "; ") if out["note"] else "") + (
                f"{where}eager overflows to ±inf in {int(overflow.sum())} place(s) where the float64 result fits {e.dtype}: compared with that")
        finite = ~(e_nan | e_inf)
        if r is not None:
            r64 = _real(r)
            r64 = torch.where(torch.isfinite(r64), r64, e64)
        else:
            r64 = e64
        if not bool(finite.any()):
            continue
        ref_f, g_f = r64[finite], g64[finite]
        eager_ok = finite & ~overflow  # eager's error where it did not overflow
        tg_err = float((g_f - ref_f).abs().max())
        eager_err = float((e64[eager_ok] - r64[eager_ok]).abs().max()) if r is not None and bool(eager_ok.any()) else 0.0
        scale = max(1.0, float(ref_f.abs().max()))
        bound = 2 * eager_err + _atol(e.dtype) * scale
        out["tg_err"], out["eager_err"] = max(out["tg_err"], tg_err), max(out["eager_err"], eager_err)
        if r is None and "no float64 reference" not in (out["note"] or ""):
            out["note"] = ((out["note"] + "; ") if out["note"] else "") + "no float64 reference: compared with eager"
        if not tg_err <= bound:
            return {**out, "ok": False, "detail": f"value: {where}max error {tg_err:.3g} > {bound:.3g} (eager's {eager_err:.3g}, max |ref| {scale:.3g})"}
    return out


def _eager_overflow(e: torch.Tensor, e64: torch.Tensor, g64: torch.Tensor, r: torch.Tensor | None) -> torch.Tensor:
    """Where eager's result is ±inf only because an intermediate overflowed its narrow dtype:
    the float64 result ``r`` rounded to that dtype is finite, and so is tensor_graphs' (which may
    compute inside a fused kernel in float32, as the rules allow); there tensor_graphs is compared
    with the float64 result instead."""
    if r is None or e.dtype not in (torch.float16, torch.bfloat16):
        return torch.zeros_like(e64, dtype=torch.bool)
    fits = torch.isfinite(_real(r.to(e.dtype)))
    return torch.isinf(e64) & fits & torch.isfinite(g64)


def _same(a, b) -> bool:
    """Two eager results equal (NaN equal to NaN)."""
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(
                    torch.nan_to_num(_real(x) if x.is_floating_point() or x.is_complex() else x),
                    torch.nan_to_num(_real(y) if y.is_floating_point() or y.is_complex() else y)):
                return False
        elif type(x) is not type(y) or (x != y and x == x):
            return False
    return True


# --------------------------------------------------------------------------- classifying


class _Timeout(BaseException):
    """``signal.alarm`` went off (a BaseException: no ``except Exception`` wraps it)."""


def _first_line(e: BaseException) -> str:
    """The message's first line; when it ends with ``:`` (a list follows: "1 aten op could not
    be converted:"), with the next line too."""
    text = str(e).strip()
    if isinstance(e, KeyError) and e.args:
        text = repr(e.args[0])
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    if first.endswith(":") and len(lines) > 1:
        first = f"{first} {lines[1]}"
    return first[:500]


def _tg_frame(tb) -> tuple[str | None, bool]:
    """The innermost tensor_graphs frame (``path:line``, relative to the repository) and whether
    the innermost frame of all is a ``raise`` statement in tensor_graphs."""
    frames = traceback.extract_tb(tb)
    tg = _tg_dir()
    root = os.path.dirname(tg.rstrip(os.sep)) + os.sep
    location, raised_by_tg = None, False
    for f in reversed(frames):
        if f.filename.startswith(tg):
            location = f"{f.filename.removeprefix(root)}:{f.lineno}"
            break
    if frames and frames[-1].filename.startswith(tg):
        last = frames[-1]
        raised_by_tg = _is_raise(last.filename, last.lineno)
    return location, raised_by_tg


def _is_raise(path: str, lineno: int) -> bool:
    """Line ``lineno`` is (in) a ``raise`` statement: it starts with ``raise``, or a line a few
    above does and the statement is still open (unbalanced brackets) at ``lineno``."""
    for start in range(lineno, max(0, lineno - 8), -1):
        line = linecache.getline(path, start).strip()
        if line.startswith("raise"):
            if start == lineno:
                return True
            text = "".join(linecache.getline(path, i) for i in range(start, lineno))
            return sum(text.count(c) for c in "([{") > sum(text.count(c) for c in ")]}")
    return False


def classify(e: BaseException) -> dict:
    """An exception from ``tg.compile`` or the call: ``{"outcome", "exc_type", "message",
    "location", "unsupported"}``."""
    from tensor_graphs.frontend.unsupported import UnsupportedOpsError

    msg = _first_line(e)
    location, raised_by_tg = _tg_frame(e.__traceback__)
    info = {"exc_type": type(e).__name__, "message": msg, "location": location, "unsupported": None}
    if isinstance(e, UnsupportedOpsError):
        info["unsupported"] = [{"target": u.target, "problem": u.problem} for u in e.entries]
        info["message"] = "; ".join(sorted({f"{u.target}: {u.problem}" for u in e.entries}))
        return {"outcome": "refused", **info}
    if isinstance(e, ValueError) and str(e).startswith("torch.export could not export"):
        return {"outcome": "export", "stage": "tg export", **info}
    if isinstance(e, INTERNAL_TYPES) or INTERNAL_SHAPES.search(str(e)):
        return {"outcome": "internal", **info}
    if isinstance(e, (TypeError, ValueError, NotImplementedError)) and raised_by_tg:
        return {"outcome": "refused", **info}
    return {"outcome": "internal", **info}


# --------------------------------------------------------------------------- one case (the child)


def _call(module: SampleModule, inputs: tuple, seed: int = 0):
    torch.manual_seed(seed)
    with torch.no_grad():
        return module(*_clone(inputs))


def _reference(op, sample, module: SampleModule):
    """The op on the sample's floating inputs converted to float64 (None when it fails)."""
    try:
        ref_module = SampleModule(op, sample)
        ref_inputs = tuple(_to64(x) for x in module.inputs)
        return _call(ref_module, ref_inputs)
    except Exception:  # noqa: BLE001 - an op without float64: compared with eager instead
        return None


def evaluate(case: Case) -> dict:
    """Run ``case`` here (in the child): the outcome's fields, less the case's own."""
    import tensor_graphs as tg

    t0 = time.perf_counter()
    try:
        op, sample = sample_of(case)
        module = SampleModule(op, sample)
        inputs = module.inputs
    except Exception as e:  # noqa: BLE001
        return {"outcome": "harness", "stage": "sample", "exc_type": type(e).__name__, "message": _first_line(e)}
    try:
        eager = _call(module, inputs, 0)
        is_random = not _same(eager, _call(module, inputs, 1))
    except Exception as e:  # noqa: BLE001 - a sample eager cannot run is not a case
        return {"outcome": "export", "stage": "eager", "exc_type": type(e).__name__, "message": _first_line(e)}
    info: dict = {"random": is_random, "n_inputs": len(inputs),
                  "input_dtypes": sorted({str(x.dtype).removeprefix("torch.") for x in inputs})}
    try:
        program = torch.export.export(module, inputs)
        info["random"] = is_random or any(
            torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()) for n in program.graph.nodes)
    except Exception as e:  # noqa: BLE001 - torch.export raises many kinds
        return {**info, "outcome": "export", "stage": "torch.export", "exc_type": type(e).__name__, "message": _first_line(e)}
    info["export_s"] = round(time.perf_counter() - t0, 3)
    try:
        fn = tg.compile(module, inputs)
        got = fn(*_clone(inputs))
    except Exception as e:  # noqa: BLE001 - classified
        return {**info, **classify(e)}
    info["compile_s"] = round(time.perf_counter() - t0 - info["export_s"], 3)
    try:
        ref = _reference(op, sample, module)
        ties = sample.input if case.op in TIE_ORDER and isinstance(sample.input, torch.Tensor) else None
        unspecified = info["random"] or case.op in UNINITIALISED
        cmp = compare(eager, align_signs(case.op, eager, got), align_signs(case.op, eager, ref), values=not unspecified,
                      tie_source=ties)
        if unspecified:
            why = "random" if info["random"] else "uninitialised"
            cmp["note"] = "; ".join(x for x in (cmp["note"], f"{why}: values not compared") if x)
    except Exception as e:  # noqa: BLE001
        return {**info, "outcome": "harness", "stage": "compare", "exc_type": type(e).__name__, "message": _first_line(e),
                "location": "".join(traceback.format_exception(e)[-3:])[-600:]}
    return {**info, "outcome": "pass" if cmp["ok"] else "wrong", "detail": cmp["detail"], "tg_err": cmp["tg_err"],
            "eager_err": cmp["eager_err"], "note": cmp["note"]}


def _child(case: Case, result_path: str, log_path: str, timeout_s: int) -> None:
    """In the forked child: stdout and stderr to ``log_path``, the case, its outcome to
    ``result_path`` as JSON, then ``os._exit``."""
    f = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(f, 1)
    os.dup2(f, 2)
    os.close(f)
    status = 0

    def on_alarm(signum, frame):
        raise _Timeout()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.alarm(max(1, int(timeout_s)))
    try:
        try:
            result = evaluate(case)
        except _Timeout:
            result = {"outcome": "timeout", "message": f"over {timeout_s} s (alarm in the child)"}
        except RecursionError as e:
            result = {"outcome": "internal", "exc_type": "RecursionError", "message": _first_line(e)}
        signal.alarm(0)
        tmp = result_path + ".tmp"
        with open(tmp, "w") as out:
            json.dump(result, out, default=str)
        os.rename(tmp, result_path)
    except BaseException:  # noqa: BLE001 - the parent reports the missing result and this log
        traceback.print_exc()
        status = 71
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


# --------------------------------------------------------------------------- the parent


#: tensor_graphs modules a compile imports, found by `warm` (in a child) and imported by the parent
_WARM_DONE = False


def _probe_imports(path: str) -> None:
    """In a forked child: one tiny compile; the names of the modules it imported to ``path``."""
    try:
        before = set(sys.modules)
        import tensor_graphs as tg

        fn = tg.compile(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), (torch.randn(2, 4),))
        fn(torch.randn(2, 4))
        with open(path, "w") as f:
            json.dump(sorted(set(sys.modules) - before), f)
    finally:
        os._exit(0)


def warm() -> list[str]:
    """Import, once and before the forks, what each child would otherwise import again: torch,
    torch.export's machinery, op_db, tensor_graphs and the modules one compile imports (found by
    a compile in a forked child: the parent compiles nothing). Holds torch and tensor_graphs to
    one thread (no pool to fork). Returns the names of the threads alive (only the main one)."""
    global _WARM_DONE
    if _WARM_DONE:
        return [t.name for t in __import__("threading").enumerate()]
    import importlib
    import threading

    torch.set_num_threads(1)
    import tensor_graphs as tg
    import tensor_graphs.frontend.unsupported  # noqa: F401

    _op_db()
    find_op("abs")
    _tg_dir()
    tg.set_num_threads(1)  # loads libgomp and OpenBLAS (held to one thread: no pool to fork)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "modules.json")
        pid = os.fork()
        if pid == 0:
            _probe_imports(path)
        os.waitpid(pid, 0)
        names = json.load(open(path)) if os.path.exists(path) else []
    for name in names:
        if name.startswith(("triton", "torch._inductor")):
            continue  # the GPU path's, and Inductor's: never needed on the CPU path
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that imports only in its own context
            pass
    # torch.export's first call initialises what each later one reuses
    torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    _WARM_DONE = True
    return [t.name for t in threading.enumerate()]


@dataclass
class _Running:
    case: Case
    pid: int
    start: float
    result: str
    log: str
    killed: bool = False


def _tail(path: str, n: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [line.rstrip() for line in f.read().splitlines() if line.strip()]
        return " | ".join(lines[-n:])[-600:]
    except OSError:
        return ""


def _finish(r: _Running, status: int, seconds: float, timeout_s: int) -> dict:
    base = {"op": r.case.name, "opinfo": r.case.op, "variant": r.case.variant, "family": r.case.family,
            "dtype": r.case.dtype, "sample": r.case.index, "seconds": round(seconds, 3)}
    if r.killed:
        return {**base, "outcome": "timeout", "message": f"killed after {timeout_s + 10} s", "log": _tail(r.log)}
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        outcome = "timeout" if sig == "SIGALRM" else "crash"
        return {**base, "outcome": outcome, "exc_type": sig, "message": f"killed by {sig}", "log": _tail(r.log)}
    if os.path.exists(r.result):
        with open(r.result) as f:
            result = json.load(f)
        return {**base, **result}
    return {**base, "outcome": "crash", "exc_type": f"exit {os.WEXITSTATUS(status)}",
            "message": f"the child exited {os.WEXITSTATUS(status)} without a result", "log": _tail(r.log)}


def run_cases(todo: Iterable[Case], timeout_s: int = 60, jobs: int = 1,
              on_start: Callable[[Case], None] | None = None) -> Iterator[dict]:
    """Run each case in a forked child of its own, ``jobs`` at a time; yields each outcome (a
    dict: the case, ``outcome``, ``exc_type``, ``message``, ``location``, ``detail``,
    ``tg_err``, ``eager_err``, ``seconds`` ...) as it finishes, not in order."""
    warm()
    pending = list(todo)[::-1]
    running: dict[int, _Running] = {}
    with tempfile.TemporaryDirectory(prefix="opinfo-") as tmp:
        n = 0
        while pending or running:
            while pending and len(running) < max(1, jobs):
                case = pending.pop()
                if on_start is not None:
                    on_start(case)
                n += 1
                result, log = os.path.join(tmp, f"{n}.json"), os.path.join(tmp, f"{n}.log")
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(case, result, log, timeout_s)
                running[pid] = _Running(case, pid, time.perf_counter(), result, log)
            done = None
            while done is None:
                for pid, r in running.items():
                    got, status = os.waitpid(pid, os.WNOHANG)
                    if got:
                        done = (r, status)
                        break
                    if not r.killed and time.perf_counter() - r.start > timeout_s + 10:
                        r.killed = True
                        os.kill(pid, signal.SIGKILL)
                if done is None:
                    time.sleep(0.01)
            r, status = done
            del running[r.pid]
            outcome = _finish(r, status, time.perf_counter() - r.start, timeout_s)
            for path in (r.result, r.log):
                if os.path.exists(path):
                    os.unlink(path)
            yield outcome


def run_case(case: Case, timeout_s: int = 60) -> dict:
    """One case in a forked child: its outcome (see `run_cases`)."""
    return next(iter(run_cases([case], timeout_s)))


# --------------------------------------------------------------------------- summary


def summarize(outcomes: Iterable[dict]) -> dict:
    """Per dtype: ``ops`` (OpInfos with a case), ``exportable_ops`` (with a sample that
    exports), ``passing_ops`` (exportable, and every exportable sample passed), ``cases`` and
    ``counts`` (cases per outcome)."""
    by_dtype: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        by_dtype[o["dtype"]][o["op"]].append(o["outcome"])
        counts[o["dtype"]][o["outcome"]] += 1
    table = {}
    for dtype, ops in by_dtype.items():
        exportable = {name: [x for x in got if x != "export"] for name, got in ops.items()}
        exportable = {name: got for name, got in exportable.items() if got}
        passing = [name for name, got in exportable.items() if all(x == "pass" for x in got)]
        table[dtype] = {
            "ops": len(ops),
            "exportable_ops": len(exportable),
            "passing_ops": len(passing),
            "cases": sum(counts[dtype].values()),
            "counts": {k: counts[dtype].get(k, 0) for k in OUTCOMES},
        }
    return table


__all__ = ["ATOL", "Case", "OUTCOMES", "SampleModule", "cases", "classify", "compare", "evaluate", "find_op",
           "op_names", "run_case", "run_cases", "sample_of", "slice_cases", "summarize", "warm"]
