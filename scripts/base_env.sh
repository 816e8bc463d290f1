#!/usr/bin/env bash
# Build (once) and cache a venv holding exactly the pipeline's base install, `pip install
# prx-data` (pyproject.toml's dependencies, no extra) plus requirements-nodeps.txt, and print its
# python. scripts/wheel_check.sh --base runs the wheel on it: no torch, no streaming.
#
# Cached by the requirement text (survives fresh clones on the same machine, like
# scripts/vllm_cpu_env.sh); override the place with PRX_BASE_ENV.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
REQS=$("$PYTHON" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
KEY=$( { echo "$REQS"; cat requirements-nodeps.txt "$0"; } | sha256sum | cut -c1-12)
ENV_DIR=${PRX_BASE_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/prx-data/base-$KEY}
if [ ! -f "$ENV_DIR/.complete" ]; then
  started=$(date +%s)
  echo "base_env: building $ENV_DIR (about two minutes, once)" >&2
  rm -rf "$ENV_DIR"
  mkdir -p "$(dirname "$ENV_DIR")"
  "$PYTHON" -m venv "$ENV_DIR"
  echo "$REQS" >"$ENV_DIR/requirements-base.txt"
  "$ENV_DIR/bin/python" -m pip install --quiet uv >&2 || true
  if [ -n "${PIP_FIND_LINKS:-}" ]; then export UV_FIND_LINKS=${UV_FIND_LINKS:-$PIP_FIND_LINKS}; fi
  install() {
    "$ENV_DIR/bin/python" -m uv pip install --quiet --python "$ENV_DIR/bin/python" "$@" >&2 \
      || "$ENV_DIR/bin/python" -m pip install --quiet "$@" >&2
  }
  install -r "$ENV_DIR/requirements-base.txt"
  install --no-deps -r requirements-nodeps.txt
  # uv itself is no part of the install that is measured and checked.
  "$ENV_DIR/bin/python" -m pip uninstall --quiet -y uv >&2 || true
  touch "$ENV_DIR/.complete"
  echo "base_env: built in $(( $(date +%s) - started ))s, $(du -sh "$ENV_DIR" | cut -f1)" >&2
fi
echo "$ENV_DIR/bin/python"
