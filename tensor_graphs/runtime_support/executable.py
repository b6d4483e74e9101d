"""The callable behind `tensor_graphs.compile`: binds memory once, then one native call per invocation.

A call validates its arguments (count, dtype, shape, contiguity), allocates its outputs, fills
three small pointer tables and calls the graph's native function once; a nonzero status it
returns (an index out of range, say) raises ``IndexError``/``RuntimeError`` with the message
the compiler recorded. Weights are bound when the graph is loaded: read where they are
(never copied), except those a GEMM reads packed into column panels, which are packed once,
here (`dialects.packing`; ``fn.repack()`` refreshes them after the model's parameters change in
place).

**Threads.** Calls may come from several threads at once: each call takes an arena (with its
own input, output and ``dims`` tables) from a small pool and gives it back when it returns, so
calls that overlap in time never share intermediates. The pool holds one arena when the graph is
loaded and grows by one whenever every arena is in use (never beyond the most calls that have
overlapped); ``fn.memory.arenas`` says how many it holds. The native call runs without the GIL,
so overlapping calls run in parallel. A graph with state (a KV cache, below) updates that state
in place, so it runs one call at a time: a call that starts while another is running raises
``RuntimeError`` instead of silently interleaving two sequences.

A graph with persistent state (KV caches, ``signature.states``) binds one array per state when
it is loaded (given ones, or fresh zeroed ones) and updates them in place on every call;
``fn.states`` returns them, so that two graphs (a prefill and a decode graph) can share their
caches: ``decode = CompiledGraph(native, weights, states=prefill.states)``. Such a graph is
called as ``fn(*inputs, past=n)``, ``n`` being the number of positions already cached; it goes
to the native function as ``dims[0]`` (see `signature`)::

    logits = prefill(prompt_ids, past=0)           # writes positions [0, len(prompt))
    logits = decode(next_id, past=len(prompt))     # writes position len(prompt)

A graph compiled with profiling (``profile=True``) also binds its kernel counters (the table
slot after the states, see `signature`); every call adds to them, and ``fn.profile(*inputs,
repeat=n)`` zeroes them, runs the graph ``n`` times and returns a `profile.ProfileReport`
(calls made from other threads meanwhile add to the same counters).
"""

from __future__ import annotations

import dataclasses
import ctypes
import functools
import operator
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tensor_graphs import dtypes
from tensor_graphs.runtime_support.outputs import returned, write_back
from tensor_graphs.runtime_support.profile import ProfileReport
from tensor_graphs.runtime_support.signature import GraphSignature, TensorSpec

#: int32 f(arena*, weights**, inputs**, outputs**, dims*): 0, or an error status (signature.errors)
_ABI = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)

#: Alignment of the arena base address; plan-memory aligns every offset to 64 bytes.
ARENA_ALIGNMENT = 64


@dataclass(frozen=True)
class MemoryReport:
    """Bytes a compiled graph holds: its arena, its bound weights, its persistent state."""

    arena_bytes: int
    #: weights (and IR constants) read where they are
    weight_bytes: int
    state_bytes: int = 0
    #: what the intermediates would take without reuse (the planner's input); arena / this = reuse
    intermediate_bytes: int = 0
    #: the weights packed into column panels for the GEMMs (copies made when the graph was loaded)
    packed_bytes: int = 0
    #: arenas of ``arena_bytes`` each held now: one per call that has run at the same time as others
    arenas: int = 1
    #: the inputs and outputs of one call at ``sizes`` (not held by the graph: the caller's and
    #: allocated per call)
    io_bytes: int = 0
    #: a dynamic graph's size symbols, (name, min, max) each, and the specs of its inputs and
    #: outputs: `at` answers for other sizes
    symbols: tuple[tuple[str, int, int], ...] = ()
    io: tuple[TensorSpec, ...] = ()
    #: the symbols' values this report is for (a dynamic graph: the largest, unless `at` says)
    sizes: tuple[tuple[str, int], ...] = ()

    @property
    def total_bytes(self) -> int:
        return self.arena_bytes * self.arenas + self.weight_bytes + self.packed_bytes + self.state_bytes

    def at(self, **sizes: int) -> MemoryReport:
        """This report at the size symbols' ``sizes`` (``fn.memory.at(seq=300)``): a ValueError
        for a symbol the graph has not or a size out of its range. The arena is planned at the
        largest sizes (`plan-memory`), so only the inputs and outputs change."""
        known = {name: (lo, hi) for name, lo, hi in self.symbols}
        for name, value in sizes.items():
            if name not in known:
                raise ValueError(f"no size symbol {name!r}: this graph has {', '.join(known) or 'none'}")
            lo, hi = known[name]
            if not lo <= value <= hi:
                raise ValueError(f"size symbol {name} = {value} is outside its range [{lo}, {hi}]")
        values = {**dict(self.sizes), **sizes}
        return dataclasses.replace(self, io_bytes=io_bytes(self.io, values), sizes=tuple(sorted(values.items())))

    def __str__(self) -> str:
        mib = 1 << 20
        pool = f" x {self.arenas}" if self.arenas != 1 else ""
        at = f" (at {', '.join(f'{k}={v}' for k, v in self.sizes)})" if self.sizes else ""
        io = f", inputs and outputs {self.io_bytes / mib:.3f} MiB{at}" if self.io_bytes else ""
        return (
            f"arena {self.arena_bytes / mib:.3f} MiB{pool}, weights {self.weight_bytes / mib:.3f} MiB, "
            f"packed weights {self.packed_bytes / mib:.3f} MiB, state {self.state_bytes / mib:.3f} MiB{io}"
        )


