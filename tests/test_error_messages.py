"""Every message names the user's problem, where it is, and what to do.

What the frontend cannot compile (ops with no translation, control flow, dynamic dims, masks and
comparisons on run-time data) is reported in ONE `UnsupportedOpsError` that lists every case with
its module path and source line; a run-time index error names the embedding the model wrote, the
bad id and the valid range.
"""

import numpy as np
import pytest
import torch
from torch.export import Dim
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException

import tensor_graphs as tg
from tensor_graphs.context import make_context
from tensor_graphs.frontend import UnsupportedOpsError, import_exported_program, import_model
from tensor_graphs.lowering.aten_to_tensor.convert import AtenConversionError, ConvertAtenToTensorPass
from tensor_graphs.lowering.tensor_to_buffer.convert import ConvertTensorToBufferPass
from tensor_graphs.transforms.constant_fold import ConstantFoldPass

#: the source line of a node: the file (any directory), its line, the function
HERE = r"\S*test_error_messages\.py:\d+ in forward"


class Branchy(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))


class Loop(torch.nn.Module):
    def forward(self, x):
        return torch._higher_order_ops.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2), (torch.tensor(0), x))[1]


class Scalar(torch.nn.Module):
    def forward(self, x):
        return x * x.sum().item()


class I1(torch.nn.Module):
    def forward(self, x):
        return torch.special.i1(x)


class Everything(torch.nn.Module):
    """Control flow, a value read out of a tensor and an op with no translation, in submodules."""

    def __init__(self):
        super().__init__()
        self.gate = Branchy()
        self.scalar = Scalar()
        self.act = I1()

    def forward(self, x):
        return self.act(self.scalar(self.gate(x)))


def test_torch_cond_is_control_flow_with_what_to_do():
    with pytest.raises(UnsupportedOpsError, match=rf"(?s)1 unsupported construct:\n  torch\.cond at {HERE}: return torch\.cond\(.*"
                       r"control flow: tensor_graphs compiles straight-line graphs only; compile each branch as its own model"):
        tg.compile(Branchy(), (torch.randn(4),))


def test_while_loop_is_control_flow_with_what_to_do():
    with pytest.raises(UnsupportedOpsError, match=rf"(?s)torch\._higher_order_ops\.while_loop at {HERE}.*"
                       r"control flow: .*unroll the loop a fixed number of times in forward"):
        import_model(Loop(), (torch.randn(4),))


class Flatten(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 1024)

    def forward(self, x):
        return self.fc(x).reshape(x.shape[0], 2, 512).sum(1)


def test_dynamic_dim_without_a_maximum_names_the_input_and_says_to_give_one():
    ep = torch.export.export(Flatten(), (torch.randn(3, 16),), dynamic_shapes=({0: Dim.DYNAMIC},))
    with pytest.raises(UnsupportedOpsError, match=r"(?s)1 unsupported construct:\n  dynamic dim s0 at input 'x' dim 0 \(size 3 in the "
                       r"example\)\n.*has no maximum.*give it one: torch\.export\.Dim\('s0', min=1, max=\.\.\.\)"):
        import_exported_program(ep)


def test_dynamic_dim_and_unsupported_ops_are_listed_together():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.special.i1(x.reshape(x.shape[0] * 4, -1))

    ep = torch.export.export(M(), (torch.randn(3, 8),), dynamic_shapes=({0: Dim.DYNAMIC},))
    with pytest.raises(UnsupportedOpsError) as info:
        import_exported_program(ep)
    targets = [t for t, _ in info.value.ops]
    assert targets == ["dynamic dim s0", "aten::special_i1"]  # the size arithmetic (a reshape's size) is not listed
    assert str(info.value).startswith("1 unsupported op and 1 unsupported construct:")


def test_one_error_lists_every_unsupported_construct_in_graph_order():
    with pytest.raises(UnsupportedOpsError) as info:
        tg.compile(Everything(), (torch.randn(4, 4),))
    err = info.value
    msg = str(err)
    assert msg.startswith("1 unsupported op and 2 unsupported constructs:"), msg
    assert [t for t, _ in err.ops] == ["torch.cond", "aten::item (.item(), int(t), float(t))", "aten::special_i1"]  # the cond's predicate is not listed apart
    for (target, where), module in zip(err.ops, ["gate (test_error_messages.Branchy)", "scalar (test_error_messages.Scalar)", "act (test_error_messages.I1)"]):
        assert where.startswith(module) and "test_error_messages.py:" in where
    assert all(e.fix for e in err.entries)  # each says what to do
    assert err.graph is not None  # the imported module, for inspection


