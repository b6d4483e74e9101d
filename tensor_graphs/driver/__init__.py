"""The compile driver: a module at any level (aten, tg, buf, llvm) lowered to one native
function (`cpu.compile_module`) or to Triton kernels (`gpu.compile_for_gpu`), a PyTorch model
exported and imported first (`model.compile_model`). It sits below `tensor_graphs.tuning`
(the tuner measures kernel paths by compiling them here; a tuned compile is
`tuning.compile`) and below the decoder assembly (`runtime_support.decoder_assembly`);
`tensor_graphs.api` is the thin public facade over all three."""
