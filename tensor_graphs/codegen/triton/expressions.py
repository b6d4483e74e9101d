"""Scalar functions as Triton expressions: the GPU counterpart of `codegen.llvm.scalar`.

Two tables, data rather than if-chains (as Inductor's ``OpOverrides``):

- :data:`UNARY` / :data:`BINARY`: a function of `dialects.functions` (an activation, a
  `buf.unary {fn}`, a `buf.binary {fn}`) by name -> a template over the operand expressions::

      UNARY["gelu_tanh"].format(x="v0")  ->  "0.5 * v0 * (1.0 + _tanh(0.7978845608 * (v0 + 0.044715 * v0 * v0 * v0)))"

- :data:`ARITH`: an `arith` / `math` op of a `fused_elementwise` body -> its expression, so that
  `body_expression` turns the body into straight-line Python statements of a `@triton.jit`
  function (one variable per SSA value)::

      %s = arith.addf %a, %c : f32          v2 = v0 + v1
      %t = math.tanh %s : f32         ->    v3 = _tanh(v2)

Helpers the expressions call (``_tanh``, ``_erf``, ...) are `@triton.jit` functions in
:data:`PRELUDE`, emitted once at the top of every kernel file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import FloatAttr, IntegerAttr
from xdsl.ir import Attribute, Block, Operation

from tensor_graphs import dtypes


class TritonCodegenError(ValueError):
    """An op, a function or a type that the Triton lowering does not handle (named in the message)."""


#: helpers shared by every kernel (`tl.math` names differ between Triton versions: these do not)
PRELUDE = '''
@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    small = x * (1.0 - x * x * (1.0 / 3.0))  # |x| < 1e-2: no cancellation in 1 - e
    return tl.where(tl.abs(x) < 0.01, small, tl.where(x < 0, -t, t))


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _erf(x):
    # Abramowitz and Stegun 7.1.26 refined (max error 1.2e-7): float32's own accuracy
    a = tl.abs(x)
    t = 1.0 / (1.0 + 0.5 * a)
    y = 1.0 - t * tl.exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
    small = 1.1283791670955126 * x * (1.0 - x * x * (1.0 / 3.0))  # |x| < 1e-2: its series, no cancellation
    return tl.where(a < 0.01, small, tl.where(x < 0, -y, y))


@triton.jit
def _pow(a, b):
    # C's pow for real a, b: |a|^b, negative for a negative base and an odd integer exponent,
    # NaN for a negative base and a fractional exponent; 0^b by the sign of b
    r = tl.exp(b * tl.log(tl.abs(a)))
    whole = b == tl.floor(b)
    odd = whole & (tl.floor(b * 0.5) * 2.0 != b)
    neg = tl.where(whole, tl.where(odd, -r, r), float('nan'))
    zero = tl.where(b == 0.0, 1.0, tl.where(b > 0.0, 0.0, float('inf')))
    return tl.where(a < 0.0, neg, tl.where(a == 0.0, zero, r))
'''

#: function name -> expression template over ``{x}`` (`dialects.functions.UNARY_FUNCTIONS`)
UNARY: dict[str, str] = {
    "none": "{x}",
    "relu": "tl.maximum({x}, 0.0, propagate_nan=tl.PropagateNan.ALL)",
    "gelu": "0.5 * {x} * (1.0 + _erf({x} * 0.7071067811865476))",
    "gelu_tanh": "0.5 * {x} * (1.0 + _tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))",
    "silu": "{x} * _sigmoid({x})",
    "sigmoid": "_sigmoid({x})",
    "tanh": "_tanh({x})",
    "exp": "tl.exp({x})",
    "log": "tl.log({x})",
    "neg": "-{x}",
    "sqrt": "tl.sqrt({x})",
    "rsqrt": "1.0 / tl.sqrt({x})",
    "erf": "_erf({x})",
    "cos": "tl.cos({x})",
    "sin": "tl.sin({x})",
    "abs": "tl.abs({x})",
}

#: function name -> expression template over ``{a}``, ``{b}`` (`dialects.functions.BINARY_FUNCTIONS`)
BINARY: dict[str, str] = {
    "add": "{a} + {b}",
    "sub": "{a} - {b}",
    "mul": "{a} * {b}",
    "div": "{a} / {b}",
    "pow": "_pow({a}, {b})",
    "max": "tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)",
    "min": "tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)",
}


def unary(fn: str, x: str) -> str:
    """``fn(x)`` as a Triton expression."""
    if fn not in UNARY:
        raise TritonCodegenError(f"no Triton expression for the function '{fn}' (known: {', '.join(UNARY)})")
    return UNARY[fn].format(x=f"({x})")


def binary(fn: str, a: str, b: str) -> str:
    if fn not in BINARY:
        raise TritonCodegenError(f"no Triton expression for the function '{fn}' (known: {', '.join(BINARY)})")
    return "(" + BINARY[fn].format(a=f"({a})", b=f"({b})") + ")"


def dtype(element: Attribute) -> str:
    """The ``tl`` dtype of an element type (the one table, `tensor_graphs.dtypes`)."""
    try:
        return dtypes.of_element(element).triton
    except dtypes.DTypeError:
        raise TritonCodegenError(f"no Triton type for {element}") from None


_CMPF = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "one": "!=", "ueq": "==", "ugt": ">",
         "uge": ">=", "ult": "<", "ule": "<=", "une": "!="}
_CMPI = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=", "ult": "<", "ule": "<=",
         "ugt": ">", "uge": ">="}


def _constant(op: Operation, v: Sequence[str]) -> str:
    value = op.value  # type: ignore[attr-defined]
    if isinstance(value, FloatAttr):
        x = value.value.data
        text = repr(float(x)) if x == x and abs(x) != float("inf") else {"inf": "float('inf')", "-inf": "float('-inf')"}.get(str(x), "float('nan')")
        return f"tl.full([], {text}, {dtype(value.type)})"
    if isinstance(value, IntegerAttr):
        return f"tl.full([], {value.value.data}, {dtype(value.type)})"
    raise TritonCodegenError(f"arith.constant {value}: only scalar constants in an elementwise body")


def _cast(op: Operation, v: Sequence[str]) -> str:
    return f"({v[0]}).to({dtype(op.results[0].type)})"


def _predicate_name(op: Operation) -> str:
    """The predicate of an `arith.cmpf` / `arith.cmpi` by name (xDSL stores its number)."""
    number = op.predicate.value.data  # type: ignore[attr-defined]
    if isinstance(op, arith.CmpfOp):
        names = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true"]
    else:
        names = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    return names[number]


def _u(fn: str) -> Callable[[Operation, Sequence[str]], str]:
    return lambda op, v: unary(fn, v[0])


def _b(fn: str) -> Callable[[Operation, Sequence[str]], str]:
    return lambda op, v: binary(fn, v[0], v[1])


#: body op class -> ``(op, operand expressions) -> expression``
ARITH: dict[type[Operation], Callable[[Operation, Sequence[str]], str]] = {
    arith.ConstantOp: _constant,
    arith.AddfOp: _b("add"), arith.SubfOp: _b("sub"), arith.MulfOp: _b("mul"), arith.DivfOp: _b("div"),
    arith.MaximumfOp: _b("max"), arith.MinimumfOp: _b("min"),  # NaN-propagating, as arith's
    arith.MaxnumfOp: lambda op, v: f"tl.maximum({v[0]}, {v[1]})", arith.MinnumfOp: lambda op, v: f"tl.minimum({v[0]}, {v[1]})",
    arith.MaxSIOp: lambda op, v: f"tl.maximum({v[0]}, {v[1]})", arith.MinSIOp: lambda op, v: f"tl.minimum({v[0]}, {v[1]})",
    arith.NegfOp: _u("neg"),
    arith.AddiOp: _b("add"), arith.SubiOp: _b("sub"), arith.MuliOp: _b("mul"),
    arith.FloorDivSIOp: lambda op, v: f"tl.where(({v[0]} % {v[1]} != 0) & (({v[0]} < 0) != ({v[1]} < 0)), {v[0]} // {v[1]} - 1, {v[0]} // {v[1]})",
    arith.AndIOp: lambda op, v: f"({v[0]} & {v[1]})",
    arith.OrIOp: lambda op, v: f"({v[0]} | {v[1]})",
    arith.XOrIOp: lambda op, v: f"({v[0]} ^ {v[1]})",
    arith.ShLIOp: lambda op, v: f"({v[0]} << {v[1]})",
    arith.ShRSIOp: lambda op, v: f"({v[0]} >> {v[1]})",
    arith.CmpfOp: lambda op, v: _compare(op, v, _CMPF),
    arith.CmpiOp: lambda op, v: _compare(op, v, _CMPI),
    arith.SelectOp: lambda op, v: f"tl.where({v[0]}, {v[1]}, {v[2]})",
    arith.SIToFPOp: _cast, arith.UIToFPOp: _cast, arith.FPToSIOp: _cast, arith.ExtFOp: _cast, arith.TruncFOp: _cast,
    arith.ExtSIOp: _cast, arith.ExtUIOp: _cast, arith.TruncIOp: _cast,
    mathd.ExpOp: _u("exp"), mathd.LogOp: _u("log"), mathd.TanhOp: _u("tanh"), mathd.ErfOp: _u("erf"),
    mathd.SqrtOp: _u("sqrt"), mathd.RsqrtOp: _u("rsqrt"), mathd.AbsFOp: _u("abs"), mathd.SinOp: _u("sin"),
    mathd.CosOp: _u("cos"), mathd.PowFOp: _b("pow"),
    mathd.Log2Op: lambda op, v: f"(tl.log({v[0]}) * 1.4426950408889634)",
    mathd.Log10Op: lambda op, v: f"(tl.log({v[0]}) * 0.4342944819032518)",
    mathd.FmaOp: lambda op, v: f"({v[0]} * {v[1]} + {v[2]})",
    mathd.FloorOp: lambda op, v: f"tl.floor({v[0]})",
    mathd.CeilOp: lambda op, v: f"tl.ceil({v[0]})",
    mathd.CopySignOp: lambda op, v: f"tl.where({v[1]} < 0, -tl.abs({v[0]}), tl.abs({v[0]}))",
}


def _compare(op: Operation, v: Sequence[str], table: dict[str, str]) -> str:
    key = _predicate_name(op)
    if key == "uno":
        return f"(({v[0]} != {v[0]}) | ({v[1]} != {v[1]}))"
    if key == "ord":
        return f"(({v[0]} == {v[0]}) & ({v[1]} == {v[1]}))"
    if key not in table:
        raise TritonCodegenError(f"{op.name}: predicate {key} is not lowered to Triton")
    return f"({v[0]} {table[key]} {v[1]})"


def body_expression(body: Block, args: Sequence[str], prefix: str = "t") -> tuple[list[str], str]:
    """The statements computing a `fused_elementwise` body over the argument expressions
    ``args`` and the expression of its yielded value."""
    if len(body.args) != len(args):
        raise TritonCodegenError(f"the body takes {len(body.args)} arguments, {len(args)} given")
    names: dict = dict(zip(body.args, args))
    lines: list[str] = []
    term = body.last_op
    for i, op in enumerate(body.ops):
        if op is term:
            break
        emit = ARITH.get(type(op))
        if emit is None:
            raise TritonCodegenError(f"'{op.name}' in an elementwise body has no Triton expression")
        name = f"{prefix}{i}"
        lines.append(f"{name} = {emit(op, [names[o] for o in op.operands])}")
        names[op.results[0]] = name
    assert term is not None
    return lines, names[term.operands[0]]


# the rest of Core ATen's elementwise functions (inverse and hyperbolic trigonometry, expm1,
# log1p, rounding, ...): their expressions and helpers live in their own file
from tensor_graphs.codegen.triton.expressions_math import MATH_ARITH, MATH_PRELUDE  # noqa: E402

ARITH.update(MATH_ARITH)
PRELUDE += MATH_PRELUDE
