"""A NumPy reference interpreter for the `tg` dialect.

``EVALUATORS`` maps every tg op class to a function ``(op, *operand_arrays) -> ndarray``; the one
exception is ``tg.weight``, whose evaluator receives the weight mapping (name -> array) in place of
operands, since weights are bound at run time. ``evaluate_function`` runs a whole ``func.func``.

Numerics: every result is cast to its IR element type (float32 for f32 tensors). ``tg.matmul``
computes ``activation(alpha * op(a) @ op(b) + beta * acc)`` in float64 and casts the result to
float32 once, so the reference is at least as accurate as any float32 kernel it is compared
against; so do the reductions, softmax, layer norm, rope, attention, the unary functions
(``functions.apply_unary``) and the scalar body of ``tg.fused_elementwise`` (its float values are
carried in float64, see :func:`evaluate_scalar_body`). Binary elementwise ops run in the operands'
own dtype (float32), like the generated loops.

Conventions the kernels must agree with:

- ``i1`` tensors are NumPy ``bool`` arrays; in a ``dense<>`` attribute an i1 element is one byte,
  nonzero meaning true (``array_to_dense`` writes ``0xff``, as xDSL's parser does).
- ``tg.attention``: key ``j`` is visible to query ``i`` iff ``j <= i + Sk - Sq`` when causal;
  query head ``h`` reads kv head ``h // (H / Hkv)``; a query row with no visible key (every
  score ``-inf``) gives zeros, not NaN.
- ``tg.softmax``/``tg.log_softmax`` follow ``torch.softmax`` (a row of ``-inf`` gives NaN).
- State (``tg.state``, ``tg.cache_write``, ``tg.attention {kv_cache}``) is evaluated as a graph's
  first call: fresh zeroed caches and run-time position ``past = 0``, so a cache write lands at
  positions ``[0, n)`` and a kv_cache attention reads the first ``Sq`` positions.

Used by `constant-fold` and by the property tests (before/after a pass must evaluate the same).
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from xdsl.dialects import arith, func, math
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from tensor_graphs import dtypes
from tensor_graphs.dialects.dense import dense_from_numpy, numpy_from_dense
from tensor_graphs.dialects.dense import numpy_dtype_of as numpy_dtype
from tensor_graphs.dialects.functions import ARG_REDUCTIONS, REDUCTIONS, UNARY_FUNCTIONS, apply_unary
from tensor_graphs.dialects.scalar import DigammaOp, ErfcOp, ErfinvOp, HypotOp, I0Op, LgammaOp, NextafterOp, RemFOp
from tensor_graphs.transforms import special_functions
from tensor_graphs.dialects.symbolic import parse_expr
from tensor_graphs.dialects.tensor import (
    AttentionOp,
    BiasActivationOp,
    BroadcastOp,
    CastOp,
    IotaOp,
    SizeOp,
    ConcatOp,
    ConstantOp,
    ElementwiseBinaryOp,
    ElementwiseUnaryOp,
    EmbeddingOp,
    FusedElementwiseOp,
    GeluOp,
    LayerNormOp,
    RmsNormOp,
    RopeOp,
    LogSoftmaxOp,
    CumsumOp,
    ArgTopkOp,
    ArgReduceOp,
    PutOp,
    LapackOp,
    lapack_params,
    CheckNonzeroOp,
    GroupedMatmulOp,
    Im2colOp,
    WinogradConvOp,
    TakeOp,
    MatmulOp,
    ReduceOp,
    ReshapeOp,
    SelectOp,
    SliceOp,
    SoftmaxOp,
    TransposeOp,
    WeightOp,
    YieldOp,
    shape_of,
    StateOp,
    CacheWriteOp,
)
from tensor_graphs.dialects.tensor import TG as _TG

Evaluator = Callable[..., np.ndarray]


class EvaluationError(ValueError):
    """The reference interpreter cannot run this IR; the message names the op and why."""


# --------------------------------------------------------------------------- dtypes and constants


def dense_to_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The elements of a ``dense<...>`` attribute as an array of its shape (splats expanded;
    bfloat16 as float32 values: `dialects.dense.numpy_from_dense`)."""
    return numpy_from_dense(attr)


def array_to_dense(array: np.ndarray, type: TensorType) -> DenseIntOrFPElementsAttr:
    """A ``dense<...>`` attribute of ``type`` holding ``array`` (broadcast to its shape, cast to
    its element type), built from the raw bytes (fast for millions of elements)."""
    return dense_from_numpy(np.broadcast_to(np.asarray(array), tuple(type.get_shape())), type.get_element_type())


