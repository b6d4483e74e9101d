"""Symbolic sizes: a dim is an int or an expression of named symbols (torch.export's ``Dim``).

In the IR a dynamic dim is MLIR's ``?``; the type names its expression in its last parameter,
one string per ``?`` in order (a tensor's encoding, a memref's memory space)::

    tensor<?x64xf32, ["seq"]>            a dim that is the symbol seq
    tensor<?x?x64xf32, ["b", "2*seq"]>   expressions of the symbols
    memref<?x768xf32, ["seq"]>

so two values have equal types exactly when their symbolic shapes are equal, and every
verifier that compares types compares the expressions. The module records each symbol's range
(``tg.symbols = {seq = [1, 512]}``). In Python a dim is an ``int`` or a ``sympy.Expr`` over
integer symbols (`dims_of`, `shaped`); the shape rules of `dialects.shapes` work on both.

Expressions are read by a small parser of their own (`parse_expr`: integers, names, ``+ - *``,
``//``, ``%``, parentheses, ``max(a, b)``, ``min(a, b)``), never by ``eval`` or
``sympy.sympify``: an .mlir file is data.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

import sympy
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    MemRefType,
    NoneAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute

#: The module attribute that records every symbol's range: ``{name = [min, max]}``.
SYMBOLS_ATTR = "tg.symbols"

Dim = int | sympy.Expr


class SymbolicShapeError(ValueError):
    """A symbolic size that tensor_graphs cannot take here (the message says where and why)."""


def symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of a size named ``name`` (a positive integer)."""
    return sympy.Symbol(name, integer=True, positive=True)


# --------------------------------------------------------------------------- expressions

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*%(),]))")


@functools.lru_cache(maxsize=4096)
def parse_expr(text: str) -> Dim:
    """The expression ``text`` (the syntax `format_expr` writes) as an int or a sympy expression;
    a ValueError on anything else. (Cached: a graph's types repeat a few expressions, and sympy
    expressions are immutable.)"""
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"bad size expression {text!r} at column {pos + 1}")
        number, name, punct = m.groups()
        tokens.append(("int", number) if number else ("name", name) if name else ("op", punct))
        pos = m.end()
    parser = _Parser(tokens, text)
    value = parser.sum()
    if parser.i != len(tokens):
        raise ValueError(f"bad size expression {text!r}: unexpected {tokens[parser.i][1]!r}")
    return simplify(value)


class _Parser:
    """Recursive descent over the tokens of one expression: sum := term (('+'|'-') term)*,
    term := atom (('*'|'//'|'%') atom)*, atom := int | name | '-' atom | '(' sum ')' | f(sum, sum)."""

    def __init__(self, tokens: list[tuple[str, str]], text: str):
        self.tokens, self.text, self.i = tokens, text, 0

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.tokens) or (expected is not None and self.tokens[self.i][1] != expected):
            raise ValueError(f"bad size expression {self.text!r}: expected {expected or 'more'}")
        self.i += 1
        return self.tokens[self.i - 1]

    def sum(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self):
        value = self.atom()
        while self.peek() in ("*", "//", "%"):
            op = self.take()[1]
            rhs = self.atom()
            value = value * rhs if op == "*" else sympy.floor(value / rhs) if op == "//" else sympy.Mod(value, rhs)
        return value

    def atom(self):
        kind, text = self.take()
        if kind == "int":
            return sympy.Integer(int(text))
        if text == "-":
            return -self.atom()
        if text == "(":
            value = self.sum()
            self.take(")")
            return value
        if kind == "name" and text in ("max", "min") and self.peek() == "(":
            self.take("(")
            a = self.sum()
            self.take(",")
            b = self.sum()
            self.take(")")
            return sympy.Max(a, b) if text == "max" else sympy.Min(a, b)
        if kind == "name":
            return symbol(text)
        raise ValueError(f"bad size expression {self.text!r}: unexpected {text!r}")


def simplify(value) -> Dim:
    """``value`` as a plain int when it is constant, else its sympy expression (sympy keeps sums
    and products canonical as they are built: ``2*s + s`` is ``3*s``)."""
    value = sympy.sympify(value) if not isinstance(value, int) else value
    if isinstance(value, int):
        return value
    if value.is_Integer:
        return int(value)
    return value


