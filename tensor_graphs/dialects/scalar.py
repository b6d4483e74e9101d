"""The ``scalar`` dialect: scalar ops for the bodies of `tg.fused_elementwise` and
`buf.fused_elementwise` that MLIR has and xDSL's ``arith``/``math`` dialects lack. Bodies are
cloned unchanged from the tg level to the buf level, so these ops belong to neither.

```mlir
%m = scalar.remf %a, %b : f32     // MLIR's arith.remf: C's fmod (the sign of %a; NaN for %b = 0)
```
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.ir import Dialect
from xdsl.irdl import irdl_op_definition, traits_def
from xdsl.traits import Pure


@irdl_op_definition
class RemFOp(arith.FloatingPointLikeBinaryOperation):
    """C's ``fmod`` of two floats: ``lhs - rhs * trunc(lhs / rhs)`` computed exactly, with the
    sign of ``lhs``; NaN for a zero ``rhs``, ``lhs`` for an infinite one (MLIR's ``arith.remf``).
    Evaluated by NumPy's ``fmod``, emitted as LLVM's ``frem``."""

    name = "scalar.remf"
    traits = traits_def(Pure())


SCALAR = Dialect("scalar", [RemFOp])
