"""tensor_graphs: a multi-level compiler for neural-network inference, built on xDSL.

    import tensor_graphs as tg
    fn = tg.compile(model, (x,))   # one native function for the whole graph
    y = fn(x)
    dec = tg.compile_decoder(lm, max_seq=512)   # prefill + decode over one KV cache
    tokens = dec.generate(ids, max_new_tokens=20)
    fn = tg.compile(model, (x,), profile=True); print(fn.profile(x))   # time per kernel
    print(tg.tune(model, (x,)))                  # measure every kernel path: time and error
    fn = tg.compile(model, (x,), tune="cached", tolerance=1e-5); print(fn.explain())
"""

from tensor_graphs.api import (
    CompileStats,
    compile,
    compile_decoder,
    compile_module,
    estimate_memory,
    export,
    generate,
    get_num_threads,
    load,
    profile,
    set_num_threads,
    tune,
    tune_module,
)
from tensor_graphs.runtime_support.profile import ProfileReport
from tensor_graphs.runtime_support.triton_graph import DeviceError

__all__ = [
    "CompileStats",
    "DeviceError",
    "compile",
    "compile_decoder",
    "compile_module",
    "estimate_memory",
    "export",
    "generate",
    "get_num_threads",
    "load",
    "profile",
    "ProfileReport",
    "set_num_threads",
    "tune",
    "tune_module",
]
__version__ = "0.1.0"
