// RUN: tg-opt %s --allow-unregistered-dialect --split-input-file --verify-diagnostics -p convert-tensor-to-buffer | filecheck %s
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
// CHECK: convert-tensor-to-buffer: in @dynamic_shape_rejected: argument #0 has dynamic shape tensor<?x4xf32>; only static shapes are supported

// -----

func.func @scalar_argument_rejected(%n: i64) {
  func.return
}
// CHECK: convert-tensor-to-buffer: in @scalar_argument_rejected: argument #0 has type i64; only tensors can be lowered to buffers
