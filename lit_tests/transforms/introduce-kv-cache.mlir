// RUN: tg-opt %s --split-input-file --verify-diagnostics -p 'introduce-kv-cache{capacity=64}' | filecheck %s
// RUN: not tg-opt %s --split-input-file -p introduce-kv-cache 2>&1 | filecheck %s --check-prefix=NOCAP

// NOCAP: introduce-kv-cache: needs capacity > 0

// Causal GQA self-attention: two caches of Hkv = 2 heads x 64 positions, written in place.
// CHECK-LABEL: func.func @causal_gqa
// CHECK-SAME: attributes {tg.kv_capacity = 64 : i64}
// CHECK: %[[KC:.*]] = tg.state "kv.0.key" : tensor<1x2x64x16xf32>
// CHECK-NEXT: %[[VC:.*]] = tg.state "kv.0.value" : tensor<1x2x64x16xf32>
// CHECK: %[[KW:.*]] = tg.cache_write %k into %[[KC]] {axis = 2 : i64} : (tensor<1x2x64x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x64x16xf32>
// CHECK-NEXT: %[[VW:.*]] = tg.cache_write %v into %[[VC]] {axis = 2 : i64}
// CHECK-NEXT: %o = tg.attention %q, %[[KW]], %[[VW]] {scale = 2.500000e-01 : f32, causal = true, kv_cache = true} : (tensor<1x4x8x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>) -> tensor<1x4x8x16xf32>
func.func @causal_gqa(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  func.return %o : tensor<1x4x8x16xf32>
}

// -----

// One query (a decode step): causal or not is the same; two layers get caches 0 and 1.
// CHECK-LABEL: func.func @decode_two_layers
// CHECK-DAG: tg.state "kv.0.key" : tensor<1x2x64x8xf32>
// CHECK-DAG: tg.state "kv.1.value" : tensor<1x2x64x8xf32>
// CHECK: %a = tg.attention {{.*}} {scale = 5.000000e-01 : f32, kv_cache = true}
// CHECK: %b = tg.attention {{.*}} {scale = 5.000000e-01 : f32, causal = true, kv_cache = true}
func.func @decode_two_layers(%q: tensor<1x2x1x8xf32>, %k: tensor<1x2x1x8xf32>, %v: tensor<1x2x1x8xf32>) -> tensor<1x2x1x8xf32> {
  %a = tg.attention %q, %k, %v {scale = 0.5 : f32} : (tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>) -> tensor<1x2x1x8xf32>
  %b = tg.attention %a, %k, %v {scale = 0.5 : f32, causal = true} : (tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>) -> tensor<1x2x1x8xf32>
  func.return %b : tensor<1x2x1x8xf32>
}

// -----

// A graph without attention is left alone (no capacity attribute).
// CHECK-LABEL: func.func @no_attention(%x: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT: func.return %x
func.func @no_attention(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}

// -----

