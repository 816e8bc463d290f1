"""Peak memory and time of the data card (``curation/report.py``, written on every opt-out apply
and skip-list rebuild) at N and 4N rows, for two code trees (issue 21 item 3).

One source of N rows is built per size: a raw table with ~150-word captions, labels and model
columns, and an exports table (tier, bucket, drop reasons for a fifth of the rows), in fragments of
``--rows-per-fragment`` rows. A fresh
subprocess per (tree, size) runs ``build_data_card`` and prints its peak RSS above the
interpreter's after imports and its wall time; figures are medians of ``--repeats`` runs, with
the ratio of the new tree against the old in the same run.

    git worktree add /tmp/old-tree <old commit>
    .venv/bin/python benchmarks/bench_card_memory.py --old-tree /tmp/old-tree [--n 100000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

import numpy as np
from peak_rss import PRELUDE, run_in_tree

WORDS = np.array([f"word{i}" for i in range(2000)])


def build_world(root: str, n: int, rows_per_fragment: int) -> None:
    import lance
    import pyarrow as pa

    from prx_data.core.ids import sample_id
    from prx_data.core.paths import StoragePaths

    rng = np.random.default_rng(n)
    paths = StoragePaths(lance_root=os.path.join(root, "lance"), mds_root=os.path.join(root, "mds"))
    ids = pa.array([sample_id("bench", str(i)) for i in range(n)], pa.string())
    lengths = rng.integers(100, 200, n)
    captions = [" ".join(WORDS[rng.integers(0, len(WORDS), k)]) for k in lengths]
    raw = pa.table(
        {
            "sample_id": ids,
            "status": pa.array(np.where(rng.random(n) < 0.02, "error", "ok")),
            "caption": pa.array(captions),
            "caption_model": pa.array(["qwen3-vl-8b"] * n),
            "caption_prompt_version": pa.array(np.full(n, 3)),
            "label": pa.array(rng.choice(["visual", "text", "nsfw"], n)),
            "label_model": pa.array(["qwen3-8b"] * n),
        }
    )
    lance.write_dataset(raw, paths.raw_table("bench"), max_rows_per_file=rows_per_fragment)
    dropped = rng.random(n) < 0.2
    exports = pa.table(
        {
            "sample_id": ids,
            "tier": pa.array(rng.choice([256, 512, 1024], n).astype(np.int32)),
            "bucket": pa.array(rng.choice(["16x16", "12x20", "20x12"], n)),
            "drop_reason": pa.array(["duplicate: of another sample" if d else None for d in dropped]),
        }
    )
    lance.write_dataset(exports, paths.exports_table("bench"), max_rows_per_file=rows_per_fragment)


CHILD = (
    r"""
import json, os, sys, time
from prx_data.core.paths import StoragePaths
from prx_data.curation.report import build_data_card
import lance, pyarrow
root = sys.argv[1]
"""
    + PRELUDE
    + r"""
start = time.perf_counter()
card = build_data_card(StoragePaths(lance_root=os.path.join(root, "lance"), mds_root=os.path.join(root, "mds")), ["bench"])
seconds = time.perf_counter() - start
print(json.dumps({"exported": card.totals["exported"], "above_mb": (peak_kb() - base) / 1024, "seconds": seconds}))
"""
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--old-tree", required=True, help="a checkout of the baseline commit")
    parser.add_argument("--new-tree", default=".")
    parser.add_argument("--repeats", type=int, default=3)
    # Fragments smaller than the table, as a large source's are (1 M rows by default against
    # tens of millions): a scan holds a fragment's worth of a column, the old card the source.
    parser.add_argument("--rows-per-fragment", type=int, default=16_384)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-card-") as tmp:
        worlds = {}
        for size in (args.n, 4 * args.n):
            worlds[size] = os.path.join(tmp, str(size))
            build_world(worlds[size], size, args.rows_per_fragment)
        results: dict[tuple[str, int], dict] = {}
        for label, tree in (("old", args.old_tree), ("new", args.new_tree)):
            for size, root in worlds.items():
                runs = [run_in_tree(tree, CHILD, root) for _ in range(args.repeats)]
                assert len({r["exported"] for r in runs}) == 1
                results[label, size] = {k: statistics.median(r[k] for r in runs) for k in ("above_mb", "seconds")}
                print(
                    f"{label:4s} {size:>9,} rows: peak RSS +{results[label, size]['above_mb']:7.1f} MB, "
                    f"{results[label, size]['seconds']:6.2f} s ({runs[0]['exported']:,} exported)",
                    flush=True,
                )
        print()
        for size in worlds:
            old, new = results["old", size], results["new", size]
            print(
                f"{size:>9,} rows: memory new/old {new['above_mb'] / old['above_mb']:.2f}, time new/old {new['seconds'] / old['seconds']:.2f}"
            )
        for label in ("old", "new"):
            small, large = results[label, args.n], results[label, 4 * args.n]
            print(
                f"{label}: 4x rows -> memory x{large['above_mb'] / small['above_mb']:.2f}, time x{large['seconds'] / small['seconds']:.2f}"
            )


if __name__ == "__main__":
    main()
