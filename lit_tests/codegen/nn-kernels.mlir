// RUN: tg-opt %s -p set-target{target=x86-64-v4},convert-buffer-to-llvm --split-input-file | filecheck %s
// RUN: tg-opt %s -p set-target{target=sapphirerapids},convert-buffer-to-llvm --split-input-file | filecheck --check-prefix=SPR %s

// The NN kernels of convert-buffer-to-llvm (tensor_graphs/codegen/llvm/kernels_attention.py,
// kernels_softmax_norm.py, kernels_matmul_epilogue.py).

// Causal flash attention, Sq = Sk = 128 in 64 x 64 tiles, scratch
// [S 4096 | m 64 | l 64 | acc 4096 | kt 4096] twice (two slots: up to two threads). The kernel hands
// its buffers to a worker (libgomp, or a direct call for one thread), which takes its range of the
// (batch, head, query block) items and its slot of the scratch (thread * 12416 floats): per query
// block, m = -inf, l = 0, acc = 0; the key-block loop ends at the last block that holds a visible
// key, (q0 + 63 + Sk - Sq) / 64 + 1 clamped to [0, 2]; inside it, the key block transposed into kt,
// S = scale * Q kt in register tiles of FMAs (kernels_gemm) into the scores tile (the slot's
// start), a row loop (causal cut, running max, exp, row sum, acc rescale), then acc += P V, the
// same tiles started from acc. No BLAS call.

// CHECK-LABEL: llvm.func internal @forward__0_attention(
// CHECK:         llvm.call @GOMP_parallel
// CHECK:         llvm.call @forward__0_attention__par0(
// CHECK-LABEL: llvm.func internal @forward__0_attention__par0(%shared: !llvm.ptr) {
// CHECK-DAG:     %[[SCALE:.*]] = llvm.mlir.constant(1.250000e-01 : f32) : f32
// CHECK-DAG:     %[[NEGINF:.*]] = llvm.mlir.constant(0xff800000 : f32) : f32
// CHECK-DAG:     %[[ONE:.*]] = llvm.mlir.constant(1.000000e+00 : f32) : f32
// CHECK-DAG:     %[[ZERO:.*]] = llvm.mlir.constant(0.000000e+00 : f32) : f32
// CHECK-DAG:     %[[BLK:.*]] = llvm.mlir.constant(64) : i64
// CHECK:         %[[OFF:.*]] = llvm.mul %thread, %{{.*}} overflow<nsw> : i64
// CHECK-NEXT:    %[[SLOT:.*]] = llvm.getelementptr inbounds %arena_2[%[[OFF]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK:         llvm.store %[[NEGINF]], %{{.*}} : f32, !llvm.ptr
// CHECK:         llvm.sdiv %{{.*}}, %[[BLK]] : i64
// CHECK:         llvm.select %{{.*}} : i1, i64
// CHECK:         %[[KBEND:.*]] = llvm.select %{{.*}} : i1, i64
// CHECK-NEXT:    %[[ANY:.*]] = llvm.icmp "slt" %{{.*}}, %[[KBEND]] : i64
// CHECK-NEXT:    llvm.cond_br %[[ANY]], ^[[KBLOOP:.*]](%{{.*}} : i64), ^[[KBEXIT:.*]]
// CHECK:       ^[[KBLOOP]](%[[KB:.*]]: i64):
// S = scale * Q kt: the register tile (from zeros, alpha = scale) into the scores tile, 10 tiles of
// 6 rows then one of 4
// CHECK:         llvm.call @tg_tile_6x4v16_s1_u(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[SCALE]], %{{.*}})
// CHECK:         llvm.call @tg_tile_4x4v16_s1_u(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[SCALE]], %{{.*}})
// the row's columns at and past vis = clamp(q0 + r + Sk - Sq + 1 - k0, 0, 64) are above the
// diagonal: P = 0 there, and the max and exp loops stop at vis
// CHECK:         llvm.icmp "sgt"
// CHECK-NEXT:    llvm.select %{{.*}} : i1, i64
// CHECK-NEXT:    llvm.icmp "slt"
// CHECK-NEXT:    %[[VIS:.*]] = llvm.select %{{.*}} : i1, i64
// CHECK-NEXT:    %[[SOME:.*]] = llvm.icmp "slt" %[[VIS]], %[[BLK]] : i64
// CHECK-NEXT:    llvm.cond_br %[[SOME]], ^[[HIDDEN:.*]](%[[VIS]] : i64), ^{{.*}}
// CHECK:       ^[[HIDDEN]](%{{.*}}: i64):
// CHECK:         llvm.store %[[ZERO]], %{{.*}} : f32, !llvm.ptr
// CHECK:         llvm.call_intrinsic "llvm.maximum.f32"
// CHECK:         llvm.icmp "slt" %{{.*}}, %[[VIS]] : i64
// CHECK:         llvm.fcmp "oeq" %{{.*}}, %[[NEGINF]] : f32
// CHECK:         llvm.fadd %{{.*}} {fastmathFlags = #llvm.fastmath<reassoc,contract>} : f32
// acc += P V: the same tiles, accumulating into acc (alpha 1)
// CHECK:         llvm.call @tg_tile_6x4v16_s1_u(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]], %{{.*}})
// CHECK:         %[[KBNEXT:.*]] = llvm.add %[[KB]], %{{.*}} overflow<nsw> : i64
// CHECK-NEXT:    %[[MORE:.*]] = llvm.icmp "slt" %[[KBNEXT]], %[[KBEND]] : i64
// CHECK-NEXT:    llvm.cond_br %[[MORE]], ^[[KBLOOP]](%[[KBNEXT]] : i64), ^[[KBEXIT]]
// out = acc / l, 0 where l == 0 (a fully masked row)
// CHECK:       ^[[KBEXIT]]:
// CHECK:         llvm.fdiv %[[ONE]], %{{.*}} : f32
// CHECK:         llvm.fcmp "ogt"
// CHECK-NOT:     scipy_cblas
// CHECK:         llvm.return
// The tile functions (kernels_gemm.tile_function): B's rows unaligned (_u), one k step per
// iteration, 6 x 4 FMAs per step
// CHECK-LABEL: llvm.func internal @tg_tile_6x4v16_s1_u(
// CHECK:         llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<16xf32>
// CHECK-COUNT-24: llvm.intr.fma(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>) -> vector<16xf32>
// CHECK:         llvm.insertelement %alpha
// CHECK:         llvm.fmul %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK:         llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : vector<16xf32>, !llvm.ptr
// CHECK-LABEL: llvm.func internal @tg_tile_4x4v16_s1_u(

