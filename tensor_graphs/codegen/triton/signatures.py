"""The Triton signature of every kernel launch a lowered module holds (`convert-tensor-to-triton`'s
``tg.triton`` plans), as the runtime binds its arguments: what compiling the kernels ahead of a
launch needs (Triton's ``ASTSource``: a pointer type per argument), without a GPU or the
interpreter. Used by the sm_90 compile test (`tests/test_triton_sm90.py`) and by the static
kernel report (`benchmarks/gpu_kernels.py`).

The arguments of a launch (`runtime_support.triton_graph.TritonGraph`): the buffers it names, a
bfloat16 copy in place of a weight listed under ``bf16``, an int8 copy then its float32 scales
in place of one listed under ``int8``, a float32 scratch buffer when the op has one, and the
int64 ``dims`` last for a kernel reading run-time scalars or writing check flags::

    k3_rms_norm[(2048,)](x: memref<...xf32>, w: memref<128xf32>, out: memref<...xf32>)
        -> Launch("k3_rms_norm", ("*fp32", "*fp32", "*fp32"), warps=None, grid=(2048,), ...)

Each argument's pointer is 16-byte aligned or not as the runtime will bind it (`aligned`):
Triton's launcher compiles a kernel for the alignment of the pointers it is given, so that is
part of what is compiled. A buffer is the arena at a planned offset (a multiple of 64 bytes) or
a tensor of its own (an input, output, weight, constant, state, copy, scratch or ``dims``:
torch's allocations are 256-byte aligned), unless it is a `buf.subview` at an element offset
(a contiguous slice): then its alignment is that of the offset's bytes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp

from tensor_graphs.codegen.llvm.profiling import kernel_label
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.shapes import numel

#: a buffer's element type (as xDSL prints it) -> Triton's pointer type in a kernel signature
POINTERS = {"f32": "*fp32", "f64": "*fp64", "f16": "*fp16", "bf16": "*bf16", "i64": "*i64", "i32": "*i32", "i16": "*i16",
            "i8": "*i8", "i1": "*i1", "ui8": "*u8"}


@dataclass(frozen=True)
class Launch:
    """One launch of a Triton kernel in a module's plan."""

    kernel: str
    #: Triton's pointer type of each argument, in the order the runtime passes them
    signature: tuple[str, ...]
    #: ``num_warps`` pinned by a tuner, else None (Triton's default)
    warps: int | None
    grid: tuple[int, ...]
    #: bytes of the buffers the launch names, each counted once, a weight copy at its own
    #: element size, a gather's table, a slice's input and a cache write's cache at the part
    #: touched (`PARTIAL_OPERANDS`); an upper bound on what it moves (an attention over a cache
    #: is charged the cache's capacity; a scratch buffer is not counted)
    nbytes: int
    #: what a profile calls its op (`kernel_label`)
    label: str
    #: per argument: its pointer is `POINTER_ALIGNMENT`-byte aligned when the runtime binds it
    aligned: tuple[bool, ...] = ()

    @property
    def key(self) -> tuple[str, tuple[str, ...], int | None, tuple[bool, ...]]:
        """What Triton compiles once: the kernel, its argument types, its warps and which of
        its pointers are aligned (each a specialization of its own)."""
        return (self.kernel, self.signature, self.warps, self.aligned)


#: the byte alignment Triton's launcher specializes a pointer argument on (``tt.divisibility``)
POINTER_ALIGNMENT = 16


