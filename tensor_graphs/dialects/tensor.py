"""The `tg` dialect: tensor ops with value semantics, where all graph optimisation happens.

Primitive ops (matmul with BLAS flags, broadcasting elementwise ops, reshape, transpose,
weights and constants) plus fused ops (bias + activation). Every op verifies its shapes.

```mlir
%w = tg.weight "fc1.weight" : tensor<1024x256xf32>
%b = tg.weight "fc1.bias" : tensor<1024xf32>
%y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32} : (tensor<1x256xf32>, tensor<1024x256xf32>, tensor<1024xf32>) -> tensor<1x1024xf32>
%r = tg.relu %y : tensor<1x1024xf32>
```
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    f32,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, Region, SSAValue
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.irdl import (
    AnyAttr,
    region_def,
    var_operand_def,
    ParamAttrConstraint,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import ConstantLike, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from tensor_graphs.dialects.functions import ACTIVATIONS, INTEGER_UNARY
from tensor_graphs.dialects.symbolic import Dim, SymbolicShapeError, at_most, dims_of, format_expr, parse_expr, shaped
from tensor_graphs.dialects.shapes import (
    ATTENTION_OPERANDS,
    ShapeError,
    broadcast_shapes,
    heads_major,
    is_broadcastable_to,
    matmul_shape,
    numel,
    permute_shape,
    window_positions,
)

AnyTensor = base(TensorType)


def shape_of(value: SSAValue) -> tuple[Dim, ...]:
    """The shape of a tensor (or memref) value: ints, and for each dynamic dim its expression of
    the graph's symbols (`dialects.symbolic`)."""
    return dims_of(value.type)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise VerifyException(message)


def _shape_rule(fn, *args):
    try:
        return fn(*args)
    except ShapeError as e:
        raise VerifyException(str(e)) from None


def bool_attr(value: bool) -> BoolAttr:
    return IntegerAttr(int(value), i1)


def float_attr(value: float) -> FloatAttr:
    return FloatAttr(float(value), f32)


# --------------------------------------------------------------------------- sources


@irdl_op_definition
class WeightOp(IRDLOperation):
    """A named model parameter, bound at run time from the weight store (never inlined)."""

    name = "tg.weight"
    weight_name = prop_def(StringAttr, prop_name="name")
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, type: TensorType):
        super().__init__(properties={"name": StringAttr(name)}, result_types=[type])


#: Float constants with more elements than this print as raw hex bytes (compact and exact).
HEX_PRINT_THRESHOLD = 1024

#: Discardable attribute of an embedding (aten.embedding, tg.embedding, buf.embedding and
#: buf.packed_embedding): the name the model gives its table where that differs from the
#: weight's (a tied LM head imported as ``lm_head.weight``); the index-out-of-range error names it.
TABLE_NAME = "tg.table_name"


def print_dense(printer: Printer, value: DenseIntOrFPElementsAttr) -> None:
    """Prints ``value`` so that parsing the text gives the same bits back.

    xDSL 0.74 prints -inf/NaN inside ``dense<...>`` as ``0xff800000``, which its parser reads
    back as an integer (4286578688.0): a folded attention mask would silently change in a text
    round trip. Float constants holding a non-finite value, or large ones, are printed as
    ``dense<"0x...">`` (little-endian raw bytes), which parses exactly.
    """
    import numpy as np

    t = value.get_type()
    el = t.element_type
    width = {Float32Type: np.float32, Float64Type: np.float64}.get(type(el))
    if width is not None:
        raw = np.frombuffer(value.data.data, dtype=width)
        if raw.size > HEX_PRINT_THRESHOLD or not np.isfinite(raw).all():
            printer.print_string(f'dense<"0x{value.data.data.hex().upper()}"> : ')
            printer.print_attribute(t)
            return
    printer.print_attribute(value)


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A small constant held inline in the IR (scalars, masks, folded results)."""

    name = "tg.constant"
    _T: ClassVar = VarConstraint("T", AnyTensor)
    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (_T, AnyAttr())))
    result = result_def(_T)
    traits = traits_def(Pure(), ConstantLike())

    def __init__(self, value: DenseIntOrFPElementsAttr):
        super().__init__(properties={"value": value}, result_types=[value.type])

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        attrs = parser.parse_optional_attr_dict()
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error(f"tg.constant expects a dense<...> value, got {value}")
        op = cls(value)
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_op_attributes(self.attributes)
        printer.print_string(" ")
        print_dense(printer, self.value)


# --------------------------------------------------------------------------- BLAS


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """``alpha * op(a) @ op(b) + beta * acc`` over broadcast batch dims (cblas_sgemm's contract).

    ``op(x)`` swaps the last two dims of ``x`` when its ``transpose_*`` flag is set; ``acc`` (optional)
    broadcasts to the result.
    """

    name = "tg.matmul"
    lhs = operand_def(AnyTensor)
    rhs = operand_def(AnyTensor)
    acc = opt_operand_def(AnyTensor)
    transpose_a = prop_def(BoolAttr, default_value=bool_attr(False))
    transpose_b = prop_def(BoolAttr, default_value=bool_attr(False))
    alpha = prop_def(FloatAttr, default_value=float_attr(1.0))
    beta = prop_def(FloatAttr, default_value=float_attr(0.0))
    #: An activation (key of functions.ACTIVATIONS) applied as the GEMM output is written.
    activation = prop_def(StringAttr, default_value=StringAttr("none"))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$lhs `,` $rhs (`,` $acc^)? attr-dict `:` functional-type(operands, results)"

    def __init__(
        self,
        lhs: SSAValue,
        rhs: SSAValue,
        acc: SSAValue | None = None,
        *,
        transpose_a: bool = False,
        transpose_b: bool = False,
        alpha: float = 1.0,
        beta: float | None = None,
        activation: str = "none",
        result_type: Attribute | None = None,
    ):
        if beta is None:
            beta = 1.0 if acc is not None else 0.0
        if result_type is None:
            shape = matmul_shape(shape_of(lhs), shape_of(rhs), transpose_a, transpose_b)
            result_type = shaped(lhs.type.element_type, shape)  # type: ignore[attr-defined]
        super().__init__(
            operands=[lhs, rhs, [acc] if acc is not None else []],
            properties={
                "transpose_a": bool_attr(transpose_a),
                "transpose_b": bool_attr(transpose_b),
                "alpha": float_attr(alpha),
                "beta": float_attr(beta),
                "activation": StringAttr(activation),
            },
            result_types=[result_type],
        )

    @property
    def flags(self) -> tuple[bool, bool, float, float]:
        return (
            bool(self.transpose_a.value.data),
            bool(self.transpose_b.value.data),
            self.alpha.value.data,
            self.beta.value.data,
        )

    def verify_(self) -> None:
        ta, tb, _, _ = self.flags
        expected = _shape_rule(matmul_shape, shape_of(self.lhs), shape_of(self.rhs), ta, tb)
        got = shape_of(self.result)
        _check(got == expected, f"tg.matmul: result shape {list(got)} should be {list(expected)}")
        _check(
            self.activation.data in ACTIVATIONS,
            f"tg.matmul: unknown activation '{self.activation.data}' (expected one of {', '.join(ACTIVATIONS)})",
        )
        if self.acc is not None:
            _check(
                is_broadcastable_to(shape_of(self.acc), got),
                f"tg.matmul: accumulator shape {list(shape_of(self.acc))} does not broadcast to the result {list(got)}",
            )
        el = {self.lhs.type.element_type, self.rhs.type.element_type, self.result.type.element_type}  # type: ignore[attr-defined]
        (one,) = el if len(el) == 1 else (None,)
        _check(one in (f32, f64) or (isinstance(one, IntegerType) and one.width.data > 1),
               f"tg.matmul: operands and result of one dtype, float32, float64 or an integer, got {', '.join(map(str, el))}")


# --------------------------------------------------------------------------- elementwise


class ElementwiseBinaryOp(IRDLOperation, abc.ABC):
    """``result = lhs <op> rhs`` with NumPy broadcasting; all element types equal."""

    lhs = operand_def(AnyTensor)
    rhs = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    #: The NumPy function that defines this op (for folding and reference execution).
    NUMPY_FN: ClassVar[str]

    def __init__(self, lhs: SSAValue, rhs: SSAValue, result_type: Attribute | None = None):
        if result_type is None:
            shape = broadcast_shapes(shape_of(lhs), shape_of(rhs))
            result_type = shaped(lhs.type.element_type, shape)  # type: ignore[attr-defined]
        super().__init__(operands=[lhs, rhs], result_types=[result_type])

    def verify_(self) -> None:
        expected = _shape_rule(broadcast_shapes, shape_of(self.lhs), shape_of(self.rhs))
        got = shape_of(self.result)
        _check(got == expected, f"{self.name}: result shape {list(got)} should be the broadcast shape {list(expected)}")
        el = {v.type.element_type for v in (self.lhs, self.rhs, self.result)}  # type: ignore[attr-defined]
        _check(len(el) == 1, f"{self.name}: operand and result element types differ ({', '.join(map(str, el))})")


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    name = "tg.add"
    NUMPY_FN: ClassVar[str] = "add"


@irdl_op_definition
class SubOp(ElementwiseBinaryOp):
    name = "tg.sub"
    NUMPY_FN: ClassVar[str] = "subtract"


@irdl_op_definition
class MulOp(ElementwiseBinaryOp):
    name = "tg.mul"
    NUMPY_FN: ClassVar[str] = "multiply"


@irdl_op_definition
class DivOp(ElementwiseBinaryOp):
    name = "tg.div"
    NUMPY_FN: ClassVar[str] = "divide"


@irdl_op_definition
class PowOp(ElementwiseBinaryOp):
    name = "tg.pow"
    NUMPY_FN: ClassVar[str] = "power"


@irdl_op_definition
class MaxOp(ElementwiseBinaryOp):
    """Elementwise maximum."""

    name = "tg.max"
    NUMPY_FN: ClassVar[str] = "maximum"


@irdl_op_definition
class MinOp(ElementwiseBinaryOp):
    """Elementwise minimum."""

    name = "tg.min"
    NUMPY_FN: ClassVar[str] = "minimum"


@irdl_op_definition
class SelectOp(IRDLOperation):
    """``cond ? on_true : on_false`` elementwise with broadcasting (torch.where, masked_fill)."""

    name = "tg.select"
    cond = operand_def(AnyTensor)
    on_true = operand_def(AnyTensor)
    on_false = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    assembly_format = "$cond `,` $on_true `,` $on_false attr-dict `:` functional-type(operands, results)"

    def __init__(self, cond: SSAValue, on_true: SSAValue, on_false: SSAValue):
        shape = broadcast_shapes(shape_of(cond), shape_of(on_true), shape_of(on_false))
        super().__init__(
            operands=[cond, on_true, on_false],
            result_types=[shaped(on_true.type.element_type, shape)],  # type: ignore[attr-defined]
        )

    def verify_(self) -> None:
        expected = _shape_rule(broadcast_shapes, shape_of(self.cond), shape_of(self.on_true), shape_of(self.on_false))
        _check(shape_of(self.result) == expected, f"tg.select: result shape {list(shape_of(self.result))} should be {list(expected)}")
        _check(self.cond.type.element_type == i1, "tg.select: the condition must be a tensor of i1")  # type: ignore[attr-defined]
        el = {self.on_true.type.element_type, self.on_false.type.element_type, self.result.type.element_type}  # type: ignore[attr-defined]
        _check(len(el) == 1, "tg.select: both branches and the result must have one element type")


@irdl_op_definition
class CastOp(IRDLOperation):
    """Converts the element type (torch's ``to(dtype)``); the shape stays."""

    name = "tg.cast"
    input = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, element_type: Attribute):
        super().__init__(operands=[input], result_types=[shaped(element_type, shape_of(input))])

    def verify_(self) -> None:
        _check(shape_of(self.input) == shape_of(self.result), "tg.cast: the shape must not change")


@irdl_op_definition
class IotaOp(IRDLOperation):
    """``result[i] = start + i * step`` (torch.arange) along its one dim, whose size may be a
    symbol's (an arange up to a dynamic size, which constant-fold cannot evaluate).

    ```mlir
    %p = tg.iota {start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : tensor<?xi64, ["seq"]>
    ```
    """

    name = "tg.iota"
    start = prop_def(FloatAttr[Float64Type])
    step = prop_def(FloatAttr[Float64Type])
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, start: float, step: float, type: TensorType):
        super().__init__(properties={"start": FloatAttr(float(start), f64), "step": FloatAttr(float(step), f64)},
                         result_types=[type])

    def verify_(self) -> None:
        _check(len(shape_of(self.result)) == 1, f"tg.iota: the result must be 1-D, got {self.result.type}")


