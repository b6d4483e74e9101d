// RUN: tg-opt %s -p convert-tensor-to-triton --split-input-file -t triton | filecheck %s
// RUN: tg-opt %s -p convert-tensor-to-triton --split-input-file | filecheck --check-prefix=PLAN %s
// RUN: not tg-opt %S/Inputs/convert-tensor-to-triton-bad-variant.mlir -p convert-tensor-to-triton 2>&1 | filecheck --check-prefix=BAD %s
// convert-tensor-to-triton: a tg graph -> buffers in one planned arena -> one Triton kernel
// (Python source, `-t triton`) per buf kernel, and the launch plan written on the buf ops.

// A GEMM of 8 rows with its epilogue (bias, GELU) through tl.dot at IEEE float32 (32 rows or
// more: cuBLAS then the epilogue; 4 or fewer: the gemv kernel below), then a softmax over the
// rows: 8 rows of 7 read in one block of 8.
// CHECK:       @triton.jit
// CHECK-LABEL: def k0_matmul(a, b, acc, out):
// CHECK:         c = tl.zeros((16, 16), dtype=tl.float32)
// CHECK:         for k0 in range(0, 5, 16):
// CHECK:           c += tl.dot(x, y, input_precision="ieee")
// CHECK:         c = c + 1.0 * tl.load(acc + rm[:, None] * 0 + rn[None, :] * 1, mask=valid, other=0.0)
// CHECK:         c = 0.5 * (c) * (1.0 + _erf((c) * 0.7071067811865476))
// CHECK:         tl.store(out + o_off + rm[:, None] * 7 + rn[None, :], c.to(tl.float32), mask=valid)
// CHECK-LABEL: def k1_softmax(x, out):
// CHECK:         for c in range(0, 7, 8):
// CHECK:           safe = tl.where(new == float('-inf'), 0.0, new)
// CHECK-NEXT:      s = s * tl.exp(mx - safe) + tl.sum(tl.where(m, tl.exp(v - safe), 0.0), 0)
// CHECK:           y = tl.exp(v - mx) / s
// CHECK:       # launch plan:
// CHECK-NEXT:  #   k0_matmul[(1, 1)](buf.matmul)
// CHECK-NEXT:  #   k1_softmax[(8,)](buf.softmax)
// PLAN:        builtin.module attributes {{.*}}tg.triton_source = "
// PLAN:        buf.matmul {{.*}}{tg.triton = [{kernel = "k0_matmul", grid = array<i64: 1, 1>, args = array<i64: 0, 1, 2, 3>, scalars = []}]
// PLAN:        buf.softmax {{.*}}{tg.triton = [{kernel = "k1_softmax", grid = array<i64: 8>, args = array<i64: 0, 1>, scalars = []}]
func.func @forward(%x: tensor<8x5xf32>) -> tensor<8x7xf32> {
  %w = tg.weight "fc.weight" : tensor<7x5xf32>
  %b = tg.weight "fc.bias" : tensor<7xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "gelu"} : (tensor<8x5xf32>, tensor<7x5xf32>, tensor<7xf32>) -> tensor<8x7xf32>
  %s = tg.softmax %y {dim = 1 : i64} : tensor<8x7xf32>
  func.return %s : tensor<8x7xf32>
}

// -----