def byte_offset(value) -> int:
    """Bytes from ``value``'s first element to the start of an allocation (the arena, or a
    tensor of its own): a `buf.view`'s offset plus the elements of the `buf.subview` ops on the
    way, through reshapes."""
    offset = 0
    while True:
        owner = value.owner
        if isinstance(owner, buf.SubviewOp):
            offset += owner.offset.value.data * max(value.type.element_type.bitwidth // 8, 1)
            value = owner.input
        elif isinstance(owner, buf.ReshapeOp):
            value = owner.input
        elif isinstance(owner, buf.ViewOp):
            return offset + owner.offset.value.data
        else:  # a graph argument, weight, constant or state: a tensor of its own
            return offset


def aligned(value) -> bool:
    """Whether the runtime binds ``value`` at a `POINTER_ALIGNMENT`-byte aligned address."""
    return byte_offset(value) % POINTER_ALIGNMENT == 0


def launches(module: ModuleOp, library: Collection[str] = ()) -> list[Launch]:
    """Every launch of a Triton kernel in ``module``'s plan, in order; the plan's library calls
    (kernel names in ``library``: cuBLAS through torch) are left out."""
    from tensor_graphs.codegen.triton.convert_tensor_to_triton import LAUNCHES_ATTR

    out = []
    for op in module.walk():
        plan = op.attributes.get(LAUNCHES_ATTR)
        for entry in plan.data if isinstance(plan, ArrayAttr) else ():
            assert isinstance(entry, DictionaryAttr)
            d = entry.data
            name = d["kernel"].data  # type: ignore[attr-defined]
            if name in library:
                continue
            args = list(d["args"].get_values())  # type: ignore[attr-defined]
            types = [[POINTERS[str(op.operands[i].type.element_type)]] for i in args]  # type: ignore[attr-defined]
            flags = [[aligned(op.operands[i])] for i in args]
            for position in d["bf16"].get_values() if "bf16" in d else ():  # type: ignore[attr-defined]
                types[position], flags[position] = ["*bf16"], [True]  # a copy of its own
            for position in d["int8"].get_values() if "int8" in d else ():  # type: ignore[attr-defined]
                types[position], flags[position] = ["*i8", "*fp32"], [True, True]  # the copy and its scales
            signature = [t for ts in types for t in ts] + (["*fp32"] if "scratch" in d else [])
            signature += ["*i64"] if d["scalars"].data or "checks" in d else []  # type: ignore[attr-defined]
            flags_all = [f for fs in flags for f in fs] + [True] * (len(signature) - sum(map(len, flags)))
            warps = d["warps"].value.data if "warps" in d else None  # type: ignore[attr-defined]
            nbytes = _bytes_read(op, args, d)
            label = kernel_label(op) if isinstance(op, buf.KernelOp) else op.name
            out.append(Launch(name, tuple(signature), warps, tuple(d["grid"].get_values()), nbytes, label, tuple(flags_all)))  # type: ignore[attr-defined]
    return out


def program(module: ModuleOp, what: str, found: Sequence[Launch]) -> dict:
    """What `offline_compile.compile_programs` takes of ``module``: its kernels' source and each
    distinct (kernel, signature, warps, aligned) among the launches ``found`` (`launches`), in order."""
    from tensor_graphs.codegen.triton.convert_tensor_to_triton import SOURCE_ATTR

    keys = dict.fromkeys(launch.key for launch in found)
    return {"what": what, "source": module.attributes[SOURCE_ATTR].data,  # type: ignore[attr-defined]
            "launches": [[kernel, list(signature), warps, list(flags)] for kernel, signature, warps, flags in keys]}


#: kernel ops that touch part of one operand, by class -> (that operand's position among the op's
#: operands, the operand whose size is what they touch of it): a gather reads rows of its table
#: (as many as it writes), a slice the part of its input it copies, a cache write writes its
#: update's rows of the cache
PARTIAL_OPERANDS: dict[type, tuple[int, int]] = {buf.EmbeddingOp: (0, 2), buf.TakeOp: (0, 2), buf.SliceOp: (0, 1),
                                                 buf.CacheWriteOp: (1, 0)}


def _bytes_read(op, args: list[int], d: dict) -> int:
    """Bytes of the distinct buffers a launch names; a bf16 copy at 2 bytes an element, an int8
    copy at 1 (its scales left out); a gather's table and a cache write's cache at the rows
    they touch (`PARTIAL_OPERANDS`)."""
    partial = PARTIAL_OPERANDS.get(type(op))
    sizes = {}
    for position, i in enumerate(args):
        value = op.operands[i]
        size = buf.nbytes(value.type)
        elements = numel(value.type.get_shape())
        if "bf16" in d and position in d["bf16"].get_values():
            size = 2 * elements
        elif "int8" in d and position in d["int8"].get_values():
            size = elements
        elif partial is not None and i == partial[0]:
            size = min(size, buf.nbytes(op.operands[partial[1]].type))
        sizes[value] = size
    return sum(sizes.values())
