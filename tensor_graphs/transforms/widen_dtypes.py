"""`widen-dtypes`: every aten op on float16, bfloat16 or uint8 tensors computes in a wider dtype
(float32, float32, int16: `dtypes.DType.compute`) and converts its results back, as torch's CPU
kernels compute them.

torch computes a float16/bfloat16 op in float32 ("opmath") and rounds each result it
materialises to its dtype; reductions and matrix products accumulate in float32. uint8
arithmetic wraps modulo 256, which int16 arithmetic followed by truncation to 8 bits gives too
(add, sub, mul, neg, shifts and bit operations commute with the truncation; comparisons,
division, min and max of values 0..255 are exact in int16). This pass makes that explicit, one
aten op at a time, so that every lowering and kernel below sees float32 or a signed integer and
nothing is written twice (one table of dtypes; no bf16 arithmetic and no unsigned comparison in
any kernel): the op's narrow operands are widened by a ``tg.cast`` (exact), the op is rebuilt
with the compute dtype in place of the narrow one (in its result types and in a ``dtype``
argument such as ``aten.full``'s or ``aten._to_copy``'s), and each narrow result is converted
back by a ``tg.cast``::

    %y = aten.gelu %x : (tensor<4x8xbf16>) -> tensor<4x8xbf16>

becomes::

    %w = tg.cast %x : (tensor<4x8xbf16>) -> tensor<4x8xf32>
    %g = aten.gelu %w : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %y = tg.cast %g : (tensor<4x8xf32>) -> tensor<4x8xbf16>

Rounding after every op is what eager does, so the results agree with eager's to the dtype's
last bit wherever float32 arithmetic agrees. Inside a fused kernel a round trip
``cast(cast(v, bf16), f32)`` stays (it is the rounding); `canonicalize` removes only the exact
``cast(cast(x, f32), bf16)`` of a value that was bf16 already (`canonicalize.exact_round_trip`),
so an op that merely moves values (a view, a transpose) costs no rounding. Ops that only move or
pick values keep their dtype (`MOVES_VALUES`): every kernel that moves bytes moves one- and
two-byte elements as well as four.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, TensorType, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tensor_graphs import dtypes
from tensor_graphs.dialects.aten_base import AtenOp
from tensor_graphs.dialects.tensor import CastOp, ConstantOp
from tensor_graphs.transforms.evaluate import array_to_dense, dense_to_array

#: aten ops whose results are values of their operands, moved or picked, never computed: they run
#: on float16/bfloat16 as they are (the kernels that move bytes move any element size)
MOVES_VALUES: frozenset[str] = frozenset({
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten.permute", "aten.transpose.int", "aten.t",
    "aten.expand", "aten.unsqueeze", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze",
    "aten.flatten.using_ints", "aten.contiguous", "aten.clone", "aten.alias", "aten.detach",
    "aten.slice.Tensor", "aten.select.int", "aten.cat", "aten.stack", "aten.split.Tensor",
    "aten.split_with_sizes", "aten.chunk", "aten.unbind.int", "aten.narrow", "aten.flip",
})


#: aten ops whose CPU kernel converts a 0-d operand (a Python number, a 0-d tensor) to the narrow
#: result dtype before computing: ``bf16_x - 0.7`` computes ``x - bf16(0.7)``. (mul and div read
#: the number unrounded: they are not here.)
ROUNDS_SCALAR_OPERAND: frozenset[str] = frozenset({"aten.add.Tensor", "aten.sub.Tensor", "aten.rsub.Tensor"})


#: aten ops whose result depends on the narrow dtype's own precision, so that computing in float32
#: would be wrong: left as they are, for their lowering to refuse by name
COMPUTES_IN_ITS_DTYPE: frozenset[str] = frozenset({"aten.nextafter"})


def _narrow(t: Attribute) -> dtypes.DType | None:
    """The row of ``t``'s element type when it computes in a wider dtype, else None."""
    element = getattr(t, "element_type", None)
    if not dtypes.holds_element(element):
        return None
    row = dtypes.of_element(element)
    return row if row.computes_wider else None


def _widened(t: Attribute) -> Attribute:
    """``t`` with its compute dtype in place of a narrow element type (its symbolic dims' size
    expressions kept: `dialects.symbolic`)."""
    row = _narrow(t)
    return TensorType(dtypes.of_name(row.compute).element, t.get_shape(), t.encoding) if row else t  # type: ignore[attr-defined]