@irdl_op_definition
class SizeOp(IRDLOperation):
    """A rank-0 i64 tensor holding a size that is an expression of the size symbols
    (`dialects.symbolic`): what an elementwise body compares an index with when the dim it
    indexes has a symbolic size.

    ```mlir
    %n = tg.size {size = "seq"} : tensor<i64>
    ```
    """

    name = "tg.size"
    size = prop_def(StringAttr)
    result = result_def(TensorType.constr(i64))
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, size):
        super().__init__(properties={"size": StringAttr(format_expr(size))}, result_types=[TensorType(i64, [])])

    def verify_(self) -> None:
        try:
            parse_expr(self.size.data)
        except ValueError as e:
            raise VerifyException(f"tg.size: {e}") from None
        _check(shape_of(self.result) == (), f"tg.size: the result must be rank 0, got {self.result.type}")


@irdl_op_definition
class CheckNonzeroOp(IRDLOperation):
    """``result = input``, once no element of it is zero: the run-time check before an integer
    division by a divisor computed at run time (torch raises ZeroDivisionError; a compiled
    division would trap or give garbage). A zero is a run-time error that names it.

    ```mlir
    %d = tg.check_nonzero %b : tensor<4x6xi64>
    ```
    """

    name = "tg.check_nonzero"
    T: ClassVar = VarConstraint("T", AnyTensor)
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($result)"

    def __init__(self, input: SSAValue):
        super().__init__(operands=[input], result_types=[input.type])


class ElementwiseUnaryOp(IRDLOperation, abc.ABC):
    """``result = f(input)`` elementwise; same type in and out."""

    T: ClassVar = VarConstraint("T", AnyTensor)
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($result)"

    #: Key of functions.UNARY_FUNCTIONS this op computes.
    FN: ClassVar[str]

    def __init__(self, input: SSAValue):
        super().__init__(operands=[input], result_types=[input.type])

    @property
    def fn(self) -> str:
        return self.FN

    def verify_(self) -> None:
        el = self.input.type.element_type  # type: ignore[attr-defined]
        _check(not isinstance(el, IntegerType) or self.fn in INTEGER_UNARY,
               f"{self.name}: '{self.fn}' of integers is not defined (torch computes it in floats), got {self.input.type}")


def _unary(op_name: str, fn: str, doc: str) -> type[ElementwiseUnaryOp]:
    cls = type(
        op_name.split(".")[1].title().replace("_", "") + "Op",
        (ElementwiseUnaryOp,),
        {"name": op_name, "FN": fn, "__doc__": doc, "__module__": __name__},
    )
    cls.__annotations__ = {"FN": ClassVar[str]}
    return irdl_op_definition(cls)


ReluOp = _unary("tg.relu", "relu", "max(x, 0)")
ExpOp = _unary("tg.exp", "exp", "e^x")
LogOp = _unary("tg.log", "log", "natural logarithm")
TanhOp = _unary("tg.tanh", "tanh", "hyperbolic tangent")
NegOp = _unary("tg.neg", "neg", "-x")
SqrtOp = _unary("tg.sqrt", "sqrt", "square root")
RsqrtOp = _unary("tg.rsqrt", "rsqrt", "1 / sqrt(x)")
ErfOp = _unary("tg.erf", "erf", "error function")
SigmoidOp = _unary("tg.sigmoid", "sigmoid", "1 / (1 + e^-x)")
SiluOp = _unary("tg.silu", "silu", "x * sigmoid(x)")
CosOp = _unary("tg.cos", "cos", "cosine")
SinOp = _unary("tg.sin", "sin", "sine")
AbsOp = _unary("tg.abs", "abs", "|x|")

#: unary tg op class by function name
UNARY_OPS: dict[str, type[ElementwiseUnaryOp]] = {
    c.FN: c for c in (ReluOp, ExpOp, LogOp, TanhOp, NegOp, SqrtOp, RsqrtOp, ErfOp, SigmoidOp, SiluOp, CosOp, SinOp, AbsOp)
}


@irdl_op_definition
class GeluOp(IRDLOperation):
    """GELU: ``x * Phi(x)`` (erf form) or its tanh approximation (``approximate = "tanh"``)."""

    name = "tg.gelu"
    T: ClassVar = VarConstraint("T", AnyTensor)
    input = operand_def(T)
    approximate = prop_def(StringAttr, default_value=StringAttr("none"))
    result = result_def(T)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($result)"

    def __init__(self, input: SSAValue, approximate: str = "none"):
        super().__init__(operands=[input], properties={"approximate": StringAttr(approximate)}, result_types=[input.type])

    @property
    def fn(self) -> str:
        return "gelu_tanh" if self.approximate.data == "tanh" else "gelu"

    def verify_(self) -> None:
        _check(self.approximate.data in ("none", "tanh"), f"tg.gelu: approximate must be 'none' or 'tanh', got '{self.approximate.data}'")