builtin.module attributes {tg.arena_size = 99328 : i64} {
  func.func @forward(%q: memref<1x2x128x64xf32>, %k: memref<1x2x128x64xf32>, %v: memref<1x2x128x64xf32>, %o: memref<1x2x128x64xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<99328xi8>
    %s = buf.view %arena[0] : memref<99328xi8> -> memref<24832xf32>
    buf.attention ins(%q, %k, %v : memref<1x2x128x64xf32>, memref<1x2x128x64xf32>, memref<1x2x128x64xf32>) outs(%o, %s : memref<1x2x128x64xf32>, memref<24832xf32>) {scale = 0.125 : f32, causal = true}
    func.return
  }
}

// -----

// Without causal masking every key block is visited: a static loop, no block bound, no select
// (one slot: the work runs in the kernel itself).

// CHECK-LABEL: llvm.func internal @forward__0_attention(
// CHECK:         %[[BLK:.*]] = llvm.mlir.constant(64) : i64
// CHECK-NOT:     llvm.sdiv %{{.*}}, %[[BLK]]
// CHECK:         llvm.call @tg_tile_6x4v16_s1_u
// CHECK-NOT:     llvm.icmp "sgt"
// CHECK:         llvm.return

builtin.module attributes {tg.arena_size = 49664 : i64} {
  func.func @forward(%q: memref<1x2x128x64xf32>, %k: memref<1x2x128x64xf32>, %v: memref<1x2x128x64xf32>, %o: memref<1x2x128x64xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<49664xi8>
    %s = buf.view %arena[0] : memref<49664xi8> -> memref<12416xf32>
    buf.attention ins(%q, %k, %v : memref<1x2x128x64xf32>, memref<1x2x128x64xf32>, memref<1x2x128x64xf32>) outs(%o, %s : memref<1x2x128x64xf32>, memref<12416xf32>) {scale = 0.125 : f32}
    func.return
  }
}