def io_bytes(specs: Sequence[TensorSpec], values: Mapping[str, int]) -> int:
    """Bytes of tensors of ``specs`` at the size symbols' ``values``."""
    from tensor_graphs.dialects.symbolic import evaluate

    return sum(int(np.prod(evaluate(s.shape, values), dtype=np.int64)) * s.dtype.itemsize for s in specs)


def aligned_empty(nbytes: int, alignment: int = ARENA_ALIGNMENT) -> np.ndarray:
    """A zeroed uint8 buffer of ``nbytes`` whose address is a multiple of ``alignment``."""
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + nbytes]


def _bind_state(spec: TensorSpec, array: np.ndarray | None) -> np.ndarray:
    """A given state array (checked) or, for None, a fresh zeroed 64-byte aligned one."""
    if array is None:
        nbytes = int(np.prod(spec.shape, dtype=np.int64)) * spec.dtype.itemsize
        return aligned_empty(nbytes).view(spec.dtype).reshape(spec.shape)
    if not isinstance(array, np.ndarray):
        raise TypeError(f"state '{spec.name}' must be a NumPy array, got {type(array).__name__}")
    if array.dtype != spec.dtype:
        raise TypeError(f"state '{spec.name}' has dtype {array.dtype}, expected {spec.dtype}")
    if array.shape != spec.shape:
        raise ValueError(f"state '{spec.name}' has shape {list(array.shape)}, expected {list(spec.shape)}")
    if not array.flags.c_contiguous:
        raise ValueError(f"state '{spec.name}' must be C-contiguous")
    if not array.flags.writeable:
        raise ValueError(f"state '{spec.name}' must be writable (the graph updates it in place)")
    return array


