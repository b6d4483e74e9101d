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

import textwrap

import pytest
import torch
import transformers as T
from test_moe_ops import tiny_mixtral
from test_ops_e2e import Fn
from test_triton import Attention, ConvNet, Elementwise, Embed, Gemms, Norms, Powers, Reductions, TwoLayers
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

import tensor_graphs as tg
from tensor_graphs.codegen.triton.offline_compile import compile_programs
from tensor_graphs.codegen.triton import signatures
from tensor_graphs.passes import build_pipeline
from tensor_graphs.runtime_support.triton_graph import LIBRARY_CALLS
from tensor_graphs.tuning.paths import gpu_candidates, gpu_kernel_paths, pin_gpu

pytest.importorskip("triton")

def program(module: ModuleOp, what: str) -> dict:
    """The kernels' source of a lowered ``module`` and each distinct launch's (kernel, pointer
    types, warps) as the runtime binds them (`signatures.launches`)."""
    return signatures.program(module, what, signatures.launches(module, LIBRARY_CALLS.keys()))


def graph_program(fn, what: str) -> dict:
    return program(fn._module, what)


def pinned_programs(fn, what: str) -> list[dict]:
    """The graph's tg module lowered once per GPU variant of each op and each of its parameter
    values (`gpu_candidates`), the others at the heuristic's."""
    from tensor_graphs.context import make_context as _context

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
    results = compile_programs(programs, capability=90, cache_dir=str(tmp_path / "triton-cache"))
    failed = [f"FAIL {r['what']} {r['kernel']} {r['signature']} {r['warps']}: {r['error']}" for r in results if not r["ok"]]
    assert len(results) == sum(len(p["launches"]) for p in programs)
    assert not failed, f"of {len(results)} kernel launches:\n" + "\n".join(failed)


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


def test_the_heuristics_kernels_spill_no_registers_on_sm90(tmp_path):
    """What ptxas says the default kernels use on an H100 (``ptxas -v``, `compile_programs`'s
    resources): no spilled register (spills go to local memory; the attention the H100 rows of
    2026-11-24 ran, 64 x 64 blocks at IEEE float32, spills ~17 KB per thread at head dims 64 and
    128). The heuristic's attention at IEEE float32 and at TF32 for head dims 32 to 256, over 64
    queries with enough heads for the largest query block and over one query, and a decoder of
    head dim 128 with grouped-query heads (its GEMVs, its
    attention over the cache, the rest)."""
    torch.manual_seed(0)
    programs = []
    ctx = None
    for d in (32, 64, 128, 256):
        for heads, sq, sk in ((128, 64, 64), (4, 1, 512)):
            q, k = torch.randn(1, heads, sq, d), torch.randn(1, heads, sk, d)
            fn = tg.compile(Attention(sq > 1, False, False).eval(), (q, k, k, torch.zeros(1, 1, sq, sk)), device="cuda")
            from tensor_graphs.context import make_context as _context

            ctx = ctx or _context()
            for variant in ("attention.flash", "attention.flash_tf32"):
                module = Parser(ctx, fn.ir("tg")).parse_module()
                for paths in gpu_kernel_paths(module):
                    pin_gpu(paths.op, variant)
                build_pipeline(["convert-tensor-to-triton"]).apply(ctx, module)
                programs.append(program(module, f"{variant} d={d} {heads} heads {sq}x{sk}"))
    qwen = T.Qwen3ForCausalLM(T.Qwen3Config(num_hidden_layers=1, hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
                                             head_dim=128, intermediate_size=128, vocab_size=300, max_position_embeddings=64)).eval()
    dec = tg.compile_decoder(qwen, max_seq=40, prefill_chunk=8, device="cuda")
    programs += [graph_program(dec.prefill_graph, "qwen3 d=128 prefill"), graph_program(dec.decode_graph, "qwen3 d=128 decode")]
    results = compile_programs(programs, capability=90, resources=True, cache_dir=str(tmp_path / "triton-cache"))
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
    spilled = [f"{r['what']} {r['kernel']}: {r['registers']} registers, {r['spill_stores']} bytes spilled"
               for r in results if r["spill_stores"] or r["spill_loads"]]
    assert not spilled, "\n".join(spilled)
    assert any("attention" in r["kernel"] for r in results if r["what"].startswith("qwen3"))


def test_offline_compile_reports_each_launch(tmp_path):
    """`compile_programs` returns one result per launch: a kernel that compiles (with its
    resources, its accesses vectorized), one the compiler rejects, a name the source lacks, a source that does not load;
    none of them stops the others."""
    source = textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def twice(x, out):
            o = tl.program_id(0) * 1024 + tl.arange(0, 1024)
            tl.store(out + o, tl.load(x + o) * 2)

        @triton.jit
        def changes_type(x, out):
            acc = 0
            for i in range(0, 4):
                acc = tl.load(x + tl.arange(0, 16))
            tl.store(out + tl.arange(0, 16), acc)
    """)
    launches_ = [["twice", ["*fp32", "*fp32"], None], ["changes_type", ["*fp32", "*fp32"], 8], ["absent", ["*fp32"], None]]
    # the same kernel under another name, as a model's layers repeat theirs: compiled once per
    # warps (an earlier launch's outcome serves the same source, signature and warps)
    renamed = source.replace("twice", "k7_double")
    again = [["k7_double", ["*fp32", "*fp32"], None], ["k7_double", ["*fp32", "*fp32"], 8]]
    results = compile_programs([{"what": "a", "source": source, "launches": launches_},
                                {"what": "b", "source": "import not_a_module_anywhere\n", "launches": [["k", ["*fp32"], None]]},
                                {"what": "c", "source": renamed, "launches": again}],
                               resources=True, cache_dir=str(tmp_path / "cache"))
    ok, rejected, absent, unloaded, same, wider = results
    assert same == {**ok, "what": "c", "kernel": "k7_double"}
    assert wider["ok"] and wider["warps"] == 8
    assert ok["ok"] and ok["registers"] > 0 and ok["spill_stores"] == 0 and ok["warps"] == 4
    # compiled for 16-byte aligned pointers, as the runtime's launches are: its load and store 16 bytes at a time
    assert ok["vector_accesses"] >= 2
    assert not rejected["ok"] and "Loop-carried variable acc" in rejected["error"]
    assert not absent["ok"] and "no kernel 'absent'" in absent["error"]
    assert not unloaded["ok"] and "does not load" in unloaded["error"]


class Slices(torch.nn.Module):
    """Contiguous slices (zero-copy subviews) at 36 bytes (9 floats: unaligned) and at 16 bytes."""

    def forward(self, x):
        y = x * 2
        return torch.tanh(y[1:]), torch.tanh(y.reshape(-1)[4:])


def test_launches_compile_for_their_pointers_alignment(tmp_path):
    """A buffer the runtime binds at an address that is not 16-byte aligned (a contiguous slice's
    subview 9 floats in) is compiled without Triton's alignment specialization, as its launcher
    would; a slice 16 bytes in, the arena's views and the graph's tensors with it; both compile."""
    fn = tg.compile(Slices().eval(), (torch.randn(8, 9),), device="cuda")
    found = signatures.launches(fn._module, LIBRARY_CALLS.keys())
    tanh = [x for x in found if "tanh" in x.kernel]
    assert [x.aligned for x in tanh] == [(False, True), (True, True)]
    assert all(x.aligned == (True,) * len(x.signature) for x in found if "tanh" not in x.kernel)
    results = compile_programs([graph_program(fn, "slices")], cache_dir=str(tmp_path / "cache"), resources=True)
    assert len(results) == 3 and all(r["ok"] for r in results)