// A matrix-vector product (a decode step's GEMM, 1 row): the gemv kernel, 8 columns per program
// (70 columns are far fewer than enough programs for a GPU's SMs), a weight tile of 512 x 8 per
// K step (the [N, K] weight read along K), the row's products kept in a tile of their own and
// summed over K once, after the loop; the bias and ReLU on the row.
// CHECK-LABEL: def k0_gemv(a, b, acc, out):
// CHECK:         rn = tl.program_id(0) * 8 + tl.arange(0, 8)
// CHECK:         acc0 = tl.zeros([512, 8], dtype=tl.float32)
// CHECK:         for k0 in range(0, 300, 512):
// CHECK:           w = tl.load(b + kk[:, None] * 1 + rn[None, :] * 300, mask=ks[:, None] & cols[None, :], other=0)
// CHECK-NEXT:      acc0 += tl.load(a + 0 + kk, mask=ks, other=0.0)[:, None] * w
// CHECK-NEXT:    acc0 = tl.sum(acc0, 0)
// CHECK:         tl.store(out + 0 + rn, (tl.maximum((acc0 + 1.0 * tl.load(acc + 0 + rn * 1, mask=cols, other=0.0)), 0.0, propagate_nan=tl.PropagateNan.ALL)).to(tl.float32), mask=cols)
// CHECK:       #   k0_gemv[(9,)](buf.matmul)
func.func @forward(%x: tensor<1x300xf32>) -> tensor<1x70xf32> {
  %w = tg.weight "fc.weight" : tensor<70x300xf32>
  %b = tg.weight "fc.bias" : tensor<70xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "relu"} : (tensor<1x300xf32>, tensor<70x300xf32>, tensor<70xf32>) -> tensor<1x70xf32>
  func.return %y : tensor<1x70xf32>
}

// -----

// Causal attention with grouped-query heads (4 query heads over 2 kv heads) and a KV cache:
// the keys past the cache's valid positions (past + Sq, `past` read from the graph's dims
// buffer: every launch argument a fixed address, for a CUDA graph) and past the causal diagonal
// are skipped block by block. One query per head: a program per kv head, its rows the group's
// two heads (packed; each row's head hq, query position qi, and the offsets of its rows of q
// and out at their strides: batch, head, position).
// CHECK-LABEL: def k0_attention(q, k, v, out, dims):
// CHECK-NEXT:    past = tl.load(dims + 0)
// CHECK:         hk = unit % 2
// CHECK-NEXT:    rm = tl.arange(0, 16)
// CHECK-NEXT:    hq = hk * 2 + rm // 1
// CHECK-NEXT:    qi = (rm % 1)
// CHECK-NEXT:    row_ok = rm < 2
// CHECK-NEXT:    q_row = b * 64 + hq * 16 + qi * 16
// CHECK-NEXT:    o_row = b * 64 + hq * 16 + qi * 16
// CHECK:         n_valid = past + 1
// CHECK:         for n0 in range(0, 32, 16):
// CHECK-NEXT:      if n0 < n_valid:
// CHECK-NEXT:        if n0 <= 0 + shift:
// CHECK:             ok = ok & (rn[None, :] <= qi[:, None] + shift)
// CHECK:       #   k0_attention[(1, 2)](buf.attention, past)
func.func @forward(%q: tensor<1x4x1x16xf32>, %k: tensor<1x2x32x16xf32>, %v: tensor<1x2x32x16xf32>) -> tensor<1x4x1x16xf32> {
  %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true, kv_cache = true} : (tensor<1x4x1x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>) -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}

// -----