# --------------------------------------------------------------------------- data movement


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """Same elements, new shape (row-major). Zero-copy once buffers exist."""

    name = "tg.reshape"
    input = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, shape: tuple[int, ...]):
        super().__init__(operands=[input], result_types=[shaped(input.type.element_type, shape)])  # type: ignore[attr-defined]

    def verify_(self) -> None:
        a, b = shape_of(self.input), shape_of(self.result)
        _check(numel(a) == numel(b), f"tg.reshape: cannot reshape {list(a)} ({numel(a)} elements) to {list(b)} ({numel(b)} elements)")
        _check(
            self.input.type.element_type == self.result.type.element_type,  # type: ignore[attr-defined]
            "tg.reshape: element type must not change",
        )


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """``result[i_perm[0], ...] = input[i_0, ...]``: ``result.shape[d] = input.shape[perm[d]]``.

    Covers aten.t, aten.transpose and aten.permute.
    """

    name = "tg.transpose"
    input = operand_def(AnyTensor)
    perm = prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, perm: tuple[int, ...]):
        shape = permute_shape(shape_of(input), perm)
        super().__init__(
            operands=[input],
            properties={"perm": DenseArrayBase.from_list(i64, list(perm))},
            result_types=[shaped(input.type.element_type, shape)],  # type: ignore[attr-defined]
        )

    @property
    def permutation(self) -> tuple[int, ...]:
        return tuple(self.perm.get_values())

    def verify_(self) -> None:
        expected = _shape_rule(permute_shape, shape_of(self.input), self.permutation)
        got = shape_of(self.result)
        _check(got == expected, f"tg.transpose: result shape {list(got)} should be {list(expected)} for perm {list(self.permutation)}")


@irdl_op_definition
class SliceOp(IRDLOperation):
    """``result = input[..., start : start + step * size : step, ...]`` along ``dim``.

    The result type gives the size. Covers aten.slice, narrow, select (with a reshape), split.
    Once buffers exist, a slice that is contiguous in memory becomes a zero-copy view.
    """

    name = "tg.slice"
    input = operand_def(AnyTensor)
    dim = prop_def(IntegerAttr[i64])
    start = prop_def(IntegerAttr[i64])
    step = prop_def(IntegerAttr[i64], default_value=IntegerAttr(1, i64))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, dim: int, start: int, size: int, step: int = 1):
        shape = list(shape_of(input))
        shape[dim] = size
        super().__init__(
            operands=[input],
            properties={"dim": IntegerAttr(dim, i64), "start": IntegerAttr(start, i64), "step": IntegerAttr(step, i64)},
            result_types=[shaped(input.type.element_type, shape)],  # type: ignore[attr-defined]
        )

    @property
    def bounds(self) -> tuple[int, int, int]:
        """(dim, start, step)"""
        return self.dim.value.data, self.start.value.data, self.step.value.data

    def verify_(self) -> None:
        dim, start, step = self.bounds
        a, r = shape_of(self.input), shape_of(self.result)
        _check(0 <= dim < len(a), f"tg.slice: dim {dim} out of range for rank {len(a)}")
        _check(step >= 1, f"tg.slice: step must be >= 1, got {step}")
        _check(len(a) == len(r) and all(x == y for i, (x, y) in enumerate(zip(a, r)) if i != dim),
               f"tg.slice: result {list(r)} may differ from the input {list(a)} only in dim {dim}")
        last = start + step * (r[dim] - 1) if r[dim] else start
        _check(0 <= start and (r[dim] == 0 or last < a[dim]),
               f"tg.slice: [{start}:{start + step * r[dim]}:{step}] is out of bounds for dim {dim} of size {a[dim]}")


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenation along ``dim``."""

    name = "tg.concat"
    inputs = var_operand_def(AnyTensor)
    dim = prop_def(IntegerAttr[i64])
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def __init__(self, inputs: list[SSAValue], dim: int):
        shape = list(shape_of(inputs[0]))
        shape[dim] = sum(shape_of(v)[dim] for v in inputs)
        super().__init__(
            operands=[inputs], properties={"dim": IntegerAttr(dim, i64)},
            result_types=[shaped(inputs[0].type.element_type, shape)],  # type: ignore[attr-defined]
        )

    def verify_(self) -> None:
        dim = self.dim.value.data
        shapes = [shape_of(v) for v in self.inputs]
        _check(len(shapes) >= 1, "tg.concat: needs at least one input")
        r = shape_of(self.result)
        _check(0 <= dim < len(r), f"tg.concat: dim {dim} out of range for rank {len(r)}")
        for s_ in shapes:
            _check(len(s_) == len(r) and all(x == y for i, (x, y) in enumerate(zip(s_, r)) if i != dim),
                   f"tg.concat: input {list(s_)} does not match the result {list(r)} outside dim {dim}")
        _check(sum(s_[dim] for s_ in shapes) == r[dim], f"tg.concat: sizes along dim {dim} do not add up to {r[dim]}")


@irdl_op_definition
class BroadcastOp(IRDLOperation):
    """Materialises NumPy broadcasting of ``input`` to the result shape (aten.expand)."""

    name = "tg.broadcast"
    input = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, shape: tuple[int, ...]):
        super().__init__(operands=[input], result_types=[shaped(input.type.element_type, shape)])  # type: ignore[attr-defined]

    def verify_(self) -> None:
        _check(is_broadcastable_to(shape_of(self.input), shape_of(self.result)),
               f"tg.broadcast: {list(shape_of(self.input))} does not broadcast to {list(shape_of(self.result))}")


@irdl_op_definition
class EmbeddingOp(IRDLOperation):
    """``result[..., :] = table[indices[...], :]``: a row gather (indices are i64 or i32)."""

    name = "tg.embedding"
    table = operand_def(AnyTensor)
    indices = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    assembly_format = "$table `,` $indices attr-dict `:` functional-type(operands, results)"

    def __init__(self, table: SSAValue, indices: SSAValue):
        shape = (*shape_of(indices), shape_of(table)[1])
        super().__init__(operands=[table, indices], result_types=[shaped(table.type.element_type, shape)])  # type: ignore[attr-defined]

    def verify_(self) -> None:
        t = shape_of(self.table)
        _check(len(t) == 2, f"tg.embedding: the table must be rank 2, got {list(t)}")
        _check(isinstance(self.indices.type.element_type, IntegerType), "tg.embedding: indices must be integers")  # type: ignore[attr-defined]
        expected = (*shape_of(self.indices), t[1])
        _check(shape_of(self.result) == expected, f"tg.embedding: result shape {list(shape_of(self.result))} should be {list(expected)}")


@irdl_op_definition
class TakeOp(IRDLOperation):
    """``result.flat[i] = input.flat[offsets.flat[i]]``: a gather by flat element offsets (i64, of
    the result's shape). Advanced indexing (``x[idx, :, idx2]``, a padding mask read as
    ``mask[batch_idx, kv_idx]``) and ``torch.gather`` become this: the frontend computes the
    offsets, as a constant when the indices are, else with tg arithmetic on the run-time
    indices. An offset outside ``[0, numel(input))`` is a run-time error, never a stray read."""

    name = "tg.take"
    input = operand_def(AnyTensor)
    offsets = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    assembly_format = "$input `,` $offsets attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, offsets: SSAValue):
        result = shaped(input.type.element_type, shape_of(offsets))  # type: ignore[attr-defined]
        super().__init__(operands=[input, offsets], result_types=[result])

    def verify_(self) -> None:
        _check(self.offsets.type.element_type == i64, "tg.take: offsets must be a tensor of i64")  # type: ignore[attr-defined]
        _check(shape_of(self.result) == shape_of(self.offsets),
               f"tg.take: result shape {list(shape_of(self.result))} should be the offsets' {list(shape_of(self.offsets))}")
        _check(self.result.type.element_type == self.input.type.element_type,  # type: ignore[attr-defined]
               "tg.take: the result has the input's element type")


@irdl_op_definition
class Im2colOp(IRDLOperation):
    """The sliding windows of a 2-D convolution or pooling, as columns (im2col, transposed):
    ``result[n, c, i, j, oh, ow] = input[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]``, or
    ``pad_value`` where that falls outside the input.

    Reshaped to ``[N, C*KH*KW, OH*OW]`` (free), it is the rhs of the GEMM
    ``weight[Cout, C*KH*KW] @ cols`` whose result is the convolution in NCHW; a reduction over
    ``(i, j)`` is a pooling (``pad_value = -inf`` for max pooling). A 1x1 kernel with stride 1
    and no padding needs no im2col: its input already is that matrix.

    ```mlir
    %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x8x5x5xf32>) -> tensor<1x8x3x3x5x5xf32>
    ```
    ``OH``, ``OW`` come from the result type: torch's window count, or one more (``ceil_mode``).
    """

    name = "tg.im2col"
    input = operand_def(AnyTensor)
    kernel = prop_def(DenseArrayBase.constr(i64))
    stride = prop_def(DenseArrayBase.constr(i64))
    padding = prop_def(DenseArrayBase.constr(i64))
    dilation = prop_def(DenseArrayBase.constr(i64))
    pad_value = prop_def(FloatAttr, default_value=float_attr(0.0))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(
        self,
        input: SSAValue,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
        pad_value: float = 0.0,
        ceil_mode: bool = False,
    ):
        n, c, h, w = shape_of(input)
        if not all(isinstance(x, int) for x in (c, h, w)):
            raise SymbolicShapeError(
                f"a convolution's or pooling's input [{', '.join(format_expr(x) for x in (n, c, h, w))}] has a symbolic "
                "channel or spatial size: its windows are laid out at compile time, so only the batch (dim 0) may be "
                "dynamic; give those dims a static size (drop them from dynamic_shapes)")
        positions = tuple(
            window_positions(size, k, s, p, d, ceil_mode) for size, k, s, p, d in zip((h, w), kernel, stride, padding, dilation)
        )
        super().__init__(
            operands=[input],
            properties={
                name: DenseArrayBase.from_list(i64, list(v))
                for name, v in (("kernel", kernel), ("stride", stride), ("padding", padding), ("dilation", dilation))
            }
            | {"pad_value": float_attr(pad_value)},
            result_types=[shaped(input.type.element_type, (n, c, *kernel, *positions))],  # type: ignore[attr-defined]
        )

    @property
    def window(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(kernel, stride, padding, dilation), two entries each."""
        return tuple(tuple(a.get_values()) for a in (self.kernel, self.stride, self.padding, self.dilation))  # type: ignore[return-value]

    def verify_(self) -> None:
        shape = shape_of(self.input)
        _check(len(shape) == 4, f"tg.im2col: the input must be NCHW (rank 4), got {list(shape)}")
        kernel, stride, padding, dilation = self.window
        _check(all(len(v) == 2 for v in self.window), "tg.im2col: kernel, stride, padding and dilation take two entries each")
        _check(min(kernel) >= 1 and min(stride) >= 1 and min(dilation) >= 1 and min(padding) >= 0,
               "tg.im2col: kernel, stride and dilation must be >= 1, padding >= 0")
        result = shape_of(self.result)
        _check(len(result) == 6 and result[:4] == (*shape[:2], *kernel),
               f"tg.im2col: result shape {list(result)} should start {[*shape[:2], *kernel]}")
        for name, size, got, k, s, p, d in zip(("height", "width"), shape[2:], result[4:], kernel, stride, padding, dilation):
            options = {_shape_rule(window_positions, size, k, s, p, d, ceil) for ceil in (False, True)}
            _check(got in options, f"tg.im2col: {got} window positions along the {name} should be {' or '.join(map(str, sorted(options)))}")