def constant_array(value: SSAValue) -> np.ndarray | None:
    """The array of ``value`` when a ``tg.constant`` defines it, else None."""
    owner = value.owner
    if isinstance(owner, ConstantOp):
        return dense_to_array(owner.value)
    return None


def scalar_constant(value: SSAValue) -> float | None:
    """The number held by a one-element ``tg.constant`` (rank 0 or all dims 1), else None."""
    owner = value.owner
    if not isinstance(owner, ConstantOp) or len(owner.value) != 1:
        return None
    return float(dense_to_array(owner.value).reshape(()))


def splat_constant(value: SSAValue) -> float | None:
    """The number every element of a ``tg.constant`` equals (any shape; seen through broadcasts
    and reshapes of it, as a splat of symbolic shape is written), else None."""
    while isinstance(value.owner, (BroadcastOp, ReshapeOp)):
        value = value.owner.operands[0]
    array = constant_array(value)
    if array is None or array.size == 0:
        return None
    first = array.reshape(-1)[0]
    return float(first) if np.all(array == first) else None


def _result_dtype(op: Operation) -> np.dtype:
    return numpy_dtype(op.results[0].type.get_element_type())  # type: ignore[attr-defined]


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# --------------------------------------------------------------------------- sources and BLAS


def _weight(op: WeightOp, weights: Mapping[str, np.ndarray]) -> np.ndarray:
    name = op.weight_name.data
    if name not in weights:
        raise EvaluationError(f"evaluate: tg.weight \"{name}\" is not in the weights given ({len(weights)} names)")
    array = np.asarray(weights[name])
    expected = shape_of(op.result)
    if array.shape != expected:
        raise EvaluationError(f"evaluate: weight \"{name}\" has shape {list(array.shape)}, the IR expects {list(expected)}")
    row = dtypes.of_element(op.result.type.get_element_type())  # type: ignore[attr-defined]
    if row.numpy is None and array.dtype == row.storage:  # bfloat16 bits
        array = dtypes.from_storage(array, row)
    return array.astype(_result_dtype(op))


def _constant(op: ConstantOp) -> np.ndarray:
    return dense_to_array(op.value)


def _activation(name: str, x64: np.ndarray) -> np.ndarray:
    """An activation of ``functions.UNARY_FUNCTIONS`` on a float64 array."""
    try:
        return UNARY_FUNCTIONS[name](x64)
    except KeyError:
        raise EvaluationError(f"evaluate: unknown activation '{name}'") from None