// The MoE kernels: the router's top-2 (ranks counted pairwise, position breaking ties), the
// sort of expert ids, a put adding up repeated offsets (the first occurrence adds them all),
// the experts' grouped GEMM (18 rows: tiles through tl.dot, the rows outside a group skipped).
// Each run-time check writes its flag into dims after the scalars, and the plan lists them.
// CHECK-LABEL: def k0_argtopk(x, out):
// CHECK:         first = ((xj[None, :] > xi[:, None]) | ((xj[None, :] != xj[None, :]) & (xi[:, None] == xi[:, None])))
// CHECK:         earlier = (first | (tie & (jj[None, :] < ii[:, None]))) & (jj[None, :] < 4)
// CHECK:       tl.store(out + obase + rank * 1, ii.to(tl.int64), mask=mi & (rank < 2))
// CHECK-LABEL: def k1_argtopk(x, out):
// CHECK:         first = (xj[None, :] < xi[:, None])
// CHECK-LABEL: def k2_put_add(offsets, values, out, dims):
// CHECK:         if tl.max((mi & ((oi < 0) | (oi >= 18))).to(tl.int32)) > 0:
// CHECK-NEXT:      tl.store(dims + 1, 1)
// CHECK:         tl.store(out + oi, (tl.load(out + oi, mask=ok & (others == 0), other=0) + total).to(tl.int64), mask=ok & (others == 0))
// CHECK-LABEL: def k3_grouped_matmul(a, w, offsets, out, dims):
// CHECK:         bad = (start > end) | (end > 18) | (start < 0)
// CHECK-NEXT:    if bad:
// CHECK-NEXT:      tl.store(dims + 2, 1)
// CHECK:         for r0 in range(0, 18, 32):
// CHECK-NEXT:      if (r0 + 32 > lo) & (r0 < hi):
// CHECK:             c += tl.dot(x, y, input_precision="ieee")
// CHECK:       # run-time checks (their flags in dims from slot 1):
// CHECK-NEXT:  #   1: index out of range: an element offset outside [0, 18) (a tensor index written into [18])
// CHECK-NEXT:  #   2: grouped matmul: the group offsets must be non-decreasing running row counts within [0, 18]
// CHECK-NEXT:  # launch plan:
// CHECK-NEXT:  #   k0_argtopk[(9, 1)](buf.argtopk)
// CHECK-NEXT:  #   k1_argtopk[(1, 1)](buf.argtopk)
// CHECK-NEXT:  #   k2_copy[(1,)](buf.put)
// CHECK-NEXT:  #   k2_put_add[(1,)](buf.put, checks)
// CHECK-NEXT:  #   k3_grouped_matmul[(4, 2)](buf.grouped_matmul, checks)
// PLAN:        builtin.module attributes {{.*}}tg.triton_checks = ["index out of range
// PLAN:        buf.put {{.*}}tg.triton = [{kernel = "k2_copy", {{.*}}}, {kernel = "k2_put_add", grid = array<i64: 1>, args = array<i64: 1, 0, 3>, scalars = [], checks = 1 : i64}]
func.func @moe_ops(%p: tensor<9x4xf32>, %e: tensor<18xi64>, %x: tensor<18x32xf32>, %o: tensor<4xi64>) -> (tensor<9x2xi64>, tensor<18xi64>, tensor<18x128xf32>) {
  %i = tg.argtopk %p {k = 2 : i64, dim = 1 : i64} : (tensor<9x4xf32>) -> tensor<9x2xi64>
  %s = tg.argtopk %e {k = 18 : i64, dim = 0 : i64, largest = false} : (tensor<18xi64>) -> tensor<18xi64>
  %r = tg.put %e, %s, %e {accumulate = true} : (tensor<18xi64>, tensor<18xi64>, tensor<18xi64>) -> tensor<18xi64>
  %w = tg.weight "experts.gate_up_proj" : tensor<4x128x32xf32>
  %y = tg.grouped_matmul %x, %w, %o {transpose_b = true} : (tensor<18x32xf32>, tensor<4x128x32xf32>, tensor<4xi64>) -> tensor<18x128xf32>
  func.return %i, %r, %y : tensor<9x2xi64>, tensor<18xi64>, tensor<18x128xf32>
}

// -----

