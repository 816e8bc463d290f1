"""Peak memory and time of the skip computation (dedup, labels, opt-outs) + skip-list building
at N and 4N exported samples (issue 21 item 3), each run in a fresh subprocess, for two code
trees (e.g. /work/main and this one).

Builds synthetic Lance tables (``exports/<source>.lance`` with ~5 % exact copies across sources
and tiers, ``sources/<source>.lance`` with a few degenerate rows) and a fake MDS tree (index.json
files only: the skip-list builder never opens shards). A subprocess then runs, on one tree:

* ``materialised``: ``compute_skips`` of a tree without ``scan_skips`` (the exports read into
  memory, deduped, joined with labels and opt-outs), or
* ``streamed``: ``scan_skips`` (one Lance scan in batches: dedup spilled to partitions on local
  disk, labels joined per buffer), the skip rows returned as one table, or
* ``spilled``: the same scan with every skip row spilled as it is found
  (``export.skiplist.SpilledSkips``, what ``rebuild_skip_lists`` does), read back a bucket
  at a time by the builder,
* ``fold-tables`` / ``fold-spilled``: ``spilled`` plus the fold policy's plan (on by default),
  from the placements and skip rows as two whole tables (before 2026-12-02) or spilled by bucket
  and read a bucket at a time (``curation.exclusion.SpilledPlacements``); run both on one tree:
  ``--old-tree . --new-tree . --modes fold-tables fold-spilled``,

followed by ``build_skiplists`` on the skip rows (~5 % duplicates, ~2 % 'label:nsfw'), and
prints its peak RSS above the interpreter baseline (after imports) and its wall time. Figures
are medians of ``--repeats`` runs.

    .venv/bin/python benchmarks/bench_curation_memory.py [--n 200000] [--radius 0] \
        [--old-tree /work/main] [--new-tree .] [--partition-rows 100000] \
        [--modes materialised streamed]   # or: --modes streamed spilled (old tree, this one)
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

SHAPES = [(1024, 1024, 1024), (1024, 896, 1152), (1024, 768, 1344), (512, 512, 512), (512, 448, 576), (512, 384, 672)]
SOURCES = ("src-a", "src-b")
PER_SHARD = 5000


def build_world(root: str, n: int) -> None:
    import lance
    import pyarrow as pa

    rng = np.random.default_rng(0)
    lance_root, mds_root = os.path.join(root, "lance"), os.path.join(root, "mds")
    distinct = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64)
    per_source = n // len(SOURCES)
    offset = 0
    for source in SOURCES:
        shape = rng.integers(0, len(SHAPES), per_source)
        # ~5 % of rows copy another row's hash (any source, any tier)
        phash = distinct[offset : offset + per_source].copy()
        copies = rng.random(per_source) < 0.05
        phash[copies] = distinct[rng.integers(0, n, copies.sum())]
        ids = np.array([f"{source}-{i:012d}-{'f' * 20}" for i in range(per_source)], dtype=object)
        shards, index = np.empty(per_source, dtype=object), np.empty(per_source, np.int64)
        for code, (tier, h, w) in enumerate(SHAPES):
            rows = np.flatnonzero(shape == code)
            folder = os.path.join(mds_root, str(tier), f"{h}x{w}", source)
            os.makedirs(folder, exist_ok=True)
            count = -(-len(rows) // PER_SHARD)
            infos = [
                {"raw_data": {"basename": f"shard.{i:05d}.mds"}, "samples": min(PER_SHARD, len(rows) - i * PER_SHARD)} for i in range(count)
            ]
            with open(os.path.join(folder, "index.json"), "w") as handle:
                json.dump({"version": 2, "shards": infos}, handle)
            pos = np.arange(len(rows))
            shards[rows] = [f"{tier}/{h}x{w}/{source}/shard.{p // PER_SHARD:05d}.mds" for p in pos]
            index[rows] = pos % PER_SHARD
        tiers = np.array([s[0] for s in SHAPES])[shape]
        buckets = np.array([f"{s[1]}x{s[2]}" for s in SHAPES], dtype=object)[shape]
        exports = pa.table(
            {
                "sample_id": pa.array(ids, pa.string()),
                "source": pa.array([source] * per_source),
                "tier": pa.array(tiers, pa.int32()),
                "bucket": pa.array(buckets, pa.string()),
                "shard": pa.array(shards, pa.string()),
                "index_in_shard": pa.array(index),
                "phash": pa.array(phash),
            }
        )
        lance.write_dataset(exports, os.path.join(lance_root, "exports", f"{source}.lance"), max_rows_per_file=1 << 20)
        degenerate = rng.random(per_source) < 0.002
        raw = pa.table(
            {
                "sample_id": pa.array(ids, pa.string()),
                "phash_degenerate": pa.array(degenerate),
                "label": pa.array(np.where(rng.random(per_source) < 0.02, "nsfw", "ok"), pa.string()),
                "image_sha256": pa.array([f"{v:064x}" for v in rng.integers(0, 50, per_source)], pa.string()),
            }
        )
        lance.write_dataset(raw, os.path.join(lance_root, "sources", f"{source}.lance"), max_rows_per_file=1 << 20)
        offset += per_source


CHILD = r"""
import json, sys, time
from prx_data.core.paths import StoragePaths
from prx_data.curation import exclusion
from prx_data.export.skiplist import build_skiplists
from prx_data.imaging.buckets import BucketConfig
import lance, pyarrow, numpy
root, mode, radius, partition_rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode.startswith("fold"):
    from prx_data.curation import fold  # pulls in streaming (torch): imported before the baseline
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
# Imports leave a transient high-water mark above what stays resident: reset it (Linux).
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
base = status("VmRSS")
paths = StoragePaths(lance_root=root + "/lance", mds_root=root + "/mds")
prios = {"src-a": 1, "src-b": 0}
common = dict(bucket_cfg=BucketConfig(), exclude_labels=("nsfw",), dedup_radius=radius)
start = time.perf_counter()
if mode.startswith("fold"):
    # The fold policy's plan after the scan: the placements and skip rows as two tables (as
    # rebuild_skip_lists held them up to 2026-12-01), or spilled by bucket and read a bucket at a time.
    import tempfile
    from prx_data.curation.exclusion import SpilledPlacements
    from prx_data.export.skiplist import SpilledSkips
    skips = SpilledSkips(tempfile.mkdtemp(dir=root), expected_rows=exclusion.exported_row_count(paths, prios))
    placed = SpilledPlacements(tempfile.mkdtemp(dir=root), exclusion.PLACEMENT_SCHEMA) if mode == "fold-spilled" else None
    scan = exclusion.scan_skips(paths, prios, max_partition_rows=partition_rows, scratch_dir=root, into=skips,
                                placements=placed is None, placements_into=placed, **common)
    skips.close()
    policy = fold.FoldPolicy(enabled=True, max_steps=2, min_stream_samples=32)
    if placed is None:
        plan = fold.plan_folds(scan.placements, pyarrow.concat_tables(list(skips.id_ranges())), BucketConfig(), policy)
    else:
        plan = fold.plan_folds(placed.close(), skips, BucketConfig(), policy)
