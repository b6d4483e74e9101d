// Casts to bfloat16 and back at run time: the CPU path has no bf16 arithmetic; the pass says so.
builtin.module {
  func.func @bf16_at_run_time(%x: memref<2xf32>, %out0: memref<2xf32>) attributes {tg.num_outputs = 1 : i64} {
    %arena = buf.arena : memref<64xi8>
    %b = buf.view %arena[0] : memref<64xi8> -> memref<2xbf16>
    buf.cast ins(%x : memref<2xf32>) outs(%b : memref<2xbf16>)
    buf.cast ins(%b : memref<2xbf16>) outs(%out0 : memref<2xf32>)
    func.return
  }
}