def _matmul(op: MatmulOp, a: np.ndarray, b: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    transpose_a, transpose_b, alpha, beta = op.flags
    a64, b64 = _f64(a), _f64(b)
    if transpose_a:
        a64 = np.swapaxes(a64, -1, -2)
    if transpose_b:
        b64 = np.swapaxes(b64, -1, -2)
    out = alpha * np.matmul(a64, b64)
    if acc is not None:
        out = out + beta * _f64(acc)
    out = _activation(op.activation.data, out)
    return np.broadcast_to(out, shape_of(op.result)).astype(_result_dtype(op))


# --------------------------------------------------------------------------- elementwise


def _elementwise_binary(op: ElementwiseBinaryOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return getattr(np, op.NUMPY_FN)(a, b).astype(_result_dtype(op))


def _unary(op: ElementwiseUnaryOp | GeluOp, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return apply_unary(op.fn, x).astype(_result_dtype(op))


def _select(op: SelectOp, cond: np.ndarray, on_true: np.ndarray, on_false: np.ndarray) -> np.ndarray:
    return np.where(cond.astype(bool), on_true, on_false).astype(_result_dtype(op))


def _cast(op: CastOp, x: np.ndarray) -> np.ndarray:
    dtype = _result_dtype(op)
    if dtype == np.dtype(bool):
        return x != 0
    with np.errstate(all="ignore"):
        return x.astype(dtype)


def _bias_activation(op: BiasActivationOp, x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _activation(op.activation.data, _f64(x + bias)).astype(_result_dtype(op))


# --------------------------------------------------------------------------- data movement


def _reshape(op: ReshapeOp, x: np.ndarray) -> np.ndarray:
    return x.reshape(shape_of(op.result))


def _transpose(op: TransposeOp, x: np.ndarray) -> np.ndarray:
    return np.array(np.transpose(x, op.permutation), order="C")  # (ascontiguousarray makes 0-d 1-d)


def _slice(op: SliceOp, x: np.ndarray) -> np.ndarray:
    dim, start, step = op.bounds
    size = shape_of(op.result)[dim]
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, start + step * size, step)
    return np.ascontiguousarray(x[tuple(index)])


def _concat(op: ConcatOp, *inputs: np.ndarray) -> np.ndarray:
    return np.concatenate(inputs, axis=op.dim.value.data).astype(_result_dtype(op))


def _broadcast(op: BroadcastOp, x: np.ndarray) -> np.ndarray:
    return np.broadcast_to(x, shape_of(op.result)).copy()


def _embedding(op: EmbeddingOp, table: np.ndarray, indices: np.ndarray) -> np.ndarray:
    rows = table.shape[0]
    if indices.size and (indices.min() < 0 or indices.max() >= rows):
        raise EvaluationError(
            f"evaluate: tg.embedding index out of range [{int(indices.min())}, {int(indices.max())}] for a table of {rows} rows"
        )
    return table[indices]


# --------------------------------------------------------------------------- reductions and normalisations


def _reduce(op: ReduceOp, x: np.ndarray) -> np.ndarray:
    """`functions.REDUCTIONS`; float sums, means and products in float64."""
    source = _f64(x) if op.KIND in ("sum", "mean", "prod") and np.issubdtype(x.dtype, np.floating) else x
    out = REDUCTIONS[op.KIND](source, axis=op.reduce_dims, keepdims=op.keeps_dims)
    return np.asarray(out).reshape(shape_of(op.result)).astype(_result_dtype(op))


def _arg_reduce(op: ArgReduceOp, x: np.ndarray) -> np.ndarray:
    positions = ARG_REDUCTIONS[op.kind.data](x, op.dim.value.data)
    return np.asarray(positions).reshape(shape_of(op.result)).astype(np.int64)


def _take(op: TakeOp, x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    if offsets.size and (offsets.min() < 0 or offsets.max() >= x.size):
        raise EvaluationError(
            f"evaluate: tg.take offset out of range [{int(offsets.min())}, {int(offsets.max())}] for {x.size} elements"
        )
    return x.reshape(-1)[offsets]


def _im2col(op: Im2colOp, x: np.ndarray) -> np.ndarray:
    """Pads with ``pad_value``, then reads each tap's strided view."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = op.window
    oh, ow = shape_of(op.result)[4:]
    pad = op.pad_value.value.data
    # room for a last ceil-mode window that hangs past the padding
    extra_h = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (x.shape[2] + 2 * ph))
    extra_w = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (x.shape[3] + 2 * pw))
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w)), constant_values=pad)
    out = np.empty(shape_of(op.result), x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i, j] = padded[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
    return out


def _winograd_conv(op: WinogradConvOp, x: np.ndarray, w: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """The convolution it computes, directly in float64 (the reference its transforms approximate)."""
    ph, pw = op.pads
    alpha, beta = op.flags
    oh, ow = x.shape[2] + 2 * ph - 2, x.shape[3] + 2 * pw - 2
    padded = np.pad(_f64(x), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    windows = np.stack([padded[:, :, i : i + oh, j : j + ow] for i in range(3) for j in range(3)], axis=2)  # [N, C, 9, OH, OW]
    out = alpha * np.einsum("ock,nckhw->nohw", _f64(w).reshape(*w.shape[:2], 9), windows)
    if acc is not None:
        out = out + beta * _f64(acc)
    out = _activation(op.activation.data, out)
    return np.broadcast_to(out, (x.shape[0], w.shape[0], oh, ow)).astype(_result_dtype(op))


#: `tg.cumsum`'s running reductions as NumPy ufuncs (maximum/minimum propagate NaN, as torch's
#: cummax/cummin values; logaddexp is logcumsumexp's step)
_SCAN_UFUNCS: dict[str, np.ufunc] = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
                                     "logsumexp": np.logaddexp}


def _cumsum(op: CumsumOp, x: np.ndarray) -> np.ndarray:
    """Floats accumulate in float64 (the reference), integers in their own type."""
    source = _f64(x) if np.issubdtype(x.dtype, np.floating) else x
    if op.reduce.data == "logsumexp" and source.dtype == np.bool_:
        source = source.astype(np.float64)
    return _SCAN_UFUNCS[op.reduce.data].accumulate(source, axis=op.dim.value.data).astype(_result_dtype(op))


def _softmax64(x64: np.ndarray, axis: int) -> np.ndarray:
    with np.errstate(all="ignore"):
        shifted = x64 - np.max(x64, axis=axis, keepdims=True)
        e = np.exp(shifted)
        return e / np.sum(e, axis=axis, keepdims=True)


def _softmax(op: SoftmaxOp, x: np.ndarray) -> np.ndarray:
    return _softmax64(_f64(x), op.dim.value.data).astype(_result_dtype(op))


def _log_softmax(op: LogSoftmaxOp, x: np.ndarray) -> np.ndarray:
    axis = op.dim.value.data
    x64 = _f64(x)
    with np.errstate(all="ignore"):
        shifted = x64 - np.max(x64, axis=axis, keepdims=True)
        out = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return out.astype(_result_dtype(op))


def _layer_norm(op: LayerNormOp, x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    x64 = _f64(x)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    out = (x64 - mean) / np.sqrt(var + op.eps.value.data) * _f64(weight) + _f64(bias)
    return out.astype(_result_dtype(op))


def _rms_norm(op: RmsNormOp, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    x64 = _f64(x)
    ms = (x64 * x64).mean(axis=-1, keepdims=True)
    out = x64 / np.sqrt(ms + op.eps.value.data) * _f64(weight)
    return out.astype(_result_dtype(op))


def _rope(op: RopeOp, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, norm: np.ndarray | None = None) -> np.ndarray:
    x64 = _f64(x)
    if norm is not None:  # RMS-normalised first (fuse-rms-norm-rope)
        x64 = x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + op.eps.value.data) * _f64(norm)  # type: ignore[union-attr]
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x64[..., half:], x64[..., :half]], axis=-1)
    return (x64 * _f64(cos) + rotated * _f64(sin)).astype(_result_dtype(op))


def causal_allowed(sq: int, sk: int) -> np.ndarray:
    """``[sq, sk]`` bool: key ``j`` is visible to query ``i`` iff ``j <= i + sk - sq``."""
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)


def _state(op: StateOp) -> np.ndarray:
    """A fresh cache (the first call): zeros."""
    return np.zeros(shape_of(op.result), dtype=_result_dtype(op))


def _cache_write(op: CacheWriteOp, state: np.ndarray, update: np.ndarray) -> np.ndarray:
    """``state`` with ``update`` written at positions ``[past, past + n)``, ``past = 0``."""
    out = np.array(state, copy=True)
    index = [slice(None)] * out.ndim
    index[op.axis.value.data] = slice(0, update.shape[op.axis.value.data])
    out[tuple(index)] = update
    return out


def _attention(op: AttentionOp, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    q, k, v = (np.swapaxes(x, -3, -2) if f else x for x, f in zip((q, k, v), op.seq_major))  # heads-major
    q, k, v = (x if r is None else x[..., r[0]: r[0] + r[1], :, :] for x, r in zip((q, k, v), op.head_ranges))
    out = _heads_major_attention(op, q, k, v, mask)
    return np.ascontiguousarray(np.swapaxes(out, -3, -2)) if op.seq_major[3] else out


def _heads_major_attention(op: AttentionOp, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    if op.uses_kv_cache:  # past = 0: the first Sq cached positions are the keys
        k, v = k[..., : q.shape[-2], :], v[..., : q.shape[-2], :]
    heads, kv_heads = q.shape[-3], k.shape[-3]
    group = heads // kv_heads
    k64, v64 = _f64(k), _f64(v)
    if group != 1:
        k64, v64 = np.repeat(k64, group, axis=-3), np.repeat(v64, group, axis=-3)
    scores = np.matmul(_f64(q), np.swapaxes(k64, -1, -2)) * op.scale.value.data
    if mask is not None:
        scores = scores + _f64(mask)
    if op.is_causal:
        scores = np.where(causal_allowed(q.shape[-2], k.shape[-2]), scores, -np.inf)
    with np.errstate(all="ignore"):
        row_max = np.max(scores, axis=-1, keepdims=True)
        e = np.exp(scores - np.where(np.isfinite(row_max), row_max, 0.0))
        total = np.sum(e, axis=-1, keepdims=True)
        probs = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    return np.matmul(probs, v64).astype(_result_dtype(op))


# --------------------------------------------------------------------------- fused elementwise



def _to_type(x: np.ndarray, type: Attribute) -> np.ndarray:
    """``x`` converted to the body's carrier for ``type``: float64 for floats (rounded through the
    type's own precision), the NumPy dtype otherwise."""
    dtype = numpy_dtype(type)
    if dtype.kind == "f":
        return np.asarray(x).astype(dtype).astype(np.float64)
    if dtype == np.dtype(bool):
        return np.asarray(x) != 0
    return np.asarray(x).astype(dtype)


def _scalar_constant(op: arith.ConstantOp) -> np.ndarray:
    value = op.value
    if isinstance(value, FloatAttr):
        return np.float64(value.value.data)
    if isinstance(value, IntegerAttr):
        return _to_type(np.asarray(value.value.data), value.type)
    raise EvaluationError(f"evaluate: arith.constant {value} is not a scalar")


#: arith.cmpf predicate index -> comparison (ordered ones are false on NaN, unordered true).
_CMPF: tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], ...] = (
    lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),  # false
    np.equal, np.greater, np.greater_equal, np.less, np.less_equal,  # oeq ogt oge olt ole
    lambda a, b: np.not_equal(a, b) & ~np.isnan(a) & ~np.isnan(b),  # one
    lambda a, b: ~np.isnan(a) & ~np.isnan(b),  # ord
    lambda a, b: np.equal(a, b) | np.isnan(a) | np.isnan(b),  # ueq
    lambda a, b: ~np.less_equal(a, b),  # ugt
    lambda a, b: ~np.less(a, b),  # uge
    lambda a, b: ~np.greater_equal(a, b),  # ult
    lambda a, b: ~np.greater(a, b),  # ule
    np.not_equal,  # une
    lambda a, b: np.isnan(a) | np.isnan(b),  # uno
    lambda a, b: np.ones(np.broadcast(a, b).shape, bool),  # true
)
#: arith.cmpi predicate index -> comparison (eq ne slt sle sgt sge ult ule ugt uge; unsigned
#: predicates compare the same values, which is right for the non-negative indices we see).
_CMPI: tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], ...] = (
    np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
    np.less, np.less_equal, np.greater, np.greater_equal,
)


