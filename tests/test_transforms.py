"""The tg-level passes: each rewrites the IR as intended and the NumPy reference gives the same
numbers before and after (rtol 1e-5, atol 1e-6, random float32 inputs and weights)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.dialects.tensor import MatmulOp, WeightOp, shape_of
from tensor_graphs.transforms.evaluate import EVALUATORS, EvaluationError, evaluate_function, evaluate_op

RTOL, ATOL = 1e-5, 1e-6


# --------------------------------------------------------------------------- helpers


from conftest import functions, parse, run  # noqa: E402  (shared with test_fusion)


def body_ops(module: ModuleOp) -> list[str]:
    """Op names of the (only) function's body, without the return."""
    (f,) = functions(module)
    return [op.name for op in f.body.block.ops if not isinstance(op, func.ReturnOp)]


def random_bindings(f: func.FuncOp, rng: np.random.Generator) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    inputs = [rng.standard_normal(shape_of(a)).astype(np.float32) for a in f.body.block.args]
    weights = {
        op.weight_name.data: rng.standard_normal(shape_of(op.result)).astype(np.float32)
        for op in f.walk()
        if isinstance(op, WeightOp)
    }
    return inputs, weights


def largest_intermediate(f: func.FuncOp, inputs: list[np.ndarray], weights: dict[str, np.ndarray]) -> float:
    """max(1, the largest magnitude of any value ``f`` computes on these inputs)."""
    env = dict(zip(f.body.block.args, inputs))
    largest = 1.0
    for op in f.body.block.ops:
        if isinstance(op, func.ReturnOp):
            break
        env[op.results[0]] = value = evaluate_op(op, [env[v] for v in op.operands], weights)
        largest = max(largest, float(np.abs(value).max(initial=0.0)))
    return largest


def assert_same_numbers(before: ModuleOp, after: ModuleOp, seed: int = 0, scale_atol: bool = False) -> None:
    """Same outputs on random inputs. ``scale_atol``: the absolute tolerance grows with the largest
    intermediate magnitude, since a rewrite moves float32 roundings of values that size (e.g.
    ``c - 2 * (a @ b)`` rounds ``a @ b`` to float32, ``matmul(.., c) {alpha = -2}`` does not)."""
    for f_before, f_after in zip(functions(before), functions(after), strict=True):
        inputs, weights = random_bindings(f_before, np.random.default_rng(seed))
        expected = evaluate_function(f_before, inputs, weights)
        got = evaluate_function(f_after, inputs, weights)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == np.float32 and g.shape == e.shape
            atol = ATOL * largest_intermediate(f_before, inputs, weights) if scale_atol else ATOL
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=atol, err_msg=f"@{f_before.sym_name.data}")


def matmul_flags(module: ModuleOp) -> list[tuple[bool, bool, float, float, bool]]:
    """(transpose_a, transpose_b, alpha, beta, has acc) of every matmul."""
    return [(*op.flags, op.acc is not None) for op in module.walk() if isinstance(op, MatmulOp)]


# --------------------------------------------------------------------------- evaluate


def test_every_tg_op_has_an_evaluator():
    from tensor_graphs.dialects.tensor import TG

    assert set(TG.operations) <= set(EVALUATORS)


def test_evaluate_matmul_honours_flags_and_broadcast_acc():
    module = parse("""
    func.func @f(%a: tensor<3x4x2xf32>, %b: tensor<5x4xf32>, %c: tensor<5xf32>) -> tensor<3x2x5xf32> {
      %y = tg.matmul %a, %b, %c {transpose_a = true, transpose_b = true, alpha = 0.5 : f32, beta = -2.0 : f32}
           : (tensor<3x4x2xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<3x2x5xf32>
      func.return %y : tensor<3x2x5xf32>
    }""")
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4, 2), (5, 4), (5,)))
    (y,) = evaluate_function(functions(module)[0], [a, b, c], {})
    expected = 0.5 * np.swapaxes(a, -1, -2).astype(np.float64) @ b.T.astype(np.float64) - 2.0 * c
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=RTOL, atol=ATOL)


