// RUN: tg-opt %s | tg-opt | filecheck %s
// Round trip of every buf op.

// CHECK-LABEL: func.func @planned_mlp_layer
// CHECK-SAME: (%x: memref<2x256xf32>, %out0: memref<2x1024xf32>) attributes {tg.num_outputs = 1 : i64}
func.func @planned_mlp_layer(%x: memref<2x256xf32>, %out0: memref<2x1024xf32>) attributes {tg.num_outputs = 1 : i64} {
  // CHECK-NEXT: %arena = buf.arena : memref<16384xi8>
  %arena = buf.arena : memref<16384xi8>
  // CHECK-NEXT: %w = buf.weight "fc1.weight" : memref<1024x256xf32>
  %w = buf.weight "fc1.weight" : memref<1024x256xf32>
  // CHECK-NEXT: %b = buf.weight "fc1.bias" : memref<1024xf32>
  %b = buf.weight "fc1.bias" : memref<1024xf32>
  // CHECK-NEXT: %c = buf.constant dense<2.000000e+00> : tensor<f32> : memref<f32>
  %c = buf.constant dense<2.0> : tensor<f32> : memref<f32>
  // CHECK-NEXT: %y = buf.view %arena[0] : memref<16384xi8> -> memref<2x1024xf32>
  %y = buf.view %arena[0] : memref<16384xi8> -> memref<2x1024xf32>
  // CHECK-NEXT: %t = buf.view %arena[8192] : memref<16384xi8> -> memref<1024x2xf32>
  %t = buf.view %arena[8192] : memref<16384xi8> -> memref<1024x2xf32>
  // CHECK-NEXT: buf.matmul ins(%x, %w, %b : memref<2x256xf32>, memref<1024x256xf32>, memref<1024xf32>) outs(%y : memref<2x1024xf32>) {transpose_b = true, beta = 1.000000e+00 : f32}
  buf.matmul ins(%x, %w, %b : memref<2x256xf32>, memref<1024x256xf32>, memref<1024xf32>) outs(%y : memref<2x1024xf32>) {transpose_b = true, beta = 1.0 : f32}
  // CHECK-NEXT: buf.matmul ins(%w, %x : memref<1024x256xf32>, memref<2x256xf32>) outs(%t : memref<1024x2xf32>) {transpose_b = true, alpha = 5.000000e-01 : f32}
  buf.matmul ins(%w, %x : memref<1024x256xf32>, memref<2x256xf32>) outs(%t : memref<1024x2xf32>) {transpose_b = true, alpha = 0.5 : f32}
  // CHECK-NEXT: buf.mul ins(%y, %c : memref<2x1024xf32>, memref<f32>) outs(%y : memref<2x1024xf32>)
  buf.mul ins(%y, %c : memref<2x1024xf32>, memref<f32>) outs(%y : memref<2x1024xf32>)
  // CHECK-NEXT: buf.add ins(%y, %b : memref<2x1024xf32>, memref<1024xf32>) outs(%y : memref<2x1024xf32>)
  buf.add ins(%y, %b : memref<2x1024xf32>, memref<1024xf32>) outs(%y : memref<2x1024xf32>)
  // CHECK-NEXT: buf.sub ins(%y, %y : memref<2x1024xf32>, memref<2x1024xf32>) outs(%y : memref<2x1024xf32>)
  buf.sub ins(%y, %y : memref<2x1024xf32>, memref<2x1024xf32>) outs(%y : memref<2x1024xf32>)
  // CHECK-NEXT: buf.div ins(%y, %c : memref<2x1024xf32>, memref<f32>) outs(%y : memref<2x1024xf32>)
  buf.div ins(%y, %c : memref<2x1024xf32>, memref<f32>) outs(%y : memref<2x1024xf32>)
  // CHECK-NEXT: buf.relu ins(%y : memref<2x1024xf32>) outs(%y : memref<2x1024xf32>)
  buf.relu ins(%y : memref<2x1024xf32>) outs(%y : memref<2x1024xf32>)
  // CHECK-NEXT: buf.transpose ins(%y : memref<2x1024xf32>) outs(%t : memref<1024x2xf32>) {perm = array<i64: 1, 0>}
  buf.transpose ins(%y : memref<2x1024xf32>) outs(%t : memref<1024x2xf32>) {perm = array<i64: 1, 0>}
  // CHECK-NEXT: %s = buf.reshape %t : memref<1024x2xf32> -> memref<2x1024xf32>
  %s = buf.reshape %t : memref<1024x2xf32> -> memref<2x1024xf32>
  // CHECK-NEXT: buf.bias_activation ins(%s, %b : memref<2x1024xf32>, memref<1024xf32>) outs(%y : memref<2x1024xf32>) {activation = "relu"}
  buf.bias_activation ins(%s, %b : memref<2x1024xf32>, memref<1024xf32>) outs(%y : memref<2x1024xf32>) {activation = "relu"}
  // CHECK-NEXT: buf.bias_activation ins(%s, %b : memref<2x1024xf32>, memref<1024xf32>) outs(%y : memref<2x1024xf32>)
  buf.bias_activation ins(%s, %b : memref<2x1024xf32>, memref<1024xf32>) outs(%y : memref<2x1024xf32>) {activation = "none"}
  // CHECK-NEXT: buf.copy ins(%y : memref<2x1024xf32>) outs(%out0 : memref<2x1024xf32>)
  buf.copy ins(%y : memref<2x1024xf32>) outs(%out0 : memref<2x1024xf32>)
  // CHECK-NEXT: func.return
  func.return
}

// CHECK-LABEL: func.func @unplanned_alloc
func.func @unplanned_alloc(%x: memref<4x3x8x16xf32>, %y: memref<3x16x5xf32>, %out0: memref<4x3x8x5xf32>) attributes {tg.num_outputs = 1 : i64} {
  // CHECK-NEXT: %a = buf.alloc : memref<4x3x8x5xf32>
  %a = buf.alloc : memref<4x3x8x5xf32>
  // CHECK-NEXT: buf.matmul ins(%x, %y : memref<4x3x8x16xf32>, memref<3x16x5xf32>) outs(%a : memref<4x3x8x5xf32>)
  buf.matmul ins(%x, %y : memref<4x3x8x16xf32>, memref<3x16x5xf32>) outs(%a : memref<4x3x8x5xf32>)
  buf.copy ins(%a : memref<4x3x8x5xf32>) outs(%out0 : memref<4x3x8x5xf32>)
  func.return
}
