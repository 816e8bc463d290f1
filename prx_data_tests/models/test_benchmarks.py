"""The GPU benchmarks refuse to start, with a clear reason, where there is no vLLM or GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prx_data.models.inference.gpu_env import gpu_environment_problems

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "script, model_args",
    [
        ("gpu_caption_bench.py", ["--model", "/nonexistent"]),
        ("gpu_label_bench.py", ["--model", "/nonexistent"]),
        ("gpu_fused_bench.py", ["--vl-model", "/nonexistent", "--label-model", "/nonexistent"]),
        ("gpu_check.py", ["--models", "/nonexistent"]),
    ],
)
def test_benchmark_fails_clearly_without_gpu_or_vllm(script, model_args):
    if not gpu_environment_problems():
        pytest.skip("this machine has vLLM and a GPU: run the benchmark itself")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *model_args, "--n", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "cannot run here" in proc.stderr
    assert "vLLM" in proc.stderr or "GPU" in proc.stderr
    assert "Traceback" not in proc.stderr
