"""How long `tensor_graphs.compile` takes, phase by phase, on the models of the test budgets.

    .venv/bin/python benchmarks/compile_time.py [--models gpt2 bert resnet50] [--repeat 3]

Each model is built with random weights (transformers config classes: GPT-2 small at ids
[1, 128], the logits only; BERT base at [1, 128]; ResNet-50 at 224 x 224), and compiled
``--repeat`` times in this process after one untimed compile of a tiny GPT-2 (so that the first
row does not carry torch.export's and LLVM's start-up). Printed per model: the median wall time
of ``compile()``, the median of each phase (`tensor_graphs.CompileStats`), and the lines of the
optimised LLVM IR (the two LLVM phases grow with the code emitted). Each model is compiled
with no compile cache (``TG_CACHE=off``) and again from a fresh cache filled by one untimed
compile (`codegen.llvm.object_cache`); "own" is the wall time without torch.export's.
tests/test_gpt2.py holds GPT-2 small to 15 s. ``--dynamic`` compiles each model a second time
with ``dynamic_shapes`` (GPT-2 and BERT: ``Dim("seq", 1, 512)`` on the ids' dim 1; ResNet-50:
``Dim("batch", 1, 16)`` at an example batch of 2, since torch.export specialises a size of 1)
and prints its row beside the static one (torch.export's symbolic trace is its own phase).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import platform
import statistics
import time
from collections.abc import Callable

import torch
import transformers

import tensor_graphs as tg
from tensor_graphs.target import Target


class FirstOutput(torch.nn.Module):
    """One output of a transformers model (the logits, the hidden states) as a plain tensor;
    ``**kwargs`` go to the model (``use_cache=False``: no KV cache in the graph, as
    tests/conftest.py's ``LogitsOnly``)."""

    def __init__(self, model: torch.nn.Module, key: str, **kwargs):
        super().__init__()
        self.model, self.key, self.kwargs = model, key, kwargs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(x, **self.kwargs), self.key)


#: ``--dynamic``: (model name -> the dynamic_shapes spec and the example inputs it is compiled at)
def dynamic(name: str, inputs: tuple[torch.Tensor, ...]) -> tuple[tuple, tuple[torch.Tensor, ...]]:
    from torch.export import Dim

    if name == "resnet50":
        return ({0: Dim("batch", min=1, max=16)},), (torch.cat([inputs[0], inputs[0]]),)
    return ({1: Dim("seq", min=1, max=512)},), inputs


def gpt2(**config) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config)).eval()
    seq = min(128, model.config.n_positions)
    return FirstOutput(model, "logits", use_cache=False).eval(), (torch.randint(0, model.config.vocab_size, (1, seq)),)


def bert() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    model = transformers.BertModel(transformers.BertConfig()).eval()
    return FirstOutput(model, "last_hidden_state").eval(), (torch.randint(0, 30522, (1, 128)),)


def resnet50() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    model = transformers.ResNetModel(transformers.ResNetConfig()).eval()
    return FirstOutput(model, "pooler_output").eval(), (torch.randn(1, 3, 224, 224),)


MODELS: dict[str, Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]] = {
    "gpt2": gpt2,
    "bert": bert,
    "resnet50": resnet50,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["gpt2", "bert", "resnet50"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dynamic", action="store_true", help="also compile each model with dynamic_shapes (no cache)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    torch.manual_seed(0)
    print(f"CPU: {platform.processor() or platform.machine()}; tensor_graphs target: {Target.host().describe()}")
    tiny, tiny_inputs = gpt2(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    tg.compile(tiny, tiny_inputs)  # untimed: the process's first export and LLVM start-up
    print()
    print("| model | compile() s (median) | tensor_graphs' own s (without torch.export) | phases (median s) | optimised LLVM IR lines |")
    print("|---|--:|--:|---|--:|")
    for name in args.models:
        model, inputs = MODELS[name]()
        for cached in (False, True, *(("dynamic",) if args.dynamic else ())):
            # uncached: no compile cache at all; cached: a fresh one, filled by an untimed compile
            os.environ["TG_CACHE"] = "on" if cached is True else "off"
            os.environ["TG_CACHE_DIR"] = tempfile.mkdtemp(prefix="tg-compile-cache-")
            if cached is True:
                tg.compile(model, inputs)
            spec, example = dynamic(name, inputs) if cached == "dynamic" else (None, inputs)
            walls: list[float] = []
            phases: dict[str, list[float]] = {}
            fn = None
            for _ in range(args.repeat):
                stats = tg.CompileStats()
                t0 = time.perf_counter()
                fn = tg.compile(model, example, stats=stats, dynamic_shapes=spec)
                walls.append(time.perf_counter() - t0)
                for phase, seconds in stats.seconds.items():
                    phases.setdefault(phase, []).append(seconds)
            assert fn is not None
            lines = len(fn.ir("llvm").splitlines())
            own = [w - e for w, e in zip(walls, phases["torch.export"])]
            shown = ", ".join(f"{p} {statistics.median(v):.2f}" for p, v in phases.items())
            label = f"{name} ({'dynamic, no cache' if cached == 'dynamic' else 'from the compile cache' if cached else 'no cache'})"
            print(f"| {label} | {statistics.median(walls):.2f} | {statistics.median(own):.2f} | {shown} | {lines} |", flush=True)


if __name__ == "__main__":
    main()