@irdl_op_definition
class WinogradConvOp(IRDLOperation):
    """A stride-1 3x3 convolution of a batch of images by Winograd's minimal filtering, with a
    GEMM's epilogue: ``act(alpha * conv(input, weight) + beta * acc)``.

    ``input`` [N, C, H, W] (N may be a size symbol), ``weight`` [Cout, C, 3, 3] (a weight: its
    transform `dialects.winograd.transform_weight` is made once, when the graph is loaded),
    ``acc`` (a bias ``[Cout, 1, 1]``, a residual, ...) broadcasts to the result [N, Cout, OH, OW]
    (OH = H + 2 ph - 2). ``tile`` is the output tile side ``m`` of F(m x m, 3 x 3) (`dialects.winograd`). The
    `winograd-convolution` pass makes it from a convolution's im2col + GEMM.

    ```mlir
    %y = tg.winograd_conv %x, %w, %b {padding = array<i64: 1, 1>, tile = 2 : i64, activation = "relu"} : (tensor<1x64x56x56xf32>, tensor<64x64x3x3xf32>, tensor<64x1x1xf32>) -> tensor<1x64x56x56xf32>
    ```
    """

    name = "tg.winograd_conv"
    input = operand_def(AnyTensor)
    weight = operand_def(AnyTensor)
    acc = opt_operand_def(AnyTensor)
    padding = prop_def(DenseArrayBase.constr(i64))
    tile = prop_def(IntegerAttr[i64], default_value=IntegerAttr(2, i64))
    alpha = prop_def(FloatAttr, default_value=float_attr(1.0))
    beta = prop_def(FloatAttr, default_value=float_attr(0.0))
    activation = prop_def(StringAttr, default_value=StringAttr("none"))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input `,` $weight (`,` $acc^)? attr-dict `:` functional-type(operands, results)"

    def __init__(
        self,
        input: SSAValue,
        weight: SSAValue,
        acc: SSAValue | None,
        padding: tuple[int, int],
        *,
        tile: int = 2,
        alpha: float = 1.0,
        beta: float | None = None,
        activation: str = "none",
    ):
        if beta is None:
            beta = 1.0 if acc is not None else 0.0
        n, _, h, w = shape_of(input)
        cout = shape_of(weight)[0]
        super().__init__(
            operands=[input, weight, [acc] if acc is not None else []],
            properties={
                "padding": DenseArrayBase.from_list(i64, list(padding)),
                "tile": IntegerAttr(tile, i64),
                "alpha": float_attr(alpha),
                "beta": float_attr(beta),
                "activation": StringAttr(activation),
            },
            result_types=[shaped(input.type.element_type, (n, cout, h + 2 * padding[0] - 2, w + 2 * padding[1] - 2))],  # type: ignore[attr-defined]
        )

    @property
    def pads(self) -> tuple[int, int]:
        return tuple(self.padding.get_values())  # type: ignore[return-value]

    @property
    def flags(self) -> tuple[float, float]:
        return self.alpha.value.data, self.beta.value.data

    def verify_(self) -> None:
        from tensor_graphs.dialects.winograd import TILES

        x, w, got = shape_of(self.input), shape_of(self.weight), shape_of(self.result)
        _check(len(x) == 4, f"tg.winograd_conv: the input must be NCHW images [N, C, H, W], got {list(x)}")
        _check(len(w) == 4 and w[1] == x[1] and w[2:] == (3, 3),
               f"tg.winograd_conv: the weight must be [Cout, {x[1]}, 3, 3], got {list(w)}")
        pads = self.pads
        _check(len(pads) == 2 and min(pads) >= 0, f"tg.winograd_conv: padding takes two entries >= 0, got {list(pads)}")
        expected = (x[0], w[0], x[2] + 2 * pads[0] - 2, x[3] + 2 * pads[1] - 2)
        _check(got == expected and min(expected[2:]) >= 1, f"tg.winograd_conv: result shape {list(got)} should be {list(expected)}")
        _check(self.tile.value.data in TILES, f"tg.winograd_conv: tile {self.tile.value.data} is not one of {sorted(TILES)}")
        _check(self.activation.data in ACTIVATIONS,
               f"tg.winograd_conv: unknown activation '{self.activation.data}' (expected one of {', '.join(ACTIVATIONS)})")
        if self.acc is not None:
            _check(is_broadcastable_to(shape_of(self.acc), got),
                   f"tg.winograd_conv: accumulator shape {list(shape_of(self.acc))} does not broadcast to the result {list(got)}")
        els = {v.type.element_type for v in (self.input, self.weight, self.result)}  # type: ignore[attr-defined]
        _check(els == {f32}, "tg.winograd_conv: only f32 is supported")


# --------------------------------------------------------------------------- reductions and normalisations


class ReduceOp(IRDLOperation, abc.ABC):
    """Reduces ``input`` over ``dims`` (sorted, non-negative); ``keepdim`` keeps them as size 1."""

    input = operand_def(AnyTensor)
    dims = prop_def(DenseArrayBase.constr(i64))
    keepdim = prop_def(BoolAttr, default_value=bool_attr(False))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    #: "sum", "mean" or "max"
    KIND: ClassVar[str]

    def __init__(self, input: SSAValue, dims: tuple[int, ...], keepdim: bool = False):
        shape = reduced_shape(shape_of(input), dims, keepdim)
        super().__init__(
            operands=[input],
            properties={"dims": DenseArrayBase.from_list(i64, sorted(dims)), "keepdim": bool_attr(keepdim)},
            result_types=[shaped(input.type.element_type, shape)],  # type: ignore[attr-defined]
        )

    @property
    def reduce_dims(self) -> tuple[int, ...]:
        return tuple(self.dims.get_values())

    @property
    def keeps_dims(self) -> bool:
        return bool(self.keepdim.value.data)

    def verify_(self) -> None:
        a = shape_of(self.input)
        dims = self.reduce_dims
        _check(list(dims) == sorted(set(dims)) and all(0 <= d < len(a) for d in dims),
               f"{self.name}: dims {list(dims)} must be sorted, unique and within rank {len(a)}")
        expected = reduced_shape(a, dims, self.keeps_dims)
        _check(shape_of(self.result) == expected, f"{self.name}: result shape {list(shape_of(self.result))} should be {list(expected)}")


