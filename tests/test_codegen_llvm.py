"""buf -> llvm -> native: every kernel against NumPy, on hand-written planned `buf` modules."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from xdsl.parser import Parser

from tensor_graphs.codegen.llvm.convert_buffer_to_llvm import ConvertBufferToLLVMPass
from tensor_graphs.codegen.llvm.jit import CodegenError, NativeGraph, call_native, jit_compile, to_llvm_ir
from tensor_graphs.codegen.llvm.kernels import REGISTRY, LoweringError
from tensor_graphs.codegen.llvm.loops import collapse_dims
from tensor_graphs.context import make_context
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.runtime_support import blas
from tensor_graphs.runtime_support.signature import GraphSignature

RTOL = ATOL = 1e-5
rng = np.random.default_rng(0)


def memref(shape, el: str = "f32") -> str:
    return "memref<" + "".join(f"{d}x" for d in shape) + el + ">"


def parse(text: str):
    return Parser(make_context(), text).parse_module()


def compile_text(text: str) -> NativeGraph:
    module = parse(text)
    module.verify()
    ConvertBufferToLLVMPass().apply(make_context(), module)
    module.verify()
    return jit_compile(module)


def run(native: NativeGraph, inputs, weights=None) -> list[np.ndarray]:
    sig = native.signature
    outs = [np.full(s.shape, np.nan, s.dtype) for s in sig.outputs]
    arena = np.zeros(max(sig.arena_size, 1), np.uint8)
    call_native(native, arena, weights or {}, [np.asarray(a, np.float32, order="C") for a in inputs], outs)
    return outs


def kernel_module(op: str, in_shapes, out_shape, attrs: str = "") -> str:
    """One kernel reading the graph inputs and writing the graph output directly."""
    args = [f"%i{k}: {memref(s)}" for k, s in enumerate(in_shapes)] + [f"%o: {memref(out_shape)}"]
    ins = ", ".join(f"%i{k}" for k in range(len(in_shapes)))
    in_types = ", ".join(memref(s) for s in in_shapes)
    return f"""
