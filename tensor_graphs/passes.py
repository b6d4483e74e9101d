"""Registry of every named pass (`tg-opt -p <name>`) and the default pipeline.

Registration is lazy (``name -> factory``) so that `tg-opt` starts without importing every pass.
Each pass's ``name`` equals its lit test's file name: ``lit_tests/**/<name>.mlir``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from xdsl.passes import ModulePass, PassPipeline

#: pass name -> "module:Class"
_PASS_PATHS: dict[str, str] = {
    "set-target": "tensor_graphs.transforms.set_target:SetTargetPass",
    "widen-dtypes": "tensor_graphs.transforms.widen_dtypes:WidenDtypesPass",
    "convert-aten-to-tensor": "tensor_graphs.lowering.aten_to_tensor.convert:ConvertAtenToTensorPass",
    "canonicalize": "tensor_graphs.transforms.canonicalize:CanonicalizePass",
    "constant-fold": "tensor_graphs.transforms.constant_fold:ConstantFoldPass",
    "absorb-blas-flags": "tensor_graphs.transforms.absorb_blas_flags:AbsorbBlasFlagsPass",
    "absorb-attention-layouts": "tensor_graphs.transforms.absorb_attention_layouts:AbsorbAttentionLayoutsPass",
    "fuse-rms-norm-rope": "tensor_graphs.transforms.fusion.rms_norm_rope:FuseRmsNormRopePass",
    "fuse-bias-activation": "tensor_graphs.transforms.fusion.bias_activation:FuseBiasActivationPass",
    "fuse-attention": "tensor_graphs.transforms.fusion.attention:FuseAttentionPass",
    "fuse-gelu": "tensor_graphs.transforms.fusion.gelu:FuseGeluPass",
    "fuse-layer-norm": "tensor_graphs.transforms.fusion.layer_norm:FuseLayerNormPass",
    "fuse-rms-norm": "tensor_graphs.transforms.fusion.rms_norm:FuseRmsNormPass",
    "fuse-silu": "tensor_graphs.transforms.fusion.silu:FuseSiluPass",
    "fuse-rope": "tensor_graphs.transforms.fusion.rope:FuseRopePass",
    "introduce-kv-cache": "tensor_graphs.transforms.introduce_kv_cache:IntroduceKVCachePass",
    "fuse-matmul-epilogue": "tensor_graphs.transforms.fusion.matmul_epilogue:FuseMatmulEpiloguePass",
    "winograd-convolution": "tensor_graphs.transforms.winograd_convolution:WinogradConvolutionPass",
    "fuse-elementwise": "tensor_graphs.transforms.fusion.elementwise:FuseElementwisePass",
    "dce": "tensor_graphs.transforms.dce:DeadCodeEliminationPass",
    "convert-tensor-to-buffer": "tensor_graphs.lowering.tensor_to_buffer.convert:ConvertTensorToBufferPass",
    "fuse-im2col-panels": "tensor_graphs.transforms.fuse_im2col_panels:FuseIm2colPanelsPass",
    "fuse-gemm-addend": "tensor_graphs.transforms.fuse_gemm_addend:FuseGemmAddendPass",
    "fuse-gemm-elementwise": "tensor_graphs.transforms.fuse_gemm_elementwise:FuseGemmElementwisePass",
    "fuse-im2col-reduce": "tensor_graphs.transforms.fuse_im2col_reduce:FuseIm2colReducePass",
    "fuse-panels-into-gemm": "tensor_graphs.transforms.fuse_panels_into_gemm:FusePanelsIntoGemmPass",
    "narrow-gemm-output": "tensor_graphs.transforms.narrow_gemm_output:NarrowGemmOutputPass",
    "plan-memory": "tensor_graphs.transforms.plan_memory:PlanMemoryPass",
    "convert-buffer-to-llvm": "tensor_graphs.codegen.llvm.convert_buffer_to_llvm:ConvertBufferToLLVMPass",
    "convert-tensor-to-triton": "tensor_graphs.codegen.triton.convert_tensor_to_triton:ConvertTensorToTritonPass",
}


def _loader(path: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        module, cls = path.split(":")
        return getattr(importlib.import_module(module), cls)

    return load


PASSES: dict[str, Callable[[], type[ModulePass]]] = {name: _loader(p) for name, p in _PASS_PATHS.items()}

#: aten -> tg, optimised at the tg level. constant-fold first, so that the mask-building aten ops
#: (arange, triu, comparisons, ...) and the casts of constants are gone before conversion, which
#: rejects them, and so that constants in float16/bfloat16 fold in torch itself, with its kernels'
#: quirks (a bf16 ``sub`` rounds its scalar to bf16 first, a bf16 ``mul`` does not); then
#: widen-dtypes (the rest of the float16/bfloat16/uint8 ops compute in float32/int16; it
#: converts the constants it widens itself).
TENSOR_PIPELINE: tuple[str, ...] = (
    "constant-fold",
    "widen-dtypes",
    "convert-aten-to-tensor",
    "canonicalize",
    "constant-fold",
    "fuse-attention",
    "fuse-gelu",
    "fuse-layer-norm",
    "fuse-rms-norm",
    "fuse-silu",
    "fuse-rope",
    "fuse-bias-activation",
    "absorb-blas-flags",
    "absorb-attention-layouts",
    "fuse-rms-norm-rope",
    "fuse-matmul-epilogue",
    "winograd-convolution",
    "fuse-elementwise",
    "canonicalize",
    "dce",
)


def tensor_pipeline(pack_weights: bool = True, passes: Sequence[str] = TENSOR_PIPELINE) -> tuple[str, ...]:
    """``passes`` (:data:`TENSOR_PIPELINE`); without ``pack_weights``, no `winograd-convolution`
    (its GEMMs read a weight transformed at load time)."""
    return tuple(passes) if pack_weights else tuple(p for p in passes if p != "winograd-convolution")


#: tg -> buf with every buffer placed in the arena.
BUFFER_PIPELINE: tuple[str, ...] = (
    "convert-tensor-to-buffer",
    "fuse-im2col-panels",
    "fuse-im2col-reduce",
    "fuse-gemm-addend",
    "fuse-gemm-elementwise",
    "fuse-panels-into-gemm",
    "narrow-gemm-output",
    "plan-memory",
)


def buffer_pipeline(pack_weights: bool = True) -> tuple[str, ...]:
    """:data:`BUFFER_PIPELINE`; without ``pack_weights`` no GEMM reads a packed weight copy."""
    if pack_weights:
        return BUFFER_PIPELINE
    return ("convert-tensor-to-buffer{pack-weights=false}", *BUFFER_PIPELINE[1:])
#: buf -> llvm dialect.
LLVM_PIPELINE: tuple[str, ...] = ("convert-buffer-to-llvm",)
#: buf -> llvm dialect with every kernel call timed (``compile_module(..., profile=True)``).
PROFILED_LLVM_PIPELINE: tuple[str, ...] = ("convert-buffer-to-llvm{profile=true}",)
DEFAULT_PIPELINE: tuple[str, ...] = TENSOR_PIPELINE + BUFFER_PIPELINE + LLVM_PIPELINE


def build_pipeline(spec: str | Sequence[str]) -> PassPipeline:
    """A pipeline from ``"a,b{opt=1}"`` or a list of pass names."""
    if not isinstance(spec, str):
        spec = ",".join(spec)
    return PassPipeline.parse_spec(PASSES, spec)
