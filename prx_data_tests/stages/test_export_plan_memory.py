"""Export planning holds a batch of captions, not the source's: the Python heap of a no-change
re-run does not grow with the number of rows."""

from __future__ import annotations

import tracemalloc
from typing import Any

from prx_data.core.paths import StoragePaths
from prx_data.imaging.buckets import BucketConfig
from prx_data.stages.export_stage import export_source
from prx_data_tests.export.rawtables import write_raw

# One 32x32 bucket, so the first export encodes tiny images (milliseconds).
TINY = BucketConfig(tiers=(32,), ar_min=1.0, ar_max=1.0, shapes_per_tier=1, multiple=16)


def _rerun_peak(tmp_path, n: int) -> int:
    paths = StoragePaths(lance_root=str(tmp_path / f"lance{n}"), mds_root=str(tmp_path / f"mds{n}"))
    items = [{"key": f"k{i}", "seed": i % 3, "w": 32, "h": 32, "caption": f"{i} " + "c" * 1000, "status": "ok"} for i in range(n)]
    write_raw(paths.raw_table("alpha"), "alpha", items)

    def run():
        return export_source(
            paths.raw_table("alpha"),
            "alpha",
            mds_root=paths.mds_root,
            exports_uri=paths.exports_table("alpha"),
            bucket_cfg=TINY,
            executor="local",
            plan_batch_rows=50,
        )

    assert run().encoded == n
    tracemalloc.start()
    try:
        stats = run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (stats.kept, stats.encoded, stats.changed) == (n, 0, False)
    return peak


def test_no_change_rerun_python_heap_does_not_grow_with_the_source(tmp_path):
    small, large = _rerun_peak(tmp_path, 150), _rerun_peak(tmp_path, 600)
    # Per-row Python objects (captions, dicts of the last placements) would make this ~4x.
    assert large < 1.3 * small, f"4x the rows took {large / small:.2f}x the Python heap ({small} -> {large} bytes)"


def _export_state(root, name: str) -> tuple[list[dict], list[dict], dict[str, list[str]]]:
    """The exports and superseded tables (as stored, row order included) with each shard named
    by its bytes' hash (its file name holds the run id), and each bucket's shard hashes."""
    import hashlib

    from prx_data.core.lance_io import open_table

    paths = StoragePaths(lance_root=root.uri(name, "lance"), mds_root=root.uri(name, "mds"))
    digest = {rel: hashlib.sha256(data).hexdigest() for rel, data in root.files(name, "mds").items() if ".mds" in rel}

    def rows(uri: str, skip: tuple[str, ...]) -> list[dict]:
        ds = open_table(uri, root.options)
        if ds is None:
            return []
        table = ds.to_table()
        out = []
        for row in table.to_pylist():
            if row.get("shard"):
                row["shard"] = digest[row["shard"]]
            out.append({k: v for k, v in row.items() if k not in skip})
        return out

    buckets: dict[str, list[str]] = {}
    for rel, value in digest.items():
        buckets.setdefault(rel.rsplit("/", 1)[0], []).append(value)
    # The superseded table's row order is per partition (its readers build per-shard sets).
    superseded = sorted(rows(paths.superseded_table("alpha"), ("superseded_at",)), key=lambda r: (r["shard"], r["index_in_shard"]))
    return (
        rows(paths.exports_table("alpha"), ("exported_at", "export_run_id")),
        superseded,
        {k: sorted(v) for k, v in sorted(buckets.items())},
    )


def test_many_planning_partitions_export_the_same_as_one(storage_root, tmp_path, monkeypatch):
    """A tiny max_partition_rows (30 rows in 5 partitions) plans, writes and records exactly
    what one partition does, through a first export, an edit with removals, additions, a
    dropped caption, then a bucket rewrite, and a no-change re-run; its spill is gone after
    every run, a failed one included."""
    import itertools
    import os
    import time

    import pytest

    from prx_data.stages import export_stage

    # Shards are named by run id, which sorts by the second and then at random; a rewrite reads
    # old shards in name order, so runs within one second must sort as they ran in both trees.
    counter = itertools.count()
    monkeypatch.setattr(export_stage, "new_run_id", lambda: f"{time.strftime('%Y%m%dT%H%M%S')}-{next(counter):08x}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    items: list[dict[str, Any]] = [
        {"key": f"k{i}", "seed": i % 5, "w": 32, "h": 32, "caption": f"caption {i}", "status": "ok"} for i in range(30)
    ]

    def run(name: str, **kwargs):
        paths = StoragePaths(lance_root=storage_root.uri(name, "lance"), mds_root=storage_root.uri(name, "mds"))
        write_raw(paths.raw_table("alpha"), "alpha", items, storage_root.options)
        stats = export_source(
            paths.raw_table("alpha"),
            "alpha",
            mds_root=paths.mds_root,
            exports_uri=paths.exports_table("alpha"),
            bucket_cfg=TINY,
            executor="local",
            storage_options=storage_root.options,
            scratch_dir=str(scratch),
            plan_batch_rows=4,
            **kwargs,
        )
        assert os.listdir(scratch) == [], "the planning spill outlives its run"
        return stats

    def both(**kwargs):
        one, many = run("one", **kwargs), run("many", max_partition_rows=7, **kwargs)
        assert (one.kept, one.reused, one.encoded, one.superseded, one.superseded_total) == (
            many.kept, many.reused, many.encoded, many.superseded, many.superseded_total,
        )  # fmt: skip
        assert (one.rewritten_buckets, one.dropped, one.per_bucket, one.changed) == (
            many.rewritten_buckets, many.dropped, many.per_bucket, many.changed,
        )  # fmt: skip
        assert _export_state(storage_root, "one") == _export_state(storage_root, "many")
        return many

    assert both().encoded == 30
    for i in (1, 8, 15):
        items[i]["caption"] += " edited"
    items[20]["caption"] = ""
    del items[25:29]
    items.extend({"key": f"n{i}", "seed": i, "w": 32, "h": 32, "caption": f"new {i}", "status": "ok"} for i in range(3))
    edited = both(rewrite_share=0.9)
    assert (edited.encoded, edited.reused, edited.superseded, edited.superseded_total) == (3, 3, 8, 8)
    items[2]["caption"] += " edited"
    rewritten = both()  # 9 of 30 superseded: the bucket is rewritten
    assert (rewritten.reused, rewritten.superseded_total, rewritten.rewritten_buckets) == (28, 0, ["32/32x32"])
    assert both().changed is False

    # A run that fails mid-write (a progress callback that raises) removes its spill too.
    items.append({"key": "late", "seed": 9, "w": 32, "h": 32, "caption": "late", "status": "ok"})

    def fails(done, total):
        raise RuntimeError("progress callback failed")

    with pytest.raises(RuntimeError, match="progress callback failed"):
        run("many", max_partition_rows=7, progress=fails)
    assert _export_state(storage_root, "one") == _export_state(storage_root, "many"), "a failed run changed the export"
    with pytest.raises(ValueError, match="max_partition_rows must be at least 1, got 0"):
        run("many", max_partition_rows=0)
