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

#: the run-time scalars a kernel may read (`Launch.scalars`), by name -> their slot in the graph's
#: ``dims`` buffer (int64 on the device, as the CPU graph's ``dims``): ``past``, the number of
#: tokens a KV cache held before this call. A kernel that reads one takes ``dims`` after its
#: buffers and loads it (``past = tl.load(dims + 0)``): every launch argument is then a fixed
#: address, so the whole plan can be captured once as a CUDA graph and replayed.
SCALARS = {"past": 0}
#: The run-time checks (an index out of range...) write flags into ``dims`` after the scalars:
#: check ``k`` (`TritonProgram.checks`) sets ``dims[CHECKS_START + k]`` to 1 when it fails (a
#: kernel never reads or writes outside a buffer: the failing elements are masked off), and the
#: runtime reads the flags once the plan has run and raises the check's message (the status the
#: CPU graph returns), then clears them.
CHECKS_START = len(SCALARS)

#: elements per program of an elementwise kernel
ELEMENTWISE_BLOCK = 1024
#: the widest row (a power of two) a row kernel (softmax, norms) loads at once; wider rows loop
MAX_ROW_BLOCK = 4096


@dataclass(frozen=True)
class Launch:
    """One kernel launch of the plan: ``kernel[grid](*buffers[, dims])`` (block sizes are constants
    of the source; ``dims`` when it reads ``scalars``)."""

    kernel: str
    grid: tuple[int, ...]
    buffers: tuple[SSAValue, ...]
    scalars: tuple[str, ...] = ()
    #: whether it writes check flags into ``dims`` (`CHECKS_START`)
    checks: bool = False
    #: positions in ``buffers`` of weights bound as bfloat16 copies (made once by the runtime)
    bf16: tuple[int, ...] = ()
    #: positions in ``buffers`` of weights bound as int8 copies, each followed among the kernel's
    #: arguments by its float32 scales per output column (made once by the runtime)
    int8: tuple[int, ...] = ()
    #: Triton's ``num_warps`` for the launch (None: Triton's default)
    warps: int | None = None
    #: float32 elements of a scratch buffer the op's launches share, passed after the buffers
    #: (0: none; the runtime allocates it once per op)
    scratch: int = 0
    #: the buf op it computes (for messages and profiles)
    op: Operation | None = None