builtin.module {{
  func.func @forward({", ".join(args)}) attributes {{tg.num_outputs = 1 : i64}} {{
    buf.{op} ins({ins} : {in_types}) outs(%o : {memref(out_shape)}) {attrs}
    func.return
  }}
}}"""


def run_kernel(op: str, inputs, out_shape, attrs: str = "") -> np.ndarray:
    native = compile_text(kernel_module(op, [np.shape(a) for a in inputs], out_shape, attrs))
    return run(native, inputs)[0]


def rand(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- matmul


def _op(x: np.ndarray, t: bool) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if t else x


MATMUL_CASES = {
    # name: (a shape, b shape, transpose_a, transpose_b)
    "plain": ((4, 8), (8, 5), False, False),
    "transpose_a": ((8, 4), (8, 5), True, False),
    "transpose_b": ((4, 8), (5, 8), False, True),
    "transpose_both": ((8, 4), (5, 8), True, True),
    "batched_3d_rhs_2d_folds": ((2, 3, 8), (8, 5), False, False),
    "batched_3d_rhs_2d_transpose_b": ((2, 3, 8), (5, 8), False, True),
    "batched_transpose_a_rhs_2d": ((2, 8, 3), (8, 5), True, False),
    "batched_both": ((3, 4, 8), (3, 8, 5), False, False),
    "batched_rhs_only": ((4, 8), (3, 8, 5), False, False),
    "broadcast_batch_dims": ((2, 1, 4, 8), (3, 8, 5), False, False),
    "broadcast_batch_dims_transposed": ((2, 1, 8, 4), (1, 3, 5, 8), True, True),
    "rhs_batch_of_one": ((2, 4, 8), (1, 8, 5), False, False),
    "vector_like": ((1, 8), (8, 1), False, False),
    # one output row or column: lowered to sgemv
    "gemv_row": ((1, 8), (8, 5), False, False),
    "gemv_row_transpose_b": ((1, 8), (5, 8), False, True),
    "gemv_row_transpose_a": ((8, 1), (8, 5), True, False),
    "gemv_row_transpose_both": ((8, 1), (5, 8), True, True),
    "gemv_col": ((4, 8), (8, 1), False, False),
    "gemv_col_transpose_a": ((8, 4), (8, 1), True, False),
    "gemv_col_transpose_b": ((4, 8), (1, 8), False, True),
    "gemv_col_transpose_both": ((8, 4), (1, 8), True, True),
    "gemv_folded_batch_rows": ((3, 1, 8), (5, 8), False, True),
    "gemv_per_batch": ((3, 1, 8), (3, 8, 5), False, False),
}


@pytest.mark.parametrize("case", list(MATMUL_CASES))
def test_matmul(case):
    sa, sb, ta, tb = MATMUL_CASES[case]
    a, b = rand(*sa), rand(*sb)
    ref = _op(a, ta) @ _op(b, tb)
    attrs = f"{{transpose_a = {str(ta).lower()}, transpose_b = {str(tb).lower()}}}"
    out = run_kernel("matmul", [a, b], ref.shape, attrs)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "acc_shape,a_shape,b_shape",
    [((5,), (4, 8), (8, 5)), ((4, 5), (4, 8), (8, 5)), ((4, 1), (4, 8), (8, 5)), ((), (4, 8), (8, 5)),
     ((5,), (2, 3, 8), (8, 5)), ((3, 1, 5), (3, 4, 8), (3, 8, 5))],
)
def test_matmul_alpha_beta_acc(acc_shape, a_shape, b_shape):
    a, b, c = rand(*a_shape), rand(*b_shape), rand(*acc_shape)
    ref = 2.0 * (a @ b) + 0.5 * c
    out = run_kernel("matmul", [a, b, c], ref.shape, "{alpha = 2.0 : f32, beta = 0.5 : f32}")
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_matmul_acc_with_zero_beta_is_ignored():
    a, b, c = rand(4, 8), rand(8, 5), np.full((5,), np.nan, np.float32)
    out = run_kernel("matmul", [a, b, c], (4, 5), "{beta = 0.0 : f32}")
    np.testing.assert_allclose(out, a @ b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_gemv_alpha_beta_acc(beta):
    a, b, c = rand(1, 8), rand(5, 8), rand(5)
    ref = 2.0 * (a @ b.T) + beta * c
    attrs = f"{{transpose_b = true, alpha = 2.0 : f32, beta = {beta} : f32}}"
    out = run_kernel("matmul", [a, b, c], ref.shape, attrs)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_matrix_vector_products_call_sgemv():
    module = parse(kernel_module("matmul", [(1, 8), (5, 8)], (1, 5), "{transpose_b = true}"))
    ConvertBufferToLLVMPass().apply(make_context(), module)
    ir = to_llvm_ir(module)
    assert "scipy_cblas_sgemv" in ir and "scipy_cblas_sgemm" not in ir


def test_matmul_folds_batch_into_one_sgemm_call():
    text = kernel_module("matmul", [(2, 3, 8), (8, 5)], (2, 3, 5))
    module = parse(text)
    ConvertBufferToLLVMPass().apply(make_context(), module)
    ir = to_llvm_ir(module)
    assert ir.count("call ccc void @\"scipy_cblas_sgemm\"") == 1
    assert "i32 6, i32 5, i32 8" in ir  # M = 2 * 3 folded


# --------------------------------------------------------------------------- elementwise

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
BROADCASTS = [
    ((4, 5), (4, 5)),
    ((), (4, 5)),
    ((4, 5), ()),
    ((), ()),
    ((5,), (4, 5)),
    ((4, 5), (5,)),
    ((4, 1), (1, 5)),
    ((2, 1, 5), (3, 1)),
    ((1,), (3, 4, 5)),
    ((2, 3, 4, 5), (3, 1, 5)),
]


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("sa,sb", BROADCASTS, ids=[f"{list(a)}-{list(b)}" for a, b in BROADCASTS])
def test_binary_broadcast(op, sa, sb):
    a = rand(*sa)
    b = rand(*sb) if op != "div" else rng.uniform(0.5, 2.0, sb).astype(np.float32)
    ref = BINARY[op](a, b)
    out = run_kernel(op, [a, b], np.shape(ref))
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", [(), (7,), (4, 5), (2, 3, 4, 5), (1000,)])
def test_relu(shape):
    x = rand(*shape)
    np.testing.assert_allclose(run_kernel("relu", [x], shape), np.maximum(x, 0), rtol=RTOL, atol=ATOL)


def test_relu_propagates_nan():
    x = np.array([-1.0, np.nan, 2.0, -0.0], np.float32)
    out = run_kernel("relu", [x], x.shape)
    np.testing.assert_array_equal(np.isnan(out), [False, True, False, False])
    np.testing.assert_array_equal(out[[0, 2]], [0.0, 2.0])


@pytest.mark.parametrize("shape", [(), (7,), (3, 4, 5)])
def test_copy(shape):
    x = rand(*shape)
    np.testing.assert_array_equal(run_kernel("copy", [x], shape), x)


PERMS = (
    [((4, 5), (1, 0))]
    + [((2, 3, 4), p) for p in itertools.permutations(range(3))]
    + [((2, 3, 4, 5), (0, 2, 1, 3)), ((2, 3, 4, 5), (3, 1, 2, 0))]
    # large enough to take the cache-blocked path, with and without remainders
    + [((32, 48), (1, 0)), ((40, 37), (1, 0)), ((3, 20, 33), (0, 2, 1)), ((17, 3, 18), (2, 1, 0)), ((2, 16, 5, 17), (3, 2, 1, 0))]
)


@pytest.mark.parametrize("shape,perm", PERMS, ids=[f"{list(s)}-{list(p)}" for s, p in PERMS])
def test_transpose(shape, perm):
    x = rand(*shape)
    ref = np.transpose(x, perm)
    out = run_kernel("transpose", [x], ref.shape, f"{{perm = array<i64: {', '.join(map(str, perm))}>}}")
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("activation", ["none", "relu"])
@pytest.mark.parametrize("x_shape,b_shape", [((4, 5), (5,)), ((4, 5), (4, 1)), ((2, 3, 5), (5,)), ((4, 5), ()), ((4, 5), (4, 5))])
def test_bias_activation(activation, x_shape, b_shape):
    x, b = rand(*x_shape), rand(*b_shape)
    ref = x + b
    if activation == "relu":
        ref = np.maximum(ref, 0)
    out = run_kernel("bias_activation", [x, b], x_shape, f'{{activation = "{activation}"}}')
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_elementwise_loop_is_flat_and_vectorised():
    native = compile_text(kernel_module("add", [(16, 64), (16, 64)], (16, 64)))
    assert "x float>" in native.llvm_ir  # a vector loop
    assert collapse_dims((16, 64), [(64, 1), (64, 1), (64, 1)]) == ((1024,), [(1,), (1,), (1,)])
    assert collapse_dims((4, 5), [(5, 1), (0, 1)]) == ((4, 5), [(5, 1), (0, 1)])
    assert collapse_dims((4, 1, 5), [(5, 5, 1), (0, 0, 0)]) == ((20,), [(1,), (0,)])


def test_every_kernel_has_an_emitter():
    kernels = {op.name for op in buf.BUF.operations if issubclass(op, buf.KernelOp)}
    assert kernels - {k.name for k in REGISTRY} == set()
    assert {k.name for k in REGISTRY} <= kernels


# --------------------------------------------------------------------------- whole graphs

MLP = """
builtin.module attributes {tg.arena_size = 512 : i64} {
  func.func @forward(%x: memref<2x8xf32>, %out0: memref<2x4xf32>, %out1: memref<16xf32>) attributes {tg.num_outputs = 2 : i64} {
    %arena = buf.arena : memref<512xi8>
    %w1 = buf.weight "fc1.weight" : memref<8x8xf32>
    %b1 = buf.weight "fc1.bias" : memref<8xf32>
    %w2 = buf.weight "fc2.weight" : memref<4x8xf32>
    %half = buf.constant dense<0.5> : tensor<f32> : memref<f32>
    %shift = buf.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32> : memref<4xf32>
    %h = buf.view %arena[0] : memref<512xi8> -> memref<2x8xf32>
    %g = buf.view %arena[64] : memref<512xi8> -> memref<2x8xf32>
    %w1again = buf.weight "fc1.weight" : memref<8x8xf32>
    buf.matmul ins(%x, %w1 : memref<2x8xf32>, memref<8x8xf32>) outs(%h : memref<2x8xf32>) {transpose_b = true}
    buf.bias_activation ins(%h, %b1 : memref<2x8xf32>, memref<8xf32>) outs(%h : memref<2x8xf32>) {activation = "relu"}
    buf.matmul ins(%h, %w1again, %h : memref<2x8xf32>, memref<8x8xf32>, memref<2x8xf32>) outs(%g : memref<2x8xf32>) {beta = 1.0 : f32}
    %flat = buf.reshape %g : memref<2x8xf32> -> memref<16xf32>
    buf.mul ins(%flat, %half : memref<16xf32>, memref<f32>) outs(%out1 : memref<16xf32>)
    buf.matmul ins(%g, %w2, %shift : memref<2x8xf32>, memref<4x8xf32>, memref<4xf32>) outs(%out0 : memref<2x4xf32>) {transpose_b = true, alpha = 2.0 : f32, beta = 1.0 : f32}
    func.return
  }
}
"""


def test_graph_with_arena_weights_constants_and_two_outputs():
    native = compile_text(MLP)
    sig = native.signature
    assert sig.entry == "forward"
    assert sig.arena_size == 512
    assert sig.weight_table == ("fc1.weight", "fc1.bias", "fc2.weight", "__const0", "__const1")
    assert sig.constants["__const0"].reshape(()) == 0.5  # rank 0 (read back as [1] until dense_to_numpy keeps rank 0)
    np.testing.assert_array_equal(sig.constants["__const1"], [1, 2, 3, 4])
    assert [s.name for s in sig.inputs] == ["x"]
    assert [s.shape for s in sig.outputs] == [(2, 4), (16,)]

    x, w1, b1, w2 = rand(2, 8), rand(8, 8), rand(8), rand(4, 8)
    out0, out1 = run(native, [x], {"fc1.weight": w1, "fc1.bias": b1, "fc2.weight": w2})
    h = np.maximum(x @ w1.T + b1, 0)
    g = h @ w1 + h
    np.testing.assert_allclose(out1, (g * 0.5).reshape(-1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out0, 2 * g @ w2.T + np.array([1, 2, 3, 4], np.float32), rtol=RTOL, atol=ATOL)


def test_signature_round_trips_through_module_attributes():
    module = parse(MLP)
    ConvertBufferToLLVMPass().apply(make_context(), module)
    sig = GraphSignature.from_module(module)
    assert sig.weight_table[-2:] == ("__const0", "__const1")
    assert sig.inputs[0].shape == (2, 8)
    assert sig.errors == ()


def test_graph_function_returns_an_i32_status():
    module = parse(MLP)
    ConvertBufferToLLVMPass().apply(make_context(), module)
    ir = to_llvm_ir(module).replace('"', "")
    assert "define i32 @forward(" in ir and "ret i32 0" in ir


@pytest.mark.serial
def test_graph_is_reusable_and_compiles_fast():
    import time

    t0 = time.perf_counter()
    native = compile_text(MLP)
    assert time.perf_counter() - t0 < 5.0  # generous: about 0.1 s on a laptop
    weights = {"fc1.weight": rand(8, 8), "fc1.bias": rand(8), "fc2.weight": rand(4, 8)}
    x = rand(2, 8)
    first = run(native, [x], weights)
    second = run(native, [x], weights)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- errors


def test_unplanned_module_is_rejected():
    text = """
