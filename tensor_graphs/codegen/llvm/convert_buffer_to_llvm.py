"""`convert-buffer-to-llvm`: a planned `buf` module -> the xDSL `llvm` dialect.

Each graph function becomes the native ABI of `tensor_graphs.runtime_support.signature`::

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
The module records its :class:`GraphSignature` as ``tg.*`` attributes. Weights take table slots by first
appearance, then IR constants (``__const0``, ``__const1``, ...) whose values go into
``tg.constants``, then the persistent states (``buf.state``, KV caches) by first appearance
(``tg.state_names``/``tg.state_types``): ``%k = buf.state "kv.0.key"`` is
``load weights[len(weight_table) + i]``. ``buf.reshape`` and ``buf.subview`` are aliases (a
pointer, no copy).

Run-time sizes: ``dims[0]`` is ``past`` (the positions already cached) in a graph with states.
A kernel reads them with ``ctx.dim(i)``; a kernel function that does gets the ``dims`` pointer
as one more (last) argument, and its call is preceded by a check that ``dims`` is not null::

    llvm.call @decode__0_cache_write(%k, %kc, %dims)     // past = load dims[0] inside

Profiling (``convert-buffer-to-llvm{profile=true}``): the entry also loads ``int64_t *counters``
from the weights table slot after the states (`GraphSignature.profile_slot`), reads the clock
(libc ``clock_gettime(CLOCK_MONOTONIC)`` into a timespec on its stack) before the first kernel
and after each, and adds the nanoseconds since the previous reading and one call to kernel
``k``'s counters ``counters[2k]`` and ``counters[2k + 1]``::

    %st = llvm.call @forward__0_matmul(%x, %w, %t)
    %now = <clock_gettime(1, %timespec); sec * 1000000000 + nsec>
    counters[0] += %now - %before;  counters[1] += 1

The module records one label per kernel (``tg.profile``, see :func:`kernel_label`). Without
the option nothing of this is emitted: the code is the same as before it existed.

Parallel kernels (`KernelContext.parallel`): the kernel function stores its buffer pointers
(and any i64 values the work needs) in a table on its stack and runs a worker function
``<kernel>__par<k>(ptr %shared)`` on a team of ``min(tg_num_threads, items)`` threads through
libgomp (a direct call when that is 1); each worker reloads the pointers and, in a team, takes
chunks of ``[0, items)`` through libgomp's guided schedule until none is left (a lone call takes
the whole range; a kernel that can use only one thread, one item or one scratch slot runs its
work in place, with no worker)::

    %n = llvm.load @tg_num_threads                      // runtime_support.threads
    llvm.call @GOMP_parallel(@forward__3_packed_matmul__par0, %shared, %n, 0)
    // in the worker (see KernelContext._guided_chunks):
    %more = llvm.call @GOMP_loop_guided_start(0, %items, 1, %chunk, %lo, %hi)
    ...   body(load %lo, load %hi); %more = llvm.call @GOMP_loop_guided_next(%lo, %hi) ...
    llvm.call @GOMP_loop_end_nowait()

Kernels lower through :data:`kernels.REGISTRY`; `kernels_nn` (softmax, layer norm,
attention, the matmul epilogue) and `kernels_gemm` (the packed GEMM) register their emitters
there when this module is imported. ``buf.packed_weight`` takes a weights-table slot named
after its layout (``"fc.weight@panels64t"``, `dialects.packing.PanelLayout`), which the runtime
fills with the packed copy of the weight.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, MemRefType, ModuleOp, StringAttr, UnitAttr, i8, i32, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from tensor_graphs.codegen.llvm.kernels import REGISTRY, LoweringError, check_memref, splat_value
from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder, Index
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.dense import numpy_from_dense
from tensor_graphs.dialects.packing import PanelLayout
from tensor_graphs.runtime_support.signature import GraphSignature, TensorSpec
from tensor_graphs.runtime_support.threads import (
    GOMP_LOOP_GUIDED_NEXT,
    GOMP_LOOP_GUIDED_START,
    GOMP_LOOP_END_NOWAIT,
    GOMP_PARALLEL,
    NUM_THREADS_SYMBOL,
    OMP_GET_NUM_THREADS,
    OMP_GET_THREAD_NUM,
)

try:  # softmax, layer_norm, attention: registered into REGISTRY on import
    from tensor_graphs.codegen.llvm import kernels_nn  # noqa: F401
except ModuleNotFoundError as e:  # pragma: no cover - until kernels_nn.py lands
    if e.name != "tensor_graphs.codegen.llvm.kernels_nn":
        raise
    kernels_nn = None  # type: ignore[assignment]

from tensor_graphs.codegen.llvm import kernels_gemm  # noqa: E402,F401  (buf.packed_matmul, registered on import)

try:  # rope: registered into REGISTRY on import
    from tensor_graphs.codegen.llvm import kernels_rope  # noqa: F401
except ModuleNotFoundError as e:  # pragma: no cover - until kernels_rope.py lands
    if e.name != "tensor_graphs.codegen.llvm.kernels_rope":
        raise

#: Kernels whose emitters live in `kernels_nn.py`.
NN_KERNELS = (buf.SoftmaxOp, buf.LayerNormOp, buf.AttentionOp)

#: Argument order of every graph function (the native ABI).
ABI_ARGS: tuple[str, ...] = ("arena", "weights", "inputs", "outputs", "dims")

#: libc's clock, read by profiled graphs: ``int clock_gettime(clockid_t, struct timespec *)``
CLOCK_GETTIME = "clock_gettime"
CLOCK_GETTIME_TYPE = llvm.LLVMFunctionType([i32, PTR], i32)
#: libgomp: ``void GOMP_parallel(void (*fn)(void *), void *data, unsigned threads, unsigned flags)``
GOMP_PARALLEL_TYPE = llvm.LLVMFunctionType([PTR, PTR, i32, i32])
#: ``int omp_get_thread_num(void)``, ``int omp_get_num_threads(void)``
OMP_QUERY_TYPE = llvm.LLVMFunctionType([], i32)
#: ``bool GOMP_loop_guided_start(long start, long end, long incr, long chunk, long *istart, long *iend)``
#: (C's ``bool``: an ``i8``, 0 or 1)
GOMP_LOOP_START_TYPE = llvm.LLVMFunctionType([i64, i64, i64, i64, PTR, PTR], i8)
#: ``bool GOMP_loop_guided_next(long *istart, long *iend)``
GOMP_LOOP_NEXT_TYPE = llvm.LLVMFunctionType([PTR, PTR], i8)
#: ``void GOMP_loop_end_nowait(void)``
GOMP_LOOP_END_NOWAIT_TYPE = llvm.LLVMFunctionType([])
#: A team's threads take a parallel kernel's items in guided chunks (each the items left over
#: the threads) of at least ``items / (threads * this)``: the first chunks are as long as a
#: static split's (a GEMM keeps streaming its panels in order), the last ones short enough that
#: a core slowed by something else (another process, a busy hyperthread sibling) takes fewer
#: instead of holding the team up at the end.
CHUNKS_PER_THREAD = 16
#: ``CLOCK_MONOTONIC`` of this platform (1 on Linux)
CLOCK_MONOTONIC: int = getattr(time, "CLOCK_MONOTONIC", 1)


def _pred(name: str) -> IntegerAttr:
    return IntegerAttr(llvm.ICmpPredicateFlag(name).to_int(), i64)


def _shape(value: SSAValue) -> list[int]:
    return list(value.type.get_shape())  # type: ignore[attr-defined]


def _dims(shape: list[int]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def kernel_label(op: buf.KernelOp) -> str:
    """What a profile calls a kernel: its op, a short shape description, its variant, and the
    name of its output when it has one: ``buf.matmul 128x768 @ 768x2304 gelu (%h)``,
    ``buf.attention q 1x12x128x64 kv 1x12x128x64 causal``, ``buf.reduce 128x768 -> 128 sum``."""
    if isinstance(op, buf.MatmulOp):
        ta, tb, _, _ = op.flags
        a, b = _shape(op.inputs[0]), _shape(op.inputs[1])
        for shape, transposed in ((a, ta), (b, tb)):
            if transposed and len(shape) >= 2:
                shape[-2:] = shape[-1], shape[-2]
        what = f"{_dims(a)} @ {_dims(b)}"
    elif isinstance(op, buf.PackedMatmulOp):
        a = _shape(op.inputs[0])
        what = f"{_dims(a)} @ {a[-1]}x{_shape(op.output)[-1]}"
    elif isinstance(op, buf.AttentionOp):
        what = f"q {_dims(_shape(op.inputs[0]))} kv {_dims(_shape(op.inputs[1]))}"
        what += " causal" * bool(op.causal.value.data) + " kv_cache" * bool(op.kv_cache.value.data)
    else:
        out = _shape(op.output)
        first = _shape(op.inputs[0]) if op.inputs else out
        what = _dims(out) if first == out else f"{_dims(first)} -> {_dims(out)}"
    for prop in ("fn", "kind", "activation"):
        variant = op.properties.get(prop)
        if isinstance(variant, StringAttr) and variant.data != "none":
            what += f" {variant.data}"
    name = op.output.name_hint
    return f"{op.name} {what}" + (f" (%{name})" if name else "")


class _GraphLowering:
    """Lowers one `func.func` of `buf` ops into one `llvm.func`; implements `KernelContext`."""

    def __init__(self, fn: func.FuncOp, module: ModuleOp, declarations: dict[str, llvm.FuncOp], profile: bool = False):
        self.fn = fn
        self.module = module
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

    def declare(self, name: str, type: llvm.LLVMFunctionType) -> None:
        if name not in self.declarations:
            self.declarations[name] = llvm.FuncOp(name, type, linkage=llvm.LinkageAttr("external"))

    def parallel(
        self,
        items: Index,
        body: Callable[[SSAValue, SSAValue, SSAValue, list[SSAValue]], None],
        values: Sequence[SSAValue] = (),
        max_threads: int | None = None,
    ) -> None:
        """Share ``[0, items)`` among the threads in contiguous chunks and run
        ``body(start, end, thread, values)`` on each chunk (see the module doc; a thread may
        take several, so ``body`` must not assume one range per thread): ``values`` are i64s of
        the kernel as the threads see them. At most ``max_threads`` threads (their scratch)."""
        if self._kernel_ptrs is None or self._parallel_depth:
            raise LoweringError("convert-buffer-to-llvm: parallel() is for the body of one kernel, not nested")
        main, kb = self.b, self.b
        caps = [c for c in (items if isinstance(items, int) else None, max_threads) if c is not None]
        if caps and min(caps) <= 1:  # one thread at most: the body runs in the kernel itself
            self._parallel_depth += 1
            try:
                body(kb.i64(0), kb.i64(items) if isinstance(items, int) else items, kb.i64(0), list(values))
            finally:
                self._parallel_depth -= 1
            return
        self.declare(GOMP_PARALLEL, GOMP_PARALLEL_TYPE)
        self.declare(OMP_GET_THREAD_NUM, OMP_QUERY_TYPE)
        self.declare(OMP_GET_NUM_THREADS, OMP_QUERY_TYPE)
        if NUM_THREADS_SYMBOL not in self.declarations:
            self.declarations[NUM_THREADS_SYMBOL] = llvm.GlobalOp(i32, NUM_THREADS_SYMBOL, "external")
        kernel = self.kernel_functions_pending[0]
        worker_name = f"{kernel.sym_name.data}__par{self._workers}"
        self._workers += 1
        worker = llvm.FuncOp(worker_name, llvm.LLVMFunctionType([PTR]), linkage=llvm.LinkageAttr("internal"))
        self.kernel_functions_pending.append(worker)
        # the kernel: its buffer pointers and the values into a stack table, then the team
        ptrs = list(dict.fromkeys(self._kernel_ptrs.values()))
        shared: list[SSAValue] = [*ptrs, *values]
        if not isinstance(items, int):
            shared.append(items)
        size = kb.i64(max(len(shared), 1))
        alloca = llvm.AllocaOp(size, PTR, alignment=8)  # (ptr-typed: llvmlite then takes i64 stores too)
        kb.entry.insert_op_after(alloca, size.owner)  # type: ignore[arg-type]
        table = alloca.results[0]

        def slot(b: FunctionBuilder, base: SSAValue, i: int, type) -> SSAValue:  # 8 bytes: a pointer or an i64
            return b.add(llvm.GEPOp(base, [llvm.GEP_USE_SSA_VAL], type, ssa_indices=[b.i64(i)], inbounds=True))

        for i, v in enumerate(shared):
            kb.store(v, slot(kb, table, i, v.type))
        wanted = kb.load(kb.add(llvm.AddressOfOp(NUM_THREADS_SYMBOL, PTR)), i32)
        if caps:  # never more threads than items (or scratch slots)
            cap = min(caps)
            wanted = kb.add(llvm.SelectOp(kb.add(llvm.ICmpOp(wanted, kb.i32(cap), _pred("slt"))), wanted, kb.i32(cap)))
        team, alone, done = kb.new_block(), kb.new_block(), kb.new_block()
        kb.add(llvm.CondBrOp(kb.add(llvm.ICmpOp(wanted, kb.i32(1), _pred("sgt"))), team, [], alone, []))
        kb.block = team
        kb.add(llvm.CallOp(GOMP_PARALLEL, kb.add(llvm.AddressOfOp(worker_name, PTR)), table, wanted, kb.i32(0)))
        kb.add(llvm.BrOp(done))
        kb.block = alone
        kb.add(llvm.CallOp(worker_name, table))
        kb.add(llvm.BrOp(done))
        kb.block = done
        # the worker: reload everything, take this thread's range
        wb = FunctionBuilder(worker.body, [PTR])
        wb.args[0].name_hint = "shared"
        loaded = [wb.load(slot(wb, wb.args[0], i, v.type), v.type) for i, v in enumerate(shared)]
        for v, w in zip(shared, loaded):
            w.name_hint = v.name_hint
        mapping = dict(zip(ptrs, loaded[: len(ptrs)]))
        inner_values = loaded[len(ptrs) : len(ptrs) + len(values)]
        n = wb.i64(items) if isinstance(items, int) else loaded[-1]
        tid = wb.add(llvm.SExtOp(wb.add(llvm.CallOp(OMP_GET_THREAD_NUM, return_type=i32)), i64))
        nt = wb.add(llvm.SExtOp(wb.add(llvm.CallOp(OMP_GET_NUM_THREADS, return_type=i32)), i64))
        tid.name_hint, nt.name_hint = "thread", "threads"
        start, end, finish = self._guided_chunks(wb, n, nt)
        saved_ptrs = self._kernel_ptrs
        self.b, self._kernel_ptrs = wb, {k: mapping[v] for k, v in saved_ptrs.items()}
        self._parallel_depth += 1
        try:
            body(start, end, tid, inner_values)
            finish()
            wb.add(llvm.ReturnOp())
        finally:
            self.b, self._kernel_ptrs = main, saved_ptrs
            self._parallel_depth -= 1

    def _guided_chunks(
        self, wb: FunctionBuilder, n: SSAValue, nt: SSAValue
    ) -> tuple[SSAValue, SSAValue, Callable[[], None]]:
        """In worker ``wb``: the loop over the chunks this thread takes of ``[0, n)``. Returns
        the chunk's ``start`` and ``end`` (the cursor is in the loop body) and ``finish()``, which
        closes the loop (the cursor is then after it).

        A team (``nt > 1``) shares the range through libgomp's guided schedule with chunks of at
        least ``max(1, n / (nt * CHUNKS_PER_THREAD))``; a lone call (no team) takes the whole
        range at once, without libgomp::

            if nt > 1: more = GOMP_loop_guided_start(0, n, 1, chunk, &start, &end)
            else:      start, end, more = 0, n, true
            while more:
                body(start, end)
                more = nt > 1 && GOMP_loop_guided_next(&start, &end)
            if nt > 1: GOMP_loop_end_nowait()
        """
        for name, type in ((GOMP_LOOP_GUIDED_START, GOMP_LOOP_START_TYPE),
                           (GOMP_LOOP_GUIDED_NEXT, GOMP_LOOP_NEXT_TYPE),
                           (GOMP_LOOP_END_NOWAIT, GOMP_LOOP_END_NOWAIT_TYPE)):
            self.declare(name, type)
        bounds = llvm.AllocaOp(wb.i64(2), i64, alignment=8)
        wb.add(bounds)
        lo = bounds.results[0]
        hi = wb.gep(lo, 1, i64)
        team = wb.add(llvm.ICmpOp(nt, wb.i64(1), _pred("sgt")))
        shared_start, lone_start, body_block, exit_block = wb.new_block(), wb.new_block(), wb.new_block(), wb.new_block()
        wb.add(llvm.CondBrOp(team, shared_start, [], lone_start, []))
        wb.block = shared_start
        per = wb.add(llvm.SDivOp(n, wb.mul_i64(nt, wb.i64(CHUNKS_PER_THREAD))))
        chunk = wb.add(llvm.SelectOp(wb.add(llvm.ICmpOp(per, wb.i64(1), _pred("slt"))), wb.i64(1), per))
        got = wb.add(llvm.CallOp(GOMP_LOOP_GUIDED_START, wb.i64(0), n, wb.i64(1), chunk, lo, hi, return_type=i8))
        wb.add(llvm.CondBrOp(wb.add(llvm.ICmpOp(got, wb.constant(0, i8), _pred("ne"))), body_block, [], exit_block, []))
        wb.block = lone_start
        wb.store(wb.i64(0), lo)
        wb.store(n, hi)
        wb.add(llvm.BrOp(body_block))
        wb.block = body_block
        start, end = wb.load(lo, i64), wb.load(hi, i64)
        start.name_hint, end.name_hint = "start", "end"

        def finish() -> None:
            shared_next, done = wb.new_block(), wb.new_block()
            wb.add(llvm.CondBrOp(team, shared_next, [], exit_block, []))
            wb.block = shared_next
            more = wb.add(llvm.CallOp(GOMP_LOOP_GUIDED_NEXT, lo, hi, return_type=i8))
            wb.add(llvm.CondBrOp(wb.add(llvm.ICmpOp(more, wb.constant(0, i8), _pred("ne"))), body_block, [], exit_block, []))
            wb.block = exit_block
            end_team = wb.new_block()
            wb.add(llvm.CondBrOp(team, end_team, [], done, []))
            wb.block = end_team
            wb.add(llvm.CallOp(GOMP_LOOP_END_NOWAIT))
            wb.add(llvm.BrOp(done))
            wb.block = done

        return start, end, finish

    # profiling ----------------------------------------------------------------------

    def _clock(self) -> SSAValue:
        """Nanoseconds of ``CLOCK_MONOTONIC``, read into the entry's timespec."""
        b, ts = self.b, self._timespec
        assert ts is not None
        b.add(llvm.CallOp(CLOCK_GETTIME, b.i32(CLOCK_MONOTONIC), ts, return_type=i32))
        sec = b.load(ts, i64)
        nsec = b.load(b.gep(ts, 1, i64), i64)
        now = b.add_i64(b.mul_i64(sec, b.i64(1_000_000_000)), nsec)
        now.name_hint = "now"
        return now

    def _count(self, kernel: int) -> None:
        """After kernel ``kernel``'s call: add the time since the last reading and one call."""
        assert self._counters is not None and self._last_time is not None
        b = self.b
        now = self._clock()
        elapsed = b.add(llvm.SubOp(now, self._last_time))
        for slot, amount in ((2 * kernel, elapsed), (2 * kernel + 1, b.i64(1))):
            counter = b.gep(self._counters, slot, i64)
            b.store(b.add_i64(b.load(counter, i64), amount), counter)
        self._last_time = now

    # lowering -----------------------------------------------------------------------

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

    def _emit_kernel(self, op: buf.KernelOp, emitter) -> None:
        """Emit ``op`` as its own function and call it from the entry (see the module doc)."""
        main = self.b
        # one argument per distinct pointer (an in-place op passes its buffer once)
        buffers: list[SSAValue] = []
        for v in (*op.inputs, *op.outputs):
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
        kb = FunctionBuilder(kfn.body, [PTR] * len(buffers))
        ptrs: dict[SSAValue, SSAValue] = {}
        for arg, v in zip(kb.args, buffers):
            arg.name_hint = self.values[v].name_hint
        for v in (*op.inputs, *op.outputs):
            ptrs[v] = next(a for a, u in zip(kb.args, buffers) if self.values[u] is self.values[v])
        checks, fail_blocks, dim_values = self._checks, self._fail_blocks, self._dim_values
        self.b, self._kernel_ptrs, self._fail_blocks, self._dim_values = kb, ptrs, {}, {}
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
                self.check(nonnull, "dims is null: this graph keeps state (a KV cache) and reads past from dims[0]")
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
        operands = (*op.inputs, *op.outputs)
        roots: dict[object, int] = {}
        low: dict[object, int] = {}
        for v in operands:
            if (e := self.extents.get(v)) is not None:
                low[e[0]] = min(low.get(e[0], e[1]), e[1])
        layout = []
        for v in operands:
            e = self.extents.get(v)
            layout.append(None if e is None else (roots.setdefault(e[0], len(roots)), e[1] - low[e[0]], e[2] - low[e[0]]))
        return (
            op.name,
            tuple(sorted((k, str(a)) for k, a in op.properties.items())),
            tuple(str(v.type) for v in operands),
            tuple(next(i for i, u in enumerate(buffers) if self.values[u] is self.values[v]) for v in operands),
            tuple(noalias),
            tuple(layout),
            tuple(splat_value(v) for v in op.inputs),
            str(op.regions[0]) if op.regions else None,
        )

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
        self.b = b = FunctionBuilder(llfn.body, [PTR] * len(ABI_ARGS))
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
                    why = " (its emitter lives in codegen/llvm/kernels_nn.py, which is missing)" if (
                        kernels_nn is None and isinstance(op, NN_KERNELS)
                    ) else ""
                    raise LoweringError(f"convert-buffer-to-llvm: no codegen for {op.name}{why}")
                self._emit_kernel(op, emitter)
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
            elif isinstance(op, buf.SubviewOp):
                el = op.result.type.element_type
                self.values[op.result] = b.gep(self.ptr(op.input), op.offset.value.data, el)
                width = max(el.bitwidth // 8, 1)
                base = self.extents.get(op.input, (op.input, 0, 0))
                start = base[1] + op.offset.value.data * width
                self.extents[op.result] = (base[0], start, start + buf.nbytes(op.result.type))
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
            constants={n: numpy_from_dense(op.value) for n, op in self.constants},
            errors=tuple(self.errors),
            intermediate_bytes=_int_attr(self.fn, "tg.intermediate_bytes") or _int_attr(self.module, "tg.intermediate_bytes"),
            states=tuple(TensorSpec.of(t, n) for n, t in self.state_types.items()),  # type: ignore[arg-type]
            profile=tuple(self.labels) if self.profile else None,
            packed=tuple(self.packed_slots),
        )
        return llfn, signature


