"""The hand-written half of the `aten` dialect: shape rules, the verifiers the generated ops
name, the base class `AtenOp`, the op builder `_build` and `aten.unsupported`.

The generated half (``tensor_graphs/dialects/aten.py``, one class per ATen overload, from the
op schemas: ``python -m tensor_graphs.tools.gen_aten_dialect``) imports what it needs from here,
so that these rules are ordinary code (linted, tested, read) rather than a string inside the
generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    AnyFloat,
    DenseArrayBase,
    FloatAttr,
    Float64Type,
    I64,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    base,
    irdl_op_definition,
    prop_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from tensor_graphs import dtypes
from tensor_graphs.dialects.shapes import ShapeError, broadcast_shapes, matmul_shape, numel, permute_shape
from tensor_graphs.dialects.symbolic import DYNAMIC_INDEX, Dim, divides, dims_of, format_expr, simplify

AnyTensor = base(TensorType)
#: a ``Scalar`` argument: an integer stays an ``i64`` integer, a float is an ``f64`` float
ScalarAttr = IntegerAttr[I64] | FloatAttr[Float64Type]

#: the dtype names a ``ScalarType`` property may hold (torch's, from the one table)
DTYPE_NAMES = tuple(d.name for d in dtypes.DTYPES)


# --------------------------------------------------------------------------- shape rules


def aten_matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Result shape of ``torch.matmul``: rank-1 operands are promoted to matrices and the added dim dropped."""
    if len(a) == 0 or len(b) == 0:
        raise ShapeError(f"matmul operands need rank >= 1, got {list(a)} and {list(b)}")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    out = list(matmul_shape(a2, b2))
    if len(b) == 1:
        out.pop(-1)
    if len(a) == 1:
        out.pop(-2 if len(b) != 1 else -1)
    return tuple(out)


