"""A NumPy reference interpreter for the `tg` dialect.

``EVALUATORS`` maps every tg op class to a function ``(op, *operand_arrays) -> ndarray``; the one
exception is ``tg.weight``, whose evaluator receives the weight mapping (name -> array) in place of
operands, since weights are bound at run time. ``evaluate_function`` runs a whole ``func.func``.

Numerics: every result is cast to its IR element type (float32 for f32 tensors). ``tg.matmul``
computes ``alpha * op(a) @ op(b) + beta * acc`` in float64 and casts the result to float32 once,
so the reference is at least as accurate as any float32 kernel it is compared against.
Elementwise ops run in the operands' own dtype (float32), like the generated loops.

Used by `constant-fold` and by the property tests (before/after a pass must evaluate the same).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue

from tensor_graphs.dialects.tensor import (
    AddOp,
    BiasActivationOp,
    ConstantOp,
    DivOp,
    ElementwiseBinaryOp,
    MatmulOp,
    MulOp,
    ReluOp,
    ReshapeOp,
    SubOp,
    TransposeOp,
    WeightOp,
    shape_of,
)

Evaluator = Callable[..., np.ndarray]


class EvaluationError(ValueError):
    """The reference interpreter cannot run this IR; the message names the op and why."""


# --------------------------------------------------------------------------- dtypes and constants


def numpy_dtype(element_type: Attribute) -> np.dtype:
    """The little-endian NumPy dtype that stores ``element_type`` (the byte layout of ``dense<>``)."""
    if isinstance(element_type, Float32Type):
        return np.dtype("<f4")
    if isinstance(element_type, Float64Type):
        return np.dtype("<f8")
    if isinstance(element_type, Float16Type):
        return np.dtype("<f2")
    if isinstance(element_type, IntegerType) and element_type.width.data in (8, 16, 32, 64):
        return np.dtype(f"<i{element_type.width.data // 8}")
    raise EvaluationError(f"evaluate: element type {element_type} has no NumPy equivalent")


def dense_to_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The elements of a ``dense<...>`` attribute as an array of its shape (splats expanded)."""
    shape = tuple(attr.get_shape())
    dtype = numpy_dtype(attr.get_element_type())
    flat = np.frombuffer(attr.data.data, dtype=dtype)
    if flat.size == 1 and int(np.prod(shape)) != 1:
        return np.broadcast_to(flat.reshape(()), shape).copy()
    return flat.reshape(shape).copy()


def array_to_dense(array: np.ndarray, type: TensorType) -> DenseIntOrFPElementsAttr:
    """A ``dense<...>`` attribute of ``type`` holding ``array`` (cast to the element type)."""
    dtype = numpy_dtype(type.get_element_type())
    data = np.ascontiguousarray(np.asarray(array, dtype=dtype).reshape(tuple(type.get_shape())))
    return DenseIntOrFPElementsAttr(type, BytesAttr(data.tobytes()))


def constant_array(value: SSAValue) -> np.ndarray | None:
    """The array of ``value`` when a ``tg.constant`` defines it, else None."""
    owner = value.owner
    if isinstance(owner, ConstantOp):
        return dense_to_array(owner.value)
    return None


def scalar_constant(value: SSAValue) -> float | None:
    """The number held by a one-element ``tg.constant`` (rank 0 or all dims 1), else None."""
    array = constant_array(value)
    if array is None or array.size != 1:
        return None
    return float(array.reshape(()))


def splat_constant(value: SSAValue) -> float | None:
    """The number every element of a ``tg.constant`` equals (any shape), else None."""
    array = constant_array(value)
    if array is None or array.size == 0:
        return None
    first = array.reshape(-1)[0]
    return float(first) if np.all(array == first) else None


def _result_dtype(op: Operation) -> np.dtype:
    return numpy_dtype(op.results[0].type.get_element_type())  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- evaluators


