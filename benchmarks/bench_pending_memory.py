"""Peak memory and time of a column stage's driver-side bookkeeping on a first run (issue 21
item 3: "no per-row Python dicts over a whole source"), at N and 4N rows, for two code trees.

A Lance table of N rows (``sample_id``, ``status``, ``image_sha256``) is built once per size.
A fresh subprocess per (tree, size) runs ``run_column_stage`` with the phash stage (a stage with
inputs, so every row to do carries an input fingerprint) and a processor that makes its values
from the ids without reading an image: what is measured is the driver's part only (finding the
rows to do, fingerprinting them, attaching fingerprints to results, staging and the commit).
It prints its peak RSS above the interpreter's after imports (with the CLI's cap of two malloc
arenas, fragments of ``--rows-per-fragment`` rows), and its wall time; figures are
medians of ``--repeats`` runs, with the ratio of the new tree against the old in the same run.

    git worktree add /tmp/old-tree <old commit>
    .venv/bin/python benchmarks/bench_pending_memory.py --old-tree /tmp/old-tree [--n 250000] [--range-rows 250000]

``--range-rows`` sets a ranged tree's rows per sample-id range (a tree from before ranges holds
every row to do, whatever it says), so the bound shows at sizes that run in minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile

import numpy as np
from peak_rss import PRELUDE, run_in_tree


def build_table(uri: str, n: int, rows_per_fragment: int) -> None:
    import lance
    import pyarrow as pa

    from prx_data.core.ids import sample_id

    rng = np.random.default_rng(0)
    ids = [sample_id("bench", str(i)) for i in range(n)]
    sha = [f"{v:064x}" for v in rng.integers(0, np.iinfo(np.int64).max, n)]
    status = np.where(rng.random(n) < 0.01, "error", "ok")
    table = pa.table(
        {"sample_id": pa.array(ids, pa.string()), "status": pa.array(status, pa.string()), "image_sha256": pa.array(sha, pa.string())}
    )
    lance.write_dataset(table, uri, max_rows_per_file=rows_per_fragment)


CHILD = (
    r"""
import inspect, json, sys, time
import numpy as np, pyarrow as pa
from prx_data.stages.column_stage import address_chunks, run_column_stage
from prx_data.stages.phash_stage import PHASH_STAGE
from prx_data.imaging.phash import PHASH_VERSION
uri = sys.argv[1]
def processor(ds, todo):
    for chunk in address_chunks(todo, 4096):
        n = chunk.num_rows
        yield pa.table({"sample_id": chunk.column("sample_id"), "phash": pa.array(np.arange(n, dtype=np.int64)),
                        "phash_degenerate": pa.array(np.zeros(n, dtype=bool)), "phash_version": pa.array([PHASH_VERSION] * n),
                        "phash_error": pa.nulls(n, pa.string())})
"""
    + PRELUDE
    + r"""
start = time.perf_counter()
# A tree whose stages work one sample-id range at a time is told the range (older ones hold all).
ranged = "range_rows" in inspect.signature(run_column_stage).parameters and int(sys.argv[2]) > 0
stats = run_column_stage(uri, PHASH_STAGE, processor, **({"range_rows": int(sys.argv[2])} if ranged else {}))
seconds = time.perf_counter() - start
print(json.dumps({"processed": stats.processed, "above_mb": (peak_kb() - base) / 1024, "seconds": seconds}))
"""
)


def run_child(tree: str, uri: str, range_rows: int) -> dict:
    return run_in_tree(tree, CHILD, uri, str(range_rows))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=250_000)
    parser.add_argument("--old-tree", required=True, help="a checkout of the baseline commit")
    parser.add_argument("--new-tree", default=".")
    parser.add_argument("--repeats", type=int, default=3)
    # Fragments smaller than the table: the commit holds one fragment's results at a time, so
    # what still grows with the rows is the driver's own bookkeeping.
    parser.add_argument("--rows-per-fragment", type=int, default=65_536)
    # Rows to do per sample-id range, for a tree that plans by range (0: its default, 1 M).
    parser.add_argument("--range-rows", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pending-") as tmp:
        tables = {}
        for size in (args.n, 4 * args.n):
            tables[size] = os.path.join(tmp, f"{size}.lance")
            build_table(tables[size], size, args.rows_per_fragment)
        results: dict[tuple[str, int], dict] = {}
        for label, tree in (("old", args.old_tree), ("new", args.new_tree)):
            for size, uri in tables.items():
                runs = []
                for _ in range(args.repeats):
                    # Each run starts from a copy of the same first-run table.
                    work = os.path.join(tmp, "work.lance")
                    shutil.rmtree(work, ignore_errors=True)
                    shutil.copytree(uri, work)
                    runs.append(run_child(tree, work, args.range_rows))
                results[label, size] = {
                    "above_mb": statistics.median(r["above_mb"] for r in runs),
                    "seconds": statistics.median(r["seconds"] for r in runs),
                    "processed": runs[0]["processed"],
                }
                print(
                    f"{label:4s} {size:>9,} rows: peak RSS +{results[label, size]['above_mb']:7.1f} MB, "
                    f"{results[label, size]['seconds']:6.2f} s ({results[label, size]['processed']:,} processed)",
                    flush=True,
                )
        print()
        for size in tables:
            old, new = results["old", size], results["new", size]
            print(
                f"{size:>9,} rows: memory new/old {new['above_mb'] / old['above_mb']:.2f}, time new/old {new['seconds'] / old['seconds']:.2f}, "
                f"bytes per row new {new['above_mb'] * 2**20 / size:.0f} old {old['above_mb'] * 2**20 / size:.0f}"
            )
        for label in ("old", "new"):
            small, large = results[label, args.n], results[label, 4 * args.n]
            print(
                f"{label}: 4x rows -> memory x{large['above_mb'] / small['above_mb']:.2f}, time x{large['seconds'] / small['seconds']:.2f}"
            )


if __name__ == "__main__":
    main()