def _checked_weights(sig: GraphSignature, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights ``sig`` reads, by name, each checked against what its kernels read
    (`bound_weights.check_weights`; a graph whose signature records no weight types: present)."""
    from tensor_graphs.runtime_support.bound_weights import WeightMismatchError, check_weights, signature_weights

    sources = {n: (layout.source if (layout := sig.packed_layout(n)) else n) for n in sig.weight_table if n not in sig.constants}
    if sig.weight_specs:
        check_weights(signature_weights(sig), weights, "the weights given")
    elif missing := [s for s in dict.fromkeys(sources.values()) if s not in weights]:
        raise WeightMismatchError("weights missing for this graph: " + ", ".join(missing))
    return {s: weights[s] for s in sources.values()}


def _bind_weight(name: str, array: np.ndarray, expected: np.dtype) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"weight '{name}' must be a NumPy array, got {type(array).__name__}")
    if array.dtype != expected:
        raise TypeError(f"weight '{name}' has dtype {array.dtype}, expected {expected}")
    if not array.flags.c_contiguous:
        raise ValueError(f"weight '{name}' must be C-contiguous")
    return array


def _checked_past(past) -> int:
    """``past`` as an int >= 0, else a TypeError or ValueError saying what it got."""
    try:
        past = operator.index(past)
    except TypeError:
        raise TypeError(f"past must be an int, got {type(past).__name__}") from None
    if past < 0:
        raise ValueError(f"past must be >= 0, got {past}")
    return past


def _stateless_past(past) -> int:
    """``past`` for a graph without state: 0 when not given, else checked as for one with state."""
    return 0 if past is None else _checked_past(past)


class _CallSlot:
    """What one call of the native function writes: an arena and the input, output and ``dims``
    tables (their addresses are the call's arguments, with the shared weights table)."""

    __slots__ = ("arena", "inputs", "outputs", "dims", "args")

    def __init__(self, sig: GraphSignature, weight_table: ctypes.Array):
        self.arena = aligned_empty(max(sig.arena_size, ARENA_ALIGNMENT))
        self.inputs = (ctypes.c_void_p * max(len(sig.inputs), 1))()
        self.outputs = (ctypes.c_void_p * max(len(sig.outputs), 1))()
        #: dims[0] = past (read by graphs with states), dims[1 + i] = size symbol i (dynamic graphs)
        self.dims = (ctypes.c_int64 * (1 + len(sig.symbols)))()
        self.args = (
            self.arena.ctypes.data,
            ctypes.addressof(weight_table),
            ctypes.addressof(self.inputs),
            ctypes.addressof(self.outputs),
            ctypes.addressof(self.dims),
        )


class CompiledGraph:
    """A compiled graph: ``fn(*inputs)`` (``fn(*inputs, past=n)`` with states) runs it;
    ``fn.ir(level)``, ``fn.memory``, ``fn.states`` describe it.

    ``states`` binds arrays to the graph's states by name (names it does not use are ignored);
    a state not given is allocated zeroed. Weights read by packed GEMMs (``signature.packed``)
    are packed here, once: from ``packed`` (a dict by slot name, shared with other graphs and
    filled with what this one packs) when it has them.
    """

    def __init__(
        self,
        native,  # tensor_graphs.codegen.llvm.jit.NativeGraph
        weights: Mapping[str, np.ndarray],
        ir: Mapping[str, str] | None = None,
        states: Mapping[str, np.ndarray] | None = None,
        packed: dict[str, np.ndarray] | None = None,
    ):
        self._native = native  # keeps the execution engine (and so the code) alive
        sig: GraphSignature = native.signature
        self.signature = sig
        self._ir = dict(ir or {})
        self._ir.setdefault("llvm", native.ir_text)

        self._given = _checked_weights(sig, weights)
        #: packed copies by slot name; a dict shared with other graphs (a decoder's two) packs each once
        self._packed = packed if packed is not None else {}
        specs = {spec.name: spec for spec in sig.weight_specs}
        self._weights = [self._bind_slot(name, weights, specs.get(name)) for name in sig.weight_table]
        given = states or {}
        self._states = {spec.name: _bind_state(spec, given.get(spec.name)) for spec in sig.states}
        table = [a.ctypes.data for a in self._weights] + [a.ctypes.data for a in self._states.values()]
        #: profiled graphs: [ns, calls] per kernel, added to by every call (signature.profile_slot)
        self._counters = np.zeros(max(2 * len(sig.profile), 1), np.int64) if sig.profile is not None else None
        if self._counters is not None:
            table.append(self._counters.ctypes.data)
        self._weight_table = (ctypes.c_void_p * max(len(table), 1))(*table)
        #: every call slot (arena + tables) made so far, and those not in use by a call now
        #: (list.pop / list.append are atomic: taking and returning a slot needs no lock)
        self._slots = [_CallSlot(sig, self._weight_table)]
        self._free = list(self._slots)
        #: graphs with state run one call at a time (the state is updated in place)
        self._running = threading.Lock() if self._states else None
        self._fn = _ABI(native.address)
        self._out_specs = [(s.shape, s.dtype) for s in sig.outputs]
        #: a dynamic graph's sizes: the symbols' values from each call's input shapes, checked
        self._binder = sig.binder() if sig.symbols else None
        self._in_shapes = [self._binder.shaper(s) for s in sig.inputs] if self._binder else []
        self._out_shaper = [self._binder.shaper(s) for s in sig.outputs] if self._binder else []
        #: input shapes -> (the symbols' values, the inputs' shapes, the outputs' shapes)
        self._sizes_seen: dict[tuple, tuple[list[int], list, list]] = {}
        #: torch dtypes of the inputs, (shape, torch dtype) of the outputs: made at the first torch call
        self._torch: tuple[list, list] | None = None
        #: the kernel paths chosen (`tuning.tuner.TuningReport`), set by `compile_module`
        self.tuning = None
        #: where the outputs go in what the model returns (`outputs.OutputStructure`; set by
        #: `tensor_graphs.compile`), None: the one output, or a tuple of them
        self.output_structure = None

    def _bind_slot(self, name: str, weights: Mapping[str, np.ndarray], spec: TensorSpec | None) -> np.ndarray:
        """The array bound in weight-table slot ``name`` (``spec``: what its kernels read, where
        the signature says): an IR constant, a packed copy (made once, shared through
        ``self._packed``), or the weight itself."""
        sig = self.signature
        if name in sig.constants:
            return sig.constants[name]
        if (layout := sig.packed_layout(name)) is None:
            return _bind_weight(name, weights[name], spec.dtype if spec is not None else np.dtype(np.float32))
        if name not in self._packed:
            source = weights[layout.source]  # float32, or a bf16 model's weight (its bits) for bf16 panels
            bf16 = getattr(layout, "bf16_source", False) and getattr(source, "dtype", None) == np.uint16
            self._packed[name] = layout.pack(_bind_weight(layout.source, source, np.dtype(np.uint16 if bf16 else np.float32)))
        return self._packed[name]

    # ------------------------------------------------------------------ calling

    def __call__(self, *args, past: int | None = None):
        sig = self.signature
        if len(args) != len(sig.inputs):
            names = ", ".join(f"{s.name}: {s}" for s in sig.inputs)
            raise TypeError(f"expected {len(sig.inputs)} input(s) ({names}), got {len(args)}")
        running = self._running
        if running is not None:
            past = self._enter(past)
        try:
            slot = self._free.pop()
        except IndexError:  # every arena is in use by a call on another thread: one more
            slot = self._grow(running)
        try:
            inputs, outputs = slot.inputs, slot.outputs
            torch_mode, held = None, []
            shapes, out_shapes = self._bind_sizes(slot, args)
            for i, (arg, spec) in enumerate(zip(args, sig.inputs)):
                is_torch = not isinstance(arg, np.ndarray)
                if torch_mode is None:
                    torch_mode = is_torch
                elif torch_mode != is_torch:
                    raise TypeError("pass all inputs as NumPy arrays or all as torch tensors, not a mix")
                if is_torch:
                    if self._torch is None:
                        self._torch = _torch_specs(sig)
                    arg = _torch_input(arg, spec, i, self._torch[0][i], shapes)
                    inputs[i] = arg.data_ptr()
                else:
                    arg = _numpy_input(arg, spec, i, shapes)
                    inputs[i] = arg.ctypes.data
                held.append(arg)  # a contiguous copy lives until the call returns
            if torch_mode is None and not args and _torch_importable():  # no inputs: torch tensors, as eager
                torch_mode, self._torch = True, self._torch or _torch_specs(sig)
            if torch_mode:
                assert self._torch is not None
                empty = _TORCH_API[0]
                outs = [empty(shape, dtype=dtype) for shape, dtype in self._out_shapes(out_shapes, self._torch[1])]
                for i, o in enumerate(outs):
                    outputs[i] = o.data_ptr()
            else:
                outs = [np.empty(shape, dtype=dtype) for shape, dtype in self._out_shapes(out_shapes, self._out_specs)]
                for i, o in enumerate(outs):
                    outputs[i] = o.ctypes.data
            if running is not None:
                slot.dims[0] = past
            else:  # a graph without state may still read past (an attention over a cache passed in)
                slot.dims[0] = _stateless_past(past)
            if status := self._fn(*slot.args):
                raise sig.status_error(status, past, inputs=args)
        finally:
            self._free.append(slot)
            if running is not None:
                running.release()
        write_back(self.output_structure, args, outs)
        return returned(outs, self.output_structure)

    def _bind_sizes(self, slot: _CallSlot, args) -> tuple[list | None, list | None]:
        """A dynamic graph: its size symbols read from the inputs' shapes and checked
        (`signature.SizeBinder`; a ValueError names the input, dim, symbol and range) into
        ``slot.dims[1:]``; (the shapes each input must have, each output's). (None, None) for a
        static graph (or when an input has no shape: its check says what it is). The sizes of the last shapes seen are
        kept (a server calls with few distinct shapes): a repeated shape costs a dict lookup."""
        if self._binder is None:
            return None, None
        try:
            key = tuple(a.shape for a in args)
        except AttributeError:
            return None, None
        known = self._sizes_seen.get(key)
        if known is None:
            values = self._binder.dims([tuple(s) for s in key])
            known = (values, [shape(values) for shape in self._in_shapes], [shape(values) for shape in self._out_shaper])
            if len(self._sizes_seen) >= 256:
                self._sizes_seen.clear()
            self._sizes_seen[key] = known
        values, in_shapes, out_shapes = known
        slot.dims[1:] = values
        return in_shapes, out_shapes

    @staticmethod
    def _out_shapes(out_shapes: list | None, specs: list) -> list:
        """(shape, dtype) of each output: a dynamic graph's at this call's sizes (``out_shapes``)."""
        if out_shapes is None:
            return specs
        return [(shape, dtype) for shape, (_, dtype) in zip(out_shapes, specs)]

    def _enter(self, past) -> int:
        """Start a call of a graph with state: ``past`` checked, the graph held (one call at a time)."""
        sig = self.signature
        if past is None:
            raise TypeError(f"{sig.entry} keeps state ({', '.join(self._states)}): pass past=<positions already cached>")
        past = _checked_past(past)
        assert self._running is not None
        if not self._running.acquire(blocking=False):
            raise RuntimeError(
                f"{sig.entry} was called while another call of it is running (from another thread): it "
                f"updates its state ({', '.join(self._states)}) in place, so it runs one call at a time; "
                "give each thread its own compiled graph (tg.compile_decoder per concurrent sequence) or "
                "serialise the calls with a lock"
            )
        return past

    def _grow(self, running: threading.Lock | None) -> _CallSlot:
        """One more call slot for the pool (every arena is in use by a call on another thread)."""
        try:
            slot = _CallSlot(self.signature, self._weight_table)
        except BaseException:
            if running is not None:
                running.release()
            raise
        self._slots.append(slot)
        return slot

    def profile(self, *args, repeat: int = 10, warmup: int = 1, **call_kwargs) -> ProfileReport:
        """Run the graph ``warmup`` times, then ``repeat`` times timing every kernel; returns the
        report of the timed calls (``print(report)``: kernels by time, then by kind).
        ``call_kwargs`` go to each call (``past=`` for a graph with states)."""
        if self._counters is None:
            raise RuntimeError(
                f"{self.signature.entry} was compiled without profiling: compile it with profile=True "
                "(tg.compile / tg.compile_module(..., profile=True), tg-run --profile, "
                "convert-buffer-to-llvm{profile=true})"
            )
        if repeat < 1 or warmup < 0:
            raise ValueError(f"profile: repeat must be >= 1 and warmup >= 0, got {repeat} and {warmup}")
        for _ in range(warmup):
            self(*args, **call_kwargs)
        self._counters[:] = 0
        t0 = time.perf_counter_ns()
        for _ in range(repeat):
            self(*args, **call_kwargs)
        wall = time.perf_counter_ns() - t0
        labels = self.signature.profile or ()
        return ProfileReport.from_counters(self.signature.entry, labels, self._counters[: 2 * len(labels)], repeat, wall)

    def explain(self, all_kernels: bool = True) -> str:
        """Per kernel: the path chosen, why (fastest measured within the tolerance, heuristic
        with no record, only one path, ...), and the alternatives' times and errors; with
        ``all_kernels=False`` only the kernels with a choice. ``print(fn.explain())``."""
        if self.tuning is None:
            return f"{self.signature.entry}: compiled from the buf or llvm level: its kernel paths were chosen before"
        return self.tuning.format(all_kernels)

    def repack(self) -> None:
        """Re-pack the packed weights from the weights as they are now (after changing the
        model's parameters in place: the GEMMs read packed copies made when the graph was
        loaded). Weights bound as they are need nothing: the graph reads their memory."""
        for name, array in self._packed.items():
            layout = self.signature.packed_layout(name)
            if layout is not None and layout.source in self._given:
                array[...] = layout.pack(np.asarray(self._given[layout.source]))

    def sharing(self, states: Mapping[str, np.ndarray] | None = None) -> CompiledGraph:
        """Another callable of the same native code, weights and packed weights (nothing is
        compiled or packed again) with its own arenas and its own states: ``states`` (by name)
        or fresh zeroed ones. For a graph with state (a KV cache), one per concurrent sequence."""
        twin = CompiledGraph(self._native, self._given, self._ir, states=states, packed=self._packed)
        twin.tuning = self.tuning
        return twin

    @property
    def packed(self) -> dict[str, np.ndarray]:
        """The packed weights by slot name (``"fc.weight@panels64t"``); pass them as ``packed=``
        to another graph of the same model to share them."""
        return dict(self._packed)

    @property
    def profiled(self) -> bool:
        """True when the graph was compiled with profiling (``fn.profile`` works)."""
        return self._counters is not None

    # ------------------------------------------------------------------ introspection

    def ir(self, level: str) -> str:
        """The module as text at ``level``: one of 'aten', 'tg', 'buf', 'llvm'."""
        if level not in self._ir:
            raise ValueError(f"no IR recorded at level '{level}'; available: {', '.join(self._ir)}")
        return str(self._ir[level])  # (a graph from the compile cache keeps its text compressed until read)

    @property
    def target(self):
        """The machine this graph was compiled for (a `tensor_graphs.target.Target`; ``describe()``
        says it in one line)."""
        return self._native.target

    @property
    def states(self) -> dict[str, np.ndarray]:
        """The bound state arrays by name (updated in place by every call); pass them as
        ``states=`` to another graph to share the caches."""
        return dict(self._states)

    @property
    def bound_weights(self) -> dict[str, np.ndarray]:
        """Every array of the weights table by slot name: weights, IR constants, packed weights."""
        return dict(zip(self.signature.weight_table, self._weights))

    @property
    def memory(self) -> MemoryReport:
        packed = set(self.signature.packed)
        sizes = {name: a.nbytes for name, a in self.bound_weights.items()}
        sig = self.signature
        return MemoryReport(
            symbols=sig.symbols, io=(*sig.inputs, *sig.outputs),
            arena_bytes=self.signature.arena_size,
            weight_bytes=sum(n for name, n in sizes.items() if name not in packed),
            state_bytes=sum(a.nbytes for a in self._states.values()),
            intermediate_bytes=self.signature.intermediate_bytes,
            packed_bytes=sum(n for name, n in sizes.items() if name in packed),
            arenas=len(self._slots),
        ).at(**{name: hi for name, _, hi in self.signature.symbols})

    @property
    def native_calls_per_invocation(self) -> int:
        return 1

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s}" for s in self.signature.inputs)
        outs = ", ".join(str(s) for s in self.signature.outputs)
        return f"<CompiledGraph {self.signature.entry}({ins}) -> ({outs}); {self.memory}>"


#: ``[torch.empty, torch.Tensor]`` once torch is imported (a call then skips the import machinery)
_TORCH_API: list = []


@functools.cache
def _torch_importable() -> bool:
    """torch can be imported here (a graph without inputs returns torch tensors then)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _torch_specs(sig: GraphSignature) -> tuple[list, list]:
    """The inputs' torch dtypes and the outputs' (shape, torch dtype) of ``sig``."""
    if not _TORCH_API:
        import torch

        _TORCH_API[:] = [torch.empty, torch.Tensor]
    return ([dtypes.of_storage(s.dtype).torch for s in sig.inputs], [(s.shape, dtypes.of_storage(s.dtype).torch) for s in sig.outputs])


def _numpy_input(arg: np.ndarray, spec: TensorSpec, i: int, shapes: list | None = None) -> np.ndarray:
    """A NumPy input checked against ``spec`` (a dynamic graph's: against ``shapes[i]``, its shape
    at this call's sizes), C-contiguous (a strided one copied, as eager reads any strides)."""
    if arg.dtype != spec.dtype:
        raise TypeError(f"input {i} ('{spec.name}') has dtype {arg.dtype}, expected {spec.dtype}")
    if arg.shape != (spec.shape if shapes is None else shapes[i]):
        raise ValueError(f"input {i} ('{spec.name}') has shape {list(arg.shape)}, expected {list(spec.shape)}")
    return arg if arg.flags.c_contiguous else np.ascontiguousarray(arg)


def _torch_input(arg, spec: TensorSpec, i: int, dtype, shapes: list | None = None):
    """A torch input checked against ``spec`` (``dtype``: its torch dtype; a dynamic graph's
    shape: ``shapes[i]``), contiguous (a transposed or strided view copied), detached."""
    if not isinstance(arg, _TORCH_API[1]):
        raise TypeError(
            f"input {i} ('{spec.name}') must be a NumPy array or a torch.Tensor, got {type(arg).__name__}"
        )
    if arg.dtype != dtype:
        raise TypeError(f"input {i} ('{spec.name}') has dtype {arg.dtype}, expected {dtype}")
    if arg.shape != (spec.shape if shapes is None else shapes[i]):
        raise ValueError(f"input {i} ('{spec.name}') has shape {list(arg.shape)}, expected {list(spec.shape)}")
    if not arg.is_cpu:
        raise ValueError(f"input {i} ('{spec.name}') is on {arg.device}; this graph runs on the CPU")
    if arg.requires_grad:
        arg = arg.detach()
    return arg if arg.is_contiguous() else arg.contiguous()
