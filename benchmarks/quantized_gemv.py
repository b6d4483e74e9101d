"""One matrix-vector product by its f32 packed, bf16, int8 and int4 paths (int4 by float FMAs and by
integer dot products; bf16 dot products where the CPU has AVX512-BF16), alone, as the tuner times it.

    .venv/bin/python benchmarks/quantized_gemv.py [THREADS] [warm]

GPT-2 small's decode GEMV shapes (768x3072, 3072x768, the 768x50257 LM head), random weights;
each path compiled alone (`tensor_graphs.tuning.measure`), timed by the native kernel counters
(median of the tuner's runs), with the weight cold (a buffer twice the L3 written between runs)
unless ``warm``. Printed: microseconds, weight GB/s (the bytes each path streams: codes, scales
and zero points) and GFLOP/s per path.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from xdsl.context import Context

import tensor_graphs as tg
from tensor_graphs.frontend.importer import import_model
from tensor_graphs.passes import TENSOR_PIPELINE, build_pipeline
from tensor_graphs.target import Target, cpu_model
from tensor_graphs.tuning.measure import measure, standalone
from tensor_graphs.tuning.paths import Candidate, kernel_paths

#: bytes per weight each path streams: int8 adds a scale per column (negligible); int4 a bf16
#: scale per group of 32 (Q4_0's 4.5 bits), or per 128 with a byte of zero point (4.19 bits)
BYTES = {"matmul.packed": 4, "matmul.bf16_weights": 2, "matmul.int8_weights": 1, "matmul.bf16_dot": 2,
         "matmul.int4_weights": 0.5 + 2 / 32, "matmul.int4zp_weights": 0.5 + 3 / 128, "matmul.int4_dot": 0.5 + 2 / 32}


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    cold = not (len(sys.argv) > 2 and sys.argv[2] == "warm")
    tg.set_num_threads(threads)
    torch.manual_seed(0)
    print(f"{cpu_model()} ({Target.host().llvm_cpu}), {threads} thread(s), weights {'cold' if cold else 'warm'}")
    for k, n in ((768, 3072), (3072, 768), (768, 50257)):
        model = torch.nn.Linear(k, n, bias=False).eval()
        x = torch.randn(1, k)
        graph = import_model(model, (x,))
        build_pipeline(TENSOR_PIPELINE).apply(Context(), graph.module)
        paths = next(p for p in kernel_paths(graph.module) if p.name == "tg.matmul")
        alone = standalone(paths.op)
        with torch.no_grad():
            ref = (x.double() @ model.weight.double().T).float().numpy()
        for variant, size in BYTES.items():
            if variant not in paths.applicable:  # bf16_dot: a CPU without AVX512-BF16
                print(f"{k}x{n} {variant:22s} not here: {dict(paths.rejected).get(variant, 'not applicable')}")
                continue
            m = measure(alone, Candidate(variant), [x.numpy()], graph.weights, ref, target=Target.host(), cold=cold)
            t = float(np.median(m.times_ns))
            print(f"{k}x{n} {variant:22s} {t / 1e3:9.1f} us  {k * n * size / t:5.1f} GB/s  {2 * k * n / t:5.1f} GFLOP/s  "
                  f"error {m.max_rel_err:.1e}")


if __name__ == "__main__":
    main()
