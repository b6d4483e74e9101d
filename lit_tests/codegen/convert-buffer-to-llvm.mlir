// RUN: tg-opt %s -p set-target{target=x86-64-v4},convert-buffer-to-llvm --split-input-file --verify-diagnostics | filecheck %s
// RUN: tg-opt %s -p set-target{target=x86-64-v4},convert-buffer-to-llvm -t llvm --split-input-file --verify-diagnostics | filecheck --check-prefix=LLVMIR %s
// RUN: not tg-opt %S/Inputs/convert-buffer-to-llvm-bf16.mlir -p set-target{target=x86-64-v3},convert-buffer-to-llvm 2>&1 | filecheck --check-prefix=BF16 %s
// BF16: convert-buffer-to-llvm: 1 op computes in bfloat16 (buf.add); the CPU kernels compute bfloat16 values in float32: run widen-dtypes on the aten module first

// A planned MLP layer: sgemm into an arena view, bias+relu in place, scale by a constant.
// The entry computes each buffer's pointer and calls one function per kernel, whose
// arguments are the kernel's distinct buffers (noalias: the planner proved them disjoint).
// It returns an i32 status (0: ok; k: the message tg.errors[k - 1]).

// CHECK:      builtin.module attributes {
// CHECK-SAME:   tg.arena_size = 16448 : i64
// CHECK-SAME:   tg.entry = "forward"
// CHECK-SAME:   tg.weight_table = ["fc1.weight", "fc1.bias", "__const0"]
// CHECK-SAME:   tg.constants = {__const0 = dense<2.000000e+00> : tensor<f32>}
// CHECK-SAME:   tg.input_names = ["x"]
// CHECK-SAME:   tg.input_types = [memref<4x256xf32>]
// CHECK-SAME:   tg.output_types = [memref<4x1024xf32>]
// CHECK-SAME:   tg.errors = []
// CHECK:      llvm.func @scipy_cblas_sgemm(i32, i32, i32, i32, i32, i32, f32, !llvm.ptr, i32, !llvm.ptr, i32, f32, !llvm.ptr, i32)
// CHECK:      llvm.func @forward(%arena: !llvm.ptr {llvm.noalias}, %weights: !llvm.ptr, %inputs: !llvm.ptr, %outputs: !llvm.ptr, %dims: !llvm.ptr) -> i32 {
// CHECK:        %[[OK:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK:        %x = llvm.load %inputs : !llvm.ptr -> !llvm.ptr
// CHECK:        %out0 = llvm.load %outputs : !llvm.ptr -> !llvm.ptr
// CHECK:        %w = llvm.load %weights : !llvm.ptr -> !llvm.ptr
// CHECK:        %[[BSLOT:.*]] = llvm.getelementptr inbounds %weights[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK:        %b = llvm.load %[[BSLOT]] : !llvm.ptr -> !llvm.ptr
// CHECK:        %[[T:.*]] = llvm.getelementptr inbounds %arena[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK:        llvm.call @forward__0_matmul(%x, %w, %[[T]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// in place: the buffer is passed once
// CHECK:        llvm.call @forward__1_bias_activation(%[[T]], %b) : (!llvm.ptr, !llvm.ptr) -> i32
// CHECK:        llvm.call @forward__2_mul(%[[T]], %c, %out0) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK:        llvm.return %[[OK]] : i32

// The GEMM (2 MFLOP: it pays for threads) runs as output tiles of 256 x 256 spread over the
// threads (here 4 column tiles), one single-threaded sgemm each, from the worker's pointers.
// CHECK:      llvm.func internal @forward__0_matmul(%x_1: !llvm.ptr {llvm.noalias}, %w_1: !llvm.ptr {llvm.noalias}, %t_1: !llvm.ptr {llvm.noalias}) -> i32 {
// CHECK:        llvm.call @GOMP_parallel
// CHECK:      llvm.func internal @forward__0_matmul__par0(%shared: !llvm.ptr) {
// CHECK-DAG:    %[[ROWMAJOR:.*]] = llvm.mlir.constant(101 : i32) : i32
// CHECK-DAG:    %[[NOTRANS:.*]] = llvm.mlir.constant(111 : i32) : i32
// CHECK-DAG:    %[[TRANS:.*]] = llvm.mlir.constant(112 : i32) : i32
// CHECK-DAG:    %[[TILE:.*]] = llvm.mlir.constant(256) : i64
// CHECK:        llvm.call @GOMP_loop_guided_start
// CHECK:        llvm.udiv %{{.*}}, %{{.*}} : i64
// CHECK:        llvm.call @scipy_cblas_sgemm(%[[ROWMAJOR]], %[[NOTRANS]], %[[TRANS]], %{{.*}})

