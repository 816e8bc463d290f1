"""benchmarks/gpu_calibrate.py without a GPU: a clear "no GPU" exit 0, the CPU smoke of the same
code paths, and the performance model's arithmetic on assumed H200 rates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_calibrate.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_without_a_gpu_it_says_so_and_exits_0():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: run the calibration itself")
    proc = run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("no GPU: ") and "Traceback" not in proc.stderr


def test_cpu_smoke_runs_every_measurement_and_the_projection():
    pytest.importorskip("torch")
    proc = run("--cpu-smoke")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for expected in (
        "text layer GEMMs bf16",
        "text layer GEMMs fp8",
        "vision layer GEMMs fp8",
        "SDPA vision",
        "SDPA text causal",
        "TB/s",
        "captions fp8 (default)",
        "labels bf16",
        "cpu smoke done",
    ):
        assert expected in out, (expected, out)


def test_the_model_on_assumed_h200_rates_lands_where_the_estimates_are():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_calibrate as cal
    from qwen_configs import text_dims, vision_dims

    text, vision = text_dims("real", vl=True), vision_dims("real")
    assert round(text.layers * text.linear_params_per_layer() / 1e9, 2) == 6.95  # Qwen3-8B without embeddings
    assert vision.patches(1024) == 4096
    rates = cal.assumed_rates(text, vision)
    args = cal.parse_args([])
    p = {w.name: cal.project(w, rates, text, vision, efficiency=args.engine_efficiency) for w in cal.workloads(args)}
    default, cap768 = p["captions fp8 (default)"]["per_s"], p["captions fp8, 768-token cap"]["per_s"]
    # The arithmetic: 22-34 captions/s and 205-335 labels/s per H200 with FP8.
    assert 18 < default < 40 and default < cap768
    assert p["captions bf16"]["per_s"] < p["captions fp8, vision bf16"]["per_s"] < default
    assert 150 < p["labels fp8 (default)"]["per_s"] < 400
    assert p["labels bf16"]["per_s"] < p["labels fp8 (default)"]["per_s"]
    # The KV cache holds the full profile batch at these lengths.
    assert p["captions fp8 (default)"]["batch"] == 512
