"""Every Triton kernel the GPU path emits compiles for an H100 (sm_90) with Triton's own compiler,
all the way to cubin, without a GPU (issue 15): the interpreter the other GPU tests run in
accepts programs a GPU compile rejects (a loop-carried value changing type, a block where a
scalar is needed...). The kernels of every family at the shapes the interpreter tests use, the
decoders with each weight format, the MoE kernels over every element type they take, and every
GPU variant with each of its parameters pinned, are lowered here (`convert-tensor-to-triton`;
their signatures from the buf operands they launch on), then compiled in a process without
``TRITON_INTERPRET`` (Triton chooses interpreter or compiler when it is imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers as T
from test_moe_ops import tiny_mixtral
from test_ops_e2e import Fn
from test_triton import Attention, ConvNet, Elementwise, Embed, Gemms, Norms, Powers, Reductions, TwoLayers
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp
from xdsl.parser import Parser

import tensor_graphs as tg
from tensor_graphs.codegen.triton.convert_tensor_to_triton import LAUNCHES_ATTR, SOURCE_ATTR
from tensor_graphs.passes import build_pipeline
from tensor_graphs.runtime_support.triton_graph import LIBRARY_CALLS
from tensor_graphs.tuning.paths import gpu_candidates, gpu_kernel_paths, pin_gpu

pytest.importorskip("triton")

#: a buffer's element type -> Triton's pointer type in a kernel signature
POINTERS = {"f32": "*fp32", "f64": "*fp64", "f16": "*fp16", "bf16": "*bf16", "i64": "*i64", "i32": "*i32", "i16": "*i16",
            "i8": "*i8", "i1": "*i1", "ui8": "*u8"}

#: compiles each (kernel, signature, warps) of a JSON program for sm_90; prints FAIL lines
COMPILER = textwrap.dedent("""
    import importlib.util, json, sys, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    failed = 0
    for k, program in enumerate(json.load(open(sys.argv[1]))):
        path = f"{tempfile.mkdtemp()}/tg_sm90_{k}.py"
        open(path, "w").write(program["source"])
        spec = importlib.util.spec_from_file_location(f"tg_sm90_{k}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, signature, warps in program["launches"]:
            fn = getattr(module, name)
            try:
                triton.compile(ASTSource(fn=fn, signature=dict(zip(fn.arg_names, signature)), constexprs={}),
                               target=GPUTarget("cuda", 90, 32), options={"num_warps": warps} if warps else {})
            except Exception as e:
                failed += 1
                print("FAIL", program["what"], name, signature, warps, str(e).strip().splitlines()[-1][:300] if str(e).strip() else repr(e))
    sys.exit(1 if failed else 0)
""")


def program(module: ModuleOp, what: str) -> dict:
    """The kernels' source of a lowered ``module`` and each distinct launch's (kernel, pointer
    types, warps): the buffers as launched, bf16/int8 weight copies as the runtime binds them,
    then a scratch buffer, and ``dims`` last for a kernel reading scalars or writing check flags."""
    launches = {}
    for op in module.walk():
        plan = op.attributes.get(LAUNCHES_ATTR)
        for entry in plan.data if isinstance(plan, ArrayAttr) else ():
            assert isinstance(entry, DictionaryAttr)
            d = entry.data
            if d["kernel"].data in LIBRARY_CALLS:
                continue
            types = [[POINTERS[str(op.operands[i].type.element_type)]] for i in d["args"].get_values()]
            for position in d["bf16"].get_values() if "bf16" in d else ():
                types[position] = ["*bf16"]
            for position in d["int8"].get_values() if "int8" in d else ():
                types[position] = ["*i8", "*fp32"]  # the copy and its scales
            signature = [t for ts in types for t in ts] + (["*fp32"] if "scratch" in d else [])
            signature += ["*i64"] if d["scalars"].data or "checks" in d else []
            warps = d["warps"].value.data if "warps" in d else None
            launches[(d["kernel"].data, tuple(signature), warps)] = None
    return {"what": what, "source": module.attributes[SOURCE_ATTR].data, "launches": [list(k) for k in launches]}


def graph_program(fn, what: str) -> dict:
    return program(fn._module, what)


def pinned_programs(fn, what: str) -> list[dict]:
    """The graph's tg module lowered once per GPU variant of each op and each of its parameter
    values (`gpu_candidates`), the others at the heuristic's."""
    from tensor_graphs.api import _context

    ctx = _context()
    base = Parser(ctx, fn.ir("tg")).parse_module()
    out = []
    for k, paths in enumerate(list(gpu_kernel_paths(base))):
        for candidate in gpu_candidates(paths):
            module = base.clone()
            op = list(gpu_kernel_paths(module))[k].op
            pin_gpu(op, candidate)
            build_pipeline(["convert-tensor-to-triton"]).apply(ctx, module)
            out.append(program(module, f"{what} {paths.name} {candidate}"))
    return out


def _compile_all(programs: list[dict], tmp_path) -> None:
    path = tmp_path / "programs.json"
    path.write_text(json.dumps(programs))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    done = subprocess.run([sys.executable, "-c", COMPILER, str(path)], env=env, capture_output=True, text=True, timeout=900)
    kernels = sum(len(p["launches"]) for p in programs)
    assert done.returncode == 0, f"of {kernels} kernel launches:\n" + done.stdout[-6000:] + done.stderr[-3000:]


def test_every_kernel_family_compiles_for_sm90(tmp_path):
    torch.manual_seed(0)
    graphs = [
        (Elementwise(), (torch.randn(6, 9), torch.randn(9))),
        (Reductions(), (torch.randn(3, 5, 7),)),
        (Norms(5000), (torch.randn(2, 5000),)),
        (Gemms(), (torch.randn(3, 5, 40), torch.randn(2, 9, 24))),
        (Gemms(), (torch.randn(3, 16, 40), torch.randn(2, 9, 24))),
        (Embed(), (torch.randint(0, 50, (3, 7)),)),
        (ConvNet(), (torch.randn(2, 3, 12, 10),)),
        (Powers(), (torch.randn(4, 5), torch.randn(5))),
    ]
    for causal, gqa, masked in ((False, False, False), (True, True, False), (False, True, True)):
        graphs.append((Attention(causal, gqa, masked), (torch.randn(2, 4, 19, 16), torch.randn(2, 2 if gqa else 4, 19, 16),
                                                        torch.randn(2, 2 if gqa else 4, 19, 8), torch.randn(2, 1, 19, 19))))
        # few queries over many keys: split over key ranges, then combined
        graphs.append((Attention(causal, gqa, masked), (torch.randn(1, 4, 3, 16), torch.randn(1, 2 if gqa else 4, 1024, 16),
                                                        torch.randn(1, 2 if gqa else 4, 1024, 8), torch.randn(1, 1, 3, 1024))))
    programs = [graph_program(tg.compile(m.eval(), x, device="cuda"), type(m).__name__) for m, x in graphs]
    _compile_all(programs, tmp_path)


def test_decoders_and_weight_formats_compile_for_sm90(tmp_path):
    torch.manual_seed(0)
    qwen = T.Qwen3ForCausalLM(T.Qwen3Config(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                             head_dim=16, intermediate_size=128, vocab_size=300, max_position_embeddings=64)).eval()
    gpt2 = T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=64, n_head=4, vocab_size=300, n_positions=64)).eval()
    mixtral = tiny_mixtral(layers=1)
    programs = []
    for name, model, kw in (("qwen3 bf16", qwen, {"weight_format": "bf16"}), ("qwen3 int8", qwen, {"weight_format": "int8"}),
                            ("gpt2 int8, a padded batch of 2", gpt2, {"weight_format": "int8", "batch": 2}), ("mixtral", mixtral, {})):
        dec = tg.compile_decoder(model, max_seq=40, prefill_chunk=8, device="cuda", **kw)
        programs += [graph_program(dec.prefill_graph, f"{name} prefill"), graph_program(dec.decode_graph, f"{name} decode")]
    _compile_all(programs, tmp_path)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int8])
