// RUN: tg-opt %s -p 'set-target{target=x86-64-v3}' | filecheck --check-prefix=V3 %s
// RUN: tg-opt %s -p 'set-target{target=znver3}' | filecheck --check-prefix=CPU %s
// RUN: tg-opt %s -p 'set-target{target=x86-64-v4},convert-tensor-to-buffer{threads=1}' | filecheck --check-prefix=AVX512 %s
// RUN: tg-opt %s -p 'set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1}' | filecheck --check-prefix=AVX2 %s
// RUN: tg-opt %s -p 'set-target{target=x86-64},convert-tensor-to-buffer{threads=1}' | filecheck --check-prefix=SSE %s
// RUN: tg-opt %s -p 'set-target{target=x86-64-v3},convert-tensor-to-buffer{threads=1},plan-memory,convert-buffer-to-llvm' | filecheck --check-prefix=AVX2-LLVM %s
// RUN: not tg-opt %s -p 'set-target{target=pentium4}' 2>&1 | filecheck --check-prefix=BAD %s

// set-target records the machine the module is compiled for (tensor_graphs/target.py) as its
// tg.target attribute: an ISA level or a CPU name, with the vector width and registers the
// kernels read (the caches and cores are this machine's, so they are not pinned here). Every
// later pass reads it: the packed GEMM's weight panels are as wide as the target's register tile
// (64 columns of 4 zmm for AVX-512, 16 of 2 ymm for AVX2, 8 of 2 xmm for SSE2), and convert-buffer-to-llvm emits
// vectors of its width, here a 5-row tile of 2 x <8 x f32> per row with a broadcast of A (the
// register tile's function, called by the GEMM kernel).

// V3:       builtin.module attributes {tg.target = {name = "x86-64-v3", cpu = "x86-64-v3", level = "x86-64-v3", extensions = ""
// V3-SAME:  vector_bits = 256 : i64, vector_registers = 16 : i64}}

// CPU:      tg.target = {name = "znver3", cpu = "znver3", level = "x86-64-v3"

// AVX512:   buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<2x32x64xf32>
// AVX2:     buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<7x32x16xf32>
// SSE:      buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<13x32x8xf32>

// AVX2-LLVM:     tg.weight_table = ["fc.bias", "fc.weight@panels16t"]
// AVX2-LLVM:     llvm.func internal @forward__0_packed_matmul(
// AVX2-LLVM:       llvm.call @tg_tile_5x2v8_s1_p1x16(
// AVX2-LLVM:     llvm.func internal @tg_tile_5x2v8_s1_p1x16(
// AVX2-LLVM:       llvm.shufflevector %{{.*}}, %{{.*}} [0, 0, 0, 0, 0, 0, 0, 0] : vector<8xf32>
// AVX2-LLVM:       llvm.load %{{.*}} {alignment = 32 : i64} : !llvm.ptr -> vector<8xf32>
// AVX2-LLVM:       llvm.intr.fma(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
// AVX2-LLVM-NOT:   vector<16xf32>

// BAD: error: set-target: unknown target 'pentium4': give host, an ISA level or a CPU name (x86-64, x86-64-v2, x86-64-v3, x86-64-v4, haswell,

func.func @forward(%x: tensor<5x32xf32>) -> tensor<5x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x32xf32>
  %b = tg.weight "fc.bias" : tensor<100xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "relu"} : (tensor<5x32xf32>, tensor<100x32xf32>, tensor<100xf32>) -> tensor<5x100xf32>
  func.return %y : tensor<5x100xf32>
}
