"""llama.cpp as a decode peer (issue 32, item 5): the benchmark's random-weight model written to
GGUF, quantised by llama.cpp's own quantiser, run through ``llama-cpp-python``.

    from llama_cpp_peer import llama_engine, available
    engines["llama.cpp Q4_0"] = llama_engine("Q4_0")(model, max_cache, context)

* **GGUF**: `write_gguf` writes the transformers model as llama.cpp's converter would
  (``gguf.GGUFWriter``; tensor names from ``gguf``'s own map of the architecture's HF names),
  float32, architecture ``qwen3`` (or ``gpt2``), no tokenizer (``tokenizer.ggml.model =
  "none"``: the engines are fed token ids). The other formats (`FORMATS`: BF16, Q8_0, Q4_0,
  Q4_K_M) come from ``llama_model_quantize`` on that file, as ``llama-quantize`` makes them (its
  choices: Q4_K_M keeps some tensors in Q6_K; a tied embedding is quantised with the rest).
  The files live in a temporary directory per process.
* **Engine** (`LlamaCpp`, the `decode.Engine` interface): ``Llama(path, n_ctx, n_batch = the
  prompt, n_threads = n_threads_batch = the row's threads)``; ``prefill`` evaluates the prompt
  from an empty cache, ``decode`` one token; both return the last position's logits.

``llama-cpp-python`` builds llama.cpp from its source package (a C++ compiler and CMake; about 9
minutes on 2 cores): it is in the ``bench`` extra, never needed by the tests. Without it
`available` says why and the benchmarks go on without these engines. On a CPU with AMX, build
it with ``CMAKE_ARGS`` = `BUILD_WITHOUT_AMX` (its AMX kernels died of SIGILL on an Emerald
Rapids Xeon; its AVX-512 VNNI kernels and Q4_0 repacking stay).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import tempfile

import numpy as np
import torch

import decode

#: CMake arguments (``CMAKE_ARGS``) that build llama-cpp-python for an AVX-512 host without ggml's
#: AMX kernels (GGML_NATIVE would enable them from -march=native): its VNNI / repacked Q4_0 kernels stay.
BUILD_WITHOUT_AMX = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON "
                     "-DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON -DGGML_AMX_TILE=OFF "
                     "-DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF")
#: the formats a llama.cpp engine may run: name -> llama.cpp's file type (``LLAMA_FTYPE_*``)
FORMATS = ("F32", "BF16", "Q8_0", "Q4_0", "Q4_K_M")


def available() -> str | None:
    """None when llama.cpp can run here, else why not."""
    missing = [m for m in ("gguf", "llama_cpp") if importlib.util.find_spec(m) is None]
    if missing:
        return f"llama.cpp is not installed ({', '.join(missing)}: pip install -e '.[bench]' builds llama-cpp-python from source)"
    return None


def _metadata(writer, config) -> None:
    """The architecture's hyperparameters, as llama.cpp's converter writes them."""
    if config.model_type == "qwen3":
        writer.add_context_length(config.max_position_embeddings)
        writer.add_embedding_length(config.hidden_size)
        writer.add_block_count(config.num_hidden_layers)
        writer.add_feed_forward_length(config.intermediate_size)
        writer.add_head_count(config.num_attention_heads)
        writer.add_head_count_kv(config.num_key_value_heads)
        writer.add_key_length(config.head_dim)
        writer.add_value_length(config.head_dim)
        writer.add_rope_freq_base(getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"])
        writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    elif config.model_type == "gpt2":
        writer.add_context_length(config.n_positions)
        writer.add_embedding_length(config.n_embd)
        writer.add_block_count(config.n_layer)
        writer.add_feed_forward_length(config.n_inner or 4 * config.n_embd)
        writer.add_head_count(config.n_head)
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
    else:
        raise ValueError(f"no GGUF writer for model type {config.model_type!r} (qwen3, gpt2)")


def _tensors(model) -> dict[str, np.ndarray]:
    """GGUF name -> float32 array: the state dict renamed by ``gguf``'s map for the architecture;
    GPT-2's Conv1D weights ([in, out]) transposed to llama.cpp's [out, in]; a tied LM head left
    out (llama.cpp reads the embedding)."""
    import gguf

    config = model.config
    arch = {"qwen3": gguf.MODEL_ARCH.QWEN3, "gpt2": gguf.MODEL_ARCH.GPT2}[config.model_type]
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    out = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and getattr(config, "tie_word_embeddings", True):
            continue
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):  # GPT-2's causal mask buffers
            continue
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ValueError(f"gguf has no name for {name!r} of a {config.model_type} model")
        data = t.detach().float().numpy()
        if config.model_type == "gpt2" and data.ndim == 2 and name.split(".")[-2] in ("c_attn", "c_proj", "c_fc"):
            data = data.T
        out[new] = np.ascontiguousarray(data)
    return out


def write_gguf(model, path: str) -> None:
    """``model`` (transformers Qwen3 or GPT-2, any weights) as a float32 GGUF file at ``path``."""
    import gguf

    writer = gguf.GGUFWriter(path, model.config.model_type)
    _metadata(writer, model.config)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("none")
    writer.add_vocab_size(model.config.vocab_size)
    for name, data in _tensors(model).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@functools.cache
def _directory() -> str:
    return tempfile.mkdtemp(prefix="tg-gguf-")


def gguf_file(model, fmt: str) -> str:
    """The GGUF file of ``model`` in ``fmt`` (`FORMATS`), written (and quantised) once per process."""
    if fmt not in FORMATS:
        raise ValueError(f"llama.cpp format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    import llama_cpp

    base = os.path.join(_directory(), f"{id(model)}-F32.gguf")
    if not os.path.exists(base):
        write_gguf(model, base)
    if fmt == "F32":
        return base
    path = os.path.join(_directory(), f"{id(model)}-{fmt}.gguf")
    if not os.path.exists(path):
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{fmt}")
        params.nthread = os.cpu_count() or 1
        if llama_cpp.llama_model_quantize(base.encode(), path.encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama.cpp could not quantise {base} to {fmt}")
    return path


def _tile_state() -> None:
    """On a CPU with AMX, ask Linux for the tile state before llama.cpp runs, in case its CPU
    backend was built with its AMX kernels. (Those still died of SIGILL at ``tilezero`` on an
    Emerald Rapids Xeon with llama-cpp-python 0.3.36, the tile state granted: build it without
    them there, as `BUILD_WITHOUT_AMX` says.)"""
    from tensor_graphs.target import Target

    if "amx-tile" in Target.host().extensions:
        from tensor_graphs.codegen.llvm.kernels_amx import request_amx

        request_amx()


class LlamaCpp(decode.Engine):
    """llama.cpp through ``llama-cpp-python`` on the model's GGUF file in `fmt`."""

    fmt = "Q4_0"
    llm = None
    reports_error = True  # decode.Engine.measure_error: against eager, in every format

    def setup(self, threads: int) -> None:
        from llama_cpp import Llama

        _tile_state()
        path, t = decode.timed(lambda: gguf_file(self.model, self.fmt))
        self.compile_times[f"GGUF {self.fmt}"] = t
        self.llm = None  # free the previous context first
        self.llm, t = decode.timed(lambda: Llama(model_path=path, n_ctx=self.max_cache, n_batch=max(self.prefill_len, 16),
                                                 n_threads=threads, n_threads_batch=threads, logits_all=False,
                                                 verbose=False))
        self.compile_times[f"load, {threads} thread(s)"] = t
        decode.log(f"  {self.name}: {os.path.getsize(path) / 2**20:.0f} MiB, loaded in {t:.1f} s")

    def _logits(self) -> torch.Tensor:
        """The last evaluated position's logits (llama-cpp-python keeps them only with logits_all)."""
        import llama_cpp

        row = llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return torch.from_numpy(np.ctypeslib.as_array(row, shape=(self.llm.n_vocab(),)).copy())[None]

    def reset(self) -> None:
        self.llm.reset()

    def prefill(self, ids):
        self.llm.reset()
        self.llm.eval([int(t) for t in ids.reshape(-1)])
        return self._logits()

    def decode(self, tok):
        self.llm.eval([int(tok.reshape(-1)[0])])
        return self._logits()


def llama_engine(fmt: str) -> type:
    """The `LlamaCpp` engine class running ``fmt``, named ``llama.cpp <fmt>``."""
    return type(f"LlamaCpp{fmt}", (LlamaCpp,), {"fmt": fmt, "name": f"llama.cpp {fmt}"})
