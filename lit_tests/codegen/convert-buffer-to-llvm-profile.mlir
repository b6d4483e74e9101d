// RUN: tg-opt %s -p 'set-target{target=x86-64-v4},convert-buffer-to-llvm{profile=true}' --split-input-file | filecheck %s
// RUN: tg-opt %s -p 'set-target{target=x86-64-v4},convert-buffer-to-llvm{profile=true}' -t llvm --split-input-file | filecheck --check-prefix=LLVMIR %s
// RUN: tg-opt %s -p set-target{target=x86-64-v4},convert-buffer-to-llvm --split-input-file | filecheck --check-prefix=PLAIN %s
// RUN: tg-opt %s -p set-target{target=x86-64-v4},convert-buffer-to-llvm -t llvm --split-input-file | filecheck --check-prefix=PLAINIR %s

// convert-buffer-to-llvm{profile=true}: before its first kernel the entry loads its counters
// (int64 [ns, calls] per kernel) from the weights table slot after the weights and constants
// (fc1.weight: 0, fc1.bias: 1, __const0: 2, counters: 3); it reads CLOCK_MONOTONIC
// (clock_gettime(1, %timespec)) before the first kernel and after each, and adds the elapsed
// nanoseconds and one call to counters[2k] and counters[2k + 1]. tg.profile labels every kernel
// (op, shapes, variant, output).

// CHECK:      builtin.module attributes {
// CHECK-SAME:   tg.weight_table = ["fc1.weight", "fc1.bias", "__const0"]
// CHECK-SAME:   tg.profile = ["buf.matmul 4x256 @ 256x1024 (%t)", "buf.bias_activation 4x1024 relu (%t)", "buf.mul 4x1024 (%out0)"]
// CHECK:      llvm.func @clock_gettime(i32, !llvm.ptr) -> i32
// CHECK:      llvm.func @forward(%arena: !llvm.ptr {llvm.noalias}, %weights: !llvm.ptr, %inputs: !llvm.ptr, %outputs: !llvm.ptr, %dims: !llvm.ptr) -> i32 {
// CHECK-DAG:    %[[MONOTONIC:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-DAG:    %[[GIGA:.*]] = llvm.mlir.constant(1000000000) : i64
// CHECK-DAG:    %[[ONE:.*]] = llvm.mlir.constant(1) : i64
// CHECK-DAG:    %[[THREE:.*]] = llvm.mlir.constant(3) : i64
// CHECK:        %timespec = llvm.alloca %{{.*}} x i64 {alignment = 8 : i64} : (i64) -> !llvm.ptr
// CHECK:        %t = llvm.getelementptr inbounds %arena
// before the first kernel: the counters and the start time
// CHECK-NEXT:   %[[SLOT:.*]] = llvm.getelementptr inbounds %weights[%[[THREE]]] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   %counters = llvm.load %[[SLOT]] : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:   llvm.call @clock_gettime(%[[MONOTONIC]], %timespec) : (i32, !llvm.ptr) -> i32
// CHECK-NEXT:   %[[SEC:.*]] = llvm.load %timespec : !llvm.ptr -> i64
// CHECK-NEXT:   %[[NSECP:.*]] = llvm.getelementptr inbounds %timespec[%[[ONE]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT:   %[[NSEC:.*]] = llvm.load %[[NSECP]] : !llvm.ptr -> i64
// CHECK-NEXT:   %[[SECNS:.*]] = llvm.mul %[[SEC]], %[[GIGA]] overflow<nsw> : i64
// CHECK-NEXT:   %now = llvm.add %[[SECNS]], %[[NSEC]] overflow<nsw> : i64
// kernel 0: call, read the clock, counters[0] += now - start, counters[1] += 1
// CHECK-NEXT:   llvm.call @forward__0_matmul(%x, %w, %t)
// CHECK-NEXT:   llvm.call @clock_gettime(%[[MONOTONIC]], %timespec)
// CHECK:        %now_1 = llvm.add
// CHECK-NEXT:   %[[DT0:.*]] = llvm.sub %now_1, %now : i64
// CHECK-NEXT:   %[[NS0:.*]] = llvm.load %counters : !llvm.ptr -> i64
// CHECK-NEXT:   %[[SUM0:.*]] = llvm.add %[[NS0]], %[[DT0]] overflow<nsw> : i64
// CHECK-NEXT:   llvm.store %[[SUM0]], %counters : i64, !llvm.ptr
// CHECK-NEXT:   %[[CALLS0P:.*]] = llvm.getelementptr inbounds %counters[%[[ONE]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT:   %[[CALLS0:.*]] = llvm.load %[[CALLS0P]] : !llvm.ptr -> i64
// CHECK-NEXT:   %[[INC0:.*]] = llvm.add %[[CALLS0]], %[[ONE]] overflow<nsw> : i64
// CHECK-NEXT:   llvm.store %[[INC0]], %[[CALLS0P]] : i64, !llvm.ptr
// kernel 1: counters[2], counters[3]; its time runs from kernel 0's end reading
// CHECK-NEXT:   llvm.call @forward__1_bias_activation(%t, %b)
// CHECK-NEXT:   llvm.call @clock_gettime(%[[MONOTONIC]], %timespec)
// CHECK:        %now_2 = llvm.add
// CHECK-NEXT:   llvm.sub %now_2, %now_1 : i64
// CHECK:        llvm.getelementptr inbounds %counters[%[[THREE]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK:        llvm.call @forward__2_mul(%t, %c, %out0)
// CHECK:        llvm.sub %now_3, %now_2 : i64
// CHECK:        llvm.return

