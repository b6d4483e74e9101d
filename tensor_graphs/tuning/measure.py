"""Measuring one kernel path: the op compiled alone at its shapes, timed, and its output
compared with the float64 reference.

A `tg` op of a graph becomes a module of its own (`standalone`): its operands are the
function's arguments, except weights and constants, which stay as ops (a packed GEMM packs its
weight at load time, as in the graph); the op is cloned with names dropped and weights renamed
``w0, w1, ...``, so that the text of that module (its *form*) is the same for every op of the
same computation at the same shapes (a transformer's twelve ``qkv`` GEMMs share one)::

    func.func @kernel(%0 : tensor<128x768xf32>) -> tensor<128x2304xf32> {
      %1 = tg.weight "w0" : tensor<768x2304xf32>
      %2 = tg.matmul %0, %1 {tg.kernel = "matmul.packed", tg.k_block = 128 : i64} : ...
      func.return %2 : tensor<128x2304xf32>
    }

`measure` compiles that module with the candidate pinned (`paths.pin`) and profiling on, calls
it a few times untimed (the worker threads, idle through the compile, may take milliseconds to
be scheduled again), then with the op's real operand values (from the NumPy evaluator run over the graph), and times
the kernels it runs (the native counters: no Python in the time) over repeated calls. When the
real graph streams its weights from memory (more weight bytes than the last-level cache), a
buffer twice the size of that cache is written between calls, so that each call starts with the
weight cold, as it does in the graph. The error is measured against the evaluator's result for
the op (computed in float64, rounded to float32 once): the max absolute difference and the max
relative to the largest reference magnitude (``max|y - ref| / max|ref|``: tolerances compare
with this one; an elementwise relative error explodes on values near zero).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue

from tensor_graphs.dialects import tensor as tg
from tensor_graphs.driver.cpu import compile_module
from tensor_graphs.options import CompileOptions
from tensor_graphs.target import Target
from tensor_graphs.tuning.paths import Candidate, pin, pin_gpu, unpin

#: Timed calls per candidate: at least `MIN_RUNS`, then more until `MAX_RUNS` or `BUDGET_S`.
MIN_RUNS = 5
MAX_RUNS = 25
BUDGET_S = 0.25
#: Untimed calls first: at least `WARMUP_MIN`, until `WARMUP_S` have passed (at most `WARMUP_MAX`).
WARMUP_MIN, WARMUP_MAX, WARMUP_S = 3, 50, 0.03
#: Timed calls of a GPU candidate under Triton's interpreter, after the untimed call that measures
#: its error (no other warm-up: the interpreter compiles nothing, and its times say nothing of a
#: GPU's). Tests that only check what is measured may lower it (to 1).
INTERPRETED_RUNS = 2


@dataclass
class Standalone:
    """An op as a module of its own: ``module`` (its ``form``: a digest of its text), the op
    inside it, and the graph's values that feed its arguments and weights."""

    module: ModuleOp
    op: Operation
    form: str
    arguments: list[SSAValue]
    #: standalone weight name -> the graph's weight name
    weights: dict[str, str]


def _drop_names(op: Operation) -> None:
    for o in op.walk():
        for r in o.results:
            r.name_hint = None
        for region in o.regions:
            for block in region.blocks:
                for arg in block.args:
                    arg.name_hint = None


def _reshaped_weight(value: SSAValue) -> list[Operation] | None:
    """The ops from a weight to ``value``, the weight first, when ``value`` is a weight or
    reshapes of one (a convolution's ``[Cout, C, KH, KW]`` as ``[Cout, K]``, which its GEMM's
    paths pack as a weight); else None."""
    chain: list[Operation] = []
    while isinstance(value.owner, tg.ReshapeOp):
        chain.append(value.owner)
        value = value.owner.input
    return [value.owner, *reversed(chain)] if isinstance(value.owner, tg.WeightOp) else None


def standalone(op: Operation) -> Standalone:
    """``op`` cloned into a module of its own (see the module doc), with no path pinned: its
    weights (and reshapes of them) come along, renamed, its other operands are arguments."""
    weights: dict[str, str] = {}
    args = list(dict.fromkeys(v for v in op.operands if not isinstance(v.owner, tg.ConstantOp) and _reshaped_weight(v) is None))
    block = Block(arg_types=[v.type for v in args])
    mapping: dict[SSAValue, SSAValue] = dict(zip(args, block.args))
    for v in op.operands:
        if v in mapping:
            continue
        chain = _reshaped_weight(v) or [v.owner]
        for source in chain:
            if source.results[0] in mapping:
                continue
            if isinstance(source, tg.WeightOp):
                name = f"w{len(weights)}"
                weights[name] = source.weight_name.data
                clone: Operation = tg.WeightOp(name, source.result.type)
            else:
                clone = source.clone(value_mapper=dict(mapping))
            block.add_op(clone)
            mapping[source.results[0]] = clone.results[0]
    inner = op.clone(value_mapper=dict(mapping))
    unpin(inner)
    block.add_op(inner)
    block.add_op(func.ReturnOp(inner.results[0]))
    fn = func.FuncOp("kernel", ([a.type for a in block.args], [inner.results[0].type]), Region(block))
    module = ModuleOp([fn])
    _drop_names(module)
    form = hashlib.sha256(str(module).encode()).hexdigest()[:20]
    return Standalone(module, inner, form, args, weights)