// bias + relu: rows x columns (the bias is broadcast along rows)
// CHECK:      llvm.func internal @forward__1_bias_activation(%t_3: !llvm.ptr {llvm.noalias}, %b_1: !llvm.ptr {llvm.noalias}) -> i32 {
// CHECK:        llvm.br ^[[ROWS:.*]](%{{.*}} : i64)
// CHECK:      ^[[COLS:.*]](%[[J:.*]]: i64):
// CHECK:        llvm.fadd
// CHECK:        llvm.fcmp "olt"
// CHECK:        llvm.select
// CHECK:        llvm.cond_br %{{.*}}, ^[[COLS]](%{{.*}} : i64), ^{{.*}}

// scale by the rank-0 splat constant: an immediate; the 2-D output is ONE flat loop of 4096
// CHECK:      llvm.func internal @forward__2_mul(
// CHECK:        %[[C:.*]] = llvm.mlir.constant(2.000000e+00 : f32) : f32
// CHECK:      ^[[FLAT:.*]](%[[I:.*]]: i64):
// CHECK:        %[[X:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK:        llvm.fmul %[[X]], %[[C]] : f32
// CHECK:        llvm.store
// CHECK:        %[[NEXT:.*]] = llvm.add %[[I]], %{{.*}} overflow<nsw> : i64
// CHECK:        llvm.cond_br %{{.*}}, ^[[FLAT]](%[[NEXT]] : i64), ^{{.*}}
// CHECK:        llvm.return %{{.*}} : i32

// Kernel functions are internal and never inlined (one small function per kernel).
// LLVMIR:     declare void @{{"?}}scipy_cblas_sgemm{{"?}}(i32
// LLVMIR:     define i32 @{{"?}}forward{{"?}}(ptr noalias
// LLVMIR:       call {{.*}}i32 @{{"?}}forward__0_matmul{{"?}}(ptr
// LLVMIR:       ret i32 0
// LLVMIR:     define internal i32 @{{"?}}forward__0_matmul{{"?}}(ptr noalias {{.*}}) noinline
// LLVMIR:     define internal void @{{"?}}forward__0_matmul__par0{{"?}}(ptr {{.*}}) noinline
// LLVMIR:       call {{.*}}void @{{"?}}scipy_cblas_sgemm{{"?}}(i32 101, i32 111, i32 112, i32 {{.*}}, i32 {{.*}}, i32 256, float {{.*}}, ptr {{.*}}, i32 256, ptr {{.*}}, i32 256, float {{.*}}, ptr {{.*}}, i32 1024)
// LLVMIR:     define internal i32 @{{"?}}forward__1_bias_activation{{"?}}(
// LLVMIR:       phi {{ *}}i64
// LLVMIR:     define internal i32 @{{"?}}forward__2_mul{{"?}}(
// LLVMIR:       fmul float {{.*}}, 0x4000000000000000

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
// CHECK:        llvm.call @batched__0_matmul(%a, %b, %o)
// CHECK:      llvm.func internal @batched__0_matmul(
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

// -----

// An embedding checks each index against [0, V) and returns status 1 (message in tg.errors;
// {bad_index:0:50}: the runtime names the offending value of input 0) instead of reading out
// of bounds; the row copy is an inner loop.

// The entry returns a nonzero kernel status at once.

// CHECK:      tg.errors = ["embedding 'wte': index out of range [0, 50){bad_index:0:50}"]
// CHECK:      llvm.func @embed(
// CHECK:        %[[S:.*]] = llvm.call @embed__0_embedding(%w, %ids, %o)
// CHECK:        %[[Z:.*]] = llvm.icmp "eq" %[[S]], %{{.*}} : i32
// CHECK:        llvm.cond_br %[[Z]], ^[[GO:.*]], ^[[STOP:.*]](%[[S]] : i32)
// CHECK:      ^[[STOP]](%[[ST:.*]]: i32):
// CHECK-NEXT:   llvm.return %[[ST]] : i32
// CHECK:      llvm.func internal @embed__0_embedding(
// CHECK-DAG:    %[[ONE:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-DAG:    %[[V:.*]] = llvm.mlir.constant(50) : i64
// CHECK:      ^[[ROW:.*]](%[[I:.*]]: i64):
// CHECK:        %[[ID:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK:        %[[OK:.*]] = llvm.icmp "ult" %[[ID]], %[[V]] : i64
// CHECK:        llvm.cond_br %[[OK]], ^[[IN:.*]], ^[[FAIL:.*]]
// CHECK:      ^[[FAIL]]:
// CHECK-NEXT:   llvm.return %[[ONE]] : i32
// CHECK:      ^[[IN]]:
// CHECK:        llvm.mul %[[ID]], %{{.*}} overflow<nsw> : i64

