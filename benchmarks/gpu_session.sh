#!/usr/bin/env bash
# What a session lent a GPU runs (issues 15, 28): the wheels of ../shared/device/wheels.sh in .whl/
# (carried), results under $OUT (default ./gpu-out). A device command runs at most 10 minutes and a
# session has about 15 minutes of device time in all, so `all` runs every step in one command, each
# under its own time limit (seconds, from the environment), writing as it goes:
#
#   benchmarks/gpu_session.sh tests     # the GPU path's tests on the GPU itself (compiled Triton)
#   benchmarks/gpu_session.sh gpt2      # GPT-2 rows: forward, decode, bf16 decode, tuned forward, profiles
#   benchmarks/gpu_session.sh qwen3     # the same for the Qwen3-0.6B-shaped model
#   benchmarks/gpu_session.sh all       # the steps STEPS="tests gpt2 qwen3", each under its time limit
#                                       # (TESTS_S, GPT2_S, QWEN3_S; default 200 s); the tuner's measuring
#                                       # time TUNE_S=40, per model GPT2_TUNE_S / QWEN3_TUNE_S (0: no
#                                       # tuned forward)
#
# Files under $OUT (at most 8 come back): device.txt, tests.log, <model>.log/.json/.md.
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
if [ -z "${TG_GPU_SESSION:-}" ]; then  # once per command: the steps of `all` run this script again
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export TG_GPU_SESSION=1 PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
  # a fresh cache and database, owned by this run (not a shared /tmp path others could write)
  TG_CACHE_DIR=$(mktemp -d) TG_TUNING_DB=$(mktemp -d)/tuning.db
  export TG_CACHE_DIR TG_TUNING_DB
  { nvidia-smi -L; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
    lscpu | grep -E 'Model name|^CPU\(s\)'
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'; } > "$out/device.txt" 2>&1
fi
unset TRITON_INTERPRET

tests() {
  python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_triton.py tests/test_triton_moe.py \
    tests/test_attention_layouts.py 2>&1 | tee "$out/tests.log" | tail -40
}
model() {  # model: rows and profiles; a tuned forward too unless its TUNE_S (GPT2_TUNE_S, QWEN3_TUNE_S) is 0
  local var=${1^^}_TUNE_S tune=()
  [ "${!var:-${TUNE_S:-40}}" != 0 ] && tune=(--tune --tune-seconds "${!var:-${TUNE_S:-40}}")
  python3 benchmarks/gpu.py --models "$1" "${tune[@]}" --profile --calls 30 --steps 32 \
    --out "$out/$1.md" --json "$out/$1.json" 2>&1 | tee "$out/$1.log"
}
step() {  # step seconds name: `$0 name` under a time limit, its exit status and time logged
  local t0=$SECONDS
  timeout --signal=INT --kill-after=10 "$1" bash "$0" "$2"
  echo "== $2: exit $?, $((SECONDS - t0)) s (limit $1 s)" | tee -a "$out/device.txt"
}
case "${1:-tests}" in
  tests) tests ;;
  gpt2|qwen3) model "$1" ;;
  all)
    for name in ${STEPS:-tests gpt2 qwen3}; do
      limit=${name^^}_S
      step "${!limit:-200}" "$name"
    done
    cat "$out/device.txt" ;;
  *) echo "usage: $0 tests|gpt2|qwen3|all" >&2; exit 2 ;;
esac
