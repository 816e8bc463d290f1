"""Ablation views: build cost against the default skip-list build, and loader throughput.

Build: 1,000,000 synthetic exported samples (two sources, 10 buckets, the fake tree of
``bench_skiplist``: index.json files only) with their Lance exports and row tables (phash with
about 10 % exact copies, captions of 1-20 words, 2 % ``nsfw`` labels). Times, median of
``--repeats``:
  * the default cut: ``scan_skips`` (dedup, labels, opt-outs, superseded) + ``write_skip_lists``,
  * one view (source ``src-b`` left out, captions of at least 5 words), ``build_view``,
  * 10 views at once, ``build_views``,
and prints view / default and 10 views / one view (targets: at most 2x and 10x).

Loader: ``bench_loader``'s real shards (``--loader-samples``), 10 % skipped by the default cut
and the same rows skipped by a view; full epochs of PrxStreamingDataset with and without
``view=`` (median samples/s, target within 5 %).

    .venv/bin/python benchmarks/bench_views.py [--samples 1000000] [--repeats 3] [--loader-samples 30000]

``--samples 0`` runs the loader part alone.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from benchmarks.bench_loader import BATCH, epoch
from benchmarks.bench_loader import build as build_loader_tree
from benchmarks.bench_loader import skips as loader_skips
from benchmarks.bench_skiplist import fake_tree
from prx_data.core.paths import StoragePaths
from prx_data.curation.exclusion import exported_row_count, scan_skips, write_skip_lists
from prx_data.curation.view_build import build_view, build_views
from prx_data.curation.views import load_view
from prx_data.export.skiplist import SpilledSkips, build_skiplists, view_names
from prx_data.imaging.buckets import BucketConfig
from prx_data.training.loader import PrxStreamingDataset, build_bucket_streams

WORDS = np.array("a photo of the small red house by the sea at dusk under clouds with birds and trees near water".split())


def corpus(root: str, samples: int) -> tuple[StoragePaths, dict[str, int]]:
    mds = os.path.join(root, "mds")
    table = fake_tree(mds, samples, 100)
    rng = np.random.default_rng(2)
    n = table.num_rows
    phash = rng.integers(0, 2**62, n, dtype=np.int64)
    copies = rng.choice(n, n // 10, replace=False)
    phash[copies] = phash[rng.choice(n, n // 10, replace=False)]
    table = table.set_column(table.schema.get_field_index("phash"), "phash", pa.array(phash))
    paths = StoragePaths(lance_root=os.path.join(root, "lance"), mds_root=mds)
    priorities: dict[str, int] = {}
    for source in sorted(set(table["source"].to_pylist())):
        part = table.filter(pc.equal(table["source"], source))
        exports = part.select(["sample_id", "source", "tier", "bucket", "shard", "index_in_shard", "phash"])
        lance.write_dataset(exports, paths.exports_table(source))
        m = part.num_rows
        lengths = rng.integers(1, 21, m)
        captions = [" ".join(WORDS[:k]) for k in lengths]
        labels = np.where(rng.random(m) < 0.02, "nsfw", "visual")
        raw = pa.table(
            {
                "sample_id": part["sample_id"],
                "source": part["source"],
                "status": pa.array(["ok"] * m),
                "caption": pa.array(captions),
                "label": pa.array(labels),
                "width": pa.array(rng.integers(256, 2048, m).astype(np.int32)),
            }
        )
        lance.write_dataset(raw, paths.raw_table(source))
        priorities[source] = len(priorities)
    return paths, priorities


def default_build(paths: StoragePaths, priorities: dict[str, int], scratch: str) -> None:
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        skips = SpilledSkips(os.path.join(folder, "skips"), expected_rows=exported_row_count(paths, priorities))
        scan_skips(paths, priorities, bucket_cfg=BucketConfig(), exclude_labels=("nsfw",), into=skips, scratch_dir=scratch)
        skips.close()
        write_skip_lists(paths.mds_root, skips)


VIEWS: dict[str, dict[str, Any]] = {
    "no-b-long": {"exclude": {"sources": ["src-b"], "min_caption_words": 5}},
    "no-b": {"exclude": {"sources": ["src-b"]}},
    "no-a": {"exclude": {"sources": ["src-a"]}},
    "only-1024": {"exclude": {"tiers": [512]}},
    "only-512": {"exclude": {"tiers": [1024]}},
    "long": {"exclude": {"min_caption_words": 10}},
    "short": {"exclude": {"max_caption_words": 8}},
    "wide": {"exclude": {"where": "width >= 768"}},
    "nsfw-in": {"readmit": ["label:nsfw"]},
    "no-square": {"exclude": {"buckets": ["1024x1024", "512x512"]}},
}


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loader-samples", type=int, default=30_000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-views-")
    try:
        if not args.samples:
            raise SystemExit(loader_part(args))
        start = time.perf_counter()
        paths, priorities = corpus(root, args.samples)
        print(f"{args.samples} samples, sources {sorted(priorities)}, made in {time.perf_counter() - start:.1f}s under {root}")
        views_dir = Path(root) / "views"
        views_dir.mkdir()
        for name, spec in VIEWS.items():
            (views_dir / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, **spec}))
        one = load_view(views_dir / "no-b-long.yaml")
        kwargs: dict[str, Any] = dict(bucket_cfg=BucketConfig(), exclude_labels=("nsfw",), dedup_radius=2, scratch_dir=root)
        default_s, view_s, ten_s = [], [], []
        for _ in range(args.repeats):  # interleaved so machine drift hits all three
            default_s += timed(lambda: default_build(paths, priorities, root), 1)
            view_s += timed(lambda: build_view(paths, one, priorities, **kwargs), 1)
            ten_s += timed(lambda: build_views(paths, str(views_dir), priorities, **kwargs), 1)
        d, v, t = statistics.median(default_s), statistics.median(view_s), statistics.median(ten_s)
        print(f"default skip-list build   median {d:6.2f} s  (runs {[round(x, 2) for x in default_s]})")
        print(f"one view (no-b-long)      median {v:6.2f} s  (runs {[round(x, 2) for x in view_s]})")
        print(f"10 views                  median {t:6.2f} s  (runs {[round(x, 2) for x in ten_s]})")
        print(f"[build] one view / default: {v / d:.2f} (target <= 2); 10 views / one view: {t / v:.2f} (target <= 10)")
        sidecars = sum(1 for p in Path(paths.mds_root).rglob("*.view-no-b-long.*.json"))
        size = sum(p.stat().st_size for p in Path(paths.mds_root).rglob("*.view-no-b-long.*"))
        print(f"[storage] view no-b-long: {sidecars} sidecars, {size / 2**20:.1f} MiB")
        print(f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    finally:
        shutil.rmtree(root, ignore_errors=True)

    loader_part(args)


def loader_part(args) -> int:
    if not args.loader_samples:
        return 0
    root = tempfile.mkdtemp(prefix="bench-views-loader-")
    try:
        lineage = build_loader_tree(root, args.loader_samples, 4096)
        ten = loader_skips(lineage, 0.10)
        build_skiplists(ten, root)
        build_skiplists(ten, root, names=view_names("same"))
        common: dict[str, Any] = dict(batch_size=BATCH, shuffle=True, shuffle_seed=1, batching_method="per_stream")
        runs: dict[str, list[float]] = {"default cut": [], "view": []}
        for _ in range(args.repeats):
            runs["default cut"].append(epoch(lambda: PrxStreamingDataset(streams=build_bucket_streams(root), **common))[1])
            runs["view"].append(epoch(lambda: PrxStreamingDataset(streams=build_bucket_streams(root), view="same", **common))[1])
        med = {k: statistics.median(v) for k, v in runs.items()}
        for label, values in runs.items():
            print(f"loader, {label:<12} median {med[label]:7.0f} samples/s (runs {[round(x) for x in values]})")
        print(f"[loader] samples/s with a view / default cut: {med['view'] / med['default cut']:.3f} (target >= 0.95)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    main()
