"""A graph lowered by `convert-tensor-to-triton`, bound on the device and replayed.

Memory as on the CPU, on the device: the planner's arena is ONE device allocation and every
intermediate a view of it at the planned offset; weights and IR constants are device tensors
made once; states (a KV cache) are device tensors kept between calls; the graph's inputs and
outputs are device tensors of their own, so that every launch's arguments are fixed addresses.
A call copies its inputs into their tensors (and ``past``, for a KV cache, into the ``dims``
tensor the kernels read it from) and replays the launch plan: on a GPU one CUDA graph captured
on the second call (the first compiles and warms the kernels) (the GPU counterpart of one native function per graph);
under Triton's interpreter (``TRITON_INTERPRET=1``, no GPU: the tests) the launches one by one
on CPU tensors.

Not thread-safe: a graph owns its arena and its input and output tensors; two threads calling
it at once overwrite each other's (as `CompiledGraph`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp, StringAttr

from tensor_graphs import dtypes
from tensor_graphs.codegen.llvm.profiling import kernel_label
from tensor_graphs.codegen.triton.kernels import CHECKS_START, SCALARS
from tensor_graphs.dialects import buffer as buf
from tensor_graphs.dialects.dense import numpy_from_dense
from tensor_graphs.runtime_support.outputs import write_back
from tensor_graphs.runtime_support.signature import check_error


class DeviceError(RuntimeError):
    """The device a graph was asked for cannot run it here (no GPU, no Triton)."""


def interpreting() -> bool:
    """Triton's interpreter runs the kernels on the CPU (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def device_for(device: str) -> str:
    """The torch device a ``device="cuda"`` graph runs on: ``cuda`` with a GPU, ``cpu`` under
    Triton's interpreter; otherwise a `DeviceError` saying what is missing."""
    if device != "cuda":
        raise DeviceError(f"device must be 'cpu' or 'cuda', got {device!r}")
    try:
        import triton  # noqa: F401
    except ImportError:
        raise DeviceError("device='cuda' needs Triton (pip install triton, or tensor_graphs[gpu])") from None
    import torch

    if interpreting():
        _check_interpreter()
        return "cpu"
    if not torch.cuda.is_available():
        raise DeviceError(
            "device='cuda': torch sees no CUDA GPU here (torch.cuda.is_available() is False; this torch is "
            f"{torch.__version__}). Compile for the CPU (the default), or set TRITON_INTERPRET=1 before "
            "importing tensor_graphs to run the Triton kernels in Triton's interpreter on the CPU (slow: for tests)"
        )
    return "cuda"


def _check_interpreter() -> None:
    """Triton decides interpreter or compiler when it is imported (its own `tl.sum`... are
    jitted then): ``TRITON_INTERPRET=1`` set later would fail deep inside the first kernel."""
    import triton.language.standard as standard
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(standard.sum, InterpretedFunction):
        raise DeviceError(
            "TRITON_INTERPRET=1 was set after Triton was imported (torch may import it): set it in the "
            "environment before starting Python (or before importing torch and tensor_graphs)"
        )


def load_kernels(source: str) -> Any:
    """The kernels' Python module: ``source`` written to a file (Triton reads a kernel's source
    from its file) under the compile cache directory (where it is private to the user:
    `object_cache.CompileCache.usable`; else a directory of this process), keyed by its digest,
    and imported."""
    from tensor_graphs.codegen.llvm.object_cache import CompileCache

    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    cache = CompileCache.default()
    root = (cache.directory if cache is not None and cache.usable() else Path(_scratch_dir())) / "triton"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root / f"tg_kernels_{digest}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        tmp.replace(path)
    name = f"tg_kernels_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_SCRATCH: list[str] = []


def _scratch_dir() -> str:
    """A directory of this process for kernel files when the compile cache is off."""
    import tempfile

    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="tg-triton-"))
    return _SCRATCH[0]


def _torch_dtype(element) -> Any:
    """The torch dtype of buffers of ``element`` (the one table, `tensor_graphs.dtypes`). bfloat16
    buffers are refused: under the Triton interpreter the kernels that convert them give wrong
    values (0.12 off on a sum of 8 values), and no GPU run has checked them."""
    row = dtypes.of_element(element)
    if row.name == "bfloat16":
        raise TypeError("a bfloat16 buffer at run time: the model computes in bfloat16 itself (e.g. Falcon's ALiBi bias "
                        "from an attention mask); the GPU path has no bf16 buffers yet (float16, float32, float64 "
                        "and integer models run; the CPU path runs bfloat16)")
    return row.torch


