"""Generate ``tensor_graphs/dialects/aten.py`` from the torch op schemas (like torch-mlir's GeneratedTorchOps).

    python -m tensor_graphs.tools.gen_aten_dialect            # rewrite the checked-in file
    python -m tensor_graphs.tools.gen_aten_dialect --check    # exit 1 when it is out of date

Every op in :data:`OPS` becomes one ``IRDLOperation`` whose operands, properties and results come
from ``torch.ops.aten.<name>.<overload>._schema``:

=================  ==========================================================
schema type        aten dialect
=================  ==========================================================
``Tensor``         operand (named like the schema argument)
``Tensor?``        optional operand
``int``            ``i64`` ``IntegerAttr`` property
``int?``           optional ``i64`` ``IntegerAttr`` property
``int[]``          ``array<i64: ...>`` (``DenseArrayBase``) property
``float/Scalar``   ``f64`` ``FloatAttr`` property (an integer Scalar becomes a float too)
``bool``           ``i1`` ``IntegerAttr`` property
returned Tensor    one result each (``result``, or ``result0``, ``result1``, ...)
=================  ==========================================================

Schema defaults become property defaults. Hand-written shape verifiers (the cheap checks) are
named in :data:`OPS` and live in :data:`PREAMBLE`, which is copied into the generated file so that
it needs neither torch nor this generator at run time (``tg-opt`` starts fast).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent.parent / "dialects" / "aten.py"


@dataclass(frozen=True)
class OpSpec:
    """One ATen overload to generate, with the name of its shape verifier in :data:`PREAMBLE`."""

    name: str
    overload: str = "default"
    verifier: str | None = None

    @property
    def op_name(self) -> str:
        return f"aten.{self.name}" if self.overload == "default" else f"aten.{self.name}.{self.overload}"

    @property
    def class_name(self) -> str:
        parts = self.name.split("_") + ([] if self.overload == "default" else self.overload.split("_"))
        return "".join(p[:1].upper() + p[1:] for p in parts if p) + "Op"


#: The supported ATen overloads, in the order they appear in the generated file.
OPS: tuple[OpSpec, ...] = (
    # linear algebra
    OpSpec("linear", verifier="_verify_linear"),
    OpSpec("mm", verifier="_verify_mm"),
    OpSpec("matmul", verifier="_verify_matmul"),
    OpSpec("bmm", verifier="_verify_bmm"),
    OpSpec("addmm", verifier="_verify_addmm"),
    # data movement
    OpSpec("t", verifier="_verify_t"),
    OpSpec("transpose", "int", verifier="_verify_transpose"),
    OpSpec("permute", verifier="_verify_permute"),
    OpSpec("view", verifier="_verify_view"),
    OpSpec("reshape", verifier="_verify_view"),
    OpSpec("_unsafe_view", verifier="_verify_view"),
    OpSpec("flatten", "using_ints", verifier="_verify_same_numel"),
    OpSpec("unsqueeze", verifier="_verify_same_numel"),
    OpSpec("contiguous", verifier="_verify_same_type"),
    OpSpec("clone", verifier="_verify_same_type"),
    # elementwise
    OpSpec("add", "Tensor", verifier="_verify_binary"),
    OpSpec("add", "Scalar", verifier="_verify_same_type"),
    OpSpec("sub", "Tensor", verifier="_verify_binary"),
    OpSpec("sub", "Scalar", verifier="_verify_same_type"),
    OpSpec("mul", "Tensor", verifier="_verify_binary"),
    OpSpec("mul", "Scalar", verifier="_verify_same_type"),
    OpSpec("div", "Tensor", verifier="_verify_binary"),
    OpSpec("div", "Scalar", verifier="_verify_same_type"),
    OpSpec("relu", verifier="_verify_same_type"),
)

#: schema type string -> our argument kind
_KINDS = {
    "Tensor": "tensor",
    "Optional[Tensor]": "tensor?",
    "int": "int",
    "Optional[int]": "int?",
    "List[int]": "int[]",
    "number": "scalar",
    "float": "scalar",
    "bool": "bool",
}

#: argument kind -> property definition (without default)
_PROP_CONSTRAINT = {
    "int": "IntegerAttr[I64]",
    "int?": "IntegerAttr[I64]",
    "int[]": "DenseArrayBase.constr(i64)",
    "scalar": "FloatAttr[Float64Type]",
    "bool": "IntegerAttr[I1]",
}

#: argument kind -> Python type in the generated ``__init__``
_PY_TYPE = {
    "tensor": "SSAValue",
    "tensor?": "SSAValue | None",
    "int": "int",
    "int?": "int | None",
    "int[]": "Sequence[int]",
    "scalar": "float",
    "bool": "bool",
}


#: names the preamble imports for generated ops only; dropped when no op uses them
_OPTIONAL_IMPORTS = ("AttrSizedOperandSegments", "I1", "I64", "opt_prop_def", "opt_operand_def")


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str
    kwarg_only: bool
    has_default: bool
    default: object

    @property
    def py_name(self) -> str:
        return "self_" if self.name == "self" else self.name


def _schema_args(spec: OpSpec) -> tuple[str, list[Arg], int]:
    import torch

    packet = getattr(torch.ops.aten, spec.name)
    schema = getattr(packet, spec.overload)._schema
    args: list[Arg] = []
    for a in schema.arguments:
        kind = _KINDS.get(str(a.type))
        if kind is None:
            raise SystemExit(f"gen_aten_dialect: {schema}: argument '{a.name}' has unsupported type {a.type}")
        has_default = a.has_default_value()
        args.append(Arg(a.name, kind, a.kwarg_only, has_default, a.default_value if has_default else None))
    for r in schema.returns:
        if str(r.type) != "Tensor":
            raise SystemExit(f"gen_aten_dialect: {schema}: return type {r.type} is not a Tensor")
    return str(schema), args, len(schema.returns)


def _default_attr(arg: Arg) -> str | None:
    if not arg.has_default or arg.default is None:
        return None
    v = arg.default
    if arg.kind == "int":
        return f"IntegerAttr({int(v)}, i64)"
    if arg.kind == "int[]":
        return f"DenseArrayBase.from_list(i64, {list(v)!r})"
    if arg.kind == "scalar":
        return f"FloatAttr({float(v)!r}, f64)"
    if arg.kind == "bool":
        return f"IntegerAttr({int(bool(v))}, i1)"
    return None


def _default_py(arg: Arg) -> str | None:
    if not arg.has_default:
        return None
    v = arg.default
    if v is None:
        return "None"
    if arg.kind == "scalar":
        return repr(float(v))
    if arg.kind == "bool":
        return repr(bool(v))
    if arg.kind == "int[]":
        return repr(tuple(v))
    return repr(v)


def _emit_op(spec: OpSpec) -> str:
    schema, args, n_results = _schema_args(spec)
    tensors = [a for a in args if a.kind in ("tensor", "tensor?")]
    optional = [a for a in tensors if a.kind == "tensor?"]
    lines = [
        "@irdl_op_definition",
        f"class {spec.class_name}(AtenOp):",
        f'    """``{schema}``"""',
        "",
        f'    name = "{spec.op_name}"',
        f'    TARGET: ClassVar[str] = "aten::{spec.name}{"" if spec.overload == "default" else "." + spec.overload}"',
        "    ARGS: ClassVar[tuple[tuple[str, str], ...]] = ("
        + ", ".join(f'("{a.name}", "{a.kind}")' for a in args)
        + ("," if len(args) == 1 else "")
        + ")",
    ]
    for a in args:
        if a.kind == "tensor":
            lines.append(f"    {a.name} = operand_def(AnyTensor)")
        elif a.kind == "tensor?":
            lines.append(f"    {a.name} = opt_operand_def(AnyTensor)")
        elif a.kind == "int?":
            lines.append(f"    {a.name} = opt_prop_def({_PROP_CONSTRAINT[a.kind]})")
        else:
            default = _default_attr(a)
            extra = f", default_value={default}" if default else ""
            lines.append(f"    {a.name} = prop_def({_PROP_CONSTRAINT[a.kind]}{extra})")
    result_names = ["result"] if n_results == 1 else [f"result{i}" for i in range(n_results)]
    for r in result_names:
        lines.append(f"    {r} = result_def(AnyTensor)")
    options = ["ParsePropInAttrDict()"]
    if len(optional) > 1:
        options.append("AttrSizedOperandSegments()")
    lines.append(f"    irdl_options = ({', '.join(options)},)")
    # assembly format: required operands comma-separated, then optional ones as `(`,` $x^)?`
    fmt: list[str] = []
    for a in tensors:
        if a.kind == "tensor":
            if optional and fmt and fmt[-1].startswith("("):
                raise SystemExit(f"gen_aten_dialect: {schema}: a required Tensor follows an optional one")
            fmt.append(("`,` " if fmt else "") + f"${a.name}")
        else:
            if not fmt:
                raise SystemExit(f"gen_aten_dialect: {schema}: the first Tensor argument is optional")
            fmt.append(f"(`,` ${a.name}^)?")
    fmt_str = " ".join(fmt) + " attr-dict `:` functional-type(operands, results)"
    lines.append(f'    assembly_format = "{fmt_str}"')
    lines.append("")
    # __init__: schema order; keyword-only where the schema says so; result types last
    params: list[str] = []
    star = False
    for a in args:
        if a.kwarg_only and not star:
            params.append("*")
            star = True
        default = _default_py(a)
        params.append(f"{a.py_name}: {_PY_TYPE[a.kind]}" + (f" = {default}" if default is not None else ""))
    if not star:
        params.append("*")
    if n_results == 1:
        params.append("result_type: Attribute")
        result_arg = "[result_type]"
    else:
        params.append("result_types: Sequence[Attribute]")
        result_arg = "result_types"
    values = ", ".join(a.py_name for a in args) + ("," if len(args) == 1 else "")
    lines.append(f"    def __init__(self, {', '.join(params)}) -> None:")
    lines.append(f"        super().__init__(**_build(self.ARGS, ({values}), {result_arg}))")
    if spec.verifier:
        lines += [
            "",
            "    def verify_(self) -> None:",
            "        super().verify_()",
            f"        {spec.verifier}(self)",
        ]
    return "\n".join(lines) + "\n"


def generate() -> str:
    """The full text of ``tensor_graphs/dialects/aten.py``."""
    import torch

    version = torch.__version__.split("+")[0]
    ops = [_emit_op(spec) for spec in OPS]
    preamble = PREAMBLE.replace("@TORCH_VERSION@", version)
    for name in _OPTIONAL_IMPORTS:  # imported only when some generated op uses them
        if not any(re.search(rf"\b{name}\b", text) for text in ops):
            preamble = preamble.replace(f"    {name},\n", "", 1)
    parts = [preamble] + ["\n\n" + text for text in ops]
    names = ["UnsupportedOp"] + [s.class_name for s in OPS]
    parts.append("\n\n#: op name -> class, for the frontend and the lowering.\n")
    parts.append("ATEN_OPS: dict[str, type[AtenOp]] = {op.TARGET: op for op in (\n")
    parts += [f"    {n},\n" for n in names[1:]]
    parts.append(")}\n\n")
    parts.append('ATEN = Dialect(\n    "aten",\n    [\n')
    parts += [f"        {n},\n" for n in names]
    parts.append("    ],\n)\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gen_aten_dialect", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the checked-in file is out of date")
    p.add_argument("-o", "--output", type=Path, default=OUTPUT)
    args = p.parse_args(argv)
    text = generate()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python -m tensor_graphs.tools.gen_aten_dialect", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(OPS) + 1} ops)")
    return 0


PREAMBLE = '''\
"""The `aten` dialect: one op per supported ATen overload, 1:1 with what torch.export emits.

