"""`convert-buffer-to-llvm`: a planned `buf` module -> the xDSL `llvm` dialect.

Each graph function becomes the native ABI of `tensor_graphs.runtime_support.signature`
(`graph_abi`)::

    llvm.func @forward(%arena: !llvm.ptr, %weights: !llvm.ptr, %inputs: !llvm.ptr,
                       %outputs: !llvm.ptr, %dims: !llvm.ptr) -> i32

It returns 0, or k >= 1 when a run-time check fails (an embedding index out of range, say):
the message of status k is ``signature.errors[k - 1]`` (module attribute ``tg.errors``).

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
``%t = gep %arena[0]``, then one call per kernel: ``llvm.call @forward__0_matmul(%x, %w, %t)``
(which calls ``@scipy_cblas_sgemm``) and ``llvm.call @forward__1_relu(%t, %out)`` (a loop).
Each kernel is its own function (``<entry>__<n>_<kernel>``, internal and never inlined, see
`jit.to_llvm_ir`) whose arguments are its distinct buffers, ``noalias`` where the planner's
extents prove a buffer shares no byte with the others: LLVM then optimises many small
functions (linear time, where one huge function was superlinear) and vectorises without
run-time alias checks. A kernel returns its status; the entry returns a nonzero one at once.
Kernels whose code would be the same (same op, properties, types, pointer sharing and relative
layout of their buffers, splat constants: `_GraphLowering._kernel_key`) call one function, the
first one's: the layers of a transformer share their kernels, so LLVM compiles each once. A
kernel with run-time checks keeps its own (its messages may name a weight or a cache).
Code that many kernels run, such as a GEMM's register tile, is one more internal function
they all call (`KernelContext.shared_function`, e.g. ``@tg_tile_6x2v8_s4``): built and
optimised once per module, where a copy per call site made the packed GEMMs 80% of GPT-2's
LLVM code.

Run-time sizes: ``dims[0]`` is ``past`` (the positions already cached) in a graph with states.
A kernel reads them with ``ctx.dim(i)``; a kernel function that does gets the ``dims`` pointer
as one more (last) argument, and its call is preceded by a check that ``dims`` is not null::

    llvm.call @decode__0_cache_write(%k, %kc, %dims)     // past = load dims[0] inside

Kernels lower through :data:`kernels.REGISTRY`; the kernel family modules register their
emitters there when this module imports them: `kernels_elementwise`, `kernels_movement`,
`kernels_reduce`, `kernels_blas`, `kernels_matmul_epilogue`, `kernels_softmax_norm`,
`kernels_attention`, `kernels_gemm` (the packed GEMM), `kernels_moe`, `kernels_rope`,
`kernels_winograd` (a Winograd convolution's transforms), `kernels_quantized` (the matrix-vector
products of cheaper weights) and `kernels_quantize_rows` (the int8 GEMM's activations).

This module holds the pass and the kernel functions (`_GraphLowering`, the `KernelContext` of
the emitters); the rest of the lowering lives in `graph_abi` (the entry function, its pointer
tables and buffers, the `GraphSignature`), `parallel_region` (`KernelContext.parallel`:
worker functions on libgomp threads) and `profiling` (``profile=true``: per-kernel clock
counters and labels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ArrayAttr, BFloat16Type, DictionaryAttr, IntegerAttr, ModuleOp, UnitAttr, i32, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

# the kernel families: each registers its emitters into REGISTRY on import
from tensor_graphs.codegen.llvm import (  # noqa: F401
    kernels_attention,
    kernels_blas,
    kernels_elementwise,
    kernels_gemm,
    kernels_int4,
    kernels_int4_dot,
    kernels_lapack,
    kernels_matmul_epilogue,
    kernels_moe,
    kernels_movement,
    kernels_quantize_rows,
    kernels_quantized,
    kernels_reduce,
    kernels_rope,
    kernels_softmax_norm,
    kernels_winograd,
)
from tensor_graphs.codegen.llvm.graph_abi import GraphABI
from tensor_graphs.codegen.llvm.scalar import libm_declarations
from tensor_graphs.codegen.llvm.kernels import REGISTRY, LoweringError, splat_value
from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder, max_i64, min_i64
from tensor_graphs.codegen.llvm.parallel_region import ParallelRegions
from tensor_graphs.codegen.llvm.profiling import CLOCK_GETTIME, CLOCK_GETTIME_TYPE, KernelProfiling, kernel_label
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.symbolic import evaluate, symbols_of
from tensor_graphs.target import Target
from tensor_graphs.target import of_module as target_of_module


class _GraphLowering(GraphABI, ParallelRegions, KernelProfiling):
    """Lowers one `func.func` of `buf` ops into one `llvm.func`; implements `KernelContext`
    (`parallel` comes from `ParallelRegions`, the entry and its buffers from `GraphABI`, the
    clock of a profiled entry from `KernelProfiling`)."""

    def __init__(
        self, fn: func.FuncOp, module: ModuleOp, declarations: dict[str, llvm.FuncOp], profile: bool = False,
        target: Target | None = None,
    ):
        self.fn = fn
        self.module = module
        #: the machine the kernels are shaped for (`KernelContext.target`)
        self.target = target if target is not None else Target.host()
        self.declarations = declarations
        self.values: dict[SSAValue, SSAValue] = {}
        #: buffer -> (what it lives in, first byte, end byte), to catch illegal overlaps
        self.extents: dict[SSAValue, tuple[object, int, int]] = {}
        self.weight_slots: dict[str, int] = {}
        self.weight_types: dict[str, object] = {}
        #: the slots of packed weights (`buf.packed_weight`), in slot order
        self.packed_slots: dict[str, None] = {}
        self.constants: list[tuple[str, buf.ConstantOp]] = []
        #: messages of the error statuses (status k is errors[k - 1]) and their return blocks
        self.errors: list[str] = []
        self._fail_blocks: dict[int, Block] = {}
        self._checks = 0
        #: while a kernel is emitted: its buffers' pointers (the kernel function's arguments)
        self._kernel_ptrs: dict[SSAValue, SSAValue] | None = None
        self.kernel_functions: list[llvm.FuncOp] = []
        #: the functions of the kernel being emitted: its own, then its parallel workers
        self.kernel_functions_pending: list[llvm.FuncOp] = []
        self._workers = 0
        self._parallel_depth = 0
        self.kernel_count = 0
        #: `_kernel_key` -> (function name, reads dims, has run-time checks)
        self._kernel_cache: dict[tuple, tuple[str, bool, bool]] = {}
        #: the functions kernels share (`shared_function`), placed after the kernels
        self.shared_functions: dict[str, llvm.FuncOp] = {}
        self._propagate: Block | None = None
        self.state_slots: dict[str, int] = {}
        self.state_types: dict[str, object] = {}
        #: the entry's ``dims`` argument; while a kernel is emitted: its ``dims`` argument, once
        #: `dim` asked for it, and the values it loaded from it
        self._dims: SSAValue | None = None
        self._kernel_dims: SSAValue | None = None
        self._dim_values: dict[int, SSAValue] = {}
        self._dims_checked = False
        #: profiling: one label per kernel; the entry's weights table and the counters' slot in
        #: it, the counters pointer, the timespec, the last clock reading
        self.profile = profile
        self.labels: list[str] = []
        self._weights: SSAValue | None = None
        self._profile_slot = 0
        self._counters: SSAValue | None = None
        self._timespec: SSAValue | None = None
        self._last_time: SSAValue | None = None

    # KernelContext ------------------------------------------------------------------

    def ptr(self, value: SSAValue) -> SSAValue:
        if self._kernel_ptrs is not None:
            try:
                return self._kernel_ptrs[value]
            except KeyError:
                raise LoweringError("convert-buffer-to-llvm: a kernel emitter used a buffer that is not an operand of its op") from None
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

    def extent(self, value: SSAValue) -> tuple[object, int, int] | None:
        return self.extents.get(value)

    def check(self, ok: SSAValue, message: str) -> None:
        """Branch to ``return k`` (the status of ``message``) unless ``ok``; continue after."""
        if self._parallel_depth:
            raise LoweringError("convert-buffer-to-llvm: a run-time check inside a parallel region cannot return its status")
        b = self.b
        self._checks += 1
        if message not in self.errors:
            self.errors.append(message)
        status = self.errors.index(message) + 1
        fail = self._fail_blocks.get(status)
        if fail is None:
            fail = self._fail_blocks[status] = b.new_block()
            fail.add_op(llvm.ReturnOp(b.i32(status)))
        cont = b.new_block()
        b.add(llvm.CondBrOp(ok, cont, [], fail, []))
        b.block = cont

    def dim(self, index: int) -> SSAValue:
        """``dims[index]`` (an i64; ``dims[0]`` is ``past``), loaded once per kernel function at
        the top of its entry block, so the value dominates every use."""
        if index in self._dim_values:
            return self._dim_values[index]
        if self._parallel_depth:
            raise LoweringError("convert-buffer-to-llvm: read dims before parallel() and pass them as values")
        b = self.b
        if self._kernel_ptrs is None:
            assert self._dims is not None
            dims = self._dims
        else:
            if self._kernel_dims is None:
                self._kernel_dims = b.entry.insert_arg(PTR, len(b.entry.args))
                self._kernel_dims.name_hint = "dims"
            dims = self._kernel_dims
        ops: list[Operation] = []
        if index:
            const = b.i64(index)  # hoisted to the top of the entry block
            ops.append(llvm.GEPOp(dims, [llvm.GEP_USE_SSA_VAL], i64, ssa_indices=[const], inbounds=True))
            anchor: Operation | None = const.owner  # type: ignore[assignment]
        else:
            anchor = None
        ops.append(llvm.LoadOp(ops[-1].results[0] if ops else dims, i64))
        for op in ops:
            if anchor is None:
                first = b.entry.first_op
                if first is None:
                    b.entry.add_op(op)
                else:
                    b.entry.insert_op_before(op, first)
            else:
                b.entry.insert_op_after(op, anchor)
            anchor = op
        value = ops[-1].results[0]
        value.name_hint = "past" if index == 0 else f"dim{index}"
        self._dim_values[index] = value
        return value

    def size(self, extent) -> int | SSAValue:
        """``extent`` (an int, or an expression of the graph's size symbols: `dialects.symbolic`)
        as an int, or as an i64 computed here from ``dims`` (symbol ``i`` of the module's sorted
        ``tg.symbols`` is ``dims[1 + i]``). Not cached: call it where the value dominates its
        uses (before ``parallel()``, whose body gets it as one of its ``values``)."""
        if isinstance(extent, int):
            return extent
        return self._expr(sympy.sympify(extent))

    def largest(self, extent) -> int:
        if isinstance(extent, int):
            return extent
        return evaluate([extent], buf.largest(self.module))[0]

    def _expr(self, e) -> SSAValue:
        b = self.b
        if e.is_Integer:
            return b.i64(int(e))
        if e.is_Symbol:
            return self.dim(self._symbol_index(e.name))
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:  # seq**2: seq * seq
            base = self._expr(e.base)
            out = base
            for _ in range(int(e.exp) - 1):
                out = b.mul_i64(out, base)
            return out
        if isinstance(e, sympy.floor):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return b.add(llvm.SDivOp(self._expr(num), self._expr(den)))
        parts = [self._expr(a) for a in e.args]
        if isinstance(e, sympy.Mod):
            return b.add(llvm.SRemOp(parts[0], parts[1]))
        fold = {sympy.Add: b.add_i64, sympy.Mul: b.mul_i64, sympy.Max: lambda x, y: max_i64(b, x, y),
                sympy.Min: lambda x, y: min_i64(b, x, y)}.get(type(e))
        if fold is None:
            raise LoweringError(f"convert-buffer-to-llvm: the size {e} has no code (+, -, *, //, %, max, min)")
        out = parts[0]
        for p in parts[1:]:
            out = fold(out, p)
        return out

    def _symbol_index(self, name: str) -> int:
        names = sorted(symbols_of(self.module))
        if name not in names:
            raise LoweringError(f"convert-buffer-to-llvm: the size symbol {name} is not recorded on the module (tg.symbols)")
        return 1 + names.index(name)

    def declare(self, name: str, type: llvm.LLVMFunctionType) -> None:
        if name not in self.declarations:
            self.declarations[name] = llvm.FuncOp(name, type, linkage=llvm.LinkageAttr("external"))

    def shared_function(
        self, name: str, arg_types: Sequence[Attribute], build: Callable[[FunctionBuilder], None]
    ) -> None:
        if name in self.shared_functions:
            return
        fn = llvm.FuncOp(name, llvm.LLVMFunctionType(list(arg_types)), linkage=llvm.LinkageAttr("internal"))
        build(FunctionBuilder(fn.body, list(arg_types), fma=self.target.fma))
        self.shared_functions[name] = fn

    def _emit_kernel(self, op: buf.KernelOp) -> None:
        """Emit ``op`` as its own function and call it from the entry (see the module doc)."""
        emitter = REGISTRY.get(type(op))
        if emitter is None:
            raise LoweringError(f"convert-buffer-to-llvm: no codegen for {op.name}")
        main = self.b
        # one argument per distinct pointer (an in-place op passes its buffer once)
        buffers: list[SSAValue] = []
        for v in op.buffers:
            if all(self.values[v] is not self.values[u] for u in buffers):
                buffers.append(v)
        noalias = [all(self.disjoint(v, u) for u in buffers if u is not v) for v in buffers]
        key = self._kernel_key(op, buffers, noalias)
        known = self._kernel_cache.get(key)
        if known is not None and not known[2]:  # the same code as an earlier kernel: call that one
            name, reads_dims, _ = known
            call_args = [self.values[v] for v in buffers] + ([self._dims] if reads_dims else [])
            self._call_kernel(op, name, call_args, can_fail=False)
            return
        name = f"{self.fn.sym_name.data}__{self.kernel_count}_{op.name.removeprefix('buf.')}"
        kfn = llvm.FuncOp(name, llvm.LLVMFunctionType([PTR] * len(buffers), i32), linkage=llvm.LinkageAttr("internal"))
        kfn.properties["arg_attrs"] = ArrayAttr([DictionaryAttr({"llvm.noalias": UnitAttr()} if n else {}) for n in noalias])
        kb = FunctionBuilder(kfn.body, [PTR] * len(buffers), fma=self.target.fma)
        ptrs: dict[SSAValue, SSAValue] = {}
        for arg, v in zip(kb.args, buffers):
            arg.name_hint = self.values[v].name_hint
        for v in op.buffers:
            ptrs[v] = next(a for a, u in zip(kb.args, buffers) if self.values[u] is self.values[v])
        checks, fail_blocks, dim_values = self._checks, self._fail_blocks, self._dim_values
        self.b, self._kernel_ptrs, self._fail_blocks, self._dim_values = kb, ptrs, {}, {}
        self.kernel_op = op
        self.kernel_functions_pending, self._workers = [kfn], 0
        try:
            emitter(self, op)
            kb.add(llvm.ReturnOp(kb.i32(0)))
        finally:
            self.b, self._kernel_ptrs, self._fail_blocks, self._dim_values = main, None, fail_blocks, dim_values
        call_args = [self.values[v] for v in buffers]
        reads_dims = self._kernel_dims is not None
        if reads_dims:  # the kernel reads dims: pass it as its last argument
            self._kernel_dims = None
            kfn.properties["function_type"] = llvm.LLVMFunctionType([PTR] * (len(buffers) + 1), i32)
            kfn.properties["arg_attrs"] = ArrayAttr([*kfn.properties["arg_attrs"].data, DictionaryAttr({})])  # type: ignore[attr-defined]
            assert self._dims is not None
            if not self._dims_checked:  # once, before the first kernel that reads dims
                self._dims_checked = True
                address = main.add(llvm.PtrToIntOp(self._dims, i64))
                nonnull = main.add(llvm.ICmpOp(address, main.i64(0), IntegerAttr(llvm.ICmpPredicateFlag.NE.to_int(), i64)))
                self.check(nonnull, "dims is null: this graph reads run-time sizes from dims (past, the positions "
                                             "in its KV caches, in dims[0]; its size symbols after it)")
            call_args.append(self._dims)
        self.kernel_functions.extend(self.kernel_functions_pending)
        self.kernel_functions_pending = []
        can_fail = self._checks > checks
        self._kernel_cache[key] = (name, reads_dims, can_fail)
        self._call_kernel(op, name, call_args, can_fail)

    def _kernel_key(self, op: buf.KernelOp, buffers: list[SSAValue], noalias: list[bool]) -> tuple:
        """Everything a kernel function's code depends on: the op, its properties and types, which
        operands share a pointer, noalias, the operands' bytes relative to each other (in-place
        and overlap decisions), splat constants (emitted as immediates). Two kernels with the same
        key get the same function (a transformer's layers share theirs), unless it has run-time
        checks, whose messages may name a weight or a cache."""
        operands = op.buffers
        return (
            op.name,
            tuple(sorted((k, str(a)) for k, a in op.properties.items())),
            tuple(sorted((k, str(a)) for k, a in op.attributes.items())),  # kernel parameters (tg.k_block, ...)
            tuple(str(v.type) for v in operands),
            tuple(next(i for i, u in enumerate(buffers) if self.values[u] is self.values[v]) for v in operands),
            tuple(noalias),
            self._overlap_layout(operands),
            tuple(splat_value(v) for v in op.inputs),
            tuple(str(r) for r in op.regions),
        )

    def _overlap_layout(self, operands: Sequence[SSAValue]) -> tuple:
        """The operands' bytes as far as a kernel's code can depend on them: operands that share
        a byte (in place, a concatenation's input already in its slab) grouped, each group's
        extents relative to its lowest byte; disjoint operands only numbered by their root (an
        output 0.4 MB after its input in the arena and one 0.8 MB after it get the same code, so
        a transformer's Q, K and V projections share one function)."""
        extents = [self.extents.get(v) for v in operands]
        group = list(range(len(operands)))  # union-find over overlapping operands

        def find(i: int) -> int:
            while group[i] != i:
                i = group[i]
            return i

        for i, ei in enumerate(extents):
            for j in range(i):
                ej = extents[j]
                if ei is not None and ej is not None and not self.disjoint(operands[i], operands[j]):
                    group[find(i)] = find(j)
        roots: dict[object, int] = {}
        low: dict[int, int] = {}
        for i, e in enumerate(extents):
            if e is not None:
                low[find(i)] = min(low.get(find(i), e[1]), e[1])
        layout = []
        for i, e in enumerate(extents):
            g = find(i)
            layout.append(None if e is None else (roots.setdefault(e[0], len(roots)), g, e[1] - low[g], e[2] - low[g]))
        return tuple(layout)

    def _call_kernel(self, op: buf.KernelOp, name: str, call_args: list[SSAValue], can_fail: bool) -> None:
        """The entry's call of kernel function ``name`` for ``op`` (timed when profiling; a
        nonzero status returned at once when the kernel can fail)."""
        main = self.b
        kernel = self.kernel_count
        self.kernel_count += 1
        if self.profile:
            self.labels.append(kernel_label(op))
            if self._last_time is None:  # the first kernel: the counters and the start time
                self.declare(CLOCK_GETTIME, CLOCK_GETTIME_TYPE)
                assert self._weights is not None
                self._counters = self._table_entry(self._weights, self._profile_slot)
                self._counters.name_hint = "counters"
                self._last_time = self._clock()
        status = main.add(llvm.CallOp(name, *call_args, return_type=i32))
        if self.profile:
            self._count(kernel)
        if can_fail:  # return its status at once
            if self._propagate is None:
                self._propagate = main.new_block([i32])
                self._propagate.add_op(llvm.ReturnOp(self._propagate.args[0]))
            ok = main.add(llvm.ICmpOp(status, main.i32(0), IntegerAttr(llvm.ICmpPredicateFlag.EQ.to_int(), i64)))
            cont = main.new_block()
            main.add(llvm.CondBrOp(ok, cont, [], self._propagate, [status]))
            main.block = cont


#: kernels that write bfloat16 buffers by moving or converting values, never computing on them
#: (an im2col's windows into the bf16 GEMM's panels: rounded as they are moved; a GEMM's float32
#: sums, rounded by its epilogue body)
_BF16_KERNELS = (buf.CastOp, buf.CopyOp, buf.TransposeOp, buf.SelectOp, buf.PutOp, buf.TakeOp, buf.SliceOp,
                 buf.ConcatOp, buf.BroadcastOp, buf.EmbeddingOp, buf.FusedElementwiseOp, buf.Im2colOp, buf.PackedMatmulOp)
#: scalar ops that may have a bfloat16 result: conversions, constants, choices
_BF16_SCALARS = ("arith.truncf", "arith.extf", "arith.sitofp", "arith.uitofp", "arith.constant", "arith.select")


def _check_no_bf16_arithmetic(fn: func.FuncOp) -> None:
    """Raise `LoweringError` naming the ops that compute in bfloat16: the CPU's kernels and
    scalar bodies convert to and from bfloat16 and move its values, but compute in float32
    (`widen-dtypes` makes a model's bf16 ops so before conversion); IR written by hand
    with bf16 arithmetic at the buf level is refused by name."""
    def bf16(t) -> bool:
        return isinstance(t, BFloat16Type) or isinstance(getattr(t, "element_type", None), BFloat16Type)

    found = [o for o in fn.walk() if (isinstance(o, buf.KernelOp) and not isinstance(o, _BF16_KERNELS) and any(bf16(v.type) for v in o.outputs))
             or (o.dialect_name() in ("arith", "math") and o.name not in _BF16_SCALARS and any(bf16(r.type) for r in o.results))]
    if not found:
        return
    names = ", ".join(dict.fromkeys(o.name for o in found))
    raise LoweringError(
        f"convert-buffer-to-llvm: {len(found)} op{'s compute' if len(found) != 1 else ' computes'} in bfloat16 ({names}); "
        "the CPU kernels compute bfloat16 values in float32: run widen-dtypes on the aten module first")


@dataclass(frozen=True)
class ConvertBufferToLLVMPass(ModulePass):
    """Lower the one planned graph function of a `buf` module to an `llvm.func`; with
    ``profile=true``, time every kernel call into per-kernel counters (see `profiling`)."""

    name = "convert-buffer-to-llvm"

    profile: bool = False

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
        _check_no_bf16_arithmetic(funcs[0])
        declarations: dict[str, llvm.FuncOp] = {}
        lowering = _GraphLowering(funcs[0], op, declarations, profile=self.profile, target=target_of_module(op))
        llfn, signature = lowering.lower()
        funcs[0].detach()
        funcs[0].erase()
        functions = [llfn, *lowering.kernel_functions, *lowering.shared_functions.values()]
        for decl in (*declarations.values(), *libm_declarations(functions)):
            op.body.block.add_op(decl)
        for fn in functions:
            op.body.block.add_op(fn)
        signature.attach(op)