// -----

// Decode (Sq = 1), GQA with 4 query heads on 2 kv heads, an additive padding mask [B, 1, 1, Sk]:
// the scores as a dot product per key along its row (a reassociable sum LLVM vectorises, no
// transpose of the key block), the mask added before the running max, P V by a one-row tile.

// CHECK-NOT:     scipy_cblas
// CHECK-LABEL: llvm.func internal @forward__0_attention(
// CHECK-NOT:     llvm.call @tg_tile_1x4v16_s1_u
// CHECK:         llvm.fadd %{{.*}}, %{{.*}} {fastmathFlags = #llvm.fastmath<reassoc,contract>} : f32
// CHECK:         llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK:         llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK-NEXT:    llvm.fadd
// CHECK:         llvm.call_intrinsic "llvm.maximum.f32"
// CHECK:         llvm.call @tg_tile_1x4v16_s1_u
// CHECK:         llvm.return

builtin.module attributes {tg.arena_size = 17024 : i64} {
  func.func @forward(%q: memref<2x4x1x64xf32>, %k: memref<2x2x100x64xf32>, %v: memref<2x2x100x64xf32>, %mask: memref<2x1x1x100xf32>, %o: memref<2x4x1x64xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<17024xi8>
    %s = buf.view %arena[0] : memref<17024xi8> -> memref<4256xf32>
    buf.attention ins(%q, %k, %v, %mask : memref<2x4x1x64xf32>, memref<2x2x100x64xf32>, memref<2x2x100x64xf32>, memref<2x1x1x100xf32>) outs(%o, %s : memref<2x4x1x64xf32>, memref<4256xf32>) {scale = 0.125 : f32, causal = true}
    func.return
  }
}

// -----

// Softmax over the last dim: per row a max loop (llvm.maximum, carried in a block argument), an exp-sum
// loop that stores exp(x - max) with a reassociable sum, and one scale loop by 1 / sum.

// CHECK-LABEL: llvm.func internal @forward__0_softmax(
// CHECK:       ^[[ROW:.*]](%{{.*}}: i64):
// CHECK:       ^[[MAX:.*]](%{{.*}}: i64, %[[MACC:.*]]: f32):
// CHECK:         %[[MNEW:.*]] = llvm.call_intrinsic "llvm.maximum.f32"(%[[MACC]], %{{.*}}) : (f32, f32) -> f32
// CHECK:         llvm.cond_br %{{.*}}, ^[[MAX]](%{{.*}}, %[[MNEW]] : i64, f32), ^[[MAXEXIT:.*]](%[[MNEW]] : f32)
// CHECK:       ^[[MAXEXIT]](%[[ROWMAX:.*]]: f32):
// CHECK:       ^[[SUM:.*]](%{{.*}}: i64, %[[SACC:.*]]: f32):
// CHECK:         llvm.fsub %{{.*}}, %[[ROWMAX]] : f32
// CHECK:         llvm.store
// CHECK:         %[[SNEW:.*]] = llvm.fadd %[[SACC]], %{{.*}} {fastmathFlags = #llvm.fastmath<reassoc,contract>} : f32
// CHECK:         llvm.cond_br %{{.*}}, ^[[SUM]](%{{.*}}, %[[SNEW]] : i64, f32), ^[[SUMEXIT:.*]](%[[SNEW]] : f32)
// CHECK:       ^[[SUMEXIT]](%[[TOTAL:.*]]: f32):
// CHECK:         %[[INV:.*]] = llvm.fdiv %{{.*}}, %[[TOTAL]] : f32
// CHECK:         llvm.fmul %{{.*}}, %[[INV]] : f32
// CHECK:         llvm.cond_br %{{.*}}, ^[[ROW]](%{{.*}} : i64), ^{{.*}}
// CHECK:         llvm.return

