"""GPT-2 small (124M, random init) logits: tensor_graphs against eager, torch.compile, ONNX Runtime and OpenVINO.

    .venv/bin/python benchmarks/gpt2.py [--repeat 10] [--seqs 32 128] [--threads 1 2] [--engines ...]

All engines run in one process on the same model and the same token ids (batch 1). Before any
timing, each engine's logits are checked against eager PyTorch (max abs diff <= 1e-3). Timed calls
alternate engine by engine (ABCDABCD...) so that machine noise hits all alike, in turns of a 0.1 s
pause, one untimed call and timed calls for at least 50 ms (so that one engine's busy-waiting
threads do not slow the next, and its own are awake);
the table shows the median per call in milliseconds, each engine's time over the fastest in its
row, and tensor_graphs over the fastest peer (below 1 means tensor_graphs is faster).

Threads: ``torch.set_num_threads`` (eager and torch.compile), ``tensor_graphs.set_num_threads``
and ORT's ``intra_op_num_threads`` are set to the same count. Inductor specialises its C++ kernels
on the thread count, so torch.compile is compiled once per (seq, threads); its compile time is
reported cold (a fresh inductor cache directory for each run of this script). ONNX Runtime gets
the model exported by ``torch.onnx.export`` (the dynamo exporter, else the legacy TorchScript one)
with static shapes, ``ORT_ENABLE_ALL`` graph optimisation, one inter-op thread and intra-op
spinning off (a spinning pool would steal the cores from the engine timed next). OpenVINO gets
the same module through ``ov.convert_model`` (TorchScript tracing, else ``torch.export``) and runs
it on its CPU plugin at fp32 (``INFERENCE_PRECISION_HINT``), ``INFERENCE_NUM_THREADS`` threads,
one stream, ``PERFORMANCE_HINT`` LATENCY. Peers that are not installed (ONNX Runtime, OpenVINO)
are left out.

tensor_graphs compiles for the default target (``TG_TARGET``, else this CPU: ``tensor_graphs.target``).
"""

from __future__ import annotations

import os
import tempfile

# before torch._inductor is imported: cold, private caches so the compile time is honest
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="tg-bench-inductor-"))
# and tensor_graphs' compile cache: compile times are of a first compile
os.environ.setdefault("TG_CACHE_DIR", tempfile.mkdtemp(prefix="tg-bench-compile-cache-"))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import functools  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tensor_graphs as tg  # noqa: E402

ENGINES = ("tensor_graphs", "eager", "torch.compile", "onnxruntime", "openvino")
LABELS = {
    "tensor_graphs": "tensor_graphs",
    "tg-tuned": "tensor_graphs tuned",
    "eager": "PyTorch eager",
    "torch.compile": "torch.compile (inductor)",
    "onnxruntime": "ONNX Runtime",
    "openvino": "OpenVINO",
    "tg-lowp": "tensor_graphs tuned at 1e-2",
    "openvino-bf16": "OpenVINO bf16",
}
MAX_ABS = 1e-3
#: The reduced-precision engines (bf16, int8 paths), each output checked against eager's as
#: max |y - y64| / max |y64| <= REDUCED_MAX_ERROR (a guard against a broken engine, not a target:
#: their errors are reported beside their times)
REDUCED_PRECISION = ("tg-lowp", "openvino-bf16")
REDUCED_MAX_ERROR = 0.1

#: engine -> the module it needs beyond torch (the optional peers of the ``bench`` extra)
#: (and every "llama.cpp <format>" engine: llama_cpp, `llama_cpp_peer`)
PEER_MODULES = {"onnxruntime": "onnxruntime", "onnxruntime-opt": "onnxruntime", "openvino": "openvino",
                "openvino-bf16": "openvino"}


def not_installed(engine: str) -> str | None:
    """Why ``engine`` cannot run here (its module is not installed), or None when it can."""
    module = PEER_MODULES.get(engine) or ("llama_cpp" if engine.startswith("llama.cpp ") else None)
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    return f"{module} is not installed (pip install -e '.[bench]')"


