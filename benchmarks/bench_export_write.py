"""MDS write throughput of pre-encoded ~300 KB JPEG payloads vs writing the same bytes to files.

Prints MB/s for: write_partition (MDSWriter, 128 MB shards, staging + swap + lineage), a bare
MDSWriter, one plain file per sample, and one sequential file. Payloads are random bytes behind
a JPEG SOI marker (the writer never decodes them); page cache is not dropped, no fsync anywhere.

    .venv/bin/python benchmarks/bench_export_write.py [--samples 800] [--payload-kb 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np
from streaming import MDSWriter

from prx_data.export.mds_writer import BASE_COLUMNS, MdsWriterConfig, write_partition

BUCKETS = [(1024, 1024, 1024), (1024, 896, 1152), (1024, 1152, 896), (2048, 2048, 2048)]


def payloads(count: int, size: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [b"\xff\xd8\xff" + rng.integers(0, 256, size - 3, dtype=np.uint8).tobytes() for _ in range(count)]


def samples(n: int, blobs: list[bytes]):
    for i in range(n):
        tier, height, width = BUCKETS[i % len(BUCKETS)]
        yield {
            "tier": tier,
            "height": height,
            "width": width,
            "image": blobs[i % len(blobs)],
            "caption": "c" * 200,
            "sample_id": f"{i:032x}",
            "source": "bench",
            "original_width": 2000,
            "original_height": 1500,
        }


def timed(total_bytes: int, fn, cleanup) -> float:
    os.sync()  # start every run with no dirty pages from the previous one (not timed)
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    cleanup()
    return total_bytes / seconds / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=800)
    parser.add_argument("--payload-kb", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    blobs = payloads(16, args.payload_kb * 1024)
    total = sum(len(blobs[i % len(blobs)]) for i in range(args.samples))
    work = tempfile.mkdtemp(prefix="bench-export-", dir=args.dir)
    print(f"{args.samples} samples x {args.payload_kb} KB = {total / 1e6:.0f} MB, under {work}")
    try:

        def plain_files() -> None:
            out = os.path.join(work, "files")
            os.makedirs(out)
            for i in range(args.samples):
                with open(os.path.join(out, f"{i:08d}.jpg"), "wb") as handle:
                    handle.write(blobs[i % len(blobs)])

        def one_file() -> None:
            with open(os.path.join(work, "one.bin"), "wb") as handle:
                for i in range(args.samples):
                    handle.write(blobs[i % len(blobs)])

        def bare_mds() -> None:
            with MDSWriter(out=os.path.join(work, "bare"), columns=BASE_COLUMNS, size_limit=128 << 20) as writer:
                for sample in samples(args.samples, blobs):
                    writer.write({k: sample[k] for k in BASE_COLUMNS})

        def export() -> None:
            result = write_partition(
                samples(args.samples, blobs), mds_root=os.path.join(work, "mds"), source="bench", config=MdsWriterConfig()
            )
            assert result.lineage.num_rows == args.samples

        def cleanup() -> None:
            for name in os.listdir(work):
                path = os.path.join(work, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)

        variants = [
            ("baseline: one file per sample", plain_files),
            ("baseline: one sequential file", one_file),
            ("bare MDSWriter (128 MB shards)", bare_mds),
            ("write_partition (staging+swap+lineage)", export),
        ]
        runs: dict[str, list[float]] = {label: [] for label, _ in variants}
        for _ in range(args.repeats):  # interleaved, so drift hits every variant alike
            for label, fn in variants:
                runs[label].append(timed(total, fn, cleanup))
        rates = {label: float(np.median(values)) for label, values in runs.items()}
        for label, values in runs.items():
            print(f"{label:<40} median {rates[label]:8.1f} MB/s  (runs: {', '.join(f'{v:.0f}' for v in values)})")
        base = rates["baseline: one file per sample"]
        for label in ("bare MDSWriter (128 MB shards)", "write_partition (staging+swap+lineage)"):
            print(f"{label}: {rates[label] / base:.2f}x the one-file-per-sample baseline")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