// LLVMIR:     define internal i32 @{{"?}}embed__0_embedding{{"?}}(
// LLVMIR:       icmp ult i64
// LLVMIR:       ret i32 1

builtin.module {
  func.func @embed(%ids: memref<2x3xi64>, %o: memref<2x3x8xf32>) attributes {tg.num_outputs = 1 : i64} {
    %w = buf.weight "wte" : memref<50x8xf32>
    buf.embedding ins(%w, %ids : memref<50x8xf32>, memref<2x3xi64>) outs(%o : memref<2x3x8xf32>)
    func.return
  }
}

// -----

// A fused elementwise body is ONE loop over the output: exp is straight-line code (a
// polynomial and exponent bits, no libm call), the [4, 1] operand is loaded once per row
// outside the inner loop, and a subview is a GEP into its buffer (no copy).

// CHECK:      llvm.func @fused(
// CHECK:        %[[ROWS:.*]] = llvm.getelementptr inbounds %m[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK:        llvm.call @fused__0_fused_elementwise(%x, %[[ROWS]], %o)
// CHECK:      llvm.func internal @fused__0_fused_elementwise(
// CHECK:      ^[[OUTER:.*]](%{{.*}}: i64):
// CHECK:        %[[B:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK:      ^[[INNER:.*]](%{{.*}}: i64):
// CHECK:        %[[A:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK:        %[[D:.*]] = llvm.fsub %[[A]], %[[B]] : f32
// CHECK-NOT:    llvm.intr.exp
// CHECK:        llvm.intr.fma
// CHECK:        llvm.bitcast %{{.*}} : f32 to i32
// CHECK:        llvm.shl
// CHECK:        llvm.store
// CHECK:        llvm.cond_br %{{.*}}, ^[[INNER]](%{{.*}} : i64), ^{{.*}}

// LLVMIR:     define internal i32 @{{"?}}fused__0_fused_elementwise{{"?}}(
// LLVMIR-NOT:   @expf
// LLVMIR:       call float @{{"?}}llvm.fma.f32{{"?}}

builtin.module {
  func.func @fused(%x: memref<4x64xf32>, %m: memref<8x1xf32>, %o: memref<4x64xf32>) attributes {tg.num_outputs = 1 : i64} {
    %rows = buf.subview %m[4] : memref<8x1xf32> -> memref<4x1xf32>
    buf.fused_elementwise ins(%x, %rows : memref<4x64xf32>, memref<4x1xf32>) outs(%o : memref<4x64xf32>) {
    ^bb0(%a: f32, %b: f32):
      %d = arith.subf %a, %b : f32
      %e = math.exp %d : f32
      buf.yield %e : f32
    }
    func.return
  }
}

// -----

// A sum over the innermost dim accumulates in a register over a loop whose fadd carries
// `reassoc` (so LLVM vectorises the reduction); mean divides by the count once per row.

// CHECK:      llvm.func internal @mean__0_reduce(
// CHECK:      ^[[ROW:.*]](%{{.*}}: i64):
// CHECK:      ^[[RED:.*]](%{{.*}}: i64, %[[ACC:.*]]: f32):
// CHECK:        %[[SUM:.*]] = llvm.fadd %[[ACC]], %{{.*}} {fastmathFlags = #llvm.fastmath<reassoc>} : f32
// CHECK:        llvm.cond_br %{{.*}}, ^[[RED]](%{{.*}}, %[[SUM]] : i64, f32), ^[[DONE:.*]](%[[SUM]] : f32)
// CHECK:      ^[[DONE]](%[[TOTAL:.*]]: f32):
// CHECK:        llvm.fdiv %[[TOTAL]], %{{.*}} : f32

builtin.module {
  func.func @mean(%x: memref<4x64xf32>, %o: memref<4x1xf32>) attributes {tg.num_outputs = 1 : i64} {
    buf.reduce ins(%x : memref<4x64xf32>) outs(%o : memref<4x1xf32>) {kind = "mean", dims = array<i64: 1>, keepdim = true}
    func.return
  }
}

// -----