@dataclass
class TritonProgram:
    """The kernels of one graph (Python source) and its launch plan, in order."""

    kernels: list[str] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    #: (base name, signature, body) -> the kernel's name: identical kernels emitted once
    by_body: dict = field(default_factory=dict)
    #: the run-time checks' messages (`CHECKS_START`), each once
    checks: list[str] = field(default_factory=list)

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

    def kernel(self, base: str, params: Sequence[str], body: Sequence[str], scalars: Sequence[str] = (), checks: bool = False) -> str:
        """Add ``@triton.jit def <name>(*params[, dims]): body`` and return its name; ``scalars``
        (`SCALARS`) are loaded from ``dims`` first; ``checks``: the body writes check flags
        (`flag_failures`) into ``dims``. A kernel identical to one already emitted (the same op
        at the same shapes: every layer of a transformer) is that one: one function to
        compile, launched once per op."""
        head = f"({', '.join([*params, *(['dims'] if scalars or checks else [])])}):"
        lines = [f"    {s} = tl.load(dims + {SCALARS[s]})" for s in scalars] + ["    " + line for line in body]
        key = (base, head, tuple(lines))
        if key in self.program.by_body:
            return self.program.by_body[key]
        name = f"k{self.index}_{base}"
        n = 0
        while name in self._names:
            n += 1
            name = f"k{self.index}_{base}{n}"
        self._names.add(name)
        self.program.kernels.append("\n".join(["@triton.jit", f"def {name}{head}", *lines]))
        self.program.by_body[key] = name
        return name

    def launch(self, kernel: str, grid: Sequence[int], buffers: Sequence[SSAValue], scalars: Sequence[str] = (),
               checks: bool = False, bf16: Sequence[int] = (), warps: int | None = None, int8: Sequence[int] = (),
               scratch: int = 0) -> None:
        for s in scalars:
            assert s in SCALARS, s
        if any(g > MAX_GRID_YZ for g in grid[1:]):
            raise TritonCodegenError(f"{self.op.name}: a grid of {list(grid)} programs exceeds CUDA's {MAX_GRID_YZ} along axes 1 and 2")
        self.program.launches.append(Launch(kernel, tuple(max(1, int(g)) for g in grid), tuple(buffers), tuple(scalars), checks,
                                            tuple(bf16), tuple(int8), warps, scratch, self.op))

    def check(self, message: str) -> int:
        """The ``dims`` slot of the run-time check raising ``message`` (the CPU kernel's message
        for the same check: ``index out of range`` in it makes an IndexError)."""
        if message not in self.program.checks:
            self.program.checks.append(message)
        return CHECKS_START + self.program.checks.index(message)


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
    r = f"_r{prefix}"  # one temporary per prefix: a loop's must not rebind an outer scalar's (Triton's loop-carried types)
    lines = [f"{r} = {flat}"]
    for d in range(len(dims) - 1, 0, -1):
        lines.append(f"{prefix}{d} = {r} % {dims[d]}")
        lines.append(f"{r} = {r} // {dims[d]}")
    lines.append(f"{prefix}0 = {r}")
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
    body = flat_offsets(total)
    needs_index = not plain or any(tuple(st) != contiguous(dims) or off for _, st, off in inputs)
    if needs_index:
        body += index_lines("offs", dims)
    values = []
    for k, (_, st, off) in enumerate(inputs):
        at = "offs" if tuple(st) == contiguous(dims) and not off else offset_expr(st, off)
        # one element broadcast to all (a scalar): one scalar load
        load = f"tl.load(in{k} + ({at}))" if at == str(off) else f"tl.load(in{k} + ({at}), mask=m, other=0)"
        body.append(f"v{k} = {load}{upcast(inputs[k][0])}")
        values.append(f"v{k}")
    lines, y = compute(values)
    body += lines
    at = "offs" if plain else offset_expr(st_out, out_offset)
    body.append(f"tl.store(out + ({at}), ({y}).to({element(out)}), mask=m)")
    params = [f"in{k}" for k in range(len(inputs))] + ["out"]
    kernel = ctx.kernel(name, params, body, scalars)
    ctx.launch(kernel, (-(-total // block),), [*(v for v, _, _ in inputs), out], scalars)


#: the most elements an int32 offset reaches; a kernel over more takes int64 program ids
INT32_MAX = 2**31 - 1
#: the most programs along grid axes 1 and 2 (CUDA's limit)
MAX_GRID_YZ = 65535


def program_id(axis: int, extent: int) -> str:
    """``tl.program_id(axis)``, as int64 when offsets up to ``extent`` elements overflow int32."""
    return f"tl.program_id({axis})" + (".to(tl.int64)" if extent > INT32_MAX else "")


def flat_offsets(total: int, extent: int | None = None) -> list[str]:
    """The first lines of an elementwise kernel: ``offs``, this program's `ELEMENTWISE_BLOCK`
    flat output indices, and ``m``, those below ``total`` (int64 indices when offsets reach
    past int32: up to ``extent`` elements, default ``total``)."""
    block = ELEMENTWISE_BLOCK
    return [f"offs = {program_id(0, extent if extent is not None else total)} * {block} + tl.arange(0, {block})",
            f"m = offs < {total}"]


def sum_type(el: str) -> str:
    """The type ``tl.sum``/``tl.cumsum`` of ``el`` values returns (and a loop-carried sum must
    keep): float32 for half floats, int32 for ints narrower than 32 bits, else ``el``."""
    if el in ("tl.float16", "tl.bfloat16"):
        return "tl.float32"
    if el in ("tl.int1", "tl.int8", "tl.int16", "tl.uint8", "tl.uint16"):
        return "tl.int32"
    return el


def upcast(value: SSAValue) -> str:
    """``.to(tl.float32)`` for a half-precision element (Triton's math functions take float32)."""
    return ".to(tl.float32)" if element(value) in ("tl.float16", "tl.bfloat16") else ""


def flag_failures(slot: int, failed: str, indent: str = "") -> list[str]:
    """Lines setting check flag ``slot`` of ``dims`` when any lane of the boolean block
    ``failed`` holds (a kernel taking ``checks``; `TritonContext.check`)."""
    return [f"{indent}if tl.max(({failed}).to(tl.int32)) > 0:", f"{indent}    tl.store(dims + {slot}, 1)"]


def require(condition: bool, op: Operation, message: str) -> None:
    if not condition:
        raise TritonCodegenError(f"{op.name}: {message}")
