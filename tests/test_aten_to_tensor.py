"""convert-aten-to-tensor numerics: import with the frontend, lower to tg, run a tiny NumPy
interpreter (local to this file), and compare with PyTorch at rtol 1e-5 / atol 1e-6."""

import numpy as np
import pytest
import torch
from conftest import mlp
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f32

from tensor_graphs.context import make_context
from tensor_graphs.dialects import aten
from tensor_graphs.dialects import tensor as tg
from tensor_graphs.frontend import import_model
from tensor_graphs.lowering.aten_to_tensor.convert import AtenConversionError, ConvertAtenToTensorPass

RTOL, ATOL = 1e-5, 1e-6


def run_tg(module: ModuleOp, weights: dict[str, np.ndarray], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``@forward`` of a tg-level module with NumPy (float64 inside, float32 out)."""
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    env = {arg: np.asarray(x, np.float64) for arg, x in zip(fn.body.block.args, inputs, strict=True)}
    for op in fn.body.block.ops:
        ins = [env[v] for v in op.operands]
        if isinstance(op, tg.WeightOp):
            out = np.asarray(weights[op.weight_name.data], np.float64)
        elif isinstance(op, tg.ConstantOp):
            out = np.array(op.value.get_values(), np.float64).reshape(op.result.type.get_shape())
        elif isinstance(op, tg.MatmulOp):
            ta, tb, alpha, beta = op.flags
            a = np.swapaxes(ins[0], -1, -2) if ta else ins[0]
            b = np.swapaxes(ins[1], -1, -2) if tb else ins[1]
            out = alpha * (a @ b) + (beta * ins[2] if len(ins) > 2 else 0.0)
        elif isinstance(op, tg.ElementwiseBinaryOp):
            out = getattr(np, op.NUMPY_FN)(ins[0], ins[1])
        elif isinstance(op, tg.ReluOp):
            out = np.maximum(ins[0], 0.0)
        elif isinstance(op, tg.ReshapeOp):
            out = ins[0].reshape(op.result.type.get_shape())
        elif isinstance(op, tg.TransposeOp):
            out = np.transpose(ins[0], op.permutation)
        elif isinstance(op, func.ReturnOp):
            return [np.asarray(x, np.float32) for x in ins]
        else:
            raise NotImplementedError(op.name)
        assert out.shape == tuple(op.results[0].type.get_shape()), op.name
        env[op.results[0]] = out
    raise AssertionError("no func.return")


def lower_and_run(model: torch.nn.Module, *inputs: torch.Tensor) -> None:
    g = import_model(model, inputs)
    ConvertAtenToTensorPass().apply(make_context(), g.module)
    g.module.verify()
    assert not [op.name for op in g.module.walk() if op.dialect_name() == "aten"]
    got = run_tg(g.module, g.weights, [x.numpy() for x in inputs])
    with torch.no_grad():
        want = model.eval()(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want) == g.num_outputs
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == tuple(b.shape), f"output {i}"
        np.testing.assert_allclose(a, b.numpy(), rtol=RTOL, atol=ATOL, err_msg=f"output {i}")


@pytest.mark.parametrize("bias", [True, False])
def test_mlp(bias):
    lower_and_run(mlp([16, 32, 32, 8], bias=bias), torch.randn(4, 16))


def test_linear_on_batched_and_vector_inputs():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x, v):
            return self.fc(x), self.fc(v)

    lower_and_run(M(), torch.randn(2, 3, 8), torch.randn(8))


class DataMovementAndBlas(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 4))
        self.b = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("scale", torch.tensor(3.0))

    def forward(self, x, y):
        a = x.transpose(-1, -2)  # 2x6x3
        c = torch.bmm(x, a)  # 2x3x3
        d = c.permute(2, 0, 1).reshape(3, 6).contiguous().view(-1)
        e = torch.matmul(x, self.w) / self.scale  # 2x3x4
        f = torch.addmm(self.b, y, self.w, beta=0.5, alpha=2.0)
        f2 = torch.addmm(self.b, y, self.w)
        g = y.t() @ y
        return d, e, f, f2, g, torch.flatten(e, 1), x.unsqueeze(1), e.contiguous()


def test_data_movement_and_blas():
    y = torch.randn(5, 6)
    lower_and_run(DataMovementAndBlas(), torch.randn(2, 3, 6), y)


def test_matmul_vector_forms():
    class M(torch.nn.Module):
        def forward(self, v, m, b):
            return torch.matmul(v, m), torch.matmul(m.transpose(-1, -2), v), torch.matmul(v, v), torch.matmul(v, b)

    lower_and_run(M(), torch.randn(3), torch.randn(3, 4), torch.randn(2, 3, 5))


def test_scalar_and_alpha_ops():
    class M(torch.nn.Module):
        def forward(self, a, b):
            y = torch.add(a, b, alpha=2.5) - 1.5
            y = torch.sub(y, b, alpha=0.5) * 3 / 4 + 2
            y = torch.relu(y) / (b + 4.0) - a * b
            return torch.ops.aten.add.Scalar(y, 1.0, 2.0), torch.ops.aten.sub.Scalar(y, 3), torch.ops.aten.mul.Scalar(y, 0.25), torch.ops.aten.div.Scalar(y, 8)

    lower_and_run(M(), torch.randn(2, 3), torch.randn(3))


def test_remaining_ops_are_reported_with_reasons():
    """A pattern that cannot apply records why; the pass lists every aten op left over."""
    x = tg.WeightOp("x", TensorType(f32, []))
    mm = aten.MatmulOp(x.result, x.result, result_type=TensorType(f32, []))  # invalid: rank 0, never verified
    bad = aten.UnsupportedOp("aten::gelu", [mm.result], [TensorType(f32, [])], "act (torch.nn.GELU)")
    fn = func.FuncOp("forward", ([], [bad.outputs[0].type]))
    for op in (x, mm, bad, func.ReturnOp(bad.outputs[0])):
        fn.body.block.add_op(op)
    module = ModuleOp([fn])
    with pytest.raises(AtenConversionError) as info:
        ConvertAtenToTensorPass().apply(make_context(), module)
    msg = str(info.value)
    assert "2 aten ops could not be converted" in msg
    assert "aten.matmul (float32 [], float32 []): expected operands of rank >= 1" in msg
    assert "aten::gelu has no tg lowering (unsupported ATen op) at act (torch.nn.GELU)" in msg
