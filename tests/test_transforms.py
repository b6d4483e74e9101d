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
from xdsl.parser import Parser

from tensor_graphs.context import make_context
from tensor_graphs.dialects.tensor import MatmulOp, WeightOp, shape_of
from tensor_graphs.passes import build_pipeline
from tensor_graphs.transforms.evaluate import EVALUATORS, EvaluationError, evaluate_function, evaluate_op

RTOL, ATOL = 1e-5, 1e-6


# --------------------------------------------------------------------------- helpers


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def run(passes: str, module: ModuleOp) -> ModuleOp:
    """A copy of ``module`` after ``passes`` (verified)."""
    out = module.clone()
    build_pipeline(passes).apply(make_context(), out)
    out.verify()
    return out


def functions(module: ModuleOp) -> list[func.FuncOp]:
    return [op for op in module.ops if isinstance(op, func.FuncOp)]


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