def reduced_shape(shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


@irdl_op_definition
class SumOp(ReduceOp):
    name = "tg.sum"
    KIND: ClassVar[str] = "sum"


@irdl_op_definition
class MeanOp(ReduceOp):
    name = "tg.mean"
    KIND: ClassVar[str] = "mean"


@irdl_op_definition
class AmaxOp(ReduceOp):
    name = "tg.amax"
    KIND: ClassVar[str] = "max"


@irdl_op_definition
class AminOp(ReduceOp):
    name = "tg.amin"
    KIND: ClassVar[str] = "min"


@irdl_op_definition
class ProdOp(ReduceOp):
    name = "tg.prod"
    KIND: ClassVar[str] = "prod"


@irdl_op_definition
class AnyOp(ReduceOp):
    """Whether any element over ``dims`` is true: an ``i1`` input (the lowering compares other
    types with zero first)."""

    name = "tg.any"
    KIND: ClassVar[str] = "any"

    def verify_(self) -> None:
        super().verify_()
        _check(self.input.type.element_type == i1, f"tg.any: the input holds i1, got {self.input.type}")  # type: ignore[attr-defined]


#: reduction op class by kind (`functions.REDUCTIONS`)
REDUCE_OPS: dict[str, type[ReduceOp]] = {c.KIND: c for c in (SumOp, MeanOp, AmaxOp, AminOp, ProdOp, AnyOp)}


@irdl_op_definition
class ArgReduceOp(IRDLOperation):
    """The first position (i64) of the largest (``kind = "max"``) or smallest (``"min"``) element
    along ``dim``, a NaN counting as both (torch.argmax / argmin); ``keepdim`` keeps ``dim`` as
    size 1.

    ```mlir
    %i = tg.arg_reduce %x {kind = "max", dim = 1 : i64} : (tensor<4x7xf32>) -> tensor<4xi64>
    ```
    """

    name = "tg.arg_reduce"
    input = operand_def(AnyTensor)
    kind = prop_def(StringAttr)
    dim = prop_def(IntegerAttr[i64])
    keepdim = prop_def(BoolAttr, default_value=bool_attr(False))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, kind: str, dim: int, keepdim: bool = False):
        shape = reduced_shape(shape_of(input), (dim,), keepdim)
        super().__init__(
            operands=[input],
            properties={"kind": StringAttr(kind), "dim": IntegerAttr(dim, i64), "keepdim": bool_attr(keepdim)},
            result_types=[shaped(i64, shape)],
        )

    def verify_(self) -> None:
        from tensor_graphs.dialects.functions import ARG_REDUCTIONS

        x, d = shape_of(self.input), self.dim.value.data
        _check(self.kind.data in ARG_REDUCTIONS, f"tg.arg_reduce: kind must be one of {', '.join(ARG_REDUCTIONS)}, got '{self.kind.data}'")
        _check(0 <= d < len(x) and x[d] > 0, f"tg.arg_reduce: dim {d} must be a non-empty dim of {list(x)}")
        expected = reduced_shape(x, (d,), bool(self.keepdim.value.data))
        _check(shape_of(self.result) == expected, f"tg.arg_reduce: result shape {list(shape_of(self.result))} should be {list(expected)}")
        _check(self.result.type.element_type == i64, "tg.arg_reduce: the result holds i64 positions")  # type: ignore[attr-defined]


class _AlongDimOp(IRDLOperation, abc.ABC):
    """Same type in and out, computed along one ``dim`` (softmax, log_softmax, cumsum)."""

    T: ClassVar = VarConstraint("T", AnyTensor)
    input = operand_def(T)
    dim = prop_def(IntegerAttr[i64])
    result = result_def(T)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($result)"

    def __init__(self, input: SSAValue, dim: int):
        super().__init__(operands=[input], properties={"dim": IntegerAttr(dim, i64)}, result_types=[input.type])

    def verify_(self) -> None:
        d, r = self.dim.value.data, len(shape_of(self.input))
        _check(0 <= d < r, f"{self.name}: dim {d} out of range for rank {r}")


@irdl_op_definition
class SoftmaxOp(_AlongDimOp):
    """``exp(x - max) / sum(exp(x - max))`` along ``dim``."""

    name = "tg.softmax"


@irdl_op_definition
class LogSoftmaxOp(_AlongDimOp):
    """``x - max - log(sum(exp(x - max)))`` along ``dim``."""

    name = "tg.log_softmax"


#: the running reductions of `tg.cumsum`/`buf.cumsum` (``reduce``): torch's cumsum, cumprod,
#: the values of cummax/cummin (NaN propagates) and logcumsumexp
SCAN_REDUCTIONS: tuple[str, ...] = ("sum", "prod", "max", "min", "logsumexp")


@irdl_op_definition
class CumsumOp(_AlongDimOp):
    """Running reduction along ``dim``: ``result[..., i, ...] = reduce(input[..., :i+1, ...])``,
    in order (torch.cumsum; position ids from a padding mask). ``reduce`` (:data:`SCAN_REDUCTIONS`)
    is ``sum`` by default; ``prod`` (cumprod), ``max``/``min`` (the values of cummax/cummin, NaN
    propagating) and ``logsumexp`` (``log(exp(a) + exp(b))`` without overflow: logcumsumexp).
    Same type in and out: the frontend casts to torch's result dtype first.

    ```mlir
    %c = tg.cumsum %x {dim = 1 : i64} : tensor<2x7xi64>
    %m = tg.cumsum %x {dim = 1 : i64, reduce = "max"} : tensor<2x7xf32>
    ```
    """

    name = "tg.cumsum"
    reduce = prop_def(StringAttr, default_value=StringAttr("sum"))

    def __init__(self, input: SSAValue, dim: int, reduce: str = "sum"):
        props: dict[str, Attribute] = {"dim": IntegerAttr(dim, i64)}
        if reduce != "sum":
            props["reduce"] = StringAttr(reduce)
        IRDLOperation.__init__(self, operands=[input], properties=props, result_types=[input.type])

    def verify_(self) -> None:
        super().verify_()
        _check(self.reduce.data in SCAN_REDUCTIONS, f"tg.cumsum: reduce must be one of {', '.join(SCAN_REDUCTIONS)}, got '{self.reduce.data}'")


# --------------------------------------------------------------------------- mixture of experts


@irdl_op_definition
class ArgTopkOp(IRDLOperation):
    """The positions (i64) of the ``k`` largest (``largest``) or smallest elements along ``dim``,
    best first: the result is the input's shape with ``k`` along ``dim``. Ties go to the lower
    position and NaN ranks above every number (torch's stable sort), so ``k`` = the dim's size
    is a stable argsort. torch.topk and torch.sort are this plus a `tg.take` of the values.

    ```mlir
    %i = tg.argtopk %p {k = 2 : i64, dim = 1 : i64} : (tensor<9x8xf32>) -> tensor<9x2xi64>
    ```
    """

    name = "tg.argtopk"
    input = operand_def(AnyTensor)
    k = prop_def(IntegerAttr[i64])
    dim = prop_def(IntegerAttr[i64])
    largest = prop_def(BoolAttr, default_value=bool_attr(True))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, k: int, dim: int, largest: bool = True):
        shape = list(shape_of(input))
        shape[dim] = k
        super().__init__(
            operands=[input],
            properties={"k": IntegerAttr(k, i64), "dim": IntegerAttr(dim, i64), "largest": bool_attr(largest)},
            result_types=[shaped(i64, shape)],
        )

    def verify_(self) -> None:
        x, r, d, k = shape_of(self.input), shape_of(self.result), self.dim.value.data, self.k.value.data
        _check(0 <= d < len(x), f"tg.argtopk: dim {d} out of range for rank {len(x)}")
        _check(0 <= k <= x[d], f"tg.argtopk: k = {k} is not within [0, {x[d]}] (the size of dim {d})")
        expected = tuple(k if i == d else n for i, n in enumerate(x))
        _check(r == expected, f"tg.argtopk: result shape {list(r)} should be {list(expected)}")
        _check(self.result.type.element_type == i64, "tg.argtopk: the result holds i64 positions")  # type: ignore[attr-defined]
        _check(isinstance(self.input.type.element_type, IntegerType | Float32Type) and self.input.type.element_type != i1,  # type: ignore[attr-defined]
               f"tg.argtopk: the input must hold f32 or integers, got {self.input.type}")


#: how `tg.put`/`buf.put` with ``accumulate`` combine a value with the one there -> the binary
#: function (`functions.BINARY_FUNCTIONS`) that does it
PUT_REDUCTIONS: dict[str, str] = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


@irdl_op_definition
class PutOp(IRDLOperation):
    """``result = input``, then ``result.flat[offsets.flat[i]] = values.flat[i]`` for every i in
    order: the scatter that is `tg.take`'s inverse (``x[idx] = v``, ``index_put``). With
    ``accumulate`` each value is combined with what is there by ``reduce`` (:data:`PUT_REDUCTIONS`:
    ``sum``, the default, ``prod``, ``amax``, ``amin``; NaN propagates through ``amax``/``amin``
    as in torch's ``scatter_reduce``). With a repeated offset the last write wins (or the values
    combine); an offset outside ``[0, numel(input))`` is a run-time error, never a stray write.

    ```mlir
    %r = tg.put %x, %o, %v : (tensor<36xi64>, tensor<36xi64>, tensor<36xi64>) -> tensor<36xi64>
    %m = tg.put %x, %o, %v {accumulate = true, reduce = "amax"} : (tensor<36xf32>, tensor<36xi64>, tensor<36xf32>) -> tensor<36xf32>
    ```
    """

    name = "tg.put"
    input = operand_def(AnyTensor)
    offsets = operand_def(AnyTensor)
    values = operand_def(AnyTensor)
    accumulate = prop_def(BoolAttr, default_value=bool_attr(False))
    reduce = prop_def(StringAttr, default_value=StringAttr("sum"))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input `,` $offsets `,` $values attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, offsets: SSAValue, values: SSAValue, accumulate: bool = False, reduce: str = "sum"):
        props: dict[str, Attribute] = {"accumulate": bool_attr(True)} if accumulate else {}
        if reduce != "sum":
            props["reduce"] = StringAttr(reduce)
        super().__init__(operands=[input, offsets, values], properties=props, result_types=[input.type])

    def verify_(self) -> None:
        _check(self.reduce.data in PUT_REDUCTIONS, f"tg.put: reduce must be one of {', '.join(PUT_REDUCTIONS)}, got '{self.reduce.data}'")
        _check(self.offsets.type.element_type == i64, "tg.put: offsets must be a tensor of i64")  # type: ignore[attr-defined]
        _check(shape_of(self.values) == shape_of(self.offsets),
               f"tg.put: values {list(shape_of(self.values))} must have the offsets' shape {list(shape_of(self.offsets))}")
        _check(self.values.type.element_type == self.input.type.element_type,  # type: ignore[attr-defined]
               "tg.put: values must have the input's element type")
        _check(self.result.type == self.input.type, "tg.put: the result type must equal the input type")


