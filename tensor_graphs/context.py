"""The one place that knows which dialects make up a tensor_graphs module."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.ir import Dialect


def _aten() -> Dialect:
    from tensor_graphs.dialects.aten import ATEN

    return ATEN


def _tg() -> Dialect:
    from tensor_graphs.dialects.tensor import TG

    return TG


def _buf() -> Dialect:
    from tensor_graphs.dialects.buffer import BUF

    return BUF


def _builtin() -> Dialect:
    from xdsl.dialects.builtin import Builtin

    return Builtin


def _func() -> Dialect:
    from xdsl.dialects.func import Func

    return Func


def _arith() -> Dialect:
    from xdsl.dialects.arith import Arith

    return Arith


def _math() -> Dialect:
    from xdsl.dialects.math import Math

    return Math


def _scalar() -> Dialect:
    from tensor_graphs.dialects.scalar import SCALAR

    return SCALAR


def _llvm() -> Dialect:
    from xdsl.dialects.llvm import LLVM

    return LLVM


#: Dialect name -> lazy factory (imports happen only when a module uses the dialect).
DIALECTS: dict[str, Callable[[], Dialect]] = {
    "builtin": _builtin,
    "func": _func,
    "arith": _arith,  # scalar bodies of tg.fused_elementwise
    "math": _math,
    "scalar": _scalar,  # body ops arith and math lack (scalar.remf)
    "llvm": _llvm,
    "aten": _aten,
    "tg": _tg,
    "buf": _buf,
}


def make_context() -> Context:
    """A context that can parse and print every level of a tensor_graphs module."""
    ctx = Context()
    for name, factory in DIALECTS.items():
        ctx.register_dialect(name, factory)
    return ctx