// GPU variants pinned by a tuner (tg.gpu_kernel, carried to the buf kernel) are replayed: a tl.dot
// GEMM with TF32 inputs, where the heuristic takes cuBLAS at IEEE float32 for 40 rows; cuBLAS
// with TF32 allowed; attention's dots in TF32, 32 queries per program (of 8: one program), 8
// warps; a gemv of 32 columns per program.
// CHECK-LABEL: def k0_matmul(a, b, out):
// CHECK:           c += tl.dot(x, y, input_precision="tf32")
// CHECK-LABEL: def k2_attention(q, k, v, out):
// CHECK:         rm = pid * 32 + tl.arange(0, 32)
// CHECK:         s = tl.dot(qb, kb, input_precision="tf32") * 0.25
// CHECK-LABEL: def k3_gemv(a, b, out):
// CHECK:         rn = tl.program_id(0) * 32 + tl.arange(0, 32)
// CHECK:       # launch plan:
// CHECK-NEXT:  #   k0_matmul[(1, 1)](buf.matmul)
// CHECK-NEXT:  #   torch.matmul.tf32[(1,)](buf.matmul)
// CHECK-NEXT:  #   k2_attention[(1, 2)](buf.attention, num_warps=8)
// CHECK-NEXT:  #   k3_gemv[(1,)](buf.matmul)
// PLAN:        buf.matmul {{.*}}tg.gpu_kernel = "matmul.dot_tf32"
// BAD:         convert-tensor-to-triton: buf.matmul pins GPU kernel 'matmul.gemv' (tg.gpu_kernel), which cannot run it: 40 rows (at most 16)
func.func @pinned(%x: tensor<40x64xf32>, %q: tensor<1x2x8x16xf32>, %r: tensor<1x64xf32>) -> (tensor<40x8xf32>, tensor<40x8xf32>, tensor<1x2x8x16xf32>, tensor<1x8xf32>) {
  %w = tg.weight "fc.weight" : tensor<8x64xf32>
  %y = tg.matmul %x, %w {transpose_b = true, tg.gpu_kernel = "matmul.dot_tf32"} : (tensor<40x64xf32>, tensor<8x64xf32>) -> tensor<40x8xf32>
  %z = tg.matmul %x, %w {transpose_b = true, tg.gpu_kernel = "matmul.library_tf32"} : (tensor<40x64xf32>, tensor<8x64xf32>) -> tensor<40x8xf32>
  %o = tg.attention %q, %q, %q {scale = 0.25 : f32, tg.gpu_kernel = "attention.flash_tf32", tg.gpu_block_m = 32 : i64, tg.gpu_warps = 8 : i64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  %g = tg.matmul %r, %w {transpose_b = true, tg.gpu_kernel = "matmul.gemv", tg.gpu_block_n = 32 : i64} : (tensor<1x64xf32>, tensor<8x64xf32>) -> tensor<1x8xf32>
  func.return %y, %z, %o, %g : tensor<40x8xf32>, tensor<40x8xf32>, tensor<1x2x8x16xf32>, tensor<1x8xf32>
}

// -----

// attention.library pinned: no Triton kernel, one launch of PyTorch's SDPA (`torch.sdpa`, the
// runtime's library call) on the op's buffers; a sequence-major q and output and a head range
// of k and v are the runtime's views of them.
// CHECK:       #   torch.sdpa[(1,)](buf.attention)
// PLAN:        buf.attention {{.*}}tg.gpu_kernel = "attention.library"
func.func @library_attention(%q: tensor<1x8x2x16xf32>, %kv: tensor<1x4x8x16xf32>) -> tensor<1x8x2x16xf32> {
  %o = tg.attention %q, %kv, %kv {scale = 0.25 : f32, causal = true, q_seq_major = true, out_seq_major = true, k_heads = array<i64: 0, 2>, v_heads = array<i64: 2, 2>, tg.gpu_kernel = "attention.library"} : (tensor<1x8x2x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x8x2x16xf32>
  func.return %o : tensor<1x8x2x16xf32>
}

// -----

// Head dim 128 (Qwen3's) at IEEE float32: blocks of at most 32 queries (a q or accumulator tile
// of at most 4096 float32 values) and of 16 keys (`tl.dot` at IEEE float32 spills registers
// from 32 keys on: paths.ATTENTION_IEEE_KEY_BLOCK). 64 heads of 64 queries make 128 programs of
// 32 queries; 2 heads make too few programs for the GPU: their queries in blocks of 16.
// CHECK-LABEL: def k0_attention(q, k, v, out):
// CHECK:         rm = pid * 32 + tl.arange(0, 32)
// CHECK:         for n0 in range(0, 64, 16):
// CHECK-LABEL: def k1_attention(q, k, v, out):
// CHECK:         rm = pid * 16 + tl.arange(0, 16)
// CHECK:         for n0 in range(0, 64, 16):
// CHECK:       #   k0_attention[(2, 64)](buf.attention)
// CHECK-NEXT:  #   k1_attention[(4, 2)](buf.attention)
func.func @head_dim_128(%q: tensor<1x64x64x128xf32>, %p: tensor<1x2x64x128xf32>) -> (tensor<1x64x64x128xf32>, tensor<1x2x64x128xf32>) {
  %o = tg.attention %q, %q, %q {scale = 0.088 : f32, causal = true} : (tensor<1x64x64x128xf32>, tensor<1x64x64x128xf32>, tensor<1x64x64x128xf32>) -> tensor<1x64x64x128xf32>
  %r = tg.attention %p, %p, %p {scale = 0.088 : f32, causal = true} : (tensor<1x2x64x128xf32>, tensor<1x2x64x128xf32>, tensor<1x2x64x128xf32>) -> tensor<1x2x64x128xf32>
  func.return %o, %r : tensor<1x64x64x128xf32>, tensor<1x2x64x128xf32>
}

// -----

// A GEMM of 40 rows through cuBLAS: its bias, a residual (the whole output) or alpha with no
// activation are cuBLAS's own (one addmm, no sweep after it); with an activation the epilogue
// is a Triton sweep over the output.
// CHECK-LABEL: def k2_matmul_epilogue(in0, in1, out):
// CHECK:         v1 = tl.load(in1 + (i1), mask=m, other=0)
// CHECK-NEXT:    tl.store(out + (offs), ((v0 + 1.0 * v1) * _sigmoid((v0 + 1.0 * v1))).to(tl.float32), mask=m)
// CHECK:       # launch plan:
// CHECK-NEXT:  #   torch.addmm[(1,)](buf.matmul)
// CHECK-NEXT:  #   torch.addmm[(1,)](buf.matmul)
// CHECK-NEXT:  #   torch.matmul[(1,)](buf.matmul)
// CHECK-NEXT:  #   k2_matmul_epilogue[(1,)](buf.matmul)
func.func @library_epilogues(%x: tensor<40x64xf32>, %r: tensor<40x8xf32>) -> (tensor<40x8xf32>, tensor<40x8xf32>, tensor<40x8xf32>) {
  %w = tg.weight "fc.weight" : tensor<8x64xf32>
  %b = tg.weight "fc.bias" : tensor<8xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32} : (tensor<40x64xf32>, tensor<8x64xf32>, tensor<8xf32>) -> tensor<40x8xf32>
  %z = tg.matmul %x, %w, %r {transpose_b = true, alpha = 0.5 : f32, beta = 1.0 : f32} : (tensor<40x64xf32>, tensor<8x64xf32>, tensor<40x8xf32>) -> tensor<40x8xf32>
  %s = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "silu"} : (tensor<40x64xf32>, tensor<8x64xf32>, tensor<8xf32>) -> tensor<40x8xf32>
  func.return %y, %z, %s : tensor<40x8xf32>, tensor<40x8xf32>, tensor<40x8xf32>
}

