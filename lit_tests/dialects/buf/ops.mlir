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

// CHECK-LABEL: func.func @transformer_kernels
func.func @transformer_kernels(%x: memref<2x8x16xf32>, %w: memref<16xf32>, %c: memref<2x8x16xi1>, %t: memref<100x16xf32>, %i: memref<2x8xi64>, %q: memref<2x4x8x16xf32>, %k: memref<2x2x8x16xf32>, %m: memref<8x8xf32>, %o: memref<2x8x16xf32>, %h: memref<2x8x16xf16>, %r: memref<2x16xf32>, %s: memref<2x3x16xf32>, %cat: memref<2x16x16xf32>, %b: memref<3x2x8x16xf32>, %a: memref<2x4x8x16xf32>, %scratch: memref<1600xf32>) {
  // CHECK-NEXT: buf.unary ins(%x : memref<2x8x16xf32>) outs(%o : memref<2x8x16xf32>) {fn = "gelu_tanh"}
  buf.unary ins(%x : memref<2x8x16xf32>) outs(%o : memref<2x8x16xf32>) {fn = "gelu_tanh"}
  // CHECK-NEXT: buf.binary ins(%x, %w : memref<2x8x16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>) {fn = "pow"}
  buf.binary ins(%x, %w : memref<2x8x16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>) {fn = "pow"}
  // CHECK-NEXT: buf.select ins(%c, %x, %w : memref<2x8x16xi1>, memref<2x8x16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>)
  buf.select ins(%c, %x, %w : memref<2x8x16xi1>, memref<2x8x16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>)
  // CHECK-NEXT: buf.cast ins(%x : memref<2x8x16xf32>) outs(%h : memref<2x8x16xf16>)
  buf.cast ins(%x : memref<2x8x16xf32>) outs(%h : memref<2x8x16xf16>)
  // CHECK-NEXT: buf.reduce ins(%x : memref<2x8x16xf32>) outs(%r : memref<2x16xf32>) {kind = "mean", dims = array<i64: 1>}
  buf.reduce ins(%x : memref<2x8x16xf32>) outs(%r : memref<2x16xf32>) {kind = "mean", dims = array<i64: 1>}
  // CHECK-NEXT: buf.reduce ins(%x : memref<2x8x16xf32>) outs(%r : memref<2x16xf32>) {kind = "max", dims = array<i64: 1>}
  buf.reduce ins(%x : memref<2x8x16xf32>) outs(%r : memref<2x16xf32>) {kind = "max", dims = array<i64: 1>, keepdim = false}
  // CHECK-NEXT: buf.softmax ins(%x : memref<2x8x16xf32>) outs(%o : memref<2x8x16xf32>) {dim = 2 : i64}
  buf.softmax ins(%x : memref<2x8x16xf32>) outs(%o : memref<2x8x16xf32>) {dim = 2 : i64}
  // CHECK-NEXT: buf.cumsum ins(%x : memref<2x8x16xf32>) outs(%o : memref<2x8x16xf32>) {dim = 1 : i64}
  buf.cumsum ins(%x : memref<2x8x16xf32>) outs(%o : memref<2x8x16xf32>) {dim = 1 : i64}
  // CHECK-NEXT: buf.check_nonzero ins(%i : memref<2x8xi64>) outs(%i : memref<2x8xi64>)
  buf.check_nonzero ins(%i : memref<2x8xi64>) outs(%i : memref<2x8xi64>)
  // CHECK-NEXT: buf.softmax ins(%x : memref<2x8x16xf32>) outs(%o : memref<2x8x16xf32>) {dim = 2 : i64, log = true}
  buf.softmax ins(%x : memref<2x8x16xf32>) outs(%o : memref<2x8x16xf32>) {dim = 2 : i64, log = true}
  // CHECK-NEXT: buf.layer_norm ins(%x, %w, %w : memref<2x8x16xf32>, memref<16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>) {eps = 1.000000e-06 : f32}
  buf.layer_norm ins(%x, %w, %w : memref<2x8x16xf32>, memref<16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>) {eps = 1.0e-06 : f32}
  // CHECK-NEXT: buf.rms_norm ins(%x, %w : memref<2x8x16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>) {eps = 1.000000e-05 : f32}
  buf.rms_norm ins(%x, %w : memref<2x8x16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>) {eps = 1.0e-05 : f32}
  // CHECK-NEXT: buf.embedding ins(%t, %i : memref<100x16xf32>, memref<2x8xi64>) outs(%o : memref<2x8x16xf32>)
  buf.embedding ins(%t, %i : memref<100x16xf32>, memref<2x8xi64>) outs(%o : memref<2x8x16xf32>)
  // CHECK-NEXT: buf.slice ins(%x : memref<2x8x16xf32>) outs(%s : memref<2x3x16xf32>) {dim = 1 : i64, start = 1 : i64, step = 3 : i64}
  buf.slice ins(%x : memref<2x8x16xf32>) outs(%s : memref<2x3x16xf32>) {dim = 1 : i64, start = 1 : i64, step = 3 : i64}
  // CHECK-NEXT: buf.concat ins(%x, %x : memref<2x8x16xf32>, memref<2x8x16xf32>) outs(%cat : memref<2x16x16xf32>) {dim = 1 : i64}
  buf.concat ins(%x, %x : memref<2x8x16xf32>, memref<2x8x16xf32>) outs(%cat : memref<2x16x16xf32>) {dim = 1 : i64}
  // CHECK-NEXT: buf.broadcast ins(%x : memref<2x8x16xf32>) outs(%b : memref<3x2x8x16xf32>)
  buf.broadcast ins(%x : memref<2x8x16xf32>) outs(%b : memref<3x2x8x16xf32>)
  // CHECK-NEXT: buf.attention ins(%q, %k, %k, %m : memref<2x4x8x16xf32>, memref<2x2x8x16xf32>, memref<2x2x8x16xf32>, memref<8x8xf32>) outs(%a, %scratch : memref<2x4x8x16xf32>, memref<1600xf32>) {scale = 2.500000e-01 : f32, causal = true}
  buf.attention ins(%q, %k, %k, %m : memref<2x4x8x16xf32>, memref<2x2x8x16xf32>, memref<2x2x8x16xf32>, memref<8x8xf32>) outs(%a, %scratch : memref<2x4x8x16xf32>, memref<1600xf32>) {scale = 0.25 : f32, causal = true}
  // CHECK-NEXT: buf.attention ins(%q, %k, %k : memref<2x4x8x16xf32>, memref<2x2x8x16xf32>, memref<2x2x8x16xf32>) outs(%a : memref<2x4x8x16xf32>) {scale = 2.500000e-01 : f32}
  buf.attention ins(%q, %k, %k : memref<2x4x8x16xf32>, memref<2x2x8x16xf32>, memref<2x2x8x16xf32>) outs(%a : memref<2x4x8x16xf32>) {scale = 0.25 : f32}
  // CHECK-NEXT: buf.fused_elementwise ins(%x, %w : memref<2x8x16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>) {
  // CHECK-NEXT: ^bb0(%e: f32, %f: f32):
  // CHECK-NEXT:   %g = arith.mulf %e, %f : f32
  // CHECK-NEXT:   %n = math.tanh %g : f32
  // CHECK-NEXT:   buf.yield %n : f32
  // CHECK-NEXT: }
  buf.fused_elementwise ins(%x, %w : memref<2x8x16xf32>, memref<16xf32>) outs(%o : memref<2x8x16xf32>) {
  ^bb0(%e: f32, %f: f32):
    %g = arith.mulf %e, %f : f32
    %n = math.tanh %g : f32
    buf.yield %n : f32
  }
  // CHECK-NEXT: %v = buf.subview %x[16] : memref<2x8x16xf32> -> memref<1x3x16xf32>
  %v = buf.subview %x[16] : memref<2x8x16xf32> -> memref<1x3x16xf32>
  // CHECK-NEXT: %u = buf.subview %v[0] : memref<1x3x16xf32> -> memref<48xf32>
  %u = buf.subview %v[0] : memref<1x3x16xf32> -> memref<48xf32>
  // CHECK-NEXT: %z = buf.alloc : memref<2x8x100xf32>
  %z = buf.alloc : memref<2x8x100xf32>
  // CHECK-NEXT: buf.matmul ins(%x, %t : memref<2x8x16xf32>, memref<100x16xf32>) outs(%z : memref<2x8x100xf32>) {transpose_b = true, activation = "gelu"}
  buf.matmul ins(%x, %t : memref<2x8x16xf32>, memref<100x16xf32>) outs(%z : memref<2x8x100xf32>) {transpose_b = true, activation = "gelu"}
  // CHECK-NEXT: func.return
  func.return
}