// LLVMIR:     declare i32 @{{"?}}clock_gettime{{"?}}(i32
// LLVMIR:     define i32 @{{"?}}forward{{"?}}(ptr noalias
// LLVMIR:       alloca i64, i64 2, align 8
// LLVMIR:       call {{.*}}i32 @{{"?}}clock_gettime{{"?}}(i32 1,
// LLVMIR:       call {{.*}}i32 @{{"?}}forward__0_matmul{{"?}}(ptr
// LLVMIR:       call {{.*}}i32 @{{"?}}clock_gettime{{"?}}(i32 1,
// LLVMIR:       mul nsw i64 {{.*}}, 1000000000
// LLVMIR:       sub i64
// LLVMIR:       call {{.*}}i32 @{{"?}}forward__1_bias_activation{{"?}}(ptr

// Without the option: no labels, no counters, no clock.
// PLAIN-NOT:  tg.profile
// PLAIN-NOT:  clock_gettime
// PLAIN-NOT:  %counters
// PLAIN:      llvm.func @forward(
// PLAIN-NOT:  clock_gettime
// PLAIN:      llvm.call @forward__0_matmul(%x, %w, %t)
// PLAIN-NEXT: llvm.call @forward__1_bias_activation(%t, %b)
// PLAIN-NEXT: llvm.call @forward__2_mul(%t, %c, %out0)
// PLAIN-NOT:  clock_gettime
// PLAIN-NOT:  tg.profile
// PLAINIR-NOT: clock_gettime

builtin.module attributes {tg.arena_size = 16448 : i64} {
  func.func @forward(%x: memref<4x256xf32>, %out0: memref<4x1024xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<16448xi8>
    %w = buf.weight "fc1.weight" : memref<1024x256xf32>
    %b = buf.weight "fc1.bias" : memref<1024xf32>
    %c = buf.constant dense<2.0> : tensor<f32> : memref<f32>
    %t = buf.view %arena[64] : memref<16448xi8> -> memref<4x1024xf32>
    buf.matmul ins(%x, %w : memref<4x256xf32>, memref<1024x256xf32>) outs(%t : memref<4x1024xf32>) {transpose_b = true}
    buf.bias_activation ins(%t, %b : memref<4x1024xf32>, memref<1024xf32>) outs(%t : memref<4x1024xf32>) {activation = "relu"}
    buf.mul ins(%t, %c : memref<4x1024xf32>, memref<f32>) outs(%out0 : memref<4x1024xf32>)
    func.return
  }
}

// -----

// With states the counters come after them (wte: 0, kv.0.key: 1, counters: 2). A kernel that
// can fail (the embedding's index check) is timed before its status is tested, and the labels
// name the attention's variant.

// CHECK:      tg.weight_table = ["wte"]
// CHECK-SAME: tg.state_names = ["kv.0.key"]
// CHECK-SAME: tg.profile = ["buf.embedding 50x16 -> 1x2x16 (%e)", "buf.cache_write 1x2x1x16 -> 1x2x40x16 (%ks)", "buf.attention q 1x2x1x16 kv 1x2x40x16 kv_cache (%o)"]
// CHECK:      llvm.func @decode(
// CHECK-DAG:    %[[TWO:.*]] = llvm.mlir.constant(2) : i64
// CHECK:        %[[SLOT:.*]] = llvm.getelementptr inbounds %weights[%[[TWO]]] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   %counters = llvm.load %[[SLOT]] : !llvm.ptr -> !llvm.ptr
// CHECK:        %[[ST:.*]] = llvm.call @decode__0_embedding(
// CHECK-NEXT:   llvm.call @clock_gettime(
// CHECK:        llvm.store %{{.*}}, %counters : i64, !llvm.ptr
// CHECK:        llvm.icmp "eq" %[[ST]], %{{.*}} : i32

builtin.module attributes {tg.arena_size = 3584 : i64} {
  func.func @decode(%ids: memref<1x2xi64>, %o: memref<1x2x1x16xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<3584xi8>
    %w = buf.weight "wte" : memref<50x16xf32>
    %ks = buf.state "kv.0.key" : memref<1x2x40x16xf32>
    %e = buf.view %arena[0] : memref<3584xi8> -> memref<1x2x16xf32>
    buf.embedding ins(%w, %ids : memref<50x16xf32>, memref<1x2xi64>) outs(%e : memref<1x2x16xf32>)
    %q = buf.reshape %e : memref<1x2x16xf32> -> memref<1x2x1x16xf32>
    buf.cache_write ins(%q : memref<1x2x1x16xf32>) outs(%ks : memref<1x2x40x16xf32>) {axis = 2 : i64}
    %s = buf.view %arena[128] : memref<3584xi8> -> memref<864xf32>
    buf.attention ins(%q, %ks, %ks : memref<1x2x1x16xf32>, memref<1x2x40x16xf32>, memref<1x2x40x16xf32>) outs(%o, %s : memref<1x2x1x16xf32>, memref<864xf32>) {scale = 0.25 : f32, kv_cache = true}
    func.return
  }
}