// -----

// One query per head over 1024 keys (a decode step at a long context): two heads make two
// programs, so each head's keys are split in 4 ranges of 256 (flash-decoding), each a partial
// softmax into the op's scratch buffer, then one kernel combining them.
// CHECK-LABEL: def k0_attention_part(q, k, v, out, part):
// CHECK:         sid = tl.program_id(2)
// CHECK:         for i0 in range(0, 256, 16):
// CHECK-NEXT:      n0 = sid * 256 + i0
// CHECK-NEXT:      if n0 < 1024:
// CHECK:         tl.store(part + 2048 + (sid * 2 + unit) * 1 + rm, m_i, mask=row_ok)
// CHECK-LABEL: def k0_attention_combine(out, part):
// CHECK:         for sid in range(0, 4):
// CHECK:       #   k0_attention_part[(1, 2, 4)](buf.attention, scratch=2064)
// CHECK-NEXT:  #   k0_attention_combine[(1, 2)](buf.attention, scratch=2064)
func.func @split_keys(%q: tensor<1x2x1x16xf32>, %k: tensor<1x2x1024x16xf32>, %v: tensor<1x2x1024x256xf32>) -> tensor<1x2x1x256xf32> {
  %o = tg.attention %q, %k, %v {scale = 0.25 : f32} : (tensor<1x2x1x16xf32>, tensor<1x2x1024x16xf32>, tensor<1x2x1024x256xf32>) -> tensor<1x2x1x256xf32>
  func.return %o : tensor<1x2x1x256xf32>
}