class _TorchMatmul:
    """The plan's library GEMM (`kernels_matmul.LIBRARY_MATMUL`): ``out = op(a) @ op(b)`` by
    ``torch.matmul`` into the output's view (cuBLAS on a GPU), indexed by a grid like a Triton
    kernel; at IEEE float32, or with TF32 allowed for the call (``LIBRARY_MATMUL_TF32``, a
    pinned ``matmul.library_tf32``): `_fp32_precision`, whatever the process set."""

    def __init__(self, op: buf.MatmulOp, tf32: bool = False):
        self.ta, self.tb = op.flags[0], op.flags[1]
        self.tf32 = tf32

    def __getitem__(self, grid) -> _TorchMatmul:
        return self

    def __call__(self, a, b, out) -> None:
        import torch

        with _fp32_precision(self.tf32):
            torch.matmul(a.mT if self.ta else a, b.mT if self.tb else b, out=out)


class _TorchAddmm(_TorchMatmul):
    """`kernels_matmul.LIBRARY_ADDMM`: ``out = beta * acc + alpha * a @ op(b)`` by one
    ``torch.addmm`` (cuBLAS's own beta; a bias broadcast over the rows), the rows of ``a`` and
    ``out`` folded to 2-D, ``b`` a 2-D weight. An accumulator that is the output itself (the
    planner put a residual's sum where it was) is accumulated in place."""

    def __init__(self, op: buf.MatmulOp, tf32: bool = False):
        super().__init__(op, tf32)
        self.alpha, self.beta = op.flags[2], op.flags[3]

    def __call__(self, a, b, acc, out) -> None:
        import torch

        rows = out.reshape(-1, out.shape[-1])
        bias = acc.reshape(-1) if acc.numel() == out.shape[-1] else acc.reshape(rows.shape)
        with _fp32_precision(self.tf32):
            if bias.data_ptr() == rows.data_ptr() and bias.shape == rows.shape:
                rows.addmm_(a.reshape(-1, a.shape[-1]), b.mT if self.tb else b, beta=self.beta, alpha=self.alpha)
            else:
                torch.addmm(bias, a.reshape(-1, a.shape[-1]), b.mT if self.tb else b, beta=self.beta, alpha=self.alpha, out=rows)


class _fp32_precision:
    """cuBLAS's float32 precision for the library calls inside: TF32 (``tf32``) or IEEE, whatever
    the process set (``torch.set_float32_matmul_precision("high")`` would make a
    ``matmul.library`` GEMM TF32 behind its name, its tuning records and its error); torch's
    setting restored to exactly what it was after (torch refuses to read a mix of its two APIs).
    The setting is the process's: graphs called from several threads take turns
    (`_PRECISION_LOCK`, held from the setting to its restoring; a GEMM is only queued inside), so
    that none restores another's value; a torch matmul of the program's own on another thread
    meanwhile still sees it."""

    def __init__(self, tf32: bool):
        self.tf32 = tf32

    def __enter__(self) -> None:
        import torch

        _PRECISION_LOCK.acquire()
        settings = torch.backends.cuda.matmul
        # torch >= 2.9 says it as fp32_precision, older ones as allow_tf32
        if hasattr(settings, "fp32_precision"):
            self.name, value = "fp32_precision", ("tf32" if self.tf32 else "ieee")
        else:
            self.name, value = "allow_tf32", self.tf32
        try:
            self.before = getattr(settings, self.name)
            setattr(settings, self.name, value)
        except BaseException:
            _PRECISION_LOCK.release()
            raise

    def __exit__(self, *exc) -> None:
        import torch

        try:
            setattr(torch.backends.cuda.matmul, self.name, self.before)
        finally:
            _PRECISION_LOCK.release()


#: one `_fp32_precision` at a time in the process (see there)
_PRECISION_LOCK = threading.RLock()