@functools.lru_cache(maxsize=4096)
def format_expr(value: Dim) -> str:
    """``value`` in the syntax `parse_expr` reads (``2*seq + 1``, ``seq // 2``, ``max(a, b)``)."""
    if isinstance(value, int):
        return str(value)
    value = sympy.sympify(value)
    if value.is_Integer:
        return str(int(value))
    if value.is_Symbol:
        return value.name
    if isinstance(value, sympy.Add):
        terms = sorted(value.args, key=lambda t: (t.is_number, sympy.default_sort_key(t)))
        out = format_expr(terms[0])
        for t in terms[1:]:
            coeff, rest = t.as_coeff_Mul()
            if coeff < 0:
                out += " - " + format_expr(-t)
            else:
                out += " + " + format_expr(t)
        return out
    if isinstance(value, sympy.Mul):
        coeff, rest = value.as_coeff_Mul()
        if coeff == -1:
            return "-" + _atom(rest)
        factors = ([str(coeff)] if coeff != 1 else []) + [_atom(f) for f in sympy.Mul.make_args(rest)]
        return "*".join(factors)
    if isinstance(value, sympy.Pow) and value.exp.is_Integer and int(value.exp) > 0:
        return "*".join([_atom(value.base)] * int(value.exp))
    if isinstance(value, sympy.floor):
        num, den = sympy.fraction(sympy.together(value.args[0]))
        return f"{_atom(num)} // {_atom(den)}"
    if isinstance(value, sympy.Mod):
        return f"{_atom(value.args[0])} % {_atom(value.args[1])}"
    if isinstance(value, (sympy.Max, sympy.Min)):
        name = "max" if isinstance(value, sympy.Max) else "min"
        args = [format_expr(a) for a in value.args]
        out = args[0]
        for a in args[1:]:
            out = f"{name}({out}, {a})"
        return out
    raise SymbolicShapeError(f"size expression {value} has no tensor_graphs form (+, -, *, //, %, max, min)")


def _atom(value) -> str:
    text = format_expr(value)
    return f"({text})" if any(c in text for c in " +-") and not text.startswith(("max(", "min(")) else text


# --------------------------------------------------------------------------- types


def dims_of(type: Attribute) -> tuple[Dim, ...]:
    """The shape of a tensor or memref type: ints, and an expression for each ``?``."""
    shape = tuple(type.get_shape())  # type: ignore[attr-defined]
    if DYNAMIC_INDEX not in shape:
        return shape
    exprs = _exprs(type)
    dynamic = sum(1 for d in shape if d == DYNAMIC_INDEX)
    if len(exprs) != dynamic:
        raise SymbolicShapeError(f"{type} has {dynamic} dynamic dim(s) but names {len(exprs)} size expression(s)")
    it = iter(exprs)
    return tuple(next(it) if d == DYNAMIC_INDEX else d for d in shape)


def _exprs(type: Attribute) -> list[Dim]:
    names = type.encoding if isinstance(type, TensorType) else getattr(type, "memory_space", None)
    if not isinstance(names, ArrayAttr) or not all(isinstance(n, StringAttr) for n in names.data):
        raise SymbolicShapeError(f"{type} has dynamic dims but no list of their size expressions")
    return [parse_expr(n.data) for n in names.data]  # type: ignore[union-attr]


def _split(dims: Sequence[Dim]) -> tuple[list[int], ArrayAttr | NoneAttr]:
    dims = [simplify(d) for d in dims]
    shape = [d if isinstance(d, int) else DYNAMIC_INDEX for d in dims]
    exprs = [StringAttr(format_expr(d)) for d in dims if not isinstance(d, int)]
    return shape, ArrayAttr(exprs) if exprs else NoneAttr()


def shaped(element_type: Attribute, dims: Sequence[Dim]) -> TensorType:
    """A tensor type of ``dims`` (ints and expressions)."""
    shape, exprs = _split(dims)
    return TensorType(element_type, shape, exprs)


def shaped_memref(element_type: Attribute, dims: Sequence[Dim]) -> MemRefType:
    """A memref type of ``dims`` (ints and expressions)."""
    shape, exprs = _split(dims)
    return MemRefType(element_type, shape, NoneAttr(), exprs)


def divides(a: Dim, b: Dim) -> bool:
    """Whether ``a`` divides ``b`` for every value of the symbols (``12`` divides ``12*seq``)."""
    if isinstance(a, int) and isinstance(b, int):
        return a != 0 and b % a == 0
    return bool(sympy.cancel(sympy.sympify(b) / a).is_integer)


def is_static(dims: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in dims)


def free_symbols(dims: Sequence[Dim]) -> set[str]:
    """The names of the symbols ``dims`` depend on."""
    return {s.name for d in dims if not isinstance(d, int) for s in d.free_symbols}