builtin.module {
  func.func @forward(%x: memref<4x1000xf32>, %o: memref<4x1000xf32>) attributes {tg.num_outputs = 1 : i64} {
    buf.softmax ins(%x : memref<4x1000xf32>) outs(%o : memref<4x1000xf32>) {dim = 1 : i64}
    func.return
  }
}

// -----

// Log-softmax along a middle dim: tiles of inner columns with the per-column max and sum in a
// stack buffer allocated once in the entry block.

// CHECK-LABEL: llvm.func internal @forward__0_softmax(
// CHECK:         llvm.alloca %{{.*}} x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK:         llvm.call_intrinsic "llvm.maximum.f32"
// CHECK:         llvm.fsub
// CHECK:         llvm.return

builtin.module {
  func.func @forward(%x: memref<2x9x300xf32>, %o: memref<2x9x300xf32>) attributes {tg.num_outputs = 1 : i64} {
    buf.softmax ins(%x : memref<2x9x300xf32>) outs(%o : memref<2x9x300xf32>) {dim = 1 : i64, log = true}
    func.return
  }
}

// -----

// Layer norm: per row a sum of deviations from the first element, a sum of squared deviations
// (both reassociable), rstd = 1 / sqrt(var + eps), then (x - mean) * rstd * w + b.

// CHECK-LABEL: llvm.func internal @forward__0_layer_norm(
// CHECK:         llvm.fadd %{{.*}} {fastmathFlags = #llvm.fastmath<reassoc,contract>} : f32
// CHECK:         llvm.fmul
// CHECK:         llvm.fadd %{{.*}} {fastmathFlags = #llvm.fastmath<reassoc,contract>} : f32
// CHECK:         llvm.intr.sqrt
// CHECK:         llvm.fdiv
// CHECK:         llvm.store
// CHECK:         llvm.return

builtin.module {
  func.func @forward(%x: memref<4x768xf32>, %w: memref<768xf32>, %b: memref<768xf32>, %o: memref<4x768xf32>) attributes {tg.num_outputs = 1 : i64} {
    buf.layer_norm ins(%x, %w, %b : memref<4x768xf32>, memref<768xf32>, memref<768xf32>) outs(%o : memref<4x768xf32>) {eps = 1.0e-05 : f32}
    func.return
  }
}

// -----

// Matmul with a GELU epilogue, N = 300 = 256 + 44: per column block, the bias is copied into the
// block, sgemm writes it (N = 256, then 44, ldc = 300), and the activation loop runs over it.

// CHECK-LABEL: llvm.func internal @forward__0_matmul(
// CHECK-DAG:     %[[LDC:.*]] = llvm.mlir.constant(300 : i32) : i32
// CHECK-DAG:     %[[NB:.*]] = llvm.mlir.constant(256 : i32) : i32
// CHECK-DAG:     %[[TAIL:.*]] = llvm.mlir.constant(44 : i32) : i32
// CHECK:         llvm.getelementptr inbounds %bias_1[
// CHECK:         llvm.call @scipy_cblas_sgemm(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[NB]], %{{.*}}, %{{.*}}, %x_1, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LDC]])
// CHECK:         llvm.cond_br
// CHECK:         llvm.getelementptr inbounds %bias_1[
// CHECK:         llvm.call @scipy_cblas_sgemm(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[TAIL]], %{{.*}}, %{{.*}}, %x_1, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LDC]])
// CHECK:         llvm.cond_br
// CHECK:         llvm.return

builtin.module {
  func.func @forward(%x: memref<4x64xf32>, %w: memref<300x64xf32>, %bias: memref<300xf32>, %o: memref<4x300xf32>) attributes {tg.num_outputs = 1 : i64} {
    buf.matmul ins(%x, %w, %bias : memref<4x64xf32>, memref<300x64xf32>, memref<300xf32>) outs(%o : memref<4x300xf32>) {transpose_b = true, beta = 1.0 : f32, activation = "gelu"}
    func.return
  }
}

// -----