class _TorchAttention:
    """The plan's library attention (`kernels_attention.LIBRARY_ATTENTION`, ``attention.library``):
    ``torch.nn.functional.scaled_dot_product_attention`` over heads-major views of the arena's
    q, k and v (a sequence-major buffer transposed, a head range sliced: no copy), the result
    copied into the output's view. Grouped-query keys and values are repeated to every query
    head first (torch's fused kernels take grouped heads only at half precision: at float32
    ``enable_gqa`` would fall back to its unfused math)."""

    def __init__(self, op: buf.AttentionOp):
        self.seq_major, self.ranges = op.seq_major, op.head_ranges
        self.causal, self.scale = bool(op.causal.value.data), float(op.scale.value.data)

    def __getitem__(self, grid) -> _TorchAttention:
        return self

    @staticmethod
    def _heads_major(x, seq_major: bool, heads: tuple[int, int] | None = None):
        x = x.transpose(-3, -2) if seq_major else x
        return x if heads is None else x.narrow(-3, heads[0], heads[1])

    def __call__(self, q, k, v, out) -> None:
        import torch

        q, k, v = (self._heads_major(x, f, r) for x, f, r in zip((q, k, v), self.seq_major, self.ranges))
        if q.shape[-3] != k.shape[-3]:  # each kv head copied to its group's query heads (expand, then one copy)
            group = q.shape[-3] // k.shape[-3]
            k, v = (x.unsqueeze(-3).expand(*x.shape[:-2], group, *x.shape[-2:]).reshape(*q.shape[:-2], *x.shape[-2:])
                    for x in (k, v))
        with _fp32_precision(False):  # its math fallback's GEMMs at IEEE float32 too
            result = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale)
        self._heads_major(out, self.seq_major[3]).copy_(result)


class _WithWarps:
    """A Triton kernel launched with ``num_warps`` (a tuner's ``tg.gpu_warps``): ``k[grid](*args)``."""

    def __init__(self, kernel, warps: int):
        self.kernel, self.warps = kernel, warps

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *args: launch(*args, num_warps=self.warps)


#: the plan's library calls by name -> their runtime implementation
LIBRARY_CALLS = {"torch.matmul": _TorchMatmul, "torch.matmul.tf32": lambda op: _TorchMatmul(op, tf32=True),
                 "torch.addmm": _TorchAddmm, "torch.addmm.tf32": lambda op: _TorchAddmm(op, tf32=True),
                 "torch.sdpa": _TorchAttention}


def _library_call(name: str, op) -> Any:
    return LIBRARY_CALLS[name](op)


#: `TritonGraph.run_profiled` on a GPU holds the device back for this many clock cycles
#: (``torch.cuda._sleep``: ~10 ms at 2 GHz, longer than Python takes to launch the kernels of
#: `PROFILE_CHUNK_OPS` ops) before each run of that many ops, so that their spans time the device
PROFILE_HOLD_CYCLES = 20_000_000
PROFILE_CHUNK_OPS = 32
#: `TritonGraph.replay_ns` holds the device back this long (~0.1 ms) before its first event, so
#: that the graph's launch is submitted before the span starts: the span times the device alone
REPLAY_HOLD_CYCLES = 200_000


