// RUN: tg-opt %s --allow-unregistered-dialect --split-input-file --verify-diagnostics -p "set-target{target=x86-64-v4},convert-tensor-to-buffer{threads=1}" | filecheck %s
// RUN: tg-opt %s --allow-unregistered-dialect --split-input-file --verify-diagnostics -p "set-target{target=x86-64-v4},convert-tensor-to-buffer{pack-weights=false threads=1}" | filecheck --check-prefix=NOPACK %s
// RUN: tg-opt %s --allow-unregistered-dialect --split-input-file --verify-diagnostics -p "set-target{target=x86-64-v4},convert-tensor-to-buffer{threads=3}" | filecheck --check-prefix=THREADS %s
// RUN: not tg-opt %S/Inputs/convert-tensor-to-buffer-bad-parameters.mlir -p "set-target{target=x86-64-v4},convert-tensor-to-buffer{threads=1}" 2>&1 | filecheck --check-prefix=BADPARAM %s
// tg -> buf: destination passing, one kernel per tg op, outputs written in place where possible.

// CHECK-LABEL: func.func @output_written_in_place
// CHECK-SAME: (%x: memref<2x4xf32>, %out0: memref<2x8xf32>) attributes {tg.num_outputs = 1 : i64} {
// CHECK-NEXT:   %w = buf.weight "fc.weight" : memref<8x4xf32>
// CHECK-NEXT:   %b = buf.weight "fc.bias" : memref<8xf32>
// CHECK-NEXT:   %y = buf.alloc : memref<2x8xf32>
// CHECK-NEXT:   buf.matmul ins(%x, %w : memref<2x4xf32>, memref<8x4xf32>) outs(%y : memref<2x8xf32>) {transpose_b = true}
// CHECK-NEXT:   buf.bias_activation ins(%y, %b : memref<2x8xf32>, memref<8xf32>) outs(%out0 : memref<2x8xf32>) {activation = "relu"}
// CHECK-NEXT:   func.return
// CHECK-NEXT: }
func.func @output_written_in_place(%x: tensor<2x4xf32>) -> tensor<2x8xf32> {
  %w = tg.weight "fc.weight" : tensor<8x4xf32>
  %b = tg.weight "fc.bias" : tensor<8xf32>
  %y = tg.matmul %x, %w {transpose_b = true} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  %z = tg.bias_activation %y, %b {activation = "relu"} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return %z : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @matmul_flags_and_accumulator_are_kept
// CHECK: buf.matmul ins(%a, %b, %c : memref<3x2xf32>, memref<3x5xf32>, memref<5xf32>) outs(%out0 : memref<2x5xf32>) {transpose_a = true, alpha = 5.000000e-01 : f32, beta = 2.000000e+00 : f32}
func.func @matmul_flags_and_accumulator_are_kept(%a: tensor<3x2xf32>, %b: tensor<3x5xf32>, %c: tensor<5xf32>) -> tensor<2x5xf32> {
  %y = tg.matmul %a, %b, %c {transpose_a = true, alpha = 0.5 : f32, beta = 2.0 : f32} : (tensor<3x2xf32>, tensor<3x5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  func.return %y : tensor<2x5xf32>
}

// CHECK-LABEL: func.func @every_primitive_gets_one_kernel
// CHECK-NEXT:   %c = buf.constant dense<2.000000e+00> : tensor<f32> : memref<f32>
// CHECK-NEXT:   %s = buf.alloc : memref<2x3xf32>
// CHECK-NEXT:   buf.add ins(%x, %y : memref<2x3xf32>, memref<3xf32>) outs(%s : memref<2x3xf32>)
// CHECK-NEXT:   %d = buf.alloc : memref<2x3xf32>
// CHECK-NEXT:   buf.sub ins(%s, %x : memref<2x3xf32>, memref<2x3xf32>) outs(%d : memref<2x3xf32>)
// CHECK-NEXT:   %m = buf.alloc : memref<2x3xf32>
// CHECK-NEXT:   buf.mul ins(%d, %c : memref<2x3xf32>, memref<f32>) outs(%m : memref<2x3xf32>)
// CHECK-NEXT:   %q = buf.alloc : memref<2x3xf32>
// CHECK-NEXT:   buf.div ins(%m, %c : memref<2x3xf32>, memref<f32>) outs(%q : memref<2x3xf32>)
// CHECK-NEXT:   %r = buf.alloc : memref<2x3xf32>
// CHECK-NEXT:   buf.relu ins(%q : memref<2x3xf32>) outs(%r : memref<2x3xf32>)
// CHECK-NEXT:   buf.transpose ins(%r : memref<2x3xf32>) outs(%out0 : memref<3x2xf32>) {perm = array<i64: 1, 0>}
// CHECK-NEXT:   func.return
func.func @every_primitive_gets_one_kernel(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<3x2xf32> {
  %c = tg.constant dense<2.0> : tensor<f32>
  %s = tg.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %d = tg.sub %s, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %m = tg.mul %d, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %q = tg.div %m, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %r = tg.relu %q : tensor<2x3xf32>
  %t = tg.transpose %r {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %t : tensor<3x2xf32>
}

// CHECK-LABEL: func.func @reshape_aliases_without_copy
// CHECK-NEXT:   %r = buf.alloc : memref<2x8xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<2x8xf32>) outs(%r : memref<2x8xf32>)
// CHECK-NEXT:   %f = buf.reshape %r : memref<2x8xf32> -> memref<16xf32>
// CHECK-NEXT:   buf.relu ins(%f : memref<16xf32>) outs(%out0 : memref<16xf32>)
// CHECK-NEXT:   func.return
func.func @reshape_aliases_without_copy(%x: tensor<2x8xf32>) -> tensor<16xf32> {
  %r = tg.relu %x : tensor<2x8xf32>
  %f = tg.reshape %r : (tensor<2x8xf32>) -> tensor<16xf32>
  %o = tg.relu %f : tensor<16xf32>
  func.return %o : tensor<16xf32>
}

// The kernel writes the output through a reshape of it: no copy, no dead alias left behind.
// CHECK-LABEL: func.func @reshaped_output_written_through_alias
// CHECK-NEXT:   %r = buf.reshape %out0 : memref<16xf32> -> memref<2x8xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<2x8xf32>) outs(%r : memref<2x8xf32>)
// CHECK-NEXT:   func.return
func.func @reshaped_output_written_through_alias(%x: tensor<2x8xf32>) -> tensor<16xf32> {
  %r = tg.relu %x : tensor<2x8xf32>
  %f = tg.reshape %r : (tensor<2x8xf32>) -> tensor<16xf32>
  func.return %f : tensor<16xf32>
}

// CHECK-LABEL: func.func @output_is_input_needs_copy
// CHECK-SAME: (%x: memref<4xf32>, %out0: memref<4xf32>)
// CHECK-NEXT:   buf.copy ins(%x : memref<4xf32>) outs(%out0 : memref<4xf32>)
// CHECK-NEXT:   func.return
func.func @output_is_input_needs_copy(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}

// CHECK-LABEL: func.func @output_is_reshaped_input_needs_copy
// CHECK-NEXT:   %r = buf.reshape %x : memref<2x2xf32> -> memref<4xf32>
// CHECK-NEXT:   buf.copy ins(%r : memref<4xf32>) outs(%out0 : memref<4xf32>)
func.func @output_is_reshaped_input_needs_copy(%x: tensor<2x2xf32>) -> tensor<4xf32> {
  %r = tg.reshape %x : (tensor<2x2xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// CHECK-LABEL: func.func @output_is_weight_or_constant_needs_copy
// CHECK-SAME: (%out0: memref<4xf32>, %out1: memref<2xf32>) attributes {tg.num_outputs = 2 : i64}
// CHECK-NEXT:   %w = buf.weight "w" : memref<4xf32>
// CHECK-NEXT:   %c = buf.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32> : memref<2xf32>
// CHECK-NEXT:   buf.copy ins(%w : memref<4xf32>) outs(%out0 : memref<4xf32>)
// CHECK-NEXT:   buf.copy ins(%c : memref<2xf32>) outs(%out1 : memref<2xf32>)
func.func @output_is_weight_or_constant_needs_copy() -> (tensor<4xf32>, tensor<2xf32>) {
  %w = tg.weight "w" : tensor<4xf32>
  %c = tg.constant dense<[1.0, 2.0]> : tensor<2xf32>
  func.return %w, %c : tensor<4xf32>, tensor<2xf32>
}

// The first output claims the buffer; the second (the same value) is a copy of it.
// CHECK-LABEL: func.func @value_returned_twice_copies_the_second
// CHECK-NEXT:   buf.relu ins(%x : memref<4xf32>) outs(%out0 : memref<4xf32>)
// CHECK-NEXT:   buf.copy ins(%out0 : memref<4xf32>) outs(%out1 : memref<4xf32>)
// CHECK-NEXT:   func.return
func.func @value_returned_twice_copies_the_second(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %r = tg.relu %x : tensor<4xf32>
  func.return %r, %r : tensor<4xf32>, tensor<4xf32>
}

// An output that is also read later is still written in place.
// CHECK-LABEL: func.func @intermediate_output_written_in_place
// CHECK-NEXT:   buf.relu ins(%x : memref<4xf32>) outs(%out0 : memref<4xf32>)
// CHECK-NEXT:   buf.add ins(%out0, %x : memref<4xf32>, memref<4xf32>) outs(%out1 : memref<4xf32>)
// CHECK-NEXT:   func.return
func.func @intermediate_output_written_in_place(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %r = tg.relu %x : tensor<4xf32>
  %s = tg.add %r, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %r, %s : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @no_outputs
// CHECK-SAME: (%x: memref<4xf32>) attributes {tg.num_outputs = 0 : i64} {
// CHECK-NEXT:   func.return
func.func @no_outputs(%x: tensor<4xf32>) {
  func.return
}

// CHECK-LABEL: func.func @result_attributes_move_to_output_arguments
// CHECK-SAME: (%x: memref<2xf32> {tg.name = "x"}, %out0: memref<2xf32> {tg.name = "y"})
func.func @result_attributes_move_to_output_arguments(%x: tensor<2xf32> {tg.name = "x"}) -> (tensor<2xf32> {tg.name = "y"}) {
  %r = tg.relu %x : tensor<2xf32>
  func.return %r : tensor<2xf32>
}

// ====== zero-copy slices

// The slice's elements are one run in memory (every dim before `dim` is 1): a view at element
// offset start * (elements per index of dim) = 2 * 4, no kernel.
// CHECK-LABEL: func.func @slice$contiguous_is_a_subview
// CHECK-NEXT:   %r = buf.alloc : memref<1x8x4xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<1x8x4xf32>) outs(%r : memref<1x8x4xf32>)
// CHECK-NEXT:   %s = buf.subview %r[8] : memref<1x8x4xf32> -> memref<1x3x4xf32>
// CHECK-NEXT:   buf.unary ins(%s : memref<1x3x4xf32>) outs(%out0 : memref<1x3x4xf32>) {fn = "exp"}
// CHECK-NEXT:   func.return
func.func @slice$contiguous_is_a_subview(%x: tensor<1x8x4xf32>) -> tensor<1x3x4xf32> {
  %r = tg.relu %x : tensor<1x8x4xf32>
  %s = tg.slice %r {dim = 1 : i64, start = 2 : i64} : (tensor<1x8x4xf32>) -> tensor<1x3x4xf32>
  %o = tg.exp %s : tensor<1x3x4xf32>
  func.return %o : tensor<1x3x4xf32>
}

// One index along dim is one run whatever the step; a view of an input is fine too.
// CHECK-LABEL: func.func @slice$single_index_is_a_subview
// CHECK-NEXT:   %s = buf.subview %x[20] : memref<1x8x4xf32> -> memref<1x1x4xf32>
// CHECK-NEXT:   buf.unary ins(%s : memref<1x1x4xf32>) outs(%out0 : memref<1x1x4xf32>) {fn = "exp"}
func.func @slice$single_index_is_a_subview(%x: tensor<1x8x4xf32>) -> tensor<1x1x4xf32> {
  %s = tg.slice %x {dim = 1 : i64, start = 5 : i64, step = 3 : i64} : (tensor<1x8x4xf32>) -> tensor<1x1x4xf32>
  %o = tg.exp %s : tensor<1x1x4xf32>
  func.return %o : tensor<1x1x4xf32>
}

// CHECK-LABEL: func.func @slice$strided_is_a_copy
// CHECK-NEXT:   %s = buf.alloc : memref<3x4xf32>
// CHECK-NEXT:   buf.slice ins(%x : memref<8x4xf32>) outs(%s : memref<3x4xf32>) {dim = 0 : i64, start = 1 : i64, step = 2 : i64}
// CHECK-NEXT:   buf.unary ins(%s : memref<3x4xf32>) outs(%out0 : memref<3x4xf32>) {fn = "exp"}
func.func @slice$strided_is_a_copy(%x: tensor<8x4xf32>) -> tensor<3x4xf32> {
  %s = tg.slice %x {dim = 0 : i64, start = 1 : i64, step = 2 : i64} : (tensor<8x4xf32>) -> tensor<3x4xf32>
  %o = tg.exp %s : tensor<3x4xf32>
  func.return %o : tensor<3x4xf32>
}

// Two rows of 8, four columns from each: two runs, so a copy.
// CHECK-LABEL: func.func @slice$inner_dim_is_a_copy
// CHECK-NEXT:   %s = buf.alloc : memref<2x4xf32>
// CHECK-NEXT:   buf.slice ins(%x : memref<2x8xf32>) outs(%s : memref<2x4xf32>) {dim = 1 : i64, start = 4 : i64}
func.func @slice$inner_dim_is_a_copy(%x: tensor<2x8xf32>) -> tensor<2x4xf32> {
  %s = tg.slice %x {dim = 1 : i64, start = 4 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %o = tg.exp %s : tensor<2x4xf32>
  func.return %o : tensor<2x4xf32>
}

// A returned view of part of a buffer cannot be the output: the buffer stays, the part is copied.
// CHECK-LABEL: func.func @slice$returned_part_is_copied_out
// CHECK-NEXT:   %r = buf.alloc : memref<4x4xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<4x4xf32>) outs(%r : memref<4x4xf32>)
// CHECK-NEXT:   %s = buf.subview %r[4] : memref<4x4xf32> -> memref<1x4xf32>
// CHECK-NEXT:   buf.copy ins(%s : memref<1x4xf32>) outs(%out0 : memref<1x4xf32>)
// CHECK-NEXT:   func.return
func.func @slice$returned_part_is_copied_out(%x: tensor<4x4xf32>) -> tensor<1x4xf32> {
  %r = tg.relu %x : tensor<4x4xf32>
  %s = tg.slice %r {dim = 0 : i64, start = 1 : i64} : (tensor<4x4xf32>) -> tensor<1x4xf32>
  func.return %s : tensor<1x4xf32>
}

// A full-range slice (then a reshape) covers its whole root: the root is the output, written in place.
// CHECK-LABEL: func.func @slice$full_range_output_written_in_place
// CHECK-NEXT:   %r = buf.reshape %out0 : memref<16xf32> -> memref<2x8xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<2x8xf32>) outs(%r : memref<2x8xf32>)
// CHECK-NEXT:   func.return
func.func @slice$full_range_output_written_in_place(%x: tensor<2x8xf32>) -> tensor<16xf32> {
  %r = tg.relu %x : tensor<2x8xf32>
  %s = tg.slice %r {dim = 1 : i64, start = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %f = tg.reshape %s : (tensor<2x8xf32>) -> tensor<16xf32>
  func.return %f : tensor<16xf32>
}

// Two halves of one buffer returned: neither is the whole root, both are copied.
// CHECK-LABEL: func.func @slice$split_outputs_are_copied
// CHECK-NEXT:   %r = buf.alloc : memref<4x2xf32>
// CHECK-NEXT:   buf.relu ins(%x : memref<4x2xf32>) outs(%r : memref<4x2xf32>)
// CHECK-NEXT:   %a = buf.subview %r[0] : memref<4x2xf32> -> memref<2x2xf32>
// CHECK-NEXT:   %b = buf.subview %r[4] : memref<4x2xf32> -> memref<2x2xf32>
// CHECK-NEXT:   buf.copy ins(%a : memref<2x2xf32>) outs(%out0 : memref<2x2xf32>)
// CHECK-NEXT:   buf.copy ins(%b : memref<2x2xf32>) outs(%out1 : memref<2x2xf32>)
func.func @slice$split_outputs_are_copied(%x: tensor<4x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
  %r = tg.relu %x : tensor<4x2xf32>
  %a = tg.slice %r {dim = 0 : i64, start = 0 : i64} : (tensor<4x2xf32>) -> tensor<2x2xf32>
  %b = tg.slice %r {dim = 0 : i64, start = 2 : i64} : (tensor<4x2xf32>) -> tensor<2x2xf32>
  func.return %a, %b : tensor<2x2xf32>, tensor<2x2xf32>
}

// Moving only size-1 dims moves no bytes: a reshape, not a transpose kernel.
// CHECK-LABEL: func.func @transpose$unit_dims_only_is_a_reshape
// CHECK:        %t = buf.reshape %r : memref<1x5x1x8xf32> -> memref<1x1x5x8xf32>
// CHECK-NEXT:   buf.unary ins(%t : memref<1x1x5x8xf32>) outs(%out0 : memref<1x1x5x8xf32>) {fn = "exp"}
func.func @transpose$unit_dims_only_is_a_reshape(%x: tensor<1x5x1x8xf32>) -> tensor<1x1x5x8xf32> {
  %r = tg.relu %x : tensor<1x5x1x8xf32>
  %t = tg.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x1x8xf32>) -> tensor<1x1x5x8xf32>
  %o = tg.exp %t : tensor<1x1x5x8xf32>
  func.return %o : tensor<1x1x5x8xf32>
}

// ====== kernels with scratch or a body

// The scratch is [scores Br*Bc' | m Br' | l Br' | acc Br*Dv' | kt D*Bc' | vp Bc*Dv'] f32 (layout in
// scratch.py; ' = rounded up to 16) with Br = min(64, 100), Bc = min(64, 30), D = 16, Dv = 8:
// 64*32 + 64 + 64 + 64*16 + 16*32 + 30*16 = 4192, passed as the second output. With up to 3
// threads (threads=3) the scratch holds 3 sets, each rounded up to 16 floats.
// CHECK-LABEL: func.func @attention$gets_a_scratch_buffer
// CHECK-NEXT:   %scratch = buf.alloc : memref<4192xf32>
// THREADS-LABEL: func.func @attention$gets_a_scratch_buffer
// THREADS-NEXT:   %scratch = buf.alloc : memref<12576xf32>
// CHECK-NEXT:   buf.attention ins(%q, %k, %v, %m : memref<1x2x100x16xf32>, memref<1x2x30x16xf32>, memref<1x2x30x8xf32>, memref<100x30xf32>) outs(%out0, %scratch : memref<1x2x100x8xf32>, memref<4192xf32>) {scale = 2.500000e-01 : f32, causal = true}
// CHECK-NEXT:   func.return
func.func @attention$gets_a_scratch_buffer(%q: tensor<1x2x100x16xf32>, %k: tensor<1x2x30x16xf32>, %v: tensor<1x2x30x8xf32>, %m: tensor<100x30xf32>) -> tensor<1x2x100x8xf32> {
  %a = tg.attention %q, %k, %v mask %m {scale = 0.25 : f32, causal = true} : (tensor<1x2x100x16xf32>, tensor<1x2x30x16xf32>, tensor<1x2x30x8xf32>, tensor<100x30xf32>) -> tensor<1x2x100x8xf32>
  func.return %a : tensor<1x2x100x8xf32>
}

// CHECK-LABEL: func.func @attention$intermediate_result
// CHECK-NEXT:   %a = buf.alloc : memref<1x1x8x4xf32>
// CHECK-NEXT:   %scratch = buf.alloc : memref<480xf32>
// CHECK-NEXT:   buf.attention ins(%q, %q, %q : memref<1x1x8x4xf32>, memref<1x1x8x4xf32>, memref<1x1x8x4xf32>) outs(%a, %scratch : memref<1x1x8x4xf32>, memref<480xf32>) {scale = 5.000000e-01 : f32}
// CHECK-NEXT:   buf.unary ins(%a : memref<1x1x8x4xf32>) outs(%out0 : memref<1x1x8x4xf32>) {fn = "exp"}
func.func @attention$intermediate_result(%q: tensor<1x1x8x4xf32>) -> tensor<1x1x8x4xf32> {
  %a = tg.attention %q, %q, %q {scale = 0.5 : f32} : (tensor<1x1x8x4xf32>, tensor<1x1x8x4xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x8x4xf32>
  %o = tg.exp %a : tensor<1x1x8x4xf32>
  func.return %o : tensor<1x1x8x4xf32>
}

// CHECK-LABEL: func.func @fused_elementwise$body_moves_to_the_kernel
// CHECK-NEXT:   buf.fused_elementwise ins(%x, %b : memref<4x8xf32>, memref<8xf32>) outs(%out0 : memref<4x8xf32>) {
// CHECK-NEXT:   ^bb0(%a: f32, %c: f32):
// CHECK-NEXT:     %s = arith.addf %a, %c : f32
// CHECK-NEXT:     %t = math.tanh %s : f32
// CHECK-NEXT:     buf.yield %t : f32
// CHECK-NEXT:   }
// CHECK-NEXT:   func.return
func.func @fused_elementwise$body_moves_to_the_kernel(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = tg.fused_elementwise %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: f32, %c: f32):
    %s = arith.addf %a, %c : f32
    %t = math.tanh %s : f32
    tg.yield %t : f32
  }
  func.return %y : tensor<4x8xf32>
}

// ====== one case per op family

// CHECK-LABEL: func.func @unary$functions_and_gelu
// CHECK:        buf.unary ins(%x : memref<4xf32>) outs(%a : memref<4xf32>) {fn = "exp"}
// CHECK:        buf.unary ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {fn = "rsqrt"}
// CHECK:        buf.unary ins(%b : memref<4xf32>) outs(%c : memref<4xf32>) {fn = "gelu"}
// CHECK:        buf.unary ins(%c : memref<4xf32>) outs(%d : memref<4xf32>) {fn = "gelu_tanh"}
// CHECK-NEXT:   buf.unary ins(%d : memref<4xf32>) outs(%out0 : memref<4xf32>) {fn = "tanh"}
func.func @unary$functions_and_gelu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = tg.exp %x : tensor<4xf32>
  %b = tg.rsqrt %a : tensor<4xf32>
  %c = tg.gelu %b : tensor<4xf32>
  %d = tg.gelu %c {approximate = "tanh"} : tensor<4xf32>
  %e = tg.tanh %d : tensor<4xf32>
  func.return %e : tensor<4xf32>
}

// CHECK-LABEL: func.func @binary$functions_select_cast
// CHECK:        buf.binary ins(%x, %y : memref<2x4xf32>, memref<4xf32>) outs(%p : memref<2x4xf32>) {fn = "pow"}
// CHECK:        buf.binary ins(%p, %y : memref<2x4xf32>, memref<4xf32>) outs(%mx : memref<2x4xf32>) {fn = "max"}
// CHECK:        buf.binary ins(%mx, %x : memref<2x4xf32>, memref<2x4xf32>) outs(%mn : memref<2x4xf32>) {fn = "min"}
// CHECK:        buf.select ins(%c, %mn, %y : memref<2x4xi1>, memref<2x4xf32>, memref<4xf32>) outs(%s : memref<2x4xf32>)
// CHECK-NEXT:   buf.cast ins(%s : memref<2x4xf32>) outs(%out0 : memref<2x4xf16>)
func.func @binary$functions_select_cast(%x: tensor<2x4xf32>, %y: tensor<4xf32>, %c: tensor<2x4xi1>) -> tensor<2x4xf16> {
  %p = tg.pow %x, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %mx = tg.max %p, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %mn = tg.min %mx, %x : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = tg.select %c, %mn, %y : (tensor<2x4xi1>, tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %h = tg.cast %s : (tensor<2x4xf32>) -> tensor<2x4xf16>
  func.return %h : tensor<2x4xf16>
}

// CHECK-LABEL: func.func @reduce$and_normalisations
// CHECK-NEXT:   buf.reduce ins(%x : memref<2x3x4xf32>) outs(%out0 : memref<2x1x4xf32>) {dims = array<i64: 1>, keepdim = true, kind = "sum"}
// CHECK-NEXT:   buf.reduce ins(%x : memref<2x3x4xf32>) outs(%out1 : memref<2xf32>) {dims = array<i64: 1, 2>, kind = "mean"}
// CHECK-NEXT:   buf.reduce ins(%x : memref<2x3x4xf32>) outs(%out2 : memref<3x4xf32>) {dims = array<i64: 0>, kind = "max"}
// CHECK-NEXT:   buf.softmax ins(%x : memref<2x3x4xf32>) outs(%out3 : memref<2x3x4xf32>) {dim = 2 : i64}
// CHECK-NEXT:   buf.softmax ins(%x : memref<2x3x4xf32>) outs(%out4 : memref<2x3x4xf32>) {dim = 1 : i64, log = true}
// CHECK-NEXT:   buf.layer_norm ins(%x, %w, %b : memref<2x3x4xf32>, memref<4xf32>, memref<4xf32>) outs(%out5 : memref<2x3x4xf32>) {eps = 1.000000e-06 : f32}
// CHECK-NEXT:   func.return
func.func @reduce$and_normalisations(%x: tensor<2x3x4xf32>, %w: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<2x1x4xf32>, tensor<2xf32>, tensor<3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %s = tg.sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
  %m = tg.mean %x {dims = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2xf32>
  %a = tg.amax %x {dims = array<i64: 0>} : (tensor<2x3x4xf32>) -> tensor<3x4xf32>
  %sm = tg.softmax %x {dim = 2 : i64} : tensor<2x3x4xf32>
  %ls = tg.log_softmax %x {dim = 1 : i64} : tensor<2x3x4xf32>
  %ln = tg.layer_norm %x, %w, %b {eps = 1.0e-06 : f32} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  func.return %s, %m, %a, %sm, %ls, %ln : tensor<2x1x4xf32>, tensor<2xf32>, tensor<3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// A broadcast that only adds size-1 dims is a reshape; a returned alias of an input is copied.
// CHECK-LABEL: func.func @data_movement$concat_broadcast_embedding
// CHECK-NEXT:   buf.concat ins(%x, %y : memref<2x4xf32>, memref<3x4xf32>) outs(%out0 : memref<5x4xf32>) {dim = 0 : i64}
// CHECK-NEXT:   buf.broadcast ins(%x : memref<2x4xf32>) outs(%out1 : memref<3x2x4xf32>)
// CHECK-NEXT:   %u = buf.reshape %x : memref<2x4xf32> -> memref<1x2x4xf32>
// CHECK-NEXT:   buf.embedding ins(%t, %i : memref<10x4xf32>, memref<2x3xi64>) outs(%out3 : memref<2x3x4xf32>)
// CHECK-NEXT:   buf.copy ins(%u : memref<1x2x4xf32>) outs(%out2 : memref<1x2x4xf32>)
func.func @data_movement$concat_broadcast_embedding(%x: tensor<2x4xf32>, %y: tensor<3x4xf32>, %t: tensor<10x4xf32>, %i: tensor<2x3xi64>) -> (tensor<5x4xf32>, tensor<3x2x4xf32>, tensor<1x2x4xf32>, tensor<2x3x4xf32>) {
  %c = tg.concat %x, %y {dim = 0 : i64} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<5x4xf32>
  %b = tg.broadcast %x : (tensor<2x4xf32>) -> tensor<3x2x4xf32>
  %u = tg.broadcast %x : (tensor<2x4xf32>) -> tensor<1x2x4xf32>
  %e = tg.embedding %t, %i : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  func.return %c, %b, %u, %e : tensor<5x4xf32>, tensor<3x2x4xf32>, tensor<1x2x4xf32>, tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @matmul$activation_is_kept
// CHECK-NEXT:   buf.matmul ins(%x, %w : memref<2x4xf32>, memref<4x8xf32>) outs(%out0 : memref<2x8xf32>) {activation = "gelu_tanh"}
func.func @matmul$activation_is_kept(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  %y = tg.matmul %x, %w {activation = "gelu_tanh"} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// -----

func.func @leftover_aten_op(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = aten.unsupported %x {target = "aten::gelu", location = "act (torch.nn.GELU)"} : (tensor<2xf32>) -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}
// CHECK: convert-tensor-to-buffer: in @leftover_aten_op: 'aten.unsupported' target aten::gelu location act (torch.nn.GELU) is not a tg op and has no buffer lowering (lower it to tg first: convert-aten-to-tensor)

// -----

func.func @tg_op_without_kernel(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = "tg.not_a_kernel"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}
// CHECK: convert-tensor-to-buffer: in @tg_op_without_kernel: no buf kernel is registered for 'tg.not_a_kernel'

// -----

func.func @dynamic_shape_rejected(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %y = tg.relu %x : tensor<?x4xf32>
  func.return %y : tensor<?x4xf32>
}
// CHECK: convert-tensor-to-buffer: in @dynamic_shape_rejected: argument #0 has dynamic shape tensor<?x4xf32> without size expressions: name each dynamic dim's size

// -----

func.func @scalar_argument_rejected(%n: i64) {
  func.return
}
// CHECK: convert-tensor-to-buffer: in @scalar_argument_rejected: argument #0 has type i64; only tensors can be lowered to buffers


// -----

// KV cache: tg.state becomes buf.state (outside the arena); tg.cache_write writes into the
// state's own buffer (no copy of the cache), and its value is that buffer, which attention reads.
// CHECK-LABEL: func.func @kv_cache_decode(%q: memref<1x4x1x16xf32>, %k: memref<1x2x1x16xf32>, %out0: memref<1x4x1x16xf32>)
// CHECK-NEXT:    %[[KS:.*]] = buf.state "kv.0.key" : memref<1x2x40x16xf32>
// CHECK-NEXT:    buf.cache_write ins(%k : memref<1x2x1x16xf32>) outs(%[[KS]] : memref<1x2x40x16xf32>) {axis = 2 : i64}
// CHECK-NEXT:    %[[S:.*]] = buf.alloc : memref<864xf32>
// CHECK-NEXT:    buf.attention ins(%q, %[[KS]], %[[KS]] : memref<1x4x1x16xf32>, memref<1x2x40x16xf32>, memref<1x2x40x16xf32>) outs(%out0, %[[S]] : memref<1x4x1x16xf32>, memref<864xf32>) {scale = 2.500000e-01 : f32, causal = true, kv_cache = true}
// CHECK-NEXT:    func.return
func.func @kv_cache_decode(%q: tensor<1x4x1x16xf32>, %k: tensor<1x2x1x16xf32>) -> tensor<1x4x1x16xf32> {
  %ks = tg.state "kv.0.key" : tensor<1x2x40x16xf32>
  %kc = tg.cache_write %k into %ks {axis = 2 : i64} : (tensor<1x2x40x16xf32>, tensor<1x2x1x16xf32>) -> tensor<1x2x40x16xf32>
  %o = tg.attention %q, %kc, %kc {scale = 0.25 : f32, causal = true, kv_cache = true} : (tensor<1x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>) -> tensor<1x4x1x16xf32>
  func.return %o : tensor<1x4x1x16xf32>
}

// -----

// A GEMM by a weight reads the weight packed into column panels (made once, at load time):
// buf.packed_weight [ceil(N / 64) x K x 64] replaces the buf.weight, which nothing else reads,
// so it is dropped. The bias stays where it is.
// CHECK-LABEL: func.func @weight_gemm_reads_a_packed_copy
// CHECK-NEXT:    %b = buf.weight "fc.bias" : memref<100xf32>
// CHECK-NEXT:    %w_packed = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<2x32x64xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%x, %w_packed, %b : memref<5x32xf32>, memref<2x32x64xf32>, memref<100xf32>) outs(%out0 : memref<5x100xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
// CHECK-NEXT:    func.return
// NOPACK-LABEL: func.func @weight_gemm_reads_a_packed_copy
// NOPACK-NEXT:    %w = buf.weight "fc.weight" : memref<100x32xf32>
// NOPACK-NEXT:    %b = buf.weight "fc.bias" : memref<100xf32>
// NOPACK-NEXT:    buf.matmul ins(%x, %w, %b : memref<5x32xf32>, memref<100x32xf32>, memref<100xf32>) outs(%out0 : memref<5x100xf32>) {transpose_b = true, beta = 1.000000e+00 : f32, activation = "relu"}
func.func @weight_gemm_reads_a_packed_copy(%x: tensor<5x32xf32>) -> tensor<5x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x32xf32>
  %b = tg.weight "fc.bias" : tensor<100xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "relu"} : (tensor<5x32xf32>, tensor<100x32xf32>, tensor<100xf32>) -> tensor<5x100xf32>
  func.return %y : tensor<5x100xf32>
}

// -----

// The same GEMM pinned to BLAS by its tg.kernel attribute (a tuner's choice, replayed): the
// weight as stored, no packed copy, with or without packing.
// CHECK-LABEL: func.func @pinned_to_blas
// CHECK-NEXT:    %w = buf.weight "fc.weight" : memref<100x32xf32>
// CHECK-NEXT:    %b = buf.weight "fc.bias" : memref<100xf32>
// CHECK-NEXT:    buf.matmul ins(%x, %w, %b : memref<5x32xf32>, memref<100x32xf32>, memref<100xf32>) outs(%out0 : memref<5x100xf32>) {transpose_b = true, beta = 1.000000e+00 : f32, activation = "relu"}
// NOPACK-LABEL: func.func @pinned_to_blas
// NOPACK:         buf.matmul ins(%x, %w, %b
func.func @pinned_to_blas(%x: tensor<5x32xf32>) -> tensor<5x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x32xf32>
  %b = tg.weight "fc.bias" : tensor<100xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "relu", tg.kernel = "matmul.blas"} : (tensor<5x32xf32>, tensor<100x32xf32>, tensor<100xf32>) -> tensor<5x100xf32>
  func.return %y : tensor<5x100xf32>
}

// -----

// A GEMM pinned to the packed variant with a K block, a thread count and a register tile of 4
// rows (a tuner's choice):
// the parameters travel to the buf kernel, where the LLVM lowering reads them.
// CHECK-LABEL: func.func @pinned_with_parameters
// CHECK:         buf.packed_matmul ins(%x, %w_packed, %b : {{.*}}) outs(%out0 : memref<5x100xf32>) {tg.k_block = 16 : i64, tg.threads = 1 : i64, tg.mr = 4 : i64, beta = 1.000000e+00 : f32}
func.func @pinned_with_parameters(%x: tensor<5x32xf32>) -> tensor<5x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x32xf32>
  %b = tg.weight "fc.bias" : tensor<100xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, tg.kernel = "matmul.packed", tg.k_block = 16 : i64, tg.threads = 1 : i64, tg.mr = 4 : i64} : (tensor<5x32xf32>, tensor<100x32xf32>, tensor<100xf32>) -> tensor<5x100xf32>
  func.return %y : tensor<5x100xf32>
}

// -----

// A panel width pinned by a tuner (tg.nr: 16 columns, one vector of x86-64-v4, instead of the
// target's 64) packs the weight into 7 panels of 16; a separate epilogue and the chunks per
// thread travel to the kernel. A panel width that is not whole vectors is refused where the weight
// is packed (Inputs/convert-tensor-to-buffer-bad-parameters.mlir):
// BADPARAM: tg-opt: error: convert-tensor-to-buffer: in @bad_panel_width: 'tg.matmul': tg.nr must be whole vectors of 16 floats up to 64 columns on x86-64-v4, got 24 : i64
// CHECK-LABEL: func.func @pinned_panel_width
// CHECK:         %w_packed = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<7x32x16xf32>
// CHECK:         buf.packed_matmul ins(%x, %w_packed, %b : {{.*}}) outs(%out0 : memref<5x100xf32>) {tg.nr = 16 : i64, tg.separate_epilogue = 1 : i64, tg.chunks = 1 : i64, beta = 1.000000e+00 : f32, activation = "relu"}
func.func @pinned_panel_width(%x: tensor<5x32xf32>) -> tensor<5x100xf32> {
  %w = tg.weight "fc.weight" : tensor<100x32xf32>
  %b = tg.weight "fc.bias" : tensor<100xf32>
  %y = tg.matmul %x, %w, %b {transpose_b = true, beta = 1.0 : f32, activation = "relu", tg.kernel = "matmul.packed", tg.nr = 16 : i64, tg.separate_epilogue = 1 : i64, tg.chunks = 1 : i64} : (tensor<5x32xf32>, tensor<100x32xf32>, tensor<100xf32>) -> tensor<5x100xf32>
  func.return %y : tensor<5x100xf32>
}

// -----

// A table that a GEMM reads packed (a tied LM head) is gathered from those panels too
// (buf.packed_embedding; the same slot, so the table is bound once); a [K, N] weight (Conv1D)
// packs untransposed; two activations multiply through BLAS. Without packing, the gather reads
// the table as it is.
// CHECK-LABEL: func.func @packed_only_where_a_weight_is_the_rhs
// CHECK-NOT:     buf.weight
// CHECK:         %e_packed = buf.packed_weight "wte" {transposed = true, source_shape = array<i64: 64, 16>} : memref<1x16x64xf32>
// CHECK:         buf.packed_embedding ins(%e_packed, %ids : memref<1x16x64xf32>, memref<3xi64>) outs(%{{.*}} : memref<3x16xf32>) {rows = 64 : i64}
// CHECK:         %c_packed = buf.packed_weight "c.weight" {source_shape = array<i64: 16, 64>} : memref<1x16x64xf32>
// CHECK-NEXT:    %{{.*}} = buf.alloc : memref<3x64xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%{{.*}}, %c_packed : memref<3x16xf32>, memref<1x16x64xf32>) outs(
// CHECK:         %e_packed_1 = buf.packed_weight "wte" {transposed = true, source_shape = array<i64: 64, 16>} : memref<1x16x64xf32>
// CHECK:         buf.packed_matmul ins(%{{.*}}, %e_packed_1 : memref<3x16xf32>, memref<1x16x64xf32>) outs(
// CHECK:         buf.matmul ins(%{{.*}}, %{{.*}} : memref<3x64xf32>, memref<3x64xf32>) outs(%out0 : memref<3x3xf32>) {transpose_b = true}
// NOPACK-LABEL: func.func @packed_only_where_a_weight_is_the_rhs
// NOPACK-NEXT:    %e = buf.weight "wte" : memref<64x16xf32>
// NOPACK:         buf.embedding ins(%e, %ids
func.func @packed_only_where_a_weight_is_the_rhs(%ids: tensor<3xi64>) -> tensor<3x3xf32> {
  %e = tg.weight "wte" : tensor<64x16xf32>
  %c = tg.weight "c.weight" : tensor<16x64xf32>
  %h = tg.embedding %e, %ids : (tensor<64x16xf32>, tensor<3xi64>) -> tensor<3x16xf32>
  %y = tg.matmul %h, %c : (tensor<3x16xf32>, tensor<16x64xf32>) -> tensor<3x64xf32>
  %z = tg.matmul %h, %e {transpose_b = true} : (tensor<3x16xf32>, tensor<64x16xf32>) -> tensor<3x64xf32>
  %s = tg.matmul %y, %z {transpose_b = true} : (tensor<3x64xf32>, tensor<3x64xf32>) -> tensor<3x3xf32>
  func.return %s : tensor<3x3xf32>
}

// -----

// A convolution: im2col into a buffer, then the GEMM weight[16, 72] @ cols with the bias and ReLU
// in its epilogue, written straight into the NCHW output (the reshapes are views). The weight is
// the lhs, read as stored; the windows (the rhs) are packed into one column panel of 32 (25
// columns rounded up to whole vectors) by the graph, a 1x1 im2col over them (fuse-im2col-panels
// then makes the two im2cols one). Without packing: cblas_sgemm on the windows.
// CHECK-LABEL: func.func @convolution
// CHECK:         %c = buf.alloc : memref<1x8x3x3x5x5xf32>
// CHECK-NEXT:    buf.im2col ins(%x : memref<1x8x5x5xf32>) outs(%c : memref<1x8x3x3x5x5xf32>) {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
// CHECK:         %[[A:.*]] = buf.reshape %w2 : memref<16x72xf32> -> memref<1x16x72xf32>
// CHECK-NEXT:    %[[R:.*]] = buf.reshape %c2 : memref<1x72x25xf32> -> memref<1x72x1x25xf32>
// CHECK-NEXT:    %c2_panels = buf.alloc : memref<1x72x32xf32>
// CHECK-NEXT:    buf.im2col ins(%[[R]] : memref<1x72x1x25xf32>) outs(%c2_panels : memref<1x72x32xf32>) {kernel = array<i64: 1, 1>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, panels = 32 : i64}
// CHECK-NEXT:    %m = buf.reshape %out0 : memref<1x16x5x5xf32> -> memref<1x16x25xf32>
// CHECK-NEXT:    buf.packed_matmul ins(%[[A]], %c2_panels, %b2 : memref<1x16x72xf32>, memref<1x72x32xf32>, memref<16x1xf32>) outs(%m : memref<1x16x25xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
// NOPACK-LABEL: func.func @convolution
// NOPACK:         buf.im2col
// NOPACK:         buf.matmul ins(%w2, %c2, %b2 : memref<16x72xf32>, memref<1x72x25xf32>, memref<16x1xf32>) outs(%m : memref<1x16x25xf32>) {beta = 1.000000e+00 : f32, activation = "relu"}
func.func @convolution(%x: tensor<1x8x5x5xf32>) -> tensor<1x16x5x5xf32> {
  %w = tg.weight "conv.weight" : tensor<16x8x3x3xf32>
  %b = tg.weight "conv.bias" : tensor<16xf32>
  %c = tg.im2col %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x8x5x5xf32>) -> tensor<1x8x3x3x5x5xf32>
  %w2 = tg.reshape %w : (tensor<16x8x3x3xf32>) -> tensor<16x72xf32>
  %c2 = tg.reshape %c : (tensor<1x8x3x3x5x5xf32>) -> tensor<1x72x25xf32>
  %b2 = tg.reshape %b : (tensor<16xf32>) -> tensor<16x1xf32>
  %m = tg.matmul %w2, %c2, %b2 {beta = 1.0 : f32, activation = "relu"} : (tensor<16x72xf32>, tensor<1x72x25xf32>, tensor<16x1xf32>) -> tensor<1x16x25xf32>
  %y = tg.reshape %m : (tensor<1x16x25xf32>) -> tensor<1x16x5x5xf32>
  func.return %y : tensor<1x16x5x5xf32>
}
