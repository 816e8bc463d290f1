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
# torch/torchvision are pinned in pyproject.toml so this never re-resolves them (see STACK.md).
.venv/bin/python -m pip install --quiet -e '.[dev]'
# dagster-postgres 0.29.28 (the match for dagster 1.13.28) is not published; 0.29.27 works with
# 1.13.28 but pins dagster==1.13.27, so it is installed without its dependencies.
.venv/bin/python -m pip install --quiet --no-deps dagster-postgres==0.29.27
