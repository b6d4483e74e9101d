// RUN: tg-opt %s -p 'set-target{target=sapphirerapids},narrow-gemm-output' --split-input-file | filecheck %s
// RUN: tg-opt %s -p 'set-target{target=cooperlake},narrow-gemm-output' --split-input-file | filecheck --check-prefix=REGISTERS %s
// RUN: tg-opt %s -p 'set-target{target=sapphirerapids},narrow-gemm-output{round-activations=true}' --split-input-file | filecheck --check-prefix=ROUNDED %s

// On a target without AMX (the register tiles keep their sums in out between K blocks) every
// GEMM writes float32.
// REGISTERS-NOT: xbf16>) {beta
// REGISTERS-NOT: buf.alloc : memref<1x8x36xbf16>

// A bf16 model's convolution whose epilogue rounds (``extf(truncf(v))``), read by a loop and as
// the residual of another GEMM's epilogue body: its buffer and the views of it become bf16, the
// epilogue yields the bf16 value, each reader's body widens it itself.

// CHECK-LABEL: func.func @rounded(
// CHECK:         %[[M:.*]] = buf.alloc : memref<1x8x36xbf16>
// CHECK-NEXT:    buf.packed_matmul ins(%w, %p, %b : memref<1x8x36xbf16>, memref<3x18x32xbf16>, memref<8x1xf32>) outs(%[[M]] : memref<1x8x36xbf16>) {beta = 1.000000e+00 : f32} epilogue {
// CHECK:           %[[T:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:      buf.yield %[[T]] : bf16
// CHECK:         %[[V:.*]] = buf.reshape %[[M]] : memref<1x8x36xbf16> -> memref<1x8x6x6xbf16>
// CHECK-NEXT:    buf.fused_elementwise ins(%[[V]] : memref<1x8x6x6xbf16>) outs(%y : memref<1x8x6x6xf32>) {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: bf16):
// CHECK-NEXT:      %[[E:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK-NEXT:      %{{.*}} = arith.mulf %[[E]], %[[E]] : f32
// CHECK:         buf.packed_matmul ins(%w, %p, %b, %[[M]] : {{.*}}, memref<1x8x36xbf16>) outs(%z : memref<1x8x36xf32>)
// CHECK-NEXT:    ^bb0(%[[S:.*]]: f32, %[[R:.*]]: bf16):
// CHECK-NEXT:      %[[RE:.*]] = arith.extf %[[R]] : bf16 to f32
// CHECK-NEXT:      %{{.*}} = arith.addf %[[S]], %[[RE]] : f32
func.func @rounded(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %b: memref<8x1xf32>, %y: memref<1x8x6x6xf32>, %z: memref<1x8x36xf32>) attributes {tg.num_outputs = 2 : i64} {
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p, %b : memref<1x8x36xbf16>, memref<3x18x32xbf16>, memref<8x1xf32>) outs(%m : memref<1x8x36xf32>) {beta = 1.000000e+00 : f32} epilogue {
  ^bb0(%0: f32):
    %1 = arith.constant 0.000000e+00 : f32
    %2 = arith.maximumf %0, %1 : f32
    %3 = arith.truncf %2 : f32 to bf16
    %4 = arith.extf %3 : bf16 to f32
    buf.yield %4 : f32
  }
  %m4 = buf.reshape %m : memref<1x8x36xf32> -> memref<1x8x6x6xf32>
  buf.fused_elementwise ins(%m4 : memref<1x8x6x6xf32>) outs(%y : memref<1x8x6x6xf32>) {
  ^bb0(%0: f32):
    %1 = arith.mulf %0, %0 : f32
    buf.yield %1 : f32
  }
  buf.packed_matmul ins(%w, %p, %b, %m : memref<1x8x36xbf16>, memref<3x18x32xbf16>, memref<8x1xf32>, memref<1x8x36xf32>) outs(%z : memref<1x8x36xf32>) {beta = 1.000000e+00 : f32} epilogue {
  ^bb0(%0: f32, %1: f32):
    %2 = arith.addf %0, %1 : f32
    buf.yield %2 : f32
  }
  func.return
}