GENERATED by ``python -m tensor_graphs.tools.gen_aten_dialect`` from the op schemas of
torch @TORCH_VERSION@. Do not edit by hand: change the generator and re-run it
(``tests/test_aten_generated.py`` checks that this file is up to date).

Schema mapping: ``Tensor`` arguments are operands (``Tensor?`` optional operands) named like the
schema arguments; ``int`` is an ``i64`` property, ``int[]`` an ``array<i64: ...>`` property,
``float``/``Scalar`` an ``f64`` property (integer Scalars become floats too), ``bool`` an ``i1``
property; schema defaults are property defaults. One result per returned Tensor. Only ``f32``
tensors are accepted; shapes are checked where that is cheap.

```mlir
%w = tg.weight "fc.weight" : tensor<6x8xf32>
%y = aten.linear %x, %w : (tensor<2x8xf32>, tensor<6x8xf32>) -> tensor<2x6xf32>
%z = aten.add.Tensor %y, %y {alpha = 2.0 : f64} : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
%u = aten.unsupported %z {target = "aten::gelu", location = "act (torch.nn.GELU)"} : (tensor<2x6xf32>) -> tensor<2x6xf32>
```

Weights and constants use the shared ``tg.weight`` / ``tg.constant`` ops of the tg dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I1,
    I64,
    DenseArrayBase,
    FloatAttr,
    Float64Type,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    f64,
    i1,
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
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from tensor_graphs.dialects.shapes import ShapeError, broadcast_shapes, matmul_shape, numel, permute_shape

