"""Label N captions visual/text/nsfw with the vLLM backend (Ray Data + vLLM, Qwen3-8B).

Prints captions/s (end to end, and steady state) and the label counts. Reference: about 200
captions/s per GPU.

Run it from the GPU worker environment (deployments/gpu-worker/README.md), from the repo root:

    PYTHONPATH=. python benchmarks/gpu_label_bench.py --model /models/Qwen3-8B --n 20000

Captions come from --captions (a .jsonl or .parquet file with a ``caption`` column) or are
synthesized at the length of real VLM captions (~150 words).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from gpu_profile_args import add_profile_args, overrides, print_profile  # noqa: E402
from weightless import add_weightless_args  # noqa: E402

SUBJECTS = [
    "a golden retriever",
    "a red bicycle",
    "an old stone bridge",
    "a bowl of ramen",
    "a screenshot of a settings page",
    "a printed invoice",
    "a presentation slide",
    "a woman in a blue coat",
    "a mountain lake",
    "a city street at night",
]
DETAILS = [
    "in the centre of the frame",
    "on the left side",
    "in the background",
    "under soft diffuse light",
    "with warm orange tones",
    "on a wooden table",
    "next to a white wall",
    "seen from a low angle",
    "with a shallow depth of field",
    "covered in small printed text",
    "with a grey concrete floor",
    "in bright sunlight",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="local checkpoint dir or object-storage URI (not with --weightless)")
    p.add_argument("--model-id", default="Qwen/Qwen3-8B")
    p.add_argument("--captions", help=".jsonl or .parquet with a caption column")
    p.add_argument("--n", type=int, default=10000)
    add_profile_args(p)
    add_weightless_args(p)
    args = p.parse_args(argv)
    if not args.model and not args.weightless:
        p.error("--model is required (or --weightless)")
    return args


def synthetic_caption(rng: random.Random) -> str:
    sentences: list[str] = []
    while sum(len(s.split()) for s in sentences) < 150:
        sentences.append(f"The image shows {rng.choice(SUBJECTS)} {rng.choice(DETAILS)}, {rng.choice(DETAILS)} and {rng.choice(DETAILS)}.")
    return " ".join(sentences)


def load_captions(args: argparse.Namespace) -> list[str]:
    if args.captions:
        if args.captions.endswith(".parquet"):
            import pyarrow.parquet as pq

            captions = pq.read_table(args.captions, columns=["caption"])["caption"].to_pylist()
        else:
            with open(args.captions) as f:
                captions = [json.loads(line)["caption"] for line in f if line.strip()]
        captions = [c for c in captions if c]
        if not captions:
            sys.exit(f"no captions in {args.captions}")
        return (captions * (args.n // len(captions) + 1))[: args.n]
    rng = random.Random(0)
    return [synthetic_caption(rng) for _ in range(args.n)]


def steady_rate(stamps: list[float]) -> float:
    """Items/s from the first 5% of outputs (the engine is loaded and warm) to the last."""
    n = len(stamps)
    k = max(1, n // 20)
    if n <= k or stamps[-1] <= stamps[k - 1]:
        return float("nan")
    return (n - k) / (stamps[-1] - stamps[k - 1])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from prx_data.models.inference.gpu_env import gpu_environment_problems

    if args.weightless:
        # The published config, dummy weights, forced output length (benchmarks/weightless.py).
        import weightless

        return weightless.label_main(args, overrides(args))

    problems = gpu_environment_problems() if args.worker_env == "none" else []
    if problems:
        print("gpu_label_bench cannot run here:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return 2

    import ray
    import torch

    from prx_data.models.inference.gpu_env import WorkerEnv
    from prx_data.models.labeling.config import VLLMClassifierConfig
    from prx_data.models.labeling.vllm_ray import label_dataset_vllm

    replicas = args.replicas or max(1, torch.cuda.device_count())
    cfg = VLLMClassifierConfig(
        model_source=args.model,
        model_id=args.model_id,
        replicas=replicas,
        worker_env=WorkerEnv(mode=args.worker_env),
        **overrides(args),
    )
    from prx_data.models.inference.vllm_engine import engine_kwargs

    print_profile(cfg, engine_kwargs(cfg))
    captions = load_captions(args)
    ray.init(ignore_reinit_error=True)
    if not ray.cluster_resources().get("GPU"):
        print("gpu_label_bench cannot run here: the Ray cluster has no GPU", file=sys.stderr)
        return 2
    ds = ray.data.from_items(
        [{"sample_id": str(i), "caption": c} for i, c in enumerate(captions)],
        override_num_blocks=max(4 * replicas, len(captions) // 1000 or 1),
    )
    start = time.perf_counter()
    stamps, results = [], []
    for row in label_dataset_vllm(ds, cfg).iter_rows():
        stamps.append(time.perf_counter())
        results.append(row)
    total = time.perf_counter() - start

    n = len(results)
    steady = steady_rate(stamps)
    labels = Counter(r["label"] or (r["label_error"] or "").split(":", 1)[0] for r in results)
    print(f"model {args.model_id} | {replicas} replica(s) | {n} captions")
    print(f"end to end   : {n / total:8.2f} captions/s ({total:.1f} s, engine start included)")
    print(f"steady state : {steady:8.2f} captions/s = {steady / replicas:.2f} captions/s/GPU (PRX ~200 per GPU; target >= 300)")
    print(f"labels       : {dict(labels)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