def _elementwise_libm(fn: Callable[[float], float], x: np.ndarray) -> np.ndarray:
    """``fn`` (a `math` function: erfc, lgamma) of each element in float64, back in ``x``'s dtype;
    a pole (``lgamma(0)``, a ValueError in Python) gives inf, as C's does."""
    def safe(v: float) -> float:
        try:
            return fn(v)
        except (ValueError, OverflowError):
            return pymath.inf

    return np.vectorize(safe, otypes=[np.float64])(x).astype(x.dtype)


def _unary_fn(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda op, x: fn(x)


def _binary_fn(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda op, a, b: fn(a, b)


def _convert(op: Operation, x: np.ndarray) -> np.ndarray:
    target = op.results[0].type
    if isinstance(op, arith.FPToSIOp | arith.FPToUIOp):
        return _to_type(np.trunc(x), target)
    return _to_type(x, target)


#: The scalar op set of a `tg.fused_elementwise` body: op class -> ``(op, *operand arrays) -> array``.
#: Codegen emits exactly these; a body op outside this table cannot be evaluated (or compiled).
SCALAR_OPS: dict[type[Operation], Callable[..., np.ndarray]] = {
    arith.ConstantOp: lambda op: _scalar_constant(op),
    arith.AddfOp: _binary_fn(np.add),
    arith.SubfOp: _binary_fn(np.subtract),
    arith.MulfOp: _binary_fn(np.multiply),
    arith.DivfOp: _binary_fn(np.divide),
    arith.MaximumfOp: _binary_fn(np.maximum),
    arith.MinimumfOp: _binary_fn(np.minimum),
    arith.MaxnumfOp: _binary_fn(np.fmax),
    arith.MinnumfOp: _binary_fn(np.fmin),
    arith.NegfOp: _unary_fn(np.negative),
    arith.AddiOp: _binary_fn(np.add),
    arith.SubiOp: _binary_fn(np.subtract),
    arith.MuliOp: _binary_fn(np.multiply),
    arith.AndIOp: _binary_fn(np.bitwise_and),
    arith.OrIOp: _binary_fn(np.bitwise_or),
    arith.XOrIOp: _binary_fn(np.bitwise_xor),
    arith.ShLIOp: _binary_fn(lambda a, b: np.left_shift(a, np.clip(b, 0, 8 * a.dtype.itemsize - 1).astype(a.dtype))),
    arith.ShRSIOp: _binary_fn(lambda a, b: np.right_shift(a, np.clip(b, 0, 8 * a.dtype.itemsize - 1).astype(a.dtype))),
    arith.MaxSIOp: _binary_fn(np.maximum),
    arith.MinSIOp: _binary_fn(np.minimum),
    arith.FloorDivSIOp: _binary_fn(np.floor_divide),
    arith.RemSIOp: _binary_fn(np.fmod),
    RemFOp: _binary_fn(np.fmod),
    HypotOp: _binary_fn(np.hypot),
    NextafterOp: _binary_fn(np.nextafter),
    ErfcOp: _unary_fn(lambda x: _elementwise_libm(pymath.erfc, x)),
    LgammaOp: _unary_fn(lambda x: _elementwise_libm(pymath.lgamma, x)),
    DigammaOp: _unary_fn(lambda x: special_functions.digamma(x).astype(x.dtype)),
    ErfinvOp: _unary_fn(lambda x: special_functions.erfinv(x).astype(x.dtype)),
    I0Op: _unary_fn(lambda x: special_functions.i0(x).astype(x.dtype)),
    arith.SelectOp: lambda op, c, a, b: np.where(c, a, b),
    arith.CmpfOp: lambda op, a, b: _CMPF[op.predicate.value.data](a, b),
    arith.CmpiOp: lambda op, a, b: _CMPI[op.predicate.value.data](a, b),
    arith.ExtFOp: _convert,
    arith.TruncFOp: _convert,
    arith.SIToFPOp: _convert,
    arith.UIToFPOp: lambda op, x: _to_type(np.asarray(x).astype(np.uint64) if np.asarray(x).dtype != bool else x, op.results[0].type),
    arith.FPToSIOp: _convert,
    arith.FPToUIOp: _convert,
    arith.ExtSIOp: _convert,
    arith.ExtUIOp: _convert,
    arith.TruncIOp: _convert,
    math.ExpOp: _unary_fn(np.exp),
    math.Exp2Op: _unary_fn(np.exp2),
    math.ExpM1Op: _unary_fn(np.expm1),
    math.LogOp: _unary_fn(np.log),
    math.Log2Op: _unary_fn(np.log2),
    math.Log1pOp: _unary_fn(np.log1p),
    math.TanhOp: _unary_fn(np.tanh),
    math.ErfOp: _unary_fn(UNARY_FUNCTIONS["erf"]),
    math.SqrtOp: _unary_fn(np.sqrt),
    math.RsqrtOp: _unary_fn(lambda x: 1.0 / np.sqrt(x)),
    math.AbsFOp: _unary_fn(np.abs),
    math.SinOp: _unary_fn(np.sin),
    math.CosOp: _unary_fn(np.cos),
    math.FloorOp: _unary_fn(np.floor),
    math.CeilOp: _unary_fn(np.ceil),
    math.PowFOp: _binary_fn(np.power),
    math.FmaOp: lambda op, a, b, c: a * b + c,
    math.TanOp: _unary_fn(np.tan),
    math.AsinOp: _unary_fn(np.arcsin),
    math.AcosOp: _unary_fn(np.arccos),
    math.AtanOp: _unary_fn(np.arctan),
    math.Atan2Op: _binary_fn(np.arctan2),
    math.SinhOp: _unary_fn(np.sinh),
    math.CoshOp: _unary_fn(np.cosh),
    math.AsinhOp: _unary_fn(np.arcsinh),
    math.AcoshOp: _unary_fn(np.arccosh),
    math.AtanhOp: _unary_fn(np.arctanh),
    math.Log10Op: _unary_fn(np.log10),
    math.RoundOp: _unary_fn(lambda x: np.copysign(np.floor(np.abs(x) + 0.5), x)),  # half away from zero
    math.RoundEvenOp: _unary_fn(np.rint),  # half to even
    math.TruncOp: _unary_fn(np.trunc),
    math.CopySignOp: _binary_fn(np.copysign),
    arith.DivSIOp: _binary_fn(lambda a, b: np.floor_divide(a, b) + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))),
}


