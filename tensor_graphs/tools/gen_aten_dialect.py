"""Generate ``tensor_graphs/dialects/aten.py`` from the torch op schemas (like torch-mlir's GeneratedTorchOps).

    python -m tensor_graphs.tools.gen_aten_dialect            # rewrite the checked-in file
    python -m tensor_graphs.tools.gen_aten_dialect --check    # exit 1 when it is out of date

Every op in :data:`OPS` becomes one ``IRDLOperation`` whose operands, properties and results come
from ``torch.ops.aten.<name>.<overload>._schema``:

=====================  ===================================================================
schema type            aten dialect
=====================  ===================================================================
``Tensor``             operand (named like the schema argument)
``Tensor?``            optional operand
``Tensor[]``           variadic operand
``Tensor?[]``          variadic operand of the present tensors, plus ``<name>_none``, an
                       ``array<i64: ...>`` property listing the positions that are None
``int``, ``SymInt``    ``i64`` ``IntegerAttr`` property (``int?``: optional property)
``int[]``              ``array<i64: ...>`` (``DenseArrayBase``) property (``int[]?``: optional)
``float[]``            ``array<f64: ...>`` property (``float[]?``: optional; resize scale factors)
``Scalar``             ``i64`` ``IntegerAttr`` for an integer (or bool), ``f64`` ``FloatAttr``
                       for a float: torch's type promotion sees the difference
``float``              ``f64`` ``FloatAttr`` property (``float?``: optional)
``bool``               ``i1`` ``IntegerAttr`` property (``bool?``: optional)
``str``                ``StringAttr`` property
``ScalarType``         ``StringAttr`` holding the torch dtype's name (``"float32"``, ``"int64"``,
                       ``"bool"``), so that it can be passed back to torch
``MemoryFormat``       ``i64`` property (c10's enum value)
``Layout``, ``Device`` dropped (no property; inference runs on values, not placements)
returned Tensor        one result each (``result``, or ``result0``, ``result1``, ...)
returned Tensor[]      a variadic result ``outputs`` (``split``, ``chunk``)
=====================  ===================================================================

Schema defaults become property defaults. Ops take tensors of every dtype of the one dtype table
(`tensor_graphs.dtypes`), as torch's do: which dtypes an op is lowered for is the lowering's
business (`lowering.aten_to_tensor`), and it says so by name when it is not. Hand-written shape verifiers (the cheap checks) are
named in :data:`OPS` and live in `tensor_graphs.dialects.aten_base` (with the base class and the
builder), which the generated file imports; the generated file needs neither torch nor this
generator at run time (``tg-opt`` starts fast).
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
    """One ATen overload to generate, with the name of its shape verifier in `dialects.aten_base`."""

    name: str
    overload: str = "default"
    verifier: str | None = None

    @property
    def target(self) -> str:
        return f"aten::{self.name}" if self.overload == "default" else f"aten::{self.name}.{self.overload}"

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
    OpSpec("baddbmm"),
    # data movement
    OpSpec("t", verifier="_verify_t"),
    OpSpec("transpose", "int", verifier="_verify_transpose"),
    OpSpec("permute", verifier="_verify_permute"),
    OpSpec("view", verifier="_verify_view"),
    OpSpec("reshape", verifier="_verify_view"),
    OpSpec("_unsafe_view", verifier="_verify_view"),
    OpSpec("flatten", "using_ints", verifier="_verify_same_numel"),
    OpSpec("unflatten", "int", verifier="_verify_same_numel"),
    OpSpec("unsqueeze", verifier="_verify_same_numel"),
    OpSpec("squeeze", "dim", verifier="_verify_same_numel"),
    OpSpec("squeeze", "dims", verifier="_verify_same_numel"),
    OpSpec("contiguous", verifier="_verify_same_type"),
    OpSpec("clone", verifier="_verify_same_type"),
    OpSpec("expand", verifier="_verify_expand"),
    OpSpec("expand_as"),
    OpSpec("repeat"),
    OpSpec("repeat_interleave", "self_int"),
    OpSpec("stack"),
    OpSpec("numpy_T"),
    OpSpec("roll"),
    OpSpec("constant_pad_nd"),
    OpSpec("pad"),
    OpSpec("slice", "Tensor", verifier="_verify_dim_op"),
    OpSpec("select", "int", verifier="_verify_dim_op"),
    OpSpec("narrow", verifier="_verify_dim_op"),
    OpSpec("narrow_copy", verifier="_verify_dim_op"),
    OpSpec("split", "Tensor", verifier="_verify_dim_op"),
    OpSpec("split_with_sizes", verifier="_verify_dim_op"),
    OpSpec("chunk", verifier="_verify_dim_op"),
    OpSpec("cat", verifier="_verify_cat"),
    OpSpec("index", "Tensor", verifier="_verify_index"),
    # element gathers and scatters by offsets computed while compiling (`lowering.aten_to_tensor.views`)
    OpSpec("flip"),
    OpSpec("diagonal"),
    OpSpec("as_strided"),
    OpSpec("unfold"),
    OpSpec("index_select"),
    OpSpec("scatter", "src"),
    OpSpec("scatter", "value"),
    OpSpec("scatter_add"),
    OpSpec("scatter_reduce", "two"),
    OpSpec("slice_scatter"),
    OpSpec("select_scatter"),
    OpSpec("diagonal_scatter"),
    OpSpec("index_fill", "int_Scalar"),
    OpSpec("copy"),
    OpSpec("fill", "Scalar"),
    OpSpec("empty", "memory_format"),
    OpSpec("empty_strided"),
    OpSpec("new_empty_strided"),
    OpSpec("masked_scatter"),
    OpSpec("gather", verifier="_verify_gather"),
    OpSpec("embedding", verifier="_verify_embedding"),
    # dtype conversions
    OpSpec("to", "dtype", verifier="_verify_same_shape"),
    OpSpec("to", "dtype_layout", verifier="_verify_same_shape"),
    OpSpec("to", "device", verifier="_verify_same_shape"),
    OpSpec("_to_copy", verifier="_verify_same_shape"),
    OpSpec("type_as", verifier="_verify_type_as"),
    # elementwise
    OpSpec("add", "Tensor", verifier="_verify_binary"),
    OpSpec("add", "Scalar", verifier="_verify_same_shape"),
    OpSpec("sub", "Tensor", verifier="_verify_binary"),
    OpSpec("sub", "Scalar", verifier="_verify_same_shape"),
    OpSpec("mul", "Tensor", verifier="_verify_binary"),
    OpSpec("mul", "Scalar", verifier="_verify_same_shape"),
    OpSpec("div", "Tensor", verifier="_verify_binary"),
    OpSpec("div", "Scalar", verifier="_verify_same_shape"),
    OpSpec("rsub", "Tensor", verifier="_verify_binary"),
    OpSpec("rsub", "Scalar", verifier="_verify_same_shape"),
    OpSpec("maximum", verifier="_verify_binary"),
    OpSpec("minimum", verifier="_verify_binary"),
    OpSpec("max", "other", verifier="_verify_binary"),
    OpSpec("min", "other", verifier="_verify_binary"),
    OpSpec("clamp", verifier="_verify_same_shape"),
    OpSpec("clamp", "Tensor", verifier="_verify_same_shape"),
    OpSpec("clamp_min", verifier="_verify_same_shape"),
    OpSpec("hardtanh", verifier="_verify_same_type"),
    OpSpec("relu6", verifier="_verify_same_type"),
    OpSpec("pow", "Tensor_Scalar", verifier="_verify_same_shape"),
    OpSpec("pow", "Tensor_Tensor", verifier="_verify_binary"),
    OpSpec("where", "self", verifier="_verify_where"),
    OpSpec("where", "ScalarSelf", verifier="_verify_where"),
    OpSpec("where", "ScalarOther", verifier="_verify_where"),
    OpSpec("where", "Scalar", verifier="_verify_where"),
    OpSpec("masked_fill", "Scalar", verifier="_verify_masked_fill"),
    OpSpec("masked_fill", "Tensor", verifier="_verify_masked_fill"),
    OpSpec("relu", verifier="_verify_same_type"),
    OpSpec("gelu", verifier="_verify_same_type"),
    OpSpec("tanh", verifier="_verify_float_unary"),
    OpSpec("exp", verifier="_verify_float_unary"),
    OpSpec("log", verifier="_verify_float_unary"),
    OpSpec("sqrt", verifier="_verify_float_unary"),
    OpSpec("rsqrt", verifier="_verify_float_unary"),
    OpSpec("sigmoid", verifier="_verify_float_unary"),
    OpSpec("silu", verifier="_verify_same_type"),
    OpSpec("erf", verifier="_verify_float_unary"),
    OpSpec("erfc", verifier="_verify_float_unary"),
    OpSpec("lgamma", verifier="_verify_float_unary"),
    *(OpSpec(fn, verifier="_verify_float_unary") for fn in ("digamma", "erfinv", "i0")),
    OpSpec("cos", verifier="_verify_float_unary"),
    OpSpec("sin", verifier="_verify_float_unary"),
    OpSpec("neg", verifier="_verify_same_type"),
    OpSpec("abs", verifier="_verify_same_type"),
    OpSpec("sign", verifier="_verify_same_type"),
    OpSpec("ceil", verifier="_verify_same_type"),
    OpSpec("floor", verifier="_verify_same_type"),
    # the rest of Core ATen's elementwise functions (scalar bodies of math/arith ops)
    *(OpSpec(fn, verifier="_verify_float_unary") for fn in (
        "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan", "expm1", "log1p", "log2", "log10",
        "reciprocal", "exp2")),
    *(OpSpec(fn, verifier="_verify_same_type") for fn in ("round", "trunc")),
    OpSpec("round", "decimals", verifier="_verify_same_type"),
    OpSpec("elu", verifier="_verify_same_type"),
    OpSpec("leaky_relu", verifier="_verify_same_type"),
    OpSpec("atan2", verifier="_verify_binary"),
    *(OpSpec(fn, verifier="_verify_binary") for fn in ("fmax", "fmin", "hypot", "nextafter")),
    OpSpec("copysign", "Tensor", verifier="_verify_binary"),
    *(OpSpec(fn, "Tensor", verifier="_verify_binary")
      for fn in ("__lshift__", "__rshift__", "bitwise_left_shift", "bitwise_right_shift")),
    OpSpec("signbit", verifier="_verify_same_shape"),
    OpSpec("angle", verifier="_verify_same_shape"),
    OpSpec("pow", "Scalar", verifier="_verify_exponent_shape"),
    OpSpec("isnan", verifier="_verify_same_shape"),
    OpSpec("isinf", verifier="_verify_same_shape"),
    OpSpec("div", "Tensor_mode", verifier="_verify_binary"),
    OpSpec("div", "Scalar_mode", verifier="_verify_same_shape"),
    # reductions and normalisations
    OpSpec("mean", "dim", verifier="_verify_reduce"),
    OpSpec("sum", verifier="_verify_reduce"),
    OpSpec("sum", "dim_IntList", verifier="_verify_reduce"),
    OpSpec("amax", verifier="_verify_reduce"),
    OpSpec("amin", verifier="_verify_reduce"),
    OpSpec("mean"),
    OpSpec("prod"),
    OpSpec("prod", "dim_int"),
    OpSpec("any"),
    OpSpec("any", "dim"),
    OpSpec("any", "dims"),
    OpSpec("argmax"),
    OpSpec("argmin"),
    OpSpec("max", "dim"),
    OpSpec("min", "dim"),
    OpSpec("max"),
    OpSpec("min"),
    OpSpec("var", "correction"),
    OpSpec("var", "dim"),
    OpSpec("var_mean", "correction"),
    OpSpec("linalg_vector_norm"),
    OpSpec("softmax", "int", verifier="_verify_softmax"),
    OpSpec("_softmax", verifier="_verify_softmax"),
    OpSpec("log_softmax", "int", verifier="_verify_softmax"),
    OpSpec("_log_softmax", verifier="_verify_softmax"),
    OpSpec("layer_norm", verifier="_verify_layer_norm"),
    OpSpec("group_norm"),
    OpSpec("_native_batch_norm_legit_no_training"),
    OpSpec("batch_norm"),
    # convolution, pooling, resizing (NCHW / NCL)
    OpSpec("conv1d"),
    OpSpec("conv2d"),
    OpSpec("convolution"),
    OpSpec("max_pool2d_with_indices"),
    OpSpec("native_layer_norm"),
    OpSpec("native_group_norm"),
    OpSpec("_native_batch_norm_legit"),
    OpSpec("_native_batch_norm_legit", "no_stats"),
    OpSpec("_cdist_forward"),
    OpSpec("_pdist_forward"),
    OpSpec("max_pool2d"),
    OpSpec("max_pool1d"),
    OpSpec("avg_pool2d"),
    OpSpec("adaptive_avg_pool2d"),
    OpSpec("adaptive_avg_pool1d"),
    OpSpec("upsample_nearest2d", "vec"),
    OpSpec("upsample_bilinear2d", "vec"),
    OpSpec("upsample_bicubic2d", "vec"),
    OpSpec("scaled_dot_product_attention", verifier="_verify_sdpa"),
    # mask builders: constant folding evaluates them before convert-aten-to-tensor
    OpSpec("arange"),
    OpSpec("arange", "start"),
    OpSpec("arange", "start_step"),
    OpSpec("full"),
    OpSpec("ones"),
    OpSpec("zeros"),
    OpSpec("scalar_tensor"),
    OpSpec("new_ones"),
    OpSpec("new_zeros"),
    OpSpec("new_full"),
    OpSpec("ones_like", verifier="_verify_same_shape"),
    OpSpec("zeros_like", verifier="_verify_same_shape"),
    OpSpec("full_like", verifier="_verify_same_shape"),
    OpSpec("triu", verifier="_verify_same_type"),
    OpSpec("tril", verifier="_verify_same_type"),
    *(OpSpec(cmp, kind, verifier="_verify_compare") for cmp in ("eq", "ne", "lt", "le", "gt", "ge") for kind in ("Tensor", "Scalar")),
    *(OpSpec(op, "Tensor", verifier="_verify_binary") for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "__and__", "__or__", "__xor__")),
    *(OpSpec(op, "Scalar", verifier="_verify_same_shape") for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "__and__", "__or__", "__xor__")),
    OpSpec("bitwise_not", verifier="_verify_same_type"),
    OpSpec("logical_and", verifier="_verify_compare"),
    OpSpec("logical_or", verifier="_verify_compare"),
    OpSpec("logical_xor", verifier="_verify_compare"),
    OpSpec("logical_not", verifier="_verify_same_shape"),
    OpSpec("cumsum", verifier="_verify_same_shape"),
    OpSpec("cumprod", verifier="_verify_same_shape"),
    OpSpec("logcumsumexp", verifier="_verify_same_shape"),
    OpSpec("cummax"),
    OpSpec("cummin"),
    OpSpec("floor_divide"),
    OpSpec("floor_divide", "Scalar"),
    OpSpec("remainder", "Tensor"),
    OpSpec("remainder", "Scalar"),
    OpSpec("remainder", "Scalar_Tensor"),
    OpSpec("fmod", "Tensor"),
    OpSpec("fmod", "Scalar"),
    OpSpec("diff"),
    # mixture of experts (transformers' grouped experts: routing, sorting tokens by expert,
    # counting them, the grouped GEMM, restoring the order)
    OpSpec("topk"),
    OpSpec("sort"),
    OpSpec("sort", "stable"),
    OpSpec("histc"),
    OpSpec("empty_like"),
    OpSpec("index_put"),
    OpSpec("_grouped_mm"),
    # linear algebra: the LAPACK/BLAS routines (`tg.lapack`); the rest of torch.linalg is
    # composed of these (`frontend/linalg_compositions.py`)
    OpSpec("linalg_lu_factor_ex"),
    OpSpec("linalg_lu_solve"),
    OpSpec("linalg_cholesky_ex"),
    OpSpec("geqrf"),
    OpSpec("linalg_householder_product"),
    OpSpec("ormqr"),
    OpSpec("_linalg_eigh"),
    OpSpec("_linalg_svd"),
    OpSpec("linalg_solve_triangular"),
    OpSpec("linalg_ldl_factor_ex"),
    OpSpec("linalg_ldl_solve"),
)

#: schema type (``Argument.real_type``) -> our argument kind
_KINDS = {
    "Tensor": "tensor",
    "Optional[Tensor]": "tensor?",
    "List[Tensor]": "tensor[]",
    "List[Optional[Tensor]]": "tensor?[]",
    "int": "int",
    "Optional[int]": "int?",
    "List[int]": "int[]",
    "Optional[List[int]]": "int[]?",
    "List[float]": "float[]",
    "Optional[List[float]]": "float[]?",
    "number": "scalar",
    "Optional[number]": "scalar?",
    "float": "float",
    "Optional[float]": "float?",
    "bool": "bool",
    "Optional[bool]": "bool?",
    "str": "str",
    "Optional[str]": "str?",
    "ScalarType": "dtype",
    "Optional[ScalarType]": "dtype?",
    "MemoryFormat": "int",
    "Optional[MemoryFormat]": "int?",
    "Layout": "drop",
    "Optional[Layout]": "drop",
    "Device": "drop",
    "Optional[Device]": "drop",
}

#: argument kind -> property definition (without default); a trailing "?" makes it optional
_PROP_CONSTRAINT = {
    "int": "IntegerAttr[I64]",
    "int[]": "DenseArrayBase.constr(i64)",
    "float[]": "DenseArrayBase.constr(f64)",
    "scalar": "ScalarAttr",
    "float": "FloatAttr[Float64Type]",
    "bool": "IntegerAttr[I1]",
    "str": "StringAttr",
    "dtype": "StringAttr",
}

#: argument kind -> Python type in the generated ``__init__``
_PY_TYPE = {
    "tensor": "SSAValue",
    "tensor?": "SSAValue | None",
    "tensor[]": "Sequence[SSAValue]",
    "tensor?[]": "Sequence[SSAValue | None]",
    "int": "int",
    "int[]": "Sequence[int]",
    "float[]": "Sequence[float]",
    "scalar": "int | float",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "dtype": "str",
}

_TENSOR_KINDS = ("tensor", "tensor?", "tensor[]", "tensor?[]")

#: names the preamble imports for generated ops only; dropped when no op uses them
_OPTIONAL_IMPORTS = (
    "AttrSizedOperandSegments",
    "I1",
    "I64",
    "DenseArrayBase",
    "FloatAttr",
    "Float64Type",
    "IntegerAttr",
    "StringAttr",
    "f64",
    "i1",
    "i64",
    "opt_prop_def",
    "opt_operand_def",
    "operand_def",
    "prop_def",
    "var_operand_def",
    "var_result_def",
    "result_def",
    "Sequence",
)


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


def _schema_args(spec: OpSpec) -> tuple[str, list[Arg], str]:
    """(schema text, arguments, result kind: "tensor", "tensor[]" or "tensors:<n>")."""
    import torch

    packet = getattr(torch.ops.aten, spec.name)
    schema = getattr(packet, spec.overload)._schema
    args: list[Arg] = []
    for a in schema.arguments:
        kind = _KINDS.get(str(a.real_type))
        if kind is None:
            raise SystemExit(f"gen_aten_dialect: {schema}: argument '{a.name}' has unsupported type {a.real_type}")
        has_default = a.has_default_value()
        args.append(Arg(a.name, kind, a.kwarg_only, has_default, a.default_value if has_default else None))
    returns = [str(r.type) for r in schema.returns]
    if returns == ["List[Tensor]"]:
        return str(schema), args, "tensor[]"
    if not returns or any(r != "Tensor" for r in returns):
        raise SystemExit(f"gen_aten_dialect: {schema}: returns {returns}, expected Tensors or one Tensor[]")
    return str(schema), args, "tensor" if len(returns) == 1 else f"tensors:{len(returns)}"


def _default_attr(arg: Arg) -> str | None:
    if not arg.has_default or arg.default is None:
        return None
    v = arg.default
    if arg.kind == "int":
        return f"IntegerAttr({int(v)}, i64)"
    if arg.kind == "int[]":
        return f"DenseArrayBase.from_list(i64, {list(v)!r})"
    if arg.kind == "scalar":
        if isinstance(v, (bool, int)):
            return f"IntegerAttr({int(v)}, i64)"
        return f"FloatAttr({float(v)!r}, f64)"
    if arg.kind == "float":
        return f"FloatAttr({float(v)!r}, f64)"
    if arg.kind == "bool":
        return f"IntegerAttr({int(bool(v))}, i1)"
    if arg.kind == "str":
        return f"StringAttr({str(v)!r})"
    return None


def _default_py(arg: Arg) -> str | None:
    if not arg.has_default:
        return None
    v = arg.default
    if v is None:
        return "None"
    if arg.kind == "float" or arg.kind == "scalar" and isinstance(v, float):
        return repr(float(v))
    if arg.kind == "bool":
        return repr(bool(v))
    if arg.kind == "int[]":
        return repr(tuple(v))
    return repr(v)


def _property_line(a: Arg) -> str:
    base_kind = a.kind.rstrip("?")
    constraint = _PROP_CONSTRAINT[base_kind]
    if a.kind.endswith("?") or (a.has_default and a.default is None):
        return f"    {a.name} = opt_prop_def({constraint})"
    default = _default_attr(a)
    extra = f", default_value={default}" if default else ""
    return f"    {a.name} = prop_def({constraint}{extra})"


def _emit_op(spec: OpSpec) -> str:
    schema, args, results = _schema_args(spec)
    tensors = [a for a in args if a.kind in _TENSOR_KINDS]
    n_optional = sum(1 for a in tensors if a.kind != "tensor")
    lines = [
        "@irdl_op_definition",
        f"class {spec.class_name}(AtenOp):",
        f'    """``{schema}``"""',
        "",
        f'    name = "{spec.op_name}"',
        f'    TARGET: ClassVar[str] = "{spec.target}"',
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
        elif a.kind in ("tensor[]", "tensor?[]"):
            lines.append(f"    {a.name} = var_operand_def(AnyTensor)")
            if a.kind == "tensor?[]":
                lines.append(f'    {a.name}_none = prop_def(DenseArrayBase.constr(i64), default_value=DenseArrayBase.from_list(i64, []))')
        elif a.kind != "drop":
            lines.append(_property_line(a))
    if results == "tensor":
        result_names = ["result"]
        lines.append("    result = result_def(AnyTensor)")
    elif results == "tensor[]":
        result_names = []
        lines.append("    outputs = var_result_def(AnyTensor)")
    else:
        result_names = [f"result{i}" for i in range(int(results.split(":")[1]))]
        lines += [f"    {r} = result_def(AnyTensor)" for r in result_names]
    options = ["ParsePropInAttrDict()"]
    if n_optional > 1:
        options.append("AttrSizedOperandSegments()")
    lines.append(f"    irdl_options = ({', '.join(options)},)")
    # assembly format: required operands comma-separated, then optional ones as `(`,` $x^)?`;
    # a variadic operand after the first is bracketed: `$self [$i, $j]`
    fmt: list[str] = []
    if n_optional > 1:  # functional-type(operands, ...) would be ambiguous: name each optional operand
        required = [a for a in tensors if a.kind == "tensor"]
        fmt = [", ".join(f"${a.name}" for a in required).replace(", ", " `,` ")]
        fmt += [f"(`{a.name}` ${a.name}^ `:` type(${a.name}))?" for a in tensors if a.kind == "tensor?"]
        if any(a.kind not in ("tensor", "tensor?") for a in tensors):
            raise SystemExit(f"gen_aten_dialect: {schema}: a variadic Tensor beside optional ones")
        types = " `,` ".join(f"type(${a.name})" for a in required)
        lines.append(f'    assembly_format = "{" ".join(fmt)} attr-dict `:` {types} `->` type(results)"')
        tensors = []
    for a in tensors:
        if a.kind == "tensor":
            if fmt and fmt[-1].startswith("("):
                raise SystemExit(f"gen_aten_dialect: {schema}: a required Tensor follows an optional one")
            fmt.append(("`,` " if fmt else "") + f"${a.name}")
        elif a.kind == "tensor?":
            if not fmt:
                raise SystemExit(f"gen_aten_dialect: {schema}: the first Tensor argument is optional")
            fmt.append(f"(`,` ${a.name}^)?")
        else:
            fmt.append(f"`[` ${a.name} `]`" if fmt else f"${a.name}")
    if not tensors and not n_optional:  # arange, full, ones, ...: no operands at all
        lines.append('    assembly_format = "attr-dict `:` type(results)"')
    elif tensors:
        fmt_str = " ".join(fmt + ["attr-dict `:` functional-type(operands, results)"])
        lines.append(f'    assembly_format = "{fmt_str}"')
    lines.append("")
    # __init__: schema order; keyword-only where the schema says so; result types last
    params: list[str] = []
    star = False
    for a in args:
        if a.kind == "drop":
            continue
        if a.kwarg_only and not star:
            params.append("*")
            star = True
        default = _default_py(a)
        py_type = _PY_TYPE[a.kind.rstrip("?")] if a.kind not in _PY_TYPE else _PY_TYPE[a.kind]
        if a.kind.endswith("?") and a.kind not in _PY_TYPE:
            py_type += " | None"
        params.append(f"{a.py_name}: {py_type}" + (f" = {default}" if default is not None else ""))
    if not star:
        params.append("*")
    if results == "tensor":
        params.append("result_type: Attribute")
        result_arg = "[result_type]"
    else:
        params.append("result_types: Sequence[Attribute]")
        result_arg = "[list(result_types)]" if results == "tensor[]" else "result_types"
    values = ", ".join("None" if a.kind == "drop" else a.py_name for a in args) + ("," if len(args) == 1 else "")
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
    seen: dict[str, str] = {}
    for spec in OPS:
        if spec.class_name in seen:
            raise SystemExit(f"gen_aten_dialect: {spec.op_name} and {seen[spec.class_name]} both map to class {spec.class_name}")
        seen[spec.class_name] = spec.op_name
    ops = [_emit_op(spec) for spec in OPS]
    verifiers = sorted({spec.verifier for spec in OPS if spec.verifier})
    preamble = PREAMBLE.replace("@TORCH_VERSION@", version).replace("@VERIFIERS@", "".join(f"    {v},\n" for v in verifiers))
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

Schema mapping: ``Tensor`` arguments are operands (``Tensor?`` optional, ``Tensor[]`` variadic;
``Tensor?[]`` variadic plus ``<name>_none``, the positions that are None) named like the schema
arguments; ``int`` is an ``i64`` property, ``int[]`` an ``array<i64: ...>`` property, ``float`` an
``f64`` property, ``Scalar`` an ``i64`` or ``f64`` property (integer or float, as written),
``bool`` an ``i1`` property, ``str`` and ``ScalarType`` string properties (``dtype = "int64"``);
``Layout`` and ``Device`` are dropped. Schema defaults are property defaults. One result per
returned Tensor; a returned ``Tensor[]`` is the variadic result ``outputs``. Ops take every dtype
of the one table (`tensor_graphs.dtypes`); shapes are checked where that is cheap.

```mlir
%w = tg.weight "fc.weight" : tensor<6x8xf32>
%y = aten.linear %x, %w : (tensor<2x8xf32>, tensor<6x8xf32>) -> tensor<2x6xf32>
%z = aten.add.Tensor %y, %y {alpha = 2.0 : f64} : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
%u = aten.unsupported %z {target = "aten::erfinv", location = "act (Foo)"} : (tensor<2x6xf32>) -> tensor<2x6xf32>
%i = aten.index.Tensor %t[%r, %c] {indices_none = array<i64: 0>} : (tensor<4x5xf32>, tensor<3xi64>, tensor<3xi64>) -> tensor<4x3xf32>
%p:2 = aten.split.Tensor %y {split_size = 3 : i64, dim = 1 : i64} : (tensor<2x6xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
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
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
)

from tensor_graphs.dialects.aten_base import (  # noqa: F401 - the hand-written half, re-exported
    DTYPE_NAMES,
    AnyTensor,
    AtenOp,
    ScalarAttr,
    UnsupportedOp,
    _build,
    aten_matmul_shape,
    infer_view_shape,
    normalize_dim,
@VERIFIERS@)
'''


if __name__ == "__main__":
    sys.exit(main())