// KV cache: a persistent buffer outside the arena, written at the run-time position dims[0]
// CHECK-LABEL: func.func @kv_cache_decode
func.func @kv_cache_decode(%q: memref<1x4x1x16xf32>, %k: memref<1x2x1x16xf32>, %o: memref<1x4x1x16xf32>, %scratch: memref<58xf32>) attributes {tg.num_outputs = 1 : i64} {
  // CHECK-NEXT: %ks = buf.state "kv.0.key" : memref<1x2x40x16xf32>
  %ks = buf.state "kv.0.key" : memref<1x2x40x16xf32>
  // CHECK-NEXT: buf.cache_write ins(%k : memref<1x2x1x16xf32>) outs(%ks : memref<1x2x40x16xf32>) {axis = 2 : i64}
  buf.cache_write ins(%k : memref<1x2x1x16xf32>) outs(%ks : memref<1x2x40x16xf32>) {axis = 2 : i64}
  // CHECK-NEXT: buf.attention ins(%q, %ks, %ks : memref<1x4x1x16xf32>, memref<1x2x40x16xf32>, memref<1x2x40x16xf32>) outs(%o, %scratch : memref<1x4x1x16xf32>, memref<58xf32>) {scale = 2.500000e-01 : f32, causal = true, kv_cache = true}
  buf.attention ins(%q, %ks, %ks : memref<1x4x1x16xf32>, memref<1x2x40x16xf32>, memref<1x2x40x16xf32>) outs(%o, %scratch : memref<1x4x1x16xf32>, memref<58xf32>) {scale = 0.25 : f32, causal = true, kv_cache = true}
  func.return
}