def test_training_dropout_says_how_to_keep_inference():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.dropout(x, 0.5, training=True)

    with pytest.raises(UnsupportedOpsError, match=r"(?s)aten::dropout \(training=True\) \(float32 \[4\]\) at .*pass training=self\.training"):
        import_model(M(), (torch.randn(4),))


def test_item_is_reported_once_not_at_every_use():
    class M(torch.nn.Module):
        def forward(self, x):
            return x * x.sum().item() + 1

    with pytest.raises(UnsupportedOpsError, match=r"(?s)^1 unsupported construct:\n  aten::item .*keep the value a tensor") as info:
        import_model(M(), (torch.randn(4),))
    assert len(info.value.entries) == 1


class NextBf16(torch.nn.Module):
    def forward(self, x):
        return torch.nextafter(x, x + 1)


def test_pass_errors_stay_one_line_diagnostics_for_tg_opt():
    """An op the importer takes and its lowering refuses (nextafter of bfloat16) reaches tg-opt as
    aten IR: convert-aten-to-tensor says why, with the op's operands and source line, as a
    DiagnosticException (tg-opt prints it as one error, no traceback)."""
    module = import_model(NextBf16(), (torch.randn(4, 4).bfloat16(),)).module
    ConstantFoldPass().apply(make_context(), module)
    with pytest.raises(AtenConversionError, match=r"aten\.nextafter \(bfloat16 \[4, 4\], bfloat16 \[4, 4\]\) at .*test_error_messages\.py:\d+:\d+: aten\.nextafter of bf16") as conv:
        ConvertAtenToTensorPass().apply(make_context(), module)
    assert isinstance(conv.value, DiagnosticException)


def test_a_dynamic_dim_without_its_size_expression_says_to_name_it_or_give_a_size():
    text = """
    func.func @f(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
      %y = tg.relu %x : tensor<?x4xf32>
      func.return %y : tensor<?x4xf32>
    }"""
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(DiagnosticException, match=r"argument #0 has dynamic shape tensor<\?x4xf32> without size expressions: "
                       r"name each dynamic dim's size .* or give every dim a size \(export the model without dynamic_shapes"):
        ConvertTensorToBufferPass().apply(make_context(), module)


@pytest.fixture(scope="module")
def tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    from conftest import LogitsOnly

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64)
    model = LogitsOnly(transformers.GPT2LMHeadModel(config).eval())
    ids = torch.randint(0, 256, (1, 8))
    return model, tg.compile(model, (ids,)), ids


def test_out_of_range_token_id_names_the_embedding_the_model_wrote(tiny_gpt2):
    """torch.export keeps the tied table as lm_head.weight; the error names transformer.wte."""
    _, fn, ids = tiny_gpt2
    bad = ids.clone()
    bad[0, 3] = 300
    with pytest.raises(IndexError, match=r"^forward: embedding 'model\.transformer\.wte\.weight' \(tied to 'model\.lm_head\.weight'\): "
                       r"index out of range \[0, 256\): input 'ids' holds 300 at \[0, 3\]$"):
        fn(bad)
    # given the call's inputs, the runtime names the bad id and where it is
    sig = fn.signature
    status = next(k for k, m in enumerate(sig.errors, 1) if "wte" in m)
    message = str(sig.status_error(status, inputs=(bad,)))
    assert message == ("forward: embedding 'model.transformer.wte.weight' (tied to 'model.lm_head.weight'): "
                       "index out of range [0, 256): input 'ids' holds 300 at [0, 3]")
    bad[0, 5] = -1
    assert str(sig.status_error(status, inputs=(bad.numpy(),))).endswith("input 'ids' holds 300 at [0, 3] (1 more)")
    np.testing.assert_array_equal(fn(ids).shape, (1, 8, 256))  # still usable after the error