def _weight(op: WeightOp, weights: Mapping[str, np.ndarray]) -> np.ndarray:
    name = op.weight_name.data
    if name not in weights:
        raise EvaluationError(f"evaluate: tg.weight \"{name}\" is not in the weights given ({len(weights)} names)")
    array = np.asarray(weights[name])
    expected = shape_of(op.result)
    if array.shape != expected:
        raise EvaluationError(f"evaluate: weight \"{name}\" has shape {list(array.shape)}, the IR expects {list(expected)}")
    return array.astype(_result_dtype(op))


def _constant(op: ConstantOp) -> np.ndarray:
    return dense_to_array(op.value)


def _matmul(op: MatmulOp, a: np.ndarray, b: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    transpose_a, transpose_b, alpha, beta = op.flags
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if transpose_a:
        a64 = np.swapaxes(a64, -1, -2)
    if transpose_b:
        b64 = np.swapaxes(b64, -1, -2)
    out = alpha * np.matmul(a64, b64)
    if acc is not None:
        out = out + beta * acc.astype(np.float64)
    return np.broadcast_to(out, shape_of(op.result)).astype(_result_dtype(op))


def _elementwise_binary(op: ElementwiseBinaryOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return getattr(np, op.NUMPY_FN)(a, b).astype(_result_dtype(op))


#: activation name (tg.bias_activation's `activation`) -> its NumPy function.
ACTIVATION_FNS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
}


def _relu(op: ReluOp, x: np.ndarray) -> np.ndarray:
    return ACTIVATION_FNS["relu"](x)


def _reshape(op: ReshapeOp, x: np.ndarray) -> np.ndarray:
    return x.reshape(shape_of(op.result))


def _transpose(op: TransposeOp, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, op.permutation))


def _bias_activation(op: BiasActivationOp, x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return ACTIVATION_FNS[op.activation.data](x + bias).astype(_result_dtype(op))


#: tg op class -> reference implementation.
EVALUATORS: dict[type[Operation], Evaluator] = {
    WeightOp: _weight,
    ConstantOp: _constant,
    MatmulOp: _matmul,
    AddOp: _elementwise_binary,
    SubOp: _elementwise_binary,
    MulOp: _elementwise_binary,
    DivOp: _elementwise_binary,
    ReluOp: _relu,
    ReshapeOp: _reshape,
    TransposeOp: _transpose,
    BiasActivationOp: _bias_activation,
}


def evaluate_op(
    op: Operation, operands: Sequence[np.ndarray], weights: Mapping[str, np.ndarray] | None = None
) -> np.ndarray:
    """Run one tg op on NumPy arrays (``weights`` is needed only by ``tg.weight``)."""
    fn = EVALUATORS.get(type(op))
    if fn is None:
        raise EvaluationError(f"evaluate: no NumPy evaluator for '{op.name}' (known: {', '.join(sorted(c.name for c in EVALUATORS))})")
    if isinstance(op, WeightOp):
        return fn(op, weights if weights is not None else {})
    return fn(op, *operands)


def evaluate_function(
    func_op: func.FuncOp, inputs: Sequence[np.ndarray], weights: Mapping[str, np.ndarray] | None = None
) -> list[np.ndarray]:
    """Run a tg-level ``func.func`` on ``inputs``; returns the ``func.return`` operands as arrays."""
    block = func_op.body.block
    fname = func_op.sym_name.data
    if len(inputs) != len(block.args):
        raise EvaluationError(f"evaluate: @{fname} takes {len(block.args)} inputs, got {len(inputs)}")
    env: dict[SSAValue, np.ndarray] = {}
    for i, (arg, array) in enumerate(zip(block.args, inputs)):
        array = np.asarray(array)
        expected = shape_of(arg)
        if array.shape != expected:
            raise EvaluationError(f"evaluate: input {i} of @{fname} has shape {list(array.shape)}, expected {list(expected)}")
        env[arg] = array.astype(numpy_dtype(arg.type.get_element_type()))  # type: ignore[attr-defined]
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]
        env[op.results[0]] = evaluate_op(op, [env[v] for v in op.operands], weights)
    raise EvaluationError(f"evaluate: @{fname} has no func.return")
