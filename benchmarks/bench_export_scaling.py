"""Export throughput with 1 and 2 workers, and the scaling efficiency (parallel MDS write).

    .venv/bin/python -m benchmarks.bench_export_scaling --n 120 --repeats 2

For W in (1, 2): a Ray of W CPUs in this process, the export of N real photos with
``executor='ray', write_workers=W`` (W tasks, each decoding, resizing, encoding and writing its
own shards; one commit merges their indexes), wall seconds from a fresh root, medians over
repeats after a warm-up export (Ray workers import the stack once). Efficiency =
(throughput with 2 / throughput with 1) / 2. On a machine whose cores other work shares, the
figure is a floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_rerun import SOURCE, write_table  # noqa: E402
from benchmarks.photos import DEFAULT_CACHE, make_photo_jpegs  # noqa: E402
from prx_data.core.paths import StoragePaths  # noqa: E402
from prx_data.stages.export_stage import export_source  # noqa: E402


def timed_export(photos: list[Path], work: Path, workers: int) -> float:
    paths = StoragePaths(str(work / "lance"), str(work / "mds"))
    write_table(paths.raw_table(SOURCE), photos, {})
    started = time.perf_counter()
    stats = export_source(
        paths.raw_table(SOURCE),
        SOURCE,
        mds_root=paths.mds_root,
        exports_uri=paths.exports_table(SOURCE),
        executor="ray",
        write_workers=workers,
    )
    seconds = time.perf_counter() - started
    assert stats.encoded == len(photos), stats
    shutil.rmtree(work, ignore_errors=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    import ray

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    photos = make_photo_jpegs(args.n, DEFAULT_CACHE)
    work = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    seconds = {}
    try:
        for workers in (1, 2):
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            try:
                timed_export(photos[: 2 * workers], work / f"warm{workers}", workers)
                seconds[workers] = statistics.median(timed_export(photos, work / f"w{workers}-{r}", workers) for r in range(args.repeats))
            finally:
                ray.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = {w: args.n / s for w, s in seconds.items()}
    print(f"{args.n} photos, 1-2 MP JPEG, default tiers, wall s, medians of {args.repeats} (cores on this machine: {os.cpu_count()})")
    for w in (1, 2):
        print(f"  {w} worker{'s' if w > 1 else ' '}: {seconds[w]:8.2f} s   {rate[w]:6.1f} images/s")
    print(f"  speed-up {rate[2] / rate[1]:.2f}x, scaling efficiency {100 * rate[2] / rate[1] / 2:.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