// -----

// Key ranges of a long prefill (16 ranges pinned): the scratch holds 16 x its output, past
// int32's offsets: the program ids of both kernels are int64.
// CHECK-LABEL: def k0_attention_part(q, k, v, out, part):
// CHECK:         unit = tl.program_id(1).to(tl.int64)
// CHECK:         sid = tl.program_id(2).to(tl.int64)
// CHECK-LABEL: def k0_attention_combine(out, part):
// CHECK:         unit = tl.program_id(1).to(tl.int64)
func.func @long_prefill_ranges(%q: tensor<1x32x32768x128xf32>) -> tensor<1x32x32768x128xf32> {
  %o = tg.attention %q, %q, %q {scale = 0.088 : f32, causal = true, tg.gpu_splits = 16 : i64} : (tensor<1x32x32768x128xf32>, tensor<1x32x32768x128xf32>, tensor<1x32x32768x128xf32>) -> tensor<1x32x32768x128xf32>
  func.return %o : tensor<1x32x32768x128xf32>
}

// -----

// Batch x heads past CUDA's 65535 programs along grid axis 1 (an encoder's large batch): they go
// on axis 0, the query blocks on axis 1.
// CHECK-LABEL: def k0_attention(q, k, v, out):
// CHECK-NEXT:    pid = tl.program_id(1)
// CHECK-NEXT:    unit = tl.program_id(0)
// CHECK:       #   k0_attention[(65536, 1)](buf.attention)
func.func @many_heads(%q: tensor<4096x16x1x16xf32>) -> tensor<4096x16x1x16xf32> {
  %o = tg.attention %q, %q, %q {scale = 0.25 : f32} : (tensor<4096x16x1x16xf32>, tensor<4096x16x1x16xf32>, tensor<4096x16x1x16xf32>) -> tensor<4096x16x1x16xf32>
  func.return %o : tensor<4096x16x1x16xf32>
}

// -----

// A long prefill's additive mask past int32's offsets (the other operands within them): the
// program ids and the query positions the mask's rows are found by are int64.
// CHECK-LABEL: def k0_attention(q, k, v, mask, out):
// CHECK:         unit = tl.program_id(1).to(tl.int64)
// CHECK:         qi = rm.to(tl.int64)
// CHECK:         mask_row = q0 * 8589934592 + hq * 268435456 + qi * 16384
func.func @long_prefill_mask(%q: tensor<1x32x16384x64xf32>, %m: tensor<1x32x16384x16384xf32>) -> tensor<1x32x16384x64xf32> {
  %o = tg.attention %q, %q, %q mask %m {scale = 0.125 : f32} : (tensor<1x32x16384x64xf32>, tensor<1x32x16384x64xf32>, tensor<1x32x16384x64xf32>, tensor<1x32x16384x16384xf32>) -> tensor<1x32x16384x64xf32>
  func.return %o : tensor<1x32x16384x64xf32>
}

// -----

// Attention over sequence-major q, k, v and output ([B, S, H, D]: absorb-attention-layouts):
// each buffer read and written at its strides, a head D floats from the next and a position
// H * D (q and out: 4 x 16 = 64; k and v: 2 x 16 = 32), no transpose launched.
// CHECK-LABEL: def k0_attention(q, k, v, out):
// CHECK:         q_row = b * 512 + hq * 16 + qi * 64
// CHECK-NEXT:    o_row = b * 512 + hq * 16 + qi * 64
// CHECK-NEXT:    k_off = b * 256 + hk * 16
// CHECK:         kb = tl.load(k + k_off + rn[None, :] * 32 + rd[:, None]
// CHECK:         vb = tl.load(v + v_off + rn[:, None] * 32 + rdv[None, :]
// CHECK-NOT:     def k1_
func.func @forward(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x8x2x16xf32>) -> tensor<1x8x4x16xf32> {
  %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true, q_seq_major = true, k_seq_major = true, v_seq_major = true, out_seq_major = true} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %o : tensor<1x8x4x16xf32>
}

