"""Caption quality under FP8: caption the same images with a reference profile (bf16) and a
candidate profile (FP8, the default), then report how far the candidate's captions drift.

Run it on a GPU node before switching a production corpus to FP8 (docs/gpu.md, "Caption
quality under FP8"), from the GPU worker environment, from the repo root:

    PYTHONPATH=. python benchmarks/gpu_fp8_agreement.py --model /models/Qwen3-VL-8B-Instruct \
        --images /data/sample-of-your-corpus --n 500

It prints, over the images both profiles captioned:
- label agreement: the share of images whose caption gets the same label (visual/text/nsfw)
  from the CPU classifier (MiniLM) under both profiles, and the confusion pairs;
- caption similarity: median and 5th percentile of the cosine of MiniLM sentence embeddings,
  and of a word-level sequence ratio (difflib);
- length drift: median words per caption under each profile.
Decoding is greedy in both runs (temperature 0), so the differences come from the arithmetic,
not from sampling. ``--candidate-set``/``--reference-set`` change either profile (the same
KEY=JSON overrides as the other GPU benchmarks), e.g. ``--candidate-set vision_bf16=true``.

The comparison itself (``compare``) is plain Python and runs anywhere; ``--from-json`` compares
two caption files written by ``--save`` (``{sample_id: caption}``), so the report can be rerun
without a GPU.
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_profile_args import overrides  # noqa: E402

REFERENCE = {"quantization": None, "kv_cache_dtype": "auto"}  # bf16 weights and KV cache
GREEDY = {"sampling": {"temperature": 0.0}}


@dataclass
class Agreement:
    n: int
    label_agreement: float
    confusions: dict[str, int]
    cosine_median: float
    cosine_p05: float
    ratio_median: float
    ratio_p05: float
    words_reference: float
    words_candidate: float

    def lines(self) -> list[str]:
        return [
            f"images compared   : {self.n}",
            f"label agreement   : {self.label_agreement:.1%}  confusions {self.confusions or 'none'}",
            f"caption cosine    : median {self.cosine_median:.3f}, p05 {self.cosine_p05:.3f} (MiniLM embeddings)",
            f"word-level ratio  : median {self.ratio_median:.3f}, p05 {self.ratio_p05:.3f} (difflib)",
            f"median words      : reference {self.words_reference:.0f}, candidate {self.words_candidate:.0f}",
        ]


def _p05(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.05 * (len(ordered) - 1))]


def compare(reference: Mapping[str, str], candidate: Mapping[str, str], classifier=None) -> Agreement:
    """Agreement of two caption sets over the sample ids both captioned."""
    from prx_data.models.labeling.minilm import MiniLMClassifier

    ids = sorted(k for k in reference.keys() & candidate.keys() if reference[k] and candidate[k])
    if not ids:
        raise SystemExit("no image was captioned by both profiles")
    classifier = classifier or MiniLMClassifier()
    ref = [reference[k] for k in ids]
    cand = [candidate[k] for k in ids]
    ref_labels = [r.label for r in classifier.label_batch(ref)]
    cand_labels = [r.label for r in classifier.label_batch(cand)]
    confusions = Counter(f"{a}->{b}" for a, b in zip(ref_labels, cand_labels) if a != b)
    cosines = (classifier.embed(ref) * classifier.embed(cand)).sum(1).tolist()
    ratios = [difflib.SequenceMatcher(None, a.split(), b.split()).ratio() for a, b in zip(ref, cand)]
    return Agreement(
        n=len(ids),
        label_agreement=sum(a == b for a, b in zip(ref_labels, cand_labels)) / len(ids),
        confusions=dict(confusions),
        cosine_median=statistics.median(cosines),
        cosine_p05=_p05(cosines),
        ratio_median=statistics.median(ratios),
        ratio_p05=_p05(ratios),
        words_reference=statistics.median(len(c.split()) for c in ref),
        words_candidate=statistics.median(len(c.split()) for c in cand),
    )


def caption_with(args: argparse.Namespace, rows: list[dict], profile: dict) -> dict[str, str]:
    """Captions of ``rows`` under one profile (a fresh engine per profile)."""
    import ray
    import torch

    from prx_data.models.captioning.config import VLLMCaptionerConfig
    from prx_data.models.captioning.images import ImageBudget
    from prx_data.models.captioning.vllm_ray import caption_dataset_vllm

    replicas = args.replicas or max(1, torch.cuda.device_count())
    cfg = VLLMCaptionerConfig(
        model_source=args.model,
        model_id=args.model_id,
        replicas=replicas,
        image=ImageBudget(max_pixels=args.max_pixels),
        **{**GREEDY, **profile},
    )
    ds = ray.data.from_items(rows, override_num_blocks=max(4 * replicas, len(rows) // 64 or 1))
    return {r["sample_id"]: r["caption"] for r in caption_dataset_vllm(ds, cfg).iter_rows() if r["caption"]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="local checkpoint directory")
    p.add_argument("--model-id", default="Qwen/Qwen3-VL-8B-Instruct")
    p.add_argument("--images", help="folder of images (a sample of the corpus to be captioned)")
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--max-pixels", type=int, default=1024 * 32 * 32)
    p.add_argument("--replicas", type=int, default=None)
    p.add_argument("--reference-set", action="append", default=[], metavar="KEY=JSON")
    p.add_argument("--candidate-set", action="append", default=[], metavar="KEY=JSON")
    p.add_argument("--save", help="folder to write reference.json and candidate.json into")
    p.add_argument("--from-json", nargs=2, metavar=("REFERENCE", "CANDIDATE"), help="compare two saved caption files instead of captioning")
    args = p.parse_args(argv)
    if not args.from_json and not (args.model and args.images):
        p.error("--model and --images are required (or --from-json)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        reference, candidate = (json.loads(Path(f).read_text()) for f in args.from_json)
    else:
        from gpu_caption_bench import load_rows

        from prx_data.models.inference.gpu_env import gpu_environment_problems

        if problems := gpu_environment_problems():
            print("gpu_fp8_agreement cannot run here:\n  - " + "\n  - ".join(problems), file=sys.stderr)
            return 2
        rows = load_rows(argparse.Namespace(images=args.images, n=args.n))
        reference = caption_with(args, rows, {**REFERENCE, **overrides(argparse.Namespace(set=args.reference_set))})
        candidate = caption_with(args, rows, overrides(argparse.Namespace(set=args.candidate_set)))
        if args.save:
            out = Path(args.save)
            out.mkdir(parents=True, exist_ok=True)
            (out / "reference.json").write_text(json.dumps(reference, indent=1))
            (out / "candidate.json").write_text(json.dumps(candidate, indent=1))
    print("\n".join(compare(reference, candidate).lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
