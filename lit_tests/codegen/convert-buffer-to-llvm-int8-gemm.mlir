// RUN: tg-opt %s -p set-target{target=x86-64-v4},plan-memory,convert-buffer-to-llvm | filecheck --check-prefix=EMU %s
// RUN: tg-opt %s -p set-target{target=icelake-server},plan-memory,convert-buffer-to-llvm | filecheck --check-prefix=VNNI %s
// RUN: tg-opt %S/Inputs/convert-buffer-to-llvm-int8-gemm-amx.mlir -p set-target{target=sapphirerapids},plan-memory,convert-buffer-to-llvm | filecheck --check-prefix=AMX %s

// The int8 GEMM (matmul.packed_int8): buf.quantize_rows, then buf.packed_matmul over int8 quads
// along K (an i8 lhs, an "int8kpanels" weight) (tensor_graphs/codegen/llvm/kernels_quantize_rows.py,
// kernels_gemm.py, byte_dot.py):
// - the rows: each row's largest magnitude as the integer maximum of its bits (sign cleared), its
//   codes clamped as floats, rounded and offset by 128 in one addition, stored as bytes, the scale
//   after them;
// - no VNNI (x86-64-v4): the register tiles' byte dot products emulated, every byte widened to 32
//   bits (zext of the activations, sext of the weights), multiplied, summed four by four;
// - AVX512-VNNI (icelake-server): one vpdpbusd on 16 lanes per accumulator and quad step, 6 x 4 of them;
// (AVX-VNNI's ymm form, for panels of 16 columns: tests/test_int8_gemm.py.)
// - AMX-INT8 (sapphirerapids, K = 128: Inputs/convert-buffer-to-llvm-int8-gemm-amx.mlir): the tile
//   configuration, tdpbusd over A's and B's tiles, each tile's int32 sums stored to out, then read
//   back as vectors of integers, converted, scaled and the bias added, in place;
// - after the tile, the int32 sums become floats; the tile just stored is then scaled in place in
//   vectors (the columns' offset taken out, times the row's and the column's scales) and its bias
//   added, and the ReLU follows over it.

// EMU-LABEL: llvm.func internal @forward__0_quantize_rows
// EMU:         llvm.call_intrinsic "llvm.umax.v16i32"
// EMU:         llvm.call_intrinsic "llvm.vector.reduce.umax.v16i32"
// EMU:         llvm.call_intrinsic "llvm.minnum.v16f32"
// EMU:         llvm.call_intrinsic "llvm.maxnum.v16f32"
// EMU:         llvm.fadd
// EMU:         llvm.trunc %{{.*}} : vector<16xi32> to vector<16xi8>
// EMU-LABEL: llvm.func internal @forward__1_packed_matmul
// EMU:         llvm.fsub %{{.*}} : vector<16xf32>
// EMU:         llvm.fmul %{{.*}} : vector<16xf32>
// EMU:         llvm.fadd %{{.*}} : vector<16xf32>
// EMU-LABEL: llvm.func internal @tg_tile_6x4v16_s{{[0-9]+}}_i8(
// EMU:         llvm.zext %{{.*}} : vector<64xi8> to vector<64xi32>
// EMU:         llvm.sext %{{.*}} : vector<64xi8> to vector<64xi32>
// EMU:         llvm.mul
// EMU-NOT:     vpdpbusd
// EMU:         llvm.sitofp
// EMU:         llvm.return

// VNNI-LABEL: llvm.func internal @tg_tile_6x4v16_s{{[0-9]+}}_i8(
// VNNI-COUNT-24: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xi32>, vector<16xi32>, vector<16xi32>) -> vector<16xi32>
// VNNI-NOT:    llvm.mul
// VNNI:        llvm.sitofp
// VNNI:        llvm.return

// AMX-LABEL: llvm.func internal @forward__1_packed_matmul
// AMX:         llvm.call_intrinsic "llvm.x86.ldtilecfg"
// AMX:         llvm.call_intrinsic "llvm.x86.tileloadd64"
// AMX:         llvm.call_intrinsic "llvm.x86.tdpbusd"
// AMX:         llvm.call_intrinsic "llvm.x86.tilestored64"
// AMX:         llvm.load %{{.*}} : !llvm.ptr -> vector<16xi32>
// AMX:         llvm.sitofp %{{.*}} : vector<16xi32> to vector<16xf32>
// AMX:         llvm.fsub %{{.*}} : vector<16xf32>
// AMX:         llvm.fadd %{{.*}} : vector<16xf32>
// AMX:         llvm.call_intrinsic "llvm.x86.tilerelease"
// AMX-NOT:     vpdpbusd
func.func @forward(%x: memref<40x98xf32>, %b: memref<100xf32>, %o: memref<40x100xf32>) attributes {tg.num_outputs = 1 : i64} {
  %q = buf.alloc : memref<40x104xi8>
  buf.quantize_rows ins(%x : memref<40x98xf32>) outs(%q : memref<40x104xi8>)
  %w = buf.packed_weight "fc.weight" {transposed = true, layout = "int8kpanels", source_shape = array<i64: 100, 98>} : memref<2x27x256xi8>
  buf.packed_matmul ins(%q, %w, %b : memref<40x104xi8>, memref<2x27x256xi8>, memref<100xf32>) outs(%o : memref<40x100xf32>) {beta = 1.0 : f32, activation = "relu"}
  func.return
}
