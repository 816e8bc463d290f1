"""What the data card's charts cost: ``build_data_card`` with and without them, on one source of
N rows (sizes spread over the tiers and aspect ratios, captions, labels, an exports table).

Each figure is the median of ``--repeats`` runs in fresh subprocesses (so every run with charts
pays matplotlib's import, as ``corpus_report`` does in its run worker); the ratio is charts /
no charts, measured in the same session.

    .venv/bin/python benchmarks/bench_card_charts.py [--n 100000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

CHILD = r"""
import json, os, sys, time
from prx_data.core.paths import StoragePaths
from prx_data.curation.report import build_data_card
root, charts = sys.argv[1], sys.argv[2] == "1"
start = time.perf_counter()
card = build_data_card(StoragePaths(lance_root=os.path.join(root, "lance"), mds_root=os.path.join(root, "mds")), ["bench"], charts=charts)
print(json.dumps({"seconds": time.perf_counter() - start, "charts": card.chart_seconds, "exported": card.totals["exported"]}))
"""


def build_world(root: str, n: int) -> None:
    import lance
    import pyarrow as pa

    from prx_data.core.ids import sample_id
    from prx_data.core.paths import StoragePaths

    rng = np.random.default_rng(n)
    paths = StoragePaths(lance_root=os.path.join(root, "lance"), mds_root=os.path.join(root, "mds"))
    ids = pa.array([sample_id("bench", str(i)) for i in range(n)], pa.string())
    side = np.exp(rng.uniform(np.log(200), np.log(3000), n))
    ratio = np.exp(rng.uniform(np.log(0.4), np.log(2.5), n))
    words = np.array([f"w{i}" for i in range(500)])
    raw = pa.table(
        {
            "sample_id": ids,
            "status": pa.array(np.where(rng.random(n) < 0.02, "error", "ok")),
            "width": pa.array((side * np.sqrt(ratio)).astype(np.int32)),
            "height": pa.array((side / np.sqrt(ratio)).astype(np.int32)),
            "caption": pa.array([" ".join(words[rng.integers(0, 500, k)]) for k in rng.integers(5, 80, n)]),
            "caption_model": pa.array(["qwen3-vl-8b"] * n),
            "caption_prompt_version": pa.array(["3"] * n),
            "label": pa.array(rng.choice(["visual", "text", "nsfw"], n)),
            "label_model": pa.array(["minilm"] * n),
        }
    )
    lance.write_dataset(raw, paths.raw_table("bench"))
    exports = pa.table(
        {
            "sample_id": ids,
            "tier": pa.array(rng.choice([512, 1024], n).astype(np.int32)),
            "bucket": pa.array(rng.choice(["512x512", "448x576", "576x448"], n)),
            "drop_reason": pa.array(["too_small" if d else None for d in rng.random(n) < 0.1], pa.string()),
        }
    )
    lance.write_dataset(exports, paths.exports_table("bench"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="bench-card-charts-") as root:
        build_world(root, args.n)
        results = {}
        for charts in ("0", "1"):
            runs = []
            for _ in range(args.repeats):
                out = subprocess.run([sys.executable, "-c", CHILD, root, charts], env=env, capture_output=True, text=True, check=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            results[charts] = {k: statistics.median(r[k] for r in runs) for k in ("seconds", "charts")}
            label = "with charts" if charts == "1" else "no charts  "
            print(
                f"{label} {args.n:,} rows: card {results[charts]['seconds']:.2f} s (drawing {results[charts]['charts']:.2f} s)", flush=True
            )
        ratio = results["1"]["seconds"] / results["0"]["seconds"]
        print(f"card with charts / without: {ratio:.2f} (+{results['1']['seconds'] - results['0']['seconds']:.2f} s)")


if __name__ == "__main__":
    main()
