"""`fuse-elementwise`: a connected group of elementwise ops becomes one `tg.fused_elementwise`.

A group is grown backwards from a root op through the producers of its operands. A producer
joins when it is elementwise (``ELEMENTWISE``: the tg unary ops, `tg.gelu`, add/sub/mul/div/
pow/max/min, `tg.select`, `tg.bias_activation`, `tg.cast` to a float, `tg.fused_elementwise`
itself), has a float result of the root's shape (a `tg.fused_elementwise`, such as a comparison
on run-time data, a result of any type), and every live user of its result is already in the
group; so the group has ONE external result (the root's) and lowers to one loop over memory.
Operands from outside the group are its inputs (deduplicated, each broadcast to the result
shape); splat constants are inlined as ``arith.constant``. Single-op groups stay as they are.

    %s = tg.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %t = tg.tanh %s : tensor<4x8xf32>
    %c = tg.constant dense<2.0> : tensor<f32>
    %m = tg.mul %t, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
    =>
    %m = tg.fused_elementwise %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
    ^bb0(%a: f32, %c: f32):
      %0 = arith.addf %a, %c : f32
      %1 = math.tanh %0 : f32
      %2 = arith.constant 2.000000e+00 : f32
      %3 = arith.mulf %1, %2 : f32
      tg.yield %3 : f32
    }

The scalar computation of each op comes from ``SCALAR_BUILDERS`` (op class -> builder), unary
functions from ``UNARY_BODIES`` (keyed by the names of ``functions.UNARY_FUNCTIONS``; gelu,
sigmoid, silu expand to `math`/`arith` ops). The scalar ops a body can hold are exactly those of
``evaluate.SCALAR_OPS`` — the set codegen must emit.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, OpResult, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tensor_graphs.dialects.shapes import ShapeError, broadcast_shapes
from tensor_graphs.dialects.tensor import (
    AddOp,
    BiasActivationOp,
    CastOp,
    ConstantOp,
    DivOp,
    ElementwiseUnaryOp,
    FusedElementwiseOp,
    GeluOp,
    MaxOp,
    MinOp,
    MulOp,
    PowOp,
    SelectOp,
    SubOp,
    YieldOp,
    shape_of,
)
from tensor_graphs.transforms.dce import erase_dead_producers, live_uses
from tensor_graphs.transforms.evaluate import splat_constant


# --------------------------------------------------------------------------- scalar bodies


class ScalarBody:
    """Appends scalar ops to a block; ``const`` makes (and reuses) an ``arith.constant``."""

    def __init__(self, block: Block):
        self.block = block
        self._constants: dict[tuple[float, Attribute], SSAValue] = {}

    def emit(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def const(self, value: float, type: Attribute) -> SSAValue:
        key = (value, type)
        if key not in self._constants:
            attr = IntegerAttr(int(value), type) if isinstance(type, IntegerType) else FloatAttr(value, type)  # type: ignore[arg-type]
            self._constants[key] = self.emit(arith.ConstantOp(attr))
        return self._constants[key]


UnaryBody = Callable[[SSAValue, ScalarBody], SSAValue]


def _math(op_type: type[Operation]) -> UnaryBody:
    return lambda x, b: b.emit(op_type(x))


def _one_plus_exp_neg(x: SSAValue, b: ScalarBody) -> SSAValue:
    e = b.emit(math.ExpOp(b.emit(arith.NegfOp(x))))
    return b.emit(arith.AddfOp(b.const(1.0, x.type), e))


def _sigmoid(x: SSAValue, b: ScalarBody) -> SSAValue:
    return b.emit(arith.DivfOp(b.const(1.0, x.type), _one_plus_exp_neg(x, b)))


def _silu(x: SSAValue, b: ScalarBody) -> SSAValue:
    return b.emit(arith.DivfOp(x, _one_plus_exp_neg(x, b)))


def _half_x_one_plus(x: SSAValue, f: SSAValue, b: ScalarBody) -> SSAValue:
    """``0.5 * x * (1 + f)``"""
    one_plus = b.emit(arith.AddfOp(b.const(1.0, x.type), f))
    half_x = b.emit(arith.MulfOp(x, b.const(0.5, x.type)))
    return b.emit(arith.MulfOp(half_x, one_plus))


def _gelu(x: SSAValue, b: ScalarBody) -> SSAValue:
    scaled = b.emit(arith.MulfOp(x, b.const(1.0 / pymath.sqrt(2.0), x.type)))
    return _half_x_one_plus(x, b.emit(math.ErfOp(scaled)), b)


def _gelu_tanh(x: SSAValue, b: ScalarBody) -> SSAValue:
    cube = b.emit(arith.MulfOp(b.emit(arith.MulfOp(x, x)), x))
    inner = b.emit(arith.AddfOp(x, b.emit(arith.MulfOp(cube, b.const(0.044715, x.type)))))
    scaled = b.emit(arith.MulfOp(inner, b.const(pymath.sqrt(2.0 / pymath.pi), x.type)))
    return _half_x_one_plus(x, b.emit(math.TanhOp(scaled)), b)


#: function name (functions.UNARY_FUNCTIONS) -> scalar body builder.
UNARY_BODIES: dict[str, UnaryBody] = {
    "none": lambda x, b: x,
    "relu": lambda x, b: b.emit(arith.MaximumfOp(x, b.const(0.0, x.type))),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": _silu,
    "sigmoid": _sigmoid,
    "tanh": _math(math.TanhOp),
    "exp": _math(math.ExpOp),
    "log": _math(math.LogOp),
    "neg": lambda x, b: b.emit(arith.NegfOp(x)),
    "sqrt": _math(math.SqrtOp),
    "rsqrt": _math(math.RsqrtOp),
    "erf": _math(math.ErfOp),
    "cos": _math(math.CosOp),
    "sin": _math(math.SinOp),
    "abs": _math(math.AbsFOp),
}


def _constant_of(value: SSAValue) -> float | None:
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, FloatAttr):
        return owner.value.value.data
    return None


def _pow(x: SSAValue, y: SSAValue, b: ScalarBody) -> SSAValue:
    """``x ** y``; small constant exponents become multiplies (``x ** 3`` in GELU) or a sqrt."""
    e = _constant_of(y)
    if e == 1.0:
        return x
    if e == 2.0:
        return b.emit(arith.MulfOp(x, x))
    if e == 3.0:
        return b.emit(arith.MulfOp(b.emit(arith.MulfOp(x, x)), x))
    if e == 0.5:
        return b.emit(math.SqrtOp(x))
    if e == -0.5:
        return b.emit(math.RsqrtOp(x))
    return b.emit(math.PowFOp(x, y))


#: binary function name (functions.BINARY_FUNCTIONS) -> scalar body builder.
BINARY_BODIES: dict[str, Callable[[SSAValue, SSAValue, ScalarBody], SSAValue]] = {
    "add": lambda x, y, b: b.emit(arith.AddfOp(x, y)),
    "sub": lambda x, y, b: b.emit(arith.SubfOp(x, y)),
    "mul": lambda x, y, b: b.emit(arith.MulfOp(x, y)),
    "div": lambda x, y, b: b.emit(arith.DivfOp(x, y)),
    "max": lambda x, y, b: b.emit(arith.MaximumfOp(x, y)),
    "min": lambda x, y, b: b.emit(arith.MinimumfOp(x, y)),
    "pow": _pow,
}

#: tg binary op class -> its name in BINARY_BODIES / functions.BINARY_FUNCTIONS.
BINARY_OPS: dict[type[Operation], str] = {
    AddOp: "add", SubOp: "sub", MulOp: "mul", DivOp: "div", PowOp: "pow", MaxOp: "max", MinOp: "min",
}


def _cast(op: CastOp, args: list[SSAValue], b: ScalarBody) -> SSAValue:
    (x,) = args
    src, dst = x.type, op.result.type.element_type  # type: ignore[attr-defined]
    if src == dst:
        return x
    if isinstance(src, IntegerType):
        conv = arith.UIToFPOp if src.width.data == 1 else arith.SIToFPOp
        return b.emit(conv(x, dst))  # type: ignore[arg-type]
    if src.bitwidth < dst.bitwidth:  # type: ignore[attr-defined]
        return b.emit(arith.ExtFOp(x, dst))  # type: ignore[arg-type]
    return b.emit(arith.TruncFOp(x, dst))  # type: ignore[arg-type]


def _inline(op: FusedElementwiseOp, args: list[SSAValue], b: ScalarBody) -> SSAValue:
    """The body of a fused op, cloned with its arguments replaced by ``args``."""
    mapping: dict[SSAValue, SSAValue] = dict(zip(op.body.block.args, args))
    for inner in op.body.block.ops:
        if isinstance(inner, YieldOp):
            return mapping[inner.values[0]]
        clone = inner.clone(value_mapper=mapping)
        b.block.add_op(clone)
        for old, new in zip(inner.results, clone.results):
            mapping[old] = new
    raise AssertionError("a verified tg.fused_elementwise body ends with tg.yield")


ScalarBuilder = Callable[[Operation, list[SSAValue], ScalarBody], SSAValue]

#: tg op class (or base class) -> builder of its scalar computation.
SCALAR_BUILDERS: dict[type[Operation], ScalarBuilder] = {
    ElementwiseUnaryOp: lambda op, args, b: UNARY_BODIES[op.fn](args[0], b),  # type: ignore[attr-defined]
    GeluOp: lambda op, args, b: UNARY_BODIES[op.fn](args[0], b),  # type: ignore[attr-defined]
    **{cls: (lambda op, args, b: BINARY_BODIES[BINARY_OPS[type(op)]](args[0], args[1], b)) for cls in BINARY_OPS},
    SelectOp: lambda op, args, b: b.emit(arith.SelectOp(*args)),
    BiasActivationOp: lambda op, args, b: UNARY_BODIES[op.activation.data](b.emit(arith.AddfOp(*args)), b),  # type: ignore[attr-defined]
    CastOp: _cast,  # type: ignore[dict-item]
    FusedElementwiseOp: _inline,  # type: ignore[dict-item]
}


def scalar_builder(op: Operation) -> ScalarBuilder | None:
    for cls in type(op).__mro__:
        if cls in SCALAR_BUILDERS:
            return SCALAR_BUILDERS[cls]
    return None


#: The op classes that fuse.
ELEMENTWISE: tuple[type[Operation], ...] = tuple(SCALAR_BUILDERS)


# --------------------------------------------------------------------------- groups


def fusable(op: Operation) -> bool:
    """Whether ``op`` can join a fused group (an elementwise op of a tensor result; module doc)."""
    if scalar_builder(op) is None or len(op.results) != 1:
        return False
    t = op.results[0].type
    if not isinstance(t, TensorType):
        return False
    if not isinstance(t.element_type, AnyFloat) and not isinstance(op, FusedElementwiseOp):
        return False  # a scalar body of any type (a comparison's i1) fuses; named ops build float bodies
    if isinstance(op, ElementwiseUnaryOp | GeluOp) and op.fn not in UNARY_BODIES:
        return False
    return not isinstance(op, BiasActivationOp) or op.activation.data in UNARY_BODIES


def grow_group(root: Operation) -> list[Operation]:
    """The ops fused with ``root`` (root last, the rest in block order); see the module doc."""
    shape = shape_of(root.results[0])
    group: set[Operation] = {root}
    changed = True
    while changed:
        changed = False
        for member in list(group):
            for value in member.operands:
                p = value.owner
                if not isinstance(value, OpResult) or p in group or not fusable(p):  # type: ignore[arg-type]
                    continue
                if p.parent is not root.parent or shape_of(value) != shape:  # type: ignore[union-attr]
                    continue
                if all(use.operation in group for use in live_uses(value)):
                    group.add(p)  # type: ignore[arg-type]
                    changed = True
    block = root.parent
    assert block is not None
    order = {id(op): i for i, op in enumerate(block.ops)}
    return sorted(group, key=lambda op: order[id(op)])


def _inputs(group: list[Operation], inline_constants: bool) -> list[SSAValue]:
    members = {id(op) for op in group}
    inputs: list[SSAValue] = []
    for op in group:
        for v in op.operands:
            if isinstance(v, OpResult) and id(v.owner) in members:
                continue
            if inline_constants and isinstance(v.owner, ConstantOp) and splat_constant(v) is not None:
                continue
            if v not in inputs:
                inputs.append(v)
    return inputs


def build_fused(group: list[Operation]) -> FusedElementwiseOp | None:
    """One tg.fused_elementwise computing ``group[-1]`` from the group's external operands."""
    root = group[-1]
    shape = shape_of(root.results[0])
    for inline_constants in (True, False):
        inputs = _inputs(group, inline_constants)
        try:
            if inputs and broadcast_shapes(*(shape_of(v) for v in inputs)) == shape:
                break
        except ShapeError:
            pass
    else:
        return None
    if all(isinstance(v.owner, ConstantOp) for v in inputs):
        return None  # constant-fold's job
    block = Block(arg_types=[v.type.element_type for v in inputs])  # type: ignore[attr-defined]
    body = ScalarBody(block)
    scalars: dict[SSAValue, SSAValue] = dict(zip(inputs, block.args))
    for op in group:
        args = []
        for v in op.operands:
            if v not in scalars:  # an inlined splat constant
                scalars[v] = body.const(splat_constant(v), v.type.element_type)  # type: ignore[arg-type, attr-defined]
            args.append(scalars[v])
        scalars[op.results[0]] = scalar_builder(op)(op, args, body)  # type: ignore[misc]
    block.add_op(YieldOp(scalars[root.results[0]]))
    return FusedElementwiseOp(inputs, root.results[0].type, Region([block]))


class FuseElementwiseGroup(RewritePattern):
    """Replaces the group rooted at an op by one tg.fused_elementwise (walks from the last op back)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not fusable(op) or op.parent is None or isinstance(op.parent_op(), FusedElementwiseOp):
            return
        group = grow_group(op)
        if len(group) < 2:
            return
        fused = build_fused(group)
        if fused is None:
            return
        fused.result.name_hint = op.results[0].name_hint
        operands = [v for member in group for v in member.operands]
        rewriter.replace(op, fused)
        erase_dead_producers(operands, rewriter)


@dataclass(frozen=True)
class FuseElementwisePass(ModulePass):
    """Fuses connected elementwise ops with one external result into tg.fused_elementwise."""

    name = "fuse-elementwise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseElementwiseGroup()], dce_enabled=False), walk_reverse=True
        ).rewrite_module(op)
