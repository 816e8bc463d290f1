"""Loader throughput (samples/s) with and without 10 % of samples skipped.

Builds a tree of N synthetic samples (random bytes behind a JPEG marker, a few KB each) in 6
buckets with several shards each, then times full epochs of:
  * plain StreamingDataset (the reference),
  * PrxStreamingDataset with empty skip lists,
  * PrxStreamingDataset with 10 % of samples skipped (dedup + label reasons).
Rates count yielded samples. Construction (index + skip-list loading) is timed apart from the
epoch. per_stream batching, shuffle on, no DataLoader workers (measures the dataset itself).

    .venv/bin/python benchmarks/bench_loader.py [--samples 30000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa
from streaming import StreamingDataset
from streaming.base.util import clean_stale_shared_memory

from prx_data.export.corpus_index import merge_all
from prx_data.export.mds_writer import MdsWriterConfig, write_partition
from prx_data.export.skiplist import build_skiplists
from prx_data.training.loader import PrxStreamingDataset, build_bucket_streams

BUCKETS = [(512, 512, 512), (512, 448, 576), (512, 576, 448), (1024, 1024, 1024), (1024, 896, 1152), (1024, 1152, 896)]
BATCH = 32


def build(root: str, samples: int, payload: int) -> pa.Table:
    rng = np.random.default_rng(0)
    blobs = [b"\xff\xd8\xff" + rng.integers(0, 256, payload, dtype=np.uint8).tobytes() for _ in range(64)]
    tables = []
    for s, source in enumerate(("src-a", "src-b")):

        def gen(s=s, source=source):
            for i in range(samples // 2):
                tier, h, w = BUCKETS[(i * 7 + s) % len(BUCKETS)]
                yield {
                    "tier": tier,
                    "height": h,
                    "width": w,
                    "image": blobs[i % 64],
                    "caption": "a caption " * 10,
                    "sample_id": f"{source}-{i:08d}",
                    "source": source,
                    "original_width": 1,
                    "original_height": 1,
                }

        tables.append(write_partition(gen(), mds_root=root, source=source, config=MdsWriterConfig(size_limit=2 << 20)).lineage)
    merge_all(root)
    return pa.concat_tables(tables)


def skips(lineage: pa.Table, share: float) -> pa.Table:
    n = lineage.num_rows
    picks = np.sort(np.random.default_rng(1).choice(n, int(n * share), replace=False))
    rows = lineage.take(pa.array(picks)).select(["sample_id", "shard", "index_in_shard"])
    reasons = np.where(np.arange(len(picks)) % 3 == 0, "label:nsfw", "dedup")
    return rows.append_column("reason", pa.array(reasons.tolist()))


def epoch(make) -> tuple[float, float, int, float]:
    """(construction s, samples/s wall, samples, CPU us per sample: less sensitive to neighbours)."""
    clean_stale_shared_memory()
    start = time.perf_counter()
    ds = make()
    built = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    count = 0
    for _ in ds:
        count += 1
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    del ds
    gc.collect()
    return built, count / seconds, count, cpu / count * 1e6


def epoch_construction_at_scale(samples: int, shards: int) -> None:
    """Per-epoch cost of building the sample order (resample + shuffle + partition) at scale.

    Uses bench_skiplist's fake tree (index.json files only): building the epoch never opens a
    shard, so no data is needed.
    """
    from bench_skiplist import fake_tree  # same folder
    from streaming.base.batching import generate_work

    root = tempfile.mkdtemp(prefix="bench-epoch-")
    try:
        table = fake_tree(root, samples, shards)
        merge_all(root)
        picks = np.sort(np.random.default_rng(2).choice(table.num_rows, table.num_rows // 10, replace=False))
        ten = table.take(pa.array(picks)).select(["sample_id", "shard", "index_in_shard"])
        ten = ten.append_column("reason", pa.array(["dedup"] * ten.num_rows))
        print(f"epoch construction, {table.num_rows} samples in {shards} shards:")
        for label, skip in (("no skips", ten.slice(0, 0)), ("10 % skipped", ten)):
            build_skiplists(skip, root)
            clean_stale_shared_memory()
            start = time.perf_counter()
            ds = PrxStreamingDataset(
                streams=build_bucket_streams(root),
                batch_size=BATCH,
                shuffle=True,
                batching_method="per_stream",
                num_canonical_nodes=1,
                shuffle_block_size=1 << 18,
            )
            built = time.perf_counter() - start
            world = ds._parallel_rank_world.detect_workers()
            times = []
            for epoch_index in range(3):
                start = time.perf_counter()
                work = generate_work("per_stream", ds, world, epoch_index, 0)
                times.append(time.perf_counter() - start)
            print(
                f"  {label:<14} dataset construction {built:5.2f} s, epoch order {min(times):5.2f} s (best of 3), "
                f"{int((work >= 0).sum())} samples in the epoch"
            )
            del ds
            gc.collect()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        clean_stale_shared_memory()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=30_000)
    parser.add_argument("--payload", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scale-samples", type=int, default=2_000_000)
    parser.add_argument("--scale-shards", type=int, default=2_000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-loader-")
    try:
        lineage = build(root, args.samples, args.payload)
        shards = len(set(lineage["shard"].to_pylist()))
        print(f"{lineage.num_rows} samples, {shards} shards, {len(BUCKETS)} buckets under {root}")
        common: dict[str, Any] = dict(batch_size=BATCH, shuffle=True, shuffle_seed=1, batching_method="per_stream")
        empty = skips(lineage, 0.0)
        ten = skips(lineage, 0.10)

        def plain():
            return StreamingDataset(streams=build_bucket_streams(root), **common)

        def prx():
            return PrxStreamingDataset(streams=build_bucket_streams(root), **common)

        runs: dict[str, list[tuple[float, float, int, float]]] = {
            "plain StreamingDataset": [],
            "Prx, no skips": [],
            "Prx, 10 % skipped": [],
        }
        for _ in range(args.repeats):  # interleaved so machine drift hits all variants
            runs["plain StreamingDataset"].append(epoch(plain))
            build_skiplists(empty, root)
            runs["Prx, no skips"].append(epoch(prx))
            build_skiplists(ten, root)
            runs["Prx, 10 % skipped"].append(epoch(prx))
        # Best-of is the estimator: on a shared machine other tenants only ever slow a run down.
        best, median = {}, {}
        for label, values in runs.items():
            best[label] = max(v[1] for v in values)
            median[label] = float(np.median([v[1] for v in values]))
            init = float(np.median([v[0] for v in values]))
            print(
                f"{label:<24} best {best[label]:7.0f}  median {median[label]:7.0f} samples/s  "
                f"(runs {[round(v[1]) for v in values]}), {values[0][2]} samples/epoch, "
                f"construction {init * 1000:.0f} ms, CPU {min(v[3] for v in values):.1f} us/sample (best)"
            )
        cpu = {label: min(v[3] for v in values) for label, values in runs.items()}
        print(
            f"[cpu] us/sample with 10 % skipped / without: {cpu['Prx, 10 % skipped'] / cpu['Prx, no skips']:.3f}; "
            f"Prx no skips / plain: {cpu['Prx, no skips'] / cpu['plain StreamingDataset']:.3f}"
        )
        for name, rates in (("best", best), ("median", median)):
            ratio = rates["Prx, 10 % skipped"] / rates["Prx, no skips"]
            print(
                f"[{name}] samples/s with 10 % skipped / without: {ratio:.3f} (cost {1 - ratio:+.1%}; target < 5 %); "
                f"Prx no skips / plain: {rates['Prx, no skips'] / rates['plain StreamingDataset']:.3f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
        clean_stale_shared_memory()
    if args.scale_samples:
        epoch_construction_at_scale(args.scale_samples, args.scale_shards)


if __name__ == "__main__":
    main()
