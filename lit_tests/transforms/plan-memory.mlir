// RUN: tg-opt %s --split-input-file --verify-diagnostics -p plan-memory | filecheck %s
// Every buf.alloc becomes a 64-byte aligned view of one arena; buffers share bytes only when
// their lifetimes (first writer .. last reader, aliases included) do not intersect.
// Kernel scratch (a second output) is a buffer live for its one op.

// CHECK: builtin.module attributes {tg.arena_size = 1024 : i64, tg.intermediate_bytes = 1024 : i64}

// A chain of four 16-float buffers: each dies right after the next one is written, so two
// slots ping-pong instead of four.
// CHECK-LABEL: func.func @buffers_reuse_memory_after_last_use
// CHECK-SAME: attributes {tg.num_outputs = 1 : i64, tg.arena_size = 128 : i64, tg.intermediate_bytes = 256 : i64}
// CHECK-NEXT:   %arena = buf.arena : memref<128xi8>
// CHECK-NEXT:   %a = buf.view %arena[0] : memref<128xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
// CHECK-NEXT:   %b = buf.view %arena[64] : memref<128xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.relu ins(%a : memref<16xf32>) outs(%b : memref<16xf32>)
// CHECK-NEXT:   %c = buf.view %arena[0] : memref<128xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.relu ins(%b : memref<16xf32>) outs(%c : memref<16xf32>)
// CHECK-NEXT:   %d = buf.view %arena[64] : memref<128xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.relu ins(%c : memref<16xf32>) outs(%d : memref<16xf32>)
// CHECK-NEXT:   buf.relu ins(%d : memref<16xf32>) outs(%out0 : memref<16xf32>)
// CHECK-NEXT:   func.return
func.func @buffers_reuse_memory_after_last_use(%x: memref<16xf32>, %out0: memref<16xf32>) attributes {tg.num_outputs = 1 : i64} {
  %a = buf.alloc : memref<16xf32>
  buf.relu ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
  %b = buf.alloc : memref<16xf32>
  buf.relu ins(%a : memref<16xf32>) outs(%b : memref<16xf32>)
  %c = buf.alloc : memref<16xf32>
  buf.relu ins(%b : memref<16xf32>) outs(%c : memref<16xf32>)
  %d = buf.alloc : memref<16xf32>
  buf.relu ins(%c : memref<16xf32>) outs(%d : memref<16xf32>)
  buf.relu ins(%d : memref<16xf32>) outs(%out0 : memref<16xf32>)
  func.return
}

// %a, %b and %c are all read by the last two ops: three live buffers, three disjoint ranges.
// CHECK-LABEL: func.func @overlapping_lifetimes_get_disjoint_offsets
// CHECK-NEXT:   %arena = buf.arena : memref<1024xi8>
// CHECK-NEXT:   %a = buf.view %arena[512] : memref<1024xi8> -> memref<64xf32>
// CHECK:        %b = buf.view %arena[768] : memref<1024xi8> -> memref<64xf32>
// CHECK:        %c = buf.view %arena[0] : memref<1024xi8> -> memref<128xf32>
func.func @overlapping_lifetimes_get_disjoint_offsets(%x: memref<64xf32>, %y: memref<128xf32>, %out0: memref<64xf32>, %out1: memref<128xf32>) attributes {tg.num_outputs = 2 : i64} {
  %a = buf.alloc : memref<64xf32>
  buf.relu ins(%x : memref<64xf32>) outs(%a : memref<64xf32>)
  %b = buf.alloc : memref<64xf32>
  buf.relu ins(%x : memref<64xf32>) outs(%b : memref<64xf32>)
  %c = buf.alloc : memref<128xf32>
  buf.relu ins(%y : memref<128xf32>) outs(%c : memref<128xf32>)
  buf.add ins(%a, %b : memref<64xf32>, memref<64xf32>) outs(%out0 : memref<64xf32>)
  buf.add ins(%c, %y : memref<128xf32>, memref<128xf32>) outs(%out1 : memref<128xf32>)
  func.return
}

