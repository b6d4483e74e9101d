// RUN: tg-opt %s -p 'set-target{target=sapphirerapids},fuse-gemm-elementwise' --split-input-file | filecheck %s
// RUN: tg-opt %s -p 'set-target{target=cooperlake},fuse-gemm-elementwise' --split-input-file | filecheck --check-prefix=REGISTERS %s

// A bf16 model's convolution and ReLU: the GEMM, then a loop that rounds to bf16, applies the ReLU
// and rounds again. Fused: the GEMM applies that body as its epilogue and writes %y itself.

// CHECK-LABEL: func.func @conv_relu(
// CHECK:         %[[Y:.*]] = buf.reshape %y : memref<1x8x6x6xf32> -> memref<1x8x36xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%w, %p, %b : memref<1x8x36xbf16>, memref<3x18x32xbf16>, memref<8x1xf32>) outs(%[[Y]] : memref<1x8x36xf32>) {beta = 1.000000e+00 : f32} epilogue {
// CHECK-NEXT:    ^bb0(%{{.*}}: f32):
// CHECK-NEXT:      arith.truncf
// CHECK:           arith.maximumf
// CHECK:           buf.yield %{{.*}} : f32
// CHECK-NEXT:    }
// CHECK-NOT:     buf.fused_elementwise
// CHECK-NOT:     buf.alloc : memref<1x8x36xf32>
func.func @conv_relu(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %b: memref<8x1xf32>, %y: memref<1x8x6x6xf32>) attributes {tg.num_outputs = 1 : i64} {
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p, %b : memref<1x8x36xbf16>, memref<3x18x32xbf16>, memref<8x1xf32>) outs(%m : memref<1x8x36xf32>) {beta = 1.000000e+00 : f32}
  %m4 = buf.reshape %m : memref<1x8x36xf32> -> memref<1x8x6x6xf32>
  buf.fused_elementwise ins(%m4 : memref<1x8x6x6xf32>) outs(%y : memref<1x8x6x6xf32>) {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    %2 = arith.extf %1 : bf16 to f32
    %3 = arith.constant 0.000000e+00 : f32
    %4 = arith.maximumf %2, %3 : f32
    %5 = arith.truncf %4 : f32 to bf16
    %6 = arith.extf %5 : bf16 to f32
    buf.yield %6 : f32
  }
  func.return
}

// -----

// Any body of the one output: here a float32 model's clamp and square.

// CHECK-LABEL: func.func @clamp_square(
// CHECK:         buf.packed_matmul {{.*}} outs(%y : memref<16x64xf32>) {beta = 1.000000e+00 : f32} epilogue {
// CHECK:           arith.minimumf
// CHECK:           arith.mulf
// CHECK-NOT:     buf.fused_elementwise
func.func @clamp_square(%x: memref<16x32xf32>, %w: memref<1x32x64xf32>, %b: memref<64xf32>, %y: memref<16x64xf32>) attributes {tg.num_outputs = 1 : i64} {
  %m = buf.alloc : memref<16x64xf32>
  buf.packed_matmul ins(%x, %w, %b : memref<16x32xf32>, memref<1x32x64xf32>, memref<64xf32>) outs(%m : memref<16x64xf32>) {beta = 1.000000e+00 : f32}
  buf.fused_elementwise ins(%m : memref<16x64xf32>) outs(%y : memref<16x64xf32>) {
  ^bb0(%0: f32):
    %1 = arith.constant 2.000000e+00 : f32
    %2 = arith.minimumf %0, %1 : f32
    %3 = arith.mulf %2, %2 : f32
    buf.yield %3 : f32
  }
  func.return
}

// -----

// A loop that yields bf16 (a bf16 model's output, rounded once more) and one whose second
// operand is bf16 (a bf16 model's residual): on AMX tiles the GEMMs write bf16 themselves, the
// bodies take the bf16 operand as it is. On the register tiles (no AMX) both loops stay.

// REGISTERS-LABEL: func.func @bf16_loops(
// REGISTERS-COUNT-2: buf.fused_elementwise

// CHECK-LABEL: func.func @bf16_loops(
// CHECK:         buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%z : memref<1x8x36xbf16>) epilogue {
// CHECK-NEXT:    ^bb0(%{{.*}}: f32):
// CHECK-NEXT:      %{{.*}} = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:      buf.yield %{{.*}} : bf16
// CHECK:         buf.packed_matmul ins(%w, %p, %r : memref<1x8x36xbf16>, memref<3x18x32xbf16>, memref<1x8x36xbf16>) outs(%s : memref<1x8x36xbf16>) {beta = 1.000000e+00 : f32} epilogue {
// CHECK-NEXT:    ^bb0(%{{.*}}: f32, %{{.*}}: bf16):
// CHECK-NOT:     buf.fused_elementwise
func.func @bf16_loops(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %r: memref<1x8x36xbf16>, %z: memref<1x8x36xbf16>, %s: memref<1x8x36xbf16>) attributes {tg.num_outputs = 2 : i64} {
  %n = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%n : memref<1x8x36xf32>)
  buf.fused_elementwise ins(%n : memref<1x8x36xf32>) outs(%z : memref<1x8x36xbf16>) {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    buf.yield %1 : bf16
  }
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%m : memref<1x8x36xf32>)
  buf.fused_elementwise ins(%m, %r : memref<1x8x36xf32>, memref<1x8x36xbf16>) outs(%s : memref<1x8x36xbf16>) {
  ^bb0(%0: f32, %1: bf16):
    %2 = arith.extf %1 : bf16 to f32
    %3 = arith.addf %0, %2 : f32
    %4 = arith.truncf %3 : f32 to bf16
    buf.yield %4 : bf16
  }
  func.return
}

