"""buf -> llvm -> native for the transformer kernels and the scalar math, against NumPy.

Tolerances: exact kernels (copies, casts, select, max, embedding) are compared exactly or at
rtol = atol = 1e-5; sums at rtol 1e-5 / atol 1e-5 (the vectorised sum reassociates). The
scalar approximations of `codegen/llvm/scalar.py` are checked against float64 NumPy over
ranges with the bounds stated per function (max relative error, ~1e-6 and below).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from xdsl.parser import Parser

from tensor_graphs.codegen.llvm.convert_buffer_to_llvm import ConvertBufferToLLVMPass
from tensor_graphs.codegen.llvm.jit import NativeGraph, call_native, host_float_lanes, jit_compile, to_llvm_ir
from tensor_graphs.codegen.llvm.kernels import LoweringError
from tensor_graphs.context import make_context
from tensor_graphs.dialects.functions import UNARY_FUNCTIONS, apply_unary
from tensor_graphs.runtime_support.executable import CompiledGraph
from tensor_graphs.runtime_support.signature import GraphSignature

RTOL = ATOL = 1e-5
rng = np.random.default_rng(0)
#: the float vector type loops vectorise to on this host (AVX-512: 16 lanes; AVX2: 8)
VECTOR = f"<{host_float_lanes()} x float>"
_EL = {np.dtype(np.float32): "f32", np.dtype(np.int64): "i64", np.dtype(np.int32): "i32", np.dtype(np.bool_): "i1"}


def memref(shape, el: str = "f32") -> str:
    return "memref<" + "".join(f"{d}x" for d in shape) + el + ">"


def parse(text: str):
    return Parser(make_context(), text).parse_module()


def lower(text: str):
    module = parse(text)
    module.verify()
    ConvertBufferToLLVMPass().apply(make_context(), module)
    module.verify()
    return module


def compile_text(text: str) -> NativeGraph:
    return jit_compile(lower(text))


def kernel_module(op: str, ins, out, attrs: str = "", body: str = "") -> str:
    """One kernel on the graph inputs writing the graph output; ``ins``/``out`` are (shape, el)."""
    args = [f"%i{k}: {memref(*t)}" for k, t in enumerate(ins)] + [f"%o: {memref(*out)}"]
    names = ", ".join(f"%i{k}" for k in range(len(ins)))
    types = ", ".join(memref(*t) for t in ins)
    return f"""