builtin.module {
  func.func @f(%x: memref<4xf32>, %o: memref<4xf32>) attributes {tg.num_outputs = 1 : i64} {
    %t = buf.alloc : memref<4xf32>
    buf.relu ins(%x : memref<4xf32>) outs(%t : memref<4xf32>)
    buf.copy ins(%t : memref<4xf32>) outs(%o : memref<4xf32>)
    func.return
  }
}"""
    with pytest.raises(LoweringError, match="not planned, run plan-memory first"):
        ConvertBufferToLLVMPass().apply(make_context(), parse(text))


def test_missing_num_outputs_is_rejected():
    text = kernel_module("relu", [(4,)], (4,)).replace(" attributes {tg.num_outputs = 1 : i64}", "")
    with pytest.raises(LoweringError, match="tg.num_outputs"):
        ConvertBufferToLLVMPass().apply(make_context(), parse(text))


def test_two_graph_functions_are_rejected():
    one = kernel_module("relu", [(4,)], (4,))
    body = one[one.index("func.func") : one.rindex("}")]
    text = "builtin.module {\n" + body + body.replace("@forward", "@other") + "}"
    with pytest.raises(LoweringError, match="exactly one graph function"):
        ConvertBufferToLLVMPass().apply(make_context(), parse(text))


def test_to_llvm_ir_names_the_first_unlowered_op():
    with pytest.raises(CodegenError, match="'func.func'"):
        to_llvm_ir(parse(kernel_module("relu", [(4,)], (4,))))


def test_call_native_checks_shapes():
    native = compile_text(kernel_module("relu", [(4,)], (4,)))
    with pytest.raises(ValueError, match=r"expected float32\[4\]"):
        call_native(native, None, {}, [np.zeros(5, np.float32)], [np.zeros(4, np.float32)])


def test_blas_threads():
    n = blas.get_num_threads()
    assert n >= 1
    blas.set_num_threads(1)
    assert blas.get_num_threads() == 1
    blas.set_num_threads(n)
    with pytest.raises(ValueError):
        blas.set_num_threads(0)


# --------------------------------------------------------------------------- aliasing

ALIAS = """
builtin.module {{
  func.func @forward(%x: memref<4x8xf32>, %w: memref<8x8xf32>, %o: memref<4x8xf32>) attributes {{tg.num_outputs = 1 : i64}} {{
    %arena = buf.arena : memref<512xi8>
    %t = buf.view %arena[0] : memref<512xi8> -> memref<4x8xf32>
    %u = buf.view %arena[{u}] : memref<512xi8> -> memref<4x8xf32>
    buf.copy ins(%x : memref<4x8xf32>) outs(%t : memref<4x8xf32>)
    {kernel}
    buf.copy ins(%u : memref<4x8xf32>) outs(%o : memref<4x8xf32>)
    func.return
  }}
}}"""


def test_in_place_elementwise_and_accumulate():
    kernel = (
        "buf.relu ins(%t : memref<4x8xf32>) outs(%t : memref<4x8xf32>)\n"
        "buf.matmul ins(%t, %w, %u : memref<4x8xf32>, memref<8x8xf32>, memref<4x8xf32>) outs(%u : memref<4x8xf32>) {beta = 1.0 : f32}"
    )
    native = compile_text(ALIAS.format(u=128, kernel=kernel))
    x, w = rand(4, 8), rand(8, 8)
    arena = np.zeros(512, np.uint8)
    arena[128:256] = np.frombuffer(np.ones((4, 8), np.float32).tobytes(), np.uint8)
    out = np.zeros((4, 8), np.float32)
    call_native(native, arena, {}, [x, w], [out])
    np.testing.assert_allclose(out, np.maximum(x, 0) @ w + 1.0, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "kernel",
    [
        "buf.matmul ins(%t, %w : memref<4x8xf32>, memref<8x8xf32>) outs(%u : memref<4x8xf32>)",
        "buf.transpose ins(%t : memref<4x8xf32>) outs(%v : memref<8x4xf32>) {perm = array<i64: 1, 0>}",
        "buf.add ins(%t, %x : memref<4x8xf32>, memref<4x8xf32>) outs(%u : memref<4x8xf32>)",
    ],
    ids=["matmul", "transpose", "add"],
)
def test_partially_overlapping_buffers_are_rejected(kernel):
    text = ALIAS.format(u=64, kernel=kernel).replace(
        "    buf.copy ins(%x", "    %v = buf.reshape %u : memref<4x8xf32> -> memref<8x4xf32>\n    buf.copy ins(%x"
    )
    with pytest.raises(LoweringError, match="overlaps the output"):
        ConvertBufferToLLVMPass().apply(make_context(), parse(text))


def test_matmul_output_must_not_be_an_operand():
    kernel = "buf.matmul ins(%t, %w : memref<4x8xf32>, memref<8x8xf32>) outs(%t : memref<4x8xf32>)"
    with pytest.raises(LoweringError, match="cannot run in place"):
        ConvertBufferToLLVMPass().apply(make_context(), parse(ALIAS.format(u=128, kernel=kernel)))


# --------------------------------------------------------------------------- shared kernel functions

SHARED = """
builtin.module attributes {tg.arena_size = 1024 : i64} {
  func.func @forward(%x: memref<4x8xf32>, %ids: memref<3xi64>, %o: memref<4x8xf32>, %e: memref<3x8xf32>, %f: memref<3x8xf32>) attributes {tg.num_outputs = 3 : i64} {
    %arena = buf.arena : memref<1024xi8>
    %two = buf.constant dense<2.0> : tensor<f32> : memref<f32>
    %three = buf.constant dense<3.0> : tensor<f32> : memref<f32>
    %t1 = buf.weight "t1" : memref<10x8xf32>
    %t2 = buf.weight "t2" : memref<10x8xf32>
    %a = buf.view %arena[0] : memref<1024xi8> -> memref<4x8xf32>
    %b = buf.view %arena[128] : memref<1024xi8> -> memref<4x8xf32>
    %c = buf.view %arena[256] : memref<1024xi8> -> memref<4x8xf32>
    %d = buf.view %arena[640] : memref<1024xi8> -> memref<4x8xf32>
    buf.relu ins(%x : memref<4x8xf32>) outs(%a : memref<4x8xf32>)
    buf.relu ins(%a : memref<4x8xf32>) outs(%b : memref<4x8xf32>)
    buf.relu ins(%b : memref<4x8xf32>) outs(%b : memref<4x8xf32>)
    buf.mul ins(%b, %two : memref<4x8xf32>, memref<f32>) outs(%c : memref<4x8xf32>)
    buf.relu ins(%c : memref<4x8xf32>) outs(%d : memref<4x8xf32>)
    buf.mul ins(%d, %three : memref<4x8xf32>, memref<f32>) outs(%o : memref<4x8xf32>)
    buf.embedding ins(%t1, %ids : memref<10x8xf32>, memref<3xi64>) outs(%e : memref<3x8xf32>)
    buf.embedding ins(%t2, %ids : memref<10x8xf32>, memref<3xi64>) outs(%f : memref<3x8xf32>)
    func.return
  }
}
"""


def test_kernels_with_the_same_code_share_one_function():
    """The relus a -> b and c -> d (arena to arena, disjoint: d 384 bytes after c where b is 128
    after a, which the code does not depend on) share a function; x -> a (from an input), the in-place relu (one pointer), the multiplications by different splat
    constants (immediates) and the embeddings (whose range checks name their tables) each have
    their own."""
    module = parse(SHARED)
    ConvertBufferToLLVMPass().apply(make_context(), module)
    text = str(module)
    defined = re.findall(r"llvm.func internal @forward__(\d+)_(\w+)\(", text)
    assert [(int(i), kind) for i, kind in defined] == [
        (0, "relu"), (1, "relu"), (2, "relu"), (3, "mul"), (5, "mul"), (6, "embedding"), (7, "embedding")
    ]
    assert text.count("llvm.call @forward__1_relu(") == 2
    native = compile_text(SHARED)
    x, ids = rand(4, 8), np.array([1, 9, 0])
    t1, t2 = rand(10, 8), rand(10, 8)
    sig = native.signature
    outs = [np.full(s.shape, np.nan, s.dtype) for s in sig.outputs]
    call_native(native, np.zeros(sig.arena_size, np.uint8), {"t1": t1, "t2": t2}, [x, ids], outs)
    np.testing.assert_allclose(outs[0], np.maximum(x, 0) * 6.0, rtol=1e-6)  # relu(relu(x) * 2) * 3
    np.testing.assert_array_equal(outs[1], t1[ids])
    np.testing.assert_array_equal(outs[2], t2[ids])
    assert [m.split(":")[0] for m in sig.errors] == ["embedding 't1'", "embedding 't2'"]
    with pytest.raises(IndexError, match="embedding 't1': index out of range"):
        call_native(native, np.zeros(sig.arena_size, np.uint8), {"t1": t1, "t2": t2}, [x, np.array([1, 10, 0])], outs)


# --------------------------------------------------------------------------- kernels split among threads


@pytest.fixture(params=[1, 2, 3], ids=["1thread", "2threads", "3threads"])
def threads(request):
    import tensor_graphs as tg

    before = tg.get_num_threads()
    tg.set_num_threads(request.param)
    yield request.param
    tg.set_num_threads(before)


LARGE = {
    # name: (op, input shapes, output shape, attrs, reference): every one moves bytes enough for 2 threads
    "flat_add_with_a_remainder": ("add", [(70000,), (70000,)], (70000,), "", lambda a, b: a + b),
    "rows_add_broadcast": ("add", [(300, 257), (257,)], (300, 257), "", lambda a, b: a + b),
    "relu_3d": ("relu", [(5, 130, 103)], (5, 130, 103), "", lambda a: np.maximum(a, 0)),
    "transpose_2d_tiled": ("transpose", [(300, 260)], (260, 300), "{perm = array<i64: 1, 0>}", lambda a: a.T),
    "transpose_heads": ("transpose", [(130, 16, 40)], (16, 130, 40), "{perm = array<i64: 1, 0, 2>}",
                        lambda a: a.transpose(1, 0, 2)),
    "strided_slice": ("slice", [(260, 600)], (260, 300), "{dim = 1 : i64, start = 1 : i64, step = 2 : i64}",
                      lambda a: a[:, 1::2]),
}


@pytest.mark.parametrize("case", list(LARGE))
def test_large_kernels_split_rows_among_threads(case, threads):
    from tensor_graphs.target import resolve

    op, in_shapes, out_shape, attrs, ref = LARGE[case]
    moved = 4 * (int(np.prod(out_shape)) + sum(int(np.prod(s)) for s in in_shapes))
    assert resolve(None).thread_work.threads(0, moved) >= 2
    native = compile_text(kernel_module(op, in_shapes, out_shape, attrs))
    assert "@GOMP_parallel" in native.llvm_ir
    inputs = [rand(*s) for s in in_shapes]
    np.testing.assert_array_equal(run(native, inputs)[0], ref(*inputs))


def test_large_elementwise_in_place_with_a_splat_constant(threads):
    text = f"""
builtin.module {{
  func.func @forward(%x: {memref((400, 300))}, %o: {memref((400, 300))}) attributes {{tg.num_outputs = 1 : i64}} {{
    %c = buf.constant dense<3.0> : tensor<f32> : memref<f32>
    buf.copy ins(%x : {memref((400, 300))}) outs(%o : {memref((400, 300))})
    buf.mul ins(%o, %c : {memref((400, 300))}, memref<f32>) outs(%o : {memref((400, 300))})
    func.return
  }}
}}"""
    x = rand(400, 300)
    np.testing.assert_array_equal(run(compile_text(text), [x])[0], x * 3.0)
