"""The `buf` dialect: memref-level kernels over one planned arena.

Every intermediate value is a view into ONE arena at a static byte offset chosen by
`plan-memory`; weights and constants live outside it; each kernel is one op with explicit
input and output buffers (destination passing). Nothing allocates at run time.

```mlir
func.func @forward(%x: memref<1x256xf32>, %out: memref<1x1024xf32>) attributes {tg.num_outputs = 1 : i64} {
  %arena = buf.arena : memref<4096xi8>
  %w = buf.weight "fc1.weight" : memref<1024x256xf32>
  %t = buf.view %arena[0] : memref<4096xi8> -> memref<1x1024xf32>
  buf.matmul ins(%x, %w : memref<1x256xf32>, memref<1024x256xf32>) outs(%t : memref<1x1024xf32>) {transpose_b = true}
  buf.relu ins(%t : memref<1x1024xf32>) outs(%out : memref<1x1024xf32>)
  func.return
}
```

Before `plan-memory`, buffers are `buf.alloc` (no offset yet); after it, `buf.view`s of the arena.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    MemRefType,
    StringAttr,
    TensorType,
    f32,
    i8,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    base,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from tensor_graphs.dialects.shapes import (
    ShapeError,
    broadcast_shapes,
    is_broadcastable_to,
    matmul_shape,
    numel,
    permute_shape,
)
from tensor_graphs.dialects.tensor import ACTIVATIONS, bool_attr, float_attr

AnyMemRef = base(MemRefType)

#: Byte alignment of every arena view (one cache line, also enough for AVX-512 loads).
ALIGNMENT = 64


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise VerifyException(message)


def shape_of(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


def nbytes(type: MemRefType | TensorType) -> int:
    """Size in bytes of a statically shaped memref or tensor."""
    width = type.element_type.bitwidth  # type: ignore[attr-defined]
    return numel(type.get_shape()) * max(width // 8, 1)


# --------------------------------------------------------------------------- buffers


@irdl_op_definition
class ArenaOp(IRDLOperation):
    """The one arena of a graph; its static size is the memref's length in bytes."""

    name = "buf.arena"
    result = result_def(MemRefType.constr(i8))
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, size: int):
        super().__init__(result_types=[MemRefType(i8, [size])])

    @property
    def size(self) -> int:
        return self.result.type.get_shape()[0]


@irdl_op_definition
class AllocOp(IRDLOperation):
    """A buffer not yet placed; `plan-memory` turns each into a `buf.view` of the arena."""

    name = "buf.alloc"
    result = result_def(AnyMemRef)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, type: MemRefType):
        super().__init__(result_types=[type])


@irdl_op_definition
class ViewOp(IRDLOperation):
    """A typed view of the arena starting at byte ``offset`` (64-byte aligned)."""

    name = "buf.view"
    arena = operand_def(MemRefType.constr(i8))
    offset = prop_def(IntegerAttr[i64])
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())
    assembly_format = "$arena `[` $offset `]` attr-dict `:` type($arena) `->` type($result)"

    def __init__(self, arena: SSAValue, offset: int, type: MemRefType):
        super().__init__(
            operands=[arena], properties={"offset": IntegerAttr(offset, i64)}, result_types=[type]
        )

    def verify_(self) -> None:
        off = self.offset.value.data
        size = shape_of(self.arena)[0]
        end = off + nbytes(self.result.type)
        _check(off >= 0 and off % ALIGNMENT == 0, f"buf.view: offset {off} is not a non-negative multiple of {ALIGNMENT}")
        _check(end <= size, f"buf.view: bytes [{off}, {end}) overflow the arena of {size} bytes")