builtin.module {{
  func.func @forward({", ".join(args)}) attributes {{tg.num_outputs = 1 : i64}} {{
    buf.{op} ins({names} : {types}) outs(%o : {memref(*out)}) {attrs} {body}
    func.return
  }}
}}"""


def run_kernel(op: str, inputs, out_shape, out_dtype=np.float32, attrs: str = "", body: str = "", native=None):
    inputs = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in map(np.asarray, inputs)]
    out_dtype = np.dtype(out_dtype)
    if native is None:
        text = kernel_module(op, [(a.shape, _EL[a.dtype]) for a in inputs], (out_shape, _EL[out_dtype]), attrs, body)
        native = compile_text(text)
    out = np.zeros(out_shape, out_dtype)
    if out_dtype.kind == "f":
        out.fill(np.nan)
    call_native(native, None, {}, inputs, [out])
    return out


def rand(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def max_rel_error(got: np.ndarray, ref: np.ndarray, floor: float = 1e-300) -> float:
    ref = ref.astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - ref) / np.maximum(np.abs(ref), floor)))


# --------------------------------------------------------------------------- scalar math accuracy

#: name -> (lo, hi, max relative error vs float64, relative-error floor: |ref| below it counts as absolute)
ACCURACY = {
    "exp": (-86.9, 88.5, 3e-7, 0.0),  # below -86.99 the result (< 1.7e-38) flushes to 0
    "tanh": (-20.0, 20.0, 5e-7, 0.0),
    "sigmoid": (-20.0, 20.0, 5e-7, 0.0),
    "silu": (-20.0, 20.0, 5e-7, 0.0),
    # gelu_tanh: for x < -3 the float32 rounding of the argument 2u (as in torch) gives a relative
    # error ~1.2e-7 |2u|: relative 1e-6 where |y| >= 1e-2, absolute 1e-8 below
    "gelu_tanh": (-20.0, 20.0, 1e-6, 1e-2),
    # the left tail of gelu is ~x erfc(|x|/sqrt 2): relative 2e-6 down to |gelu| ~ 1e-9 (x ~ -6)
    "gelu": (-20.0, 20.0, 2e-6, 1e-9),
    "erf": (-10.0, 10.0, 3e-7, 0.0),
    "log": (1e-30, 1e30, 3e-7, 0.0),
    "sqrt": (0.0, 1e6, 1.2e-7, 0.0),
    "rsqrt": (1e-6, 1e6, 2.5e-7, 0.0),
    "relu": (-10.0, 10.0, 0.0, 0.0),
    "neg": (-10.0, 10.0, 0.0, 0.0),
    "abs": (-10.0, 10.0, 0.0, 0.0),
    "cos": (-10.0, 10.0, 1e-6, 1e-6),
    "sin": (-10.0, 10.0, 1e-6, 1e-6),
    "none": (-10.0, 10.0, 0.0, 0.0),
}


def _reference(fn: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    if fn == "gelu":  # 0.5 x (1 + erf) cancels for x < 0 even in float64: use erfc
        return 0.5 * x * np.vectorize(math.erfc)(-x / math.sqrt(2.0))
    if fn == "gelu_tanh":  # 1 + tanh(u) cancels too: 0.5 x (1 + tanh u) = x / (1 + exp(-2u))
        with np.errstate(over="ignore"):
            return x / (1.0 + np.exp(-2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return UNARY_FUNCTIONS[fn](x)


def test_every_unary_function_has_an_accuracy_bound():
    assert sorted(ACCURACY) == sorted(UNARY_FUNCTIONS)


@pytest.mark.parametrize("fn", list(ACCURACY))
def test_unary_accuracy(fn):
    lo, hi, bound, floor = ACCURACY[fn]
    if fn == "log":
        x = np.geomspace(lo, hi, 20000).astype(np.float32)
    else:
        x = np.linspace(lo, hi, 20001).astype(np.float32)
        x = np.concatenate([x, np.float32([0.0, 1e-4, -1e-4, 1e-20, -1e-20, 0.3, -0.3, 0.62, 0.63])])
        x = x[(x >= lo) & (x <= hi)]
    out = run_kernel("unary", [x], x.shape, attrs=f'{{fn = "{fn}"}}')
    err = max_rel_error(out, _reference(fn, x), max(floor, 1e-300))
    assert err <= bound, f"{fn}: max relative error {err:.3g} > {bound:.3g}"


def test_tanh_and_erf_are_accurate_near_zero():
    x = np.float32([1e-4, -1e-4, 1e-7, 3e-3, -0.01, 1e-30])
    for fn in ("tanh", "erf", "gelu", "gelu_tanh", "silu"):
        out = run_kernel("unary", [x], x.shape, attrs=f'{{fn = "{fn}"}}')
        assert max_rel_error(out, _reference(fn, x)) < 3e-7, fn


SPECIAL = np.float32([np.inf, -np.inf, np.nan, 0.0, -0.0, 100.0, -100.0, 89.0, -89.0, 1e-45])


@pytest.mark.parametrize("fn", ["exp", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "erf", "log", "relu", "sqrt"])
def test_unary_special_values(fn):
    out = run_kernel("unary", [SPECIAL], SPECIAL.shape, attrs=f'{{fn = "{fn}"}}')
    with np.errstate(all="ignore"):
        ref = _reference(fn, SPECIAL).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    finite = ~np.isnan(ref)
    # results below ~1.7e-38 (exp(-89), silu(-100), ...) flush to zero
    np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-6, atol=1e-36)


def test_exp_of_minus_infinity_is_zero_and_overflow_is_inf():
    x = np.float32([-np.inf, -1e30, -200.0, 88.7, 89.0, 1e30])
    out = run_kernel("unary", [x], x.shape, attrs='{fn = "exp"}')
    assert list(out[:3]) == [0.0, 0.0, 0.0]
    assert np.isfinite(out[3]) and np.all(np.isinf(out[4:]))


@pytest.mark.parametrize("fn", ["exp", "tanh", "gelu", "gelu_tanh", "erf", "sigmoid", "silu", "log", "sqrt"])
def test_unary_loops_vectorise(fn):
    native = compile_text(kernel_module("unary", [((4, 256), "f32")], ((4, 256), "f32"), f'{{fn = "{fn}"}}'))
    assert VECTOR in native.llvm_ir, f"{fn} did not vectorise"
    assert "@expf" not in native.llvm_ir and "@llvm.exp.f32" not in native.llvm_ir


# --------------------------------------------------------------------------- unary / binary / select / cast


@pytest.mark.parametrize("fn", list(UNARY_FUNCTIONS))
@pytest.mark.parametrize("shape", [(), (7,), (3, 4, 5)])
def test_unary_kernel(fn, shape):
    x = rand(*shape)
    if fn in ("log", "sqrt", "rsqrt"):
        x = np.abs(x) + np.float32(0.1)
    out = run_kernel("unary", [x], shape, attrs=f'{{fn = "{fn}"}}')
    np.testing.assert_allclose(out, apply_unary(fn, x), rtol=2e-6, atol=1e-6)


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power, "max": np.maximum, "min": np.minimum}
BROADCASTS = [((4, 5), (4, 5)), ((), (4, 5)), ((4, 5), ()), ((5,), (4, 5)), ((4, 1), (1, 5)), ((2, 3, 4, 5), (3, 1, 5)), ((4, 1), (4, 64))]


@pytest.mark.parametrize("fn", list(BINARY))
@pytest.mark.parametrize("sa,sb", BROADCASTS, ids=[f"{list(a)}-{list(b)}" for a, b in BROADCASTS])
def test_binary_kernel(fn, sa, sb):
    a, b = rand(*sa), rand(*sb)
    if fn == "pow":
        a = np.abs(a) + np.float32(0.5)
    if fn == "div":
        b = rng.uniform(0.5, 2.0, sb).astype(np.float32)
    ref = BINARY[fn](a, b)
    out = run_kernel("binary", [a, b], ref.shape, attrs=f'{{fn = "{fn}"}}')
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_max_min_propagate_nan():
    a = np.float32([np.nan, 1.0, 2.0, np.nan])
    b = np.float32([1.0, np.nan, 3.0, np.nan])
    for fn, ref in (("max", np.maximum), ("min", np.minimum)):
        out = run_kernel("binary", [a, b], a.shape, attrs=f'{{fn = "{fn}"}}')
        np.testing.assert_array_equal(out, ref(a, b))


@pytest.mark.parametrize("fn", ["add", "sub", "mul", "max", "min"])
def test_binary_on_int64(fn):
    a = rng.integers(-100, 100, (4, 5)).astype(np.int64)
    b = rng.integers(-100, 100, (5,)).astype(np.int64)
    out = run_kernel("binary", [a, b], (4, 5), np.int64, attrs=f'{{fn = "{fn}"}}')
    np.testing.assert_array_equal(out, BINARY[fn](a, b))


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0, 1.7])
def test_pow_by_a_constant(exponent):
    text = f"""
