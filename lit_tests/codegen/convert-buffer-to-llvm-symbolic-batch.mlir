// RUN: tg-opt %s -p set-target{target=x86-64-v3},convert-tensor-to-buffer,plan-memory,convert-buffer-to-llvm | filecheck %s
// A convolution and a max pooling over a symbolic batch: the windows' rows (images x channels)
// and the GEMMs' count (one packed GEMM per image, the weight as every GEMM's A, each image's
// windows packed into its own column panels) are counted at run time from dims[1]; channels,
// spatial sizes and the GEMM's matrices stay compile-time constants.

// CHECK: tg.symbols = {batch = array<i64: 1, 16>}
// CHECK-SAME: tg.input_types = [memref<?x3x8x8xf32, ["batch"]>], tg.output_types = [memref<?x8x4x4xf32, ["batch"]>]
// CHECK: llvm.call @forward__0_im2col({{.*}}, %dims)
// CHECK: llvm.call @forward__1_im2col({{.*}}, %conv2d_panels, %dims)
// CHECK: llvm.call @forward__2_packed_matmul(%p_0_weight, %conv2d_panels, %p_0_bias, {{.*}}, %dims)
// the windows: images x 3 channels rows, the image count from dims[1]
// CHECK: llvm.func internal @forward__0_im2col({{.*}}, %[[D0:dims_[0-9]+]]: !llvm.ptr) -> i32
// CHECK: %[[SLOT:.*]] = llvm.getelementptr inbounds %[[D0]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT: %[[BATCH:.*]] = llvm.load %[[SLOT]] : !llvm.ptr -> i64
// CHECK: %[[ROWS:.*]] = llvm.mul %{{.*}}, %[[BATCH]] overflow<nsw> : i64
// CHECK-NEXT: llvm.icmp "slt" %{{.*}}, %[[ROWS]] : i64
// the GEMMs: 4 panels of 16 columns per image (8x8 outputs), their count images x 4 from dims[1];
// item q is panel q % 4 of image q / 4: its output 512 floats (8 x 64) further per image, the
// weight (A, 8 x 27) the same for all
// CHECK: llvm.func internal @forward__2_packed_matmul(%[[W:[a-z0-9_]+]]: !llvm.ptr {llvm.noalias}, %{{[a-z0-9_]+}}: !llvm.ptr {llvm.noalias}, {{.*}}, %[[D1:dims_[0-9]+]]: !llvm.ptr) -> i32
// CHECK: %[[SLOT1:.*]] = llvm.getelementptr inbounds %[[D1]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT: %[[IMAGES:.*]] = llvm.load %[[SLOT1]] : !llvm.ptr -> i64
// CHECK: %[[ITEMS:.*]] = llvm.mul %[[IMAGES]], %[[FOUR:.*]] overflow<nsw> : i64
// CHECK-NEXT: llvm.icmp "slt" %{{.*}}, %[[ITEMS]] : i64
// CHECK: %[[G:.*]] = llvm.udiv %[[Q:.*]], %[[FOUR]] : i64
// CHECK: llvm.mul %[[G]], %{{.*}} overflow<nsw> : i64
// CHECK: llvm.getelementptr inbounds %[[W]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK: llvm.call @tg_tile_6x2v8_s2_p1x16_u(

builtin.module attributes {tg.symbols = {batch = array<i64: 1, 16>}} {
  func.func @forward(%input: tensor<?x3x8x8xf32, ["batch"]>) -> tensor<?x8x4x4xf32, ["batch"]> {
    %p_0_weight = tg.weight "0.weight" : tensor<8x3x3x3xf32>
    %p_0_bias = tg.weight "0.bias" : tensor<8xf32>
    %conv2d = tg.im2col %input {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<?x3x8x8xf32, ["batch"]>) -> tensor<?x3x3x3x8x8xf32, ["batch"]>
    %conv2d_1 = tg.reshape %p_0_weight : (tensor<8x3x3x3xf32>) -> tensor<8x27xf32>
    %conv2d_2 = tg.reshape %conv2d : (tensor<?x3x3x3x8x8xf32, ["batch"]>) -> tensor<?x27x64xf32, ["batch"]>
    %conv2d_3 = tg.reshape %p_0_bias : (tensor<8xf32>) -> tensor<8x1xf32>
    %relu = tg.matmul %conv2d_1, %conv2d_2, %conv2d_3 {beta = 1.000000e+00 : f32, activation = "relu"} : (tensor<8x27xf32>, tensor<?x27x64xf32, ["batch"]>, tensor<8x1xf32>) -> tensor<?x8x64xf32, ["batch"]>
    %relu_1 = tg.reshape %relu : (tensor<?x8x64xf32, ["batch"]>) -> tensor<?x8x8x8xf32, ["batch"]>
    %max_pool2d = tg.im2col %relu_1 {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, pad_value = 0xff800000 : f32} : (tensor<?x8x8x8xf32, ["batch"]>) -> tensor<?x8x2x2x4x4xf32, ["batch"]>
    %max_pool2d_1 = tg.reshape %max_pool2d : (tensor<?x8x2x2x4x4xf32, ["batch"]>) -> tensor<?x8x4x4x4xf32, ["batch"]>
    %max_pool2d_2 = tg.amax %max_pool2d_1 {dims = array<i64: 2>} : (tensor<?x8x4x4x4xf32, ["batch"]>) -> tensor<?x8x4x4xf32, ["batch"]>
    func.return %max_pool2d_2 : tensor<?x8x4x4xf32, ["batch"]>
  }
}