def infer_view_shape(size: Sequence[int], count: int) -> tuple[int, ...]:
    """``size`` of ``aten.view``/``aten.reshape`` with its one ``-1`` resolved for ``count`` elements."""
    size = list(size)
    holes = [i for i, d in enumerate(size) if d == -1]
    if len(holes) > 1:
        raise ShapeError(f"size {size} has more than one -1")
    known = numel([d for d in size if d != -1])
    if holes:
        if known == 0 or not divides(known, count):
            raise ShapeError(f"cannot view {count} elements as {size}")
        size[holes[0]] = simplify(count // known) if isinstance(count, int) and isinstance(known, int) else simplify(count / known)
    if numel(size) != count:
        raise ShapeError(f"cannot view {count} elements as {size}")
    return tuple(size)


def normalize_dim(dim: int, rank: int) -> int:
    """``dim`` in ``[-rank, rank)`` mapped to ``[0, rank)``; rank-0 tensors accept 0 and -1."""
    bound = max(rank, 1)
    if not -bound <= dim < bound:
        raise ShapeError(f"dim {dim} is out of range for rank {rank}")
    return dim % bound


# --------------------------------------------------------------------------- verifiers


def _shape(value: SSAValue) -> tuple[Dim, ...]:
    """The shape of a tensor value: ints, and an expression of the graph's symbols for each
    dynamic dim (`dialects.symbolic`)."""
    return dims_of(value.type)


def _sizes(op: IRDLOperation, sizes: Sequence[int]) -> list[Dim]:
    """A reshape's or an expand's ``sizes`` with each dynamic entry (``?``: the importer's mark
    for a size the model computes from a dynamic dim) read from the result type."""
    if DYNAMIC_INDEX not in sizes:
        return list(sizes)
    out = _shape(op.results[0])
    if len(out) != len(sizes):
        raise VerifyException(f"{op.name}: sizes {_dims(sizes)} and result {_dims(out)} differ in rank")
    return [out[i] if d == DYNAMIC_INDEX else d for i, d in enumerate(sizes)]


def _rule(op: IRDLOperation, fn, *args):
    try:
        return fn(*args)
    except ShapeError as e:
        raise VerifyException(f"{op.name}: {e}") from None


def _dims(shape: Sequence[Dim]) -> str:
    """``[seq, 1024]``: a shape as a message shows it (a dynamic dim by its expression, a bare
    ``?`` as ``?``)."""
    return "[" + ", ".join(format_expr(d) if not isinstance(d, int) else "?" if d < 0 else str(d) for d in shape) + "]"


def _expect_rank(op: IRDLOperation, what: str, value: SSAValue, ranks: Sequence[int]) -> None:
    rank = len(_shape(value))
    if rank not in ranks:
        want = " or ".join(map(str, ranks))
        raise VerifyException(f"{op.name}: {what} must have rank {want}, got {_dims(_shape(value))}")


def _expect_result(op: IRDLOperation, expected: Sequence[int]) -> None:
    got = _shape(op.results[0])
    if got != tuple(expected):
        raise VerifyException(f"{op.name}: result shape {_dims(got)} should be {_dims(expected)}")


def _verify_mm(op) -> None:
    _expect_rank(op, "self", op.self, (2,))
    _expect_rank(op, "mat2", op.mat2, (2,))
    _expect_result(op, _rule(op, matmul_shape, _shape(op.self), _shape(op.mat2)))


def _verify_bmm(op) -> None:
    _expect_rank(op, "self", op.self, (3,))
    _expect_rank(op, "mat2", op.mat2, (3,))
    a, b = _shape(op.self), _shape(op.mat2)
    if a[0] != b[0]:
        raise VerifyException(f"{op.name}: batch sizes differ: {list(a)} and {list(b)}")
    _expect_result(op, _rule(op, matmul_shape, a, b))


def _verify_matmul(op) -> None:
    _expect_result(op, _rule(op, aten_matmul_shape, _shape(op.self), _shape(op.other)))


def _verify_linear(op) -> None:
    _expect_rank(op, "weight", op.weight, (2,))
    x, w = _shape(op.input), _shape(op.weight)
    if len(x) == 0 or x[-1] != w[1]:
        raise VerifyException(f"{op.name}: input {list(x)} does not match weight {list(w)} (in_features {w[1]})")
    if op.bias is not None and _shape(op.bias) not in ((w[0],), (1,), ()):
        raise VerifyException(f"{op.name}: bias shape {list(_shape(op.bias))} should be [{w[0]}]")
    _expect_result(op, (*x[:-1], w[0]))


def _verify_addmm(op) -> None:
    _expect_rank(op, "mat1", op.mat1, (2,))
    _expect_rank(op, "mat2", op.mat2, (2,))
    out = _rule(op, matmul_shape, _shape(op.mat1), _shape(op.mat2))
    if _rule(op, broadcast_shapes, _shape(op.self), out) != out:
        raise VerifyException(f"{op.name}: self {list(_shape(op.self))} does not broadcast to {list(out)}")
    _expect_result(op, out)


def _verify_t(op) -> None:
    _expect_rank(op, "self", op.self, (0, 1, 2))
    _expect_result(op, _shape(op.self)[::-1])


def _verify_transpose(op) -> None:
    shape = list(_shape(op.self))
    d0 = _rule(op, normalize_dim, op.dim0.value.data, len(shape))
    d1 = _rule(op, normalize_dim, op.dim1.value.data, len(shape))
    if shape:
        shape[d0], shape[d1] = shape[d1], shape[d0]
    _expect_result(op, shape)


def _verify_permute(op) -> None:
    shape = _shape(op.self)
    dims = [_rule(op, normalize_dim, d, len(shape)) for d in op.dims.get_values()]
    _expect_result(op, _rule(op, permute_shape, shape, dims))


def _verify_view(op) -> None:
    sizes = op.size if hasattr(op, "size") else op.shape
    _expect_result(op, _rule(op, infer_view_shape, _sizes(op, sizes.get_values()), numel(_shape(op.self))))


def _verify_same_numel(op) -> None:
    a, b = _shape(op.self), _shape(op.result)
    if numel(a) != numel(b):
        raise VerifyException(f"{op.name}: result {list(b)} has {numel(b)} elements, self {list(a)} has {numel(a)}")


def _verify_same_type(op) -> None:
    if op.result.type != op.self.type:
        raise VerifyException(f"{op.name}: result type {op.result.type} should equal the type of self {op.self.type}")


def _verify_float_unary(op) -> None:
    """A float function of one tensor: the result has ``self``'s shape and its element type, or a
    float type for an integer or bool ``self`` (``torch.exp(int_tensor)`` is float32)."""
    t, r = op.self.type, op.result.type
    same = r == t
    promoted = not isinstance(t.element_type, AnyFloat) and isinstance(r.element_type, AnyFloat) and _shape(op.self) == _shape(op.result)
    if not (same or promoted):
        raise VerifyException(f"{op.name}: result type {r} should be the type of self {t} (a float type for integers)")


def _verify_binary(op) -> None:
    a, b = op.operands  # self and other (or exponent)
    _expect_result(op, _rule(op, broadcast_shapes, _shape(a), _shape(b)))


def _element_type(value: SSAValue) -> Attribute:
    return value.type.element_type  # type: ignore[attr-defined]


def _verify_same_shape(op) -> None:
    _expect_result(op, _shape(op.self))


def _verify_exponent_shape(op) -> None:
    """``pow.Scalar(number, exponent)``: the result has the exponent's shape."""
    _expect_result(op, _shape(op.exponent))


def _verify_type_as(op) -> None:
    _expect_result(op, _shape(op.self))
    if _element_type(op.result) != _element_type(op.other):
        raise VerifyException(f"{op.name}: result element type {_element_type(op.result)} should be that of other, {_element_type(op.other)}")


def _verify_compare(op) -> None:
    other = _shape(op.other) if isinstance(getattr(op, "other", None), SSAValue) else ()
    _expect_result(op, _rule(op, broadcast_shapes, _shape(op.self), other))
    if _element_type(op.result) != i1:
        raise VerifyException(f"{op.name}: the result must be a tensor of i1, got {op.result.type}")


def _verify_where(op) -> None:
    shapes = [_shape(v) for v in (op.condition, op.self, op.other) if isinstance(v, SSAValue)]  # Scalars are rank 0
    _expect_result(op, _rule(op, broadcast_shapes, *shapes))
    if _element_type(op.condition) != i1:
        raise VerifyException(f"{op.name}: the condition must be a tensor of i1, got {op.condition.type}")


def _verify_masked_fill(op) -> None:
    """The out-of-place ``masked_fill`` broadcasts ``self`` and ``mask`` together, as torch does
    (Falcon's ALiBi fills a [1, H, 1, S] bias by a [1, 1, S, S] mask: a [1, H, S, S] result)."""
    if _element_type(op.mask) != i1:
        raise VerifyException(f"{op.name}: the mask must be a tensor of i1, got {op.mask.type}")
    _expect_result(op, _rule(op, broadcast_shapes, _shape(op.self), _shape(op.mask)))
    if _element_type(op.result) != _element_type(op.self):
        raise VerifyException(f"{op.name}: result type {op.result.type} should have the element type of self {op.self.type}")


def _verify_expand(op) -> None:
    shape, size = _shape(op.self), _sizes(op, op.size.get_values())
    if len(size) < len(shape):
        raise VerifyException(f"{op.name}: size {size} has fewer dims than self {list(shape)}")
    pad = len(size) - len(shape)
    out = [shape[i - pad] if d == -1 and i >= pad else d for i, d in enumerate(size)]
    if any(isinstance(d, int) and d < 0 for d in out) or _rule(op, broadcast_shapes, shape, out) != tuple(out):
        raise VerifyException(f"{op.name}: self {list(shape)} cannot be expanded to {size}")
    _expect_result(op, out)


def _verify_dim_op(op) -> None:
    _rule(op, normalize_dim, op.dim.value.data, len(_shape(op.self)))


def _verify_cat(op) -> None:
    shapes = [_shape(t) for t in op.tensors if _shape(t) != (0,)]  # torch skips 1-D empty tensors
    if not shapes:
        return
    rank = len(shapes[0])
    dim = _rule(op, normalize_dim, op.dim.value.data, rank)
    for s in shapes:
        if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != dim):
            raise VerifyException(f"{op.name}: {list(s)} does not match {list(shapes[0])} outside dim {dim}")
    out = list(shapes[0])
    out[dim] = sum(s[dim] for s in shapes)
    _expect_result(op, out)