def lapack_params(attr: DictionaryAttr) -> dict[str, object]:
    """A `tg.lapack`/`buf.lapack` ``params`` dictionary as Python values (str or int)."""
    out: dict[str, object] = {}
    for k, v in attr.data.items():
        out[k] = v.data if isinstance(v, StringAttr) else v.value.data  # type: ignore[attr-defined]
    return out


def lapack_params_attr(params: dict[str, object]) -> DictionaryAttr:
    return DictionaryAttr({k: StringAttr(v) if isinstance(v, str) else IntegerAttr(int(v), i64) for k, v in params.items()})


@irdl_op_definition
class LapackOp(IRDLOperation):
    """One output of a LAPACK routine (or BLAS ``trsm``) called on every matrix problem of the
    operands' common batch dims: ``routine``, its ``params`` and which of its outputs is the result
    are in `dialects.lapack`'s table (``getrf``'s ``lu``/``pivots``/``info``, ``syevd``'s
    ``values``/``vectors``, ...). Float operands of one element type (float32 or float64),
    pivots int32; the result is that float type or int32 (``pivots``, ``info``). With ``check`` (an
    API name) a failed problem (positive ``info``: a singular or indefinite matrix, no
    convergence) is a run-time error naming it, as torch raises.

    ```mlir
    %lu = tg.lapack "getrf" "lu" %a : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %p = tg.lapack "getrf" "pivots" %a : (tensor<2x4x4xf32>) -> tensor<2x4xi32>
    %x = tg.lapack "getrs" "x" %lu, %p, %b {params = {trans = "N"}} : (tensor<2x4x4xf32>, tensor<2x4xi32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
    ```
    """

    name = "tg.lapack"
    routine = prop_def(StringAttr)
    output = prop_def(StringAttr)
    params = prop_def(DictionaryAttr, default_value=DictionaryAttr({}))
    check = opt_prop_def(StringAttr)
    inputs = var_operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$routine $output $inputs attr-dict `:` functional-type(operands, results)"

    def __init__(self, routine: str, output: str, inputs: Sequence[SSAValue], params: dict[str, object] | None = None,
                 check: str | None = None):
        props: dict[str, Attribute] = {"routine": StringAttr(routine), "output": StringAttr(output)}
        if params:
            props["params"] = lapack_params_attr(params)
        if check:
            props["check"] = StringAttr(check)
        result = self.result_type(routine, output, inputs, params or {})
        super().__init__(operands=[list(inputs)], properties=props, result_types=[result])

    @staticmethod
    def result_type(routine: str, output: str, inputs: Sequence[SSAValue], params: dict[str, object]) -> TensorType:
        """``routine``'s ``output`` over the batch of ``inputs``: their float type, or i32
        (`dialects.lapack`'s slot kind); raises `lapack.LapackShapeError`."""
        from tensor_graphs.dialects import lapack

        batch, _, dims = lapack.problem(routine, [shape_of(v) for v in inputs], params)
        kind, shape = lapack.slot_shape(routine, output, dims)
        el = inputs[0].type.element_type  # type: ignore[attr-defined]
        return shaped(IntegerType(32) if kind == "i32" else el, (*batch, *shape))

    def verify_(self) -> None:
        from tensor_graphs.dialects import lapack

        try:
            want = self.result_type(self.routine.data, self.output.data, self.inputs, lapack_params(self.params))
        except lapack.LapackShapeError as e:
            raise VerifyException(f"tg.lapack: {e}") from None
        el = self.inputs[0].type.element_type  # type: ignore[attr-defined]
        _check(el in (f32, f64), f"tg.lapack: float32 or float64 matrices, got {el}")
        _check(self.result.type == want, f"tg.lapack: {self.routine.data}'s {self.output.data} is {want}, got {self.result.type}")


@irdl_op_definition
class GroupedMatmulOp(IRDLOperation):
    """A GEMM per group of rows: rows ``[offsets[g-1], offsets[g])`` of ``input`` ``[S, K]``
    (``offsets[-1]`` = 0) times ``weight[g]``, ``[G, K, N]`` (or ``[G, N, K]`` read transposed,
    ``transpose_b``: an ``nn.Linear``-style stack), into the same rows of the ``[S, N]``
    result; rows from ``offsets[G-1]`` on are zero. ``offsets`` (i64, ``[G]``) are running row
    counts: non-decreasing and at most S, checked at run time. Mixture of experts: the tokens
    sorted by expert, each expert's rows times its own weights, the experts no token chose
    skipped.

    ```mlir
    %y = tg.grouped_matmul %x, %w, %offs {transpose_b = true} : (tensor<36x32xf32>, tensor<4x128x32xf32>, tensor<4xi64>) -> tensor<36x128xf32>
    ```
    """

    name = "tg.grouped_matmul"
    input = operand_def(AnyTensor)
    weight = operand_def(AnyTensor)
    offsets = operand_def(AnyTensor)
    transpose_b = prop_def(BoolAttr, default_value=bool_attr(False))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input `,` $weight `,` $offsets attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, weight: SSAValue, offsets: SSAValue, transpose_b: bool = False):
        n = shape_of(weight)[1 if transpose_b else 2]
        props = {"transpose_b": bool_attr(True)} if transpose_b else {}
        super().__init__(
            operands=[input, weight, offsets], properties=props,
            result_types=[shaped(input.type.element_type, (shape_of(input)[0], n))],  # type: ignore[attr-defined]
        )

    @property
    def transposed(self) -> bool:
        return bool(self.transpose_b.value.data)

    def verify_(self) -> None:
        x, w, o, r = shape_of(self.input), shape_of(self.weight), shape_of(self.offsets), shape_of(self.result)
        _check(len(x) == 2 and len(w) == 3, f"tg.grouped_matmul: input [S, K] and weight [G, K, N] expected, got {list(x)} and {list(w)}")
        k, n = (w[2], w[1]) if self.transposed else (w[1], w[2])
        _check(x[1] == k, f"tg.grouped_matmul: the input's {x[1]} columns do not match the weight's K = {k}")
        _check(o == (w[0],), f"tg.grouped_matmul: offsets {list(o)} should be [{w[0]}], one per group")
        _check(self.offsets.type.element_type == i64, "tg.grouped_matmul: offsets must be a tensor of i64")  # type: ignore[attr-defined]
        _check(r == (x[0], n), f"tg.grouped_matmul: result shape {list(r)} should be {[x[0], n]}")
        for v in (self.input, self.weight, self.result):
            _check(v.type.element_type == f32, f"tg.grouped_matmul: f32 input, weight and result expected, got {v.type}")  # type: ignore[attr-defined]


@irdl_op_definition
class LayerNormOp(IRDLOperation):
    """Normalises over the last dim: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    ``weight`` and ``bias`` have shape [D] (a layer norm without affine parameters gets
    constant ones and zeros).
    """

    name = "tg.layer_norm"
    T: ClassVar = VarConstraint("T", AnyTensor)
    input = operand_def(T)
    weight = operand_def(AnyTensor)
    bias = operand_def(AnyTensor)
    eps = prop_def(FloatAttr, default_value=float_attr(1e-5))
    result = result_def(T)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, weight: SSAValue, bias: SSAValue, eps: float):
        super().__init__(operands=[input, weight, bias], properties={"eps": float_attr(eps)}, result_types=[input.type])

    def verify_(self) -> None:
        d = shape_of(self.input)[-1:]
        _check(len(d) == 1, "tg.layer_norm: the input needs rank >= 1")
        for name, v in (("weight", self.weight), ("bias", self.bias)):
            _check(shape_of(v) == d, f"tg.layer_norm: {name} shape {list(shape_of(v))} should be {list(d)}")


@irdl_op_definition
class RmsNormOp(IRDLOperation):
    """RMS norm over the last dim: ``x * rsqrt(mean(x^2) + eps) * weight``; ``weight`` has shape [D]."""

    name = "tg.rms_norm"
    T: ClassVar = VarConstraint("T", AnyTensor)
    input = operand_def(T)
    weight = operand_def(AnyTensor)
    eps = prop_def(FloatAttr, default_value=float_attr(1e-6))
    result = result_def(T)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input `,` $weight attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, weight: SSAValue, eps: float):
        super().__init__(operands=[input, weight], properties={"eps": float_attr(eps)}, result_types=[input.type])

    def verify_(self) -> None:
        d = shape_of(self.input)[-1:]
        _check(len(d) == 1, "tg.rms_norm: the input needs rank >= 1")
        _check(shape_of(self.weight) == d, f"tg.rms_norm: weight shape {list(shape_of(self.weight))} should be {list(d)}")


HeadRange = tuple[int, int] | None


