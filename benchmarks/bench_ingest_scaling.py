"""Ingest scaling: throughput with 1 and 2 workers on one corpus, and the driver's memory.

    .venv/bin/python -m benchmarks.bench_ingest_scaling --n 400 --repeats 3

Corpus: an image folder of ``n`` photo-like JPEGs (``benchmarks/photos.py``), read as folder
batches of ``--batch`` files (the input units). Each repeat ingests it from scratch with
``workers: 1`` (units read in this process) and ``workers: 2`` (Ray tasks on a local head
started once, the driver connected once as a run's RayResource is, so the timings are of the
work; a warm-up run starts the workers). Scaling efficiency = t(1) / (2 * t(2)); 1.0 is
perfect. Also printed: a cold 2-worker ingest, where the driver connects to Ray for the ingest
alone and the job's worker processes start (the fixed cost a run pays once).

Memory: peak RSS of a child driver ingesting n and then 4n files, with 1 worker (it reads
every unit itself) and with 2 (the workers are separate processes); flat means the two stay
close, not 4x apart.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.photos import make_photo_jpegs


def ingest(folder: Path, uri: str, workers: int, batch: int) -> float:
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.plan import unit_listing
    from prx_data.ingest.registry import RegisteredSource, SourceSpec

    unit_listing.FOLDER_BATCH = batch
    spec = SourceSpec(name="bench", shape="image_folder", location=str(folder))
    shutil.rmtree(uri, ignore_errors=True)
    start = time.perf_counter()
    stats = ingest_source(RegisteredSource(spec, folder / "bench.yaml"), uri, workers=workers)
    took = time.perf_counter() - start
    assert stats.rows_by_status.get("ok") == sum(1 for _ in folder.glob("*.jpg")), stats.rows_by_status
    return took


def _child_peak_rss(folder: Path, uri: str, batch: int, workers: int) -> int:
    connect = "import ray,os;ray.init(address=os.environ['PRX_RAY_ADDRESS'],log_to_driver=False);" if workers > 1 else ""
    code = (
        "import resource;from pathlib import Path;from benchmarks.bench_ingest_scaling import ingest;"
        + connect
        + f"ingest(Path({str(folder)!r}), {uri!r}, {workers}, {batch});print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    return int(out.stdout.strip().splitlines()[-1])


def _linked(photos: list[Path], folder: Path, copies: int) -> Path:
    folder.mkdir()
    for rep in range(copies):
        for p in photos:
            os.link(p, folder / f"{rep}-{p.name}")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--batch", type=int, default=50, help="files per input unit")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from prx_data.app.local_ray import start_head
    from prx_data.core.quiet import quiet_ray_env
    from prx_data.core.ray_tasks import ADDRESS_VAR

    photos = make_photo_jpegs(args.n, Path(__file__).parent / "_cache" / "photos")
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-scaling-"))
    folder = _linked(photos, work / "photos", 1)
    big = _linked(photos, work / "photos4x", 4)
    total_mb = sum(p.stat().st_size for p in photos) / 1e6
    head = start_head(num_cpus=2)
    os.environ.update({ADDRESS_VAR: head.address, **quiet_ray_env()})
    import ray

    try:
        cold = []
        for _ in range(args.repeats):
            cold.append(ingest(folder, str(work / "cold.lance"), 2, args.batch))  # connects, starts workers, disconnects
        ray.init(address=head.address, include_dashboard=False, configure_logging=False, log_to_driver=False)
        ingest(folder, str(work / "warm.lance"), 2, args.batch)  # starts this job's Ray workers
        times: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.repeats):
            for workers in (1, 2):
                times[workers].append(ingest(folder, str(work / f"w{workers}.lance"), workers, args.batch))
        t1, t2 = statistics.median(times[1]), statistics.median(times[2])
        print(
            f"corpus: {args.n} JPEGs, {total_mb:.1f} MB, units of {args.batch} files ({-(-args.n // args.batch)} units), "
            f"{os.cpu_count()} CPUs, medians of {args.repeats}"
        )
        print(f"1 worker : {args.n / t1:7.1f} images/s  median {t1:.3f}s  runs {[round(t, 3) for t in times[1]]}")
        print(f"2 workers: {args.n / t2:7.1f} images/s  median {t2:.3f}s  runs {[round(t, 3) for t in times[2]]}")
        print(f"speed-up {t1 / t2:.2f}x, scaling efficiency {t1 / (2 * t2):.2f}")
        tc = statistics.median(cold)
        print(f"2 workers, cold (connect + start workers per ingest): median {tc:.3f}s, fixed cost ~{tc - t2:.2f}s per run")
        ray.shutdown()
        for workers in (1, 2):
            rss_1 = _child_peak_rss(folder, str(work / "m1.lance"), args.batch, workers)
            rss_4 = _child_peak_rss(big, str(work / "m4.lance"), args.batch, workers)
            print(
                f"driver peak RSS ({workers} worker(s)): {rss_1 / 1024:.0f} MB for n={args.n}, {rss_4 / 1024:.0f} MB for n={4 * args.n} "
                f"(ratio {rss_4 / rss_1:.2f}; +{(rss_4 - rss_1) / 1024:.0f} MB for +{3 * total_mb:.0f} MB of images)"
            )
    finally:
        head.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