// CHECK-LABEL: func.func @rope
func.func @rope(%q: memref<1x4x8x16xf32>, %cos: memref<1x1x8x16xf32>, %sin: memref<8x16xf32>, %o: memref<1x4x8x16xf32>) {
  // CHECK-NEXT: buf.rope ins(%q, %cos, %sin : memref<1x4x8x16xf32>, memref<1x1x8x16xf32>, memref<8x16xf32>) outs(%o : memref<1x4x8x16xf32>)
  buf.rope ins(%q, %cos, %sin : memref<1x4x8x16xf32>, memref<1x1x8x16xf32>, memref<8x16xf32>) outs(%o : memref<1x4x8x16xf32>)
  func.return
}

// A GEMM by a weight packed into column panels: [ceil(N / NR) x K x NR], NR = 64 here
// CHECK-LABEL: func.func @packed_matmul
func.func @packed_matmul(%x: memref<2x5x32xf32>, %b: memref<100xf32>, %o: memref<2x5x100xf32>) {
  // CHECK-NEXT: %wp = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<2x32x64xf32>
  %wp = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<2x32x64xf32>
  // CHECK-NEXT: %wk = buf.packed_weight "conv.weight" {source_shape = array<i64: 32, 100>} : memref<2x32x64xf32>
  %wk = buf.packed_weight "conv.weight" {source_shape = array<i64: 32, 100>} : memref<2x32x64xf32>
  // CHECK-NEXT: buf.packed_matmul ins(%x, %wp, %b : memref<2x5x32xf32>, memref<2x32x64xf32>, memref<100xf32>) outs(%o : memref<2x5x100xf32>) {beta = 1.000000e+00 : f32, activation = "gelu_tanh"}
  buf.packed_matmul ins(%x, %wp, %b : memref<2x5x32xf32>, memref<2x32x64xf32>, memref<100xf32>) outs(%o : memref<2x5x100xf32>) {beta = 1.0 : f32, activation = "gelu_tanh"}
  // CHECK-NEXT: buf.packed_matmul ins(%x, %wk : memref<2x5x32xf32>, memref<2x32x64xf32>) outs(%o : memref<2x5x100xf32>) {alpha = 5.000000e-01 : f32}
  buf.packed_matmul ins(%x, %wk : memref<2x5x32xf32>, memref<2x32x64xf32>) outs(%o : memref<2x5x100xf32>) {alpha = 0.5 : f32}
  // an epilogue body (fuse-gemm-elementwise) in place of the activation
  // CHECK-NEXT: buf.packed_matmul ins(%x, %wp : memref<2x5x32xf32>, memref<2x32x64xf32>) outs(%o : memref<2x5x100xf32>) epilogue {
  // CHECK-NEXT: ^bb0(%{{.*}}: f32):
  // CHECK-NEXT:   %{{.*}} = arith.mulf %{{.*}}, %{{.*}} : f32
  // CHECK-NEXT:   buf.yield %{{.*}} : f32
  // CHECK-NEXT: }
  buf.packed_matmul ins(%x, %wp : memref<2x5x32xf32>, memref<2x32x64xf32>) outs(%o : memref<2x5x100xf32>) epilogue {
  ^bb0(%0: f32):
    %1 = arith.mulf %0, %0 : f32
    buf.yield %1 : f32
  }
  func.return
}

