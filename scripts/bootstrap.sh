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
# uv resolves the same 228 packages as pip (pip freeze identical), a fixed cost of every CI run.
# Without bytecode it installs in ~25 s. With PYTHONDONTWRITEBYTECODE set, modules must be
# precompiled (--compile-bytecode, as pip does), or every process that imports one compiles it
# again (a suite run took 30:51, not 21:35); that doubles the install or more (89-161 s here).
# scripts/test.sh unsets the variable, so modules compile once, on first import.
# pip is the fallback where uv cannot be had or fails.
.venv/bin/python -m pip install --quiet uv || true
# pip reads extra wheels from PIP_FIND_LINKS; uv from its own variable.
if [ -n "${PIP_FIND_LINKS:-}" ]; then export UV_FIND_LINKS=${UV_FIND_LINKS:-$PIP_FIND_LINKS}; fi
compile=()
[ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && compile=(--compile-bytecode)
install() {
  .venv/bin/python -m uv pip install --quiet "${compile[@]}" --python .venv/bin/python "$@" \
    || .venv/bin/python -m pip install --quiet "$@"
}
# The demo and the tests need dev: the pipeline's base install, the train extra (the loader over
# streaming and torch), and the test tools. torch/torchvision are pinned in train so this never
# re-resolves them (see STACK.md).
install -e '.[dev]'
# Without their dependencies: the MiniLM checkpoint (requirements-nodeps.txt says why), and
# dagster-postgres 0.29.27: 0.29.28 (the match for dagster 1.13.28) is not published, and 0.29.27
# works with 1.13.28 but pins dagster==1.13.27.
install --no-deps -r requirements-nodeps.txt dagster-postgres==0.29.27
