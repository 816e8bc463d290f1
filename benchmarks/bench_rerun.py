"""What a re-run of the export costs, against a full export, on the same corpus of real photos.

    .venv/bin/python -m benchmarks.bench_rerun --n 200 --repeats 3

One process (``executor='local'``), wall seconds, medians over repeats; every repeat starts from
a fresh root. The source table is written directly (ingest is not part of this measurement).

- first: the first export of N photos (everything is decoded, resized and encoded);
- no change: the same export again (the target: at most 5 % of the first run);
- append: 1 % more rows land in the table, the export runs again (target: at most 5 % of a full
  export of the grown table, measured as a first export of all N + 1 % rows in a fresh root);
- recaption: 1 % of the captions change (re-uses the encoded bytes, no image work).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lance  # noqa: E402
import pyarrow as pa  # noqa: E402

from benchmarks.photos import DEFAULT_CACHE, make_photo_jpegs  # noqa: E402
from prx_data.core.ids import sample_id  # noqa: E402
from prx_data.core.paths import StoragePaths  # noqa: E402
from prx_data.core.schema import CAPTION_COLUMNS, raw_schema  # noqa: E402
from prx_data.imaging.decode import read_header  # noqa: E402
from prx_data.stages.export_stage import export_source  # noqa: E402

SOURCE = "bench"


def write_table(uri: str, photos: list[Path], captions: dict[str, str]) -> None:
    schema = pa.schema([*raw_schema(), *CAPTION_COLUMNS])
    now = datetime.now(UTC)
    rows = []
    for path in photos:
        data = path.read_bytes()
        header = read_header(data)
        rows.append(
            {
                "sample_id": sample_id(SOURCE, path.name),
                "source": SOURCE,
                "source_key": path.name,
                "image": data,
                "image_format": "jpeg",
                "image_sha256": hashlib.sha256(data).hexdigest(),
                "width": header.width,
                "height": header.height,
                "status": "ok",
                "ingested_at": now,
                "caption": captions.get(path.name, f"a photo, {path.stem}"),
                "caption_model": "source",
            }
        )
    lance.write_dataset(pa.Table.from_pylist(rows, schema=schema), uri, mode="overwrite")


def export(paths: StoragePaths):
    started = time.perf_counter()
    stats = export_source(
        paths.raw_table(SOURCE), SOURCE, mds_root=paths.mds_root, exports_uri=paths.exports_table(SOURCE), executor="local"
    )
    return time.perf_counter() - started, stats


def one_repeat(photos: list[Path], extra: list[Path], work: Path) -> dict[str, float]:
    out = {}
    full = StoragePaths(str(work / "full" / "lance"), str(work / "full" / "mds"))
    write_table(full.raw_table(SOURCE), photos + extra, {})
    out["full"], _ = export(full)

    paths = StoragePaths(str(work / "inc" / "lance"), str(work / "inc" / "mds"))
    write_table(paths.raw_table(SOURCE), photos, {})
    out["first"], first = export(paths)
    out["no change"], noop = export(paths)
    assert noop.encoded == 0 and not noop.changed, noop
    write_table(paths.raw_table(SOURCE), photos + extra, {})
    out["append"], appended = export(paths)
    assert appended.encoded == len(extra), appended
    changed = {p.name: f"an edited caption of {p.stem}" for p in photos[: len(extra)]}
    write_table(paths.raw_table(SOURCE), photos + extra, changed)
    out["recaption"], recaptioned = export(paths)
    assert recaptioned.encoded == 0 and recaptioned.reused >= len(changed), recaptioned
    out["exported"] = first.exported
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    n_extra = max(1, args.n // 100)
    files = make_photo_jpegs(args.n + n_extra, DEFAULT_CACHE)
    photos, extra = files[: args.n], files[args.n :]
    work = Path(tempfile.mkdtemp(prefix="bench-rerun-"))
    runs = []
    try:
        for r in range(args.repeats):
            runs.append(one_repeat(photos, extra, work / f"r{r}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    print(f"{args.n} photos (+{n_extra} appended), 1-2 MP JPEG, default tiers, one process, wall s, medians of {args.repeats}")
    print(f"  first export ({int(med['exported'])} exported): {med['first']:8.3f} s")
    print(f"  full export of {args.n + n_extra} rows:     {med['full']:8.3f} s")
    print(
        f"  re-run, no change:          {med['no change']:8.3f} s   {100 * med['no change'] / med['first']:5.2f} % of the first run (target <= 5 %)"
    )
    print(
        f"  re-run, +{n_extra} rows (1 %):       {med['append']:8.3f} s   {100 * med['append'] / med['full']:5.2f} % of a full export (target <= 5 %)"
    )
    print(
        f"  re-run, {n_extra} captions edited:  {med['recaption']:8.3f} s   {100 * med['recaption'] / med['full']:5.2f} % of a full export (no image work)"
    )
    ok = med["no change"] <= 0.05 * med["first"] and med["append"] <= 0.05 * med["full"]
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