// -----

// A rope with a norm prologue (fuse-rms-norm-rope): a program per row of the last dim, its sum
// of squares first, then the rotation of the normalised halves; the tables [S, 1, D] at their
// broadcast strides (the row's position i1 only).
// CHECK-LABEL: def k0_rms_norm_rope(x, cos, sin, w, out):
// CHECK:         cos_row = i1 * 16
// CHECK:         total += tl.sum(v * v, 0)
// CHECK-NEXT:    inv = 1.0 / tl.sqrt(total / 16 + {{.*}})
// CHECK:         a = tl.load(x + base + j, mask=m, other=0.0) * inv * tl.load(w + j, mask=m, other=0.0)
// CHECK:       #   k0_rms_norm_rope[(32,)](buf.rope
func.func @forward(%x: tensor<1x8x4x16xf32>, %c: tensor<8x1x16xf32>, %s: tensor<8x1x16xf32>, %w: tensor<16xf32>) -> tensor<1x8x4x16xf32> {
  %r = tg.rope %x, %c, %s norm %w {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<8x1x16xf32>, tensor<8x1x16xf32>, tensor<16xf32>) -> tensor<1x8x4x16xf32>
  func.return %r : tensor<1x8x4x16xf32>
}

// -----

// Sequence-major keys past int32's offsets (one batch's keys: 300000 positions x 64 heads x
// 128): a key's row, its position times H * D, is int64 (heads-major, position x D fits).
// CHECK-LABEL: def k0_attention(q, k, v, out):
// CHECK:         unit = tl.program_id(1).to(tl.int64)
// CHECK:         rn = (n0 + tl.arange(0, 16)).to(tl.int64)
// CHECK:         kb = tl.load(k + k_off + rn[None, :] * 8192 + rd[:, None]
func.func @long_seq_major_keys(%q: tensor<1x1x64x128xf32>, %k: tensor<1x300000x64x128xf32>) -> tensor<1x64x1x128xf32> {
  %o = tg.attention %q, %k, %k {scale = 0.088 : f32, q_seq_major = true, k_seq_major = true, v_seq_major = true, tg.gpu_splits = 1 : i64} : (tensor<1x1x64x128xf32>, tensor<1x300000x64x128xf32>, tensor<1x300000x64x128xf32>) -> tensor<1x64x1x128xf32>
  func.return %o : tensor<1x64x1x128xf32>
}

// -----

// q, k and v head ranges of one sequence-major buffer (GPT-2's c_attn output, 12 heads of 16):
// its strides (a position 12 x 16 = 192 floats on), each first head's offset added.
// CHECK-LABEL: def k0_attention(q, k, v, out):
// CHECK:         q_row = b * 1536 + hq * 16 + qi * 192
// CHECK:         k_off = b * 1536 + hk * 16 + 64
// CHECK-NEXT:    v_off = b * 1536 + hk * 16 + 128
// CHECK:         kb = tl.load(k + k_off + rn[None, :] * 192 + rd[:, None]
func.func @forward(%qkv: tensor<1x8x12x16xf32>) -> tensor<1x8x4x16xf32> {
  %o = tg.attention %qkv, %qkv, %qkv {scale = 0.25 : f32, causal = true, q_seq_major = true, k_seq_major = true, v_seq_major = true, out_seq_major = true, q_heads = array<i64: 0, 4>, k_heads = array<i64: 4, 4>, v_heads = array<i64: 8, 4>} : (tensor<1x8x12x16xf32>, tensor<1x8x12x16xf32>, tensor<1x8x12x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %o : tensor<1x8x4x16xf32>
}