// buf.im2col, 3x3 taps over a 4x5 image padded by 1: one row (n, c) at a time; each tap is a
// call of the module's tap function with its ranges (OH 4, OW 5; the rows y0..y1 and columns
// x0..x1 that read the image: the centre tap 0..4 x 0..5), which copies the block of the image
// (a memcpy per output row) and fills the padded border with the pad value (0).
// CHECK-LABEL: llvm.func internal @forward__0_im2col(
// CHECK-DAG:     %[[C0:.*]] = llvm.mlir.constant(0) : i64
// CHECK-DAG:     %[[C1:.*]] = llvm.mlir.constant(1) : i64
// CHECK-DAG:     %[[C4:.*]] = llvm.mlir.constant(4) : i64
// CHECK-DAG:     %[[C5:.*]] = llvm.mlir.constant(5) : i64
// CHECK:         llvm.call @tg_im2col_tap_f32_c1_pad0p0(%{{.*}}, %{{.*}}, %[[C4]], %[[C5]], %[[C0]], %[[C4]], %[[C0]], %[[C5]], %[[C5]], %[[C1]])
// CHECK-NOT:     llvm.call_intrinsic "llvm.memcpy
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func internal @tg_im2col_tap_f32_c1_pad0p0(%src: !llvm.ptr, %dst: !llvm.ptr, %oh: i64, %ow: i64, %y0: i64, %y1: i64, %x0: i64, %x1: i64, %row_stride: i64, %col_stride: i64) {
// CHECK-DAG:     %[[ZERO:.*]] = llvm.mlir.constant(0.000000e+00 : f32) : f32
// CHECK:         llvm.store %[[ZERO]]
// CHECK:         llvm.call_intrinsic "llvm.memcpy.p0.p0.i64"
// CHECK:         llvm.store %[[ZERO]]
// CHECK:         llvm.return
func.func @forward(%x: memref<1x2x4x5xf32>, %o: memref<1x2x3x3x4x5xf32>) attributes {tg.num_outputs = 1 : i64} {
  buf.im2col ins(%x : memref<1x2x4x5xf32>) outs(%o : memref<1x2x3x3x4x5xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
  func.return
}

// -----

// The same windows into column panels of 16 (the rhs of a convolution's packed GEMM, see
// fuse-im2col-panels): each tap's 4x5 plane into a row on the stack, then its 20 values into the
// panels: 16 floats (64 bytes) into panel 0, 4 floats (16 bytes) into panel 1, whose 12 padding
// columns are zeros.
// CHECK-LABEL: llvm.func internal @forward__0_im2col(
// CHECK-DAG:     %[[PANEL:.*]] = llvm.mlir.constant(64) : i64
// CHECK-DAG:     %[[TAIL:.*]] = llvm.mlir.constant(16) : i64
// CHECK:         %[[PLANE:.*]] = llvm.alloca %{{.*}} x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK:         llvm.call_intrinsic "llvm.memcpy.p0.p0.i64"(%{{.*}}, %[[PLANE]], %[[PANEL]], %{{.*}})
// CHECK-NEXT:    llvm.getelementptr
// CHECK-NEXT:    llvm.getelementptr inbounds %[[PLANE]][%[[TAIL]]]
// CHECK-NEXT:    llvm.call_intrinsic "llvm.memcpy.p0.p0.i64"(%{{.*}}, %{{.*}}, %[[TAIL]], %{{.*}})
// CHECK:         llvm.return
func.func @forward(%x: memref<1x2x4x5xf32>, %o: memref<2x18x16xf32>) attributes {tg.num_outputs = 1 : i64} {
  buf.im2col ins(%x : memref<1x2x4x5xf32>) outs(%o : memref<2x18x16xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, panels = 16 : i64}
  func.return
}

// -----

// buf.winograd_input, F(2x2, 3x3) over a 5x6 image padded by 1 (3x3 tiles): per channel, the 4
// input rows of each tile row into zero-bordered stack rows (a memcpy, or zeros outside the
// image), then 16 tiles at a time (AVX-512's 16 lanes): each of the 16 inputs d[r][k] of 16 tiles is a
// 32-float load with its even lanes kept (tile columns 2 apart), B^T d B in adds and subtracts,
// and 16 vectors stored into the stack rows of the 16 GEMMs, which are copied into the panels.
// CHECK-LABEL: llvm.func internal @forward__0_winograd_input(
// CHECK-COUNT-2: llvm.alloca %{{.*}} x f32 {alignment = 64 : i64}
// CHECK:         llvm.call_intrinsic "llvm.memcpy.p0.p0.i64"
// CHECK:         llvm.call_intrinsic "llvm.memset.p0.i64"
// CHECK:         llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<32xf32>
// CHECK-NEXT:    llvm.shufflevector %{{.*}}, %{{.*}} [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30] : vector<32xf32>
// CHECK-COUNT-16: llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : vector<16xf32>, !llvm.ptr
// CHECK-NOT:     llvm.fmul
// CHECK:         llvm.return
func.func @forward(%x: memref<1x16x5x6xf32>, %o: memref<16x1x16x16xf32>) attributes {tg.num_outputs = 1 : i64} {
  buf.winograd_input ins(%x : memref<1x16x5x6xf32>) outs(%o : memref<16x1x16x16xf32>) {padding = array<i64: 1, 1>}
  func.return
}

// -----

// buf.winograd_output of 5x34 outputs (3x17 tiles) with a bias and ReLU: per output channel and
// tile row, 16 tiles at a time: the 16 GEMM products as vectors, A^T M A in adds and subtracts,
// each output row's two columns interleaved into 32 floats on the stack; the 17th tile one
// float at a time; then the epilogue from the stack rows into the output.
// CHECK-LABEL: llvm.func internal @forward__0_winograd_output(
// CHECK:         llvm.alloca %{{.*}} x f32 {alignment = 64 : i64}
// CHECK-COUNT-16: llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<16xf32>
// CHECK:         llvm.shufflevector %{{.*}}, %{{.*}} [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31] : vector<32xf32>
// CHECK:         llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : vector<32xf32>, !llvm.ptr
// CHECK:         llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK:         llvm.fcmp "olt"
// CHECK:         llvm.return
func.func @forward(%m: memref<16x16x64xf32>, %b: memref<16x1x1xf32>, %o: memref<1x16x5x34xf32>) attributes {tg.num_outputs = 1 : i64} {
  buf.winograd_output ins(%m, %b : memref<16x16x64xf32>, memref<16x1x1xf32>) outs(%o : memref<1x16x5x34xf32>) {beta = 1.0 : f32, activation = "relu"}
  func.return
}

// -----

// buf.quantized_matvec over bf16 panels (kernels_quantized.py): per panel of 64 columns, 4 chains
// of 4 vectors; each load of 16 words (two bf16 columns each) gives two vectors of 16 floats:
// the words masked to their high halves and the words shifted up by 16, each into an FMA; the
// panel's sums through a stack tile of 64 floats.
// CHECK-LABEL: llvm.func internal @forward__0_quantized_matvec(
// CHECK:         llvm.alloca %{{.*}} x f32 {alignment = 64 : i64}
// CHECK:         llvm.load %{{.*}} {alignment = 64 : i64} : !llvm.ptr -> vector<16xi32>
// CHECK-NEXT:    llvm.and
// CHECK-NEXT:    llvm.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK-NEXT:    llvm.shl
// CHECK-NEXT:    llvm.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK:         llvm.intr.fma
// CHECK:         llvm.return
func.func @forward(%x: memref<1x32xf32>, %o: memref<1x100xf32>) attributes {tg.num_outputs = 1 : i64} {
  %wb = buf.packed_weight "fc.weight" {transposed = true, layout = "bf16panels", source_shape = array<i64: 100, 32>} : memref<2x32x64xbf16>
  buf.quantized_matvec ins(%x, %wb : memref<1x32xf32>, memref<2x32x64xbf16>) outs(%o : memref<1x100xf32>) {format = "bf16"}
  func.return
}

// -----

// The same over int8 panels: a load of 16 bytes, sign-extended and converted, into an FMA; the
// sums times the panel's scales.
// CHECK-LABEL: llvm.func internal @forward__0_quantized_matvec(
// CHECK:         llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr -> vector<16xi8>
// CHECK-NEXT:    llvm.sext %{{.*}} : vector<16xi8> to vector<16xi32>
// CHECK-NEXT:    llvm.sitofp %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK:         llvm.intr.fma
// CHECK:         llvm.fmul %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK:         llvm.return
func.func @forward(%x: memref<1x32xf32>, %o: memref<1x100xf32>) attributes {tg.num_outputs = 1 : i64} {
  %wq = buf.packed_weight "fc.weight" {transposed = true, layout = "int8panels", source_shape = array<i64: 100, 32>} : memref<2x32x64xi8>
  %ws = buf.packed_weight "fc.weight" {transposed = true, layout = "int8scalespanels", source_shape = array<i64: 100, 32>} : memref<2x64xf32>
  buf.quantized_matvec ins(%x, %wq, %ws : memref<1x32xf32>, memref<2x32x64xi8>, memref<2x64xf32>) outs(%o : memref<1x100xf32>) {format = "int8"}
  func.return
}

// -----

// A packed GEMM whose epilogue is separate (tg.separate_epilogue = 1, a tuner's path): the
// register tiles store the products (both panels' tiles first, no ReLU between them), then one
// sweep over the output adds the bias and applies the ReLU.
// CHECK-LABEL: llvm.func internal @forward__0_packed_matmul(
// CHECK:         llvm.call @tg_tile_6x4v16_s1_p4x16(
// CHECK-NOT:     llvm.fcmp
// CHECK:         llvm.call @tg_tile_6x3v16_s1(
// CHECK:         llvm.fadd %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:    llvm.fcmp "olt"
// CHECK-NOT:     llvm.call @tg_tile
// CHECK:         llvm.return
func.func @forward(%x: memref<6x32xf32>, %b: memref<100xf32>, %o: memref<6x100xf32>) attributes {tg.num_outputs = 1 : i64} {
  %wp = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<2x32x64xf32>
  buf.packed_matmul ins(%x, %wp, %b : memref<6x32xf32>, memref<2x32x64xf32>, memref<100xf32>) outs(%o : memref<6x100xf32>) {beta = 1.0 : f32, activation = "relu", tg.separate_epilogue = 1 : i64}
  func.return
}

// -----

// buf.quantized_matvec over bf16 panels paired along K (format bf16dot): the row of x rounded to
// bf16 pairs on the kernel's stack once (round to nearest even: + 0x7FFF + the kept lsb, a NaN
// kept quiet), then per panel 4 chains of dot products of 16 weight words by a broadcast word of
// x: vdpbf16ps on a target with AVX512-BF16 (SPR), two FMAs over the widened halves elsewhere.
// CHECK-LABEL: llvm.func internal @forward__0_quantized_matvec(
// CHECK:         llvm.fcmp "uno"
// CHECK:         llvm.ptrtoint
// CHECK:         llvm.load %{{.*}} {alignment = 64 : i64} : !llvm.ptr -> vector<16xi32>
// CHECK:         llvm.shl
// CHECK:         llvm.and
// CHECK:         llvm.intr.fma
// CHECK-NOT:     dpbf16ps
// CHECK:         llvm.return
// SPR-LABEL:   llvm.func internal @forward__0_quantized_matvec(
// SPR:           llvm.fcmp "uno"
// SPR-COUNT-16:  llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xf32>, vector<16xi32>, vector<16xi32>) -> vector<16xf32>
// SPR:           llvm.return
func.func @forward(%x: memref<1x33xf32>, %b: memref<100xf32>, %o: memref<1x100xf32>) attributes {tg.num_outputs = 1 : i64} {
  %wb = buf.packed_weight "fc.weight" {transposed = true, layout = "bf16kpanels", source_shape = array<i64: 100, 33>} : memref<2x17x128xbf16>
  buf.quantized_matvec ins(%x, %wb, %b : memref<1x33xf32>, memref<2x17x128xbf16>, memref<100xf32>) outs(%o : memref<1x100xf32>) {format = "bf16dot", beta = 1.0 : f32, activation = "relu"}
  func.return
}
