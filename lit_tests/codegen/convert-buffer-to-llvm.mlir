// RUN: tg-opt %s -p convert-buffer-to-llvm --split-input-file --verify-diagnostics | filecheck %s
// RUN: tg-opt %s -p convert-buffer-to-llvm -t llvm --split-input-file --verify-diagnostics | filecheck --check-prefix=LLVMIR %s

// A planned MLP layer: sgemm into an arena view, bias+relu in place, scale by a constant.

// CHECK:      builtin.module attributes {
// CHECK-SAME:   tg.arena_size = 16448 : i64
// CHECK-SAME:   tg.entry = "forward"
// CHECK-SAME:   tg.weight_table = ["fc1.weight", "fc1.bias", "__const0"]
// CHECK-SAME:   tg.constants = {__const0 = dense<2.000000e+00> : tensor<f32>}
// CHECK-SAME:   tg.input_names = ["x"]
// CHECK-SAME:   tg.input_types = [memref<4x256xf32>]
// CHECK-SAME:   tg.output_types = [memref<4x1024xf32>]
// CHECK:      llvm.func @scipy_cblas_sgemm(i32, i32, i32, i32, i32, i32, f32, !llvm.ptr, i32, !llvm.ptr, i32, f32, !llvm.ptr, i32)
// CHECK:      llvm.func @forward(%arena: !llvm.ptr {llvm.noalias}, %weights: !llvm.ptr, %inputs: !llvm.ptr, %outputs: !llvm.ptr, %dims: !llvm.ptr) {
// CHECK-DAG:    %[[ROWMAJOR:.*]] = llvm.mlir.constant(101 : i32) : i32
// CHECK-DAG:    %[[NOTRANS:.*]] = llvm.mlir.constant(111 : i32) : i32
// CHECK-DAG:    %[[TRANS:.*]] = llvm.mlir.constant(112 : i32) : i32
// CHECK:        %x = llvm.load %inputs : !llvm.ptr -> !llvm.ptr
// CHECK:        %out0 = llvm.load %outputs : !llvm.ptr -> !llvm.ptr
// CHECK:        %w = llvm.load %weights : !llvm.ptr -> !llvm.ptr
// CHECK:        %[[BSLOT:.*]] = llvm.getelementptr inbounds %weights[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK:        %b = llvm.load %[[BSLOT]] : !llvm.ptr -> !llvm.ptr
// CHECK:        %[[T:.*]] = llvm.getelementptr inbounds %arena[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK:        llvm.call @scipy_cblas_sgemm(%[[ROWMAJOR]], %[[NOTRANS]], %[[TRANS]], %{{.*}}, %x, %{{.*}}, %w, %{{.*}}, %[[T]], %{{.*}})
// bias + relu: rows x columns (the bias is broadcast along rows)
// CHECK:        llvm.br ^[[ROWS:.*]](%{{.*}} : i64)
// CHECK:      ^[[COLS:.*]](%[[J:.*]]: i64):
// CHECK:        llvm.fadd
// CHECK:        llvm.fcmp "olt"
// CHECK:        llvm.select
// CHECK:        llvm.cond_br %{{.*}}, ^[[COLS]](%{{.*}} : i64), ^{{.*}}
// scale by the rank-0 constant: its load is hoisted, the 2-D output is ONE flat loop of 4096
// CHECK:        %[[C:.*]] = llvm.load %c : !llvm.ptr -> f32
// CHECK:      ^[[FLAT:.*]](%[[I:.*]]: i64):
// CHECK:        %[[X:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK:        llvm.fmul %[[X]], %[[C]] : f32
// CHECK:        llvm.store
// CHECK:        %[[NEXT:.*]] = llvm.add %[[I]], %{{.*}} overflow<nsw> : i64
// CHECK:        llvm.cond_br %{{.*}}, ^[[FLAT]](%[[NEXT]] : i64), ^{{.*}}
// CHECK:        llvm.return

// LLVMIR:     declare void @{{"?}}scipy_cblas_sgemm{{"?}}(i32
// LLVMIR:     define void @{{"?}}forward{{"?}}(ptr noalias
// LLVMIR:       call {{.*}}void @{{"?}}scipy_cblas_sgemm{{"?}}(i32 101, i32 111, i32 112, i32 4, i32 1024, i32 256, float
// LLVMIR:       phi i64
// LLVMIR:       fmul float
// LLVMIR:       ret void

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

// A batched matmul whose rhs has batch dims loops over the batch, one sgemm per matrix.

// CHECK:      llvm.func @batched(
// CHECK:      ^[[B:.*]](%[[IB:.*]]: i64):
// CHECK:        llvm.call @scipy_cblas_sgemm(
// CHECK:        llvm.cond_br %{{.*}}, ^[[B]](%{{.*}} : i64), ^{{.*}}

builtin.module {
  func.func @batched(%a: memref<3x4x8xf32>, %b: memref<3x8x5xf32>, %o: memref<3x4x5xf32>) attributes {tg.num_outputs = 1 : i64} {
    buf.matmul ins(%a, %b : memref<3x4x8xf32>, memref<3x8x5xf32>) outs(%o : memref<3x4x5xf32>)
    func.return
  }
}

// -----

// CHECK: convert-buffer-to-llvm: @not_planned still has a buf.alloc of memref<4xf32>: the module is not planned, run plan-memory first

builtin.module {
  func.func @not_planned(%x: memref<4xf32>, %o: memref<4xf32>) attributes {tg.num_outputs = 1 : i64} {
    %t = buf.alloc : memref<4xf32>
    buf.relu ins(%x : memref<4xf32>) outs(%t : memref<4xf32>)
    buf.copy ins(%t : memref<4xf32>) outs(%o : memref<4xf32>)
    func.return
  }
}

// -----

// CHECK: convert-buffer-to-llvm: expected exactly one graph function per module, found @f, @g

builtin.module {
  func.func @f(%x: memref<4xf32>, %o: memref<4xf32>) attributes {tg.num_outputs = 1 : i64} {
    buf.relu ins(%x : memref<4xf32>) outs(%o : memref<4xf32>)
    func.return
  }
  func.func @g(%x: memref<4xf32>, %o: memref<4xf32>) attributes {tg.num_outputs = 1 : i64} {
    buf.relu ins(%x : memref<4xf32>) outs(%o : memref<4xf32>)
    func.return
  }
}
