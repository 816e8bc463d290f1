"""CPU caption labels on the hand-labelled eval set: per-class precision / recall, confusion
matrix, how many good photos would be skipped, and the time per caption.

    .venv/bin/python benchmarks/bench_labels.py                 # the eval set
    .venv/bin/python benchmarks/bench_labels.py --set dev       # the tuning set
    .venv/bin/python benchmarks/bench_labels.py --engines       # numpy vs torch: cold start, CPU/token

The eval set (prx_data_tests/labeling_eval/eval.jsonl) was never used to tune the backend; the
dev set was. Targets (issue 11): at most 2 % of ``visual`` captions labelled ``text`` or
``nsfw``, ``text`` recall >= 90 %, ``nsfw`` recall >= 95 %.

Baseline in the same run, on the same embeddings: the plain zero-shot rule (argmax of the
label similarities, no cues, no abstention).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prx_data.core.schema import LABELS  # noqa: E402
from prx_data.models.labeling.minilm import MiniLMClassifier, cue_counts, decide  # noqa: E402
from prx_data_tests.labeling_eval import load  # noqa: E402


def metrics(truth: list[str], predicted: list[str]) -> dict:
    confusion = {t: {p: 0 for p in LABELS} for t in LABELS}
    for t, p in zip(truth, predicted):
        confusion[t][p] += 1
    per_class = {}
    for label in LABELS:
        tp = confusion[label][label]
        predicted_n = sum(confusion[t][label] for t in LABELS)
        actual_n = sum(confusion[label].values())
        per_class[label] = {
            "precision": tp / predicted_n if predicted_n else float("nan"),
            "recall": tp / actual_n if actual_n else float("nan"),
            "n": actual_n,
        }
    visual_n = sum(confusion["visual"].values())
    skipped = confusion["visual"]["text"] + confusion["visual"]["nsfw"]
    return {
        "confusion": confusion,
        "per_class": per_class,
        "visual_skipped": skipped / visual_n if visual_n else float("nan"),
    }


def meets_targets(m: dict) -> bool:
    return m["visual_skipped"] <= 0.02 and m["per_class"]["text"]["recall"] >= 0.90 and m["per_class"]["nsfw"]["recall"] >= 0.95


def print_metrics(title: str, m: dict) -> None:
    print(f"\n## {title}")
    print("class  | precision | recall | n")
    for label, row in m["per_class"].items():
        print(f"{label:6s} | {row['precision']:9.1%} | {row['recall']:6.1%} | {row['n']}")
    print("confusion (rows: hand label, columns: predicted): " + " ".join(f"{p:>6s}" for p in LABELS))
    for t in LABELS:
        print(f"  {t:6s} " + " ".join(f"{m['confusion'][t][p]:6d}" for p in LABELS))
    print(f"visual captions skipped as text/nsfw: {m['visual_skipped']:.1%}  (target <= 2 %); targets met: {meets_targets(m)}")


# One fresh process per engine: import, load, label a first chunk of captions (what a Ray worker
# pays before its first result), then the CPU seconds per token on the whole set, warm.
_ENGINE_PROBE = """
import json, sys, time
t0 = time.perf_counter(); c0 = time.process_time()
from prx_data.models.labeling import minilm as M
from prx_data_tests.labeling_eval import load
from prx_data.models.labeling.config import MiniLMClassifierConfig
captions = [r["caption"] for r in load(sys.argv[2])]
classifier = M.MiniLMClassifier(MiniLMClassifierConfig(engine=sys.argv[1]))
classifier.label_batch(captions[:20])
first_wall, first_cpu = time.perf_counter() - t0, time.process_time() - c0
from prx_data.models.labeling.bert_numpy import NumpyBertEncoder
tokens = NumpyBertEncoder(M.packaged_model_path()).count_tokens(captions)
c1 = time.process_time()
classifier.embed(captions)
print(json.dumps({"engine": classifier.engine, "first_wall": first_wall, "first_cpu": first_cpu,
                  "cpu": time.process_time() - c1, "captions": len(captions), "tokens": tokens}))
"""


def bench_engines(label_set: str, repeats: int) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONWARNINGS": "ignore",
    }
    print(f"load average: {os.getloadavg()}  (one thread per engine, as in a 1-CPU Ray task)")
    got: dict[str, dict[str, float]] = {}
    for engine in ("numpy", "torch"):
        runs = []
        for _ in range(repeats):
            out = subprocess.run(
                [sys.executable, "-c", _ENGINE_PROBE, engine, label_set], env=env, capture_output=True, text=True, check=True
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        assert all(r["engine"] == engine for r in runs), runs
        got[engine] = {k: statistics.median(r[k] for r in runs) for k in ("first_wall", "first_cpu", "cpu")}
        got[engine]["tokens"] = runs[0]["tokens"]
        print(
            f"{engine:<6} cold start to the first 20 labels: {got[engine]['first_wall']:6.2f} s wall, {got[engine]['first_cpu']:6.2f} s CPU;"
            f"  {runs[0]['captions']} captions warm: {got[engine]['cpu']:6.2f} s CPU"
        )
    n, t = got["numpy"], got["torch"]
    print(
        f"ratio numpy/torch: cold start wall {n['first_wall'] / t['first_wall']:.2f}, CPU {n['first_cpu'] / t['first_cpu']:.2f};"
        f" warm CPU per token {n['cpu'] / t['cpu']:.2f}"
    )
    extra = (n["cpu"] - t["cpu"]) / n["tokens"] if n["tokens"] else 0.0
    if extra > 0:
        print(
            f"break-even: torch's extra start ({t['first_cpu'] - n['first_cpu']:.2f} CPU s) buys back after "
            f"{(t['first_cpu'] - n['first_cpu']) / extra:,.0f} tokens"
        )
    else:
        print("numpy is as fast as torch per token: torch's start never pays back on the CPU")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="eval", choices=("eval", "dev"))
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (median)")
    parser.add_argument("--show-errors", action="store_true")
    parser.add_argument("--engines", action="store_true", help="numpy vs torch forward pass: cold start and CPU per token")
    args = parser.parse_args(argv)
    if args.engines:
        bench_engines(args.set, args.repeats)
        return 0

    rows = load(args.set)
    captions = [r["caption"] for r in rows]
    truth = [r["label"] for r in rows]
    classifier = MiniLMClassifier()
    classifier._load()  # model load is not per-caption work

    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        results = classifier.label_batch(captions)
        times.append(time.perf_counter() - start)
    predicted = [r.label for r in results if r.label is not None]
    assert len(predicted) == len(results), [r.error for r in results if r.label is None][:3]

    sims = classifier.similarities(captions)
    baseline = [max(LABELS, key=s.__getitem__) for s in sims]

    print(
        f"# caption labels, minilm, {args.set} set: {len(rows)} captions ({', '.join(f'{label} {truth.count(label)}' for label in LABELS)})"
    )
    print(
        f"time per caption: {statistics.median(times) / len(rows) * 1e3:.1f} ms (median of {args.repeats}, "
        f"batch {classifier.config.batch_size}, this machine's CPU threads)"
    )
    print_metrics("minilm (prototype margins + cues, abstaining to visual)", metrics(truth, predicted))
    print_metrics("baseline: argmax of prototype similarity", metrics(truth, baseline))
    if args.show_errors:
        print("\n## errors")
        for row, res, sim in zip(rows, results, sims):
            if res.label != row["label"]:
                _, _, scores = decide(sim, cue_counts(row["caption"]))
                print(f"{row['id']} {row['label']} -> {res.label} score={res.score} {scores} {row['kind']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
