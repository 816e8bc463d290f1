"""The weightless mode of gpu_caption_bench.py / gpu_label_bench.py (``--weightless``).

Builds the model folder (benchmarks/weightless_model.py) in the vLLM environment, then runs the
pipeline's own request building and Ray Data processor with ``load_format: dummy`` (random
weights, FP8 on the fly when the profile asks) and, for captions, ``ignore_eos`` with
``max_tokens`` = the measured caption length, so every request decodes exactly that many
tokens. Prints the prompt and output lengths vLLM saw and the steady rate.
``--scale tiny`` is the same path at toy width on vLLM's CPU build (CI).
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CAPTION_TOKENS = 180  # measured caption length (issue #26); the caption guard aims at <= 200 words
# The published Qwen tokenizer's typical English rate, for reading the printed lengths.
QWEN_CHARS_PER_TOKEN = 4.4


def add_weightless_args(p) -> None:
    p.add_argument("--weightless", action="store_true", help="no checkpoint: the published config with dummy weights (load_format dummy)")
    p.add_argument("--scale", choices=["real", "tiny"], default="real", help="tiny: toy widths for vLLM's CPU build")
    p.add_argument("--worker-python", help="the vLLM environment's python for the Ray workers (worker_env python)")
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    p.add_argument("--caption-tokens", type=int, default=CAPTION_TOKENS, help="forced caption length (ignore_eos)")
    p.add_argument(
        "--models-dir", type=Path, help="keep the built model folder here and reuse it on the next run (default: a fresh temp dir)"
    )


def build_models(args) -> Path:
    """The folder is written by the vLLM environment's transformers (5.x), the one that reads it.
    Both models are built at once; with --models-dir the caption and label benches share them."""
    if args.models_dir is not None:
        out = args.models_dir / args.scale
        if (out / ".complete").is_file():
            return out
        out.mkdir(parents=True, exist_ok=True)
    else:
        out = Path(tempfile.mkdtemp(prefix="prx-weightless-"))
    python = args.worker_python or sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run(
        [python, str(HERE / "weightless_model.py"), str(out), "--scale", args.scale], check=True, env=env, stdout=subprocess.DEVNULL
    )
    (out / ".complete").touch()
    return out


def engine_overrides(args) -> dict[str, Any]:
    """What the weightless mode adds to the profile: dummy weights; on CPU the CPU engine's
    settings (as in test_vllm_cpu_engine.py)."""
    over: dict[str, Any] = {"extra_engine_kwargs": {"load_format": "dummy"}}
    if args.device == "cpu":
        over.update(
            device="cpu",
            quantization=None,
            kv_cache_dtype="auto",
            max_num_seqs=8,
            max_num_batched_tokens=4096,
            max_model_len=4096,
            batch_size=4,
            max_concurrent_batches=2,
            cpu_stage_concurrency=1,
            cpu_stage_num_cpus=0.25,
            extra_engine_kwargs={"load_format": "dummy", "enforce_eager": True},
        )
    if args.worker_python:
        over["worker_env"] = {"mode": "python", "python": args.worker_python, "env_vars": {"PYTHONPATH": str(ROOT)}}
    return over


def forced_length(task, max_tokens: int):
    """The task with every request decoding exactly ``max_tokens`` (random weights would stop
    at a random EOS)."""
    request = task.request

    def forced(row):
        req = request(row)
        req.sampling.update(ignore_eos=True, max_tokens=max_tokens)
        return req

    task.request = forced
    return task


def _lengths(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "sample_id": row.get("sample_id"),
        "n_in": int(row.get("num_input_tokens") or 0),
        "n_out": int(row.get("num_generated_tokens") or 0),
        "error": row.get("__inference_error__") or None,
    }


def run(ds, task, cfg, *, engine: dict, multimodal: bool, chat_template_kwargs: dict | None = None) -> list[dict]:
    """The pipeline's processor config and preprocess, a postprocess that keeps vLLM's token
    counts; returns one row per request with a completion time."""
    from ray.data.llm import build_processor

    from prx_data.models.inference.vllm_engine import preprocess, processor_config

    processor = build_processor(
        processor_config(cfg, engine=engine, multimodal=multimodal, chat_template_kwargs=chat_template_kwargs),
        preprocess=functools.partial(preprocess, task=task),
        postprocess=_lengths,
        preprocess_map_kwargs={"num_cpus": cfg.cpu_stage_num_cpus},
        postprocess_map_kwargs={"num_cpus": cfg.cpu_stage_num_cpus},
    )
    rows = []
    for row in processor(ds).iter_rows():
        rows.append({**row, "t": time.perf_counter()})
    return rows


def report(rows: list[dict], started: float, *, unit: str, prompt_chars: int, expected_out: int) -> dict[str, float]:
    from gpu_caption_bench import steady_rate

    errors = [r["error"] for r in rows if r["error"]]
    n_in = [r["n_in"] for r in rows if not r["error"]]
    n_out = [r["n_out"] for r in rows if not r["error"]]
    total = time.perf_counter() - started
    steady = steady_rate(sorted(r["t"] for r in rows))
    med_in = statistics.median(n_in) if n_in else 0
    print(
        f"prompt tokens: median {med_in:.0f} (min {min(n_in, default=0)}, max {max(n_in, default=0)}); "
        f"text part {prompt_chars} chars = ~{prompt_chars / QWEN_CHARS_PER_TOKEN:.0f} tokens with Qwen's tokenizer "
        f"(assumed {QWEN_CHARS_PER_TOKEN} chars/token)"
    )
    print(f"output tokens: median {statistics.median(n_out) if n_out else 0:.0f} (forced: {expected_out})")
    print(f"errors       : {len(errors)}{' e.g. ' + str(errors[0])[:200] if errors else ''}")
    print(f"end to end   : {len(rows) / total:8.2f} {unit}/s ({total:.1f} s, engine start included)")
    print(f"steady state : {steady:8.2f} {unit}/s")
    return {"n": len(rows), "errors": len(errors), "median_in": med_in, "steady": steady}


def _ray_init(args) -> None:
    import ray

    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    if args.device == "gpu" and not ray.cluster_resources().get("GPU"):
        sys.exit("weightless bench cannot run here: the Ray cluster has no GPU (--device cpu for vLLM's CPU build)")


def caption_main(args, extra_overrides: dict) -> int:
    import ray
    from gpu_caption_bench import synthetic_jpeg
    from gpu_profile_args import print_profile

    from prx_data.models.captioning.config import VLLMCaptionerConfig
    from prx_data.models.captioning.images import ImageBudget
    from prx_data.models.captioning.prompt import SYSTEM_PROMPT, USER_PROMPT
    from prx_data.models.captioning.task import CaptionTask
    from prx_data.models.captioning.vllm_ray import caption_engine_kwargs

    models = build_models(args)
    over = {**engine_overrides(args), **extra_overrides}
    if "extra_engine_kwargs" in extra_overrides:  # --set extra_engine_kwargs=... keeps the dummy weights
        over["extra_engine_kwargs"] = {**engine_overrides(args)["extra_engine_kwargs"], **extra_overrides["extra_engine_kwargs"]}
    max_pixels = args.max_pixels if args.scale == "real" else min(args.max_pixels, 64 * 32 * 32)
    cfg = VLLMCaptionerConfig(
        model_source=str(models / "qwen3-vl"),
        model_id=f"weightless-qwen3-vl-{args.scale}",
        replicas=args.replicas or 1,
        image=ImageBudget(min_pixels=min(ImageBudget().min_pixels, max_pixels), max_pixels=max_pixels),
        **over,
    )
    engine = caption_engine_kwargs(cfg)
    print_profile(cfg, engine)
    task = forced_length(CaptionTask.from_config(cfg), args.caption_tokens)
    _ray_init(args)
    rows = [{"sample_id": f"{i}", "image": synthetic_jpeg(i)} for i in range(args.n)]
    ds = ray.data.from_items(rows, override_num_blocks=max(4, len(rows) // 64 or 1))
    print(
        f"weightless captions: scale {args.scale}, {args.n} images, <= {max_pixels // 1024} image tokens, "
        f"{args.caption_tokens} output tokens forced"
    )
    started = time.perf_counter()
    out = run(ds, task, cfg, engine=engine, multimodal=True)
    stats = report(out, started, unit="captions", prompt_chars=len(SYSTEM_PROMPT) + len(USER_PROMPT), expected_out=args.caption_tokens)
    return 0 if stats["n"] == args.n and not stats["errors"] else 1


def label_main(args, extra_overrides: dict) -> int:
    import random

    import ray
    from gpu_label_bench import synthetic_caption
    from gpu_profile_args import print_profile

    from prx_data.models.inference.vllm_engine import engine_kwargs
    from prx_data.models.labeling.config import VLLMClassifierConfig
    from prx_data.models.labeling.prompt import SYSTEM_PROMPT
    from prx_data.models.labeling.task import NO_THINKING, LabelTask

    models = build_models(args)
    over = {**engine_overrides(args), **extra_overrides}
    if args.device == "cpu":
        over.update(max_model_len=2048, max_num_batched_tokens=2048)
    cfg = VLLMClassifierConfig(
        model_source=str(models / "qwen3"), model_id=f"weightless-qwen3-{args.scale}", replicas=args.replicas or 1, **over
    )
    engine = engine_kwargs(cfg)
    print_profile(cfg, engine)
    _ray_init(args)
    rng = random.Random(0)
    captions = [synthetic_caption(rng) for _ in range(args.n)]
    ds = ray.data.from_items(
        [{"sample_id": str(i), "caption": c} for i, c in enumerate(captions)], override_num_blocks=max(4, len(captions) // 1000 or 1)
    )
    # Labels keep their structured choice (1-3 tokens, as in production): no forced length.
    task = LabelTask(cfg.model_id, cfg.max_tokens)
    print(f"weightless labels: scale {args.scale}, {args.n} captions of ~{statistics.mean(len(c) for c in captions):.0f} chars")
    started = time.perf_counter()
    out = run(ds, task, cfg, engine=engine, multimodal=False, chat_template_kwargs=NO_THINKING)
    stats = report(
        out, started, unit="labels", prompt_chars=len(SYSTEM_PROMPT) + int(statistics.mean(map(len, captions))), expected_out=cfg.max_tokens
    )
    return 0 if stats["n"] == args.n and not stats["errors"] else 1