def needs_widening(op: Operation) -> bool:
    """An aten op (not one that only moves values) with a float16, bfloat16 or uint8 operand or result."""
    if not isinstance(op, AtenOp) or op.name in MOVES_VALUES or op.name in COMPUTES_IN_ITS_DTYPE:
        return False
    return any(_narrow(v.type) for v in (*op.operands, *op.results))


def _widened_properties(op: Operation) -> dict[str, Attribute]:
    """``op``'s properties with a narrow ``dtype`` argument made its compute dtype, and an integer
    number against uint8 wrapped to uint8 as torch converts it (``x > -1`` is ``x > 255``,
    ``x.fmod(-3)`` is ``x.fmod(253)``)."""
    props = dict(op.properties)
    unsigned = any((row := _narrow(v.type)) is not None and row.name == "uint8" for v in (*op.operands, *op.results))
    for name, kind in type(op).ARGS:  # type: ignore[attr-defined]
        value = props.get(name)
        if kind.startswith("dtype") and isinstance(value, StringAttr) and (row := dtypes.of_name(value.data)).computes_wider:
            props[name] = StringAttr(row.compute)
        elif unsigned and kind.startswith("scalar") and isinstance(value, IntegerAttr) and value.type == i64:
            props[name] = IntegerAttr(value.value.data & 0xFF, i64)
    return props


def widen(op: Operation, rewriter: Rewriter) -> None:
    """Rebuild ``op`` in float32 between widening and rounding casts (module doc)."""
    operands: list[SSAValue] = []
    result = _narrow(op.results[0].type) if op.name in ROUNDS_SCALAR_OPERAND and op.results else None
    for v in op.operands:
        if result and result.is_float and not _narrow(v.type) and v.type.get_shape() == ():  # type: ignore[attr-defined]
            v = _round_through(v, result, rewriter, op)
        if _narrow(v.type):
            v = _converted(v, _widened(v.type).element_type, rewriter, op)  # type: ignore[attr-defined]
        operands.append(v)
    wide = type(op).create(
        operands=operands,
        result_types=[_widened(r.type) for r in op.results],
        properties=_widened_properties(op),
        attributes=dict(op.attributes),
    )
    wide.location = op.location
    rewriter.insert_op(wide, InsertPoint.before(op))
    replacements: list[SSAValue] = []
    for old, new in zip(op.results, wide.results):
        if old.type != new.type:
            cast = CastOp(new, old.type.element_type)  # type: ignore[attr-defined]
            rewriter.insert_op(cast, InsertPoint.before(op))
            new = cast.result
        new.name_hint = old.name_hint
        replacements.append(new)
    rewriter.replace_op(op, [], replacements)


def _converted(v: SSAValue, element: Attribute, rewriter: Rewriter, op: Operation) -> SSAValue:
    """``v`` converted to ``element`` before ``op``: a ``tg.cast``, or, for a ``tg.constant``, the
    constant converted here (torch's conversion, `dtypes.round_values`), so that no second
    constant-fold is needed."""
    target = TensorType(element, v.type.get_shape())  # type: ignore[attr-defined]
    if isinstance(v.owner, ConstantOp):
        values = dtypes.round_values(dense_to_array(v.owner.value), dtypes.of_element(element))
        new: Operation = ConstantOp(array_to_dense(values, target))
    else:
        new = CastOp(v, element)
    rewriter.insert_op(new, InsertPoint.before(op))
    return new.results[0]


def _round_through(v: SSAValue, narrow: dtypes.DType, rewriter: Rewriter, op: Operation) -> SSAValue:
    """``v`` (a 0-d operand) rounded to ``narrow`` (the kernel's conversion of a scalar operand):
    ``cast(cast(v, bf16), f32)`` (a constant: converted twice here)."""
    return _converted(_converted(v, narrow.element, rewriter, op), v.type.element_type, rewriter, op)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class WidenDtypesPass(ModulePass):
    """float16/bfloat16/uint8 aten ops compute in float32/float32/int16 and convert back (module doc)."""

    name = "widen-dtypes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewriter = Rewriter()
        for o in [o for o in op.walk() if needs_widening(o)]:
            widen(o, rewriter)
