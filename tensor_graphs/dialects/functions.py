"""Elementwise scalar functions, by name: the one table every level agrees on.

A unary tg op (`tg.exp`, `tg.gelu {approximate = "tanh"}`, ...), an activation fused into a
matmul epilogue or a `tg.bias_activation`, and a `buf.unary {fn = ...}` kernel all name their
function with a key of :data:`UNARY_FUNCTIONS`. The NumPy definition here is the reference
(constant folding, the tg evaluator, tests); codegen registers an emitter per key.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _np_erf(x: np.ndarray) -> np.ndarray:
    import torch  # NumPy has no erf; torch is a dependency anyway

    return torch.erf(torch.from_numpy(np.ascontiguousarray(x))).numpy()


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _np_erf(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


#: name -> NumPy reference (computes in the input's dtype).
UNARY_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "neg": np.negative,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "erf": _np_erf,
    "cos": np.cos,
    "sin": np.sin,
    "abs": np.abs,
}

#: Functions that may be fused as an activation (epilogue of a matmul, bias_activation).
#: the unary functions defined on integers too (torch's relu, neg and abs of an integer tensor
#: keep its dtype; every other function of an integer tensor computes in a float dtype)
INTEGER_UNARY: tuple[str, ...] = ("none", "relu", "neg", "abs")

ACTIVATIONS: tuple[str, ...] = ("none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")

def power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x ** y``; on integers as torch's ``powi`` (NumPy refuses negative integer exponents):
    a negative exponent gives 1 for 1, +-1 for -1 by parity, 0 otherwise."""
    x, y = np.asarray(x), np.asarray(y)
    if not (np.issubdtype(x.dtype, np.integer) and np.issubdtype(y.dtype, np.integer)) or not (y < 0).any():
        return np.power(x, y)
    negative = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 1, -1, 1), 0)).astype(x.dtype)
    return np.where(y < 0, negative, np.power(x, np.maximum(y, 0)))


#: name -> NumPy reference of binary functions (`buf.binary {fn}` and the tg binary ops).
BINARY_FUNCTIONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "pow": power,
    "max": np.maximum,
    "min": np.minimum,
}


def apply_unary(name: str, x: np.ndarray) -> np.ndarray:
    """``UNARY_FUNCTIONS[name](x)`` in float64 for accuracy, cast back to ``x``'s dtype."""
    try:
        fn = UNARY_FUNCTIONS[name]
    except KeyError:
        raise KeyError(f"unknown elementwise function '{name}' (known: {', '.join(UNARY_FUNCTIONS)})") from None
    return fn(x.astype(np.float64)).astype(x.dtype)


#: reduction kind -> NumPy reference over ``axis`` (`tg.sum`/`mean`/`amax`/`amin`/`prod`/`any`,
#: `buf.reduce {kind}`): NaN propagates through max and min, as in torch
REDUCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "prod": np.prod,
    "any": np.any,
}

#: arg-reduction kind -> NumPy reference (`tg.arg_reduce`): the first position of the largest
#: (smallest) element along ``axis``; a NaN counts as the largest and the smallest (torch's
#: argmax and argmin return the first NaN's position)
ARG_REDUCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "max": lambda x, axis: np.where(np.isnan(x).any(axis=axis), np.isnan(x).argmax(axis=axis), np.argmax(x, axis=axis))
    if np.issubdtype(x.dtype, np.floating) else np.argmax(x, axis=axis),
    "min": lambda x, axis: np.where(np.isnan(x).any(axis=axis), np.isnan(x).argmax(axis=axis), np.argmin(x, axis=axis))
    if np.issubdtype(x.dtype, np.floating) else np.argmin(x, axis=axis),
}
