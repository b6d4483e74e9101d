"""`convert-tensor-to-triton`: a tg graph (after fusion) -> Triton kernels and a launch plan over
one arena on the device (the GPU counterpart of `convert-tensor-to-buffer` + `plan-memory` +
`convert-buffer-to-llvm`).

The graph is lowered to buffers first, by the same passes as for a CPU
(`convert-tensor-to-buffer{pack-weights=false}`: no weight is repacked, a GEMM reads it as
stored; then `plan-memory`: every intermediate is a view of one arena at a planned offset). Each
`buf` kernel op then becomes one or more launches of a ``@triton.jit`` kernel
(`codegen.triton.kernels.REGISTRY`). The module keeps its buf function, with the plan written
on it: the kernels' Python source as the module attribute ``tg.triton_source``, and on each
kernel op its launches, ``tg.triton = [{kernel, grid, args (operand indices), scalars[, checks][, bf16][, int8]}]``
(``checks = 1``: the kernel flags failed run-time checks, whose messages are the module's
``tg.triton_checks``, in ``dims``: `kernels.CHECKS_START`; ``bf16``: the positions among the
args of weights the kernel reads as bfloat16 copies, made once by the runtime; ``int8``: of
weights read as int8 copies, each followed by its scales per output column; ``warps``:
Triton's ``num_warps`` when a tuner pinned it; ``scratch``: the float32 elements of a scratch
buffer the op's launches share, passed after the buffers)::

    buf.softmax ins(%x : memref<2x7xf32>) outs(%o : memref<2x7xf32>) {dim = 1 : i64,
        tg.triton = [{kernel = "k0_softmax", grid = array<i64: 2>, args = array<i64: 0, 1>, scalars = []}]}

`tg-opt -p convert-tensor-to-triton -t triton` prints the source; the runtime
(`runtime_support.triton_graph`) binds the arena, weights and states as device tensors once and
replays the launches.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, DictionaryAttr, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

# the emitters register themselves
from tensor_graphs.codegen.triton import kernels_attention, kernels_elementwise, kernels_matmul, kernels_model, kernels_moe, kernels_rows  # noqa: F401
from tensor_graphs.codegen.triton.expressions import TritonCodegenError
from tensor_graphs.codegen.triton.kernels import CHECKS_START, REGISTRY, TritonContext, TritonProgram
from tensor_graphs.dialects import buffer as buf

#: the module attribute holding the kernels' Python source
SOURCE_ATTR = "tg.triton_source"
#: a kernel op's launches
LAUNCHES_ATTR = "tg.triton"
#: the module attribute listing the run-time checks' messages, by flag (`kernels.CHECKS_START`)
CHECKS_ATTR = "tg.triton_checks"
#: what runs first on a tg module: the buffer lowering without packed weights, the planner
BUFFER_PASSES = ("convert-tensor-to-buffer{pack-weights=false threads=1}", "plan-memory")


def lower(module: ModuleOp) -> TritonProgram:
    """The Triton program of a planned buf ``module`` (every kernel op's launches, in order)."""
    program = TritonProgram()
    index = 0
    for fn in (o for o in module.ops if isinstance(o, func.FuncOp)):
        for op in fn.body.walk():
            if not isinstance(op, buf.KernelOp):
                continue
            emit = REGISTRY.get(type(op))
            if emit is None:
                known = ", ".join(sorted(c.name for c in REGISTRY))
                raise TritonCodegenError(f"@{fn.sym_name.data}: no Triton kernel for '{op.name}' yet (the GPU path runs: {known})")
            emit(TritonContext(program, op, index), op)
            index += 1
    return program


def _is_tg(module: ModuleOp) -> bool:
    return any(op.name.startswith("tg.") for op in module.walk())


@dataclass(frozen=True)
class ConvertTensorToTritonPass(ModulePass):
    """tg (after fusion) or planned buf -> the buf graph annotated with Triton kernels and launches."""

    name = "convert-tensor-to-triton"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from tensor_graphs.passes import build_pipeline

        if _is_tg(op):
            build_pipeline(BUFFER_PASSES).apply(ctx, op)
        try:
            program = lower(op)
        except TritonCodegenError as e:
            raise PassFailedException(f"{self.name}: {e}") from None
        for launch in program.launches:
            assert launch.op is not None
            operands = list(launch.op.operands)
            fields = {
                "kernel": StringAttr(launch.kernel),
                "grid": DenseArrayBase.from_list(i64, list(launch.grid)),
                "args": DenseArrayBase.from_list(i64, [operands.index(v) for v in launch.buffers]),
                "scalars": ArrayAttr([StringAttr(s) for s in launch.scalars]),
            }
            if launch.checks:
                fields["checks"] = IntegerAttr(1, i64)
            if launch.bf16:
                fields["bf16"] = DenseArrayBase.from_list(i64, list(launch.bf16))
            if launch.int8:
                fields["int8"] = DenseArrayBase.from_list(i64, list(launch.int8))
            if launch.warps is not None:
                fields["warps"] = IntegerAttr(launch.warps, i64)
            if launch.scratch:
                fields["scratch"] = IntegerAttr(launch.scratch, i64)
            entry = DictionaryAttr(fields)
            previous = launch.op.attributes.get(LAUNCHES_ATTR)
            launch.op.attributes[LAUNCHES_ATTR] = ArrayAttr([*(previous.data if isinstance(previous, ArrayAttr) else ()), entry])
        op.attributes[SOURCE_ATTR] = StringAttr(program.source)
        if program.checks:
            op.attributes[CHECKS_ATTR] = ArrayAttr([StringAttr(m) for m in program.checks])


def program_text(module: ModuleOp) -> str:
    """The kernels' source of a lowered ``module``, then its launch plan as comments (what
    `tg-opt -t triton` prints and ``fn.ir("triton")`` returns)."""
    source = module.attributes.get(SOURCE_ATTR)
    if not isinstance(source, StringAttr):
        raise TritonCodegenError("the module has no Triton kernels (run convert-tensor-to-triton first)")
    lines = [source.data, "# launch plan:"]
    checks = module.attributes.get(CHECKS_ATTR)
    if isinstance(checks, ArrayAttr):
        lines[1:1] = ["# run-time checks (their flags in dims from slot " + str(CHECKS_START) + "):",
                      *(f"#   {CHECKS_START + k}: {m.data}" for k, m in enumerate(checks.data))]  # type: ignore[attr-defined]
    for op in module.walk():
        launches = op.attributes.get(LAUNCHES_ATTR)
        for entry in launches.data if isinstance(launches, ArrayAttr) else ():
            assert isinstance(entry, DictionaryAttr)
            d = entry.data
            grid = tuple(d["grid"].get_values())  # type: ignore[attr-defined]
            scalars = [x.data for x in d["scalars"].data] + (["checks"] if "checks" in d else [])  # type: ignore[attr-defined]
            if "warps" in d:
                scalars.append(f"num_warps={d['warps'].value.data}")  # type: ignore[attr-defined]
            if "scratch" in d:
                scalars.append(f"scratch={d['scratch'].value.data}")  # type: ignore[attr-defined]
            lines.append(f"#   {d['kernel'].data}[{grid}]({op.name}{', ' + ', '.join(scalars) if scalars else ''})")  # type: ignore[attr-defined]
    return "\n".join(lines) + "\n"