// -----

// A float32 model's convolution (ReLU, no rounding) read only by the next convolution's im2col
// into bf16 panels, which rounds each value: the GEMM writes bf16 (rounding as it stores), the
// im2col moves the same bf16 values.

// CHECK-LABEL: func.func @read_by_bf16_panels(
// CHECK:         %[[M:.*]] = buf.alloc : memref<1x8x36xbf16>
// CHECK-NEXT:    buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%[[M]] : memref<1x8x36xbf16>) {activation = "relu"}
// CHECK-NEXT:    %[[V:.*]] = buf.reshape %[[M]] : memref<1x8x36xbf16> -> memref<1x8x6x6xbf16>
// CHECK-NEXT:    buf.im2col ins(%[[V]] : memref<1x8x6x6xbf16>) outs(%q : memref<2x4x64xbf16>)
func.func @read_by_bf16_panels(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %q: memref<2x4x64xbf16>) attributes {tg.num_outputs = 1 : i64} {
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%m : memref<1x8x36xf32>) {activation = "relu"}
  %m4 = buf.reshape %m : memref<1x8x36xf32> -> memref<1x8x6x6xf32>
  buf.im2col ins(%m4 : memref<1x8x6x6xf32>) outs(%q : memref<2x4x64xbf16>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 32 : i64}
  func.return
}

// -----

// A max pool between them (ResNet's stem): it may run on bf16 where its own readers take bf16,
// since the largest of rounded values is the rounded largest; both buffers become bf16. A pool
// read by a loop (which would see rounded values) keeps float32, and so does the GEMM it reads.

// CHECK-LABEL: func.func @through_max_pool(
// CHECK:         %[[M:.*]] = buf.alloc : memref<1x8x36xbf16>
// CHECK-NEXT:    buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%[[M]] : memref<1x8x36xbf16>) {activation = "relu"}
// CHECK-NEXT:    %[[V:.*]] = buf.reshape %[[M]] : memref<1x8x36xbf16> -> memref<1x8x6x6xbf16>
// CHECK-NEXT:    %[[P:.*]] = buf.alloc : memref<1x8x3x3xbf16>
// CHECK-NEXT:    buf.im2col ins(%[[V]] : memref<1x8x6x6xbf16>) outs(%[[P]] : memref<1x8x3x3xbf16>) {{.*}}reduce = "max"
// CHECK-NEXT:    buf.im2col ins(%[[P]] : memref<1x8x3x3xbf16>) outs(%q : memref<1x4x64xbf16>)
// CHECK:         %[[K:.*]] = buf.alloc : memref<1x8x36xf32>
// CHECK:         buf.alloc : memref<1x8x3x3xf32>
func.func @through_max_pool(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %q: memref<1x4x64xbf16>, %y: memref<1x8x3x3xf32>) attributes {tg.num_outputs = 2 : i64} {
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%m : memref<1x8x36xf32>) {activation = "relu"}
  %m4 = buf.reshape %m : memref<1x8x36xf32> -> memref<1x8x6x6xf32>
  %pool = buf.alloc : memref<1x8x3x3xf32>
  buf.im2col ins(%m4 : memref<1x8x6x6xf32>) outs(%pool : memref<1x8x3x3xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, pad_value = 0xff800000 : f32, reduce = "max"}
  buf.im2col ins(%pool : memref<1x8x3x3xf32>) outs(%q : memref<1x4x64xbf16>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 32 : i64}
  %k = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%k : memref<1x8x36xf32>) {activation = "relu"}
  %k4 = buf.reshape %k : memref<1x8x36xf32> -> memref<1x8x6x6xf32>
  %pool2 = buf.alloc : memref<1x8x3x3xf32>
  buf.im2col ins(%k4 : memref<1x8x6x6xf32>) outs(%pool2 : memref<1x8x3x3xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, pad_value = 0xff800000 : f32, reduce = "max"}
  buf.fused_elementwise ins(%pool2 : memref<1x8x3x3xf32>) outs(%y : memref<1x8x3x3xf32>) {
  ^bb0(%0: f32):
    %1 = arith.mulf %0, %0 : f32
    buf.yield %1 : f32
  }
  func.return
}