// A matrix-vector product over bf16 panels, and over int8 panels with their per-column scales
// CHECK-LABEL: func.func @quantized_matvec
func.func @quantized_matvec(%x: memref<1x32xf32>, %b: memref<100xf32>, %o: memref<1x100xf32>) {
  // CHECK-NEXT: %wb = buf.packed_weight "fc.weight" {transposed = true, layout = "bf16panels", source_shape = array<i64: 100, 32>} : memref<7x32x16xbf16>
  %wb = buf.packed_weight "fc.weight" {transposed = true, layout = "bf16panels", source_shape = array<i64: 100, 32>} : memref<7x32x16xbf16>
  // CHECK-NEXT: %wq = buf.packed_weight "fc.weight" {transposed = true, layout = "int8panels", source_shape = array<i64: 100, 32>} : memref<7x32x16xi8>
  %wq = buf.packed_weight "fc.weight" {transposed = true, layout = "int8panels", source_shape = array<i64: 100, 32>} : memref<7x32x16xi8>
  // CHECK-NEXT: %ws = buf.packed_weight "fc.weight" {transposed = true, layout = "int8scalespanels", source_shape = array<i64: 100, 32>} : memref<7x16xf32>
  %ws = buf.packed_weight "fc.weight" {transposed = true, layout = "int8scalespanels", source_shape = array<i64: 100, 32>} : memref<7x16xf32>
  // CHECK-NEXT: buf.quantized_matvec ins(%x, %wb, %b : memref<1x32xf32>, memref<7x32x16xbf16>, memref<100xf32>) outs(%o : memref<1x100xf32>) {format = "bf16", beta = 1.000000e+00 : f32, activation = "relu"}
  buf.quantized_matvec ins(%x, %wb, %b : memref<1x32xf32>, memref<7x32x16xbf16>, memref<100xf32>) outs(%o : memref<1x100xf32>) {format = "bf16", beta = 1.0 : f32, activation = "relu"}
  // CHECK-NEXT: buf.quantized_matvec ins(%x, %wq, %ws : memref<1x32xf32>, memref<7x32x16xi8>, memref<7x16xf32>) outs(%o : memref<1x100xf32>) {format = "int8"}
  buf.quantized_matvec ins(%x, %wq, %ws : memref<1x32xf32>, memref<7x32x16xi8>, memref<7x16xf32>) outs(%o : memref<1x100xf32>) {format = "int8"}
  func.return
}

// A gather from a table packed into panels (a tied LM head's embedding): 100 rows in 2 panels
// CHECK-LABEL: func.func @packed_embedding
func.func @packed_embedding(%ids: memref<2x5xi64>, %o: memref<2x5x32xf32>) {
  // CHECK-NEXT: %t = buf.packed_weight "wte" {transposed = true, source_shape = array<i64: 100, 32>} : memref<2x32x64xf32>
  %t = buf.packed_weight "wte" {transposed = true, source_shape = array<i64: 100, 32>} : memref<2x32x64xf32>
  // CHECK-NEXT: buf.packed_embedding ins(%t, %ids : memref<2x32x64xf32>, memref<2x5xi64>) outs(%o : memref<2x5x32xf32>) {rows = 100 : i64}
  buf.packed_embedding ins(%t, %ids : memref<2x32x64xf32>, memref<2x5xi64>) outs(%o : memref<2x5x32xf32>) {rows = 100 : i64}
  func.return
}

// CHECK-LABEL: func.func @im2col
func.func @im2col(%x: memref<1x4x7x6xf32>, %o: memref<1x4x3x3x4x3xf32>) {
  // CHECK-NEXT: buf.im2col ins(%x : memref<1x4x7x6xf32>) outs(%o : memref<1x4x3x3x4x3xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
  buf.im2col ins(%x : memref<1x4x7x6xf32>) outs(%o : memref<1x4x3x3x4x3xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
  func.return
}

// Views of the same bytes at different times: %a is dead (last read) before %b is written, as
// plan-memory reuses an arena
// CHECK-LABEL: func.func @views_reuse_bytes_when_dead
func.func @views_reuse_bytes_when_dead(%x: memref<16xf32>, %y: memref<16xf32>) attributes {tg.num_outputs = 1 : i64} {
  // CHECK-NEXT: %arena = buf.arena : memref<64xi8>
  %arena = buf.arena : memref<64xi8>
  %a = buf.view %arena[0] : memref<64xi8> -> memref<16xf32>
  %b = buf.view %arena[0] : memref<64xi8> -> memref<16xf32>
  buf.relu ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
  buf.relu ins(%a : memref<16xf32>) outs(%y : memref<16xf32>)
  buf.relu ins(%y : memref<16xf32>) outs(%b : memref<16xf32>)
  buf.relu ins(%b : memref<16xf32>) outs(%y : memref<16xf32>)
  func.return
}

// CHECK-LABEL: func.func @lapack
func.func @lapack(%a: memref<2x4x4xf32>, %p: memref<2x4xi32>, %scratch: memref<17xf32>) {
  // CHECK-NEXT: buf.lapack ins(%a : memref<2x4x4xf32>) outs(%p, %scratch : memref<2x4xi32>, memref<17xf32>) {routine = "getrf", output = "pivots", check = "torch.linalg.lu_factor"}
  buf.lapack ins(%a : memref<2x4x4xf32>) outs(%p, %scratch : memref<2x4xi32>, memref<17xf32>) {routine = "getrf", output = "pivots", check = "torch.linalg.lu_factor"}
  func.return
}
