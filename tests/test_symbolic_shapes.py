"""Symbolic sizes (torch.export's ``Dim``): their expressions, their types, the importer's symbols
at the aten level, tg.export and tg.load; compiling them is tests/test_dynamic_shapes.py."""

from __future__ import annotations

import pytest
import sympy
import torch
from torch.export import Dim
from xdsl.dialects.builtin import f32

import tensor_graphs as tg
from tensor_graphs.diagnostics import parse_module, verify_module
from tensor_graphs.dialects.symbolic import (
    SymbolicShapeError,
    dims_of,
    divides,
    evaluate,
    format_expr,
    parse_expr,
    shaped,
    shaped_memref,
    symbol,
    symbols_of,
    upper_bound,
)
from tensor_graphs.frontend import UnsupportedOpsError
from tensor_graphs.frontend.importer import dim_names_of, import_exported_program, import_model

SEQ, B = symbol("seq"), symbol("b")


@pytest.mark.parametrize("text", ["seq", "2*seq + 1", "seq // 2", "b*seq", "max(b, seq)", "min(4, b)", "seq - 1",
                                  "(seq + 1) // 2", "seq % 4", "12*b*seq", "7"])
def test_an_expression_prints_as_it_parses(text):
    value = parse_expr(text)
    assert parse_expr(format_expr(value)) == value
    assert format_expr(value) == text


@pytest.mark.parametrize("text", ["__import__('os')", "seq ** 2", "seq / 2", "seq +", "lambda: 0", "seq[0]", "1e3"])
def test_anything_else_is_a_value_error_never_evaluated(text):
    with pytest.raises(ValueError, match="bad size expression"):
        parse_expr(text)


def test_types_name_each_dynamic_dim():
    t = shaped(f32, [2, SEQ, 64])
    assert str(t) == 'tensor<2x?x64xf32, ["seq"]>'
    assert dims_of(t) == (2, SEQ, 64)
    m = shaped_memref(f32, [12 * SEQ, B])
    assert str(m) == 'memref<?x?xf32, ["12*seq", "b"]>'
    assert dims_of(m) == (12 * SEQ, B)
    assert shaped(f32, [2, 3]) == shaped(f32, [2, 3]) and shaped(f32, [SEQ]) != shaped(f32, [B])
    assert str(shaped(f32, [SEQ - SEQ + 3])) == "tensor<3xf32>"  # a constant expression is a static dim


def test_sizes_at_values_and_at_the_maximum():
    dims = (2, SEQ, 2 * SEQ + 1)
    assert evaluate(dims, {"seq": 5}) == (2, 5, 11)
    assert upper_bound(dims, {"seq": (1, 512)}) == (2, 512, 1025)
    with pytest.raises(SymbolicShapeError, match="shrinks"):
        upper_bound((10 - SEQ,), {"seq": (1, 8)})
    with pytest.raises(SymbolicShapeError, match="without a value"):
        evaluate((SEQ * B,), {"seq": 3})
    assert divides(12, 12 * SEQ) and not divides(12, SEQ) and divides(4, 8)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class SelfAttention(torch.nn.Module):
    """A transformer block's attention half; its reshapes read the sequence length from x.shape."""

    def __init__(self):
        super().__init__()
        self.qkv, self.o, self.ln = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32), torch.nn.LayerNorm(32)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, 32)
        return self.ln(x + self.o(a))


def test_the_importer_names_each_size_after_its_dim_and_records_the_range():
    torch.manual_seed(0)
    graph = import_model(Mlp().eval(), (torch.randn(3, 8),), ({0: Dim("batch", min=1, max=64)},))
    text = str(graph.module)
    assert "tg.symbols = {batch = array<i64: 1, 64>}" in text
    assert 'func.func @forward(%x: tensor<?x8xf32, ["batch"]>) -> tensor<?x4xf32, ["batch"]>' in text
    assert symbols_of(graph.module) == {"batch": (1, 64)}
    verify_module(parse_module(text, "mlp.mlir"))  # the text round-trips and verifies


def test_reshapes_that_read_a_dynamic_size_take_it_from_the_result_type():
    graph = import_model(SelfAttention().eval(), (torch.randn(2, 16, 32),), {"x": {1: Dim("seq", min=1, max=512)}})
    text = str(graph.module)
    assert 'aten.view %linear {size = array<i64: 2, -9223372036854775808, 3, 4, 8>}' in text
    assert '-> tensor<2x?x3x4x8xf32, ["seq"]>' in text and '-> tensor<3x2x4x?x8xf32, ["seq"]>' in text
    verify_module(parse_module(text, "attention.mlir"))