class TritonGraph:
    """The launch plan of one graph function, bound to device memory (see the module doc)."""

    def __init__(self, module: ModuleOp, weights: Mapping[str, Any], device: str,
                 states: Mapping[str, Any] | None = None, fn: func.FuncOp | None = None,
                 bound: dict[str, Any] | None = None):
        """``states``: state arrays by name (torch tensors on the device are bound as they are,
        so two graphs share a KV cache; NumPy arrays are copied, or shared on the CPU); missing
        ones start zeroed. ``bound``: weights already on the device by name (shared with
        another graph of the same model; filled with the ones uploaded here). Its tensors are
        made outside inference mode and autograd, whatever the caller's: a graph compiled under
        ``torch.inference_mode()`` can be called outside it."""
        import torch

        with torch.inference_mode(False), torch.no_grad():
            self._bind(module, weights, device, states, fn, bound)

    def _bind(self, module: ModuleOp, weights: Mapping[str, Any], device: str, states: Mapping[str, Any] | None,
              fn: func.FuncOp | None, bound: dict[str, Any] | None) -> None:
        import torch

        from tensor_graphs.codegen.triton.convert_tensor_to_triton import CHECKS_ATTR, LAUNCHES_ATTR, SOURCE_ATTR

        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        source = module.attributes.get(SOURCE_ATTR)
        if not isinstance(source, StringAttr):
            raise ValueError("TritonGraph: the module was not lowered by convert-tensor-to-triton")
        self.source = source.data
        from tensor_graphs.codegen.triton.convert_tensor_to_triton import program_text

        #: the source and the launch plan (``fn.ir("triton")``)
        self.text = program_text(module)
        kernels = load_kernels(self.source)
        fn = fn or next(o for o in module.ops if isinstance(o, func.FuncOp))
        self.entry = fn.sym_name.data
        checks = module.attributes.get(CHECKS_ATTR)
        #: the run-time checks' messages; check k's flag is ``dims[CHECKS_START + k]``
        self.checks = [m.data for m in checks.data] if isinstance(checks, ArrayAttr) else []  # type: ignore[attr-defined]
        n_out = fn.attributes["tg.num_outputs"].value.data  # type: ignore[attr-defined]
        args = list(fn.body.block.args)
        self.input_args, self.output_args = args[: len(args) - n_out], args[len(args) - n_out :]
        self.input_names = [a.name_hint or f"input{i}" for i, a in enumerate(self.input_args)]
        t: dict = {}
        for a in args:
            t[a] = torch.empty(tuple(a.type.get_shape()), dtype=_torch_dtype(a.type.element_type), device=self.device)  # type: ignore[attr-defined]
        self.inputs = [t[a] for a in self.input_args]
        self.outputs = [t[a] for a in self.output_args]
        self.states: dict[str, Any] = {}
        #: (kernel, grid, operands, scalars, index of its buf op in `labels`) in plan order
        self.launches: list[tuple[Any, tuple[int, ...], list[Any], tuple[str, ...], int]] = []
        #: per buf kernel op with launches, what a profile calls it (`kernel_label`, its kernels)
        self.labels: list[str] = []
        #: the run-time scalars (`kernels.SCALARS`: ``past``) as the kernels read them, then the
        #: checks' flags (`kernels.CHECKS_START`)
        self.dims = torch.zeros(CHECKS_START + len(self.checks), dtype=torch.int64, device=self.device)
        #: (rows a cache write adds, the cache's positions) per buf.cache_write
        self.room: list[tuple[int, int]] = []
        #: the weights on the device by name (shared with the graphs made by `sharing`)
        self.weights: dict[str, Any] = bound if bound is not None else {}
        self._check_weights(module, weights)
        #: buf op -> the scratch buffer its launches share (`Launch.scratch`: attention's key ranges)
        self.scratch: dict = {}
        scratch = self.scratch
        for op in fn.body.walk():
            if isinstance(op, buf.ArenaOp):
                t[op.results[0]] = torch.zeros(max(1, op.results[0].type.get_shape()[0]), dtype=torch.uint8, device=self.device)  # type: ignore[attr-defined]
            elif isinstance(op, buf.ViewOp):
                ty = op.results[0].type
                nbytes = buf.nbytes(ty)
                start = op.offset.value.data
                t[op.results[0]] = t[op.arena][start : start + nbytes].view(_torch_dtype(ty.element_type)).view(tuple(ty.get_shape()))  # type: ignore[attr-defined]
            elif isinstance(op, buf.ReshapeOp):
                t[op.results[0]] = t[op.operands[0]].reshape(tuple(op.results[0].type.get_shape()))  # type: ignore[attr-defined]
            elif isinstance(op, buf.SubviewOp):
                n = int(np.prod(op.results[0].type.get_shape()))  # type: ignore[attr-defined]
                start = op.offset.value.data  # type: ignore[attr-defined]
                t[op.results[0]] = t[op.operands[0]].reshape(-1)[start : start + n].view(tuple(op.results[0].type.get_shape()))  # type: ignore[attr-defined]
            elif isinstance(op, buf.WeightOp):
                name = op.weight_name.data
                if name not in self.weights:
                    if name not in weights:
                        raise KeyError(f"weight '{name}' is missing (the graph reads it)")
                    array = np.asarray(weights[name])
                    self.weights[name] = torch.from_numpy(np.ascontiguousarray(array)).to(
                        device=self.device, dtype=_torch_dtype(op.result.type.element_type))  # type: ignore[attr-defined]
                t[op.result] = self.weights[name]
            elif isinstance(op, buf.ConstantOp):
                t[op.result] = torch.from_numpy(np.ascontiguousarray(numpy_from_dense(op.value))).to(self.device)  # type: ignore[attr-defined]
            elif isinstance(op, buf.StateOp):
                name = op.state_name.data
                shape, dtype = tuple(op.result.type.get_shape()), _torch_dtype(op.result.type.element_type)  # type: ignore[attr-defined]
                given = (states or {}).get(name)
                if given is None:
                    tensor = torch.zeros(shape, dtype=dtype, device=self.device)
                elif isinstance(given, torch.Tensor):
                    tensor = given
                else:
                    tensor = torch.from_numpy(np.asarray(given)).to(self.device)
                if tuple(tensor.shape) != shape or tensor.dtype != dtype or tensor.device != self.device:
                    raise ValueError(f"state '{name}': expected {dtype}{list(shape)} on {self.device}, got "
                                     f"{tensor.dtype}{list(tensor.shape)} on {tensor.device}")
                self.states[name] = t[op.result] = tensor
            elif isinstance(op, buf.KernelOp):
                plan = op.attributes.get(LAUNCHES_ATTR)
                entries = plan.data if isinstance(plan, ArrayAttr) else ()
                if entries:
                    names = ", ".join(e.data["kernel"].data for e in entries)  # type: ignore[attr-defined]
                    self.labels.append(f"{kernel_label(op)} [{names}]")
                for entry in entries:
                    assert isinstance(entry, DictionaryAttr)
                    d = entry.data
                    name = d["kernel"].data  # type: ignore[attr-defined]
                    kernel = _library_call(name, op) if name in LIBRARY_CALLS else getattr(kernels, name)
                    args = list(d["args"].get_values())  # type: ignore[attr-defined]
                    operands = [t[op.operands[i]] for i in args]
                    for position in d["bf16"].get_values() if "bf16" in d else ():  # type: ignore[attr-defined]
                        operands[position] = self._weight_copy(op.operands[args[position]], "bf16")
                    for position in sorted(d["int8"].get_values(), reverse=True) if "int8" in d else ():  # type: ignore[attr-defined]
                        fmt = "int8t" if op.flags[1] else "int8"  # type: ignore[attr-defined]  # its columns: rows of [N, K]
                        operands[position: position + 1] = self._weight_copy(op.operands[args[position]], fmt)
                    scalars = tuple(s.data for s in d["scalars"].data)  # type: ignore[attr-defined]
                    if "scratch" in d:  # one per op, shared by its launches
                        if op not in scratch:
                            scratch[op] = torch.empty(d["scratch"].value.data, dtype=torch.float32, device=self.device)  # type: ignore[attr-defined]
                        operands.append(scratch[op])
                    if scalars or "checks" in d:  # read from (flags written into) dims, after the buffers
                        operands.append(self.dims)
                    if "warps" in d:  # Triton's launch option, bound like an argument
                        kernel = _WithWarps(kernel, d["warps"].value.data)  # type: ignore[attr-defined]
                    self.launches.append((kernel, tuple(d["grid"].get_values()), operands, scalars, len(self.labels) - 1))  # type: ignore[attr-defined]
                if isinstance(op, buf.CacheWriteOp):  # past + rows written <= the cache's positions
                    axis = op.axis.value.data
                    self.room.append((op.inputs[0].type.get_shape()[axis], op.outputs[0].type.get_shape()[axis]))  # type: ignore[attr-defined]
        self.arena_bytes = int(module.attributes["tg.arena_size"].value.data) if "tg.arena_size" in module.attributes else 0  # type: ignore[attr-defined]
        self._takes_past = any("past" in sc for _, _, _, sc, _ in self.launches)
        self._graph = None
        self._calls = 0

    def _check_weights(self, module: ModuleOp, weights: Mapping[str, Any]) -> None:
        """The weights to upload have the shapes the kernels read (`bound_weights.check_weights`;
        their dtype is converted on the way to the device); those already there were checked."""
        from tensor_graphs.runtime_support.bound_weights import check_weights, declared_weights

        todo = [d for d in declared_weights(module) if d.source not in self.weights]
        check_weights(todo, weights, "the weights given", dtypes=False)

    def _weight_copy(self, value, fmt: str) -> Any:
        """The copy of weight ``value`` in format ``fmt`` a kernel reads (`Launch.bf16`,
        `Launch.int8`), made once per weight and kept with the weights (``"<name>@bf16"``,
        ``"<name>@int8"`` and ``"<name>@int8scales"``: shared with the graphs of ``bound``): for
        ``bf16`` the tensor, for ``int8`` (a ``[K, N]`` weight) and ``int8t`` (``[N, K]``, read
        transposed) [the int8 tensor, its float32 scales per output column]."""
        import torch

        owner = value.owner
        if not isinstance(owner, buf.WeightOp):
            raise ValueError(f"a kernel reads a {fmt} copy of {value.type}, which is not a weight")
        name = owner.weight_name.data
        key = f"{name}@{fmt}"
        if key not in self.weights:
            w = self.weights[name]
            if fmt == "bf16":
                self.weights[key] = w.to(torch.bfloat16)
            else:  # as the CPU's int8 panels (`packing.int8_scales`): scale = max |column| / 127
                column_dim = 1 if fmt == "int8t" else 0  # the dim summed over: K
                peak = w.abs().amax(dim=column_dim) if w.shape[column_dim] else w.new_zeros(w.shape[1 - column_dim])
                scales = torch.where(peak > 0, peak / 127.0, torch.ones_like(peak)).to(torch.float32)
                shaped = scales[:, None] if column_dim == 1 else scales[None, :]
                self.weights[key] = torch.clamp(torch.round(w / shaped), -127, 127).to(torch.int8)
                self.weights[f"{key}scales"] = scales.contiguous()
        return self.weights[key] if fmt == "bf16" else [self.weights[key], self.weights[f"{key}scales"]]

    def run(self) -> None:
        """Every launch once (the scalars already in ``dims``), the check flags cleared first (a
        call that stopped half-way leaves none behind; captured with the plan on a GPU)."""
        self._clear_flags()
        for kernel, grid, operands, _, _ in self.launches:
            kernel[grid](*operands)

    def _clear_flags(self) -> None:
        """The check flags zeroed as a plan starts."""
        if self.checks:
            self.dims[CHECKS_START:].zero_()

    def run_profiled(self, counters: np.ndarray) -> None:
        """Every launch once, one by one (no CUDA graph), each op's time added to
        ``counters[2 k]`` and one call to ``counters[2 k + 1]`` (`labels` order). On a GPU the
        time between CUDA events recorded around the op's launches, the device held back
        (`PROFILE_HOLD_CYCLES`) before each `PROFILE_CHUNK_OPS` ops so that their launches are
        queued before the first of them runs: an op's span is its kernels' run on the device, not
        the host launching them (Python takes longer to launch a small kernel than the GPU to run
        it); under the interpreter the host's time."""
        import torch

        cuda = self.device.type == "cuda"
        hold = getattr(torch.cuda, "_sleep", None) if cuda else None

        def now() -> Any:
            if not cuda:
                return time.perf_counter_ns()
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event

        self._clear_flags()
        spans: list[list[Any]] = []  # [op, start, end]
        for kernel, grid, operands, _, op in self.launches:
            if not spans or spans[-1][0] != op:
                if hold is not None and len(spans) % PROFILE_CHUNK_OPS == 0:
                    hold(PROFILE_HOLD_CYCLES)  # outside every span
                spans.append([op, now(), None])
            kernel[grid](*operands)
            spans[-1][2] = now()
        if cuda:
            torch.cuda.synchronize(self.device)
        for op, start, end in spans:
            counters[2 * op] += int(start.elapsed_time(end) * 1e6) if cuda else end - start
            counters[2 * op + 1] += 1

    def __call__(self, *inputs: Any, past: int = 0, counters: np.ndarray | None = None) -> Any:
        """Run on ``inputs`` (NumPy arrays or torch tensors, all one kind, of the graph's dtypes
        and shapes); returns the output (a tuple for several) of the same kind: NumPy arrays, or
        torch tensors on the graph's device. With ``counters``, the launches one by one, timed
        into them (`run_profiled`). Outside autograd (an input that requires grad is read as
        data: cuBLAS's ``out=`` calls take no autograd)."""
        import torch

        with torch.no_grad():
            return self._call(inputs, past, counters)

    def _call(self, inputs: Sequence[Any], past: int, counters: np.ndarray | None) -> Any:
        import torch

        if len(inputs) != len(self.inputs):
            raise TypeError(f"expected {len(self.inputs)} input(s), got {len(inputs)}")
        kinds = {isinstance(x, np.ndarray) for x in inputs}
        if len(kinds) > 1:
            raise TypeError("pass all inputs as NumPy arrays or all as torch tensors, not a mix")
        as_numpy = kinds == {True}
        for k, (x, slot) in enumerate(zip(inputs, self.inputs)):
            if as_numpy:  # read only: a read-only array is copied rather than wrapped
                x = torch.from_numpy(x) if x.flags.writeable else torch.tensor(x)
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"input {k} is a {type(x).__name__}: pass NumPy arrays or torch tensors")
            if x.dtype != slot.dtype:
                raise TypeError(f"input {k} has dtype {x.dtype}, expected {slot.dtype}")
            if tuple(x.shape) != tuple(slot.shape):
                raise ValueError(f"input {k} has shape {list(x.shape)}, expected {list(slot.shape)}")
            slot.copy_(x)
        for rows, positions in self.room:
            if past < 0 or past + rows > positions:
                raise ValueError(f"past = {past}: {rows} more position(s) do not fit the KV cache of {positions}")
        if self._takes_past:
            self.dims[SCALARS["past"]] = past
        if counters is not None:
            self.run_profiled(counters)
        elif self.device.type == "cuda":
            self._replay()
        else:
            self.run()
        if self.checks:
            self._raise_failed_check(inputs, past)
        outs = [o.cpu().numpy() if as_numpy else o.clone() for o in self.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _raise_failed_check(self, inputs: Sequence[Any], past: int) -> None:
        """The first failed run-time check's error (the CPU graph's); the flags are read once the
        plan has run (one device sync, the price of an IndexError rather than a device assert;
        the plan clears them as it starts). The plan ran whole: a KV cache holds what this call
        wrote (call again at the same ``past``)."""
        flags = self.dims[CHECKS_START:].cpu()
        failed = [k for k in range(len(self.checks)) if int(flags[k])]
        if failed:
            raise check_error(self.entry, self.checks[failed[0]], self.input_names, past, inputs)

    def replay_ns(self) -> float:
        """On a GPU: the device time of one replay of the captured plan (CUDA events around it;
        captured first if need be), what a call costs without its copies in and out: how the
        tuner times a GPU path (launching kernels one by one from Python would time Python)."""
        import torch

        while self._graph is None:
            self._replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if (hold := getattr(torch.cuda, "_sleep", None)) is not None:
            hold(REPLAY_HOLD_CYCLES)  # the replay queued behind it: not its launch's delay
        start.record()
        self._graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e6

    def _replay(self) -> None:
        """On a GPU: the launches once to compile and warm them, then captured into one CUDA
        graph, replayed from then on."""
        import torch

        self._calls += 1
        if self._graph is None and self._calls <= 1:
            self.run()
            return
        if self._graph is None:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.run()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.run()
            self._graph = graph
        self._graph.replay()


class GpuCompiledGraph:
    """What ``tg.compile(model, inputs, device="cuda")`` returns: ``fn(*inputs)`` as a
    `CompiledGraph`'s (NumPy arrays or torch tensors, all one kind; the same kind back, torch
    tensors on the device), ``fn.ir(level)`` for 'aten', 'tg', 'buf' and 'triton' (the kernels'
    Python source)."""

    def __init__(self, graph: TritonGraph, ir: dict[str, str], module: ModuleOp | None = None, weights: Mapping[str, Any] | None = None):
        self._graph = graph
        self._ir = dict(ir)
        self._ir["triton"] = graph.text
        self._module, self._weights = module, weights
        #: the GPU kernel paths a tuner chose (`tuning.tuner.TuningReport`), else None
        self.tuning = None
        #: where the outputs go in what the model returns (`outputs.OutputStructure`), as on the CPU
        self.output_structure = None

    def __call__(self, *inputs: Any, past: int | None = None) -> Any:
        """``past``: for a graph with a KV cache, the positions cached before this call."""
        if self._graph.room and past is None:
            raise TypeError(f"this graph keeps state ({', '.join(self._graph.states)}): pass past=<positions already cached>")
        out = self._graph(*inputs, past=past or 0)
        if self.output_structure is None or self.output_structure.plain:
            return out
        outs = out if len(self._graph.outputs) > 1 else (out,)
        write_back(self.output_structure, inputs, outs)
        return self.output_structure.build(outs)

    def profile(self, *inputs: Any, repeat: int = 10, warmup: int = 1, past: int | None = None) -> Any:
        """Run the graph ``warmup`` times, then ``repeat`` times launching its kernels one by
        one, each op's kernels timed (CUDA events on a GPU); returns the report (``print``: ops
        by time, then by kind), as the CPU's `CompiledGraph.profile`. Every GPU graph can be
        profiled (nothing is compiled for it); the times are those of eager launches (queued
        ahead of the device: `TritonGraph.run_profiled`), and ``wall_ns`` covers the timed calls
        (without the CUDA graph a plain call replays, and with the device held back)."""
        from tensor_graphs.runtime_support.profile import ProfileReport

        if repeat < 1 or warmup < 0:
            raise ValueError(f"profile: repeat must be >= 1 and warmup >= 0, got {repeat} and {warmup}")
        if self._graph.room and past is None:
            raise TypeError(f"this graph keeps state ({', '.join(self._graph.states)}): pass past=<positions already cached>")
        counters = np.zeros(2 * len(self._graph.labels), np.int64)
        for _ in range(warmup):
            self._graph(*inputs, past=past or 0, counters=np.zeros_like(counters))
        t0 = time.perf_counter_ns()
        for _ in range(repeat):
            self._graph(*inputs, past=past or 0, counters=counters)
        wall = time.perf_counter_ns() - t0
        return ProfileReport.from_counters(self._graph.entry, self._graph.labels, counters, repeat, wall)

    @property
    def profiled(self) -> bool:
        """Always: a GPU graph's launches can be timed one by one (`profile`)."""
        return True

    def explain(self, all_kernels: bool = True) -> str:
        """Per kernel with GPU variants: the one chosen, why, and the alternatives' times and
        errors (compiled with ``tune=``); ``print(fn.explain())``."""
        if self.tuning is None:
            return f"{self._graph.entry}: compiled without tune=: every kernel runs the heuristic's GPU variant (codegen.triton.paths)"
        return self.tuning.format(all_kernels)

    @property
    def states(self) -> dict[str, Any]:
        """The state tensors by name (a KV cache and its padding mask), torch tensors on the
        graph's device, updated in place by every call. Pass them as ``states=`` to another
        graph to share them."""
        return dict(self._graph.states)

    def sharing(self, states: Mapping[str, Any] | None = None) -> GpuCompiledGraph:
        """Another graph of the same kernels and device weights with its own arena and states
        (``states`` by name, or fresh zeroed ones)."""
        assert self._module is not None
        graph = TritonGraph(self._module, self._weights or {}, str(self._graph.device), states=states, bound=self._graph.weights)
        return GpuCompiledGraph(graph, self._ir, self._module, self._weights)

    @property
    def output_bytes(self) -> int:
        """Bytes of the graph's output tensors on the device."""
        return sum(t.numel() * t.element_size() for t in self._graph.outputs)

    @property
    def memory(self) -> Any:
        """Bytes on the device: the arena (with the ops' scratch buffers), the weights (with their
        bf16/int8 copies), the states."""
        from tensor_graphs.runtime_support.executable import MemoryReport

        size = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
        return MemoryReport(arena_bytes=self._graph.arena_bytes + size(self._graph.scratch.values()),
                            weight_bytes=size(self._graph.weights.values()),
                            state_bytes=size(self._graph.states.values()))

    @property
    def device(self) -> Any:
        return self._graph.device

    @property
    def launches(self) -> int:
        """Kernel launches per call."""
        return len(self._graph.launches)

    def ir(self, level: str) -> str:
        """The module as text at ``level`` ('aten', 'tg', 'buf'), or 'triton': the kernels."""
        if level not in self._ir:
            raise ValueError(f"no IR recorded at level '{level}'; available: {', '.join(self._ir)}")
        return self._ir[level]