class AttentionLayout:
    """What `tg.attention` and `buf.attention` derive from their layout properties
    (``q_seq_major`` ... ``out_seq_major``, ``q_heads`` ... ``v_heads``); each op says which
    values are its q, k, v and output (`_layout_values`)."""

    def _layout_values(self) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue]:
        raise NotImplementedError

    @property
    def seq_major(self) -> tuple[bool, bool, bool, bool]:
        """(q, k, v, out): stored sequence-major."""
        return tuple(bool(getattr(self, f"{name}_seq_major").value.data) for name in ATTENTION_OPERANDS)  # type: ignore[return-value]

    @property
    def head_ranges(self) -> tuple[HeadRange, HeadRange, HeadRange]:
        """(q, k, v): the heads ``(first, count)`` the op reads of an operand that holds more
        (``q_heads = array<i64: first, count>``), or None: all."""
        attrs = (getattr(self, f"{name}_heads") for name in ATTENTION_OPERANDS[:3])
        return tuple(None if a is None else tuple(a.get_values()) for a in attrs)  # type: ignore[return-value]

    def heads_major_shapes(self) -> tuple[tuple[int, ...], ...]:
        """(q, k, v, out) shapes in the order the op computes in, ``[..., H, S, D]``."""
        return attention_shapes([shape_of(x) for x in self._layout_values()], self.seq_major, self.head_ranges)


def attention_shapes(stored: Sequence[Sequence[int]], seq_major: Sequence[bool], ranges: Sequence[HeadRange]) -> tuple[tuple[int, ...], ...]:
    """(q, k, v, out) shapes in the order the op computes in, ``[..., H, S, D]``, from the
    ``stored`` ones: dims -3 and -2 swapped where sequence-major, the heads dim the range's
    count where the op reads a range (`AttentionLayout.head_ranges`)."""
    shapes = []
    for shape, flag, heads in zip(stored, seq_major, (*ranges, None)):
        s = heads_major(shape, flag)
        shapes.append(s if heads is None or len(s) < 3 else (*s[:-3], heads[1], *s[-2:]))
    return tuple(shapes)


def check_head_ranges(stored: Sequence[Sequence[int]], seq_major: Sequence[bool], ranges: Sequence[HeadRange], what: str) -> None:
    """Each head range within its operand's heads (raises `VerifyException`)."""
    for name, shape, flag, heads in zip(ATTENTION_OPERANDS, stored, seq_major, ranges):
        if heads is None:
            continue
        total = heads_major(shape, flag)[-3] if len(shape) >= 3 else 0
        _check(len(heads) == 2 and heads[0] >= 0 and heads[1] > 0 and heads[0] + heads[1] <= total,
               f"{what}: {name}_heads {list(heads)} (first, count) is not a range of its {total} heads")


def head_range_props(ranges: Sequence[HeadRange]) -> dict[str, Attribute]:
    return {f"{name}_heads": DenseArrayBase.from_list(i64, list(r)) for name, r in zip(ATTENTION_OPERANDS, ranges) if r is not None}


@irdl_op_definition
class AttentionOp(AttentionLayout, IRDLOperation):
    """Scaled dot-product attention: ``softmax(q @ k^T * scale + mask) @ v``.

    q: [..., H, Sq, D]; k: [..., Hkv, Sk, D]; v: [..., Hkv, Sk, Dv]; result [..., H, Sq, Dv].
    H must be a multiple of Hkv (grouped-query attention: query head h reads kv head
    h // (H / Hkv)). ``causal`` masks key j > query i + (Sk - Sq). ``mask`` (optional, f32,
    additive) broadcasts to [..., H, Sq, Sk].

    With ``kv_cache``, k and v are KV caches (results of `tg.cache_write`) with room for Sk
    positions of which only the first ``past + Sq`` hold keys, ``past`` being the graph's
    run-time position (the number of tokens cached before this call); the rest is ignored.
    Query i sits at position ``past + i`` and (causal) sees keys ``0 .. past + i``. A mask over
    a cache indexes its positions (it broadcasts to [..., H, Sq, Sk]): a key-padding mask over
    the cached positions (left-padded prompts) is ``[B, 1, 1, Sk]``, 0 or -inf.

    ``q_seq_major`` (``k_``, ``v_``, ``out_``): that operand (or the result) is stored
    sequence-major, ``[..., S, H, D]``, the layout of a projection's output before the transpose
    PyTorch models apply (`absorb-attention-layouts` folds that transpose in). ``q_heads =
    array<i64: first, count>`` (``k_``, ``v_``): the operand holds more heads than the op reads,
    it reads ``count`` heads from ``first`` on (q, k and v side by side in one projection's
    output, GPT-2's ``c_attn``). The shapes above and the mask's are the ones the op computes
    in (`attention_shapes`). A KV cache is heads-major, all of it read.
    """

    name = "tg.attention"
    q = operand_def(AnyTensor)
    k = operand_def(AnyTensor)
    v = operand_def(AnyTensor)
    mask = opt_operand_def(AnyTensor)
    scale = prop_def(FloatAttr)
    causal = prop_def(BoolAttr, default_value=bool_attr(False))
    kv_cache = prop_def(BoolAttr, default_value=bool_attr(False))
    q_seq_major = prop_def(BoolAttr, default_value=bool_attr(False))
    k_seq_major = prop_def(BoolAttr, default_value=bool_attr(False))
    v_seq_major = prop_def(BoolAttr, default_value=bool_attr(False))
    out_seq_major = prop_def(BoolAttr, default_value=bool_attr(False))
    q_heads = opt_prop_def(DenseArrayBase.constr(i64))
    k_heads = opt_prop_def(DenseArrayBase.constr(i64))
    v_heads = opt_prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$q `,` $k `,` $v (`mask` $mask^)? attr-dict `:` functional-type(operands, results)"

    def __init__(
        self, q: SSAValue, k: SSAValue, v: SSAValue, mask: SSAValue | None, scale: float, causal: bool,
        kv_cache: bool = False, seq_major: Sequence[bool] = (False, False, False, False),
        heads: Sequence[HeadRange] = (None, None, None),
    ):
        """``seq_major``: (q, k, v, out) stored sequence-major; ``heads``: (q, k, v) head ranges
        (see the class doc)."""
        qs, _, vs, _ = attention_shapes((shape_of(q), shape_of(k), shape_of(v), ()), seq_major, heads)
        props: dict[str, Attribute] = {"scale": float_attr(scale), "causal": bool_attr(causal)}
        if kv_cache:
            props["kv_cache"] = bool_attr(True)
        for name, flag in zip(ATTENTION_OPERANDS, seq_major):
            if flag:
                props[f"{name}_seq_major"] = bool_attr(True)
        props.update(head_range_props(heads))
        out = heads_major((*qs[:-1], vs[-1]), seq_major[3])
        super().__init__(
            operands=[q, k, v, [mask] if mask is not None else []],
            properties=props,
            result_types=[shaped(q.type.element_type, out)],  # type: ignore[attr-defined]
        )

    def _layout_values(self) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue]:
        return self.q, self.k, self.v, self.result

    @property
    def is_causal(self) -> bool:
        return bool(self.causal.value.data)

    @property
    def uses_kv_cache(self) -> bool:
        return bool(self.kv_cache.value.data)

    def verify_(self) -> None:
        q, k, v = shape_of(self.q), shape_of(self.k), shape_of(self.v)
        _check(len(q) >= 3 and len(k) == len(q) and len(v) == len(q),
               f"tg.attention: q, k, v need the same rank >= 3, got {list(q)}, {list(k)}, {list(v)}")
        check_head_ranges((q, k, v), self.seq_major, self.head_ranges, "tg.attention")
        q, k, v, _ = self.heads_major_shapes()
        _check(q[-1] == k[-1], f"tg.attention: q and k head dims differ ({q[-1]} vs {k[-1]})")
        _check(k[-2] == v[-2], f"tg.attention: k and v sequence lengths differ ({k[-2]} vs {v[-2]})")
        _check(k[:-2] == v[:-2], f"tg.attention: k and v batch/head dims differ ({list(k[:-2])} vs {list(v[:-2])})")
        _check(q[:-3] == k[:-3], f"tg.attention: q and k batch dims differ ({list(q[:-3])} vs {list(k[:-3])})")
        _check(k[-3] > 0 and q[-3] % k[-3] == 0, f"tg.attention: {q[-3]} query heads are not a multiple of {k[-3]} kv heads")
        expected = heads_major((*q[:-1], v[-1]), self.seq_major[3])
        _check(shape_of(self.result) == expected, f"tg.attention: result shape {list(shape_of(self.result))} should be {list(expected)}")
        if self.mask is not None:
            scores = (*q[:-1], k[-2])
            _check(is_broadcastable_to(shape_of(self.mask), scores),
                   f"tg.attention: mask shape {list(shape_of(self.mask))} does not broadcast to the scores {list(scores)}")
            _check(self.mask.type.element_type == self.q.type.element_type,  # type: ignore[attr-defined]
                   "tg.attention: the mask must be additive, with the element type of q")
        if self.uses_kv_cache:
            _check(self.is_causal or q[-2] == 1, "tg.attention: kv_cache attention with more than one query must be causal")
            _check(at_most(q[-2], k[-2], self), f"tg.attention: {q[-2]} queries do not fit a cache of {k[-2]} positions")
            _check(not any(self.seq_major[1:3]), "tg.attention: a KV cache is heads-major (no k_seq_major, v_seq_major)")
            _check(self.head_ranges[1:] == (None, None), "tg.attention: a KV cache is read whole (no k_heads, v_heads)")