def test_a_reshape_to_the_wrong_symbolic_size_does_not_verify():
    text = """builtin.module attributes {tg.symbols = {seq = array<i64: 1, 512>}} {
      func.func @f(%x: tensor<?x96xf32, ["seq"]>) -> tensor<?x3x32xf32, ["2*seq"]> {
        %v = aten.view %x {size = array<i64: -9223372036854775808, 3, 32>} : (tensor<?x96xf32, ["seq"]>) -> tensor<?x3x32xf32, ["2*seq"]>
        func.return %v : tensor<?x3x32xf32, ["2*seq"]>
      }
    }"""
    with pytest.raises(Exception, match=r"cannot view 96\*seq elements as \[2\*seq, 3, 32\]"):
        verify_module(parse_module(text, "bad.mlir"))


def test_dim_names_come_from_the_spec_by_position_or_by_argument_name():
    seq, batch = Dim("seq", max=512), Dim("batch", max=8)
    assert dim_names_of(SelfAttention(), {"x": {0: batch, 1: seq}}) == {(0, 0): "batch", (0, 1): "seq"}
    assert dim_names_of(SelfAttention(), ((batch, seq, None),)) == {(0, 0): "batch", (0, 1): "seq"}
    assert dim_names_of(SelfAttention(), None) == {}


def test_a_program_exported_elsewhere_gets_s0_s1_and_one_dim_shared_by_two_inputs_one_symbol():
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    n = Dim("n", max=32)
    ep = torch.export.export(Add(), (torch.randn(3, 4), torch.randn(3, 4)), dynamic_shapes=({0: n}, {0: n}))
    text = str(import_exported_program(ep).module)
    assert "tg.symbols = {s0 = array<i64: 0, 32>}" in text or "tg.symbols = {s0 = array<i64: 1, 32>}" in text
    assert '(%x: tensor<?x4xf32, ["s0"]>, %y: tensor<?x4xf32, ["s0"]>)' in text


def test_a_dim_without_a_maximum_is_refused_naming_the_input():
    with pytest.raises(UnsupportedOpsError, match=r"(?s)dynamic dim batch at input 'x' dim 0 \(size 3 in the example\)\n"
                       r".*has no maximum.*torch\.export\.Dim\('batch', min=1, max=\.\.\.\)"):
        import_model(Mlp().eval(), (torch.randn(3, 8),), ({0: Dim("batch")},))


def test_a_dynamic_size_used_as_a_number_is_refused_with_its_line():
    class Scaled(torch.nn.Module):
        def forward(self, x):
            return x * x.shape[1]

    with pytest.raises(UnsupportedOpsError, match=r"(?s)aten::mul.* at .*test_symbolic_shapes\.py:\d+ .*is the dynamic size n"):
        import_model(Scaled(), (torch.randn(3, 8),), ({1: Dim("n", max=64)},))


def test_export_keeps_the_symbols_and_load_compiles_them(tmp_path):
    spec = ({0: Dim("batch", min=1, max=64)},)
    torch.manual_seed(0)
    model = Mlp().eval()
    tg.export(model, (torch.randn(3, 8),), tmp_path / "mlp.mlir", dynamic_shapes=spec)
    text = (tmp_path / "mlp.mlir").read_text()
    assert "tg.symbols = {batch = array<i64: 1, 64>}" in text and '["batch"]' in text
    fn = tg.load(tmp_path / "mlp.mlir")
    for n in (1, 5, 64):
        x = torch.randn(n, 8)
        torch.testing.assert_close(fn(x), model(x).detach(), rtol=1e-6, atol=1e-6)  # observed <= 3e-7


def test_the_tuner_takes_static_sizes_only():
    with pytest.raises(SymbolicShapeError, match=r"dynamic sizes \(batch in \[1, 64\]\); the tuner \(tune=\.\.\.\) takes static sizes only"):
        tg.compile(Mlp().eval(), (torch.randn(3, 8),), dynamic_shapes=({0: Dim("batch", min=1, max=64)},), tune="missing",
                   tuning_db=":memory:")


def test_sympy_symbols_are_positive_integers():
    assert SEQ.is_integer and SEQ.is_positive and symbol("seq") == SEQ
    assert sympy.floor(2 * SEQ / 2) == SEQ
