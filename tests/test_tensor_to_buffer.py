"""`convert-tensor-to-buffer` and its registry of kernel paths."""

import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.context import make_context
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects import tensor as tg
from tensor_graphs.lowering.tensor_to_buffer.convert import ConvertTensorToBufferPass
from tensor_graphs.lowering.tensor_to_buffer.kernels import (
    KERNELS,
    KernelVariant,
    NoKernelError,
    applicable_kernels,
    register_kernel,
    select_kernel,
)

RELU = """
func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = tg.relu %x : tensor<2x3xf32>
  func.return %r : tensor<2x3xf32>
}
"""


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def lower(text: str) -> ModuleOp:
    module = parse(text)
    ConvertTensorToBufferPass().apply(make_context(), module)
    module.verify()
    return module


def first(module: ModuleOp, cls):
    return next(op for op in module.walk() if isinstance(op, cls))


@pytest.fixture
def registry(monkeypatch):
    """Let a test change the registry; every list is restored afterwards."""
    for cls, variants in list(KERNELS.items()):
        monkeypatch.setitem(KERNELS, cls, list(variants))
    return KERNELS


def test_every_primitive_tg_op_has_a_kernel():
    for cls in (tg.MatmulOp, tg.AddOp, tg.SubOp, tg.MulOp, tg.DivOp, tg.ReluOp, tg.TransposeOp, tg.BiasActivationOp):
        assert KERNELS.get(cls), cls.name


def test_first_applicable_variant_wins(registry):
    relu = first(parse(RELU), tg.ReluOp)
    never = KernelVariant("relu.never", build=lambda op, ins, out: buf.ReluOp(ins, [out]), applies=lambda op: "not today")
    register_kernel(tg.ReluOp, never, prefer=True)
    assert [v.name for v in registry[tg.ReluOp]] == ["relu.never", "relu.loop"]
    assert [v.name for v in applicable_kernels(relu)] == ["relu.loop"]
    assert select_kernel(relu).name == "relu.loop"


def test_a_chooser_picks_among_applicable_variants(registry):
    """The door a tuner goes through: it sees every applicable path and picks one."""
    copy = KernelVariant("relu.as_copy", build=lambda op, ins, out: buf.CopyOp(ins, [out]))
    register_kernel(tg.ReluOp, copy)
    relu = first(parse(RELU), tg.ReluOp)
    assert select_kernel(relu, choose=lambda op, vs: vs[-1]) is copy


def test_preferred_variant_is_used_by_the_lowering(registry):
    register_kernel(tg.ReluOp, KernelVariant("relu.as_copy", build=lambda op, ins, out: buf.CopyOp(ins, [out])), prefer=True)
    module = lower(RELU)
    assert isinstance(first(module, buf.KernelOp), buf.CopyOp)


def test_no_applicable_variant_names_the_op_and_every_reason(registry):
    registry[tg.ReluOp] = [
        KernelVariant("relu.avx512", build=lambda op, ins, out: buf.ReluOp(ins, [out]), applies=lambda op: "no AVX-512"),
        KernelVariant("relu.gpu", build=lambda op, ins, out: buf.ReluOp(ins, [out]), applies=lambda op: "no GPU"),
    ]
    relu = first(parse(RELU), tg.ReluOp)
    with pytest.raises(NoKernelError, match=r"no buf kernel can run this 'tg.relu': relu.avx512: no AVX-512; relu.gpu: no GPU"):
        select_kernel(relu)
    with pytest.raises(PassFailedException, match=r"convert-tensor-to-buffer: in @f: no buf kernel can run this 'tg.relu'"):
        ConvertTensorToBufferPass().apply(make_context(), parse(RELU))


def test_op_without_variants_is_a_clear_error(registry):
    del registry[tg.ReluOp]
    with pytest.raises(PassFailedException, match=r"no buf kernel is registered for 'tg.relu'.*register_kernel"):
        ConvertTensorToBufferPass().apply(make_context(), parse(RELU))


def test_register_replaces_a_variant_of_the_same_name(registry):
    n = len(registry[tg.ReluOp])
    register_kernel(tg.ReluOp, KernelVariant("relu.loop", build=lambda op, ins, out: buf.CopyOp(ins, [out])))
    assert len(registry[tg.ReluOp]) == n


def test_signature_becomes_destination_passing():
    module = lower(
        """
func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3x2xf32>) {
  %s = tg.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %t = tg.transpose %s {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %s, %t : tensor<2x3xf32>, tensor<3x2xf32>
}
"""
    )
    fn = first(module, func.FuncOp)
    assert fn.attributes["tg.num_outputs"].value.data == 2
    assert [str(t) for t in fn.function_type.inputs] == [
        "memref<2x3xf32>",
        "memref<3xf32>",
        "memref<2x3xf32>",
        "memref<3x2xf32>",
    ]
    assert list(fn.function_type.outputs) == []
    assert [a.name_hint for a in fn.body.block.args] == ["x", "y", "out0", "out1"]
    kinds = [type(op) for op in fn.body.block.ops]
    assert kinds == [buf.AddOp, buf.TransposeOp, func.ReturnOp]  # both outputs in place, no alloc, no copy
    assert not first(module, func.ReturnOp).operands


def test_lowering_an_already_lowered_module_changes_nothing():
    module = lower(RELU)
    text = str(module)
    ConvertTensorToBufferPass().apply(make_context(), module)
    assert str(module) == text