class LogitsOnly(torch.nn.Module):
    """``ids -> logits`` of a GPT2LMHeadModel: no KV cache, one tensor out."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids, use_cache=False).logits


def build() -> LogitsOnly:
    import transformers

    torch.manual_seed(0)
    return LogitsOnly(transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()).eval()


def log(msg: str) -> None:
    print(msg, flush=True)


def timed(f: Callable):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


# --------------------------------------------------------------------------- engines


def make_tensor_graphs(model, ids, threads, cache):
    if "tg_error" in cache:
        raise cache["tg_error"]  # compiled once per seq; do not retry for the next thread count
    if "tg" not in cache:
        stats = tg.CompileStats()
        try:
            fn, seconds = timed(lambda: tg.compile(model, (ids,), stats=stats))
        except Exception as e:
            cache["tg_error"] = e
            raise
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in stats.seconds.items())
        target = getattr(getattr(fn, "target", None), "name", "default")
        log(f"  tensor_graphs compile() for target {target}: {seconds:.2f} s ({phases}); {fn.memory}")
        cache["tg"] = fn
        cache["compile:tensor_graphs"] = seconds
    fn = cache["tg"]
    return lambda: fn(ids)


#: The tolerance of the "tg-tuned" engine on forward rows: float32 paths only (the bf16 and int8
#: weight paths of matrix-vector products give ~1e-3 and ~1e-2).
TUNED_TOLERANCE = 1e-5


def tuning_db() -> str:
    """The timing database of the "tg-tuned" engines: ``TG_TUNING_DB``, else one fresh per process."""
    path = os.environ.get("TG_TUNING_DB")
    if not path:
        path = os.path.join(tempfile.mkdtemp(prefix="tg-bench-tuning-"), "tuning.sqlite")
        os.environ["TG_TUNING_DB"] = path
    return path


def make_tensor_graphs_tuned(model, ids, threads, cache, *, engine: str = "tg-tuned", tolerance: float = TUNED_TOLERANCE):
    """``tg.compile(..., tune="missing", tolerance=TUNED_TOLERANCE)``: each kernel's fastest path
    measured here (records are per thread count, so one compile per thread count; the compile
    time includes the measuring). ``engine`` "tg-lowp" (`make_tensor_graphs_lowp`): the same at
    ``LOWP_TOLERANCE``, from the same database (each path's time and error are measured once)."""
    key = f"{engine}:{threads}"
    if key not in cache:
        fn, seconds = timed(lambda: tg.compile(model, (ids,), tune="missing", tolerance=tolerance, tuning_db=tuning_db()))
        tuned = sorted({c.chosen.variant for c in fn.tuning.choices if c.tuned})
        log(f"  tensor_graphs tuned at {tolerance:g} ({threads} thread(s)): {seconds:.1f} s, {fn.tuning.measured} path(s) "
            f"measured; off the heuristic: {', '.join(tuned) or 'none'}{'; ' + fn.tuning.note if fn.tuning.note else ''}")
        cache[key] = fn
        cache[f"compile:{engine}:{threads}"] = seconds
    fn = cache[key]
    return lambda: fn(ids)


#: The tolerance of the "tg-lowp" engine: the bf16 and int8 GEMM paths where their measured error fits
LOWP_TOLERANCE = 1e-2
make_tensor_graphs_lowp = functools.partial(make_tensor_graphs_tuned, engine="tg-lowp", tolerance=LOWP_TOLERANCE)


def make_eager(model, ids, threads, cache):
    def run():
        with torch.no_grad():
            return model(ids)

    return run


def make_inductor(model, ids, threads, cache):
    torch._dynamo.reset()  # inductor kernels are specialised on the thread count: recompile
    compiled = torch.compile(model, backend="inductor")

    def run():
        with torch.no_grad():
            return compiled(ids)

    _, seconds = timed(run)  # the first call compiles
    log(f"  torch.compile (inductor), {threads} thread(s): first call (compile) {seconds:.1f} s")
    cache[f"compile:torch.compile:{threads}"] = seconds
    return run


def export_onnx(model, ids, path: str) -> str:
    """Export with the dynamo exporter; fall back to the legacy (TorchScript) one."""
    errors = []
    for dynamo in (True, False):
        try:
            with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
                torch.onnx.export(
                    model, (ids,), path, input_names=["ids"], output_names=["logits"], dynamo=dynamo
                )
            return "dynamo" if dynamo else "legacy"
        except Exception as e:  # noqa: BLE001 - try the other exporter, report both if neither works
            errors.append(f"{'dynamo' if dynamo else 'legacy'}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    raise RuntimeError("torch.onnx.export failed: " + " | ".join(errors))


def ort_session(path: str, threads: int):
    """A CPU session: ``ORT_ENABLE_ALL``, ``threads`` intra-op threads, one inter-op thread, no spinning."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def onnx_file(model, ids, cache) -> str:
    """The model exported for ``ids`` (static shapes), once per ``cache``; its path."""
    if "onnx_path" not in cache:
        path = os.path.join(tempfile.mkdtemp(prefix="tg-bench-onnx-"), "model.onnx")
        exporter, seconds = timed(lambda: export_onnx(model, ids, path))
        log(f"  torch.onnx.export ({exporter} exporter): {seconds:.1f} s")
        cache["onnx_path"] = path
        cache[f"compile:torch.onnx.export ({exporter})"] = seconds
    return cache["onnx_path"]


def make_onnxruntime(model, ids, threads, cache):
    onnx_file(model, ids, cache)
    sess, seconds = timed(lambda: ort_session(cache["onnx_path"], threads))
    log(f"  ONNX Runtime session (ORT_ENABLE_ALL, {threads} thread(s)): {seconds:.1f} s")
    cache[f"compile:onnxruntime session:{threads}"] = seconds
    name = sess.get_inputs()[0].name
    feed = {name: ids.numpy()}
    return lambda: sess.run(None, feed)[0]


@functools.cache
def openvino_core():
    """One ``openvino.Core`` for the process (it loads the CPU plugin once)."""
    import openvino as ov

    return ov.Core()


def openvino_config(threads: int, precision: str = "f32") -> dict:
    """CPU plugin properties: fp32 arithmetic (no bf16 on CPUs that have it; ``precision`` "bf16":
    its bf16 hint), ``threads`` threads, one stream, latency mode: like the other engines, one
    call at a time on ``threads`` cores."""
    import openvino.properties as props
    import openvino.properties.hint as hints

    return {hints.inference_precision(): precision, props.inference_num_threads(): threads,
            hints.performance_mode(): "LATENCY", props.streams.num(): 1}


def convert_openvino(model, x) -> tuple[object, str, float, list[str]]:
    """``model`` as an OpenVINO ``Model`` for the input ``x``: ``(model, how, seconds, errors)``.

    ``ov.convert_model(model, example_input=x)`` (TorchScript tracing) first; when its frontend
    lacks an op (transformers' GPT-2 mask uses ``aten::diff``), the ``torch.export`` program.
    ``seconds``: the conversion that succeeded; ``errors``: the attempts that failed, one line each.
    """
    import openvino as ov

    attempts = {
        "TorchScript trace": lambda: ov.convert_model(model, example_input=(x,)),
        "torch.export": lambda: ov.convert_model(torch.export.export(model, (x,))),
    }
    errors = []
    for how, convert in attempts.items():
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                om, seconds = timed(convert)
            return om, how, seconds, errors
        except Exception as e:  # noqa: BLE001 - try the next frontend, report all if none works
            errors.append(f"{how}: {type(e).__name__}: {_first_line(e)}")
    raise RuntimeError("ov.convert_model failed: " + " | ".join(errors))


def _first_line(e: BaseException, limit: int = 300) -> str:
    """The line of ``e``'s message that says what failed: OpenVINO's start with a check location and
    end with a summary (``-- No conversion rule found for operations: aten::diff``)."""
    lines = [ln.strip(" -") for ln in str(e).splitlines() if ln.strip(" -")]
    summary = [ln for ln in lines if ln.startswith("No conversion rule found")]
    useful = [ln for ln in lines if not ln.startswith(("Check ", "FrontEnd API failed", "Model wasn't fully"))]
    return (summary or useful or lines or [""])[0][:limit]


def make_openvino(model, x, threads, cache, precision: str = "f32"):
    """OpenVINO's CPU plugin on the converted module (``convert_openvino``, once per ``cache``),
    compiled per thread count (``openvino_config``, at ``precision``); one infer request, inputs
    shared, not copied."""
    if "ov_model" not in cache:
        om, how, seconds, errors = convert_openvino(model, x)
        fallback = f" (after {'; '.join(errors)})" if errors else ""
        log(f"  OpenVINO convert_model via {how}: {seconds:.1f} s{fallback}")
        cache["ov_model"], cache["ov_how"] = om, how + fallback
        cache[f"compile:openvino convert_model ({how})"] = seconds
    config = openvino_config(threads, precision)
    compiled, seconds = timed(lambda: openvino_core().compile_model(cache["ov_model"], "CPU", config))
    log(f"  OpenVINO compile_model (CPU, {precision}, {threads} thread(s)): {seconds:.1f} s")
    cache[f"compile:openvino{'-' + precision if precision != 'f32' else ''} compile_model:{threads}"] = seconds
    request = compiled.create_infer_request()
    feed = {0: np.ascontiguousarray(x.numpy())}
    return lambda: request.infer(feed, share_inputs=True)[0]


MAKERS = {
    "tensor_graphs": make_tensor_graphs,
    "tg-tuned": make_tensor_graphs_tuned,
    "eager": make_eager,
    "torch.compile": make_inductor,
    "onnxruntime": make_onnxruntime,
    "openvino": make_openvino,
    "tg-lowp": make_tensor_graphs_lowp,
    "openvino-bf16": functools.partial(make_openvino, precision="bf16"),
}


# --------------------------------------------------------------------------- timing


def as_numpy(y) -> np.ndarray:
    return y.detach().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)


# Thread pools that busy-wait after a call (OpenMP in PyTorch and inductor kernels, OpenBLAS)
# keep a core spinning for a while: on a machine with few cores the engine timed next would pay
# for it. Engines therefore alternate in blocks, each after a pause in which the previous
# engine's threads go to sleep; a block starts with one untimed call (the wake-up: waking a
# sleeping pool costs up to ~10 ms on this kind of VM) unless calls take WAKE_S or more, then runs
# calls for BLOCK_S seconds (at least one).
SETTLE_S = 0.1
BLOCK_S = 0.05
WAKE_S = 0.5  # calls shorter than this get the untimed wake-up call


def bench(engines: dict[str, Callable], repeat: int, warmup: int = 2, *, settle_s: float = SETTLE_S,
          block_s: float = BLOCK_S, wake_s: float = WAKE_S) -> dict[str, float]:
    """Median ms per call of each engine over ``repeat`` rounds of alternating blocks (see ``SETTLE_S``).

    ``settle_s = block_s = wake_s = 0`` is plain call-by-call alternation (ABCDABCD...).
    """
    estimate: dict[str, float] = {}
    for name, f in engines.items():
        for _ in range(warmup):
            t0 = time.perf_counter()
            f()
            estimate[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(repeat):
        for name, f in engines.items():
            if settle_s:
                time.sleep(settle_s)
            if estimate.get(name, 0.0) < wake_s:
                f()  # the first call after the pause wakes the engine's threads: untimed
            end = time.perf_counter() + block_s
            while True:
                t0 = time.perf_counter()
                f()
                t1 = time.perf_counter()
                times[name].append(t1 - t0)
                if t1 >= end:
                    break
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def reference64(model, x) -> np.ndarray:
    """Eager in float64: a copy of ``model`` and ``x`` cast to double (token ids stay as they are)."""
    m64 = copy.deepcopy(model).double()
    with torch.no_grad():
        return as_numpy(m64(x if not x.is_floating_point() else x.double())).astype(np.float64)


def relative_error(y, y64: np.ndarray) -> float:
    """max |y - y64| / max |y64|: an engine's error against the float64 reference."""
    return float(np.abs(np.asarray(as_numpy(y), dtype=np.float64) - y64).max() / np.abs(y64).max())


def bench_forward(model, x, engines: list[str], threads_list: list[int], repeat: int, *, expected=None,
                  makers: dict[str, Callable] | None = None, warmup: int = 2, errors: dict[int, dict[str, float]] | None = None):
    """Time ``model(x)`` on every engine at every thread count, engines alternating in turns (``bench``).

    Each engine's output is first checked against ``expected`` (default: eager's) to ``MAX_ABS``
    (a reduced-precision engine, `REDUCED_PRECISION`: its error against float64 to
    ``REDUCED_MAX_ERROR``); one that fails or differs is left out of the timing. Returns
    ``([(threads, {engine: median ms})], {compile step: seconds}, [failure lines])``; ``errors``,
    when given, receives ``{threads: {engine: its relative_error against eager in float64}}`` (a
    tuned engine's paths may differ by thread count). ``makers`` maps an engine name to ``maker(model, x, threads, cache) ->
    run`` (default ``MAKERS``); ``cache`` lives across the thread counts, so that what need not be
    redone (tensor_graphs' compile, the ONNX export) is not.
    """
    makers = makers or MAKERS
    if expected is None:
        with torch.no_grad():
            expected = as_numpy(model(x))
    y64 = reference64(model, x) if errors is not None or any(e in REDUCED_PRECISION for e in engines) else None
    cache: dict = {}
    rows: list[tuple[int, dict[str, float]]] = []
    failures: list[str] = []
    for threads in threads_list:
        torch.set_num_threads(threads)
        tg.set_num_threads(threads)
        log(f"{threads} thread(s):")
        ready: dict[str, Callable] = {}
        for name in engines:
            try:
                run = makers[name](model, x, threads, cache)
                y = as_numpy(run())
            except Exception as e:  # noqa: BLE001 - report and carry on with the other engines
                failures.append(f"{name} ({threads} thread(s)): {type(e).__name__}: {e}")
                log(f"  {name}: FAILED: {type(e).__name__}: {str(e)[:2000]}")
                traceback.print_exc(limit=3)
                continue
            error = relative_error(y, y64) if y64 is not None else None
            if errors is not None and error is not None:
                errors.setdefault(threads, {})[name] = error
            if name in REDUCED_PRECISION:
                ok, what = error <= REDUCED_MAX_ERROR, f"error vs float64 {error:.2e} (max |y - y64| / max |y64|)"
                bound = REDUCED_MAX_ERROR
            else:
                diff = float(np.abs(y - expected).max())
                ok, what, bound = diff <= MAX_ABS, f"max abs diff vs eager {diff:.2e}", MAX_ABS
            log(f"  {name}: {what} {'ok' if ok else f'> {bound}: NOT TIMED'}")
            if ok:
                ready[name] = run
            else:
                failures.append(f"{name} ({threads} thread(s)): output differs from eager: {what}")
        med = bench(ready, repeat, warmup)
        rows.append((threads, med))
        log("  median ms: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()))
    seconds = {k.removeprefix("compile:"): v for k, v in cache.items() if k.startswith("compile:")}
    return rows, seconds, failures


def table(rows: list[tuple[int, int, dict[str, float]]], engines: list[str]) -> str:
    head = "| threads | seq | " + " | ".join(f"{LABELS[e]} ms" for e in engines)
    sep = "|--------:|----:|" + "|".join("-" * (len(LABELS[e]) + 4) + ":" for e in engines)
    peers = [e for e in engines if e != "tensor_graphs"]
    show_ratio = "tensor_graphs" in engines and peers
    if show_ratio:
        head += " | tg / fastest peer"
        sep += "|------------------:"
    lines = [head + " |", sep + "|"]
    for threads, seq, med in rows:
        fastest = min(med[e] for e in engines if e in med)
        cells = [f"{med[e]:.1f} ({med[e] / fastest:.2f}x)" if e in med else "failed" for e in engines]
        line = f"| {threads:7d} | {seq:3d} | " + " | ".join(cells)
        if show_ratio:
            avail = [med[e] for e in peers if e in med]
            ratio = f"{med['tensor_graphs'] / min(avail):.2f}" if "tensor_graphs" in med and avail else "n/a"
            line += f" | {ratio}"
        lines.append(line + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10, help="timed calls per engine and row (median; at least 3)")
    ap.add_argument("--seqs", type=int, nargs="+", default=[32, 128], help="sequence lengths (batch 1)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts")
    ap.add_argument("--engines", nargs="+", default=[e for e in ENGINES if not not_installed(e)], choices=ENGINES,
                    help="engines to run (default: those installed)")
    args = ap.parse_args()
    repeat = max(args.repeat, 3)
    engines = [e for e in ENGINES if e in args.engines]

    log(f"torch {torch.__version__}, {os.cpu_count()} CPUs; inductor cache {os.environ['TORCHINDUCTOR_CACHE_DIR']}")
    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        log(f"WARNING: load average {load_before:.2f} before starting: other processes share the cores, "
            "so the timings (above all at 2 threads) are unreliable")
    model, seconds = timed(build)
    log(f"GPT-2 small, random init (seed 0): {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, built in {seconds:.1f} s")

    rows: list[tuple[int, int, dict[str, float]]] = []
    compile_times: dict[tuple[int, str], float] = {}
    failures: list[str] = []
    for seq in args.seqs:
        ids = torch.randint(0, model.model.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(seq))
        with torch.no_grad():
            expected = model(ids).numpy()
        log(f"seq {seq}:")
        med_by_threads, seconds, failed = bench_forward(model, ids, engines, args.threads, repeat, expected=expected)
        for threads, med in med_by_threads:
            rows.append((threads, seq, med))
        compile_times.update({(seq, what): t for what, t in seconds.items()})
        failures += [f"{f} (seq {seq})" for f in failed]

    print()
    print(f"GPT-2 small logits, batch 1, median of {repeat} alternating calls (ms); (Nx) = time / fastest in the row; "
          f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (this process included)")
    print()
    print(table(rows, engines))
    print()
    print("| seq | compile | seconds |")
    print("|----:|---------|--------:|")
    for (seq, what), seconds in compile_times.items():
        label = what.replace("torch.compile:", "torch.compile (inductor, cold), threads ").replace(
            "onnxruntime session:", "ONNX Runtime session (ORT_ENABLE_ALL), threads "
        ).replace("openvino compile_model:", "OpenVINO compile_model (CPU, f32), threads ")
        print(f"| {seq:3d} | {label} | {seconds:.1f} |")
    if failures:
        print("\nFailures:")
        for f in failures:
            print(f"  - {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
