import os
import re
import tempfile
from collections import Counter

# The GPU path's tests (tests/test_triton.py) run Triton's kernels in its interpreter when this
# machine has no GPU: Triton reads the switch when it is imported (torch may import it), so it is
# set before anything else. It changes nothing for the CPU path, which never imports Triton.
if "TRITON_INTERPRET" not in os.environ:
    try:
        import torch.cuda as _cuda_probe  # noqa: E402

        _gpu = _cuda_probe.is_available()
    except Exception:
        _gpu = False
    if not _gpu:
        os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import pytest
import torch

torch.manual_seed(0)

# Each test process gets a compile cache and a timing database of its own (never the user's):
# compiles within the run still hit the cache, as a user's do; no run sees another's records.
_SCRATCH = tempfile.mkdtemp(prefix="tg-tests-")
os.environ.setdefault("TG_CACHE_DIR", os.path.join(_SCRATCH, "compiled"))
os.environ.setdefault("TG_TUNING_DB", os.path.join(_SCRATCH, "tuning.sqlite"))

#: The target families every numerics test of `test_targets.py` runs on (`tensor_graphs.target`):
#: the generic fallback, AVX2 and AVX-512; a family this CPU cannot run is skipped, saying so.
TARGET_FAMILIES = ("x86-64", "x86-64-v3", "x86-64-v4")


def _target_param(name: str):
    from tensor_graphs.target import Target

    missing = Target.named(name).missing_on_host()
    reason = f"this CPU lacks {', '.join(missing)}: {name} code cannot run here"
    return pytest.param(name, id=name, marks=pytest.mark.skipif(bool(missing), reason=reason))


@pytest.fixture(params=[_target_param(n) for n in TARGET_FAMILIES])
def target(request, monkeypatch):
    """Each target family in turn (`TARGET_FAMILIES`): every compile in the test uses it (through
    ``TG_TARGET``, as a user would set it); the `Target` itself for the test's IR assertions."""
    from tensor_graphs.target import Target

    monkeypatch.setenv("TG_TARGET", request.param)
    return Target.named(request.param)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def mlp(sizes, bias=True, relu=True):
    """An MLP with ``len(sizes) - 1`` Linear layers, ReLU between them (not after the last)."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b, bias=bias))
        if relu and i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


#: a small Qwen3 (GQA 4 Q / 2 KV heads, q/k norms, RoPE, tied embeddings) shared by the tests
SMALL_QWEN3 = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=100,
    tie_word_embeddings=True,
)


class LogitsOnly(torch.nn.Module):
    """``ids -> logits`` of a transformers causal LM: no KV cache, no output dataclass, so
    torch.export sees one tensor out."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids, use_cache=False).logits


def check_logits(model: torch.nn.Module, fn, ids: torch.Tensor, max_abs: float) -> float:
    """Compiled logits vs PyTorch's: same shape and dtype, finite, max abs diff <= ``max_abs``."""
    with torch.no_grad():
        expected = model(ids)
    got = fn(ids)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert tuple(got.shape) == tuple(expected.shape)
    diff = (got - expected).abs().max().item()
    assert np.isfinite(diff), "non-finite logits"
    assert diff <= max_abs, f"max abs logits diff {diff:.3g} > {max_abs} at ids shape {list(ids.shape)}"
    return diff


_OP_RE = re.compile(r'^\s*(?:%[^=\n]*=\s*)?"?((?:tg|aten|buf)\.\w+)', re.M)


def op_counts(ir_text: str) -> Counter:
    """How many times each op (by name) appears in a module's text, nested regions included."""
    return Counter(_OP_RE.findall(ir_text))


def parse(text: str):
    """A verified module parsed from ``text`` (every tensor_graphs dialect loaded)."""
    from xdsl.parser import Parser

    from tensor_graphs.context import make_context

    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def run(passes: str, module):
    """A copy of ``module`` after ``passes`` (verified)."""
    from tensor_graphs.context import make_context
    from tensor_graphs.passes import build_pipeline

    out = module.clone()
    build_pipeline(passes).apply(make_context(), out)
    out.verify()
    return out


def functions(module) -> list:
    """The func.func ops of ``module``."""
    from xdsl.dialects import func

    return [op for op in module.ops if isinstance(op, func.FuncOp)]


# --------------------------------------------------------------------------- sharding (tests/run_sharded.py)

#: measured seconds per test file (`tests/run_sharded.py --record` rewrites it), to balance shards
DURATIONS_FILE = __import__("pathlib").Path(__file__).with_name("durations.json")


def shard_of_files(files: list[str], shards: int, durations: dict[str, float]) -> dict[str, int]:
    """Whole files to shards, longest first onto the least loaded (a file's module fixtures, a
    compiled model shared by its tests, are then built once). A file without a measurement
    counts as the median one."""
    known = sorted(durations.values())
    default = known[len(known) // 2] if known else 1.0
    load = [0.0] * shards
    out = {}
    for f in sorted(files, key=lambda f: (-durations.get(f, default), f)):
        k = min(range(shards), key=lambda i: load[i])
        out[f] = k
        load[k] += durations.get(f, default)
    return out


def pytest_collection_modifyitems(config, items):
    """``TG_SHARD=i/n``: keep the tests of this shard's files only."""
    import json
    import os

    spec = os.environ.get("TG_SHARD")
    if not spec:
        return
    index, shards = (int(v) for v in spec.split("/"))
    durations = json.loads(DURATIONS_FILE.read_text()) if DURATIONS_FILE.exists() else {}
    files = sorted({item.nodeid.split("::")[0] for item in items})
    owner = shard_of_files(files, shards, durations)
    keep, dropped = [], []
    for item in items:
        (keep if owner[item.nodeid.split("::")[0]] == index else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    """``TG_RECORD_DURATIONS=path``: seconds per test file of this run, as JSON."""
    import json
    import os

    path = os.environ.get("TG_RECORD_DURATIONS")
    if path:
        with open(path, "w") as f:
            json.dump({k: round(v, 2) for k, v in sorted(_FILE_SECONDS.items())}, f, indent=1)