// -----

// Left alone: a GEMM with an activation of its own, and a GEMM output read by something else too.

// CHECK-LABEL: func.func @unfused(
// CHECK-COUNT-2: buf.fused_elementwise
// CHECK-NOT:     epilogue
func.func @unfused(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %u: memref<1x8x36xf32>, %v: memref<1x8x36xf32>, %t: memref<1x8x36xf32>) attributes {tg.num_outputs = 3 : i64} {
  %a = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%a : memref<1x8x36xf32>) {activation = "relu"}
  buf.fused_elementwise ins(%a : memref<1x8x36xf32>) outs(%t : memref<1x8x36xf32>) {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    %2 = arith.extf %1 : bf16 to f32
    buf.yield %2 : f32
  }
  %k = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%k : memref<1x8x36xf32>)
  buf.fused_elementwise ins(%k : memref<1x8x36xf32>) outs(%u : memref<1x8x36xf32>) {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    %2 = arith.extf %1 : bf16 to f32
    buf.yield %2 : f32
  }
  buf.copy ins(%k : memref<1x8x36xf32>) outs(%v : memref<1x8x36xf32>)
  func.return
}

// -----

// A loop over the GEMM's output and one more operand (second in the loop's order here): the
// operand becomes the GEMM's last input (its addend after the bias), the body its epilogue of two
// arguments, the GEMM's value first.

// CHECK-LABEL: func.func @two_operands(
// CHECK:         buf.packed_matmul ins(%x, %w, %b, %r : memref<16x32xf32>, memref<1x32x64xf32>, memref<64xf32>, memref<16x64xf32>) outs(%y : memref<16x64xf32>) {beta = 1.000000e+00 : f32} epilogue {
// CHECK-NEXT:    ^bb0(%[[G:.*]]: f32, %[[R:.*]]: f32):
// CHECK-NEXT:      %{{.*}} = arith.negf %[[R]] : f32
// CHECK:           arith.mulf %[[G]],
// CHECK-NOT:     buf.fused_elementwise
func.func @two_operands(%x: memref<16x32xf32>, %w: memref<1x32x64xf32>, %b: memref<64xf32>, %r: memref<16x64xf32>, %y: memref<16x64xf32>) attributes {tg.num_outputs = 1 : i64} {
  %m = buf.alloc : memref<16x64xf32>
  buf.packed_matmul ins(%x, %w, %b : memref<16x32xf32>, memref<1x32x64xf32>, memref<64xf32>) outs(%m : memref<16x64xf32>) {beta = 1.000000e+00 : f32}
  buf.fused_elementwise ins(%r, %m : memref<16x64xf32>, memref<16x64xf32>) outs(%y : memref<16x64xf32>) {
  ^bb0(%0: f32, %1: f32):
    %2 = arith.negf %0 : f32
    %3 = arith.mulf %1, %2 : f32
    %4 = arith.addf %3, %0 : f32
    buf.yield %4 : f32
  }
  func.return
}

// -----

// Left alone: a second operand that broadcasts (a bias the GEMM would take as one), and a GEMM with
// an accumulator and an addend already (no room for one more input).

// CHECK-LABEL: func.func @no_room(
// CHECK-COUNT-2: buf.fused_elementwise
func.func @no_room(%x: memref<16x32xf32>, %w: memref<1x32x64xf32>, %b: memref<64xf32>, %r: memref<16x64xf32>, %y: memref<16x64xf32>, %z: memref<16x64xf32>) attributes {tg.num_outputs = 2 : i64} {
  %m = buf.alloc : memref<16x64xf32>
  buf.packed_matmul ins(%x, %w : memref<16x32xf32>, memref<1x32x64xf32>) outs(%m : memref<16x64xf32>)
  buf.fused_elementwise ins(%m, %b : memref<16x64xf32>, memref<64xf32>) outs(%y : memref<16x64xf32>) {
  ^bb0(%0: f32, %1: f32):
    %2 = arith.mulf %0, %1 : f32
    buf.yield %2 : f32
  }
  %n = buf.alloc : memref<16x64xf32>
  buf.packed_matmul ins(%x, %w, %b, %r : memref<16x32xf32>, memref<1x32x64xf32>, memref<64xf32>, memref<16x64xf32>) outs(%n : memref<16x64xf32>) {beta = 1.000000e+00 : f32}
  buf.fused_elementwise ins(%n, %r : memref<16x64xf32>, memref<16x64xf32>) outs(%z : memref<16x64xf32>) {
  ^bb0(%0: f32, %1: f32):
    %2 = arith.mulf %0, %1 : f32
    buf.yield %2 : f32
  }
  func.return
}