def evaluate_scalar_body(block: Block, args: Sequence[np.ndarray]) -> np.ndarray:
    """Runs a scalar `arith`/`math` body (ended by ``tg.yield``) on arrays, element by element.

    Block argument ``i`` takes ``args[i]`` (arrays of one shape, or broadcastable); each op of
    :data:`SCALAR_OPS` is applied to whole arrays at once. Float values are carried in float64
    (a float type's own rounding happens only at explicit conversions and at the end), integers
    in their dtype, ``i1`` as bool. Returns the yielded value (not yet cast to the result type).
    """
    env: dict[SSAValue, np.ndarray] = {}
    for arg, array in zip(block.args, args, strict=True):
        env[arg] = _to_type(array, arg.type)
    for op in block.ops:
        if isinstance(op, YieldOp):
            (value,) = op.values
            return env[value]
        fn = SCALAR_OPS.get(type(op))
        if fn is None:
            raise EvaluationError(
                f"evaluate: '{op.name}' is not a supported scalar op in a tg.fused_elementwise body "
                f"(supported: {', '.join(sorted(c.name for c in SCALAR_OPS))})"
            )
        with np.errstate(all="ignore"):
            env[op.results[0]] = np.asarray(fn(op, *(env[v] for v in op.operands)))
    raise EvaluationError("evaluate: a tg.fused_elementwise body has no tg.yield")