# --------------------------------------------------------------------------- the module's symbols


def symbols_of(op) -> dict[str, tuple[int, int]]:
    """The symbols a module (or the module above ``op``) records: name -> (min, max)."""
    while op is not None and SYMBOLS_ATTR not in op.attributes:
        op = op.parent_op()
    if op is None:
        return {}
    table = op.attributes[SYMBOLS_ATTR]
    return {name: tuple(int(v) for v in r.get_values()) for name, r in table.data.items()}  # type: ignore[attr-defined,misc]


def record_symbols(module, symbols: Mapping[str, tuple[int, int]]) -> None:
    """Record ``symbols`` (name -> (min, max)) on ``module``; none: the attribute is removed."""
    if not symbols:
        module.attributes.pop(SYMBOLS_ATTR, None)
        return
    module.attributes[SYMBOLS_ATTR] = DictionaryAttr(
        {name: DenseArrayBase.from_list(i64, [lo, hi]) for name, (lo, hi) in sorted(symbols.items())})


def evaluate(dims: Sequence[Dim], values: Mapping[str, int]) -> tuple[int, ...]:
    """``dims`` at the symbols' ``values`` (by name)."""
    subs = {symbol(k): v for k, v in values.items()}
    out = []
    for d in dims:
        if isinstance(d, int):
            out.append(d)
            continue
        v = d.subs(subs)
        if not v.is_Integer:
            raise SymbolicShapeError(f"size {format_expr(d)} depends on symbols without a value: {sorted(map(str, v.free_symbols))}")
        out.append(int(v))
    return tuple(out)


def upper_bound(dims: Sequence[Dim], symbols: Mapping[str, tuple[int, int]]) -> tuple[int, ...]:
    """The largest value of each of ``dims`` over the symbols' ranges (sizes only grow with
    their symbols, so each at its maximum: checked at both ends of every range)."""
    out = evaluate(dims, {k: hi for k, (lo, hi) in symbols.items()})
    low = evaluate(dims, {k: lo for k, (lo, hi) in symbols.items()})
    for d, hi, lo in zip(dims, out, low):
        if lo > hi:
            raise SymbolicShapeError(f"size {format_expr(d)} shrinks as its symbols grow; tensor_graphs plans memory "
                                     "for sizes that grow with their symbols")
    return out


# --------------------------------------------------------------------------- run-time evaluation


def evaluator(value: Dim, names: Sequence[str]):
    """A function of the symbols' values (a sequence in the order of ``names``) giving ``value``:
    built once from the expression's tree, so that a call evaluates it in microseconds (no
    sympy at call time)."""
    if isinstance(value, int):
        return lambda values: value
    value = sympy.sympify(value)
    if value.is_Integer:
        n = int(value)
        return lambda values: n
    if value.is_Symbol:
        i = list(names).index(value.name)
        return lambda values: values[i]
    if isinstance(value, sympy.Pow) and value.exp.is_Integer and int(value.exp) > 0:
        f, n = evaluator(value.base, names), int(value.exp)
        return lambda values: f(values) ** n
    if isinstance(value, sympy.floor):
        num, den = sympy.fraction(sympy.together(value.args[0]))
        f, g = evaluator(num, names), evaluator(den, names)
        return lambda values: f(values) // g(values)
    parts = [evaluator(a, names) for a in value.args]
    if isinstance(value, sympy.Add):
        return lambda values: sum(p(values) for p in parts)
    if isinstance(value, sympy.Mul):
        def product(values):
            out = 1
            for p in parts:
                out *= p(values)
            return out
        return product
    if isinstance(value, sympy.Mod):
        return lambda values: parts[0](values) % parts[1](values)
    if isinstance(value, sympy.Max):
        return lambda values: max(p(values) for p in parts)
    if isinstance(value, sympy.Min):
        return lambda values: min(p(values) for p in parts)
    raise SymbolicShapeError(f"size expression {value} has no tensor_graphs form (+, -, *, //, %, max, min)")


def at_most(a: Dim, b: Dim, op) -> bool:
    """``a <= b`` at every size of the symbols the module above ``op`` records (a symbolic ``a``
    at its largest against ``b`` at its smallest); True for symbolic sizes outside a module,
    whose ranges are not known yet (codegen checks them again)."""
    if isinstance(a, int) and isinstance(b, int):
        return a <= b
    symbols = symbols_of(op)
    if not symbols:
        return True
    lows = {k: lo for k, (lo, _) in symbols.items()}
    return upper_bound((a,), symbols)[0] <= evaluate((b,), lows)[0]
