#!/usr/bin/env bash
# The test command: install everything, start the services the tests need, run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode is written as modules are first imported, so only what the suite imports is compiled,
# once: with PYTHONDONTWRITEBYTECODE set (as on CI), every process compiled prx_data (an editable
# install, never precompiled) again, and the installs had to precompile all of site-packages.
unset PYTHONDONTWRITEBYTECODE
bash scripts/bootstrap.sh
bash scripts/system_packages.sh
bash scripts/services.sh >/dev/null || echo "services.sh: PostgreSQL unavailable; its tests will skip" >&2
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 DAGSTER_DISABLE_TELEMETRY=1
# The real vLLM engine on CPU (prx_data_tests/models/test_vllm_cpu_engine.py) runs its Ray
# workers in a separate, cached environment; when it cannot be built the test fails, never skips.
PRX_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh) || PRX_VLLM_CPU_PYTHON="unavailable: scripts/vllm_cpu_env.sh failed"
export PRX_VLLM_CPU_PYTHON
# Two workers, a file each at a time (module fixtures stay shared within a file): most tests
# wait on processes they start (Ray, Dagster, a browser), so two overlap well on 2 cores (three
# were no faster: 21:12 against 19:34-21:35). Files run in the order conftest.py gives them
# (the slowest first), not xdist's default (most tests first), which left the slow few-test
# files to one worker at the end.
workers=${PRX_TEST_WORKERS:-2}
parallel=()
[ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
exec .venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@"