AnyTensor = base(TensorType)


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
        if known == 0 or count % known:
            raise ShapeError(f"cannot view {count} elements as {size}")
        size[holes[0]] = count // known
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


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


def _rule(op: IRDLOperation, fn, *args):
    try:
        return fn(*args)
    except ShapeError as e:
        raise VerifyException(f"{op.name}: {e}") from None


def _expect_rank(op: IRDLOperation, what: str, value: SSAValue, ranks: Sequence[int]) -> None:
    rank = len(_shape(value))
    if rank not in ranks:
        want = " or ".join(map(str, ranks))
        raise VerifyException(f"{op.name}: {what} must have rank {want}, got {list(_shape(value))}")


def _expect_result(op: IRDLOperation, expected: Sequence[int]) -> None:
    got = _shape(op.results[0])
    if got != tuple(expected):
        raise VerifyException(f"{op.name}: result shape {list(got)} should be {list(expected)}")


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
    _expect_result(op, _rule(op, infer_view_shape, sizes.get_values(), numel(_shape(op.self))))


def _verify_same_numel(op) -> None:
    a, b = _shape(op.self), _shape(op.result)
    if numel(a) != numel(b):
        raise VerifyException(f"{op.name}: result {list(b)} has {numel(b)} elements, self {list(a)} has {numel(a)}")


