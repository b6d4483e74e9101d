// RUN: tg-opt %s -p fuse-gemm-rounding --split-input-file | filecheck %s

// A bf16 model's convolution and ReLU: the GEMM, then the rounding to bf16, the ReLU and the
// rounding again. Fused: the GEMM applies the ReLU and the rounding and writes %y itself.

// CHECK-LABEL: func.func @conv_relu(
// CHECK:         %[[Y:.*]] = buf.reshape %y : memref<1x8x6x6xf32> -> memref<1x8x36xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%w, %p, %b : memref<1x8x36xbf16>, memref<3x18x32xbf16>, memref<8x1xf32>) outs(%[[Y]] : memref<1x8x36xf32>) {beta = 1.000000e+00 : f32, activation = "relu", rounding = "bf16"}
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

// The rounding alone (a convolution without activation).

// CHECK-LABEL: func.func @conv(
// CHECK:         buf.packed_matmul {{.*}} outs(%y : memref<1x8x36xf32>) {rounding = "bf16"}
// CHECK-NOT:     buf.fused_elementwise
func.func @conv(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %y: memref<1x8x36xf32>) attributes {tg.num_outputs = 1 : i64} {
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%m : memref<1x8x36xf32>)
  buf.fused_elementwise ins(%m : memref<1x8x36xf32>) outs(%y : memref<1x8x36xf32>) {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    %2 = arith.extf %1 : bf16 to f32
    buf.yield %2 : f32
  }
  func.return
}

// -----

// Left alone: a ReLU before any rounding (not the bf16 model's body), a body that yields bf16
// (the GEMM writes float32), and a GEMM output read by something else too.

// CHECK-LABEL: func.func @unfused(
// CHECK-COUNT-3: buf.fused_elementwise
func.func @unfused(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %y: memref<1x8x36xf32>, %z: memref<1x8x36xbf16>, %u: memref<1x8x36xf32>, %v: memref<1x8x36xf32>) attributes {tg.num_outputs = 4 : i64} {
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%m : memref<1x8x36xf32>)
  buf.fused_elementwise ins(%m : memref<1x8x36xf32>) outs(%y : memref<1x8x36xf32>) {
  ^bb0(%0: f32):
    %1 = arith.constant 0.000000e+00 : f32
    %2 = arith.maximumf %0, %1 : f32
    %3 = arith.truncf %2 : f32 to bf16
    %4 = arith.extf %3 : bf16 to f32
    buf.yield %4 : f32
  }
  %n = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%n : memref<1x8x36xf32>)
  buf.fused_elementwise ins(%n : memref<1x8x36xf32>) outs(%z : memref<1x8x36xbf16>) {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    buf.yield %1 : bf16
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