def test_evaluate_weights_constants_and_elementwise():
    module = parse("""
    func.func @f(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
      %w = tg.weight "w" : tensor<3xf32>
      %c = tg.constant dense<[[1.0], [-1.0]]> : tensor<2x1xf32>
      %a = tg.sub %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      %m = tg.div %a, %c : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
      %b = tg.bias_activation %m, %w {activation = "relu"} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      %r = tg.reshape %b : (tensor<2x3xf32>) -> tensor<3x2xf32>
      func.return %r : tensor<3x2xf32>
    }""")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    (y,) = evaluate_function(functions(module)[0], [x], {"w": w})
    expected = np.maximum((x - w) / np.array([[1.0], [-1.0]], np.float32) + w, 0).reshape(3, 2)
    np.testing.assert_array_equal(y, expected)


def test_evaluate_names_an_op_without_evaluator():
    module = parse("""
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      %y = builtin.unrealized_conversion_cast %x : tensor<2xf32> to tensor<2xf32>
      func.return %y : tensor<2xf32>
    }""")
    with pytest.raises(EvaluationError, match="no NumPy evaluator for 'builtin.unrealized_conversion_cast'"):
        evaluate_function(functions(module)[0], [np.zeros(2, np.float32)], {})


def test_evaluate_reports_missing_weight_and_bad_input_shape():
    module = parse("""
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      %w = tg.weight "fc.bias" : tensor<2xf32>
      %y = tg.add %x, %w : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      func.return %y : tensor<2xf32>
    }""")
    f = functions(module)[0]
    with pytest.raises(EvaluationError, match='tg.weight "fc.bias" is not in the weights'):
        evaluate_function(f, [np.zeros(2, np.float32)], {})
    with pytest.raises(EvaluationError, match=r"input 0 of @f has shape \[3\], expected \[2\]"):
        evaluate_function(f, [np.zeros(3, np.float32)], {"fc.bias": np.zeros(2, np.float32)})


def _torch(x: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(x))


def _eval(source: str, *inputs: np.ndarray) -> list[np.ndarray]:
    return evaluate_function(functions(parse(source))[0], list(inputs), {})


def test_evaluate_softmax_log_softmax_layer_norm_match_torch(rng):
    import torch

    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    w, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    sm, lsm, ln = _eval("""
    func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
      %s = tg.softmax %x {dim = 1 : i64} : tensor<2x3x8xf32>
      %l = tg.log_softmax %x {dim = 2 : i64} : tensor<2x3x8xf32>
      %n = tg.layer_norm %x, %w, %b {eps = 1.0e-05 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
      func.return %s, %l, %n : tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>
    }""", x, w, b)
    np.testing.assert_allclose(sm, torch.softmax(_torch(x), 1).numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(lsm, torch.log_softmax(_torch(x), 2).numpy(), rtol=RTOL, atol=ATOL)
    expected = torch.nn.functional.layer_norm(_torch(x), (8,), _torch(w), _torch(b), 1e-5).numpy()
    np.testing.assert_allclose(ln, expected, rtol=RTOL, atol=1e-5)


@pytest.mark.parametrize("causal, with_mask, kv_heads, sq", [
    (False, False, 4, 5), (True, False, 4, 5), (False, True, 4, 5), (True, True, 2, 5), (True, False, 1, 3),
])
def test_evaluate_attention_matches_torch_sdpa(rng, causal, with_mask, kv_heads, sq):
    import torch

    sk = 5
    q = rng.standard_normal((2, 4, sq, 8)).astype(np.float32)
    k = rng.standard_normal((2, kv_heads, sk, 8)).astype(np.float32)
    v = rng.standard_normal((2, kv_heads, sk, 6)).astype(np.float32)
    mask = rng.standard_normal((sq, sk)).astype(np.float32)
    mask_text = f" mask %m" if with_mask else ""
    mask_type = f", tensor<{sq}x{sk}xf32>" if with_mask else ""
    (got,) = _eval(f"""
    func.func @f(%q: tensor<2x4x{sq}x8xf32>, %k: tensor<2x{kv_heads}x{sk}x8xf32>, %v: tensor<2x{kv_heads}x{sk}x6xf32>, %m: tensor<{sq}x{sk}xf32>) -> tensor<2x4x{sq}x6xf32> {{
      %o = tg.attention %q, %k, %v{mask_text} {{scale = 0.3 : f32, causal = {str(causal).lower()}}} : (tensor<2x4x{sq}x8xf32>, tensor<2x{kv_heads}x{sk}x8xf32>, tensor<2x{kv_heads}x{sk}x6xf32>{mask_type}) -> tensor<2x4x{sq}x6xf32>
      func.return %o : tensor<2x4x{sq}x6xf32>
    }}""", q, k, v, mask)
    group = 4 // kv_heads
    tk, tv = (_torch(np.repeat(a, group, axis=1)) for a in (k, v))
    attn_mask = _torch(mask) if with_mask else None
    if causal:
        allowed = torch.from_numpy(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq))
        causal_add = torch.zeros(sq, sk).masked_fill(~allowed, float("-inf"))
        attn_mask = causal_add if attn_mask is None else attn_mask + causal_add
    expected = torch.nn.functional.scaled_dot_product_attention(_torch(q), tk, tv, attn_mask=attn_mask, scale=0.3).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_evaluate_attention_fully_masked_row_gives_zeros():
    """Sq > Sk with causal: query 0 sees no key (j <= i + Sk - Sq < 0)."""
    q = np.ones((1, 1, 3, 2), np.float32)
    k = v = np.ones((1, 1, 2, 2), np.float32)
    (got,) = _eval("""
    func.func @f(%q: tensor<1x1x3x2xf32>, %k: tensor<1x1x2x2xf32>, %v: tensor<1x1x2x2xf32>) -> tensor<1x1x3x2xf32> {
      %o = tg.attention %q, %k, %v {scale = 1.0 : f32, causal = true} : (tensor<1x1x3x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x3x2xf32>
      func.return %o : tensor<1x1x3x2xf32>
    }""", q, k, v)
    np.testing.assert_array_equal(got[0, 0, 0], [0.0, 0.0])
    np.testing.assert_allclose(got[0, 0, 1:], 1.0)


