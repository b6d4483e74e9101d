"""The parallel regions of `convert-buffer-to-llvm`, a mixin of
`convert_buffer_to_llvm._GraphLowering` (whose state they use: the cursor ``b``, the kernel's
pointers and pending functions, the declarations).

Parallel kernels (`KernelContext.parallel`): the kernel function stores its buffer pointers
(and any i64 values the work needs) in a table on its stack and runs a worker function
``<kernel>__par<k>(ptr %shared)`` on a team of ``min(tg_num_threads, items)`` threads through
libgomp (a direct call when that is 1); each worker reloads the pointers and, in a team, takes
chunks of ``[0, items)`` through libgomp's guided schedule until none is left (a lone call takes
the whole range; a kernel that can use only one thread, one item or one scratch slot runs its
work in place, with no worker)::

    %n = llvm.load @tg_num_threads                      // runtime_support.threads
    llvm.call @GOMP_parallel(@forward__3_packed_matmul__par0, %shared, %n, 0)
    // in the worker (see ParallelRegions._guided_chunks):
    %more = llvm.call @GOMP_loop_guided_start(0, %items, 1, %chunk, %lo, %hi)
    ...   body(load %lo, load %hi); %more = llvm.call @GOMP_loop_guided_next(%lo, %hi) ...
    llvm.call @GOMP_loop_end_nowait()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, i8, i32, i64
from xdsl.ir import Operation, SSAValue

from tensor_graphs.codegen.llvm.kernels import LoweringError
from tensor_graphs.codegen.llvm.loops import PTR, FunctionBuilder, Index
from tensor_graphs.runtime_support.threads import (
    GOMP_LOOP_GUIDED_NEXT,
    GOMP_LOOP_GUIDED_START,
    GOMP_LOOP_END_NOWAIT,
    GOMP_PARALLEL,
    NUM_THREADS_SYMBOL,
    OMP_GET_NUM_THREADS,
    OMP_GET_THREAD_NUM,
)
from tensor_graphs.target import Target

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
#: The kernel op's attribute capping its team (a tuner's choice, `kernels.PARAMETER_ATTRS`).
THREADS_ATTR = "tg.threads"
#: The kernel op's attribute replacing `CHUNKS_PER_THREAD` (a tuner's choice: 1 is a static
#: split's chunks, more balance a team whose cores are unevenly busy).
CHUNKS_ATTR = "tg.chunks"


def _pred(name: str) -> IntegerAttr:
    return IntegerAttr(llvm.ICmpPredicateFlag(name).to_int(), i64)


class ParallelRegions:
    """`KernelContext.parallel` and the guided chunk loop of its workers (a mixin of
    `convert_buffer_to_llvm._GraphLowering`)."""

    #: the machine compiled for (set by the lowering)
    target: Target
    #: the buf kernel op being emitted (set by the lowering): its ``tg.threads`` caps the team
    kernel_op: Operation | None = None

    def parallel(
        self,
        items: Index,
        body: Callable[[SSAValue, SSAValue, SSAValue, list[SSAValue]], None],
        values: Sequence[SSAValue] = (),
        max_threads: int | None = None,
        work: tuple[float, float] | None = None,
        pays: SSAValue | None = None,
    ) -> None:
        """Share ``[0, items)`` among the threads in contiguous chunks and run
        ``body(start, end, thread, values)`` on each chunk (see the module doc; a thread may
        take several, so ``body`` must not assume one range per thread): ``values`` are i64s of
        the kernel as the threads see them. At most ``max_threads`` threads (their scratch), and
        at most as many as ``work`` (the kernel's (flops, bytes)) pays for: a thread must bring
        the target's `ThreadWork` (a parallel region costs a wake-up, a split and a join). A
        kernel of run-time sizes decides its team at its largest sizes and passes ``pays``, an
        i1 of the kernel: when false in a call, the body runs in the kernel alone."""
        if self._kernel_ptrs is None or self._parallel_depth:
            raise LoweringError("convert-buffer-to-llvm: parallel() is for the body of one kernel, not nested")
        main, kb = self.b, self.b
        paid = self.target.thread_work.threads(*work) if work is not None else None
        chosen = self.kernel_op.attributes.get(THREADS_ATTR) if self.kernel_op is not None else None
        if chosen is not None and (not isinstance(chosen, IntegerAttr) or chosen.value.data < 1):
            raise LoweringError(f"{self.kernel_op.name}: {THREADS_ATTR} must be a positive integer, got {chosen}")
        pinned = chosen.value.data if chosen is not None else None
        caps = [c for c in (items if isinstance(items, int) else None, max_threads, paid, pinned) if c is not None]
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
        table = kb.stack(max(len(shared), 1), PTR, alignment=8)  # (ptr-typed: llvmlite then takes i64 stores too)

        def slot(b: FunctionBuilder, base: SSAValue, i: int, type) -> SSAValue:  # 8 bytes: a pointer or an i64
            return b.add(llvm.GEPOp(base, [llvm.GEP_USE_SSA_VAL], type, ssa_indices=[b.i64(i)], inbounds=True))

        for i, v in enumerate(shared):
            kb.store(v, slot(kb, table, i, v.type))
        wanted = kb.load(kb.add(llvm.AddressOfOp(NUM_THREADS_SYMBOL, PTR)), i32)
        if caps:  # never more threads than items (or scratch slots)
            cap = min(caps)
            wanted = kb.add(llvm.SelectOp(kb.add(llvm.ICmpOp(wanted, kb.i32(cap), _pred("slt"))), wanted, kb.i32(cap)))
        team, alone, done = kb.new_block(), kb.new_block(), kb.new_block()
        go = kb.add(llvm.ICmpOp(wanted, kb.i32(1), _pred("sgt")))
        if pays is not None:  # a kernel of run-time sizes: this call's work pays for the team
            go = kb.add(llvm.AndOp(go, pays))
        kb.add(llvm.CondBrOp(go, team, [], alone, []))
        kb.block = team
        kb.add(llvm.CallOp(GOMP_PARALLEL, kb.add(llvm.AddressOfOp(worker_name, PTR)), table, wanted, kb.i32(0)))
        kb.add(llvm.BrOp(done))
        kb.block = alone
        kb.add(llvm.CallOp(worker_name, table))
        kb.add(llvm.BrOp(done))
        kb.block = done
        # the worker: reload everything, take this thread's range
        wb = FunctionBuilder(worker.body, [PTR], fma=self.target.fma)
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

    def _chunks_per_thread(self) -> int:
        """The kernel op's ``tg.chunks`` (`CHUNKS_ATTR`), else `CHUNKS_PER_THREAD`."""
        attr = self.kernel_op.attributes.get(CHUNKS_ATTR) if self.kernel_op is not None else None
        if attr is None:
            return CHUNKS_PER_THREAD
        if not isinstance(attr, IntegerAttr) or attr.value.data < 1:
            raise LoweringError(f"{self.kernel_op.name}: {CHUNKS_ATTR} must be a positive integer, got {attr}")
        return attr.value.data

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
        per = wb.add(llvm.SDivOp(n, wb.mul_i64(nt, wb.i64(self._chunks_per_thread()))))
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
