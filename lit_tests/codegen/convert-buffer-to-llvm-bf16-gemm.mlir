// RUN: tg-opt %s -p set-target{target=x86-64-v4},convert-buffer-to-llvm | filecheck --check-prefix=EMU %s
// RUN: tg-opt %s -p set-target{target=cooperlake},convert-buffer-to-llvm | filecheck --check-prefix=DOT %s
// RUN: tg-opt %s -p set-target{target=sapphirerapids},convert-buffer-to-llvm | filecheck --check-prefix=AMX %s

// buf.packed_matmul over bf16 pairs along K (a bf16 lhs, "bf16kpanels" weight: matmul.packed_bf16),
// by the instructions the target has (tensor_graphs/codegen/llvm/kernels_amx.py, bf16_dot.py,
// kernels_gemm.py):
// - no bf16 instructions (x86-64-v4): the register tiles' dot products of pairs emulated, two FMAs
//   over the widened halves (a shift and a mask of each word);
// - AVX512-BF16 (cooperlake): one vdpbf16ps per accumulator and pair step;
// - AMX (sapphirerapids): each thread loads its tile configuration (its rows: 32 a block, then the
//   call's tail rows), zeroes the accumulator tiles, loads A's and B's tiles and multiplies them
//   with tdpbf16ps, stores the sums, adds the bias and applies the ReLU over the block just
//   stored, and releases the tiles at the end.

// EMU-LABEL: llvm.func internal @tg_tile_6x4v16_s{{[0-9]+}}_bf16(
// EMU:         llvm.shl
// EMU:         llvm.and
// EMU:         llvm.intr.fma
// EMU-NOT:     dpbf16ps
// EMU:         llvm.return

// DOT-LABEL: llvm.func internal @tg_tile_6x4v16_s{{[0-9]+}}_bf16(
// DOT-COUNT-24: llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xf32>, vector<16xi32>, vector<16xi32>) -> vector<16xf32>
// DOT-NOT:     llvm.intr.fma
// DOT:         llvm.return

// AMX-LABEL: llvm.func internal @forward__0_packed_matmul
// AMX:         llvm.call_intrinsic "llvm.x86.ldtilecfg"
// AMX:         llvm.call_intrinsic "llvm.x86.tilezero"
// AMX:         llvm.call_intrinsic "llvm.x86.tileloadd64"
// AMX:         llvm.call_intrinsic "llvm.x86.tdpbf16ps"
// AMX:         llvm.call_intrinsic "llvm.x86.tilestored64"
// AMX:         llvm.fcmp "olt"
// AMX:         llvm.call_intrinsic "llvm.x86.tilerelease"
// AMX-NOT:     dpbf16ps.512
func.func @forward(%x: memref<40x96xbf16>, %b: memref<100xf32>, %o: memref<40x100xf32>) attributes {tg.num_outputs = 1 : i64} {
  %wb = buf.packed_weight "fc.weight" {transposed = true, layout = "bf16kpanels", source_shape = array<i64: 100, 96>} : memref<2x48x128xbf16>
  buf.packed_matmul ins(%x, %wb, %b : memref<40x96xbf16>, memref<2x48x128xbf16>, memref<100xf32>) outs(%o : memref<40x100xf32>) {beta = 1.0 : f32, activation = "relu"}
  func.return
}