elif mode == "spilled":
    import tempfile
    from prx_data.export.skiplist import SpilledSkips
    folder = tempfile.mkdtemp(dir=root)
    skips = SpilledSkips(folder, expected_rows=exclusion.exported_row_count(paths, prios))
    exclusion.scan_skips(paths, prios, max_partition_rows=partition_rows, scratch_dir=root, into=skips, **common)
    skips.close()
elif mode == "streamed":
    skips = exclusion.scan_skips(paths, prios, max_partition_rows=partition_rows, scratch_dir=root, **common).skips
else:
    skips = exclusion.compute_skips(paths, prios, **common)[1]
dedup_s = time.perf_counter() - start
build_skiplists(skips, paths.mds_root)
total_s = time.perf_counter() - start
peak = status("VmHWM")
print(json.dumps({"dups": skips.num_rows, "base_mb": base / 1024, "above_mb": (peak - base) / 1024, "dedup_s": dedup_s, "total_s": total_s}))
"""


def run_child(tree: str, root: str, mode: str, radius: int, partition_rows: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, root, mode, str(radius), str(partition_rows)],
        env=env,
        cwd=os.path.abspath(tree),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--radius", type=int, default=0)
    parser.add_argument("--old-tree", default="/work/main")
    parser.add_argument("--new-tree", default=".")
    parser.add_argument("--partition-rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--modes",
        nargs=2,
        default=["materialised", "streamed"],
        metavar=("OLD", "NEW"),
        help="the old tree's mode and this tree's (materialised, streamed, spilled, fold-tables, fold-spilled)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-curmem-") as tmp:
        worlds = {}
        for size in (args.n, 4 * args.n):
            worlds[size] = os.path.join(tmp, str(size))
            build_world(worlds[size], size)
        results = {}
        before_label, after_label = f"before ({args.modes[0]})", f"after ({args.modes[1]})"
        for label, tree, mode in ((before_label, args.old_tree, args.modes[0]), (after_label, args.new_tree, args.modes[1])):
            for size, root in worlds.items():
                runs = []
                for _ in range(args.repeats):
                    # Skip lists are rebuilt from scratch each time: same work every repeat.
                    subprocess.run(["find", os.path.join(root, "mds"), "-name", "*.skip.*", "-delete"], check=True)
                    runs.append(run_child(tree, root, mode, args.radius, args.partition_rows))
                results[(label, size)] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                r = results[(label, size)]
                print(
                    f"{label:<24} n={size:>9,}  skip rows={int(r['dups']):>7,}  peak RSS above the interpreter {r['above_mb']:8.1f} MB "
                    f"(resident after imports {r['base_mb']:.0f} MB)  skips {r['dedup_s']:6.2f} s  skips+skiplists {r['total_s']:6.2f} s",
                    flush=True,
                )
            small, large = results[(label, args.n)], results[(label, 4 * args.n)]
            print(
                f"{label:<24} 4N/N: memory {large['above_mb'] / small['above_mb']:.2f} (goal <= 1.2)   "
                f"time {large['total_s'] / small['total_s']:.2f} (goal <= 4.4)",
                flush=True,
            )
        for size in (args.n, 4 * args.n):
            before, after = results[(before_label, size)], results[(after_label, size)]
            print(
                f"n={size:>9,}: after/before memory {after['above_mb'] / before['above_mb']:.2f}, time {after['total_s'] / before['total_s']:.2f}"
            )


if __name__ == "__main__":
    main()