# --------------------------------------------------------------------------- state (KV cache)


@irdl_op_definition
class StateOp(IRDLOperation):
    """Persistent mutable tensor (a KV cache): allocated once outside the arena, kept between
    calls, bound like a weight and updated in place by `tg.cache_write`.

    ```mlir
    %k = tg.state "kv.0.key" : tensor<1x2x256x16xf32>
    ```
    """

    name = "tg.state"
    state_name = prop_def(StringAttr, prop_name="name")
    result = result_def(AnyTensor)
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, type: TensorType):
        super().__init__(properties={"name": StringAttr(name)}, result_types=[type])


@irdl_op_definition
class CacheWriteOp(IRDLOperation):
    """Writes ``update`` into ``state`` along ``axis`` at positions ``[past, past + n)`` (n =
    ``update``'s size along ``axis``; ``past`` = the graph's run-time position) and returns the
    state after the write: the same buffer, updated in place, never a copy of the cache.

    ```mlir
    %kc = tg.cache_write %k into %state {axis = 2 : i64} : (tensor<1x2x256x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x256x16xf32>
    ```
    """

    name = "tg.cache_write"
    state = operand_def(AnyTensor)
    update = operand_def(AnyTensor)
    axis = prop_def(IntegerAttr[i64])
    result = result_def(AnyTensor)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$update `into` $state attr-dict `:` functional-type(operands, results)"

    def __init__(self, state: SSAValue, update: SSAValue, axis: int):
        super().__init__(operands=[state, update], properties={"axis": IntegerAttr(axis, i64)}, result_types=[state.type])

    def verify_(self) -> None:
        s, u, axis = shape_of(self.state), shape_of(self.update), self.axis.value.data
        _check(self.result.type == self.state.type, "tg.cache_write: the result type must equal the state type")
        _check(self.update.type.element_type == self.state.type.element_type,  # type: ignore[attr-defined]
               "tg.cache_write: update and state element types differ")
        _check(len(u) == len(s) and 0 <= axis < len(s), f"tg.cache_write: axis {axis} / rank mismatch ({list(u)} into {list(s)})")
        _check(all(a == b for i, (a, b) in enumerate(zip(u, s)) if i != axis) and at_most(u[axis], s[axis], self),
               f"tg.cache_write: update {list(u)} does not fit state {list(s)} along axis {axis}")


# --------------------------------------------------------------------------- rope


@irdl_op_definition
class RopeOp(IRDLOperation):
    """Rotary position embedding, rotate-half form (Llama, Qwen): ``x * cos + rotate_half(x) * sin``
    with ``rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])``; cos and sin broadcast to x.

    With ``norm`` (a weight of shape [D], `fuse-rms-norm-rope`), ``x`` is first RMS-normalised
    over the last dim, as `tg.rms_norm` with ``eps`` (Qwen3's per-head q/k norms): one sweep.

    ```mlir
    %r = tg.rope %q, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
    %n = tg.rope %q, %cos, %sin norm %w {eps = 1.0e-06 : f32} : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<16xf32>) -> tensor<1x4x8x16xf32>
    ```
    """

    name = "tg.rope"
    T: ClassVar = VarConstraint("T", AnyTensor)
    input = operand_def(T)
    cos = operand_def(AnyTensor)
    sin = operand_def(AnyTensor)
    norm = opt_operand_def(AnyTensor)
    eps = opt_prop_def(FloatAttr)
    result = result_def(T)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input `,` $cos `,` $sin (`norm` $norm^)? attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, cos: SSAValue, sin: SSAValue, norm: SSAValue | None = None, eps: float | None = None):
        props = {"eps": float_attr(eps)} if norm is not None and eps is not None else {}
        super().__init__(operands=[input, cos, sin, [norm] if norm is not None else []], properties=props,
                         result_types=[input.type])

    def verify_(self) -> None:
        x = shape_of(self.input)
        _check(len(x) >= 1 and x[-1] % 2 == 0, f"tg.rope: the last dim of the input {list(x)} must be even")
        _check((self.norm is None) == (self.eps is None), "tg.rope: a norm weight and eps go together")
        if self.norm is not None:
            _check(shape_of(self.norm) == x[-1:], f"tg.rope: norm weight shape {list(shape_of(self.norm))} should be {list(x[-1:])}")
        for name, v in (("cos", self.cos), ("sin", self.sin)):
            _check(is_broadcastable_to(shape_of(v), x), f"tg.rope: {name} shape {list(shape_of(v))} does not broadcast to {list(x)}")
            _check(v.type.element_type == self.input.type.element_type,  # type: ignore[attr-defined]
                   f"tg.rope: {name} element type differs from the input's")


# --------------------------------------------------------------------------- fused




@irdl_op_definition
class BiasActivationOp(IRDLOperation):
    """``activation(input + bias)`` in one sweep; ``bias`` broadcasts to ``input``."""

    name = "tg.bias_activation"
    input = operand_def(AnyTensor)
    bias = operand_def(AnyTensor)
    activation = prop_def(StringAttr, default_value=StringAttr("none"))
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input `,` $bias attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, bias: SSAValue, activation: str):
        super().__init__(
            operands=[input, bias],
            properties={"activation": StringAttr(activation)},
            result_types=[input.type],
        )

    def verify_(self) -> None:
        _check(self.activation.data in ACTIVATIONS, f"tg.bias_activation: unknown activation '{self.activation.data}' (expected one of {', '.join(ACTIVATIONS)})")
        _check(self.result.type == self.input.type, "tg.bias_activation: result type must equal the input type")
        _check(
            is_broadcastable_to(shape_of(self.bias), shape_of(self.input)),
            f"tg.bias_activation: bias shape {list(shape_of(self.bias))} does not broadcast to {list(shape_of(self.input))}",
        )


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminates the scalar body of `tg.fused_elementwise` with the element it computes."""

    name = "tg.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())
    assembly_format = "$values attr-dict `:` type($values)"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class FusedElementwiseOp(IRDLOperation):
    """A connected group of elementwise ops as ONE loop over memory.

    The body maps one element of each input (block argument i is an element of input i,
    broadcast to the result shape) to one element of the result with `arith`/`math` ops on
    scalars, ended by `tg.yield`.

    ```mlir
    %y = tg.fused_elementwise %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
    ^bb0(%a: f32, %c: f32):
      %s = arith.addf %a, %c : f32
      %t = math.tanh %s : f32
      tg.yield %t : f32
    }
    ```
    """

    name = "tg.fused_elementwise"
    inputs = var_operand_def(AnyTensor)
    result = result_def(AnyTensor)
    body = region_def("single_block")
    traits = traits_def(Pure())
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results) $body"

    def __init__(self, inputs: list[SSAValue], result_type: Attribute, body: Region):
        super().__init__(operands=[inputs], result_types=[result_type], regions=[body])

    def verify_(self) -> None:
        shapes = [shape_of(v) for v in self.inputs]
        expected = _shape_rule(broadcast_shapes, *shapes) if shapes else ()
        _check(shape_of(self.result) == expected,
               f"tg.fused_elementwise: result shape {list(shape_of(self.result))} should be the broadcast shape {list(expected)}")
        block = self.body.block
        _check(len(block.args) == len(self.inputs), f"tg.fused_elementwise: the body takes {len(block.args)} arguments for {len(self.inputs)} inputs")
        for i, (arg, v) in enumerate(zip(block.args, self.inputs)):
            _check(arg.type == v.type.element_type,  # type: ignore[attr-defined]
                   f"tg.fused_elementwise: body argument {i} is {arg.type}, input {i} has elements of {v.type.element_type}")  # type: ignore[attr-defined]
        term = block.last_op
        _check(isinstance(term, YieldOp) and len(term.values) == 1, "tg.fused_elementwise: the body must end with one tg.yield value")
        _check(term.values[0].type == self.result.type.element_type,  # type: ignore[attr-defined]
               "tg.fused_elementwise: the yielded element type differs from the result's")


TG = Dialect(
    "tg",
    [
        WeightOp,
        IotaOp,
        SizeOp,
        ConstantOp,
        MatmulOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        PowOp,
        MaxOp,
        MinOp,
        SelectOp,
        CastOp,
        CheckNonzeroOp,
        *UNARY_OPS.values(),
        GeluOp,
        ReshapeOp,
        TransposeOp,
        SliceOp,
        ConcatOp,
        BroadcastOp,
        EmbeddingOp,
        TakeOp,
        Im2colOp,
        WinogradConvOp,
        SumOp,
        MeanOp,
        AmaxOp,
        AminOp,
        ProdOp,
        AnyOp,
        ArgReduceOp,
        SoftmaxOp,
        LogSoftmaxOp,
        CumsumOp,
        ArgTopkOp,
        PutOp,
        LapackOp,
        GroupedMatmulOp,
        LayerNormOp,
        RmsNormOp,
        AttentionOp,
        StateOp,
        CacheWriteOp,
        RopeOp,
        BiasActivationOp,
        FusedElementwiseOp,
        YieldOp,
    ],
)