// KV cache: a buf.state is a pointer from the weights table, in the slot after the weights and
// the constants (q_scale: 0, __const0: 1, kv.0.key: 2); the module records it in
// tg.state_names/tg.state_types. Kernels that read the run-time position past = dims[0]
// (buf.cache_write, buf.attention {kv_cache}) take %dims as their last argument, and the entry
// first checks that dims is not null. A cache_write checks past + n <= capacity (unsigned, so a
// negative past fails too) and copies the update to positions [past, past + n).

// CHECK:      builtin.module attributes {
// CHECK-SAME:   tg.weight_table = ["q_scale", "__const0"]
// CHECK-SAME:   tg.state_names = ["kv.0.key"]
// CHECK-SAME:   tg.state_types = [memref<1x2x40x16xf32>]
// CHECK-SAME:   tg.errors = ["kv cache 'kv.0.key': position {past} + 1 new tokens exceed its 40 positions", "dims is null: {{.*}}", "attention over a kv cache: position {past} + 1 queries exceed its 40 positions"]
// CHECK:      llvm.func @decode(%arena: !llvm.ptr {llvm.noalias}, %weights: !llvm.ptr, %inputs: !llvm.ptr, %outputs: !llvm.ptr, %dims: !llvm.ptr) -> i32 {
// CHECK-DAG:    %[[TWO:.*]] = llvm.mlir.constant(2) : i64
// CHECK:        %w = llvm.load %weights : !llvm.ptr -> !llvm.ptr
// CHECK:        %[[SLOT:.*]] = llvm.getelementptr inbounds %weights[%[[TWO]]] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   %ks = llvm.load %[[SLOT]] : !llvm.ptr -> !llvm.ptr
// CHECK:        llvm.call @decode__0_mul(%q, %w, %arena) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK:        %[[ADDR:.*]] = llvm.ptrtoint %dims : !llvm.ptr to i64
// CHECK:        %[[NONNULL:.*]] = llvm.icmp "ne" %[[ADDR]], %{{.*}} : i64
// CHECK:        llvm.cond_br %[[NONNULL]]
// CHECK:        llvm.call @decode__1_cache_write(%k, %ks, %dims) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK:        llvm.call @decode__2_attention(%arena, %ks, %o, %s, %dims)
// CHECK:        llvm.call @decode__3_mul(%o, %c) : (!llvm.ptr, !llvm.ptr) -> i32

// CHECK:      llvm.func internal @decode__0_mul(%q_1: !llvm.ptr {llvm.noalias}, %w_1: !llvm.ptr {llvm.noalias}, %arena_1: !llvm.ptr {llvm.noalias}) -> i32 {
// CHECK:      llvm.func internal @decode__1_cache_write(%k_1: !llvm.ptr {llvm.noalias}, %ks_1: !llvm.ptr {llvm.noalias}, %[[DIMS:.*]]: !llvm.ptr) -> i32 {
// CHECK-DAG:    %[[LAST:.*]] = llvm.mlir.constant(39) : i64
// CHECK-DAG:    %[[INNER:.*]] = llvm.mlir.constant(16) : i64
// CHECK:        %[[PAST:.*]] = llvm.load %[[DIMS]] : !llvm.ptr -> i64
// CHECK-NEXT:   %[[FITS:.*]] = llvm.icmp "ule" %[[PAST]], %[[LAST]] : i64
// CHECK-NEXT:   llvm.cond_br %[[FITS]], ^[[COPY:.*]], ^{{.*}}
// CHECK:      ^[[COPY]]:
// CHECK-NEXT:   %[[OFF:.*]] = llvm.mul %[[PAST]], %[[INNER]] overflow<nsw> : i64
// CHECK-NEXT:   %[[DST:.*]] = llvm.getelementptr inbounds %ks_1[%[[OFF]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK:      ^[[HEAD:.*]](%[[H:.*]]: i64):
// CHECK:        %[[AT:.*]] = llvm.getelementptr inbounds %[[DST]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK:        llvm.call_intrinsic "llvm.memcpy.p0.p0.i64"(%[[AT]], %{{.*}}, %{{.*}}, %{{.*}})