// expected-error@+1 {{introduce-kv-cache: in @masked: attention #0 (o): cannot cache its keys: it has an explicit mask}}
builtin.module {
func.func @masked(%q: tensor<1x2x4x8xf32>, %m: tensor<4x4xf32>) -> tensor<1x2x4x8xf32> {
  %o = tg.attention %q, %q, %q mask %m {scale = 0.5 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<4x4xf32>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}
}

// -----

// expected-error@+1 {{introduce-kv-cache: in @bidirectional: attention #0 (o): cannot cache its keys: it is not causal}}
builtin.module {
func.func @bidirectional(%q: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %o = tg.attention %q, %q, %q {scale = 0.5 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}
}

// -----

// expected-error@+1 {{introduce-kv-cache: in @too_long: attention #0 (o): 80 new tokens do not fit a cache of 64 positions}}
builtin.module {
func.func @too_long(%q: tensor<1x1x80x8xf32>) -> tensor<1x1x80x8xf32> {
  %o = tg.attention %q, %q, %q {scale = 0.5 : f32, causal = true} : (tensor<1x1x80x8xf32>, tensor<1x1x80x8xf32>, tensor<1x1x80x8xf32>) -> tensor<1x1x80x8xf32>
  func.return %o : tensor<1x1x80x8xf32>
}
}

// -----

// Keys and values stored sequence-major (absorb-attention-layouts) are transposed into the
// cache's heads-major layout; q and the result keep theirs.
// CHECK-LABEL: func.func @seq_major_keys
// CHECK: %[[KT:.*]] = tg.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
// CHECK-NEXT: %[[KW:.*]] = tg.cache_write %[[KT]] into
// CHECK: %o = tg.attention %q, %[[KW]], %{{.*}} {scale = 2.500000e-01 : f32, causal = true, kv_cache = true, q_seq_major = true, out_seq_major = true} : (tensor<1x8x4x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>) -> tensor<1x8x4x16xf32>
func.func @seq_major_keys(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x8x2x16xf32>) -> tensor<1x8x4x16xf32> {
  %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true, q_seq_major = true, k_seq_major = true, v_seq_major = true, out_seq_major = true} : (tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %o : tensor<1x8x4x16xf32>
}

// -----

// Keys and values read as head ranges of one buffer (q, k, v side by side): the heads of each
// are sliced out, then transposed into the cache's layout.
// CHECK-LABEL: func.func @head_ranges
// CHECK: %[[KS:.*]] = tg.slice %qkv {dim = 2 : i64, start = 4 : i64} : (tensor<1x8x12x16xf32>) -> tensor<1x8x4x16xf32>
// CHECK-NEXT: %[[KT:.*]] = tg.transpose %[[KS]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT: tg.cache_write %[[KT]] into
// CHECK: tg.attention %qkv, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32, causal = true, kv_cache = true, q_seq_major = true, out_seq_major = true, q_heads = array<i64: 0, 4>} : (tensor<1x8x12x16xf32>, tensor<1x4x64x16xf32>, tensor<1x4x64x16xf32>) -> tensor<1x8x4x16xf32>
func.func @head_ranges(%qkv: tensor<1x8x12x16xf32>) -> tensor<1x8x4x16xf32> {
  %o = tg.attention %qkv, %qkv, %qkv {scale = 0.25 : f32, causal = true, q_seq_major = true, k_seq_major = true, v_seq_major = true, out_seq_major = true, q_heads = array<i64: 0, 4>, k_heads = array<i64: 4, 4>, v_heads = array<i64: 8, 4>} : (tensor<1x8x12x16xf32>, tensor<1x8x12x16xf32>, tensor<1x8x12x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %o : tensor<1x8x4x16xf32>
}

// -----

// A prefill of any length (its token count the size symbol seq, at most 48): the caches keep their
// 64 positions, each call writes its seq new rows at past.
// CHECK-LABEL: func.func @symbolic_prefill
// CHECK: %[[KC:.*]] = tg.state "kv.0.key" : tensor<1x2x64x16xf32>
// CHECK: %[[KW:.*]] = tg.cache_write %k into %[[KC]] {axis = 2 : i64} : (tensor<1x2x64x16xf32>, tensor<1x2x?x16xf32, ["seq"]>) -> tensor<1x2x64x16xf32>
// CHECK: %o = tg.attention %q, %[[KW]], %{{.*}} {scale = 2.500000e-01 : f32, causal = true, kv_cache = true} : (tensor<1x4x?x16xf32, ["seq"]>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>) -> tensor<1x4x?x16xf32, ["seq"]>
builtin.module attributes {tg.symbols = {seq = array<i64: 1, 48>}} {
  func.func @symbolic_prefill(%q: tensor<1x4x?x16xf32, ["seq"]>, %k: tensor<1x2x?x16xf32, ["seq"]>, %v: tensor<1x2x?x16xf32, ["seq"]>) -> tensor<1x4x?x16xf32, ["seq"]> {
    %o = tg.attention %q, %k, %v {scale = 0.25 : f32, causal = true} : (tensor<1x4x?x16xf32, ["seq"]>, tensor<1x2x?x16xf32, ["seq"]>, tensor<1x2x?x16xf32, ["seq"]>) -> tensor<1x4x?x16xf32, ["seq"]>
    func.return %o : tensor<1x4x?x16xf32, ["seq"]>
  }
}
