"""The real vLLM engine, on CPU, through Dagster: captions and caption_labels with backend vllm.

The Dagster side runs here (this venv: transformers < 5); the vLLM stages run in Ray workers
whose interpreter is the separate CPU vLLM environment (``WorkerEnv(mode="python")`` = Ray's
``py_executable``), built and cached by ``scripts/vllm_cpu_env.sh``. ``scripts/test.sh`` sets
``PRX_VLLM_CPU_PYTHON`` to its python, or to ``unavailable: <why>`` when it could not be built:
then these tests fail (CI must not pass without them). Unset (a developer's plain pytest), they
skip. Tiny random Qwen3-VL / Qwen3 checkpoints are built by the tests in that environment.

What they hold: rows written for every usable row, a per-row error for a bad image, labels
within LABELS by structured output, and a run killed mid-way resumed from its staged rows.

Also here: the weightless benchmarks (``--weightless``) at ``--scale tiny``, the same code path a
GPU node runs at the published Qwen3-VL-8B / Qwen3-8B dims, so they cannot rot. One file, so one
xdist worker runs every vLLM engine of the suite one after the other: two at once (a file each)
took 2x as long each on 2 cores (a caption bench 138 -> 344 s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import lance
import pyarrow as pa
import pytest

from prx_data.core.paths import StoragePaths
from prx_data.core.schema import LABELS, raw_schema
from prx_data.core.settings import get_settings
from prx_data.models.inference.stage_timings import TIMINGS_VAR
from prx_data_tests.conftest import materializations, run_source
from prx_data_tests.images import jpeg, png

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
SOURCE = "cpu_vllm"
RAW, CAP, LAB = dg.AssetKey("raw_samples"), dg.AssetKey("captions"), dg.AssetKey("caption_labels")


# Read at import: the data_root fixture clears every PRX_* variable for the test's settings.
_VLLM_CPU_PYTHON = os.environ.get("PRX_VLLM_CPU_PYTHON")


def vllm_python() -> str:
    value = _VLLM_CPU_PYTHON
    if not value:
        if os.environ.get("CI"):
            pytest.fail("PRX_VLLM_CPU_PYTHON is not set in CI: run the suite through scripts/test.sh")
        pytest.skip("PRX_VLLM_CPU_PYTHON not set (scripts/test.sh builds the CPU vLLM env and sets it)")
    if not Path(value).is_file():
        pytest.fail(f"the CPU vLLM environment is not usable: {value}")
    return value


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    python = vllm_python()
    out = tmp_path_factory.mktemp("tiny-models")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([python, "-m", "prx_data_tests.models.tiny_models", str(out)], check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    return {"vl": str(out / "qwen3-vl"), "text": str(out / "qwen3")}


def engine_settings(python: str) -> dict:
    """What the CPU engine needs besides the H200 profile: no GPU-only settings, small steps,
    a fraction of a CPU per Ray stage actor (the test head has two CPUs)."""
    return {
        "device": "cpu",
        "quantization": None,
        "kv_cache_dtype": "auto",
        "max_num_seqs": 8,
        "max_num_batched_tokens": 2048,
        "max_model_len": 2048,
        "batch_size": 4,
        "max_concurrent_batches": 2,
        "cpu_stage_concurrency": 1,
        "cpu_stage_num_cpus": 0.25,
        "extra_engine_kwargs": {"enforce_eager": True},
        "worker_env": {"mode": "python", "python": python, "env_vars": {"PYTHONPATH": str(REPO)}},
    }


def captioner(models: dict, python: str, **over) -> dict:
    return {
        "backend": "vllm",
        "model_source": models["vl"],
        "model_id": "tiny-qwen3-vl",
        "image": {"min_pixels": 32 * 32, "max_pixels": 64 * 64},
        # Random weights write noise: a space ends the "caption", the guards let a word pass.
        "sampling": {"max_tokens": 12, "stop": [" "], "seed": 0},
        "guards": {"min_words": 0, "max_words": 10_000, "require_final_punctuation": False},
        **engine_settings(python),
        **over,
    }


def classifier(models: dict, python: str) -> dict:
    return {"backend": "vllm", "model_source": models["text"], "model_id": "tiny-qwen3", **engine_settings(python)}


def write_table(uri: str, n_good: int) -> list[str]:
    """A small raw table: photos (one PNG with a transparent area) and one row whose stored bytes
    are not an image (ingest validated it; the blob went bad since)."""
    from PIL import Image

    schema = raw_schema()
    rgba = Image.new("RGBA", (96, 64), (0, 0, 0, 0))
    rgba.paste((200, 30, 30, 255), (20, 10, 70, 50))
    images = [jpeg(80 + 8 * i, 64, seed=i) for i in range(n_good - 1)] + [png(rgba), b"\x89PNG not really"]
    rows = []
    for i, data in enumerate(images):
        rows.append(
            {
                "sample_id": f"s{i:02d}",
                "source": SOURCE,
                "source_key": f"k{i}",
                "image": data,
                "image_format": "JPEG",
                "image_sha256": f"{i:064x}",
                "width": 64,
                "height": 64,
                "source_caption": None,
                "source_url": None,
                "license": "cc0",
                "status": "ok",
                "error": None,
                "ingested_at": pa.scalar(0, pa.timestamp("us", tz="UTC")).as_py(),
            }
        )
    lance.write_dataset(pa.Table.from_pylist(rows, schema=schema), uri, schema=schema)
    return [r["sample_id"] for r in rows]


KILL_AFTER_FIRST_STAGED_BATCH = textwrap.dedent("""
    import json, os, signal, sys
    import ray
    from prx_data.stages.caption_stage import compute_captions

    # The session's shared test head: a Ray this process started would outlive the SIGKILL.
    ray.init(address=os.environ["PRX_RAY_ADDRESS"], log_to_driver=False)

    def progress(done, total):
        # SIGKILL: no cleanup, no merge; the staged batches are all that survives.
        os.kill(os.getpid(), signal.SIGKILL)

    compute_captions(sys.argv[1], json.loads(sys.argv[2]), progress=progress)