// kv_cache attention: keys = past + Sq; the key-block loop runs to ceil(keys / Bc) at run time
// CHECK:      llvm.func internal @decode__2_attention(
// CHECK-SAME:   %[[ADIMS:[^:]*]]: !llvm.ptr) -> i32 {
// CHECK:        %[[APAST:.*]] = llvm.load %[[ADIMS]] : !llvm.ptr -> i64
// CHECK:        llvm.icmp "ule" %[[APAST]], %{{.*}} : i64
// CHECK:        %[[KEYS:.*]] = llvm.add %[[APAST]], %{{.*}} overflow<nsw> : i64
// CHECK:        %[[UP:.*]] = llvm.add %[[KEYS]], %{{.*}} overflow<nsw> : i64
// CHECK:        %[[NKB:.*]] = llvm.sdiv %[[UP]], %{{.*}} : i64

builtin.module attributes {tg.arena_size = 3584 : i64} {
  func.func @decode(%q: memref<1x2x1x16xf32>, %k: memref<1x2x1x16xf32>, %o: memref<1x2x1x16xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<3584xi8>
    %w = buf.weight "q_scale" : memref<16xf32>
    %c = buf.constant dense<0.5> : tensor<f32> : memref<f32>
    %ks = buf.state "kv.0.key" : memref<1x2x40x16xf32>
    %qs = buf.view %arena[0] : memref<3584xi8> -> memref<1x2x1x16xf32>
    buf.mul ins(%q, %w : memref<1x2x1x16xf32>, memref<16xf32>) outs(%qs : memref<1x2x1x16xf32>)
    buf.cache_write ins(%k : memref<1x2x1x16xf32>) outs(%ks : memref<1x2x40x16xf32>) {axis = 2 : i64}
    %s = buf.view %arena[128] : memref<3584xi8> -> memref<864xf32>
    buf.attention ins(%qs, %ks, %ks : memref<1x2x1x16xf32>, memref<1x2x40x16xf32>, memref<1x2x40x16xf32>) outs(%o, %s : memref<1x2x1x16xf32>, memref<864xf32>) {scale = 0.25 : f32, kv_cache = true}
    buf.mul ins(%o, %c : memref<1x2x1x16xf32>, memref<f32>) outs(%o : memref<1x2x1x16xf32>)
    func.return
  }
}

// -----

