#!/usr/bin/env bash
# Build (once) and cache the Python environment a KubeRay head or worker pod of the
# code-location image runs `ray start` with: Ray and what deployments/docker/requirements-cluster.txt
# adds (the dashboard and its agent). Print its python. Separate from ./.venv, which stays as
# pyproject.toml makes it (ray[data] only); the image-environment test starts a head with it.
#
# The venv lives in a cache keyed by the requirement file and this script; override the place
# with PRX_RAY_NODE_ENV.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=deployments/docker/requirements-cluster.txt
KEY=$(cat "$REQ" "$0" | sha256sum | cut -c1-12)
ENV_DIR=${PRX_RAY_NODE_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/prx-data/ray-node-$KEY}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -f "$ENV_DIR/.complete" ]; then
  started=$(date +%s)
  echo "ray_node_env: building $ENV_DIR (once)" >&2
  rm -rf "$ENV_DIR"
  mkdir -p "$(dirname "$ENV_DIR")"
  "$PYTHON" -m venv "$ENV_DIR"
  # uv when it installs (seconds, not minutes, on a cold CI machine), else pip, as base_env.sh.
  "$ENV_DIR/bin/python" -m pip install --quiet uv >&2 || true
  if [ -n "${PIP_FIND_LINKS:-}" ]; then export UV_FIND_LINKS=${UV_FIND_LINKS:-$PIP_FIND_LINKS}; fi
  "$ENV_DIR/bin/python" -m uv pip install --quiet --python "$ENV_DIR/bin/python" -r "$REQ" >&2 \
    || "$ENV_DIR/bin/python" -m pip install --quiet -r "$REQ" >&2
  "$ENV_DIR/bin/python" -m pip uninstall --quiet -y uv >&2 || true
  touch "$ENV_DIR/.complete"
  echo "ray_node_env: built in $(( $(date +%s) - started ))s" >&2
fi
echo "$ENV_DIR/bin/python"
