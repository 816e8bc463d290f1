"""Caption N images with the vLLM backend (Ray Data + vLLM) on this machine's GPU(s).

Prints images/s (end to end, and steady state after the engine is up) and the median word
count of the captions. Reference: about 20 images/s per H200 for Qwen3-VL-8B-Instruct.

Run it from the GPU worker environment (deployments/gpu-worker/README.md), from the repo root:

    PYTHONPATH=. python benchmarks/gpu_caption_bench.py --model /models/Qwen3-VL-8B-Instruct \
        --images /data/images --n 2000

Without --images it captions synthetic JPEGs (shapes and gradients): fine for throughput,
meaningless as captions.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
from collections import Counter

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from pathlib import Path

from gpu_profile_args import add_profile_args, overrides, print_profile  # noqa: E402
from weightless import add_weightless_args  # noqa: E402

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="local checkpoint dir or object-storage URI (not with --weightless)")
    p.add_argument("--model-id", default="Qwen/Qwen3-VL-8B-Instruct")
    p.add_argument("--images", help="folder of images (searched recursively)")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--max-pixels", type=int, default=1024 * 32 * 32)
    p.add_argument("--show", type=int, default=3, help="print this many captions")
    add_profile_args(p)
    add_weightless_args(p)
    args = p.parse_args(argv)
    if not args.model and not args.weightless:
        p.error("--model is required (or --weightless)")
    return args


def synthetic_jpeg(seed: int) -> bytes:
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    w, h = rng.choice([(1024, 768), (768, 1024), (1280, 720), (1024, 1024)])
    image = Image.new("RGB", (w, h), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        box = [x0, y0, x0 + rng.randrange(50, 400), y0 + rng.randrange(50, 400)]
        colour = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=colour)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def load_rows(args: argparse.Namespace) -> list[dict]:
    if args.images:
        found = Path(args.images).rglob("*")
        paths = sorted(p for p in found if p.suffix.lower() in IMAGE_SUFFIXES)
        if not paths:
            sys.exit(f"no images under {args.images}")
        paths = (paths * (args.n // len(paths) + 1))[: args.n]
        return [{"sample_id": f"{i}", "image": p.read_bytes()} for i, p in enumerate(paths)]
    return [{"sample_id": f"{i}", "image": synthetic_jpeg(i)} for i in range(args.n)]


def steady_rate(stamps: list[float]) -> float:
    """Items/s from the first 5% of outputs (the engine is loaded and warm) to the last."""
    n = len(stamps)
    k = max(1, n // 20)
    if n <= k or stamps[-1] <= stamps[k - 1]:
        return float("nan")
    return (n - k) / (stamps[-1] - stamps[k - 1])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.weightless:
        # The published config, dummy weights, forced output length (benchmarks/weightless.py).
        import weightless

        return weightless.caption_main(args, overrides(args))
    # Check before importing Ray: a missing vLLM or GPU should be one clear line, not a
    # traceback from inside a Ray actor minutes later.
    from prx_data.models.inference.gpu_env import gpu_environment_problems

    problems = gpu_environment_problems() if args.worker_env == "none" else []
    if problems:
        print("gpu_caption_bench cannot run here:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return 2

    import ray
    import torch

    from prx_data.models.captioning.config import VLLMCaptionerConfig
    from prx_data.models.captioning.images import ImageBudget
    from prx_data.models.captioning.vllm_ray import caption_dataset_vllm
    from prx_data.models.inference.gpu_env import WorkerEnv

    replicas = args.replicas or max(1, torch.cuda.device_count())
    cfg = VLLMCaptionerConfig(
        model_source=args.model,
        model_id=args.model_id,
        replicas=replicas,
        image=ImageBudget(max_pixels=args.max_pixels),
        worker_env=WorkerEnv(mode=args.worker_env),
        **overrides(args),
    )
    from prx_data.models.captioning.vllm_ray import caption_engine_kwargs

    print_profile(cfg, caption_engine_kwargs(cfg))
    rows = load_rows(args)
    ray.init(ignore_reinit_error=True)
    if not ray.cluster_resources().get("GPU"):
        print("gpu_caption_bench cannot run here: the Ray cluster has no GPU", file=sys.stderr)
        return 2
    ds = ray.data.from_items(rows, override_num_blocks=max(4 * replicas, len(rows) // 64 or 1))

    start = time.perf_counter()
    stamps, results = [], []
    for row in caption_dataset_vllm(ds, cfg).iter_rows():
        stamps.append(time.perf_counter())
        results.append(row)
    total = time.perf_counter() - start

    n = len(results)
    steady = steady_rate(stamps)
    captions = [r["caption"] for r in results if r["caption"]]
    words = [len(c.split()) for c in captions]
    errors = Counter(r["caption_error"].split(":", 1)[0] for r in results if r["caption_error"])
    print(f"model {args.model_id} | {replicas} replica(s) | {n} images")
    print(f"end to end   : {n / total:8.2f} images/s ({total:.1f} s, engine start included)")
    print(
        f"steady state : {steady:8.2f} images/s per {replicas} GPU(s) "
        f"= {steady / replicas:.2f} images/s/GPU (PRX ~20 on an H200; target >= 30)"
    )
    median = statistics.median(words) if words else "n/a"
    print(f"captions ok  : {len(captions)}/{n}; median words {median}")
    print(f"errors       : {dict(errors) or 'none'}")
    for r in results[: args.show]:
        print(f"- [{r['sample_id']}] {r['caption'] or r['caption_error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
