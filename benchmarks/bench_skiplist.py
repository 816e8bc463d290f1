"""Skip-list build time for 1,000,000 synthetic hashes across 100 shards, with peak memory.

Builds a fake MDS tree (index.json files only: the builder never opens shards), 10 buckets x
2 sources x 5 shards of 10,000 samples. Times ``find_duplicates`` on the 1M hashes (about 10 %
duplicates), then ``build_skiplists`` on those duplicates plus 2 % nsfw labels, a second
identical build (nothing rewritten), and a worst case where every sample is skipped.

Memory: tracemalloc peak (Python objects and numpy buffers), Arrow's pool peak (Arrow buffers are
not seen by tracemalloc) and the process max RSS.

    .venv/bin/python benchmarks/bench_skiplist.py [--samples 1000000] [--shards 100]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
import tracemalloc

import numpy as np
import pyarrow as pa

from prx_data.curation.dedup import find_duplicates
from prx_data.export.skiplist import build_skiplists

BUCKETS = [(1024, h, w) for h, w in [(1024, 1024), (896, 1152), (1152, 896), (768, 1344), (1344, 768)]] + [
    (512, h, w) for h, w in [(512, 512), (448, 576), (576, 448), (384, 672), (672, 384)]
]
SOURCES = ("src-a", "src-b")


def fake_tree(root: str, samples: int, shards: int) -> pa.Table:
    per_dir = shards // (len(BUCKETS) * len(SOURCES))
    per_shard = samples // shards
    rows_shard, rows_tier, rows_bucket, rows_source = [], [], [], []
    for tier, h, w in BUCKETS:
        for source in SOURCES:
            folder = os.path.join(root, str(tier), f"{h}x{w}", source)
            os.makedirs(folder)
            # Complete MDS shard entries, so StreamingDataset can load the index (bench_loader).
            infos = [
                {
                    "raw_data": {"basename": f"shard.{i:05d}.mds", "bytes": 1, "hashes": {}},
                    "samples": per_shard,
                    "column_names": ["image"],
                    "column_encodings": ["bytes"],
                    "column_sizes": [None],
                    "compression": None,
                    "format": "mds",
                    "hashes": [],
                    "size_limit": 1 << 27,
                    "version": 2,
                    "zip_data": None,
                }
                for i in range(per_dir)
            ]
            with open(os.path.join(folder, "index.json"), "w") as handle:
                json.dump({"version": 2, "shards": infos}, handle)
            for i in range(per_dir):
                rows_shard.append(f"{tier}/{h}x{w}/{source}/shard.{i:05d}.mds")
                rows_tier.append(tier)
                rows_bucket.append(f"{h}x{w}")
                rows_source.append(source)
    n_shards = len(rows_shard)
    shard = np.repeat(np.array(rows_shard, dtype=object), per_shard)
    index = np.tile(np.arange(per_shard, dtype=np.int64), n_shards)
    rng = np.random.default_rng(0)
    n = len(shard)
    return pa.table(
        {
            "sample_id": pa.array([f"{i:032x}" for i in rng.permutation(n)]),
            "source": pa.array(np.repeat(np.array(rows_source, dtype=object), per_shard)),
            "source_priority": pa.array(rng.integers(0, 3, n)),
            "tier": pa.array(np.repeat(np.array(rows_tier), per_shard).astype(np.int32)),
            "bucket": pa.array(np.repeat(np.array(rows_bucket, dtype=object), per_shard)),
            # ~10 % duplicates: 1M draws from 10M/2 values per aspect-ratio key (5 keys x 2 tiers)
            "phash": pa.array(rng.integers(0, samples * 5 // len(BUCKETS) * 2, n)),
            "shard": pa.array(shard),
            "index_in_shard": pa.array(index),
        }
    )


def measure(label: str, fn):
    pool = pa.default_memory_pool()
    tracemalloc.start()
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{label:<44} {seconds:6.2f} s   tracemalloc peak {peak / 2**20:6.0f} MiB   "
        f"arrow pool peak {pool.max_memory() / 2**20:6.0f} MiB   max RSS {rss:6.0f} MiB"
    )
    return result, seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=100)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-skip-")
    try:
        table = fake_tree(root, args.samples, args.shards)
        print(f"{table.num_rows} samples in {args.shards} shards under {root}")
        # tracemalloc slows numpy/Python allocation; time once without it as the headline figure.
        start = time.perf_counter()
        find_duplicates(table)
        print(f"{'find_duplicates, untraced':<44} {time.perf_counter() - start:6.2f} s")
        dups, _ = measure("find_duplicates (1M hashes)", lambda: find_duplicates(table))
        rng = np.random.default_rng(1)
        nsfw = table.take(pa.array(np.sort(rng.choice(table.num_rows, table.num_rows // 50, replace=False))))
        cols = ["sample_id", "shard", "index_in_shard", "reason", "kept_sample_id"]
        nsfw = nsfw.append_column("kept_sample_id", pa.nulls(nsfw.num_rows, pa.string()))
        nsfw = nsfw.append_column("reason", pa.array(["label:nsfw"] * nsfw.num_rows))
        skips = pa.concat_tables([dups.select(cols), nsfw.select(cols)])
        print(f"duplicates: {dups.num_rows} ({dups.num_rows / table.num_rows:.1%}), skip rows: {skips.num_rows}")
        start = time.perf_counter()
        report = build_skiplists(skips, root)
        print(f"{'build_skiplists, untraced':<44} {time.perf_counter() - start:6.2f} s   ({report.written} sidecars written)")
        report, _ = measure("build_skiplists again (unchanged)", lambda: build_skiplists(skips, root))
        print(f"  rewritten {report.written}, unchanged {report.unchanged}; streams over 10 %: {report.rewrite_recommended}")
        every = table.select(["sample_id", "shard", "index_in_shard"]).append_column("reason", pa.array(["optout:all"] * table.num_rows))
        measure("build_skiplists, worst case (1M skip rows)", lambda: build_skiplists(every, root))
        total = time.perf_counter()
        find_duplicates(table)
        build_skiplists(skips, root)
        print(f"{'dedup + build, end to end, untraced':<44} {time.perf_counter() - total:6.2f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
