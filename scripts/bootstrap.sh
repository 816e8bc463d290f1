#!/usr/bin/env bash
# Install everything prx-data needs into ./.venv from the repository's own files.
# Needs only Python 3.11 on the machine. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# uv resolves the same 228 packages as pip (pip freeze identical) and installs a fresh .venv in
# 89 s from a cold cache against pip's ~197 s here: a fixed cost of every CI run. It must
# --compile-bytecode as pip does: with PYTHONDONTWRITEBYTECODE set (as on CI) a module without its
# .pyc is compiled again by every process that imports it (a suite run took 30:51, not 21:35).
# pip is the fallback where uv cannot be had or fails.
.venv/bin/python -m pip install --quiet uv || true
# pip reads extra wheels from PIP_FIND_LINKS; uv from its own variable.
if [ -n "${PIP_FIND_LINKS:-}" ]; then export UV_FIND_LINKS=${UV_FIND_LINKS:-$PIP_FIND_LINKS}; fi
install() {
  .venv/bin/python -m uv pip install --quiet --compile-bytecode --python .venv/bin/python "$@" \
    || .venv/bin/python -m pip install --quiet "$@"
}
# torch/torchvision are pinned in pyproject.toml so this never re-resolves them (see STACK.md).
install -e '.[dev]'
# dagster-postgres 0.29.28 (the match for dagster 1.13.28) is not published; 0.29.27 works with
# 1.13.28 but pins dagster==1.13.27, so it is installed without its dependencies.
install --no-deps dagster-postgres==0.29.27