// %a is read through its reshape %r after %b and %c are written: the alias keeps %a alive,
// so neither may take its bytes (without the alias %c could reuse offset 0).
// CHECK-LABEL: func.func @reshape_alias_extends_root_lifetime
// CHECK-NEXT:   %arena = buf.arena : memref<192xi8>
// CHECK-NEXT:   %a = buf.view %arena[0] : memref<192xi8> -> memref<4x4xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<4x4xf32>) outs(%a : memref<4x4xf32>)
// CHECK-NEXT:   %r = buf.reshape %a : memref<4x4xf32> -> memref<16xf32>
// CHECK-NEXT:   %b = buf.view %arena[64] : memref<192xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.relu ins(%y : memref<16xf32>) outs(%b : memref<16xf32>)
// CHECK-NEXT:   %c = buf.view %arena[128] : memref<192xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.relu ins(%b : memref<16xf32>) outs(%c : memref<16xf32>)
// CHECK-NEXT:   buf.add ins(%r, %c : memref<16xf32>, memref<16xf32>) outs(%out0 : memref<16xf32>)
func.func @reshape_alias_extends_root_lifetime(%x: memref<4x4xf32>, %y: memref<16xf32>, %out0: memref<16xf32>) attributes {tg.num_outputs = 1 : i64} {
  %a = buf.alloc : memref<4x4xf32>
  buf.relu ins(%x : memref<4x4xf32>) outs(%a : memref<4x4xf32>)
  %r = buf.reshape %a : memref<4x4xf32> -> memref<16xf32>
  %b = buf.alloc : memref<16xf32>
  buf.relu ins(%y : memref<16xf32>) outs(%b : memref<16xf32>)
  %c = buf.alloc : memref<16xf32>
  buf.relu ins(%b : memref<16xf32>) outs(%c : memref<16xf32>)
  buf.add ins(%r, %c : memref<16xf32>, memref<16xf32>) outs(%out0 : memref<16xf32>)
  func.return
}

// A 4-byte buffer still takes a whole 64-byte slot, so the next one starts aligned.
// CHECK-LABEL: func.func @offsets_are_64_byte_aligned
// CHECK-NEXT:   %arena = buf.arena : memref<128xi8>
// CHECK-NEXT:   %a = buf.view %arena[64] : memref<128xi8> -> memref<1xf32>
// CHECK:        %b = buf.view %arena[0] : memref<128xi8> -> memref<3xf32>
func.func @offsets_are_64_byte_aligned(%x: memref<1xf32>, %y: memref<3xf32>, %out0: memref<3xf32>) attributes {tg.num_outputs = 1 : i64} {
  %a = buf.alloc : memref<1xf32>
  buf.relu ins(%x : memref<1xf32>) outs(%a : memref<1xf32>)
  %b = buf.alloc : memref<3xf32>
  buf.add ins(%y, %a : memref<3xf32>, memref<1xf32>) outs(%b : memref<3xf32>)
  buf.relu ins(%b : memref<3xf32>) outs(%out0 : memref<3xf32>)
  func.return
}

// %a is read through reshape -> subview -> reshape after %b and %c are written: the chain of
// aliases keeps all of %a alive (a view of part of a buffer holds the whole buffer), so
// %b and %c go above it.
// CHECK-LABEL: func.func @subview_chain_extends_root_lifetime
// CHECK-NEXT:   %arena = buf.arena : memref<384xi8>
// CHECK-NEXT:   %a = buf.view %arena[0] : memref<384xi8> -> memref<4x16xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<4x16xf32>) outs(%a : memref<4x16xf32>)
// CHECK-NEXT:   %r = buf.reshape %a : memref<4x16xf32> -> memref<64xf32>
// CHECK-NEXT:   %s = buf.subview %r[16] : memref<64xf32> -> memref<16xf32>
// CHECK-NEXT:   %t = buf.reshape %s : memref<16xf32> -> memref<4x4xf32>
// CHECK-NEXT:   %b = buf.view %arena[256] : memref<384xi8> -> memref<4x4xf32>
// CHECK-NEXT:   buf.relu ins(%y : memref<4x4xf32>) outs(%b : memref<4x4xf32>)
// CHECK-NEXT:   %c = buf.view %arena[320] : memref<384xi8> -> memref<4x4xf32>
// CHECK-NEXT:   buf.relu ins(%b : memref<4x4xf32>) outs(%c : memref<4x4xf32>)
// CHECK-NEXT:   buf.add ins(%t, %c : memref<4x4xf32>, memref<4x4xf32>) outs(%out0 : memref<4x4xf32>)
func.func @subview_chain_extends_root_lifetime(%x: memref<4x16xf32>, %y: memref<4x4xf32>, %out0: memref<4x4xf32>) attributes {tg.num_outputs = 1 : i64} {
  %a = buf.alloc : memref<4x16xf32>
  buf.relu ins(%x : memref<4x16xf32>) outs(%a : memref<4x16xf32>)
  %r = buf.reshape %a : memref<4x16xf32> -> memref<64xf32>
  %s = buf.subview %r[16] : memref<64xf32> -> memref<16xf32>
  %t = buf.reshape %s : memref<16xf32> -> memref<4x4xf32>
  %b = buf.alloc : memref<4x4xf32>
  buf.relu ins(%y : memref<4x4xf32>) outs(%b : memref<4x4xf32>)
  %c = buf.alloc : memref<4x4xf32>
  buf.relu ins(%b : memref<4x4xf32>) outs(%c : memref<4x4xf32>)
  buf.add ins(%t, %c : memref<4x4xf32>, memref<4x4xf32>) outs(%out0 : memref<4x4xf32>)
  func.return
}