@dataclass(frozen=True)
class Measurement:
    """One candidate's times (ns per call, each run) and errors."""

    times_ns: tuple[float, ...]
    max_abs_err: float
    max_rel_err: float


def errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max |out - ref|, that over max |ref|); inf where ``out`` has a NaN the reference lacks."""
    out64, ref64 = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out64.size == 0:
        return 0.0, 0.0
    both = np.isnan(out64) & np.isnan(ref64)
    diff = np.where(both, 0.0, np.abs(out64 - ref64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    abs_err = float(diff.max())
    scale = float(np.nanmax(np.abs(np.where(np.isinf(ref64), 0.0, ref64)))) if not np.all(np.isnan(ref64)) else 0.0
    return abs_err, (abs_err / scale if scale > 0 else abs_err)


def measure(
    alone: Standalone,
    candidate: Candidate,
    inputs: Sequence[np.ndarray],
    weights: Mapping[str, np.ndarray],
    reference: np.ndarray,
    *,
    target: Target,
    cold: bool,
    device: str = "cpu",
) -> Measurement:
    """Compile ``alone`` pinned to ``candidate`` and time it on ``inputs`` (the values of its
    arguments), ``weights`` by the graph's names; errors against ``reference``. Raises what
    the compile raises when the candidate cannot be built. ``device``: ``"cuda"`` times the
    GPU variant (`paths.pin_gpu`) by CUDA events around replays of its captured plan
    (`TritonGraph.replay_ns`; ``cold``: a device buffer twice the GPU's L2 written between
    them)."""
    module = alone.module.clone()
    op = next(o for o in module.walk() if o.name == alone.op.name and o.parent_op() is not None
              and isinstance(o.parent_op(), func.FuncOp))
    gpu = device != "cpu"
    (pin_gpu if gpu else pin)(op, candidate)
    options = CompileOptions(keep_ir=False, profile=True, target=None if gpu else target, device=device)
    fn = compile_module(module, {k: weights[v] for k, v in alone.weights.items()}, options, verify=False, optimize=False)
    args = [np.array(x, order="C", copy=None) for x in inputs]  # 0-d stays 0-d (not ascontiguousarray)
    out = fn(*args)
    abs_err, rel_err = errors(out, reference)
    flush = _gpu_flush(fn, cold) if gpu else np.zeros(2 * target.caches.l3 // 4 if cold else 0, np.float32)
    # Triton's interpreter (no GPU: the tests): its times say nothing of a GPU's, a few do; the
    # call above, untimed, was its warm-up
    interpreted = gpu and fn.device.type != "cuda"
    warmup_min, warmup_max, min_runs, max_runs = (0, 0, INTERPRETED_RUNS, INTERPRETED_RUNS) if interpreted else (
        WARMUP_MIN, WARMUP_MAX, MIN_RUNS, MAX_RUNS)
    # an attention over a KV cache is timed full (past = Sk - Sq: every key valid; its error above
    # is at the evaluator's past = 0): an empty cache would time its key blocks skipped
    call = {"past": _full_cache_past(alone.op)} if _full_cache_past(alone.op) else {}
    # warm up: the first calls after a compile can wait milliseconds for the worker threads
    # (idle through the compile) to be scheduled again; untimed
    start = time.perf_counter()
    for i in range(warmup_max):
        fn.profile(*args, repeat=1, warmup=0, **call)
        if i + 1 >= warmup_min and time.perf_counter() - start > WARMUP_S:
            break
    # on a GPU the captured plan's replays (the op alone: its launches without Python between)
    timed = fn._graph.replay_ns if gpu and fn.device.type == "cuda" else lambda: fn.profile(*args, repeat=1, warmup=0, **call).measured_ns
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < BUDGET_S):
        if cold:
            flush += 1.0
        times.append(timed())
    return Measurement(tuple(times), abs_err, rel_err)


def _full_cache_past(op: Operation) -> int:
    """``Sk - Sq`` for an attention over a KV cache (its keys all valid), else 0."""
    if isinstance(op, tg.AttentionOp) and op.kv_cache.value.data:
        q, k = op.heads_major_shapes()[:2]
        return k[-2] - q[-2]
    return 0


def _gpu_flush(fn, cold: bool):
    """A device buffer twice the GPU's L2 (``flush += 1`` writes it all), or an empty one (warm
    weights, or Triton's interpreter)."""
    import torch

    device = fn.device
    size = 2 * torch.cuda.get_device_properties(device).L2_cache_size // 4 if cold and device.type == "cuda" else 0
    return torch.zeros(size, dtype=torch.float32, device=device)