def _verify_index(op) -> None:
    for v in op.indices:
        if not isinstance(_element_type(v), IntegerType):
            raise VerifyException(f"{op.name}: indices must be integer or i1 tensors, got {v.type}")


def _verify_gather(op) -> None:
    if not isinstance(_element_type(op.index), IntegerType) or _element_type(op.index) == i1:
        raise VerifyException(f"{op.name}: the index must be an integer tensor, got {op.index.type}")
    _rule(op, normalize_dim, op.dim.value.data, max(len(_shape(op.self)), 1))
    _expect_result(op, _shape(op.index))


def _verify_embedding(op) -> None:
    _expect_rank(op, "weight", op.weight, (2,))
    if not isinstance(_element_type(op.indices), IntegerType) or _element_type(op.indices) == i1:
        raise VerifyException(f"{op.name}: indices must be an integer tensor, got {op.indices.type}")
    _expect_result(op, (*_shape(op.indices), _shape(op.weight)[1]))


def _verify_reduce(op) -> None:
    rank = len(_shape(op.self))
    dims = getattr(op, "dim", None)
    for d in dims.get_values() if dims is not None else ():
        _rule(op, normalize_dim, d, rank)


def _verify_softmax(op) -> None:
    _rule(op, normalize_dim, op.dim.value.data, len(_shape(op.self)))
    _expect_result(op, _shape(op.self))