// -----

// A float32 activation read by bf16 panels and added as another AMX GEMM's residual: exact
// narrowing leaves it float32 (the add would see it rounded); with ``round-activations`` (the
// module's ``tg.round_activations``, which the tuner sets where the whole graph stays within the
// tolerance) it becomes bf16 and the add widens it.

// CHECK-LABEL: func.func @residual(
// CHECK:         buf.alloc : memref<1x8x36xf32>
// ROUNDED-LABEL: func.func @residual(
// ROUNDED:         %[[M:.*]] = buf.alloc : memref<1x8x36xbf16>
// ROUNDED-NEXT:    buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%[[M]] : memref<1x8x36xbf16>) {activation = "relu"}
// ROUNDED-NEXT:    %[[V:.*]] = buf.reshape %[[M]] : memref<1x8x36xbf16> -> memref<1x8x6x6xbf16>
// ROUNDED-NEXT:    buf.im2col ins(%[[V]] : memref<1x8x6x6xbf16>) outs(%q : memref<2x4x64xbf16>)
// ROUNDED-NEXT:    buf.packed_matmul ins(%w, %p, %b, %[[M]] : {{.*}}, memref<1x8x36xbf16>) outs(%z : memref<1x8x36xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
func.func @residual(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %b: memref<8x1xf32>, %q: memref<2x4x64xbf16>, %z: memref<1x8x36xf32>) attributes {tg.num_outputs = 2 : i64} {
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%m : memref<1x8x36xf32>) {activation = "relu"}
  %m4 = buf.reshape %m : memref<1x8x36xf32> -> memref<1x8x6x6xf32>
  buf.im2col ins(%m4 : memref<1x8x6x6xf32>) outs(%q : memref<2x4x64xbf16>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 32 : i64}
  buf.packed_matmul ins(%w, %p, %b, %m : memref<1x8x36xbf16>, memref<3x18x32xbf16>, memref<8x1xf32>, memref<1x8x36xf32>) outs(%z : memref<1x8x36xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
  func.return
}

// -----

// Left alone: float32 values a loop reads (it would see them rounded), rounded values a copy
// reads (it moves float32 only to float32), and a GEMM that writes the graph's output.

// CHECK-LABEL: func.func @left_alone(
// CHECK-NOT:     xbf16>) {beta
// CHECK-NOT:     memref<1x8x36xbf16>) epilogue
// CHECK-NOT:     buf.alloc : memref<1x8x36xbf16>
func.func @left_alone(%w: memref<1x8x36xbf16>, %p: memref<3x18x32xbf16>, %y: memref<1x8x36xf32>, %v: memref<1x8x36xf32>, %o: memref<1x8x36xf32>) attributes {tg.num_outputs = 3 : i64} {
  %m = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%m : memref<1x8x36xf32>) {activation = "relu"}
  buf.fused_elementwise ins(%m : memref<1x8x36xf32>) outs(%y : memref<1x8x36xf32>) {
  ^bb0(%0: f32):
    %1 = arith.mulf %0, %0 : f32
    buf.yield %1 : f32
  }
  %k = buf.alloc : memref<1x8x36xf32>
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%k : memref<1x8x36xf32>) epilogue {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    %2 = arith.extf %1 : bf16 to f32
    buf.yield %2 : f32
  }
  buf.copy ins(%k : memref<1x8x36xf32>) outs(%v : memref<1x8x36xf32>)
  buf.packed_matmul ins(%w, %p : memref<1x8x36xbf16>, memref<3x18x32xbf16>) outs(%o : memref<1x8x36xf32>) epilogue {
  ^bb0(%0: f32):
    %1 = arith.truncf %0 : f32 to bf16
    %2 = arith.extf %1 : bf16 to f32
    buf.yield %2 : f32
  }
  func.return
}
