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
from typing import ClassVar

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AnyAttr,
    ParamAttrConstraint,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import ConstantLike, Pure
from xdsl.utils.exceptions import VerifyException

from tensor_graphs.dialects.shapes import (
    ShapeError,
    broadcast_shapes,
    is_broadcastable_to,
    matmul_shape,
    numel,
    permute_shape,
)

AnyTensor = base(TensorType)


def shape_of(value: SSAValue) -> tuple[int, ...]:
    """Static shape of a tensor (or memref) value."""
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


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


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A small constant held inline in the IR (scalars, masks, folded results)."""

    name = "tg.constant"
    _T: ClassVar = VarConstraint("T", AnyTensor)
    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (_T, AnyAttr())))
    result = result_def(_T)
    traits = traits_def(Pure(), ConstantLike())
    assembly_format = "attr-dict $value"

    def __init__(self, value: DenseIntOrFPElementsAttr):
        super().__init__(properties={"value": value}, result_types=[value.type])


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
        result_type: Attribute | None = None,
    ):
        if beta is None:
            beta = 1.0 if acc is not None else 0.0
        if result_type is None:
            shape = matmul_shape(shape_of(lhs), shape_of(rhs), transpose_a, transpose_b)
            result_type = TensorType(lhs.type.element_type, shape)  # type: ignore[attr-defined]
        super().__init__(
            operands=[lhs, rhs, [acc] if acc is not None else []],
            properties={
                "transpose_a": bool_attr(transpose_a),
                "transpose_b": bool_attr(transpose_b),
                "alpha": float_attr(alpha),
                "beta": float_attr(beta),
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
        if self.acc is not None:
            _check(
                is_broadcastable_to(shape_of(self.acc), got),
                f"tg.matmul: accumulator shape {list(shape_of(self.acc))} does not broadcast to the result {list(got)}",
            )
        el = {self.lhs.type.element_type, self.rhs.type.element_type, self.result.type.element_type}  # type: ignore[attr-defined]
        _check(el == {f32}, "tg.matmul: only f32 operands are supported")


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
            result_type = TensorType(lhs.type.element_type, shape)  # type: ignore[attr-defined]
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


class ElementwiseUnaryOp(IRDLOperation, abc.ABC):
    """``result = f(input)`` elementwise; same type in and out."""

    T: ClassVar = VarConstraint("T", AnyTensor)
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($result)"

    def __init__(self, input: SSAValue):
        super().__init__(operands=[input], result_types=[input.type])


@irdl_op_definition
class ReluOp(ElementwiseUnaryOp):
    name = "tg.relu"


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
        super().__init__(operands=[input], result_types=[TensorType(input.type.element_type, shape)])  # type: ignore[attr-defined]

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
            result_types=[TensorType(input.type.element_type, shape)],  # type: ignore[attr-defined]
        )

    @property
    def permutation(self) -> tuple[int, ...]:
        return tuple(self.perm.get_values())

    def verify_(self) -> None:
        expected = _shape_rule(permute_shape, shape_of(self.input), self.permutation)
        got = shape_of(self.result)
        _check(got == expected, f"tg.transpose: result shape {list(got)} should be {list(expected)} for perm {list(self.permutation)}")


# --------------------------------------------------------------------------- fused


#: Activations a fused op may apply; the name is the key of the scalar-function registry.
ACTIVATIONS = ("none", "relu")


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


TG = Dialect(
    "tg",
    [
        WeightOp,
        ConstantOp,
        MatmulOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        ReluOp,
        ReshapeOp,
        TransposeOp,
        BiasActivationOp,
    ],
)