def _verify_layer_norm(op) -> None:
    shape, norm = _shape(op.input), tuple(op.normalized_shape.get_values())
    if not norm or shape[len(shape) - len(norm):] != norm:
        raise VerifyException(f"{op.name}: normalized_shape {list(norm)} is not the trailing dims of the input {list(shape)}")
    for what, v in (("weight", op.weight), ("bias", op.bias)):
        if v is not None and _shape(v) != norm:
            raise VerifyException(f"{op.name}: {what} shape {list(_shape(v))} should be {list(norm)}")
    _expect_result(op, shape)


def _verify_sdpa(op) -> None:
    el = _element_type(op.query)
    if not dtypes.of_element(el).is_float:
        raise VerifyException(f"{op.name}: query must hold floats, got {op.query.type}")
    for what, v in (("key", op.key), ("value", op.value), ("result", op.result)):
        if _element_type(v) != el:
            raise VerifyException(f"{op.name}: {what} must be {el} as the query, got {v.type}")
    q, k, v = _shape(op.query), _shape(op.key), _shape(op.value)
    if len(q) < 2 or len(k) != len(q) or len(v) != len(q):
        raise VerifyException(f"{op.name}: query, key and value need one rank >= 2, got {list(q)}, {list(k)}, {list(v)}")
    if q[-1] != k[-1] or k[-2] != v[-2]:
        raise VerifyException(f"{op.name}: query {list(q)}, key {list(k)} and value {list(v)} do not fit")
    if op.attn_mask is not None:
        if _element_type(op.attn_mask) not in (el, i1):
            raise VerifyException(f"{op.name}: attn_mask must be {el} (additive) or i1 (keep), got {op.attn_mask.type}")
        scores = (*q[:-1], k[-2])
        if _rule(op, broadcast_shapes, _shape(op.attn_mask), scores) != scores:
            raise VerifyException(f"{op.name}: attn_mask {list(_shape(op.attn_mask))} does not broadcast to the scores {list(scores)}")
    _expect_result(op, (*q[:-1], v[-1]))


# --------------------------------------------------------------------------- base classes