""")


def _meta(result, asset):
    (mat,) = materializations(result, asset)
    return {k: v.value for k, v in mat.metadata.items()}


def test_captions_and_labels_with_the_real_engine_resuming_a_killed_run(data_root, instance, monkeypatch, tiny_models):
    python = vllm_python()
    if not os.environ.get("PRX_RAY_ADDRESS"):
        pytest.skip("needs the session's shared Ray head (PRX_TEST_NO_SHARED_RAY is set)")
    uri = StoragePaths.from_settings(get_settings()).raw_table(SOURCE)
    ids = write_table(uri, n_good=8)
    cap = captioner(tiny_models, python, staging_rows=3)

    # A run killed after its first staged batch of 3 rows.
    killed = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_FIRST_STAGED_BATCH, uri, json.dumps(cap)],
        env={**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=900,
    )
    assert killed.returncode == -9
    staged = lance.dataset(uri.removesuffix(".lance") + ".staging-caption.lance")
    assert staged.count_rows() == 3
    assert "caption" not in lance.dataset(uri).schema.names or lance.dataset(uri).count_rows("caption IS NOT NULL") == 0

    timings = data_root / "stage-timings.txt"
    monkeypatch.setenv(TIMINGS_VAR, str(timings))
    monkeypatch.setenv("PRX_CAPTIONER", json.dumps(cap))
    monkeypatch.setenv("PRX_CLASSIFIER", json.dumps(classifier(tiny_models, python)))
    get_settings.cache_clear()
    from prx_data.definitions import build_defs

    result = run_source(build_defs(), instance, SOURCE, selection=[CAP, LAB])
    assert result.success
    # Ray Data's per-operator timings of both runs (pytest -s shows them): a CPU stage starved
    # of CPUs shows as a long run with little wall time of its own.
    recorded = timings.read_text()
    print("\n" + recorded)
    assert "== captions" in recorded and "== labels" in recorded and "ChatTemplate" in recorded, recorded
    cap_meta, lab_meta = _meta(result, "captions"), _meta(result, "caption_labels")
    # The staged rows were kept, not sent to the engine again.
    assert cap_meta["resumed_from_staging"] == 3
    assert cap_meta["captioned"] + cap_meta["failed"] == len(ids) - 3

    rows = {
        r["sample_id"]: r
        for r in lance.dataset(uri)
        .to_table(columns=["sample_id", "caption", "caption_model", "caption_error", "label", "label_model", "label_error"])
        .to_pylist()
    }
    assert set(rows) == set(ids)
    assert all(r["caption_model"] == "tiny-qwen3-vl" for r in rows.values())
    bad = rows[ids[-1]]
    assert bad["caption"] is None and bad["caption_error"].startswith("bad_image")
    good = [r for sid, r in rows.items() if sid != ids[-1]]
    # The engine answered every decodable image (the transparent PNG too): text, never an
    # engine failure.
    assert all(r["caption_error"] is None or not r["caption_error"].startswith(("inference_error", "bad_image")) for r in good)
    captioned = [r for r in good if r["caption"] is not None]
    assert len(captioned) >= len(good) // 2, good
    # Labels by structured output: every captioned row gets one of LABELS, and only those rows.
    assert lab_meta["labelled"] == len(captioned)
    assert all(r["label"] in LABELS and r["label_model"] == "tiny-qwen3" for r in captioned)
    assert all(r["label"] is None for r in rows.values() if r["caption"] is None)


@pytest.mark.parametrize(
    "script, extra, unit",
    [
        ("gpu_caption_bench.py", ["--caption-tokens", "16"], "captions"),
        ("gpu_label_bench.py", [], "labels"),
    ],
)
def test_weightless_bench_runs_on_vllm_cpu_at_tiny_scale(script, extra, unit, tmp_path_factory):
    python = vllm_python()
    # Both benches build the same two models: the second reuses the first one's folder.
    models = tmp_path_factory.getbasetemp() / "weightless-models"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PRX_RAY_ADDRESS")}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / script),
            "--weightless",
            "--scale",
            "tiny",
            "--device",
            "cpu",
            "--worker-python",
            python,
            "--n",
            "4",
            "--models-dir",
            str(models),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=540,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    out = proc.stdout
    # The engine ran with dummy weights and the profile's engine kwargs.
    assert '"load_format": "dummy"' in out
    assert "errors       : 0" in out and f"{unit}/s" in out
    prompt_line = re.search(r"prompt tokens: median (\d+)", out)
    output_line = re.search(r"output tokens: median (\d+) \(forced: (\d+)\)", out)
    assert prompt_line and output_line, out[-2000:]
    prompt, generated = int(prompt_line.group(1)), int(output_line.group(1))
    if unit == "captions":
        assert generated == 16  # ignore_eos: exactly the forced length
        assert prompt > 250  # system prompt + image tokens
    else:
        assert 1 <= generated <= 3 and prompt > 200  # label prompt + a ~150-word caption