builtin.module {{
  func.func @forward(%x: memref<64xf32>, %o: memref<64xf32>) attributes {{tg.num_outputs = 1 : i64}} {{
    %e = buf.constant dense<{exponent}> : tensor<f32> : memref<f32>
    buf.binary ins(%x, %e : memref<64xf32>, memref<f32>) outs(%o : memref<64xf32>) {{fn = "pow"}}
    func.return
  }}
}}"""
    native = compile_text(text)
    x = np.abs(rand(64)) + np.float32(0.1)
    out = run_kernel("", [x], (64,), native=native)
    np.testing.assert_allclose(out, np.power(x.astype(np.float64), exponent), rtol=2e-6)
    if exponent in (2.0, 3.0):
        assert "pow" not in native.llvm_ir  # multiplications, vectorised
        assert VECTOR in native.llvm_ir


@pytest.mark.parametrize("sc,sa,sb", [((4, 5), (4, 5), (4, 5)), ((1, 5), (4, 5), ()), ((4, 1), (5,), (4, 5)), ((3, 1, 5), (1, 4, 5), (1,))])
def test_select(sc, sa, sb):
    c = rng.random(sc) < 0.5
    a, b = rand(*sa), rand(*sb)
    ref = np.where(c, a, b)
    out = run_kernel("select", [c, a, b], ref.shape)
    np.testing.assert_array_equal(out, ref)


CASTS = [
    (np.float32, np.int64), (np.float32, np.int32), (np.float32, np.bool_), (np.int64, np.float32), (np.int32, np.float32),
    (np.bool_, np.float32), (np.bool_, np.int64), (np.int64, np.int32), (np.int32, np.int64), (np.int64, np.bool_),
]


@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{np.dtype(s).name}-{np.dtype(d).name}" for s, d in CASTS])
def test_cast(src, dst):
    x = (rand(3, 17) * 50).astype(src) if np.dtype(src).kind != "b" else rng.random((3, 17)) < 0.5
    x.flat[0] = 0
    out = run_kernel("cast", [x], x.shape, dst)
    np.testing.assert_array_equal(out, x.astype(dst))


def test_cast_float_to_bool_treats_nan_as_true():
    x = np.float32([0.0, -0.0, np.nan, 1e-30])
    np.testing.assert_array_equal(run_kernel("cast", [x], x.shape, np.bool_), [False, False, True, True])


@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
def test_bias_activation_every_activation(activation):
    x, b = rand(4, 40), rand(40)
    out = run_kernel("bias_activation", [x, b], x.shape, attrs=f'{{activation = "{activation}"}}')
    np.testing.assert_allclose(out, apply_unary(activation, x + b), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("activation", ["relu", "gelu_tanh"])
def test_matmul_activation(activation):
    a, w = rand(4, 8), rand(8, 6)
    out = run_kernel("matmul", [a, w], (4, 6), attrs=f'{{activation = "{activation}"}}')
    np.testing.assert_allclose(out, apply_unary(activation, a @ w), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- fused elementwise

GELU_TANH_BODY = """{
    ^bb0(%x: f32):
      %c3 = arith.constant 3.0 : f32
      %k = arith.constant 0.044715 : f32
      %s = arith.constant 0.7978845608 : f32
      %one = arith.constant 1.0 : f32
      %half = arith.constant 0.5 : f32
      %x3 = math.powf %x, %c3 : f32
      %t0 = arith.mulf %k, %x3 : f32
      %t1 = arith.addf %x, %t0 : f32
      %t2 = arith.mulf %s, %t1 : f32
      %t3 = math.tanh %t2 : f32
      %t4 = arith.addf %one, %t3 : f32
      %t5 = arith.mulf %half, %x : f32
      %t6 = arith.mulf %t5, %t4 : f32
      buf.yield %t6 : f32
    }"""


def test_fused_gelu_tanh_chain_is_one_vectorised_loop():
    text = kernel_module("fused_elementwise", [((8, 64), "f32")], ((8, 64), "f32"), body=GELU_TANH_BODY)
    native = compile_text(text)
    assert VECTOR in native.llvm_ir
    assert "@llvm.pow" not in native.llvm_ir and "@tanhf" not in native.llvm_ir
    x = rand(8, 64) * 3
    out = run_kernel("", [x], x.shape, native=native)
    np.testing.assert_allclose(out, apply_unary("gelu_tanh", x), rtol=2e-6, atol=2e-6)


MASKED_BODY = """{
    ^bb0(%x: f32, %m: i1, %b: f32, %p: i64):
      %ninf = arith.constant -1.0e+30 : f32
      %c1 = arith.constant 1 : i64
      %pf = arith.sitofp %p : i64 to f32
      %y = arith.addf %x, %b : f32
      %e = math.exp %y : f32
      %w = arith.mulf %e, %pf : f32
      %sel = arith.select %m, %w, %ninf : f32
      %mx = arith.maximumf %sel, %x : f32
      %lt = arith.cmpf olt, %mx, %b : f32
      %z = arith.select %lt, %b, %mx : f32
      buf.yield %z : f32
    }"""


def test_fused_body_with_broadcast_mask_bias_and_int_inputs():
    x, b = rand(3, 4, 16), rand(16)
    m = rng.random((4, 1)) < 0.5
    p = rng.integers(0, 5, (3, 1, 1)).astype(np.int64)
    ins = [((3, 4, 16), "f32"), ((4, 1), "i1"), ((16,), "f32"), ((3, 1, 1), "i64")]
    out = run_kernel("", [x, m, b, p], x.shape, native=compile_text(kernel_module("fused_elementwise", ins, ((3, 4, 16), "f32"), body=MASKED_BODY)))
    w = np.exp(x.astype(np.float64) + b) * p
    mx = np.maximum(np.where(m, w, -1e30), x)
    ref = np.where(mx < b, b, mx)
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6)


def test_fused_body_producing_a_bool():
    body = """{
    ^bb0(%x: f32, %y: f32):
      %c = arith.cmpf ogt, %x, %y : f32
      buf.yield %c : i1
    }"""
    x, y = rand(5, 7), rand(7)
    out = run_kernel("", [x, y], x.shape, np.bool_, native=compile_text(kernel_module("fused_elementwise", [((5, 7), "f32"), ((7,), "f32")], ((5, 7), "i1"), body=body)))
    np.testing.assert_array_equal(out, x > y)


def test_fused_body_with_an_unsupported_op_names_it():
    body = """{
    ^bb0(%x: f32):
      %c = math.cbrt %x : f32
      buf.yield %c : f32
    }"""
    with pytest.raises(LoweringError, match="buf.fused_elementwise: no codegen for math.cbrt"):
        lower(kernel_module("fused_elementwise", [((4,), "f32")], ((4,), "f32"), body=body))


def test_broadcast_input_is_loaded_outside_the_inner_loop():
    # the [4, 1] operand does not change along the inner dim: one load per row, before the loop
    module = lower(kernel_module("add", [((4, 64), "f32"), ((4, 1), "f32")], ((4, 64), "f32")))
    ir = to_llvm_ir(module)
    inner = ir[ir.rindex("phi"):]
    assert inner.count("load float") == 1


# --------------------------------------------------------------------------- reductions

REDUCTIONS = [
    ((4, 64), (1,), False), ((4, 64), (1,), True), ((4, 64), (0,), False), ((2, 3, 16), (0, 2), False),
    ((2, 3, 16), (1, 2), True), ((2, 3, 16), (0, 1), False), ((2, 3, 16), (0, 1, 2), False), ((5,), (0,), True),
    ((3, 1, 7), (1,), False), ((6, 200), (1,), False),
]
_NP_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max}


@pytest.mark.parametrize("kind", ["sum", "mean", "max"])
@pytest.mark.parametrize("shape,dims,keepdim", REDUCTIONS, ids=[f"{list(s)}-{list(d)}-{k}" for s, d, k in REDUCTIONS])
def test_reduce(kind, shape, dims, keepdim):
    x = rand(*shape)
    ref = _NP_REDUCE[kind](x.astype(np.float64), axis=dims, keepdims=keepdim)
    attrs = f'{{kind = "{kind}", dims = array<i64: {", ".join(map(str, dims))}>, keepdim = {str(keepdim).lower()}}}'
    out = run_kernel("reduce", [x], np.shape(ref), attrs=attrs)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_reduce_max_propagates_nan():
    x = rand(3, 32)
    x[1, 5] = np.nan
    out = run_kernel("reduce", [x], (3,), attrs='{kind = "max", dims = array<i64: 1>}')
    assert np.isnan(out[1]) and not np.isnan(out[[0, 2]]).any()


@pytest.mark.parametrize("kind,dims", [("sum", 1), ("max", 1), ("sum", 0)])
def test_reductions_vectorise(kind, dims):
    out_shape = (64,) if dims == 1 else (256,)
    native = compile_text(kernel_module("reduce", [((64, 256), "f32")], (out_shape, "f32"), f'{{kind = "{kind}", dims = array<i64: {dims}>}}'))
    assert VECTOR in native.llvm_ir


# --------------------------------------------------------------------------- data movement


@pytest.mark.parametrize(
    "shape,dim,start,step,size",
    [((4, 10), 1, 2, 1, 5), ((4, 10), 1, 1, 3, 3), ((6, 5), 0, 1, 2, 3), ((2, 3, 8), 2, 0, 2, 4), ((2, 3, 8), 1, 2, 1, 1)],
)
def test_slice(shape, dim, start, step, size):
    x = rand(*shape)
    index = [slice(None)] * len(shape)
    index[dim] = slice(start, start + step * size, step)
    ref = x[tuple(index)]
    out = run_kernel("slice", [x], ref.shape, attrs=f"{{dim = {dim} : i64, start = {start} : i64, step = {step} : i64}}")
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("shapes,dim", [([(2, 3), (2, 5)], 1), ([(2, 3), (4, 3), (1, 3)], 0), ([(2, 1, 4), (2, 3, 4)], 1), ([(3, 2, 2), (3, 2, 5)], 2)])
def test_concat(shapes, dim):
    xs = [rand(*s) for s in shapes]
    ref = np.concatenate(xs, axis=dim)
    out = run_kernel("concat", xs, ref.shape, attrs=f"{{dim = {dim} : i64}}")
    np.testing.assert_array_equal(out, ref)


def test_concat_of_int64():
    xs = [np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(4, dtype=np.int64).reshape(2, 2)]
    out = run_kernel("concat", xs, (2, 5), np.int64, attrs="{dim = 1 : i64}")
    np.testing.assert_array_equal(out, np.concatenate(xs, axis=1))


@pytest.mark.parametrize("src,dst", [((5,), (3, 5)), ((3, 1), (3, 4)), ((), (2, 3)), ((1, 4, 1), (2, 4, 3))])
def test_broadcast(src, dst):
    x = rand(*src)
    np.testing.assert_array_equal(run_kernel("broadcast", [x], dst), np.broadcast_to(x, dst))


# --------------------------------------------------------------------------- embedding and error statuses


def embedding_module(vocab: int, dim: int, idx_shape, idx_el: str = "i64") -> str:
    out = (*idx_shape, dim)
    return f"""