def _weight_slot_name(op: buf.WeightOp | buf.PackedWeightOp) -> str:
    """A weight's name in the weights table; a packed copy's names its layout too
    (``"fc.weight@panels64t"``, see `dialects.packing.PanelLayout`)."""
    if isinstance(op, buf.WeightOp):
        return op.weight_name.data
    nr = op.result.type.get_shape()[2]
    return PanelLayout(op.weight_name.data, nr, bool(op.transposed.value.data)).slot_name


def _int_attr(op: Operation, name: str) -> int:
    """An integer attribute set by plan-memory (0 when absent)."""
    a = op.attributes.get(name)
    return a.value.data if isinstance(a, IntegerAttr) else 0


def _check_sizes(fn: func.FuncOp) -> None:
    """Every buffer of ``fn`` is smaller than ``buf.MAX_BUFFER_BYTES`` (indices are int64)."""
    for value in (*fn.body.block.args, *(r for op in fn.walk() for r in op.results)):
        if isinstance(value.type, MemRefType) and (size := buf.nbytes(value.type)) >= buf.MAX_BUFFER_BYTES:
            what = f"%{value.name_hint}" if value.name_hint else "a buffer"
            raise LoweringError(
                f"convert-buffer-to-llvm: in @{fn.sym_name.data}: {what} ({value.type}) holds {size:.3e} bytes, more "
                "than 64-bit indices can address (2^62); check the shapes"
            )


@dataclass(frozen=True)
class ConvertBufferToLLVMPass(ModulePass):
    """Lower the one planned graph function of a `buf` module to an `llvm.func`; with
    ``profile=true``, time every kernel call into per-kernel counters (see the module doc)."""

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
        declarations: dict[str, llvm.FuncOp] = {}
        lowering = _GraphLowering(funcs[0], op, declarations, profile=self.profile)
        llfn, signature = lowering.lower()
        funcs[0].detach()
        funcs[0].erase()
        for decl in declarations.values():
            op.body.block.add_op(decl)
        op.body.block.add_op(llfn)
        for kernel in lowering.kernel_functions:
            op.body.block.add_op(kernel)
        signature.attach(op)