@irdl_op_definition
class WeightOp(IRDLOperation):
    """A named parameter from the weight store, bound once when the graph is loaded."""

    name = "buf.weight"
    weight_name = prop_def(StringAttr, prop_name="name")
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, type: MemRefType):
        super().__init__(properties={"name": StringAttr(name)}, result_types=[type])


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A constant buffer, bound like a weight but defined in the IR."""

    name = "buf.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `:` type($result)"

    def __init__(self, value: DenseIntOrFPElementsAttr):
        vt = value.type
        super().__init__(
            properties={"value": value},
            result_types=[MemRefType(vt.element_type, vt.get_shape())],
        )

    def verify_(self) -> None:
        vt = self.value.type
        _check(
            tuple(vt.get_shape()) == shape_of(self.result) and vt.element_type == self.result.type.element_type,
            "buf.constant: value and result must have the same shape and element type",
        )


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """The same bytes seen with another shape: an alias, never a copy."""

    name = "buf.reshape"
    input = operand_def(AnyMemRef)
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, type: MemRefType):
        super().__init__(operands=[input], result_types=[type])

    def verify_(self) -> None:
        a, b = shape_of(self.input), shape_of(self.result)
        _check(numel(a) == numel(b), f"buf.reshape: {list(a)} and {list(b)} hold different element counts")
        _check(self.input.type.element_type == self.result.type.element_type, "buf.reshape: element type must not change")


# --------------------------------------------------------------------------- kernels


class KernelOp(IRDLOperation, abc.ABC):
    """One kernel call: reads ``inputs``, writes ``outputs`` (all memrefs, no results).

    Subclasses say how many inputs they take and check shapes in ``verify_kernel``.
    """

    inputs = var_operand_def(AnyMemRef)
    outputs = var_operand_def(AnyMemRef)
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = (
        "`ins` `(` $inputs `:` type($inputs) `)` `outs` `(` $outputs `:` type($outputs) `)` attr-dict"
    )

    #: Allowed numbers of inputs (outputs are always exactly one).
    NUM_INPUTS: ClassVar[tuple[int, ...]]

    def __init__(
        self,
        inputs: Sequence[SSAValue],
        outputs: Sequence[SSAValue],
        properties: dict[str, Attribute] | None = None,
    ):
        super().__init__(operands=[list(inputs), list(outputs)], properties=properties or {})

    @property
    def output(self) -> SSAValue:
        return self.outputs[0]

    def verify_(self) -> None:
        _check(
            len(self.inputs) in self.NUM_INPUTS,
            f"{self.name}: expected {' or '.join(map(str, self.NUM_INPUTS))} inputs, got {len(self.inputs)}",
        )
        _check(len(self.outputs) == 1, f"{self.name}: expected 1 output, got {len(self.outputs)}")
        try:
            self.verify_kernel([shape_of(v) for v in self.inputs], shape_of(self.output))
        except ShapeError as e:
            raise VerifyException(f"{self.name}: {e}") from None

    @abc.abstractmethod
    def verify_kernel(self, ins: list[tuple[int, ...]], out: tuple[int, ...]) -> None: ...


def _same(expected: tuple[int, ...], out: tuple[int, ...], what: str) -> None:
    if tuple(expected) != tuple(out):
        raise ShapeError(f"output shape {list(out)} should be {list(expected)} ({what})")


@irdl_op_definition
class MatmulOp(KernelOp):
    """``out = alpha * op(a) @ op(b) + beta * acc`` (one `cblas_sgemm` per batch)."""

    name = "buf.matmul"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2, 3)
    transpose_a = prop_def(BoolAttr, default_value=bool_attr(False))
    transpose_b = prop_def(BoolAttr, default_value=bool_attr(False))
    alpha = prop_def(FloatAttr, default_value=float_attr(1.0))
    beta = prop_def(FloatAttr, default_value=float_attr(0.0))

    @property
    def flags(self) -> tuple[bool, bool, float, float]:
        return (
            bool(self.transpose_a.value.data),
            bool(self.transpose_b.value.data),
            self.alpha.value.data,
            self.beta.value.data,
        )

    def verify_kernel(self, ins, out):
        ta, tb, _, _ = self.flags
        _same(matmul_shape(ins[0], ins[1], ta, tb), out, "matmul")
        if len(ins) == 3 and not is_broadcastable_to(ins[2], out):
            raise ShapeError(f"accumulator {list(ins[2])} does not broadcast to {list(out)}")
        els = {v.type.element_type for v in (*self.inputs, self.output)}  # type: ignore[attr-defined]
        if els != {f32}:
            raise ShapeError("only f32 buffers are supported")


class ElementwiseBinaryKernel(KernelOp, abc.ABC):
    """``out = a <op> b`` with broadcasting."""

    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2,)

    def verify_kernel(self, ins, out):
        _same(broadcast_shapes(*ins), out, "broadcast of the inputs")


@irdl_op_definition
class AddOp(ElementwiseBinaryKernel):
    name = "buf.add"


@irdl_op_definition
class SubOp(ElementwiseBinaryKernel):
    name = "buf.sub"


@irdl_op_definition
class MulOp(ElementwiseBinaryKernel):
    name = "buf.mul"


@irdl_op_definition
class DivOp(ElementwiseBinaryKernel):
    name = "buf.div"


class ElementwiseUnaryKernel(KernelOp, abc.ABC):
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)

    def verify_kernel(self, ins, out):
        _same(ins[0], out, "same as the input")


@irdl_op_definition
class ReluOp(ElementwiseUnaryKernel):
    name = "buf.relu"


@irdl_op_definition
class CopyOp(ElementwiseUnaryKernel):
    """Copies a buffer (used where an output must not alias an input, a weight or another output)."""

    name = "buf.copy"


@irdl_op_definition
class TransposeOp(KernelOp):
    """``out.shape[d] = in.shape[perm[d]]``: a strided copy."""

    name = "buf.transpose"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    perm = prop_def(DenseArrayBase.constr(i64))

    @property
    def permutation(self) -> tuple[int, ...]:
        return tuple(self.perm.get_values())

    def verify_kernel(self, ins, out):
        _same(permute_shape(ins[0], self.permutation), out, f"perm {list(self.permutation)}")


@irdl_op_definition
class BiasActivationOp(KernelOp):
    """``out = activation(x + bias)`` in one sweep."""

    name = "buf.bias_activation"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2,)
    activation = prop_def(StringAttr, default_value=StringAttr("none"))

    def verify_kernel(self, ins, out):
        if self.activation.data not in ACTIVATIONS:
            raise ShapeError(f"unknown activation '{self.activation.data}'")
        _same(ins[0], out, "same as the input")
        if not is_broadcastable_to(ins[1], out):
            raise ShapeError(f"bias {list(ins[1])} does not broadcast to {list(out)}")


BUF = Dialect(
    "buf",
    [
        ArenaOp,
        AllocOp,
        ViewOp,
        WeightOp,
        ConstantOp,
        ReshapeOp,
        MatmulOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        ReluOp,
        CopyOp,
        TransposeOp,
        BiasActivationOp,
    ],
)