def _verify_same_type(op) -> None:
    if op.result.type != op.self.type:
        raise VerifyException(f"{op.name}: result type {op.result.type} should equal the type of self {op.self.type}")


def _verify_binary(op) -> None:
    _expect_result(op, _rule(op, broadcast_shapes, _shape(op.self), _shape(op.other)))


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
        elif value is None:
            if kind != "int?":
                raise ValueError(f"argument '{name}' ({kind}) must not be None")
        elif kind in ("int", "int?"):
            properties[name] = IntegerAttr(int(value), i64)  # type: ignore[arg-type]
        elif kind == "int[]":
            properties[name] = DenseArrayBase.from_list(i64, [int(v) for v in value])  # type: ignore[union-attr]
        elif kind == "scalar":
            properties[name] = FloatAttr(float(value), f64)  # type: ignore[arg-type]
        elif kind == "bool":
            properties[name] = IntegerAttr(int(bool(value)), i1)
        else:
            raise ValueError(f"argument '{name}' has an unknown kind '{kind}'")
    return {"operands": operands, "properties": properties, "result_types": list(result_types)}


class AtenOp(IRDLOperation):
    """Base of the generated ops: only ``f32`` tensors in and out."""

    #: ``aten::<name>[.<overload>]``, the torch operator this op mirrors.
    TARGET: ClassVar[str]
    #: ``(name, kind)`` per schema argument, in schema order.
    ARGS: ClassVar[tuple[tuple[str, str], ...]]

    @classmethod
    def from_values(cls, values: Sequence[object], result_types: Sequence[Attribute]):
        """Build from one value per schema argument (SSA values for tensors, Python values otherwise)."""
        op = cls.__new__(cls)
        IRDLOperation.__init__(op, **_build(cls.ARGS, values, result_types))
        return op

    def verify_(self) -> None:
        for value in (*self.operands, *self.results):
            if getattr(value.type, "element_type", None) != f32:
                raise VerifyException(f"{self.name}: only f32 tensors are supported, got {value.type}")


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
'''


if __name__ == "__main__":
    sys.exit(main())
