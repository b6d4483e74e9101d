"""The memory planner: the pure best-fit planner (property tests) and `plan-memory` on a lowered MLP."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.context import make_context
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.lowering.tensor_to_buffer.convert import ConvertTensorToBufferPass
from tensor_graphs.transforms.plan_memory import Interval, PlanMemoryPass, align, lifetimes, plan, plan_module

ALIGN = buf.ALIGNMENT


@st.composite
def intervals(draw):
    n = draw(st.integers(0, 24))
    out = []
    for _ in range(n):
        start = draw(st.integers(0, 30))
        out.append(Interval(start, start + draw(st.integers(0, 10)), draw(st.integers(0, 5000))))
    return out


@settings(max_examples=300, deadline=None)
@given(intervals())
def test_planner_never_overlaps_live_buffers(its):
    offsets, arena = plan(its)
    assert len(offsets) == len(its)
    assert arena % ALIGN == 0
    assert arena <= sum(align(it.size) for it in its)
    for i, (a, oa) in enumerate(zip(its, offsets)):
        assert oa % ALIGN == 0
        assert 0 <= oa and oa + a.size <= arena
        for b, ob in zip(its[i + 1 :], offsets[i + 1 :]):
            if a.overlaps(b) and a.size and b.size:
                assert oa + a.size <= ob or ob + b.size <= oa, (a, oa, b, ob)


@settings(max_examples=100, deadline=None)
@given(intervals())
def test_planner_needs_at_least_the_peak_live_bytes(its):
    _, arena = plan(its)
    peak = max((sum(align(it.size) for it in its if it.start <= t <= it.end) for t in range(41)), default=0)
    assert arena >= peak


def test_planner_reuses_dead_buffers():
    chain = [Interval(i, i + 1, 256) for i in range(6)]  # each read by the next op only
    offsets, arena = plan(chain)
    assert arena == 512
    assert offsets[0] == offsets[2] == offsets[4] != offsets[1]


def test_planner_with_nothing_to_place():
    assert plan([]) == ([], 0)
    assert plan([Interval(0, 3, 0)]) == ([0], 0)


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


MLP = """
func.func @mlp(%x: tensor<8x64xf32>) -> tensor<8x10xf32> {
  %w1 = tg.weight "fc1.weight" : tensor<256x64xf32>
  %b1 = tg.weight "fc1.bias" : tensor<256xf32>
  %w2 = tg.weight "fc2.weight" : tensor<256x256xf32>
  %b2 = tg.weight "fc2.bias" : tensor<256xf32>
  %w3 = tg.weight "fc3.weight" : tensor<128x256xf32>
  %b3 = tg.weight "fc3.bias" : tensor<128xf32>
  %w4 = tg.weight "fc4.weight" : tensor<10x128xf32>
  %b4 = tg.weight "fc4.bias" : tensor<10xf32>
  %y1 = tg.matmul %x, %w1 {transpose_b = true} : (tensor<8x64xf32>, tensor<256x64xf32>) -> tensor<8x256xf32>
  %h1 = tg.bias_activation %y1, %b1 {activation = "relu"} : (tensor<8x256xf32>, tensor<256xf32>) -> tensor<8x256xf32>
  %y2 = tg.matmul %h1, %w2 {transpose_b = true} : (tensor<8x256xf32>, tensor<256x256xf32>) -> tensor<8x256xf32>
  %h2 = tg.bias_activation %y2, %b2 {activation = "relu"} : (tensor<8x256xf32>, tensor<256xf32>) -> tensor<8x256xf32>
  %y3 = tg.matmul %h2, %w3 {transpose_b = true} : (tensor<8x256xf32>, tensor<128x256xf32>) -> tensor<8x128xf32>
  %h3 = tg.bias_activation %y3, %b3 {activation = "relu"} : (tensor<8x128xf32>, tensor<128xf32>) -> tensor<8x128xf32>
  %y4 = tg.matmul %h3, %w4, %b4 {transpose_b = true, beta = 1.0 : f32} : (tensor<8x128xf32>, tensor<10x128xf32>, tensor<10xf32>) -> tensor<8x10xf32>
  func.return %y4 : tensor<8x10xf32>
}
"""


def lowered_mlp() -> ModuleOp:
    module = parse(MLP)
    ConvertTensorToBufferPass().apply(make_context(), module)
    module.verify()
    return module


def test_mlp_buffers_share_the_arena_and_the_output_is_written_in_place():
    module = lowered_mlp()
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    allocs, its = lifetimes(fn.body.block)
    assert len(allocs) == 6  # y1 h1 y2 h2 y3 h3; y4 is the output argument
    [p] = plan_module(module)
    module.verify()

    total = module.attributes["tg.intermediate_bytes"].value.data
    arena = module.attributes["tg.arena_size"].value.data
    assert total == sum(it.size for it in its) == 8 * 4 * (256 * 4 + 128 * 2)
    assert arena == p.arena_size < total
    assert arena == 2 * 8 * 256 * 4  # never more than two layers' activations live at once

    ops = list(fn.body.block.ops)
    assert not any(isinstance(op, (buf.AllocOp, buf.CopyOp)) for op in ops)
    [arena_op] = [op for op in ops if isinstance(op, buf.ArenaOp)]
    assert ops[0] is arena_op and arena_op.size == arena
    last = [op for op in ops if isinstance(op, buf.KernelOp)][-1]
    assert isinstance(last, buf.MatmulOp) and last.output is fn.body.block.args[-1]
    for i, (a, oa) in enumerate(zip(p.intervals, p.offsets)):
        for b, ob in zip(p.intervals[i + 1 :], p.offsets[i + 1 :]):
            if a.overlaps(b):
                assert oa + a.size <= ob or ob + b.size <= oa


def test_plan_memory_is_idempotent():
    module = lowered_mlp()
    PlanMemoryPass().apply(make_context(), module)
    once = str(module)
    PlanMemoryPass().apply(make_context(), module)
    assert str(module) == once


def test_reshape_alias_keeps_its_root_alive():
    module = parse(
        """
func.func @f(%x: memref<4x4xf32>, %out0: memref<16xf32>) attributes {tg.num_outputs = 1 : i64} {
  %a = buf.alloc : memref<4x4xf32>
  buf.relu ins(%x : memref<4x4xf32>) outs(%a : memref<4x4xf32>)
  %r = buf.reshape %a : memref<4x4xf32> -> memref<16xf32>
  %b = buf.alloc : memref<16xf32>
  buf.relu ins(%r : memref<16xf32>) outs(%b : memref<16xf32>)
  buf.add ins(%r, %b : memref<16xf32>, memref<16xf32>) outs(%out0 : memref<16xf32>)
  func.return
}
"""
    )
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    _, its = lifetimes(fn.body.block)
    # ops: 0 alloc a, 1 relu (writes a), 2 reshape, 3 alloc b, 4 relu (reads a via %r), 5 add (reads a via %r)
    assert its == [Interval(1, 5, 64), Interval(4, 5, 64)]


def test_tensor_level_function_is_rejected():
    module = parse(MLP)
    with pytest.raises(PassFailedException, match=r"plan-memory: in @mlp: 'tg.weight' is not at the buf level"):
        PlanMemoryPass().apply(make_context(), module)
