from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from prx_data.export.skiplist import (
    MANIFEST_BASENAME,
    SkiplistError,
    build_skiplists,
    decode_reason,
    encode_reason,
    load_bucket_skips,
    read_shard_skips,
    read_sidecar,
    sidecar_name,
)


def skip_table(lineage: pa.Table, picks: dict[str, list[int]], kept: dict[int, str] | None = None) -> pa.Table:
    """Rows of ``lineage`` (by position) per reason."""
    rows = []
    for reason, positions in picks.items():
        for pos in positions:
            row = lineage.slice(pos, 1).to_pylist()[0]
            rows.append(
                {
                    "sample_id": row["sample_id"],
                    "shard": row["shard"],
                    "index_in_shard": row["index_in_shard"],
                    "reason": reason,
                    "kept_sample_id": (kept or {}).get(pos) if reason == "dedup" else None,
                }
            )
    schema = pa.schema(
        [
            ("sample_id", pa.string()),
            ("shard", pa.string()),
            ("index_in_shard", pa.int64()),
            ("reason", pa.string()),
            ("kept_sample_id", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _sidecars(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.skip.*.json"))}


@pytest.mark.parametrize("reason", ["dedup", "label:nsfw", "label:text", "optout:req/42 é_x.y", "a" * 40])
def test_reason_tokens_roundtrip_and_are_filename_safe(reason: str) -> None:
    token = encode_reason(reason)
    assert decode_reason(token) == reason
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in token)
    assert sidecar_name("shard.00003.mds", "label:nsfw") == "shard.00003.mds.skip.label_3Ansfw.json"
    with pytest.raises(ValueError):
        encode_reason("x" * 200)


def test_build_is_byte_stable_skips_unchanged_and_removes_stale(tree) -> None:
    root, lineage = tree
    table = skip_table(lineage, {"dedup": [0, 5, 9], "label:nsfw": [5, 30], "optout:r-1": [60]}, kept={0: "k0", 5: "k5", 9: "k9"})
    first = build_skiplists(table, str(root))
    files = _sidecars(root)
    assert first.written == len(files) > 0 and first.removed == 0
    mtimes = {k: os.stat(root / k).st_mtime_ns for k in files}
    manifest_bytes = {p: p.read_bytes() for p in root.rglob(MANIFEST_BASENAME)}

    again = build_skiplists(table.take(np.random.default_rng(1).permutation(table.num_rows)), str(root))
    assert again.written == 0 and again.unchanged == len(files) and again.manifests_written == 0
    assert _sidecars(root) == files
    assert {k: os.stat(root / k).st_mtime_ns for k in files} == mtimes
    assert {p: p.read_bytes() for p in root.rglob(MANIFEST_BASENAME)} == manifest_bytes

    sidecar = read_sidecar(str(root / next(k for k in files if "dedup" in k)))
    assert sidecar.reason == "dedup" and sidecar.kept_sample_ids and list(sidecar.indices) == sorted(sidecar.indices)

    # nsfw no longer applies anywhere: its sidecars go, the others stay byte-identical
    third = build_skiplists(table.filter(pa.compute.not_equal(table["reason"], "label:nsfw")), str(root))
    remaining = _sidecars(root)
    assert third.removed == sum("nsfw" in k for k in files) > 0
    assert remaining == {k: v for k, v in files.items() if "nsfw" not in k}


def test_report_counts_and_rewrite_flag(tree) -> None:
    root, lineage = tree
    rows = lineage.to_pylist()
    square = [i for i, r in enumerate(rows) if r["shard"].startswith("512/512x512/")]
    # sample 0 of the square bucket is skipped for two reasons: counted once in the share
    table = skip_table(lineage, {"label:text": square[: len(square) // 5], "dedup": square[:1]}, kept={square[0]: "x"})
    report = build_skiplists(table, str(root))
    streams = {r["bucket"]: r for r in report.streams.to_pylist()}
    assert streams["512/512x512"]["samples"] == len(square)
    assert streams["512/512x512"]["skipped"] == len(square) // 5
    assert streams["512/512x512"]["rewrite_recommended"] and report.rewrite_recommended == ["512/512x512"]
    assert streams["512/448x576"]["skipped"] == 0 and not streams["512/448x576"]["rewrite_recommended"]
    counts = report.counts.to_pylist()
    assert sum(r["skipped"] for r in counts if r["reason"] == "label:text") == len(square) // 5
    assert {r["bucket"] for r in counts} == {"512/512x512"}
    assert {r["source"] for r in counts} <= {"alpha", "beta"}
    manifest = json.loads((root / "512" / "512x512" / MANIFEST_BASENAME).read_text())
    assert manifest["skipped"] == len(square) // 5 and set(manifest["sources"]) == {"alpha", "beta"}


def test_reader_unions_and_names_bad_files(tree) -> None:
    root, lineage = tree
    shard = lineage["shard"][0].as_py()
    same_shard = [i for i, s in enumerate(lineage["shard"].to_pylist()) if s == shard]
    table = skip_table(lineage, {"dedup": same_shard[:2], "label:nsfw": same_shard[1:3]}, kept={same_shard[0]: "k", same_shard[1]: "k"})
    build_skiplists(table, str(root))
    idx = lineage["index_in_shard"].to_pylist()
    assert read_shard_skips(str(root / shard)).tolist() == sorted({idx[i] for i in same_shard[:3]})

    bucket = root / "/".join(shard.split("/")[:2])
    assert load_bucket_skips(str(bucket)).num_skipped == 3
    path = root / (shard + ".skip.label_3Ansfw.json")
    path.write_text('{"format": "prx-skiplist", "version": 1, "indices": [')
    with pytest.raises(SkiplistError, match=str(path)):
        read_shard_skips(str(root / shard))
    with pytest.raises(SkiplistError, match="changed since"):
        load_bucket_skips(str(bucket))
    obj = json.loads((root / (shard + ".skip.dedup.json")).read_text())
    obj["indices"] = obj["indices"][::-1]
    path.write_text(json.dumps({**obj, "reason": "label:nsfw"}))
    with pytest.raises(SkiplistError, match="sorted"):
        read_sidecar(str(path))
    path.unlink()
    with pytest.raises(SkiplistError, match="missing skip-list sidecar"):
        load_bucket_skips(str(bucket))
    build_skiplists(table, str(root))
    (root / (shard + ".skip.extra.json")).write_bytes(path.read_bytes())
    with pytest.raises(SkiplistError, match="not listed"):
        load_bucket_skips(str(bucket))


def test_bad_rows_rejected(tree) -> None:
    root, lineage = tree
    table = skip_table(lineage, {"dedup": [0]}, kept={0: "a"})
    conflicting = pa.concat_tables([table, table.set_column(4, "kept_sample_id", pa.array(["b"]))])
    with pytest.raises(ValueError, match="conflicting"):
        build_skiplists(conflicting, str(root))
    out_of_range = table.set_column(2, "index_in_shard", pa.array([10_000], pa.int64()))
    with pytest.raises(ValueError, match="out of range"):
        build_skiplists(out_of_range, str(root))
    # the same row twice is fine (e.g. two rules producing the same exclusion)
    build_skiplists(pa.concat_tables([table, table]), str(root))


def _bucket_tree(root: Path, buckets: list[str], samples: int) -> None:
    for bucket in buckets:
        folder = root / bucket / "src"
        folder.mkdir(parents=True)
        shards = [{"raw_data": {"basename": f"shard.{i:05d}.mds"}, "samples": 1000} for i in range(-(-samples // 1000))]
        (folder / "index.json").write_text(json.dumps({"version": 2, "shards": shards}))


def _bucket_skips(buckets: list[str], samples: int) -> pa.Table:
    i = np.arange(samples)
    return pa.concat_tables(
        pa.table(
            {
                "sample_id": pa.array([f"{bucket}-{k:012d}-{'f' * 16}" for k in i]),
                "shard": pa.array([f"{bucket}/src/shard.{k // 1000:05d}.mds" for k in i]),
                "index_in_shard": pa.array(i % 1000),
                "reason": pa.array(["dedup"] * samples),
            }
        )
        for bucket in buckets
    )


def test_build_memory_is_bounded_by_a_bucket_and_bad_rows_write_nothing(tmp_path: Path) -> None:
    """Python-side peak (sample ids, sidecar bytes) of 4 buckets of N skips stays near that of
    one bucket of N: the builder holds one bucket at a time (the old one held all: ratio ~3.3)."""
    import tracemalloc

    buckets, n = ["1024/1024x1024", "1024/768x1344", "512/512x512", "512/448x576"], 5000
    peaks = []
    for count in (1, 4):
        root = tmp_path / f"b{count}"
        _bucket_tree(root, buckets, n)
        table = _bucket_skips(buckets[:count], n)
        tracemalloc.start()
        try:
            build_skiplists(table, str(root))
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert len(_sidecars(root)) == 5 * count
    assert peaks[1] / peaks[0] <= 1.5, peaks

    # A conflict in the last bucket is found before the first bucket is touched.
    root = tmp_path / "b4"
    before = {p: p.read_bytes() for p in sorted(root.rglob("*.json"))}
    table = _bucket_skips(buckets, n).slice(n)  # buckets 2-4: bucket 1's sidecars must go ...
    clash = pa.table(
        {"sample_id": ["other"], "shard": [f"{buckets[-1]}/src/shard.00004.mds"], "index_in_shard": [999], "reason": ["dedup"]}
    )
    with pytest.raises(ValueError, match="conflicting skip rows"):
        build_skiplists(pa.concat_tables([table, clash]), str(root))  # ... but nothing changes
    assert {p: p.read_bytes() for p in sorted(root.rglob("*.json"))} == before
