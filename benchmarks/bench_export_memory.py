"""Peak memory of export planning at N and 4N rows: it must grow with a batch, not the source.

    .venv/bin/python -m benchmarks.bench_export_memory --n 10000 --repeats 3 [--baseline /work/main]

Builds two synthetic sources (N and 4N ok rows, ~1 KB of caption each, a tiny 32x32 JPEG so
the first export is cheap under a one-bucket config), exports each once, then measures in a
fresh subprocess per run the peak RSS (``ru_maxrss`` of the child) of
- a no-change re-run (planning only: nothing is encoded or written), and
- a re-run after 5 captions changed (planning + 5 rows written with their old bytes),
minus the child's RSS after its imports (the interpreter baseline). Medians over repeats;
prints the 4N / N ratio of that planning memory (goal: at most 1.2) and the driver bytes per
source row. ``--baseline PATH`` runs the same children with another checkout's code (e.g. main
before the change) interleaved with this one, and prints both; ``--max-partition-rows R`` adds
this checkout with planning spilled in partitions of about R rows (e.g. N / 4).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOURCE = "memsrc"
CHILD = r"""
import json, resource, sys
import lance
from prx_data.imaging.buckets import BucketConfig
from prx_data.stages.export_stage import export_source
raw, mds, exports, n_change, tag = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
extra = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
if n_change:
    ds = lance.dataset(raw)
    ids = ds.to_table(columns=["sample_id"], limit=n_change).column("sample_id").to_pylist()
    ds.update({"caption": f"'{tag} ' || caption"}, where="sample_id IN (" + ", ".join(repr(i) for i in ids) + ")")
cfg = BucketConfig(tiers=(32,), ar_min=1.0, ar_max=1.0, shapes_per_tier=1, multiple=16)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stats = export_source(raw, "memsrc", mds_root=mds, exports_uri=exports, bucket_cfg=cfg, executor="local", **extra)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"base_kb": base, "peak_kb": peak, "kept": stats.kept, "reused": stats.reused, "encoded": stats.encoded}))
"""


def write_source(uri: str, n: int) -> None:
    import hashlib
    from datetime import UTC, datetime

    import lance
    import pyarrow as pa

    from prx_data.core.ids import sample_id
    from prx_data.core.schema import CAPTION_COLUMNS, LABEL_COLUMNS, raw_schema
    from prx_data_tests import images

    schema = pa.schema([*raw_schema(), *CAPTION_COLUMNS, *LABEL_COLUMNS])
    data = images.jpeg(32, 32, seed=1)
    rng = random.Random(n)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(2000)]
    now = datetime.now(UTC)

    def batches():
        for start in range(0, n, 5000):
            rows = [
                {
                    "sample_id": sample_id(SOURCE, f"k{i}"),
                    "source": SOURCE,
                    "source_key": f"k{i}",
                    "image": data,
                    "image_format": "jpeg",
                    "image_sha256": hashlib.sha256(data).hexdigest(),
                    "width": 32,
                    "height": 32,
                    "status": "ok",
                    "ingested_at": now,
                    "caption": " ".join(rng.choices(words, k=170))[:1000],
                    "caption_model": "source",
                    "label": "visual",
                }
                for i in range(start, min(n, start + 5000))
            ]
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), uri, mode="overwrite")


def child(code: Path, work: Path, n_change: int, tag: str, extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "RAY_USAGE_STATS_ENABLED": "0"}
    args = [str(work / "raw.lance"), str(work / "mds"), str(work / "exports.lance"), str(n_change), tag, json.dumps(extra or {})]
    out = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, cwd=str(code), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to measure in the same run")
    parser.add_argument(
        "--max-partition-rows",
        type=int,
        default=None,
        help="also run this checkout with export_source(max_partition_rows=...) (planning spilled in partitions)",
    )
    args = parser.parse_args(argv)
    codes: dict[str, tuple[Path, dict[str, Any]]] = {
        "this": (ROOT, {}),
        **({"baseline": (args.baseline.resolve(), {})} if args.baseline else {}),
    }
    if args.max_partition_rows:
        codes[f"this/p{args.max_partition_rows}"] = (ROOT, {"max_partition_rows": args.max_partition_rows})
    top = Path(tempfile.mkdtemp(prefix="bench-export-mem-"))
    results: dict[tuple[str, str, int], list[float]] = {}
    try:
        sizes = (args.n, 4 * args.n)
        for n in sizes:
            work = top / str(n)
            work.mkdir()
            write_source(str(work / "raw.lance"), n)
            first = child(ROOT, work, 0, "setup")
            assert first["encoded"] == n, first
            for r in range(args.repeats):
                for name, (code, extra) in codes.items():
                    for kind, n_change in (("no-change", 0), ("5 captions", 5)):
                        got = child(code, work, n_change, f"{name.replace('/', '-')}{r}", extra)
                        expect_reused = n_change
                        assert (got["kept"], got["reused"], got["encoded"]) == (n - expect_reused, expect_reused, 0), (name, kind, got)
                        results.setdefault((name, kind, n), []).append((got["peak_kb"] - got["base_kb"]) / 1024)
        print(f"export planning memory above the interpreter baseline (MiB, median of {args.repeats}); N={args.n}")
        for name in codes:
            for kind in ("no-change", "5 captions"):
                small, large = (statistics.median(results[(name, kind, n)]) for n in sizes)
                per_row = (large - small) * 1024 * 1024 / (sizes[1] - sizes[0])
                print(
                    f"  {name:14s} {kind:11s} N: {small:8.1f}  4N: {large:8.1f}  ratio 4N/N: {large / max(small, 0.1):5.2f}"
                    f"  driver bytes/row: {per_row:7.0f}"
                )
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