builtin.module {{
  func.func @forward(%ids: {memref(idx_shape, idx_el)}, %o: {memref(out)}) attributes {{tg.num_outputs = 1 : i64}} {{
    %w = buf.weight "wte" : {memref((vocab, dim))}
    buf.embedding ins(%w, %ids : {memref((vocab, dim))}, {memref(idx_shape, idx_el)}) outs(%o : {memref(out)})
    func.return
  }}
}}"""


@pytest.mark.parametrize("idx_el,dtype", [("i64", np.int64), ("i32", np.int32)])
def test_embedding(idx_el, dtype):
    table = rand(50, 24)
    ids = rng.integers(0, 50, (2, 7)).astype(dtype)
    native = compile_text(embedding_module(50, 24, (2, 7), idx_el))
    out = np.zeros((2, 7, 24), np.float32)
    call_native(native, None, {"wte": table}, [ids], [out])
    np.testing.assert_array_equal(out, table[ids])


@pytest.mark.parametrize("bad", [50, -1, 2**40])
def test_embedding_index_out_of_range_raises_index_error(bad):
    native = compile_text(embedding_module(50, 8, (5,)))
    # {bad_index:0:50}: the runtime fills in the offending value of input 0 ('ids') when it has the inputs
    assert native.signature.errors == ("embedding 'wte': index out of range [0, 50){bad_index:0:50}",)
    fn = CompiledGraph(native, {"wte": rand(50, 8)})
    ids = np.array([0, 3, bad, 1, 2], np.int64)
    with pytest.raises(IndexError, match=r"embedding 'wte': index out of range \[0, 50\)") as info:
        fn(ids)
    assert "input 'ids'" in str(info.value) and "{bad_index" not in str(info.value)
    message = str(native.signature.status_error(1, inputs=[ids]))
    assert message == f"forward: embedding 'wte': index out of range [0, 50): input 'ids' holds {bad} at [2]"
    with pytest.raises(IndexError):
        call_native(native, None, {"wte": rand(50, 8)}, [ids], [np.zeros((5, 8), np.float32)])
    ids[2] = 49  # the graph stays usable after an error
    np.testing.assert_array_equal(fn(ids)[2], fn._weights[0][49])


def test_errors_round_trip_through_module_attributes():
    module = lower(embedding_module(10, 4, (3,)))
    assert GraphSignature.from_module(module).errors == ("embedding 'wte': index out of range [0, 10){bad_index:0:10}",)
    ir = to_llvm_ir(module).replace('"', "")
    assert "define i32 @forward" in ir and "ret i32 1" in ir and "ret i32 0" in ir


def test_status_error_kinds():
    sig = GraphSignature("f", 0, (), (), (), errors=("embedding 'x': index out of range [0, 3)", "something else"))
    assert isinstance(sig.status_error(1), IndexError)
    assert isinstance(sig.status_error(2), RuntimeError) and not isinstance(sig.status_error(2), IndexError)
    assert "unknown status 7" in str(sig.status_error(7))


# --------------------------------------------------------------------------- subviews (zero-copy aliases)

SUBVIEW = """
builtin.module {{
  func.func @forward(%x: memref<4x8xf32>, %o: memref<2x8xf32>) attributes {{tg.num_outputs = 1 : i64}} {{
    %arena = buf.arena : memref<256xi8>
    %t = buf.view %arena[0] : memref<256xi8> -> memref<4x8xf32>
    buf.copy ins(%x : memref<4x8xf32>) outs(%t : memref<4x8xf32>)
    %a = buf.subview %t[{a}] : memref<4x8xf32> -> memref<2x8xf32>
    %b = buf.subview %t[{b}] : memref<4x8xf32> -> memref<2x8xf32>
    {kernel}
    buf.copy ins(%a : memref<2x8xf32>) outs(%o : memref<2x8xf32>)
    func.return
  }}
}}"""


def test_subview_is_an_alias():
    kernel = "buf.add ins(%a, %b : memref<2x8xf32>, memref<2x8xf32>) outs(%a : memref<2x8xf32>)"
    native = compile_text(SUBVIEW.format(a=0, b=16, kernel=kernel))
    x = rand(4, 8)
    out = np.zeros((2, 8), np.float32)
    call_native(native, None, {}, [x], [out])
    np.testing.assert_allclose(out, x[:2] + x[2:], rtol=RTOL, atol=ATOL)


def test_partially_overlapping_subviews_are_rejected():
    kernel = "buf.add ins(%a, %b : memref<2x8xf32>, memref<2x8xf32>) outs(%a : memref<2x8xf32>)"
    with pytest.raises(LoweringError, match="overlaps the output"):
        lower(SUBVIEW.format(a=0, b=8, kernel=kernel))


def test_concat_of_subviews_already_in_place_copies_nothing():
    text = """
