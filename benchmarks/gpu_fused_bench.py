"""The fused option against captions alone: cost and agreement, on this machine's GPU(s).

1. captions alone (Qwen3-VL, the H200 profile) on N images: steady images/s;
2. fused caption + label (same model, JSON structured output) on the same images: images/s,
   and the ratio to 1. (the cost of the label tokens and the grammar);
3. the separate text-only label pass (Qwen3-8B) over the fused captions: how often its label
   agrees with the fused one (overall and per label), and what the skipped pass would cost.

    PYTHONPATH=. python benchmarks/gpu_fused_bench.py --vl-model /models/Qwen3-VL-8B-Instruct \
        --label-model /models/Qwen3-8B --images /data/images --n 2000
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_caption_bench import load_rows, steady_rate  # noqa: E402
from gpu_profile_args import add_profile_args, overrides  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vl-model", required=True)
    p.add_argument("--label-model", required=True)
    p.add_argument("--images", help="folder of images (default: synthetic)")
    p.add_argument("--n", type=int, default=1000)
    add_profile_args(p)
    return p.parse_args(argv)


def timed(ds) -> tuple[list[dict], float, float]:
    start, stamps, rows = time.perf_counter(), [], []
    for row in ds.iter_rows():
        stamps.append(time.perf_counter())
        rows.append(row)
    return rows, len(rows) / (time.perf_counter() - start), steady_rate(stamps)


def main(argv=None) -> int:
    args = parse_args(argv)
    from prx_data.models.inference.gpu_env import gpu_environment_problems

    problems = gpu_environment_problems() if args.worker_env == "none" else []
    if problems:
        print("gpu_fused_bench cannot run here:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return 2
    import ray
    import torch

    from prx_data.models.captioning.config import VLLMCaptionerConfig
    from prx_data.models.captioning.vllm_ray import caption_dataset_vllm
    from prx_data.models.inference.gpu_env import WorkerEnv
    from prx_data.models.labeling.config import VLLMClassifierConfig
    from prx_data.models.labeling.vllm_ray import label_dataset_vllm

    replicas = args.replicas or max(1, torch.cuda.device_count())
    env = WorkerEnv(mode=args.worker_env)
    base = dict(model_source=args.vl_model, replicas=replicas, worker_env=env, **overrides(args))
    ray.init(ignore_reinit_error=True)
    images = load_rows(argparse.Namespace(images=args.images, n=args.n))
    ds = ray.data.from_items(images, override_num_blocks=max(4 * replicas, len(images) // 64 or 1))

    alone, _, alone_rate = timed(caption_dataset_vllm(ds, VLLMCaptionerConfig(**base)))
    fused, _, fused_rate = timed(caption_dataset_vllm(ds, VLLMCaptionerConfig(**base, fused_label=True)))
    ok = [r for r in fused if r["label"]]
    captions = ray.data.from_items([{"sample_id": r["sample_id"], "caption": r["caption"]} for r in ok])
    label_cfg = VLLMClassifierConfig(model_source=args.label_model, replicas=replicas, worker_env=env)
    separate, _, label_rate = timed(label_dataset_vllm(captions, label_cfg))
    by_id = {r["sample_id"]: r["label"] for r in separate}
    pairs = [(r["label"], by_id.get(r["sample_id"])) for r in ok]
    agree = sum(a == b for a, b in pairs)
    per_label = {
        lab: f"{sum(a == b for a, b in pairs if b == lab)}/{sum(1 for _, b in pairs if b == lab)}"
        for lab in sorted({b for _, b in pairs if b})
    }
    print(f"{len(images)} images, {replicas} replica(s)")
    print(f"captions alone : {alone_rate:8.2f} images/s/{replicas} GPU(s) ({sum(1 for r in alone if r['caption'])} ok)")
    print(f"fused          : {fused_rate:8.2f} images/s ({len(ok)} ok); cost ratio alone/fused = {alone_rate / fused_rate:.3f}")
    print(f"separate labels: {label_rate:8.2f} captions/s (the pass fused skips)")
    print(f"agreement      : {agree}/{len(pairs)} = {agree / max(1, len(pairs)):.3f}; per separate label {per_label}")
    print(f"fused labels   : {dict(Counter(a for a, _ in pairs))}; separate {dict(Counter(b for _, b in pairs))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
