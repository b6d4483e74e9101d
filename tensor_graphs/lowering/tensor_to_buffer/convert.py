"""`convert-tensor-to-buffer`: `tg` (tensors, value semantics) -> `buf` (memrefs, explicit kernels).

Each function becomes destination-passing: its results turn into trailing memref arguments
(``tg.num_outputs`` says how many) that the kernels write in place.

```mlir
// before                                           // after
func.func @f(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {  func.func @f(%x: memref<2x4xf32>, %out0: memref<2x4xf32>)
  %w = tg.weight "w" : tensor<4x4xf32>                      attributes {tg.num_outputs = 1 : i64} {
  %y = tg.matmul %x, %w : ...                             %w = buf.weight "w" : memref<4x4xf32>
  %r = tg.relu %y : tensor<2x4xf32>                       %y = buf.alloc : memref<2x4xf32>
  func.return %r : tensor<2x4xf32>                        buf.matmul ins(%x, %w : ...) outs(%y : ...)
}                                                         buf.relu ins(%y : ...) outs(%out0 : ...)
                                                          func.return
                                                        }
```

``tg.weight``/``tg.constant``/``tg.state`` become ``buf.weight``/``buf.constant``/``buf.state``
(a weight read by a GEMM becomes a ``buf.packed_weight``, its copy packed into column panels
at load time, see `kernels`; a ``buf.weight`` nothing reads any more is dropped);
``tg.cache_write`` becomes ``buf.cache_write`` writing into the state's own buffer (its value
is that buffer: the cache is updated in place, never copied); every other `tg` op runs by
the path :mod:`.kernels` picks for it: a zero-copy alias of its input (``tg.reshape`` ->
``buf.reshape``, a contiguous ``tg.slice`` -> ``buf.subview`` at an element offset), or one kernel
writing a fresh ``buf.alloc`` (and, for kernels that need scratch such as ``buf.attention``, a
second ``buf.alloc`` passed as its second output, live for that op only).

A returned value whose root buffer (followed back through aliases) is such an alloc, and
which covers all of it, is computed straight into its output argument; anything else (an
input, a weight, a constant, a buffer already returned, a part of a buffer) is copied out
with ``buf.copy``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects import tensor as tg
from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.symbolic import dims_of, shaped_memref
from tensor_graphs.target import Target
from tensor_graphs.target import of_module as target_of_module
from tensor_graphs.lowering.tensor_to_buffer.kernels import (
    ALIAS_OPS,
    CARRIED_ATTRS,
    AliasVariant,
    NoKernelError,
    op_name,
    select_kernel,
)

PASS = "convert-tensor-to-buffer"


def _fail(fn: func.FuncOp, message: str) -> PassFailedException:
    return PassFailedException(f"{PASS}: in @{fn.sym_name.data}: {message}")


def memref_of(type: Attribute, fn: func.FuncOp, what: str) -> MemRefType:
    """The memref holding a tensor of ``type``: the same shape, a symbolic dim keeping its size
    expression (``tensor<?x64xf32, ["seq"]>`` -> ``memref<?x64xf32, ["seq"]>``)."""
    if isinstance(type, MemRefType):
        return type
    if not isinstance(type, TensorType):
        raise _fail(fn, f"{what} has type {type}; only tensors can be lowered to buffers")
    if DYNAMIC_INDEX in type.get_shape() and not isinstance(type.encoding, ArrayAttr):
        raise _fail(fn, f"{what} has dynamic shape {type} without size expressions: name each dynamic dim's size "
                        '(tensor<?x4xf32, ["batch"]>, with its range in the module\'s tg.symbols), or give every dim a '
                        "size (export the model without dynamic_shapes)")
    return _memref(type)


@functools.lru_cache(maxsize=4096)
def _memref(type: TensorType) -> MemRefType:
    # building a MemRefType runs xDSL's constraint checks (~0.2 ms); a graph repeats few shapes
    if isinstance(type.encoding, ArrayAttr):
        return shaped_memref(type.element_type, dims_of(type))
    return MemRefType(type.element_type, type.get_shape())


def convert_function(fn: func.FuncOp, pack_weights: bool = True, threads: int = 1, target: Target | None = None) -> None:
    """Rewrite one `tg`-level function into destination-passing `buf` form, in place.

    ``pack_weights``: kernel variants that read a weight packed at load time may be chosen.
    ``threads``: the most threads a kernel's scratch must serve (one set of tiles each).
    ``target``: the machine compiled for (the packed panels' width; default: the host)."""
    target = target if target is not None else Target.host()
    if "tg.num_outputs" in fn.attributes:
        return  # already at the buf level
    in_types = [memref_of(t, fn, f"argument #{i}") for i, t in enumerate(fn.function_type.inputs.data)]
    out_types = [memref_of(t, fn, f"result #{i}") for i, t in enumerate(fn.function_type.outputs.data)]
    fn.function_type = FunctionType.from_lists([*in_types, *out_types], [])
    fn.attributes["tg.num_outputs"] = IntegerAttr(len(out_types), i64)
    if fn.arg_attrs is not None or fn.res_attrs is not None:
        # result attributes move onto the output arguments
        in_attrs = fn.arg_attrs.data if fn.arg_attrs is not None else [DictionaryAttr({})] * len(in_types)
        out_attrs = fn.res_attrs.data if fn.res_attrs is not None else [DictionaryAttr({})] * len(out_types)
        fn.arg_attrs = ArrayAttr([*in_attrs, *out_attrs])
    fn.res_attrs = None
    if not fn.body.blocks:
        return  # a declaration: the signature is all there is
    if len(fn.body.blocks) != 1:
        raise _fail(fn, "only single-block functions can be lowered")

    old = fn.body.block
    new = Block(arg_types=[*in_types, *out_types])
    for arg, old_arg in zip(new.args, old.args):
        arg.name_hint = old_arg.name_hint
    outs = list(new.args[len(in_types) :])
    for k, arg in enumerate(outs):
        arg.name_hint = f"out{k}"
    mapping: dict[SSAValue, SSAValue] = dict(zip(old.args, new.args))
    returned: list[SSAValue] = []

    for op in old.ops:
        if isinstance(op, func.ReturnOp):
            returned = [mapping[v] for v in op.arguments]
            continue
        new_ops, value = _lower_op(fn, op, [mapping[v] for v in op.operands], pack_weights, threads, target)
        new.add_ops(new_ops)
        value.name_hint = op.results[0].name_hint
        mapping[op.results[0]] = value

    _write_outputs(new, returned, outs)
    for op in list(new.ops):  # a weight read only through its packed copy is not bound at all
        if isinstance(op, buf.WeightOp) and not op.result.uses:
            new.erase_op(op)
    new.add_op(func.ReturnOp())
    fn.body.add_block(new)
    fn.body.detach_block(old)
    old.erase(safe_erase=False)


def _lower_op(
    fn: func.FuncOp, op: Operation, ins: list[SSAValue], pack_weights: bool, threads: int, target: Target
) -> tuple[list[Operation], SSAValue]:
    """The buf ops computing ``op`` and the buffer that holds its value."""
    name = op_name(op)
    if not name.startswith("tg."):
        hint = " (lower it to tg first: convert-aten-to-tensor)" if name.startswith("aten.") else ""
        what = f"'{name}'" + "".join(
            f" {key} {attr.data}"
            for key in ("target", "location")
            if isinstance(attr := op.properties.get(key) or op.attributes.get(key), StringAttr) and attr.data
        )
        raise _fail(fn, f"{what} is not a tg op and has no buffer lowering{hint}")
    if len(op.results) != 1:
        raise _fail(fn, f"cannot lower '{name}': expected one result, got {len(op.results)}")
    if isinstance(op, tg.WeightOp):
        w = buf.WeightOp(op.weight_name.data, memref_of(op.result.type, fn, "tg.weight"))
        return [w], w.result
    if isinstance(op, tg.ConstantOp):
        c = buf.ConstantOp(op.value)
        return [c], c.result
    if isinstance(op, tg.StateOp):
        st = buf.StateOp(op.state_name.data, memref_of(op.result.type, fn, "tg.state"))
        return [st], st.result
    if isinstance(op, tg.CacheWriteOp):
        # in place: the kernel writes into the state's buffer, which is also the op's value
        return [buf.CacheWriteOp([ins[1]], [ins[0]], {"axis": op.axis})], ins[0]
    try:
        variant = select_kernel(op, pack_weights=pack_weights)
    except NoKernelError as e:
        raise _fail(fn, str(e)) from None
    result_type = memref_of(op.results[0].type, fn, f"result of '{name}'")
    if isinstance(variant, AliasVariant):
        alias = variant.build(op, ins[0], result_type)
        return [alias], alias.results[0]
    before: list[Operation] = []
    if variant.prepare is not None:
        try:
            before, ins = variant.prepare(op, ins, target)
        except NoKernelError as e:  # a kernel parameter the op pins that cannot be (`kernels.panel_columns`)
            raise _fail(fn, str(e)) from None
    out = buf.AllocOp(result_type)
    scratch_type = variant.scratch(op, threads, target) if variant.scratch is not None else None
    if scratch_type is None:
        return [*before, out, *_with_parameters(op, variant.build(op, ins, out.result))], out.result
    scratch = buf.AllocOp(scratch_type)
    scratch.result.name_hint = "scratch"
    return [*before, out, scratch, *_with_parameters(op, variant.build(op, ins, out.result, scratch.result))], out.result


def _with_parameters(op: Operation, built: Operation | list[Operation]) -> list[Operation]:
    """What a variant built (its kernel, or views of the output then the kernel, last), the
    kernel carrying the kernel parameters ``op`` sets (`kernels.CARRIED_ATTRS`: the CPU's
    parameters, the GPU's variant)."""
    ops = built if isinstance(built, list) else [built]
    parameters = set(CARRIED_ATTRS)
    for attr, value in op.attributes.items():  # in the op's order: the IR reads as written
        if attr in parameters:
            ops[-1].attributes[attr] = value
    return ops


def _write_outputs(block: Block, returned: list[SSAValue], outs: list[SSAValue]) -> None:
    """Make each returned value land in its output argument: in place where possible, else a copy."""
    copies: list[Operation] = []
    returned = list(returned)
    for k, out in enumerate(outs):
        value = returned[k]
        root = buf.root_buffer(value)
        if isinstance(root.owner, buf.AllocOp) and numel(root.type.get_shape()) == numel(out.type.get_shape()):  # type: ignore[attr-defined]
            # the root is still an alloc only while no earlier output claimed it; with as many
            # elements as the output, the aliases in between (reshapes, full subviews) are the
            # identity on its bytes
            alloc = root.owner
            if root.type == out.type:
                written: SSAValue = out
            else:
                # same bytes, another shape: the kernel writes the output through an alias of it
                alias = buf.ReshapeOp(out, root.type)  # type: ignore[arg-type]
                block.insert_op_before(alias, alloc)
                written = alias.result
            root.replace_all_uses_with(written)
            block.erase_op(alloc)
            returned = [written if v is root else v for v in returned]
        else:
            copies.append(buf.CopyOp([value], [out]))
    block.add_ops(copies)
    for value in returned:  # aliases that only fed func.return are dead now
        while isinstance(value.owner, ALIAS_OPS) and value.owner.parent is block and not value.uses:
            owner = value.owner
            value = owner.operands[0]
            block.erase_op(owner)


@dataclass(frozen=True)
class ConvertTensorToBufferPass(ModulePass):
    """Lower every `tg`-level ``func.func`` to destination-passing `buf` form; with
    ``pack_weights=false`` no kernel reads a weight packed at load time (GEMMs by a weight
    then call BLAS on the weight as stored). ``threads``: the most threads a parallel kernel
    with scratch (attention) will use, one set of scratch tiles each; 0 (the default) means
    the CPUs this process may run on."""

    name = "convert-tensor-to-buffer"

    pack_weights: bool = True
    threads: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from tensor_graphs.runtime_support.threads import default_num_threads

        if self.threads < 0:
            raise PassFailedException(f"{PASS}: threads must be >= 0 (0: this machine's CPUs), got {self.threads}")
        threads = self.threads or default_num_threads()
        target = target_of_module(op)
        for fn in list(op.walk()):
            if isinstance(fn, func.FuncOp):
                convert_function(fn, self.pack_weights, threads, target)
