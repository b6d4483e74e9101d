"""`buf.lapack` through scipy-openblas32's LAPACKE (and CBLAS ``trsm``): per matrix problem of
the batch, the in-place slot copied from its operand, one call, its ``info`` checked. The
routine's slots and arguments come from `dialects.lapack`'s table (the evaluator calls the same
routines through ctypes).

```mlir
buf.lapack ins(%a : memref<2x4x4xf32>) outs(%p, %scratch : memref<2x4xi32>, memref<17xf32>) {routine = "getrf", output = "pivots"}
// per problem b (LU and info in the scratch):
//   scratch[0:16] = a[b];  info = scipy_LAPACKE_sgetrf(101, 4, 4, scratch, 4, &p[b, 0]);
//   info < 0: the "rejected an argument" error; info > 0 with check: the routine's failure
```
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, f64, i8, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import REGISTRY, Access, KernelContext, LoweringError, _shape, check_no_overlap, emit_pointwise
from tensor_graphs.codegen.llvm.loops import PTR, emit_loop
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects import lapack
from tensor_graphs.dialects.shapes import numel
from tensor_graphs.dialects.tensor import lapack_params


def lapack_rejected_message(symbol: str) -> str:
    """A negative info: LAPACKE rejected an argument (or could not allocate its workspace)."""
    return f"{symbol} rejected its arguments or ran out of memory (a negative info)"


def lapack_failure_message(api: str, routine: str) -> str:
    """A positive info of a checked call: torch raises ``LinAlgError`` there."""
    return f"{api}: {lapack.ROUTINES[routine].failure} ({routine} returned a positive info; torch raises LinAlgError)"


def _arg_type(arg: lapack.Arg, el: Attribute) -> Attribute:
    if isinstance(arg, lapack.Char):
        return i8
    if isinstance(arg, lapack.Alpha):
        return el
    if isinstance(arg, (lapack.Slot, lapack.Operand)):
        return PTR
    return i32


def _emit_lapack(ctx: KernelContext, op: Operation) -> None:
    """One call per problem of the batch (module doc)."""
    assert isinstance(op, buf.LapackOp)
    b = ctx.b
    name, output, params = op.routine.data, op.output_name.data, lapack_params(op.params)
    routine = lapack.ROUTINES[name]
    el = op.inputs[0].type.element_type  # type: ignore[attr-defined]
    shapes = [_shape(v) for v in op.inputs]
    batch, per, dims = lapack.problem(name, shapes, params)
    out = op.outputs[0]
    check_no_overlap(ctx, op, out, list(op.inputs), in_place_ok=False)
    scratch = op.outputs[1] if len(op.outputs) == 2 else None
    layout = buf.lapack_scratch_elements(name, output, shapes, params)
    slots = routine.all_slots()
    slot_sizes = {s: numel(shape(dims)) for s, (_, shape) in slots.items()}
    operand_sizes = [numel(p) for p in per]
    symbol = routine.symbol(name, el == f64)
    args_spec = routine.args(dims, params)
    arg_types = [_arg_type(a, el) for a in args_spec]
    ctx.declare(symbol, llvm.LLVMFunctionType(arg_types, i32) if routine.library == "lapacke" else llvm.LLVMFunctionType(arg_types))
    out_ptr = ctx.ptr(out)
    scratch_ptr = ctx.ptr(scratch) if scratch is not None else None
    in_ptrs = [ctx.ptr(v) for v in op.inputs]
    in_els = [v.type.element_type for v in op.inputs]  # type: ignore[attr-defined]
    out_el = out.type.element_type  # type: ignore[attr-defined]

    def slot_ptr(slot: str, item: SSAValue) -> SSAValue:
        if slot == output:
            return b.gep(out_ptr, b.offset(None, item, slot_sizes[slot]), out_el)
        if scratch_ptr is None:
            raise LoweringError(f"{op.name}: {name}'s {slot} needs the scratch buffer")
        return b.gep(scratch_ptr, layout[slot], el)

    def problem(item: SSAValue) -> None:
        for slot, k in routine.copies.items():
            size = slot_sizes[slot]
            if size:
                src = b.gep(in_ptrs[k], b.offset(None, item, operand_sizes[k]), el)
                emit_pointwise(b, (size,), Access(slot_ptr(slot, item), (1,), el), [Access(src, (1,), el)], lambda b, v: v[0])
        args: list[SSAValue] = []
        for a in args_spec:
            if isinstance(a, lapack.Char):
                args.append(b.constant(ord(a.value), i8))
            elif isinstance(a, lapack.Alpha):
                args.append(b.constant(a.value, el))
            elif isinstance(a, lapack.Slot):
                args.append(slot_ptr(a.name, item))
            elif isinstance(a, lapack.Operand):
                args.append(b.gep(in_ptrs[a.index], b.offset(None, item, operand_sizes[a.index]), in_els[a.index]))
            else:
                args.append(b.i32(a))
        if routine.library != "lapacke":
            b.add(llvm.CallOp(symbol, *args))
            return
        info = b.add(llvm.CallOp(symbol, *args, return_type=i32))
        zero = b.i32(0)
        ctx.check(b.add(llvm.ICmpOp(info, zero, IntegerAttr(llvm.ICmpPredicateFlag.SGE.to_int(), i64))), lapack_rejected_message(symbol))
        if op.check is not None:
            ctx.check(b.add(llvm.ICmpOp(info, zero, IntegerAttr(llvm.ICmpPredicateFlag.EQ.to_int(), i64))),
                      lapack_failure_message(op.check.data, name))
        if output == "info":
            b.store_element(info, out_ptr, item, i32)

    emit_loop(b, numel(batch), problem)


REGISTRY[buf.LapackOp] = _emit_lapack