def test_moe_kernels_compile_for_sm90_over_every_element_type(dtype, tmp_path):
    """argtopk (of the types the frontend sorts: float32 and integers), put (with and without
    accumulate), take and cumsum of each element type."""
    i = torch.tensor([1, 1, 3])

    def f(m, x, i):
        x = x.to(dtype)  # graph inputs are float32 or integer indices; the ops inside take any type
        v = x[:3]
        outs = [x[i], torch.cumsum(x, 1, dtype=dtype)]
        if dtype not in (torch.float64, torch.float16):
            outs += [torch.topk(x, 3, dim=1)[1], torch.sort(x.reshape(-1), stable=True)[1]]
        return (*outs, x.index_put((i,), v), x.index_put((i,), v, accumulate=True))

    fn = tg.compile(Fn(f).eval(), (torch.randint(-5, 5, (6, 8)).float(), i), device="cuda")
    _compile_all([graph_program(fn, str(dtype))], tmp_path)


def test_every_gpu_variant_and_parameter_compiles_for_sm90(tmp_path):
    """Each GEMM (40 rows, 2 rows) and attention (head dim 128) of a small graph lowered with
    every GPU variant that applies and every value of its parameters, as a tuner pins them."""
    torch.manual_seed(0)
    programs = []
    for rows in (40, 2):
        programs += pinned_programs(tg.compile(TwoLayers().eval(), (torch.randn(rows, 64),), device="cuda"), f"{rows} rows")
    for d in (128,):
        q = torch.randn(1, 4, 24, d)
        programs += pinned_programs(tg.compile(Attention(True, True, False).eval(), (q, q[:, :2], q[:, :2], torch.zeros(1, 1, 24, 24)),
                                               device="cuda"), f"attention d={d}")
    assert len(programs) > 40
    _compile_all(programs, tmp_path)