// Each attention's scratch is touched by that op only: the three share offset 0, and never
// the bytes of the attention's own input or output (all live at that op).
// CHECK-LABEL: func.func @scratch_lives_for_one_op_and_is_reused
// CHECK-SAME: tg.arena_size = 192 : i64, tg.intermediate_bytes = 256 : i64
// CHECK-NEXT:   %arena = buf.arena : memref<192xi8>
// CHECK-NEXT:   %a = buf.view %arena[64] : memref<192xi8> -> memref<1x1x2x4xf32>
// CHECK-NEXT:   %s1 = buf.view %arena[0] : memref<192xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.attention ins(%q, %q, %q : {{.*}}) outs(%a, %s1 : memref<1x1x2x4xf32>, memref<16xf32>)
// CHECK-NEXT:   %b = buf.view %arena[128] : memref<192xi8> -> memref<1x1x2x4xf32>
// CHECK-NEXT:   %s2 = buf.view %arena[0] : memref<192xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.attention ins(%a, %a, %a : {{.*}}) outs(%b, %s2 : memref<1x1x2x4xf32>, memref<16xf32>)
// CHECK-NEXT:   %s3 = buf.view %arena[0] : memref<192xi8> -> memref<16xf32>
// CHECK-NEXT:   buf.attention ins(%b, %b, %b : {{.*}}) outs(%out0, %s3 : memref<1x1x2x4xf32>, memref<16xf32>)
func.func @scratch_lives_for_one_op_and_is_reused(%q: memref<1x1x2x4xf32>, %out0: memref<1x1x2x4xf32>) attributes {tg.num_outputs = 1 : i64} {
  %a = buf.alloc : memref<1x1x2x4xf32>
  %s1 = buf.alloc : memref<16xf32>
  buf.attention ins(%q, %q, %q : memref<1x1x2x4xf32>, memref<1x1x2x4xf32>, memref<1x1x2x4xf32>) outs(%a, %s1 : memref<1x1x2x4xf32>, memref<16xf32>) {scale = 5.000000e-01 : f32}
  %b = buf.alloc : memref<1x1x2x4xf32>
  %s2 = buf.alloc : memref<16xf32>
  buf.attention ins(%a, %a, %a : memref<1x1x2x4xf32>, memref<1x1x2x4xf32>, memref<1x1x2x4xf32>) outs(%b, %s2 : memref<1x1x2x4xf32>, memref<16xf32>) {scale = 5.000000e-01 : f32}
  %s3 = buf.alloc : memref<16xf32>
  buf.attention ins(%b, %b, %b : memref<1x1x2x4xf32>, memref<1x1x2x4xf32>, memref<1x1x2x4xf32>) outs(%out0, %s3 : memref<1x1x2x4xf32>, memref<16xf32>) {scale = 5.000000e-01 : f32}
  func.return
}

// Inputs, outputs, weights and constants live outside the arena: it is empty but still there.
// CHECK-LABEL: func.func @nothing_to_plan_gives_an_empty_arena
// CHECK-SAME: tg.arena_size = 0 : i64, tg.intermediate_bytes = 0 : i64
// CHECK-NEXT:   %arena = buf.arena : memref<0xi8>
// CHECK-NEXT:   %w = buf.weight "w" : memref<4xf32>
// CHECK-NEXT:   buf.add ins(%x, %w : memref<4xf32>, memref<4xf32>) outs(%out0 : memref<4xf32>)
func.func @nothing_to_plan_gives_an_empty_arena(%x: memref<4xf32>, %out0: memref<4xf32>) attributes {tg.num_outputs = 1 : i64} {
  %w = buf.weight "w" : memref<4xf32>
  buf.add ins(%x, %w : memref<4xf32>, memref<4xf32>) outs(%out0 : memref<4xf32>)
  func.return
}

// -----

func.func @tensor_ops_are_rejected(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tg.relu %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: plan-memory: in @tensor_ops_are_rejected: 'tg.relu' is not at the buf level; run convert-tensor-to-buffer first

// -----

func.func @planned_twice_with_new_allocs_is_rejected(%x: memref<4xf32>, %out0: memref<4xf32>) attributes {tg.num_outputs = 1 : i64} {
  %arena = buf.arena : memref<64xi8>
  %a = buf.alloc : memref<4xf32>
  buf.relu ins(%x : memref<4xf32>) outs(%a : memref<4xf32>)
  buf.relu ins(%a : memref<4xf32>) outs(%out0 : memref<4xf32>)
  func.return
}
// CHECK: plan-memory: in @planned_twice_with_new_allocs_is_rejected: the function already has an arena; plan-memory runs once
