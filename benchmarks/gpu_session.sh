#!/usr/bin/env bash
# What a session lent a GPU runs first (issue 15), in one device call per step (each at most
# 10 minutes): the wheels of ../shared/device/wheels.sh in .whl/ (carried), results under $OUT.
#
#   benchmarks/gpu_session.sh tests     # the GPU path's tests on the GPU itself (compiled Triton)
#   benchmarks/gpu_session.sh gpt2      # GPT-2 rows: forward, decode, bf16 decode, tuned forward, profiles
#   benchmarks/gpu_session.sh qwen3     # the same for the Qwen3-0.6B-shaped model
#
# Each writes its log (and the rows as JSON and Markdown) under $OUT (default ./gpu-out).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
unset TRITON_INTERPRET
export TG_CACHE_DIR=/tmp/tg-cache TG_TUNING_DB=/tmp/tg-tuning.db
nvidia-smi -L | tee "$out/device.txt"
case "${1:-tests}" in
  tests)
    python3 -m pytest -q -x -n 4 -p no:cacheprovider tests/test_triton.py tests/test_triton_moe.py 2>&1 | tail -40 | tee "$out/tests.log" ;;
  gpt2|qwen3)
    python3 benchmarks/gpu.py --models "$1" --tune --profile --calls 30 --steps 32 \
      --out "$out/$1.md" --json "$out/$1.json" 2>&1 | tee "$out/$1.log" ;;
  *) echo "usage: $0 tests|gpt2|qwen3" >&2; exit 2 ;;
esac
