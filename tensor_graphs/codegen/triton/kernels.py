"""The Triton kernel emitters' registry and shared pieces (`convert-tensor-to-triton`).

Each `buf` kernel op of a planned graph becomes one or more launches of a ``@triton.jit`` kernel
emitted as Python source (the GPU counterpart of `codegen.llvm.kernels`). Shapes are static,
so they are written into the source as constants; strides too (every buffer is contiguous, a
view of the arena, a weight or a graph argument). An emitter is registered per buf op class in
:data:`REGISTRY` and writes through a :class:`TritonContext`::

    def emit_softmax(ctx: TritonContext, op: buf.SoftmaxOp) -> None:
        name = ctx.kernel("softmax", ["x", "out"], body_lines)
        ctx.launch(name, grid=(rows,), args=[op.inputs[0], op.output])

The module's kernels are one Python file (`TritonProgram.source`): the prelude
(`expressions.PRELUDE`), then the kernels in program order; the launch plan is the list of
:class:`Launch` (kernel, grid, buffer arguments, run-time scalars).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.triton.expressions import PRELUDE, TritonCodegenError, dtype

#: the run-time scalars a kernel may take after its buffers (`Launch.scalars`): ``past``, the
#: number of tokens a KV cache held before this call (the CPU graph's ``dims[0]``)
SCALARS = ("past",)

#: elements per program of an elementwise kernel
ELEMENTWISE_BLOCK = 1024
#: the widest row (a power of two) a row kernel (softmax, norms) loads at once; wider rows loop
MAX_ROW_BLOCK = 4096


@dataclass(frozen=True)
class Launch:
    """One kernel launch of the plan: ``kernel[grid](*buffers, *scalars, **constexprs)``."""

    kernel: str
    grid: tuple[int, ...]
    buffers: tuple[SSAValue, ...]
    scalars: tuple[str, ...] = ()
    #: the buf op it computes (for messages and profiles)
    op: Operation | None = None


@dataclass
class TritonProgram:
    """The kernels of one graph (Python source) and its launch plan, in order."""

    kernels: list[str] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)

    @property
    def source(self) -> str:
        header = '"""Triton kernels emitted by tensor_graphs (convert-tensor-to-triton)."""\nimport triton\nimport triton.language as tl\n'
        return header + PRELUDE + "\n\n" + "\n\n".join(self.kernels) + "\n"


class TritonContext:
    """What an emitter writes into: kernels (unique names) and launches."""

    def __init__(self, program: TritonProgram, op: Operation, index: int):
        self.program = program
        self.op = op
        self.index = index
        self._names: set[str] = set()

    def kernel(self, base: str, params: Sequence[str], body: Sequence[str], scalars: Sequence[str] = ()) -> str:
        """Add ``@triton.jit def <name>(*params, *scalars): body`` and return its name."""
        name = f"k{self.index}_{base}"
        n = 0
        while name in self._names:
            n += 1
            name = f"k{self.index}_{base}{n}"
        self._names.add(name)
        lines = ["@triton.jit", f"def {name}({', '.join([*params, *scalars])}):"]
        lines += ["    " + line for line in body]
        self.program.kernels.append("\n".join(lines))
        return name

    def launch(self, kernel: str, grid: Sequence[int], buffers: Sequence[SSAValue], scalars: Sequence[str] = ()) -> None:
        for s in scalars:
            assert s in SCALARS, s
        self.program.launches.append(Launch(kernel, tuple(max(1, int(g)) for g in grid), tuple(buffers), tuple(scalars), self.op))


Emitter = Callable[[TritonContext, Operation], None]
#: buf kernel op class -> its emitter
REGISTRY: dict[type[Operation], Emitter] = {}


def register(*classes: type[Operation]) -> Callable[[Emitter], Emitter]:
    def add(fn: Emitter) -> Emitter:
        for cls in classes:
            REGISTRY[cls] = fn
        return fn

    return add


# --------------------------------------------------------------------------- helpers


def shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


def element(value: SSAValue) -> str:
    return dtype(value.type.element_type)  # type: ignore[attr-defined]


def numel(dims: Sequence[int]) -> int:
    return math.prod(dims)


def contiguous(dims: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def broadcast(src: Sequence[int], dst: Sequence[int]) -> tuple[int, ...]:
    """Strides reading a contiguous ``src`` broadcast (NumPy rules) to ``dst``."""
    st = contiguous(src)
    lead = len(dst) - len(src)
    if lead < 0:
        raise TritonCodegenError(f"{list(src)} does not broadcast to {list(dst)}")
    out = [0] * lead
    for d, (s, stride) in enumerate(zip(src, st)):
        if s not in (1, dst[lead + d]):
            raise TritonCodegenError(f"{list(src)} does not broadcast to {list(dst)}")
        out.append(0 if s == 1 and dst[lead + d] != 1 else stride)
    return tuple(out)


def pow2(n: int) -> int:
    return 1 << max(0, (max(1, n) - 1).bit_length())


def index_lines(flat: str, dims: Sequence[int], prefix: str = "i") -> list[str]:
    """Statements splitting the flat index expression ``flat`` into ``<prefix><d>`` per dim."""
    if not dims:
        return []
    lines = [f"_r = {flat}"]
    for d in range(len(dims) - 1, 0, -1):
        lines.append(f"{prefix}{d} = _r % {dims[d]}")
        lines.append(f"_r = _r // {dims[d]}")
    lines.append(f"{prefix}0 = _r")
    return lines


def offset_expr(strides: Sequence[int], offset: int | str = 0, prefix: str = "i") -> str:
    """``offset + sum(i<d> * strides[d])`` over the dims whose stride is not 0."""
    terms = [f"{prefix}{d} * {s}" if s != 1 else f"{prefix}{d}" for d, s in enumerate(strides) if s]
    if offset not in (0, "0"):
        terms.append(str(offset))
    return " + ".join(terms) if terms else "0"


def elementwise(ctx: TritonContext, name: str, out: SSAValue, inputs: Sequence[tuple[SSAValue, Sequence[int], int]],
                compute: Callable[[list[str]], tuple[list[str], str]], out_strides: Sequence[int] | None = None,
                out_offset: int = 0, dims: Sequence[int] | None = None, scalars: Sequence[str] = ()) -> None:
    """One launch computing ``out[index] = compute(in_k[offset_k + index . strides_k])`` over
    ``dims`` (default: the output's shape; ``out_strides``/``out_offset`` place it in ``out``)."""
    dims = tuple(dims if dims is not None else shape(out))
    total = numel(dims)
    if total == 0:
        return
    st_out = tuple(out_strides if out_strides is not None else contiguous(dims))
    plain = st_out == contiguous(dims) and out_offset == 0
    block = ELEMENTWISE_BLOCK
    body = [f"offs = tl.program_id(0) * {block} + tl.arange(0, {block})", f"m = offs < {total}"]
    needs_index = not plain or any(tuple(st) != contiguous(dims) or off for _, st, off in inputs)
    if needs_index:
        body += index_lines("offs", dims)
    values = []
    for k, (_, st, off) in enumerate(inputs):
        at = "offs" if tuple(st) == contiguous(dims) and not off else offset_expr(st, off)
        # one element broadcast to all (a scalar): one scalar load
        body.append(f"v{k} = tl.load(in{k} + ({at}))" if at == str(off) else f"v{k} = tl.load(in{k} + ({at}), mask=m, other=0)")
        values.append(f"v{k}")
    lines, y = compute(values)
    body += lines
    at = "offs" if plain else offset_expr(st_out, out_offset)
    body.append(f"tl.store(out + ({at}), ({y}).to({element(out)}), mask=m)")
    params = [f"in{k}" for k in range(len(inputs))] + ["out"]
    kernel = ctx.kernel(name, params, body, scalars)
    ctx.launch(kernel, (-(-total // block),), [*(v for v, _, _ in inputs), out], scalars)


def require(condition: bool, op: Operation, message: str) -> None:
    if not condition:
        raise TritonCodegenError(f"{op.name}: {message}")