builtin.module {
  func.func @forward(%x: memref<4xf32>, %o: memref<8xf32>) attributes {tg.num_outputs = 1 : i64} {
    %lo = buf.subview %o[0] : memref<8xf32> -> memref<4xf32>
    %hi = buf.subview %o[4] : memref<8xf32> -> memref<4xf32>
    buf.copy ins(%x : memref<4xf32>) outs(%lo : memref<4xf32>)
    buf.unary ins(%x : memref<4xf32>) outs(%hi : memref<4xf32>) {fn = "neg"}
    buf.concat ins(%lo, %hi : memref<4xf32>, memref<4xf32>) outs(%o : memref<8xf32>) {dim = 0 : i64}
    func.return
  }
}"""
    native = compile_text(text)
    x = rand(4)
    out = run_kernel("", [x], (8,), native=native)
    np.testing.assert_array_equal(out, np.concatenate([x, -x]))


def test_no_libm_exp_in_a_softmax_like_graph():
    # exp(x - max) over rows, written with buf ops: the whole thing stays vectorised
    text = """
builtin.module {
  func.func @forward(%x: memref<8x128xf32>, %o: memref<8x128xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<64xi8>
    %m = buf.view %arena[0] : memref<64xi8> -> memref<8x1xf32>
    buf.reduce ins(%x : memref<8x128xf32>) outs(%m : memref<8x1xf32>) {kind = "max", dims = array<i64: 1>, keepdim = true}
    buf.fused_elementwise ins(%x, %m : memref<8x128xf32>, memref<8x1xf32>) outs(%o : memref<8x128xf32>) {
    ^bb0(%a: f32, %b: f32):
      %d = arith.subf %a, %b : f32
      %e = math.exp %d : f32
      buf.yield %e : f32
    }
    func.return
  }
}"""
    native = compile_text(text)
    assert "@expf" not in native.llvm_ir and VECTOR in native.llvm_ir
    x = rand(8, 128)
    out = run_kernel("", [x], x.shape, native=native)
    np.testing.assert_allclose(out, np.exp(x - x.max(axis=1, keepdims=True)), rtol=1e-6, atol=1e-7)
    assert math.isfinite(float(out.sum()))


# --------------------------------------------------------------------------- one function per kernel


def test_each_kernel_is_its_own_noinline_function_with_noalias_buffers():
    text = """
