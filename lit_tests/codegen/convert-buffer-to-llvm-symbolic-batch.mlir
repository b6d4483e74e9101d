// RUN: tg-opt %s -p set-target{target=x86-64-v3},convert-tensor-to-buffer,plan-memory,convert-buffer-to-llvm | filecheck %s
// A convolution and a max pooling over a symbolic batch: the windows' rows (images x channels)
// and the GEMM's batch (one sgemm per image) are counted at run time from dims[1]; channels,
// spatial sizes and the GEMM's matrices stay compile-time constants.

// CHECK: tg.symbols = {batch = array<i64: 1, 16>}
// CHECK-SAME: tg.input_types = [memref<?x3x8x8xf32, ["batch"]>], tg.output_types = [memref<?x8x4x4xf32, ["batch"]>]
// CHECK: llvm.call @forward__0_im2col({{.*}}, %dims)
// CHECK: llvm.call @forward__1_matmul({{.*}}, %dims)
// the windows: images x 3 channels rows, the image count from dims[1]
// CHECK: llvm.func internal @forward__0_im2col({{.*}}, %[[D0:dims_[0-9]+]]: !llvm.ptr) -> i32
// CHECK: %[[SLOT:.*]] = llvm.getelementptr inbounds %[[D0]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT: %[[BATCH:.*]] = llvm.load %[[SLOT]] : !llvm.ptr -> i64
// CHECK: %[[ROWS:.*]] = llvm.mul %{{.*}}, %[[BATCH]] overflow<nsw> : i64
// CHECK-NEXT: llvm.icmp "slt" %{{.*}}, %[[ROWS]] : i64
// the GEMM: one sgemm of the static 8x27 by 27x64 matrices per image
// CHECK: llvm.func internal @forward__1_matmul({{.*}}, %[[D1:dims_[0-9]+]]: !llvm.ptr) -> i32
// CHECK: %[[SLOT1:.*]] = llvm.getelementptr inbounds %[[D1]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT: %[[IMAGES:.*]] = llvm.load %[[SLOT1]] : !llvm.ptr -> i64
// CHECK-NEXT: llvm.icmp "slt" %{{.*}}, %[[IMAGES]] : i64
// CHECK: llvm.call @scipy_cblas_sgemm(

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
