"""torch.export → aten dialect: op coverage, weights, the side file, and the errors users see."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import mlp
from xdsl.dialects.builtin import ModuleOp

from tensor_graphs.context import make_context
from tensor_graphs.dialects.tensor import ConstantOp, WeightOp
from tensor_graphs.frontend import (
    ImportedGraph,
    UnsupportedOpsError,
    export_model,
    import_exported_program,
    import_model,
    load_weights,
)


def op_names(module: ModuleOp) -> list[str]:
    return [op.name for op in module.walk() if op.name.startswith(("aten.", "tg."))]


class Mixed(torch.nn.Module):
    """Every supported op family: linear, t/transpose/permute/view/reshape, bmm/matmul/addmm, scalars."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 6)
        self.w = torch.nn.Parameter(torch.randn(6, 4))
        self.b = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x, y):
        h = torch.relu(self.fc(x)) * 0.5 + 1  # 2x3x6
        c = torch.bmm(h, h.transpose(1, 2))  # 2x3x3
        d = c.permute(0, 2, 1).reshape(2, 9).view(18)
        e = torch.matmul(h, self.w) / self.scale - 3  # 2x3x4
        f = torch.addmm(self.b, y, self.w, beta=0.5, alpha=2.0)  # 5x4
        g = y.t() @ y - y.t().mm(y) * 2  # 6x6
        return e, d, f, g


def test_mlp_with_bias():
    model = mlp([16, 32, 8])
    g = import_model(model, (torch.randn(2, 16),))
    assert isinstance(g, ImportedGraph)
    assert g.input_names == ["input"]  # nn.Sequential.forward(input)
    assert g.num_outputs == 1
    assert op_names(g.module).count("aten.linear") == 2
    assert "aten.relu" in op_names(g.module)
    assert sorted(g.weights) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    weights = {op.weight_name.data for op in g.module.walk() if isinstance(op, WeightOp)}
    assert weights == set(g.weights)
    g.module.verify()


def test_mlp_without_bias():
    model = mlp([16, 32, 8], bias=False)
    g = import_model(model, (torch.randn(2, 16),))
    assert sorted(g.weights) == ["0.weight", "2.weight"]
    linears = [op for op in g.module.walk() if op.name == "aten.linear"]
    assert len(linears) == 2 and all(op.bias is None for op in linears)


def test_weights_share_memory_with_parameters():
    model = mlp([16, 32, 8])
    g = import_model(model, (torch.randn(2, 16),))
    for name, param in model.named_parameters():
        array = g.weights[name]
        assert array.dtype == np.float32 and array.flags.c_contiguous
        assert np.shares_memory(array, param.detach().numpy()), name


def test_mixed_ops_and_buffers():
    model = Mixed()
    g = import_model(model, (torch.randn(2, 3, 8), torch.randn(5, 6)))
    names = op_names(g.module)
    for op in ("aten.linear", "aten.relu", "aten.mul.Tensor", "aten.add.Tensor", "aten.transpose.int", "aten.bmm",
               "aten.permute", "aten.reshape", "aten.view", "aten.matmul", "aten.div.Tensor", "aten.sub.Tensor",
               "aten.addmm", "aten.t", "aten.mm"):
        assert op in names, op
    assert set(g.weights) == {"fc.weight", "fc.bias", "w", "b", "scale"}
    assert g.weights["scale"].shape == ()
    assert g.input_names == ["x", "y"]
    assert g.num_outputs == 4
    # python scalars where the schema wants a Tensor are rank-0 f32 constants
    consts = [op for op in g.module.walk() if isinstance(op, ConstantOp)]
    assert consts and all(op.result.type.get_shape() == () for op in consts)
    addmm = next(op for op in g.module.walk() if op.name == "aten.addmm")
    assert addmm.beta.value.data == 0.5 and addmm.alpha.value.data == 2.0


def test_user_module_mode_is_restored():
    model = mlp([4, 4, 4]).train()
    model[1].eval()
    import_model(model, (torch.randn(1, 4),))
    assert model.training and model[0].training and not model[1].training


def test_dropout_is_identity_in_inference():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    g = import_model(model, (torch.randn(2, 4),))
    assert "aten.unsupported" not in op_names(g.module)


