"""The native ABI of a graph function in `convert-buffer-to-llvm`: the entry function, its
pointer tables and the buffers its kernels get, mixed into `convert_buffer_to_llvm._GraphLowering`
(whose `_emit_kernel` emits each kernel op).

Each graph function becomes the native ABI of `tensor_graphs.runtime_support.signature`
(arguments :data:`ABI_ARGS`)::

    llvm.func @forward(%arena: !llvm.ptr, %weights: !llvm.ptr, %inputs: !llvm.ptr,
                       %outputs: !llvm.ptr, %dims: !llvm.ptr) -> i32

It returns 0, or k >= 1 when a run-time check fails (an embedding index out of range, say):
the message of status k is ``signature.errors[k - 1]`` (module attribute ``tg.errors``).

Buffers become pointers: ``%x = load inputs[0]``, ``%out = load outputs[0]``,
``%w = load weights[0]``, a `buf.view` of the arena ``%t = gep %arena[0]``. The module records
its :class:`GraphSignature` as ``tg.*`` attributes. Weights take table slots by first
appearance, then IR constants (``__const0``, ``__const1``, ...) whose values go into
``tg.constants``, then the persistent states (``buf.state``, KV caches) by first appearance
(``tg.state_names``/``tg.state_types``): ``%k = buf.state "kv.0.key"`` is
``load weights[len(weight_table) + i]``. ``buf.reshape`` and ``buf.subview`` are aliases (a
pointer, no copy). ``buf.packed_weight`` takes a weights-table slot named after its layout
(``"fc.weight@panels64t"``, `dialects.packing.PanelLayout`), which the runtime fills with the
packed copy of the weight.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, MemRefType, UnitAttr, i8, i32, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs import dtypes
from tensor_graphs.codegen.llvm.kernels import LoweringError, check_memref
from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder, icmp
from tensor_graphs.dialects.symbolic import symbols_of
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.dense import numpy_from_dense
from tensor_graphs.runtime_support.signature import GraphSignature, TensorSpec
from tensor_graphs.target import Target

#: Argument order of every graph function (the native ABI).
ABI_ARGS: tuple[str, ...] = ("arena", "weights", "inputs", "outputs", "dims")


class GraphABI:
    """The entry function of a graph and its buffers (a mixin of
    `convert_buffer_to_llvm._GraphLowering`): table slots, the ABI arguments, one pointer per
    buffer, the `GraphSignature`."""

    #: the machine compiled for (set by the lowering)
    target: Target

    def _scan(self) -> None:
        """Table slots: weights by first appearance, then constants."""
        for op in self.fn.body.walk():
            if isinstance(op, buf.AllocOp):
                raise LoweringError(
                    f"convert-buffer-to-llvm: @{self.fn.sym_name.data} still has a buf.alloc of "
                    f"{op.result.type}: the module is not planned, run plan-memory first"
                )
            if isinstance(op, buf.WeightOp | buf.PackedWeightOp):
                name = _weight_slot_name(op)
                if name in self.weight_types and self.weight_types[name] != op.result.type:
                    raise LoweringError(
                        f"buf.weight: '{name}' is used as {self.weight_types[name]} and as {op.result.type}"
                    )
                self.weight_types[name] = op.result.type
                self.weight_slots.setdefault(name, len(self.weight_slots))
                if isinstance(op, buf.PackedWeightOp):
                    self.packed_slots[name] = None
        if clash := [n for n in self.packed_slots if n in self._plain_weights()]:
            raise LoweringError(f"buf.weight: '{clash[0]}' is also the name of a packed weight's slot")
        n = len(self.weight_slots)
        for op in self.fn.body.walk():
            if isinstance(op, buf.ConstantOp):
                self.constants.append((f"__const{len(self.constants)}", op))
        self.const_slots = {id(op): n + i for i, (_, op) in enumerate(self.constants)}
        n += len(self.constants)
        for op in self.fn.body.walk():
            if isinstance(op, buf.StateOp):
                name = op.state_name.data
                if name in self.weight_types:
                    raise LoweringError(f"buf.state: '{name}' is also the name of a weight")
                if name in self.state_types and self.state_types[name] != op.result.type:
                    raise LoweringError(
                        f"buf.state: '{name}' is used as {self.state_types[name]} and as {op.result.type}"
                    )
                self.state_types[name] = op.result.type
                self.state_slots.setdefault(name, n + len(self.state_slots))

    def _plain_weights(self) -> set[str]:
        return {op.weight_name.data for op in self.fn.body.walk() if isinstance(op, buf.WeightOp)}

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
        _check_sizes(fn)
        self._scan()

        fn_type = llvm.LLVMFunctionType([PTR] * len(ABI_ARGS), i32)
        llfn = llvm.FuncOp(name, fn_type, linkage=llvm.LinkageAttr("external"))
        llfn.properties["arg_attrs"] = ArrayAttr(
            [DictionaryAttr({"llvm.noalias": UnitAttr()} if a == "arena" else {}) for a in ABI_ARGS]
        )
        self.b = b = FunctionBuilder(llfn.body, [PTR] * len(ABI_ARGS), fma=self.target.fma)
        arena, weights, inputs, outputs, self._dims = b.args
        for a, hint in zip(b.args, ABI_ARGS):
            a.name_hint = hint
        if self.profile:  # a static alloca; the rest comes with the first kernel
            self._timespec = b.add(llvm.AllocaOp(b.i64(2), i64, alignment=8))
            self._timespec.name_hint = "timespec"
            self._weights = weights
            self._profile_slot = len(self.weight_slots) + len(self.constants) + len(self.state_slots)

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
            self.extents[arg] = (arg, 0, buf.max_nbytes(t, fn))

        self._check_symbols()
        arena_size = 0
        if isinstance(a := self.module.attributes.get("tg.arena_size"), IntegerAttr):
            arena_size = a.value.data
        for op in fn.body.block.ops:
            for r in op.results:
                check_memref(op, r)
            if isinstance(op, buf.KernelOp):
                for v in op.buffers:
                    check_memref(op, v)
                self._emit_kernel(op)
            elif isinstance(op, buf.ArenaOp):
                arena_size = max(arena_size, op.size)
                self.values[op.result] = arena
            elif isinstance(op, buf.ViewOp):
                self.values[op.result] = b.gep(self.ptr(op.arena), op.offset.value.data, i8)
                start = op.offset.value.data
                self.extents[op.result] = (op.arena, start, start + buf.max_nbytes(op.result.type, op))
            elif isinstance(op, buf.ReshapeOp):
                self.values[op.result] = self.ptr(op.input)
                if op.input in self.extents:
                    self.extents[op.result] = self.extents[op.input]
                else:
                    self.extents[op.result] = (op.input, 0, buf.max_nbytes(op.result.type, op))
            elif isinstance(op, buf.SubviewOp):
                el = op.result.type.element_type
                self.values[op.result] = b.gep(self.ptr(op.input), op.offset.value.data, el)
                width = max(el.bitwidth // 8, 1)
                base = self.extents.get(op.input, (op.input, 0, 0))
                start = base[1] + op.offset.value.data * width
                self.extents[op.result] = (base[0], start, start + buf.max_nbytes(op.result.type, op))
            elif isinstance(op, buf.WeightOp | buf.PackedWeightOp):
                slot = _weight_slot_name(op)
                self.values[op.result] = self._table_entry(weights, self.weight_slots[slot])
                self.extents[op.result] = (("weight", slot), 0, buf.nbytes(op.result.type))
            elif isinstance(op, buf.ConstantOp):
                self.values[op.result] = self._table_entry(weights, self.const_slots[id(op)])
                self.extents[op.result] = (op.result, 0, buf.nbytes(op.result.type))
            elif isinstance(op, buf.StateOp):
                self.values[op.result] = self._table_entry(weights, self.state_slots[op.state_name.data])
                self.extents[op.result] = (("state", op.state_name.data), 0, buf.nbytes(op.result.type))
            elif isinstance(op, func.ReturnOp):
                if op.operands:
                    raise LoweringError(
                        f"convert-buffer-to-llvm: @{name} returns values; graph functions write outputs in place"
                    )
                b.add(llvm.ReturnOp(b.i32(0)))
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
            constants={n: _stored(op.value) for n, op in self.constants},
            errors=tuple(self.errors),
            intermediate_bytes=_int_attr(self.fn, "tg.intermediate_bytes") or _int_attr(self.module, "tg.intermediate_bytes"),
            states=tuple(TensorSpec.of(t, n) for n, t in self.state_types.items()),  # type: ignore[arg-type]
            profile=tuple(self.labels) if self.profile else None,
            packed=tuple(self.packed_slots),
            weight_specs=tuple(TensorSpec.bound(self.weight_types[n], n) for n in self.weight_slots),  # type: ignore[arg-type]
            symbols=tuple((n, lo, hi) for n, (lo, hi) in sorted(symbols_of(self.module).items())),
        )
        return llfn, signature


    def _check_symbols(self) -> None:
        """A graph with size symbols checks each ``dims[1 + i]`` against its range on entry
        (the Python runtime checks them before the call, with the input and dim that gave each;
        this is for any other caller of the native function)."""
        for i, (name, (lo, hi)) in enumerate(sorted(symbols_of(self.module).items())):
            if i == 0:
                address = self.b.add(llvm.PtrToIntOp(self._dims, i64))
                self.check(icmp(self.b, "ne", address, self.b.i64(0)), "dims is null: this graph reads its size symbols "
                           "from dims[1:]")
                self._dims_checked = True
            value = self.b.load(self.b.gep(self._dims, 1 + i, i64), i64)  # here, after the null check
            ok = self.b.add(llvm.AndOp(icmp(self.b, "sge", value, self.b.i64(lo)), icmp(self.b, "sle", value, self.b.i64(hi))))
            self.check(ok, f"the size symbol {name} (dims[{1 + i}]) is outside its range [{lo}, {hi}]")


def _stored(value) -> np.ndarray:
    """A constant's elements as the buffer holds them (bfloat16: its uint16 bits, not the float32
    values NumPy holds it in)."""
    row = dtypes.of_element(value.get_element_type())
    return dtypes.to_storage(numpy_from_dense(value), row)


def _weight_slot_name(op: buf.WeightOp | buf.PackedWeightOp) -> str:
    """A weight's name in the weights table; a packed copy's names its layout too
    (``"fc.weight@panels64t"``, see `dialects.packing.PanelLayout`)."""
    return op.slot_name


def _int_attr(op: Operation, name: str) -> int:
    """An integer attribute set by plan-memory (0 when absent)."""
    a = op.attributes.get(name)
    return a.value.data if isinstance(a, IntegerAttr) else 0


def _check_sizes(fn: func.FuncOp) -> None:
    """Every buffer of ``fn`` is smaller than ``buf.MAX_BUFFER_BYTES`` (indices are int64)."""
    for value in (*fn.body.block.args, *(r for op in fn.walk() for r in op.results)):
        if isinstance(value.type, MemRefType) and (size := buf.max_nbytes(value.type, fn)) >= buf.MAX_BUFFER_BYTES:
            what = f"%{value.name_hint}" if value.name_hint else "a buffer"
            raise LoweringError(
                f"convert-buffer-to-llvm: in @{fn.sym_name.data}: {what} ({value.type}) holds {size:.3e} bytes, more "
                "than 64-bit indices can address (2^62); check the shapes"
            )