// A packed GEMM: the packed weight takes the table slot "fc.weight@panels64t" (the runtime packs
// fc.weight into it); the kernel hands its buffers to a worker, run on min(tg_num_threads, 2
// panels, the threads its 0.79 MFLOP pay for: Target.thread_work) threads through libgomp (a
// direct call for one); in a team, each worker takes guided
// chunks of the panels (GOMP_loop_guided_start/next, at least max(1, 2 / (threads * 16)) panels),
// alone the whole range, and calls the register tile of 6 rows x 4 vectors of <16 x f32> per
// row block of each panel.
// CHECK:      tg.weight_table = ["fc.weight@panels64t"]
// CHECK-SAME: tg.packed_weights = ["fc.weight@panels64t"]
// CHECK:      llvm.func @GOMP_parallel(!llvm.ptr, !llvm.ptr, i32, i32)
// CHECK:      llvm.func @omp_get_thread_num() -> i32
// CHECK:      llvm.mlir.global external @tg_num_threads() {addr_space = 0 : i32} : i32
// CHECK:      llvm.func internal @forward__0_packed_matmul(%x_1: !llvm.ptr {llvm.noalias}, %wp_1: !llvm.ptr {llvm.noalias}, %out0_1: !llvm.ptr {llvm.noalias}) -> i32 {
// CHECK:        %[[N:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i32
// CHECK:        llvm.call @GOMP_parallel(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, !llvm.ptr, i32, i32) -> ()
// CHECK:        llvm.call @forward__0_packed_matmul__par0(%{{.*}}) : (!llvm.ptr) -> ()
// CHECK:      llvm.func internal @forward__0_packed_matmul__par0(%shared: !llvm.ptr) {
// CHECK:        llvm.call @omp_get_thread_num() : () -> i32
// CHECK:        %threads = llvm.sext %{{.*}} : i32 to i64
// CHECK:        %[[TEAM:.*]] = llvm.icmp "sgt" %threads, %{{.*}} : i64
// CHECK:        llvm.cond_br %[[TEAM]], ^[[SHARED:.*]], ^[[LONE:.*]]
// CHECK:      ^[[SHARED]]:
// CHECK:        llvm.call @GOMP_loop_guided_start(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LO:.*]], %[[HI:.*]]) : (i64, i64, i64, i64, !llvm.ptr, !llvm.ptr) -> i8
// CHECK:      ^[[LONE]]:
// CHECK:        llvm.store %{{.*}}, %[[LO]] : i64, !llvm.ptr
// CHECK:      ^[[BODY:.*]]:
// CHECK:        %start = llvm.load %[[LO]] : !llvm.ptr -> i64
// CHECK:        %end = llvm.load %[[HI]] : !llvm.ptr -> i64
// CHECK:        llvm.call @tg_tile_6x4v16_s1_p4x16(%{{.*}}) : (!llvm.ptr, i64, !llvm.ptr, i64, i64, !llvm.ptr, !llvm.ptr, i64, f32, i64) -> ()
// CHECK:        llvm.call @GOMP_loop_guided_next(%[[LO]], %[[HI]]) : (!llvm.ptr, !llvm.ptr) -> i8
// CHECK:        llvm.call @GOMP_loop_end_nowait() : () -> ()
// The register tile, a function of the module that every GEMM of this tile shape calls: zeros
// (or, to accumulate, the tile of C), then per k step a prefetch of the next panel, the panel
// row's 4 aligned vectors and 24 FMAs, then alpha and the store.
// CHECK:      llvm.func internal @tg_tile_6x4v16_s1_p4x16(%a: !llvm.ptr, %lda: i64, %b: !llvm.ptr, %ldb: i64, %steps: i64, %ahead: !llvm.ptr, %c: !llvm.ptr, %ldc: i64, %alpha: f32, %accumulate: i64) {
// CHECK:        %[[ACC:.*]] = llvm.icmp "ne" %accumulate, %{{.*}} : i64
// CHECK:        llvm.cond_br %[[ACC]]
// CHECK:        llvm.load %c {alignment = 4 : i64} : !llvm.ptr -> vector<16xf32>
// CHECK:        llvm.call_intrinsic "llvm.prefetch.p0"
// CHECK:        llvm.load %{{.*}} {alignment = 64 : i64} : !llvm.ptr -> vector<16xf32>
// CHECK-COUNT-24: llvm.intr.fma(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>) -> vector<16xf32>
// CHECK:        llvm.fmul %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK:        llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : vector<16xf32>, !llvm.ptr
// CHECK:        llvm.return
// LLVMIR:     define internal void @"forward__0_packed_matmul__par0"(ptr %".1") noinline
// LLVMIR:       call ccc void @"tg_tile_6x4v16_s1_p4x16"(ptr %{{.*}}, i64 512, ptr %{{.*}}, i64 64, i64 512,
// LLVMIR:     define internal void @"tg_tile_6x4v16_s1_p4x16"(ptr %".1", i64 %".2", ptr %".3", i64 %".4", i64 %".5", ptr %".6", ptr %".7", i64 %".8", float %".9", i64 %".10") noinline
// LLVMIR:       call <16 x float> @"llvm.fma.v16f32"
builtin.module {
  func.func @forward(%x: memref<6x512xf32>, %out0: memref<6x128xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<0xi8>
    %wp = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 128, 512>} : memref<2x512x64xf32>
    buf.packed_matmul ins(%x, %wp : memref<6x512xf32>, memref<2x512x64xf32>) outs(%out0 : memref<6x128xf32>)
    func.return
  }
}

// -----

// bfloat16 buffers hold i16 words in LLVM IR: a cast from float32 rounds to nearest even by
// integer arithmetic ((bits + 0x7FFF + bit 16) >> 16; NaN -> 0x7FC0), no AVX512-BF16 needed and
// no library call; a cast to float32 shifts the word into the high half.

// LLVMIR:     define internal i32 @"bf16_round_trip__0_cast"(
// LLVMIR:       %[[BITS:.*]] = bitcast float %{{.*}} to i32
// LLVMIR:       add i32 %[[BITS]], 32767
// LLVMIR:       trunc i32 %{{.*}} to i16
// LLVMIR:       fcmp uno float
// LLVMIR:       select  i1 %{{.*}}, i16 32704, i16
// LLVMIR:       store i16
// LLVMIR:     define internal i32 @"bf16_round_trip__1_cast"(
// LLVMIR:       load i16
// LLVMIR:       zext i16 %{{.*}} to i32
// LLVMIR:       shl i32 %{{.*}}, 16
// LLVMIR:       bitcast i32 %{{.*}} to float

builtin.module {
  func.func @bf16_round_trip(%x: memref<2xf32>, %out0: memref<2xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<64xi8>
    %b = buf.view %arena[0] : memref<64xi8> -> memref<2xbf16>
    buf.cast ins(%x : memref<2xf32>) outs(%b : memref<2xbf16>)
    buf.cast ins(%b : memref<2xbf16>) outs(%out0 : memref<2xf32>)
    func.return
  }
}
