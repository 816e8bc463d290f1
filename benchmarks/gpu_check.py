"""End-to-end check of the vLLM path on tiny random checkpoints: the caption and label stages
with backend vllm on a small Lance table, results checked, rows/s and engine config printed.

Run by ``benchmarks/gpu_check.sh`` inside the vLLM worker environment (the driver is that
environment, so ``worker_env`` is ``none``). ``--device cpu`` runs vLLM's CPU build instead.
Random weights make the texts noise; what is checked is the plumbing: every row written, a bad
image as a per-row error, labels within LABELS by structured output, the H200 profile applied.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", required=True, help="folder with qwen3-vl/ and qwen3/ (tiny_models.py)")
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    p.add_argument("--n", type=int, default=None, help="images (default: 512 on GPU, 8 on CPU)")
    p.add_argument("--work", default=None, help="where the table goes (default: a temp dir)")
    return p.parse_args(argv)


def write_table(uri: str, n: int) -> list[str]:
    from prx_data.core.schema import raw_schema
    from prx_data_tests.images import jpeg

    schema = raw_schema()
    images = [jpeg(96 + 8 * (i % 16), 64 + 8 * (i % 8), seed=i) for i in range(n - 1)] + [b"not an image"]
    rows = [
        {
            "sample_id": f"s{i:05d}",
            "source": "check",
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
        for i, data in enumerate(images)
    ]
    import lance

    lance.write_dataset(pa.Table.from_pylist(rows, schema=schema), uri, schema=schema)
    return [r["sample_id"] for r in rows]


def configs(models: Path, device: str) -> tuple[dict, dict]:
    """The H200 profile (the config defaults) with the tiny checkpoints; on CPU without the
    GPU-only settings and with fractions of a CPU per Ray stage actor."""
    common: dict = {"device": device}
    if device == "cpu":
        common.update(
            quantization=None,
            kv_cache_dtype="auto",
            max_num_seqs=8,
            max_num_batched_tokens=2048,
            max_model_len=2048,
            batch_size=4,
            max_concurrent_batches=2,
            cpu_stage_concurrency=1,
            cpu_stage_num_cpus=0.25,
            extra_engine_kwargs={"enforce_eager": True},
        )
    else:
        # The tiny checkpoints hold 8192 positions; the profile's token budgets stay as they are.
        common.update(max_model_len=4096)
    caption = {
        "backend": "vllm",
        "model_source": str(models / "qwen3-vl"),
        "model_id": "tiny-qwen3-vl",
        "image": {"min_pixels": 32 * 32, "max_pixels": 128 * 128},
        "sampling": {"max_tokens": 12, "stop": [" "], "seed": 0},
        "guards": {"min_words": 0, "max_words": 10_000, "require_final_punctuation": False},
        **common,
    }
    label = {"backend": "vllm", "model_source": str(models / "qwen3"), "model_id": "tiny-qwen3", **common}
    if device == "gpu":
        label["max_model_len"] = 2048
    return caption, label


def main(argv=None) -> int:
    args = parse_args(argv)
    from prx_data.models.inference.gpu_env import gpu_environment_problems

    problems = gpu_environment_problems(require_gpu=args.device == "gpu")
    if problems:
        print("gpu_check cannot run here:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return 2
    import lance
    import ray

    from prx_data.core.schema import LABELS
    from prx_data.models.captioning.config import VLLMCaptionerConfig
    from prx_data.models.captioning.factory import parse_captioner_config
    from prx_data.models.captioning.vllm_ray import caption_engine_kwargs
    from prx_data.models.inference.vllm_engine import engine_kwargs
    from prx_data.models.labeling.config import VLLMClassifierConfig
    from prx_data.models.labeling.factory import parse_classifier_config
    from prx_data.stages.caption_stage import compute_captions
    from prx_data.stages.label_stage import compute_labels

    n = args.n or (512 if args.device == "gpu" else 8)
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-check-"))
    uri = str(work / "check.lance")
    ids = write_table(uri, n)
    cap_cfg, lab_cfg = (
        parse_captioner_config(configs(Path(args.models), args.device)[0]),
        parse_classifier_config(configs(Path(args.models), args.device)[1]),
    )
    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    print(f"device {args.device} | {n} rows | ray resources {ray.cluster_resources()}")
    assert isinstance(cap_cfg, VLLMCaptionerConfig) and isinstance(lab_cfg, VLLMClassifierConfig), "the GPU check runs the vLLM backends"
    print("caption engine:", json.dumps(caption_engine_kwargs(cap_cfg), sort_keys=True))
    print("label engine:  ", json.dumps(engine_kwargs(lab_cfg), sort_keys=True))

    t0 = time.perf_counter()
    cap = compute_captions(uri, cap_cfg)
    t1 = time.perf_counter()
    lab = compute_labels(uri, lab_cfg)
    t2 = time.perf_counter()

    rows = {
        r["sample_id"]: r
        for r in lance.dataset(uri)
        .to_table(columns=["sample_id", "caption", "caption_model", "caption_error", "label", "label_error"])
        .to_pylist()
    }
    failures = []
    if set(rows) != set(ids) or any(r["caption_model"] != "tiny-qwen3-vl" for r in rows.values()):
        failures.append("not every row has a caption result")
    if not (rows[ids[-1]]["caption_error"] or "").startswith("bad_image"):
        failures.append(f"bad image row: {rows[ids[-1]]}")
    engine_errors = [r for r in rows.values() if (r["caption_error"] or "").startswith("inference_error")]
    if engine_errors:
        failures.append(f"{len(engine_errors)} engine failures, e.g. {engine_errors[0]['caption_error']}")
    captioned = [r for r in rows.values() if r["caption"] is not None]
    if len(captioned) < (n - 1) // 2:
        failures.append(f"only {len(captioned)} of {n - 1} images captioned")
    if any(r["label"] not in LABELS for r in captioned):
        failures.append("a captioned row has no label in LABELS")
    # Engine start included: on tiny models these are plumbing rates, not model throughput.
    print(f"captions: {cap.processed} rows in {t1 - t0:.1f} s = {cap.processed / (t1 - t0):.2f} rows/s ({len(captioned)} captioned)")
    print(f"labels:   {lab.processed} rows in {t2 - t1:.1f} s = {lab.processed / (t2 - t1):.2f} rows/s")
    ray.shutdown()
    if failures:
        print("gpu_check FAILED:\n  - " + "\n  - ".join(failures), file=sys.stderr)
        return 1
    print("gpu_check OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
