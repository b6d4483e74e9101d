"""Printing a module and parsing it back gives the same constants, -inf and NaN included."""

import numpy as np
import pytest
from xdsl.parser import Parser

from tensor_graphs.context import make_context

VALUES = np.array([[0.0, -np.inf], [1.5, np.nan]], np.float32)


def _values(module, op_name):
    op = next(o for o in module.walk() if o.name == op_name)
    return np.array(op.value.get_values(), np.float32)


@pytest.mark.parametrize(
    "text,op_name",
    [
        ("%c = tg.constant dense<\"0x{hex}\"> : tensor<2x2xf32>", "tg.constant"),
        ("%c = buf.constant dense<\"0x{hex}\"> : tensor<2x2xf32> : memref<2x2xf32>", "buf.constant"),
    ],
)
def test_non_finite_constants_round_trip(text, op_name):
    src = "func.func @f() {\n  " + text.format(hex=VALUES.tobytes().hex()) + "\n  func.return\n}"
    first = Parser(make_context(), src).parse_module()
    printed = str(first)
    again = Parser(make_context(), printed).parse_module()
    np.testing.assert_array_equal(_values(again, op_name), VALUES.reshape(-1))  # NaN == NaN here
    assert "0xff800000" not in printed


def test_small_finite_constants_print_readably():
    src = "func.func @f() {\n  %c = tg.constant dense<[1.0, 2.5]> : tensor<2xf32>\n  func.return\n}"
    printed = str(Parser(make_context(), src).parse_module())
    assert "dense<[1.000000e+00, 2.500000e+00]> : tensor<2xf32>" in printed
