// An add of bfloat16 buffers: the CPU kernels convert and move bf16 values but compute in float32
// (widen-dtypes rewrites a model's bf16 ops so); bf16 arithmetic written at the buf level is
// refused by name.
builtin.module {
  func.func @bf16_at_run_time(%x: memref<2xf32>, %out0: memref<2xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<128xi8>
    %b = buf.view %arena[0] : memref<128xi8> -> memref<2xbf16>
    %c = buf.view %arena[64] : memref<128xi8> -> memref<2xbf16>
    buf.cast ins(%x : memref<2xf32>) outs(%b : memref<2xbf16>)
    buf.add ins(%b, %b : memref<2xbf16>, memref<2xbf16>) outs(%c : memref<2xbf16>)
    buf.cast ins(%c : memref<2xbf16>) outs(%out0 : memref<2xf32>)
    func.return
  }
}