def test_import_exported_program():
    model = mlp([4, 8, 2])
    ep = torch.export.export(model, (torch.randn(3, 4),))
    g = import_exported_program(ep)
    assert op_names(g.module).count("aten.linear") == 2


def test_lifted_constant_and_non_persistent_buffer():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("offset", torch.ones(4), persistent=False)

        def forward(self, x):
            return x + torch.tensor([1.0, 2.0, 3.0, 4.0]) + self.offset

    g = import_model(M(), (torch.randn(2, 4),))
    # a non-persistent buffer is not in the state dict: an inline constant, so what is built from it folds
    assert "offset" not in g.weights
    assert "tg.constant" in op_names(g.module)
    # a lifted float tensor constant stays a weight
    assert any(np.array_equal(v, [1, 2, 3, 4]) for v in g.weights.values())


class Erfinv(torch.nn.Module):
    def forward(self, x):
        return torch.special.i1(x)


class WithUnsupported(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(4, 4), Erfinv())

    def forward(self, x):
        return torch.special.erfcx(self.layers(x)) + torch.special.i1(x)


def test_unsupported_ops_are_all_listed_with_locations():
    with pytest.raises(UnsupportedOpsError) as info:
        import_model(WithUnsupported(), (torch.randn(2, 4),))
    err = info.value
    targets = [t for t, _ in err.ops]
    assert sorted(targets) == ["aten::special_erfcx", "aten::special_i1", "aten::special_i1"]
    msg = str(err)
    assert msg.startswith("3 unsupported ops:")
    assert "layers.1 (test_frontend.Erfinv)" in msg
    assert "test_frontend.py" in msg and "torch.special.erfcx" in msg
    assert err.graph is not None
    assert op_names(err.graph.module).count("aten.unsupported") == 3


def test_non_float_input_is_rejected():
    with pytest.raises(TypeError, match="input 0 has dtype torch.complex64"):
        import_model(mlp([4, 2]), (torch.ones(2, 4, dtype=torch.complex64),))
    with pytest.raises(TypeError, match="input 0 is a list"):
        import_model(mlp([4, 2]), ([1.0, 2.0],))


def test_integer_inputs_are_token_ids():
    """int64/int32 inputs are accepted (token ids for an embedding)."""
    emb = torch.nn.Embedding(10, 4)
    g = import_model(emb, (torch.tensor([[1, 2, 3]]),))
    fn_args = next(op for op in g.module.walk() if op.name == "func.func").body.block.args
    assert str(fn_args[0].type) == "tensor<1x3xi64>"
    assert "aten.embedding" in op_names(g.module)


def test_unexportable_model_is_a_value_error():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(ValueError, match="torch.export could not export DataDependent"):
        import_model(DataDependent(), (torch.randn(2, 2),))


def test_nested_outputs_keep_their_structure():
    """The graph returns the tensor leaves; the structure around them is recorded
    (`tests/test_output_structure.py` runs it)."""
    class Nested(torch.nn.Module):
        def forward(self, x):
            return x * 2, (x * 3, 5)

    g = import_model(Nested(), (torch.randn(2, 2),))
    assert g.num_outputs == 2 and g.structure.leaves == (0, 1, ("constant", 5)) and not g.structure.plain


def test_export_model_writes_mlir_and_safetensors(tmp_path: Path):
    model = mlp([16, 32, 8])
    path = tmp_path / "model.mlir"
    g = export_model(model, (torch.randn(2, 16),), path)
    text = path.read_text()
    assert (tmp_path / "model.safetensors").is_file()
    assert 'tg.weights_file = "model.safetensors"' in text
    assert "dense<" not in text  # real weights are never inlined
    # tg-opt parses it
    out = subprocess.run([str(Path(sys.executable).parent / "tg-opt"), str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "aten.linear" in out.stdout
    # and the weights come back equal
    from xdsl.parser import Parser

    module = Parser(make_context(), text).parse_module()
    weights = load_weights(module, path)
    assert set(weights) == set(g.weights)
    for name, param in model.named_parameters():
        np.testing.assert_array_equal(weights[name], param.detach().numpy())


def test_load_weights_missing_file(tmp_path: Path):
    path = tmp_path / "m.mlir"
    g = export_model(mlp([4, 2]), (torch.randn(1, 4),), path)
    (tmp_path / "m.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="m.safetensors"):
        load_weights(g.module, path)
