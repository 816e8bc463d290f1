"""CPU caption labels on the hand-labelled eval set: per-class precision / recall, confusion
matrix, how many good photos would be skipped, and the time per caption.

    .venv/bin/python benchmarks/bench_labels.py                 # the eval set
    .venv/bin/python benchmarks/bench_labels.py --set dev       # the tuning set

The eval set (prx_data_tests/labeling_eval/eval.jsonl) was never used to tune the backend; the
dev set was. Targets (issue 11): at most 2 % of ``visual`` captions labelled ``text`` or
``nsfw``, ``text`` recall >= 90 %, ``nsfw`` recall >= 95 %.

Baseline in the same run, on the same embeddings: the plain zero-shot rule (argmax of the
label similarities, no cues, no abstention).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prx_data.models.labeling.minilm import MiniLMClassifier, cue_counts, decide  # noqa: E402
from prx_data.core.schema import LABELS  # noqa: E402
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
    print(f"visual captions skipped as text/nsfw: {m['visual_skipped']:.1%}  (target <= 2 %); "
          f"targets met: {meets_targets(m)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="eval", choices=("eval", "dev"))
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (median)")
    parser.add_argument("--show-errors", action="store_true")
    args = parser.parse_args(argv)

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
    predicted = [r.label for r in results]

    sims = classifier.similarities(captions)
    baseline = [max(LABELS, key=s.get) for s in sims]

    print(f"# caption labels, minilm, {args.set} set: {len(rows)} captions "
          f"({', '.join(f'{label} {truth.count(label)}' for label in LABELS)})")
    print(f"time per caption: {statistics.median(times) / len(rows) * 1e3:.1f} ms (median of {args.repeats}, "
          f"batch {classifier.config.batch_size}, this machine's CPU threads)")
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
