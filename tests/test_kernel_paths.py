"""Kernel paths (`tensor_graphs.tuning.paths`): the variants each op of a graph could run by,
and pinning one with ``tg.kernel`` (`convert-tensor-to-buffer` honours it, or says why not).
Pinned paths are checked against PyTorch at 1e-5 (outputs of magnitude ~1)."""

from __future__ import annotations

import pytest
import torch

from tensor_graphs.api import compile_module
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.tuning.paths import kernel_paths, pin


def _tg_module(model: torch.nn.Module, *args: torch.Tensor):
    graph = import_model(model, args)
    from xdsl.context import Context

    build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
    return graph


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_paths_list_the_choices():
    torch.manual_seed(0)
    graph = _tg_module(Mlp().eval(), torch.randn(8, 32))
    paths = list(kernel_paths(graph.module))
    matmuls = [p for p in paths if p.name == "tg.matmul"]
    assert len(matmuls) == 2
    for p in matmuls:
        assert p.chosen == "matmul.packed" and {"matmul.packed", "matmul.blas"} <= set(p.applicable)
        assert dict(p.rejected)["matmul.packed_rhs"] == "the lhs is not a 2-D weight"
    without_packing = [p for p in kernel_paths(graph.module, pack_weights=False) if p.name == "tg.matmul"]
    assert without_packing == [], "without packing, BLAS is the only path of a GEMM by a weight"


@pytest.mark.parametrize("variant", ["matmul.packed", "matmul.blas"])
def test_a_pinned_variant_runs(variant):
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(8, 32)
    graph = _tg_module(model, x)
    for p in kernel_paths(graph.module):
        if p.name == "tg.matmul":
            pin(p.op, variant)
    assert f'tg.kernel = "{variant}"' in str(graph.module)
    fn = compile_module(graph.module, graph.weights, keep_ir=True)
    buf_ir = fn.ir("buf")
    assert buf_ir.count("buf.packed_matmul" if variant == "matmul.packed" else "buf.matmul ") == 2, buf_ir
    with torch.no_grad():
        assert (fn(x) - model(x)).abs().max().item() <= 1e-5


def test_a_pin_that_cannot_run_says_why():
    torch.manual_seed(0)
    graph = _tg_module(Mlp().eval(), torch.randn(8, 32))
    matmul = next(p.op for p in kernel_paths(graph.module) if p.name == "tg.matmul")
    for variant, message in (
        ("matmul.nope", "not one of its variants: matmul.packed, matmul.packed_rhs, matmul.bf16_operands, matmul.bf16_operands_rhs, matmul.blas"),
        ("matmul.packed_rhs", "which cannot run it: the lhs is not a 2-D weight"),
    ):
        pin(matmul, variant)
        with pytest.raises(Exception, match=message):
            compile_module(graph.module.clone(), graph.weights)
    pin(matmul, "matmul.packed")
    with pytest.raises(Exception, match="pack-weights=false rules it out"):
        compile_module(graph.module.clone(), graph.weights, pack_weights=False)