def _fused_elementwise(op: FusedElementwiseOp, *inputs: np.ndarray) -> np.ndarray:
    return fused_elementwise_at(op, inputs, shape_of(op.result))


def fused_elementwise_at(op: FusedElementwiseOp, inputs: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    """The body of ``op`` over ``inputs`` broadcast to ``shape`` (its result's, or, for a result of
    symbolic shape, the one given)."""
    args = [np.broadcast_to(x, shape) for x in inputs]
    out = evaluate_scalar_body(op.body.block, args)
    dtype = _result_dtype(op)
    with np.errstate(all="ignore"):
        return np.broadcast_to(out, shape).astype(dtype) if dtype != np.dtype(bool) else np.broadcast_to(out != 0, shape).copy()


def _argtopk(op: ArgTopkOp, x: np.ndarray) -> np.ndarray:
    """A stable argsort (NaN last ascending, first descending), its first k along dim."""
    dim, k = op.dim.value.data, op.k.value.data
    if op.largest.value.data:  # stable descending: ascending over the reversed dim, reversed back
        n = x.shape[dim]
        order = n - 1 - np.flip(np.argsort(np.flip(x, dim), axis=dim, kind="stable"), dim)
    else:
        order = np.argsort(x, axis=dim, kind="stable")
    return np.take(order, np.arange(k), axis=dim).astype(np.int64)


#: `tg.put`'s reductions as NumPy ufuncs (maximum/minimum: NaN propagates, as in torch)
_PUT_UFUNCS: dict[str, np.ufunc] = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _check_nonzero(op: CheckNonzeroOp, x: np.ndarray) -> np.ndarray:
    if (x == 0).any():
        raise EvaluationError("evaluate: tg.check_nonzero: an integer division by zero")
    return x


def _lapack(op: LapackOp, *operands: np.ndarray) -> np.ndarray:
    """The routine of `dialects.lapack`'s table called through ctypes on each problem, as the
    compiled graph calls it (the same library, the same arguments)."""
    import ctypes

    from tensor_graphs.dialects import lapack
    from tensor_graphs.runtime_support.blas import _cdll

    name, output, params = op.routine.data, op.output.data, lapack_params(op.params)
    routine = lapack.ROUTINES[name]
    el = np.dtype(np.float64 if operands[0].dtype == np.float64 else np.float32)
    batch, per, dims = lapack.problem(name, [x.shape for x in operands], params)
    slots = routine.all_slots()
    fn = getattr(_cdll(), routine.symbol(name, el == np.float64))
    fn.restype = ctypes.c_int if routine.library == "lapacke" else None
    flat = [np.ascontiguousarray(x).reshape(-1, *p) for x, p in zip(operands, per)]
    count = int(np.prod(batch, dtype=np.int64))
    kind, shape = slots[output]
    result = np.zeros((count, *shape(dims)), dtype=np.int32 if kind == "i32" else el)
    scalar = ctypes.c_double if el == np.float64 else ctypes.c_float
    for item in range(count):
        arrays = {s: np.zeros(sh(dims), dtype=np.int32 if k == "i32" else el) for s, (k, sh) in slots.items() if s != "info"}
        for s, k in routine.copies.items():
            arrays[s][...] = flat[k][item]
        inputs = [np.ascontiguousarray(x[item]) for x in flat]
        args = []
        for a in routine.args(dims, params):
            if isinstance(a, lapack.Char):
                args.append(ctypes.c_char(a.value.encode()))
            elif isinstance(a, lapack.Alpha):
                args.append(scalar(a.value))
            elif isinstance(a, (lapack.Slot, lapack.Operand)):
                arr = arrays[a.name] if isinstance(a, lapack.Slot) else inputs[a.index]
                args.append(arr.ctypes.data_as(ctypes.c_void_p))
            else:
                args.append(ctypes.c_int(a))
        info = fn(*args)
        if routine.library == "lapacke":
            if info < 0:
                raise EvaluationError(f"evaluate: tg.lapack: {routine.symbol(name, el == np.float64)} rejected argument {-info}")
            if info > 0 and op.check is not None:
                raise EvaluationError(f"evaluate: tg.lapack: {op.check.data}: {routine.failure} (info {info})")
            arrays["info"] = np.array(info, dtype=np.int32)
        result[item] = arrays[output]
    return result.reshape(*batch, *shape(dims))


def _put(op: PutOp, x: np.ndarray, offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    flat, offsets = x.reshape(-1).copy(), offsets.reshape(-1)
    if offsets.size and (offsets.min() < 0 or offsets.max() >= x.size):
        raise EvaluationError(
            f"evaluate: tg.put offset out of range [{int(offsets.min())}, {int(offsets.max())}] for {x.size} elements"
        )
    if op.accumulate.value.data:
        _PUT_UFUNCS[op.reduce.data].at(flat, offsets, values.reshape(-1))
    else:
        for i, j in enumerate(offsets):  # in order: the last write to an offset wins
            flat[j] = values.reshape(-1)[i]
    return flat.reshape(x.shape)


def _grouped_matmul(op: GroupedMatmulOp, x: np.ndarray, w: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    ends = [int(e) for e in offsets]
    if any(e < s for s, e in zip([0, *ends], ends)) or (ends and ends[-1] > x.shape[0]):
        raise EvaluationError(f"evaluate: tg.grouped_matmul offsets {ends} are not non-decreasing within [0, {x.shape[0]}]")
    out = np.zeros(shape_of(op.result), np.float64)
    for g, (start, end) in enumerate(zip([0, *ends], ends)):
        wg = _f64(w[g]).T if op.transposed else _f64(w[g])
        out[start:end] = _f64(x[start:end]) @ wg
    return out.astype(_result_dtype(op))


def _iota(op: IotaOp) -> np.ndarray:
    (n,) = shape_of(op.result)
    if not isinstance(n, int):
        raise EvaluationError(f"evaluate: tg.iota of the symbolic length {n}: the evaluator runs graphs of static sizes")
    values = op.start.value.data + np.arange(n, dtype=np.float64) * op.step.value.data
    return values.astype(_result_dtype(op))


def _size(op: SizeOp) -> np.ndarray:
    value = parse_expr(op.size.data)
    if not isinstance(value, int):
        raise EvaluationError(f"evaluate: tg.size {value}: the evaluator runs graphs of static sizes")
    return np.array(value, np.int64)


def _yield(op: YieldOp, *values: np.ndarray) -> np.ndarray:
    raise EvaluationError("evaluate: tg.yield runs only inside the body of its tg.fused_elementwise")


# --------------------------------------------------------------------------- the table


def _evaluators() -> dict[type[Operation], Evaluator]:
    table: dict[type[Operation], Evaluator] = {
        WeightOp: _weight,
        ConstantOp: _constant,
        StateOp: _state,
        CacheWriteOp: _cache_write,
        MatmulOp: _matmul,
        SelectOp: _select,
        CastOp: _cast,
        GeluOp: _unary,
        BiasActivationOp: _bias_activation,
        ReshapeOp: _reshape,
        TransposeOp: _transpose,
        SliceOp: _slice,
        ConcatOp: _concat,
        BroadcastOp: _broadcast,
        EmbeddingOp: _embedding,
        SoftmaxOp: _softmax,
        LogSoftmaxOp: _log_softmax,
        CumsumOp: _cumsum,
        ArgTopkOp: _argtopk,
        ArgReduceOp: _arg_reduce,
        PutOp: _put,
        LapackOp: _lapack,
        CheckNonzeroOp: _check_nonzero,
        GroupedMatmulOp: _grouped_matmul,
        TakeOp: _take,
        Im2colOp: _im2col,
        WinogradConvOp: _winograd_conv,
        LayerNormOp: _layer_norm,
        RmsNormOp: _rms_norm,
        RopeOp: _rope,
        AttentionOp: _attention,
        FusedElementwiseOp: _fused_elementwise,
        YieldOp: _yield,
        IotaOp: _iota,
        SizeOp: _size,
    }
    # Families: every binary, unary and reduction op of the dialect by its base class.
    for op_type in _TG.operations:
        if issubclass(op_type, ElementwiseBinaryOp):
            table[op_type] = _elementwise_binary
        elif issubclass(op_type, ElementwiseUnaryOp):
            table[op_type] = _unary
        elif issubclass(op_type, ReduceOp):
            table[op_type] = _reduce
    return table


#: tg op class -> reference implementation.
EVALUATORS: dict[type[Operation], Evaluator] = _evaluators()


def evaluate_op(
    op: Operation, operands: Sequence[np.ndarray], weights: Mapping[str, np.ndarray] | None = None
) -> np.ndarray:
    """Run one tg op on NumPy arrays (``weights`` is needed only by ``tg.weight``)."""
    fn = EVALUATORS.get(type(op))
    if fn is None:
        raise EvaluationError(f"evaluate: no NumPy evaluator for '{op.name}' (known: {', '.join(sorted(c.name for c in EVALUATORS))})")
    if isinstance(op, WeightOp):
        result = fn(op, weights if weights is not None else {})
    else:
        result = fn(op, *operands)
    row = dtypes.of_element(op.results[0].type.get_element_type()) if op.results else None  # type: ignore[attr-defined]
    return dtypes.round_values(result, row) if row is not None and row.numpy is None else result  # bfloat16 rounds


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
