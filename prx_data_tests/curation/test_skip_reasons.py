"""Label skips joined per buffer of the one streamed exports scan equal the join over the
materialised exports, however small the buffers (issue 21 item 3)."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.paths import StoragePaths
from prx_data.curation.exclusion import SKIP_SCHEMA, exported_samples, label_rows, scan_skips
from prx_data.imaging.buckets import BucketConfig

ORDER = [("shard", "ascending"), ("index_in_shard", "ascending"), ("reason", "ascending"), ("sample_id", "ascending")]


def _world(tmp_path, n: int = 600) -> StoragePaths:
    """Two sources; exports in many small fragments (many scan batches); ~10 % of rows with an
    excluded label, some unexported."""
    paths = StoragePaths(lance_root=str(tmp_path / "lance"), mds_root=str(tmp_path / "mds"))
    rng = np.random.default_rng(3)
    for source in ("a", "b"):
        ids = [f"{source}-{i:05d}" for i in range(n)]
        label = rng.choice(["nsfw", "text", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok"], n)
        exported = rng.random(n) < 0.9
        shards = [f"1024/1024x1024/{source}/shard.{i // 100:05d}.mds" if e else None for i, e in enumerate(exported)]
        exports = pa.table(
            {
                "sample_id": ids,
                "source": [source] * n,
                "tier": pa.array([1024] * n, pa.int32()),
                "bucket": ["1024x1024"] * n,
                "shard": pa.array(shards, pa.string()),
                "index_in_shard": pa.array(np.arange(n) % 100, pa.int64()),
                "phash": pa.array(rng.integers(-(2**62), 2**62, n), pa.int64()),
            }
        )
        lance.write_dataset(exports, paths.exports_table(source), max_rows_per_file=50)
        lance.write_dataset(pa.table({"sample_id": ids, "source": [source] * n, "label": label}), paths.raw_table(source))
    return paths


def test_label_skips_per_small_buffer_equal_the_materialised_join(tmp_path) -> None:
    paths = _world(tmp_path)
    prios = {"a": 1, "b": 0}
    exclude = ("nsfw", "text")
    expected = label_rows(exported_samples(paths, prios), paths, prios, exclude).cast(SKIP_SCHEMA)
    assert expected.num_rows > 50
    for buffer_rows in (1, 1 << 20):
        scan = scan_skips(paths, prios, bucket_cfg=BucketConfig(), exclude_labels=exclude, min_buffer_rows=buffer_rows)
        labels = scan.skips.filter(pc.starts_with(scan.skips["reason"], "label:"))
        assert labels.sort_by(ORDER).equals(expected.sort_by(ORDER))
        assert scan.exported == exported_samples(paths, prios).num_rows
        assert scan.placements.num_rows == 0  # not asked for


def test_labelled_rows_are_read_one_source_at_a_time(tmp_path) -> None:
    """The labelled raw rows are read when their source's exports arrive, once per source, and
    the collector holds one source's at a time: never the corpus's."""
    from prx_data.curation.skip_reasons import ReasonCollector, reason_lookup
    from prx_data.curation.exclusion import exported_batches

    paths = _world(tmp_path)
    prios = {"a": 1, "b": 0}
    lookup = reason_lookup(paths, prios, ("nsfw", "text"), None)
    read: list[tuple[str, int]] = []

    def labelled_of(source: str) -> pa.Table:
        rows = lookup.labelled_of(source)
        read.append((source, rows.num_rows))
        return rows

    from dataclasses import replace

    collector = ReasonCollector(replace(lookup, labelled_of=labelled_of), min_buffer_rows=1 << 20)
    held = []
    for batch in exported_batches(paths, prios)[1]:
        collector.add(batch)
        held.append(collector._labelled["sample_id"].to_pylist())
    labels, _ = collector.finish(SKIP_SCHEMA)
    assert [source for source, _ in read] == ["a", "b"] and all(count > 20 for _, count in read)
    assert all(len({sid.split("-")[0] for sid in ids}) == 1 for ids in held), "two sources' labelled rows held at once"
    assert set(pc.unique(labels["source"]).to_pylist()) == {"a", "b"}