def test_evaluate_data_movement_reductions_and_unary(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    idx = np.array([[3, 0], [1, 1]], np.int64)
    cond = rng.random((4, 6)) < 0.5
    outs = _eval("""
    func.func @f(%x: tensor<4x6xf32>, %i: tensor<2x2xi64>, %c: tensor<4x6xi1>) -> (tensor<4x2xf32>, tensor<8x6xf32>, tensor<2x4x6xf32>, tensor<2x2x6xf32>, tensor<4xf32>, tensor<1x6xf32>, tensor<4x1xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xi64>) {
      %s = tg.slice %x {dim = 1 : i64, start = 1 : i64, step = 3 : i64} : (tensor<4x6xf32>) -> tensor<4x2xf32>
      %k = tg.concat %x, %x {dim = 0 : i64} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
      %b = tg.broadcast %x : (tensor<4x6xf32>) -> tensor<2x4x6xf32>
      %e = tg.embedding %x, %i : (tensor<4x6xf32>, tensor<2x2xi64>) -> tensor<2x2x6xf32>
      %sum = tg.sum %x {dims = array<i64: 1>} : (tensor<4x6xf32>) -> tensor<4xf32>
      %mean = tg.mean %x {dims = array<i64: 0>, keepdim = true} : (tensor<4x6xf32>) -> tensor<1x6xf32>
      %max = tg.amax %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x6xf32>) -> tensor<4x1xf32>
      %z = tg.constant dense<0.0> : tensor<f32>
      %sel = tg.select %c, %x, %z : (tensor<4x6xi1>, tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
      %g = tg.gelu %x {approximate = "tanh"} : tensor<4x6xf32>
      %r = tg.rsqrt %x : tensor<4x6xf32>
      %ci = tg.cast %c : (tensor<4x6xi1>) -> tensor<4x6xi64>
      func.return %s, %k, %b, %e, %sum, %mean, %max, %sel, %g, %r, %ci : tensor<4x2xf32>, tensor<8x6xf32>, tensor<2x4x6xf32>, tensor<2x2x6xf32>, tensor<4xf32>, tensor<1x6xf32>, tensor<4x1xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xi64>
    }""", x, idx, cond)
    s, k, b, e, sm, mean, mx, sel, g, r, ci = outs
    np.testing.assert_array_equal(s, x[:, 1::3])
    np.testing.assert_array_equal(k, np.concatenate([x, x]))
    np.testing.assert_array_equal(b, np.broadcast_to(x, (2, 4, 6)))
    np.testing.assert_array_equal(e, x[idx])
    np.testing.assert_allclose(sm, x.sum(1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(mean, x.mean(0, keepdims=True), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(mx, x.max(1, keepdims=True))
    np.testing.assert_array_equal(sel, np.where(cond, x, 0))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(g, 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3))), rtol=RTOL, atol=ATOL)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(r, 1 / np.sqrt(x64), rtol=RTOL, atol=ATOL)
    assert ci.dtype == np.int64 and np.array_equal(ci, cond.astype(np.int64))


def test_evaluate_fused_elementwise_body_and_matmul_activation(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    m = rng.random((3, 4)) < 0.5
    f, y = _eval("""
    func.func @f(%x: tensor<3x4xf32>, %b: tensor<4xf32>, %w: tensor<4x4xf32>, %m: tensor<3x4xi1>) -> (tensor<3x4xf32>, tensor<3x4xf32>) {
      %f = tg.fused_elementwise %x, %b, %m : (tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xi1>) -> tensor<3x4xf32> {
      ^bb0(%a: f32, %c: f32, %k: i1):
        %s = arith.addf %a, %c : f32
        %t = math.tanh %s : f32
        %z = arith.constant 0.0 : f32
        %gt = arith.cmpf ogt, %a, %z : f32
        %e = math.exp %a : f32
        %p = arith.select %gt, %t, %e : f32
        %q = arith.select %k, %p, %z : f32
        %r = math.rsqrt %e : f32
        %u = arith.mulf %q, %r : f32
        tg.yield %u : f32
      }
      %y = tg.matmul %x, %w, %b {beta = 1.0 : f32, activation = "silu"} : (tensor<3x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
      func.return %f, %y : tensor<3x4xf32>, tensor<3x4xf32>
    }""", x, b, w, m)
    x64 = x.astype(np.float64)
    expected = np.where(m, np.where(x64 > 0, np.tanh(x64 + b), np.exp(x64)), 0.0) / np.sqrt(np.exp(x64))
    np.testing.assert_allclose(f, expected, rtol=RTOL, atol=ATOL)
    acc = x64 @ w + b
    np.testing.assert_allclose(y, acc / (1 + np.exp(-acc)), rtol=RTOL, atol=ATOL)


def test_dense_round_trip_of_bool_and_int_constants():
    from xdsl.dialects.builtin import TensorType, i1, i64

    from tensor_graphs.transforms.evaluate import array_to_dense, dense_to_array

    mask = np.tril(np.ones((3, 3), bool))
    attr = array_to_dense(mask, TensorType(i1, (3, 3)))
    assert attr == parse(f"func.func @f() {{\n %c = tg.constant {attr}\n func.return\n}}").ops.first.body.block.ops.first.value
    np.testing.assert_array_equal(dense_to_array(attr), mask)
    ints = np.array([-3, 0, 2**40], np.int64)
    np.testing.assert_array_equal(dense_to_array(array_to_dense(ints, TensorType(i64, (3,)))), ints)


# --------------------------------------------------------------------------- per-pass cases


@dataclass(frozen=True)
class Case:
    """``source`` after ``passes`` then `dce` has ``expected`` body ops (and the same numbers)."""

    id: str
    passes: str
    source: str
    expected: tuple[str, ...]


CASES = [
    # canonicalize
    Case("canonicalize$reshape_of_reshape", "canonicalize", """
    func.func @f(%x: tensor<2x6xf32>) -> tensor<3x4xf32> {
      %a = tg.reshape %x : (tensor<2x6xf32>) -> tensor<12xf32>
      %b = tg.reshape %a : (tensor<12xf32>) -> tensor<3x4xf32>
      func.return %b : tensor<3x4xf32>
    }""", ("tg.reshape",)),
    Case("canonicalize$transpose_of_transpose", "canonicalize", """
    func.func @f(%x: tensor<2x3x4xf32>) -> tensor<3x2x4xf32> {
      %a = tg.transpose %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
      %b = tg.transpose %a {perm = array<i64: 0, 2, 1>} : (tensor<3x4x2xf32>) -> tensor<3x2x4xf32>
      func.return %b : tensor<3x2x4xf32>
    }""", ("tg.transpose",)),
    Case("canonicalize$inverse_transposes_and_identities", "canonicalize", """
    func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %one = tg.constant dense<1.0> : tensor<f32>
      %zero = tg.constant dense<-0.0> : tensor<3xf32>
      %a = tg.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
      %b = tg.transpose %a {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
      %c = tg.mul %one, %b : (tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      %d = tg.add %c, %zero : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      %e = tg.reshape %d : (tensor<2x3xf32>) -> tensor<2x3xf32>
      func.return %e : tensor<2x3xf32>
    }""", ()),
    Case("canonicalize$expect_no_fold_as_one_broadcasts_x", "canonicalize", """
    func.func @f(%x: tensor<3xf32>) -> tensor<2x3xf32> {
      %one = tg.constant dense<1.0> : tensor<2x3xf32>
      %a = tg.mul %x, %one : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      func.return %a : tensor<2x3xf32>
    }""", ("tg.constant", "tg.mul")),
    # constant-fold
    Case("constant-fold$matmul_chain", "constant-fold", """
    func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %a = tg.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
      %b = tg.constant dense<0.5> : tensor<2x3xf32>
      %c = tg.constant dense<-1.0> : tensor<f32>
      %y = tg.matmul %a, %b, %c {alpha = 2.0 : f32, beta = 1.0 : f32} : (tensor<2x2xf32>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
      %r = tg.relu %y : tensor<2x3xf32>
      %s = tg.add %x, %r : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      func.return %s : tensor<2x3xf32>
    }""", ("tg.constant", "tg.add")),
    Case("constant-fold$expect_no_fold_of_weights", "constant-fold", """
    func.func @f() -> tensor<3xf32> {
      %w = tg.weight "w" : tensor<3xf32>
      %c = tg.constant dense<2.0> : tensor<f32>
      %y = tg.mul %w, %c : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
      func.return %y : tensor<3xf32>
    }""", ("tg.weight", "tg.constant", "tg.mul")),
    # absorb-blas-flags
    Case("absorb$transpose_rhs_and_scales", "absorb-blas-flags", """
    func.func @f(%x: tensor<2x4xf32>) -> tensor<2x8xf32> {
      %w = tg.weight "w" : tensor<8x4xf32>
      %c = tg.constant dense<-1.5> : tensor<f32>
      %t = tg.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
      %sx = tg.div %x, %c : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
      %y = tg.matmul %sx, %t : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
      %s = tg.mul %c, %y : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
      func.return %s : tensor<2x8xf32>
    }""", ("tg.weight", "tg.matmul")),
    Case("absorb$batched_transpose_lhs_and_add", "absorb-blas-flags", """
    func.func @f(%a: tensor<3x4x2xf32>, %b: tensor<3x4x5xf32>, %c: tensor<2x1xf32>) -> tensor<3x2x5xf32> {
      %t = tg.transpose %a {perm = array<i64: 0, 2, 1>} : (tensor<3x4x2xf32>) -> tensor<3x2x4xf32>
      %y = tg.matmul %t, %b : (tensor<3x2x4xf32>, tensor<3x4x5xf32>) -> tensor<3x2x5xf32>
      %s = tg.sub %c, %y : (tensor<2x1xf32>, tensor<3x2x5xf32>) -> tensor<3x2x5xf32>
      func.return %s : tensor<3x2x5xf32>
    }""", ("tg.matmul",)),
    Case("absorb$expect_no_absorb_as_product_has_other_users", "absorb-blas-flags", """
    func.func @f(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
      %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
      %z = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
      %r = tg.mul %z, %y : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
      func.return %r : tensor<2x8xf32>
    }""", ("tg.matmul", "tg.add", "tg.mul")),
    Case("absorb$expect_no_absorb_of_non_scalar_or_batch_moving_transpose", "absorb-blas-flags", """
    func.func @f(%x: tensor<2x4xf32>, %k: tensor<4x3x6xf32>) -> tensor<3x2x6xf32> {
      %c = tg.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
      %s = tg.mul %x, %c : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
      %t = tg.transpose %k {perm = array<i64: 1, 0, 2>} : (tensor<4x3x6xf32>) -> tensor<3x4x6xf32>
      %y = tg.matmul %s, %t : (tensor<2x4xf32>, tensor<3x4x6xf32>) -> tensor<3x2x6xf32>
      func.return %y : tensor<3x2x6xf32>
    }""", ("tg.constant", "tg.mul", "tg.transpose", "tg.matmul")),
    # fuse-bias-activation
    Case("fuse$relu_of_add", "fuse-bias-activation", """
    func.func @f(%x: tensor<2x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
      %s = tg.add %b, %x : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
      %r = tg.relu %s : tensor<2x8xf32>
      func.return %r : tensor<2x8xf32>
    }""", ("tg.bias_activation",)),
    Case("fuse$relu_of_matmul_accumulator", "fuse-bias-activation", """
    func.func @f(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
      %y = tg.matmul %x, %w, %b {transpose_b = true, alpha = -0.5 : f32, beta = 1.0 : f32} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>
      %r = tg.relu %y : tensor<2x8xf32>
      func.return %r : tensor<2x8xf32>
    }""", ("tg.matmul", "tg.bias_activation")),
    Case("fuse$expect_no_fuse_as_add_has_other_users", "fuse-bias-activation", """
    func.func @f(%x: tensor<2x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
      %s = tg.add %x, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
      %r = tg.relu %s : tensor<2x8xf32>
      %m = tg.mul %r, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
      func.return %m : tensor<2x8xf32>
    }""", ("tg.add", "tg.relu", "tg.mul")),
    Case("fuse$expect_no_fuse_as_bias_does_not_broadcast", "fuse-bias-activation", """
    func.func @f(%x: tensor<2x1xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
      %s = tg.add %x, %b : (tensor<2x1xf32>, tensor<8xf32>) -> tensor<2x8xf32>
      %r = tg.relu %s : tensor<2x8xf32>
      func.return %r : tensor<2x8xf32>
    }""", ("tg.add", "tg.relu")),
    Case("canonicalize$no_op_data_movement_and_splat_select", "canonicalize", """
    func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<2x3xf32> {
      %t = tg.constant dense<true> : tensor<i1>
      %s = tg.slice %x {dim = 0 : i64, start = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %b = tg.broadcast %s : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %c = tg.cast %b : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %k = tg.concat %c {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %sel = tg.select %t, %y, %k : (tensor<i1>, tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      func.return %sel : tensor<2x3xf32>
    }""", ("tg.broadcast",)),
    Case("constant-fold$bool_mask_to_additive", "constant-fold", """
    func.func @f(%x: tensor<3x3xf32>) -> tensor<3x3xf32> {
      %keep = tg.constant dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
      %zero = tg.constant dense<0.0> : tensor<f32>
      %fill = tg.constant dense<-1.0e9> : tensor<f32>
      %m = tg.select %keep, %zero, %fill : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
      %s = tg.add %x, %m : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
      func.return %s : tensor<3x3xf32>
    }""", ("tg.constant", "tg.add")),
    # dce
    Case("dce$dead_chain", "dce", """
    func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %w = tg.weight "unused" : tensor<3x2xf32>
      %t = tg.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
      %m = tg.mul %t, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      %r = tg.relu %x : tensor<2x3xf32>
      func.return %r : tensor<2x3xf32>
    }""", ("tg.relu",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_pass_rewrites_and_keeps_numbers(case: Case):
    before = parse(case.source)
    after = run(case.passes, before)
    assert body_ops(run("dce", after)) == list(case.expected)
    assert_same_numbers(before, after)


def test_absorb_flags_values():
    before = parse(CASES[[c.id for c in CASES].index("absorb$transpose_rhs_and_scales")].source)
    after = run("absorb-blas-flags", before)
    ((ta, tb, alpha, beta, has_acc),) = matmul_flags(run("dce", after))
    assert (ta, tb, has_acc) == (False, True, False)
    assert alpha == pytest.approx(1.0) and beta == 0.0  # (x / -1.5) @ w.T * -1.5


def test_absorb_into_acc_then_fuse_equals_fuse_alone():
    source = """
    func.func @f(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
      %y = tg.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
      %s = tg.add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
      %r = tg.relu %s : tensor<2x8xf32>
      func.return %r : tensor<2x8xf32>
    }"""
    before = parse(source)
    one = run("absorb-blas-flags,fuse-bias-activation,dce", before)
    other = run("fuse-bias-activation,absorb-blas-flags,dce", before)
    assert body_ops(one) == body_ops(other) == ["tg.matmul", "tg.bias_activation"]
    assert matmul_flags(one) == matmul_flags(other) == [(False, False, 1.0, 0.0, False)]
    assert_same_numbers(before, one)


def test_constant_fold_respects_max_elements():
    source = """
    func.func @f() -> tensor<4x4xf32> {
      %a = tg.constant dense<2.0> : tensor<4x4xf32>
      %y = tg.relu %a : tensor<4x4xf32>
      func.return %y : tensor<4x4xf32>
    }"""
    assert body_ops(run("constant-fold{max_elements=15},dce", parse(source))) == ["tg.constant", "tg.relu"]
    assert body_ops(run("constant-fold{max_elements=16},dce", parse(source))) == ["tg.constant"]


@pytest.mark.serial
def test_constant_fold_of_a_1024_causal_mask_is_fast():
    """A 1024x1024 i1 mask (what GPT-2's mask ops fold to) folds with the default max_elements, quickly."""
    import time

    n = 1024
    source = f"""
    func.func @f(%x: tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32> {{
      %keep = tg.constant dense<true> : tensor<{n}x{n}xi1>
      %t = tg.transpose %keep {{perm = array<i64: 1, 0>}} : (tensor<{n}x{n}xi1>) -> tensor<{n}x{n}xi1>
      %zero = tg.constant dense<0.0> : tensor<f32>
      %fill = tg.constant dense<-1.0e9> : tensor<f32>
      %m = tg.select %t, %zero, %fill : (tensor<{n}x{n}xi1>, tensor<f32>, tensor<f32>) -> tensor<{n}x{n}xf32>
      %s = tg.add %x, %m : (tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
      func.return %s : tensor<{n}x{n}xf32>
    }}"""
    module = parse(source)
    start = time.perf_counter()
    out = run("constant-fold", module)
    elapsed = time.perf_counter() - start
    assert body_ops(run("dce", out)) == ["tg.constant", "tg.add"]
    assert elapsed < 2.0, f"constant-fold of a {n}x{n} mask took {elapsed:.2f} s"


def test_constant_fold_of_aten_mask_ops():
    """aten ops on constants (and without operands) fold through evaluate_aten_op."""
    pytest.importorskip("tensor_graphs.transforms.evaluate_aten")
    module = parse("""
    func.func @f() -> tensor<4xi64> {
      %r = aten.arange {end = 4.0 : f64, dtype = "int64"} : tensor<4xi64>
      func.return %r : tensor<4xi64>
    }""")
    out = run("constant-fold,dce", module)
    assert body_ops(out) == ["tg.constant"]
    (c,) = [op for op in out.walk() if op.name == "tg.constant"]
    from tensor_graphs.transforms.evaluate import dense_to_array

    np.testing.assert_array_equal(dense_to_array(c.value), np.arange(4))


# --------------------------------------------------------------------------- property test


class Emitter:
    """Builds the text of one function, one SSA value at a time."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.args: list[str] = []
        self.count = 0

    @staticmethod
    def ty(shape: tuple[int, ...]) -> str:
        return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"

    def arg(self, shape: tuple[int, ...]) -> str:
        name = f"%arg{len(self.args)}"
        self.args.append(f"{name}: {self.ty(shape)}")
        return name

    def op(self, text: str) -> str:
        name = f"%v{self.count}"
        self.count += 1
        self.lines.append(f"  {name} = {text}")
        return name

    def function(self, result: str, shape: tuple[int, ...]) -> str:
        body = "\n".join(self.lines)
        return (
            f"func.func @f({', '.join(self.args)}) -> {self.ty(shape)} {{\n{body}\n"
            f"  func.return {result} : {self.ty(shape)}\n}}"
        )


SCALARS = (0.5, 2.0, -1.5, 3.0, 0.25)
# An operand or result "wrapper": an op sequence that leaves the shape as it was.
# "dead_user" adds an unused relu of the value: dead users must not block or break any rewrite.
WRAPPERS = ("mul_scalar", "scalar_mul", "div_scalar", "reshape_round_trip", "transpose_round_trip", "swap_twice", "dead_user")


def wrap(e: Emitter, value: str, shape: tuple[int, ...], kind: str, scalar: float, perm: list[int]) -> str:
    ty, n = e.ty(shape), len(shape)
    if kind in ("mul_scalar", "scalar_mul", "div_scalar"):
        c = e.op(f"tg.constant dense<{scalar}> : tensor<f32>")
        if kind == "scalar_mul":
            return e.op(f"tg.mul {c}, {value} : (tensor<f32>, {ty}) -> {ty}")
        op = "tg.mul" if kind == "mul_scalar" else "tg.div"
        return e.op(f"{op} {value}, {c} : ({ty}, tensor<f32>) -> {ty}")
    if kind == "dead_user":
        e.op(f"tg.relu {value} : {ty}")
        return value
    if kind == "reshape_round_trip":
        flat = e.ty((int(np.prod(shape)),))
        mid = e.op(f"tg.reshape {value} : ({ty}) -> {flat}")
        return e.op(f"tg.reshape {mid} : ({flat}) -> {ty}")
    if kind == "transpose_round_trip":
        inverse = list(np.argsort(perm))
        mid_shape = tuple(shape[p] for p in perm)
        mid = e.op(f"tg.transpose {value} {{perm = array<i64: {', '.join(map(str, perm))}>}} : ({ty}) -> {e.ty(mid_shape)}")
        return e.op(f"tg.transpose {mid} {{perm = array<i64: {', '.join(map(str, inverse))}>}} : ({e.ty(mid_shape)}) -> {ty}")
    assert kind == "swap_twice"
    swap = [*range(n - 2), n - 1, n - 2]
    mid_shape = tuple(shape[p] for p in swap)
    mid = e.op(f"tg.transpose {value} {{perm = array<i64: {', '.join(map(str, swap))}>}} : ({ty}) -> {e.ty(mid_shape)}")
    return e.op(f"tg.transpose {mid} {{perm = array<i64: {', '.join(map(str, swap))}>}} : ({e.ty(mid_shape)}) -> {ty}")


def wrappers(rank: int) -> st.SearchStrategy[list[tuple[str, float, list[int]]]]:
    one = st.tuples(st.sampled_from(WRAPPERS), st.sampled_from(SCALARS), st.permutations(list(range(rank))))
    return st.lists(one, max_size=3)


def operand(draw, e: Emitter, shape: tuple[int, ...]) -> str:
    """An operand of ``shape``: an argument (maybe stored transposed) inside random wrappers."""
    stored_transposed = draw(st.booleans())
    n = len(shape)
    if stored_transposed:
        swap = [*range(n - 2), n - 1, n - 2]
        stored = tuple(shape[p] for p in swap)
        value = e.op(
            f"tg.transpose {e.arg(stored)} {{perm = array<i64: {', '.join(map(str, swap))}>}} "
            f": ({e.ty(stored)}) -> {e.ty(shape)}"
        )
    else:
        value = e.arg(shape)
    for kind, scalar, perm in draw(wrappers(n)):
        value = wrap(e, value, shape, kind, scalar, perm)
    return value


@st.composite
def matmul_programs(draw) -> str:
    batch = draw(st.sampled_from([(), (2,), (2, 3)]))
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    e = Emitter()
    a = operand(draw, e, (*batch, m, k))
    b = operand(draw, e, (*batch, k, n))
    shape = (*batch, m, n)
    ty = e.ty(shape)
    y = e.op(f"tg.matmul {a}, {b} : ({e.ty((*batch, m, k))}, {e.ty((*batch, k, n))}) -> {ty}")
    for kind, scalar, perm in draw(wrappers(len(shape))):
        y = wrap(e, y, shape, kind, scalar, perm)
    epilogue = draw(st.sampled_from(["none", "add_bias", "bias_add", "sub_full", "relu", "add_bias_relu"]))
    if epilogue in ("add_bias", "bias_add", "add_bias_relu"):
        bias = e.arg((n,))
        operands = f"{y}, {bias} : ({ty}, {e.ty((n,))})" if epilogue != "bias_add" else f"{bias}, {y} : ({e.ty((n,))}, {ty})"
        y = e.op(f"tg.add {operands} -> {ty}")
    if epilogue == "sub_full":
        y = e.op(f"tg.sub {e.arg(shape)}, {y} : ({ty}, {ty}) -> {ty}")
    if epilogue in ("relu", "add_bias_relu"):
        if draw(st.booleans()):
            e.op(f"tg.relu {y} : {ty}")  # a dead relu beside the live one
        y = e.op(f"tg.relu {y} : {ty}")
    return e.function(y, shape)


@settings(max_examples=150, deadline=None)
@given(matmul_programs(), st.integers(0, 2**32 - 1))
def test_property_optimised_matmul_chains_evaluate_the_same(source: str, seed: int):
    before = parse(source)
    after = run("canonicalize,absorb-blas-flags,fuse-bias-activation,canonicalize,dce", before)
    assert_same_numbers(before, after, seed, scale_atol=True)
    # Every transpose/reshape round trip and scalar scale is gone: only the matmul and its epilogue stay.
    assert set(body_ops(after)) <= {"tg.matmul", "tg.bias_activation", "tg.relu"}
