// RUN: tg-opt %s -p convert-tensor-to-triton --split-input-file -t triton | filecheck %s
// RUN: tg-opt %s -p convert-tensor-to-triton --split-input-file | filecheck --check-prefix=PLAN %s
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

// A matrix-vector product (a decode step's GEMM, 1 row): the gemv kernel, a weight tile of
// 128 x 32 per K step (the [N, K] weight read along K), the bias and ReLU on the row.
// CHECK-LABEL: def k0_gemv(a, b, acc, out):
// CHECK:         rn = tl.program_id(0) * 32 + tl.arange(0, 32)
// CHECK:         for k0 in range(0, 300, 128):
// CHECK:           w = tl.load(b + kk[:, None] * 1 + rn[None, :] * 300, mask=ks[:, None] & cols[None, :], other=0.0)
// CHECK-NEXT:      acc0 += tl.sum(tl.load(a + 0 + kk, mask=ks, other=0.0)[:, None] * w, 0)
// CHECK:         tl.store(out + 0 + rn, (tl.maximum((acc0 + 1.0 * tl.load(acc + 0 + rn * 1, mask=cols, other=0.0)), 0.0, propagate_nan=tl.PropagateNan.ALL)).to(tl.float32), mask=cols)
// CHECK:       #   k0_gemv[(3,)](buf.matmul)
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
// are skipped block by block.
// CHECK-LABEL: def k0_attention(q, k, v, out, dims):
// CHECK-NEXT:    past = tl.load(dims + 0)
// CHECK:         hk = h // 2
// CHECK:         n_valid = past + 1
// CHECK:         for n0 in range(0, 32, 32):
// CHECK-NEXT:      if n0 < n_valid:
// CHECK-NEXT:        if n0 <= pid * 16 + 15 + shift:
// CHECK:             ok = ok & (rn[None, :] <= rm[:, None] + shift)
// CHECK:       #   k0_attention[(1, 4)](buf.attention, past)
func.func @forward(%q: tensor<1x4x1x16xf32>, %k: tensor<1x2x32x16xf32>, %v: tensor<1x2x32x16xf32>) -> tensor<1x4x1x16xf32> {
  %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true, kv_cache = true} : (tensor<1x4x1x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32>) -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}