def _build(args: Sequence[tuple[str, str]], values: Sequence[object], result_types: Sequence[Attribute]) -> dict:
    """``operands``/``properties``/``result_types`` of an op from its schema arguments' values."""
    operands: list = []
    properties: dict[str, Attribute] = {}
    for (name, kind), value in zip(args, values, strict=True):
        if kind == "tensor":
            operands.append(value)
        elif kind == "tensor?":
            operands.append([] if value is None else [value])
        elif kind == "tensor[]":
            operands.append(list(value))  # type: ignore[call-overload]
        elif kind == "tensor?[]":
            items = list(value)  # type: ignore[call-overload]
            operands.append([v for v in items if v is not None])
            properties[f"{name}_none"] = DenseArrayBase.from_list(i64, [i for i, v in enumerate(items) if v is None])
        elif kind == "drop":
            continue
        elif value is None:
            if not kind.endswith("?"):
                raise ValueError(f"argument '{name}' ({kind}) must not be None")
        elif kind in ("int", "int?"):
            properties[name] = IntegerAttr(int(value), i64)  # type: ignore[arg-type]
        elif kind in ("int[]", "int[]?"):
            properties[name] = DenseArrayBase.from_list(i64, [int(v) for v in value])  # type: ignore[union-attr]
        elif kind in ("float[]", "float[]?"):
            properties[name] = DenseArrayBase.from_list(f64, [float(v) for v in value])  # type: ignore[union-attr]
        elif kind in ("scalar", "scalar?"):
            if isinstance(value, (bool, int)):
                properties[name] = IntegerAttr(int(value), i64)
            else:
                properties[name] = FloatAttr(float(value), f64)  # type: ignore[arg-type]
        elif kind in ("float", "float?"):
            properties[name] = FloatAttr(float(value), f64)  # type: ignore[arg-type]
        elif kind in ("bool", "bool?"):
            properties[name] = IntegerAttr(int(bool(value)), i1)
        elif kind in ("str", "str?", "dtype", "dtype?"):
            if kind.startswith("dtype") and value not in DTYPE_NAMES:
                raise ValueError(f"argument '{name}': unknown dtype '{value}' (expected one of {', '.join(DTYPE_NAMES)})")
            properties[name] = StringAttr(str(value))
        else:
            raise ValueError(f"argument '{name}' has an unknown kind '{kind}'")
    if result_types and isinstance(result_types[0], (list, tuple)):
        return {"operands": operands, "properties": properties, "result_types": [list(result_types[0])]}
    return {"operands": operands, "properties": properties, "result_types": list(result_types)}


class AtenOp(IRDLOperation):
    """Base of the generated ops: tensors of the dtypes of the one table (`tensor_graphs.dtypes`)
    in and out; which an op is lowered for, its lowering says."""

    #: ``aten::<name>[.<overload>]``, the torch operator this op mirrors.
    TARGET: ClassVar[str]
    #: ``(name, kind)`` per schema argument, in schema order.
    ARGS: ClassVar[tuple[tuple[str, str], ...]]

    @classmethod
    def from_values(cls, values: Sequence[object], result_types: Sequence[Attribute]):
        """Build from one value per schema argument (SSA values for tensors, Python values otherwise;
        ``Layout``/``Device`` values are ignored). A variadic-result op takes ``[types]``."""
        op = cls.__new__(cls)
        IRDLOperation.__init__(op, **_build(cls.ARGS, values, result_types))
        return op

    def verify_(self) -> None:
        for value in (*self.operands, *self.results):
            element = getattr(value.type, "element_type", None)
            if not dtypes.holds_element(element):
                raise VerifyException(f"{self.name}: tensors of {', '.join(d.name for d in dtypes.DTYPES)} are supported, got {value.type}")


@irdl_op_definition
class UnsupportedOp(IRDLOperation):
    """An ATen op the frontend cannot translate; kept so that every missing op is reported at once."""

    name = "aten.unsupported"
    inputs = var_operand_def(AnyTensor)
    target = prop_def(StringAttr)
    #: where the op came from in the model (``Operation.location`` is xDSL's own source location)
    model_location = prop_def(StringAttr, default_value=StringAttr(""), prop_name="location")
    outputs = var_result_def(AnyTensor)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(
        self, target: str, inputs: Sequence[SSAValue], result_types: Sequence[Attribute], location: str = ""
    ) -> None:
        super().__init__(
            operands=[list(inputs)],
            properties={"target": StringAttr(target), "location": StringAttr(location)},
            result_types=[list(result_types)],
        )
