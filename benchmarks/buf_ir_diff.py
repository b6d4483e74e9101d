"""Whether two revisions of tensor_graphs compile the benchmark models to the same kernels: the
optimised buf-level IR (``fn.ir("buf")``, source locations dropped) of tg-bench's MLP (batch 1
and 64), both encoder blocks and the DDPM UNet, at each checkout, compared.

    git worktree add /tmp/base <commit>
    .venv/bin/python benchmarks/buf_ir_diff.py /tmp/base [--new .] [--out /tmp/buf_ir]

Each checkout compiles in a process of its own (its tensor_graphs first on ``PYTHONPATH``, no
compile cache); the models come from ``benchmarks/suite.py`` of this checkout, so both compile
the same modules. Prints, per model, "same" or the number of differing lines (the two texts are
left in ``--out`` for ``diff``). Same kernels means a timing difference between the revisions is
the call's Python path or noise.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: run in the child: compile each model, write its buf IR to argv[1]/<name>.mlir
CHILD = r"""
import sys, re, torch
sys.path.insert(0, sys.argv[2])
import suite
import tensor_graphs as tg
torch.manual_seed(0)
mlp = suite.mlp.build().eval()
models = {
    "mlp-b1": (mlp, torch.randn(1, 256)),
    "mlp-b64": (mlp, torch.randn(64, 256)),
    "encoder-d768": (suite.EncoderBlock(768, 12, 3072).eval(), torch.randn(1, 128, 768)),
    "encoder-d256": (suite.EncoderBlock(256, 4, 1024).eval(), torch.randn(1, 128, 256)),
    "unet": (suite.build_unet(False), torch.randn(1, 3, 32, 32)),
}
for name, (model, x) in models.items():
    fn = tg.compile(model, (x,))
    open(f"{sys.argv[1]}/{name}.mlir", "w").write(re.sub(r" ?loc\(.*?\)", "", fn.ir("buf")))
"""


def dump(checkout: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(checkout), TG_CACHE="off")
    subprocess.run([sys.executable, "-c", CHILD, str(out), str(HERE)], env=env, check=True, cwd=checkout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base", type=Path)
    p.add_argument("--new", type=Path, default=HERE.parent)
    p.add_argument("--out", type=Path, default=Path("/tmp/buf_ir"))
    args = p.parse_args()
    for rev, checkout in (("base", args.base), ("new", args.new)):
        dump(checkout.resolve(), args.out / rev)
    differ = 0
    for path in sorted((args.out / "base").glob("*.mlir")):
        a = path.read_text().splitlines()
        b = (args.out / "new" / path.name).read_text().splitlines()
        lines = [d for d in difflib.unified_diff(a, b, lineterm="", n=0) if d[:1] in "+-" and not d.startswith(("+++", "---"))]
        differ += bool(lines)
        print(f"{path.stem}: {'same' if not lines else f'{len(lines)} lines differ'} ({len(a)} lines)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
