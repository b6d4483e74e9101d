"""How fast this core's AMX tiles multiply bf16 in a 2 x 2 tile loop (the bf16 GEMM's, `kernels_amx`).

    .venv/bin/python benchmarks/amx_tiles.py [--repeat 3]

One thread runs a loop of 4 tile loads (2 of A, 2 of B) and 4 ``tdpbf16ps`` (4 float32
accumulator tiles of 16 x 16) per step, JIT-compiled from LLVM IR through llvmlite, with the
tiles read (a) strided as the GEMM reads them (A rows ``2 K`` bytes apart, B rows 256 bytes: a
panel of 64 columns of pairs), from a fresh part of an 8 MiB buffer each step; (b) the same,
always from the same bytes (in L1); (c) as contiguous 1 KiB tiles; (d) contiguous, same bytes.
GFLOP/s count 2 x 16 x 16 x 32 per ``tdpbf16ps``. Needs a CPU with AMX-BF16 and Linux's
permission for the tile state (asked for here); elsewhere it says so and exits. Each call runs
`PASSES` passes over K, so that the call and the configuration cost nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import time

import llvmlite.binding as llvm
import numpy as np

from tensor_graphs.codegen.llvm.kernels_amx import request_amx
from tensor_graphs.target import Target

IR = r'''
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tilezero(i8 immarg)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilerelease()
define void @k(ptr %cfg, ptr %a, ptr %b, ptr %c, i64 %steps, i64 %sa, i64 %sb, i64 %oa, i64 %ob, i64 %a1, i64 %b1, i64 %reps) #0 {
entry:
  call void @llvm.x86.ldtilecfg(ptr %cfg)
  call void @llvm.x86.tilezero(i8 0)
  call void @llvm.x86.tilezero(i8 1)
  call void @llvm.x86.tilezero(i8 2)
  call void @llvm.x86.tilezero(i8 3)
  br label %outer
outer:
  %r = phi i64 [0, %entry], [%rn, %tail]
  br label %loop
loop:
  %i = phi i64 [0, %outer], [%n, %loop]
  %offa = mul i64 %i, %oa
  %offb = mul i64 %i, %ob
  %pa0 = getelementptr i8, ptr %a, i64 %offa
  %pa1 = getelementptr i8, ptr %pa0, i64 %a1
  %pb0 = getelementptr i8, ptr %b, i64 %offb
  %pb1 = getelementptr i8, ptr %pb0, i64 %b1
  call void @llvm.x86.tileloadd64(i8 4, ptr %pa0, i64 %sa)
  call void @llvm.x86.tileloadd64(i8 5, ptr %pa1, i64 %sa)
  call void @llvm.x86.tileloadd64(i8 6, ptr %pb0, i64 %sb)
  call void @llvm.x86.tileloadd64(i8 7, ptr %pb1, i64 %sb)
  call void @llvm.x86.tdpbf16ps(i8 0, i8 4, i8 6)
  call void @llvm.x86.tdpbf16ps(i8 1, i8 4, i8 7)
  call void @llvm.x86.tdpbf16ps(i8 2, i8 5, i8 6)
  call void @llvm.x86.tdpbf16ps(i8 3, i8 5, i8 7)
  %n = add i64 %i, 1
  %d = icmp eq i64 %n, %steps
  br i1 %d, label %tail, label %loop
tail:
  %rn = add i64 %r, 1
  %rd = icmp eq i64 %rn, %reps
  br i1 %rd, label %done, label %outer
done:
  call void @llvm.x86.tilestored64(i8 0, ptr %c, i64 64)
  call void @llvm.x86.tilerelease()
  ret void
}
attributes #0 = { "target-features"="+amx-tile,+amx-bf16" }
'''


FLOPS_PER_STEP = 4 * 2 * 16 * 16 * 32
#: Passes over K per call (each call ~10-40 ms: the ctypes call and the tile configuration negligible)
PASSES = 20000


def kernel():
    """The loop as a ctypes function ``k(cfg, a, b, c, steps, a_stride, b_stride, a_step, b_step,
    a_half, b_half, reps)``: ``reps`` passes of ``steps`` steps (one configuration per call)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(IR)
    tm = llvm.Target.from_default_triple().create_target_machine(cpu=llvm.get_host_cpu_name(),
                                                                 features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 4 + [ctypes.c_int64] * 8))(engine.get_function_address("k"))
    return fn, engine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--k", type=int, default=768, help="K of the strided A rows (bf16 elements)")
    args = ap.parse_args(argv)
    if "amx-bf16" not in Target.host().extensions:
        print("this CPU has no AMX-BF16: nothing to measure")
        return 0
    request_amx()
    fn, _engine = kernel()
    cfg = np.zeros(64, np.uint8)
    cfg[0] = 1
    cfg[16:32].view(np.uint16)[:8] = 64
    cfg[48:56] = 16
    buf = np.zeros(8 << 20, np.uint8)
    a, b = buf[: 4 << 20], buf[4 << 20:]
    c = np.zeros(1024, np.float32)
    k = args.k
    steps = k // 32
    cases = {
        "strided as the GEMM reads them": (k * 2, 256, 64, 16 * 256, 16 * k * 2, 64),
        "strided, the same bytes each step (L1)": (k * 2, 256, 0, 0, 16 * k * 2, 64),
        "contiguous 1 KiB tiles": (64, 64, 2048, 2048, 1024, 1024),
        "contiguous, the same bytes each step": (64, 64, 0, 0, 1024, 1024),
    }
    print(f"host: {Target.host().describe()}\n\n| tiles | GFLOP/s (median of {args.repeat}) |\n|---|--:|")
    for name, (sa, sb, oa, ob, a1, b1) in cases.items():
        call = (cfg.ctypes.data, a.ctypes.data, b.ctypes.data, c.ctypes.data, steps, sa, sb, oa, ob, a1, b1, PASSES)
        rates = []
        for _ in range(args.repeat):
            fn(*call)
            t0 = time.perf_counter()
            fn(*call)
            rates.append(FLOPS_PER_STEP * steps * PASSES / (time.perf_counter() - t0) / 1e9)
        print(f"| {name} | {sorted(rates)[len(rates) // 2]:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
