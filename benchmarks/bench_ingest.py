"""Ingest throughput per core against a plain pyarrow + pylance baseline, and memory growth.

    .venv/bin/python -m benchmarks.bench_ingest --n 300 --repeats 3

Baseline: read each file and write its bytes into one Lance table (no parsing). Ours: the real
``ingest_source`` on an ``image_folder`` spec (header parse, EXIF, truncation check, sha256,
the full schema). Target: ours within 1.5x of the baseline's time. Memory: peak RSS of a child
process ingesting n and then 3n files (a copy-free repeat of the same photos); flat means the
difference stays near zero, not proportional to n.

The probe does not decode a whole JPEG's scans: that check is made by the perceptual hash's
decode (``imaging.jpeg_data``, priced in ``bench_image_core.py``), so every JPEG is
Huffman-decoded once, not twice. ``--progressive`` re-saves the photos as progressive JPEGs.
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

import lance
import pyarrow as pa

from benchmarks.photos import make_photo_jpegs


def baseline(paths: list[Path], uri: str, blob: bool = True) -> float:
    """Same storage layout as ours (blob column) unless ``blob`` is False."""
    start = time.perf_counter()
    image = pa.field("image", pa.large_binary(), metadata={"lance-encoding:blob": "true"} if blob else None)
    schema = pa.schema([pa.field("key", pa.string()), image])

    def batches():
        for i in range(0, len(paths), 256):
            chunk = paths[i : i + 256]
            yield pa.record_batch(
                [pa.array([str(p) for p in chunk]), pa.array([p.read_bytes() for p in chunk], pa.large_binary())], schema=schema
            )

    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), uri, mode="overwrite")
    return time.perf_counter() - start


def ours(folder: Path, uri: str) -> float:
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import RegisteredSource, SourceSpec

    spec = SourceSpec(name="bench", shape="image_folder", location=str(folder))
    start = time.perf_counter()
    shutil.rmtree(uri, ignore_errors=True)
    stats = ingest_source(RegisteredSource(spec, folder / "bench.yaml"), uri, workers=1)
    assert stats.rows_by_status.get("ok") == len(list(folder.glob("*.jpg"))), stats.rows_by_status
    return time.perf_counter() - start


def _child_peak_rss(folder: Path, uri: str) -> int:
    code = (
        "import resource,sys;from pathlib import Path;from benchmarks.bench_ingest import ours;"
        f"ours(Path({str(folder)!r}), {uri!r});print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    return int(out.stdout.strip().splitlines()[-1])


def _progressive_copies(photos: list[Path], folder: Path) -> list[Path]:
    from PIL import Image

    folder.mkdir(parents=True)
    out = []
    for p in photos:
        with Image.open(p) as img:
            img.save(folder / p.name, "JPEG", quality=90, progressive=True)
        out.append(folder / p.name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--progressive", action="store_true", help="re-save the photos as progressive JPEGs")
    parser.add_argument("--skip-memory", action="store_true", help="leave out the peak-RSS children")
    args = parser.parse_args(argv)

    photos = make_photo_jpegs(args.n, Path(__file__).parent / "_cache" / "photos")
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    if args.progressive:
        photos = _progressive_copies(photos, work / "progressive")
    folder = work / "photos"
    folder.mkdir()
    for p in photos:
        os.link(p, folder / p.name) if hasattr(os, "link") else shutil.copy(p, folder / p.name)
    total_mb = sum(p.stat().st_size for p in photos) / 1e6

    base_t, plain_t, our_t = [], [], []
    ours(folder, str(work / "warm.lance"))  # imports and first-touch costs out of the timings
    for _ in range(args.repeats):
        base_t.append(baseline(photos, str(work / "base.lance")))
        plain_t.append(baseline(photos, str(work / "plain.lance"), blob=False))
        our_t.append(ours(folder, str(work / "ours.lance")))
    b, o, pl = statistics.median(base_t), statistics.median(our_t), statistics.median(plain_t)
    kind = "progressive" if args.progressive else "baseline"
    print(f"files: {len(photos)} {kind} JPEGs, {total_mb:.1f} MB, single process (1 core), {args.repeats} repeats")
    print(f"baseline (read + write bytes, blob column): {len(photos) / b:8.1f} images/s  median {b:.3f}s")
    print(f"  same with a plain binary column:          {len(photos) / pl:8.1f} images/s  median {pl:.3f}s")
    print(f"prx-data ingest_source:                     {len(photos) / o:8.1f} images/s  median {o:.3f}s")
    print(f"time ratio ours/baseline: {o / b:.2f}x  (target <= 1.5x)")
    if args.skip_memory:
        shutil.rmtree(work, ignore_errors=True)
        return 0

    big = work / "photos3x"
    big.mkdir()
    for rep in range(3):
        for p in photos:
            os.link(p, big / f"{rep}-{p.name}")
    rss_1 = _child_peak_rss(folder, str(work / "m1.lance"))
    rss_3 = _child_peak_rss(big, str(work / "m3.lance"))
    print(
        f"peak RSS: {rss_1 / 1024:.0f} MB for n={len(photos)}, {rss_3 / 1024:.0f} MB for n={3 * len(photos)} "
        f"(+{(rss_3 - rss_1) / 1024:.0f} MB for +{2 * total_mb:.0f} MB of images)"
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