builtin.module {
  func.func @forward(%x: memref<64xf32>, %o: memref<64xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<256xi8>
    %t = buf.view %arena[0] : memref<256xi8> -> memref<64xf32>
    buf.unary ins(%x : memref<64xf32>) outs(%t : memref<64xf32>) {fn = "exp"}
    buf.unary ins(%t : memref<64xf32>) outs(%t : memref<64xf32>) {fn = "tanh"}
    buf.add ins(%t, %x : memref<64xf32>, memref<64xf32>) outs(%o : memref<64xf32>)
    func.return
  }
}"""
    ir = to_llvm_ir(lower(text)).replace('"', "")
    assert "define internal i32 @forward__0_unary(ptr noalias %.1, ptr noalias %.2) noinline" in ir
    assert "define internal i32 @forward__1_unary(ptr noalias %.1) noinline" in ir  # in place: one buffer
    native = compile_text(text)
    assert "vector.memcheck" not in native.llvm_ir  # noalias: no run-time overlap checks
    assert "define internal" in native.llvm_ir  # not inlined back into the entry
    x = rand(64)
    out = run_kernel("", [x], (64,), native=native)
    np.testing.assert_allclose(out, np.tanh(np.exp(x.astype(np.float64))) + x, rtol=1e-6, atol=1e-6)
