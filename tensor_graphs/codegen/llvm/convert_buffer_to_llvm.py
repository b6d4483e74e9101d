"""`convert-buffer-to-llvm`: a planned `buf` module -> the xDSL `llvm` dialect.

Each graph function becomes the native ABI of `tensor_graphs.runtime_support.signature`::

    llvm.func @forward(%arena: !llvm.ptr, %weights: !llvm.ptr, %inputs: !llvm.ptr,
                       %outputs: !llvm.ptr, %dims: !llvm.ptr)

Before (after `plan-memory`)::

    func.func @forward(%x: memref<4x8xf32>, %out: memref<4x16xf32>) attributes {tg.num_outputs = 1 : i64} {
      %arena = buf.arena : memref<256xi8>
      %w = buf.weight "fc.weight" : memref<16x8xf32>
      %t = buf.view %arena[0] : memref<256xi8> -> memref<4x16xf32>
      buf.matmul ins(%x, %w : ...) outs(%t : ...) {transpose_b = true}
      buf.relu ins(%t : ...) outs(%out : ...)
      func.return
    }

After: ``%x = load inputs[0]``, ``%out = load outputs[0]``, ``%w = load weights[0]``,
``%t = gep %arena[0]``, a ``llvm.call @scipy_cblas_sgemm`` and a loop for the relu; the module
records its :class:`GraphSignature` as ``tg.*`` attributes. Weights take table slots by first
appearance, then IR constants (``__const0``, ``__const1``, ...) whose values go into
``tg.constants``. Kernels lower through :data:`kernels.REGISTRY`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp, UnitAttr, i8
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from tensor_graphs.codegen.llvm.kernels import REGISTRY, LoweringError, check_memref
from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.runtime_support.signature import GraphSignature, TensorSpec, numpy_dtype

#: Argument order of every graph function (the native ABI).
ABI_ARGS: tuple[str, ...] = ("arena", "weights", "inputs", "outputs", "dims")


class _GraphLowering:
    """Lowers one `func.func` of `buf` ops into one `llvm.func`; implements `KernelContext`."""

    def __init__(self, fn: func.FuncOp, module: ModuleOp, declarations: dict[str, llvm.FuncOp]):
        self.fn = fn
        self.module = module
        self.declarations = declarations
        self.values: dict[SSAValue, SSAValue] = {}
        #: buffer -> (what it lives in, first byte, end byte), to catch illegal overlaps
        self.extents: dict[SSAValue, tuple[object, int, int]] = {}
        self.weight_slots: dict[str, int] = {}
        self.weight_types: dict[str, object] = {}
        self.constants: list[tuple[str, buf.ConstantOp]] = []

    # KernelContext ------------------------------------------------------------------

    def ptr(self, value: SSAValue) -> SSAValue:
        try:
            return self.values[value]
        except KeyError:
            owner = value.owner
            what = owner.name if isinstance(owner, Operation) else "a block argument"
            raise LoweringError(f"convert-buffer-to-llvm: no buffer for a value defined by {what}") from None

    def same_bytes(self, a: SSAValue, b: SSAValue) -> bool:
        """True when ``a`` and ``b`` are provably the very same bytes."""
        return self.extents.get(a, a) == self.extents.get(b, b)

    def disjoint(self, a: SSAValue, b: SSAValue) -> bool:
        """True when ``a`` and ``b`` share no byte (distinct graph buffers never do)."""
        ea, eb = self.extents.get(a), self.extents.get(b)
        if ea is None or eb is None:
            return a is not b
        return ea[0] != eb[0] or ea[2] <= eb[1] or eb[2] <= ea[1]

    def declare(self, name: str, type: llvm.LLVMFunctionType) -> None:
        if name not in self.declarations:
            self.declarations[name] = llvm.FuncOp(name, type, linkage=llvm.LinkageAttr("external"))

    # lowering -----------------------------------------------------------------------

    def _scan(self) -> None:
        """Table slots: weights by first appearance, then constants."""
        for op in self.fn.body.walk():
            if isinstance(op, buf.AllocOp):
                raise LoweringError(
                    f"convert-buffer-to-llvm: @{self.fn.sym_name.data} still has a buf.alloc of "
                    f"{op.result.type}: the module is not planned, run plan-memory first"
                )
            if isinstance(op, buf.WeightOp):
                name = op.weight_name.data
                if name in self.weight_types and self.weight_types[name] != op.result.type:
                    raise LoweringError(
                        f"buf.weight: '{name}' is used as {self.weight_types[name]} and as {op.result.type}"
                    )
                self.weight_types[name] = op.result.type
                self.weight_slots.setdefault(name, len(self.weight_slots))
        n = len(self.weight_slots)
        for op in self.fn.body.walk():
            if isinstance(op, buf.ConstantOp):
                self.constants.append((f"__const{len(self.constants)}", op))
        self.const_slots = {id(op): n + i for i, (_, op) in enumerate(self.constants)}

    def _table_entry(self, table: SSAValue, index: int) -> SSAValue:
        b = self.b
        slot = b.gep(table, index, PTR)
        return b.load(slot, PTR)

    def lower(self) -> tuple[llvm.FuncOp, GraphSignature]:
        fn = self.fn
        name = fn.sym_name.data
        if len(fn.body.blocks) != 1:
            raise LoweringError(f"convert-buffer-to-llvm: @{name} must have a single block")
        num_out_attr = fn.attributes.get("tg.num_outputs")
        if not isinstance(num_out_attr, IntegerAttr):
            raise LoweringError(f"convert-buffer-to-llvm: @{name} has no 'tg.num_outputs' integer attribute")
        num_outputs = num_out_attr.value.data
        args = list(fn.body.block.args)
        if not 0 <= num_outputs <= len(args):
            raise LoweringError(f"convert-buffer-to-llvm: @{name} has tg.num_outputs = {num_outputs} but {len(args)} arguments")
        num_inputs = len(args) - num_outputs
        self._scan()

        fn_type = llvm.LLVMFunctionType([PTR] * len(ABI_ARGS))
        llfn = llvm.FuncOp(name, fn_type, linkage=llvm.LinkageAttr("external"))
        llfn.properties["arg_attrs"] = ArrayAttr(
            [DictionaryAttr({"llvm.noalias": UnitAttr()} if a == "arena" else {}) for a in ABI_ARGS]
        )
        self.b = b = FunctionBuilder(llfn.body, [PTR] * len(ABI_ARGS))
        arena, weights, inputs, outputs, _dims = b.args
        for a, hint in zip(b.args, ABI_ARGS):
            a.name_hint = hint

        in_specs: list[TensorSpec] = []
        out_specs: list[TensorSpec] = []
        for i, arg in enumerate(args):
            t = check_memref(fn, arg)
            if i < num_inputs:
                self.values[arg] = self._table_entry(inputs, i)
                in_specs.append(TensorSpec.of(t, arg.name_hint or f"input{i}"))
            else:
                self.values[arg] = self._table_entry(outputs, i - num_inputs)
                out_specs.append(TensorSpec.of(t, f"output{i - num_inputs}"))
            self.values[arg].name_hint = arg.name_hint
            self.extents[arg] = (arg, 0, buf.nbytes(t))

        arena_size = 0
        if isinstance(a := self.module.attributes.get("tg.arena_size"), IntegerAttr):
            arena_size = a.value.data
        for op in fn.body.block.ops:
            for r in op.results:
                check_memref(op, r)
            if isinstance(op, buf.KernelOp):
                for v in (*op.inputs, *op.outputs):
                    check_memref(op, v)
                emitter = REGISTRY.get(type(op))
                if emitter is None:
                    raise LoweringError(f"convert-buffer-to-llvm: no codegen for {op.name}")
                emitter(self, op)
            elif isinstance(op, buf.ArenaOp):
                arena_size = max(arena_size, op.size)
                self.values[op.result] = arena
            elif isinstance(op, buf.ViewOp):
                self.values[op.result] = b.gep(self.ptr(op.arena), op.offset.value.data, i8)
                start = op.offset.value.data
                self.extents[op.result] = (op.arena, start, start + buf.nbytes(op.result.type))
            elif isinstance(op, buf.ReshapeOp):
                self.values[op.result] = self.ptr(op.input)
                if op.input in self.extents:
                    self.extents[op.result] = self.extents[op.input]
                else:
                    self.extents[op.result] = (op.input, 0, buf.nbytes(op.result.type))
            elif isinstance(op, buf.WeightOp):
                self.values[op.result] = self._table_entry(weights, self.weight_slots[op.weight_name.data])
                self.extents[op.result] = (("weight", op.weight_name.data), 0, buf.nbytes(op.result.type))
            elif isinstance(op, buf.ConstantOp):
                self.values[op.result] = self._table_entry(weights, self.const_slots[id(op)])
                self.extents[op.result] = (op.result, 0, buf.nbytes(op.result.type))
            elif isinstance(op, func.ReturnOp):
                if op.operands:
                    raise LoweringError(
                        f"convert-buffer-to-llvm: @{name} returns values; graph functions write outputs in place"
                    )
                b.add(llvm.ReturnOp())
            else:
                raise LoweringError(f"convert-buffer-to-llvm: cannot lower {op.name} in @{name}")
            for r in op.results:
                if r in self.values and r.name_hint and self.values[r].name_hint is None:
                    self.values[r].name_hint = r.name_hint

        signature = GraphSignature(
            entry=name,
            arena_size=arena_size,
            weight_table=(*self.weight_slots, *(n for n, _ in self.constants)),
            inputs=tuple(in_specs),
            outputs=tuple(out_specs),
            constants={n: _constant_value(op) for n, op in self.constants},
        )
        return llfn, signature


def _constant_value(op: buf.ConstantOp) -> np.ndarray:
    """The value of a `buf.constant` with its own shape (rank 0 included)."""
    t = op.value.get_type()
    return np.array(op.value.get_values(), dtype=numpy_dtype(t.element_type)).reshape(tuple(t.get_shape()))


@dataclass(frozen=True)
class ConvertBufferToLLVMPass(ModulePass):
    """Lower the one planned graph function of a `buf` module to an `llvm.func`."""

    name = "convert-buffer-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = [o for o in op.ops if isinstance(o, func.FuncOp)]
        others = [o for o in op.ops if not isinstance(o, func.FuncOp | llvm.FuncOp)]
        if others:
            raise LoweringError(f"convert-buffer-to-llvm: unexpected top-level op {others[0].name}")
        if len(funcs) != 1:
            names = ", ".join("@" + f.sym_name.data for f in funcs) or "none"
            raise LoweringError(
                f"convert-buffer-to-llvm: expected exactly one graph function per module, found {names}"
            )
        declarations: dict[str, llvm.FuncOp] = {}
        llfn, signature = _GraphLowering(funcs[0], op, declarations).lower()
        funcs[0].detach()
        funcs[0].erase()
        for decl in declarations.values():
            op.body.block.add_op(decl)
        op.body.block.add_op(llfn)
        signature.attach(op)
