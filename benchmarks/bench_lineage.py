"""Lineage lookups at 1M rows, and `prx-data lineage` wall time including start-up.

Synthetic metadata rows (no image bytes; ``--rows`` over 4 sources) with their exports tables,
indexed as ``table_maintenance`` indexes them (BTREE on sample_id). Times ``lineage.find`` by
sample id, by ``source:key`` and by URL (p50 / p90 over ``--lookups`` random rows; goal p50 <
50 ms), the same lookups before the tables are indexed (baseline, same run), and the CLI as a
fresh process (goal < 2 s), with and without ``--runs`` (which imports Dagster).

    .venv/bin/python -m benchmarks.bench_lineage [--rows 1000000] [--lookups 50]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


def time_lookups(paths, names, picks, kind: str) -> list[float]:
    from prx_data.curation.lineage import find

    out = []
    for row in picks:
        query = {
            "sample_id": {"sample_id": row["sample_id"]},
            "key": {"source_key": f"{row['source']}:{row['source_key']}"},
            "url": {"url": row["source_url"]},
        }[kind]
        started = time.perf_counter()
        found = find(paths, names, **query)
        out.append(time.perf_counter() - started)
        assert [r.sample_id for r in found] == [row["sample_id"]], (kind, row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=50)
    args = parser.parse_args()

    from benchmarks.bench_optout import synthetic
    from prx_data.core.paths import StoragePaths
    from prx_data.curation.maintenance import EXPORT_INDEXES, SOURCE_INDEXES, maintain_table

    root = Path(tempfile.mkdtemp(prefix="bench-lineage-"))
    started = time.perf_counter()
    names, corpus = synthetic(root, args.rows)
    paths = StoragePaths(lance_root=str(root / "lance"), mds_root=str(root / "mds"))
    (root / "sources").mkdir()
    for name in names:
        (root / "raw" / name).mkdir(parents=True)
        (root / "sources" / f"{name}.yaml").write_text(f"name: {name}\nshape: image_folder\nlocation: ../raw/{name}\n")
    print(f"{args.rows:,} rows in {len(names)} sources written in {time.perf_counter() - started:.1f}s")
    rng = np.random.default_rng(2)
    picks = corpus.take(rng.integers(0, corpus.num_rows, size=args.lookups)).to_pylist()

    baseline = {kind: time_lookups(paths, names, picks[: max(5, args.lookups // 5)], kind) for kind in ("sample_id", "key", "url")}
    started = time.perf_counter()
    for name in names:
        maintain_table(paths.raw_table(name), target_rows_per_fragment=1_000_000, indexes=SOURCE_INDEXES)
        maintain_table(paths.exports_table(name), target_rows_per_fragment=1_000_000, indexes=EXPORT_INDEXES)
    print(f"indexed (table_maintenance) in {time.perf_counter() - started:.1f}s")
    for kind in ("sample_id", "key", "url"):
        times = time_lookups(paths, names, picks, kind)
        base = statistics.median(baseline[kind])
        print(
            f"lookup by {kind:<9}: p50 {_pct(times, 50):7.1f} ms  p90 {_pct(times, 90):7.1f} ms (goal p50 < 50 ms) | "
            f"baseline unindexed p50 {base * 1000:7.1f} ms | ratio {base / statistics.median(times):.1f}x"
        )

    env = {k: v for k, v in os.environ.items() if not k.startswith("PRX_")}
    env.update(PRX_DATA_ROOT=str(root), PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    row = picks[0]
    for extra, label in (([], "prx-data lineage --id"), (["--runs"], "prx-data lineage --id --runs (imports Dagster)")):
        walls, cpus = [], []
        for _ in range(3):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "prx_data.app.cli", "lineage", "--id", row["sample_id"], *extra],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        # CPU time too: on a shared machine the wall time mostly measures the other processes.
        print(
            f"{label}: wall median {statistics.median(walls):.2f}s, CPU median {statistics.median(cpus):.2f}s incl. start-up "
            f"(goal < 2 s wall without --runs; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
        )
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import prx_data.app.cli"], env=env, check=True)
    print(f"  (bare interpreter + `import prx_data.app.cli`: {time.perf_counter() - started:.2f}s)")


if __name__ == "__main__":
    main()
