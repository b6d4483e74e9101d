"""tensor_graphs: a multi-level compiler for neural-network inference, built on xDSL.

    import tensor_graphs as tg
    fn = tg.compile(model, (x,))   # one native function for the whole graph
    y = fn(x)
"""

from tensor_graphs.api import CompileStats, compile, compile_module, export, set_num_threads

__all__ = ["CompileStats", "compile", "compile_module", "export", "set_num_threads"]
__version__ = "0.1.0"
