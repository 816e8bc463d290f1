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
    """The labelled raw rows are read once per source, when that source's exports have all
    arrived: never two sources' at once, never the corpus's."""
    from dataclasses import replace

    from prx_data.curation.exclusion import exported_batches
    from prx_data.curation.skip_reasons import ReasonCollector, reason_lookup

    paths = _world(tmp_path)
    prios = {"a": 1, "b": 0}
    lookup = reason_lookup(paths, prios, ("nsfw", "text"), None)
    read: list[tuple[str, int]] = []

    def labelled_of(source: str):
        rows = pa.concat_tables(list(lookup.labelled_of(source)))
        read.append((source, rows.num_rows))
        yield rows

    collector = ReasonCollector(replace(lookup, labelled_of=labelled_of), min_buffer_rows=1 << 20, scratch_dir=str(tmp_path))
    fed = []
    for batch in exported_batches(paths, prios)[1]:
        collector.add(batch)
        fed.append((batch["source"][0].as_py(), [source for source, _ in read]))
    labels, _ = collector.finish(SKIP_SCHEMA)
    assert [source for source, _ in read] == ["a", "b"] and all(count > 20 for _, count in read)
    # A source's labelled rows are read only once its last batch went by.
    assert all(source not in done for source, done in fed), fed
    assert set(pc.unique(labels["source"]).to_pylist()) == {"a", "b"}
    assert not list(tmp_path.glob("prx-labels-*")), "the spill outlived the collector"


def test_the_label_join_holds_one_sample_id_range_at_a_time(tmp_path, monkeypatch) -> None:
    """With ranges of a few rows, the placements and the labelled rows are joined range by range
    (each range's rows only), and the label skips equal those of one range."""
    from prx_data.core.ids import sample_id
    from prx_data.curation import skip_reasons
    from prx_data.curation.exclusion import exported_batches
    from prx_data.curation.skip_reasons import ReasonCollector, reason_lookup

    paths = StoragePaths(lance_root=str(tmp_path / "lance"), mds_root=str(tmp_path / "mds"))
    rng = np.random.default_rng(5)
    n = 400
    ids = [sample_id("h", f"k{i}") for i in range(n)]  # spread over the hex id space
    label = rng.choice(["nsfw", "text", "ok", "ok"], n)
    lance.write_dataset(
        pa.table(
            {
                "sample_id": ids,
                "source": ["h"] * n,
                "tier": pa.array([512] * n, pa.int32()),
                "bucket": ["512x512"] * n,
                "shard": [f"512/512x512/h/shard.{i // 50:05d}.mds" for i in range(n)],
                "index_in_shard": pa.array(np.arange(n) % 50, pa.int64()),
                "phash": pa.array(rng.integers(-(2**62), 2**62, n), pa.int64()),
            }
        ),
        paths.exports_table("h"),
        max_rows_per_file=40,
    )
    lance.write_dataset(pa.table({"sample_id": ids, "source": ["h"] * n, "label": label}), paths.raw_table("h"))
    lookup = reason_lookup(paths, {"h": 1}, ("nsfw", "text"), None)

    reads: list[int] = []

    class Recorded(skip_reasons.SpilledPartitions):
        def read(self, part: int) -> pa.Table:
            rows = super().read(part)
            reads.append(rows.num_rows)
            return rows

    monkeypatch.setattr(skip_reasons, "SpilledPartitions", Recorded)

    def results(range_rows: int) -> pa.Table:
        collector = ReasonCollector(lookup, scratch_dir=str(tmp_path), range_rows=range_rows)
        for batch in exported_batches(paths, {"h": 1})[1]:
            collector.add(batch)
        return collector.finish(SKIP_SCHEMA)[0]

    whole = results(10**6)
    assert max(reads) > n / 2  # one range: every placement at once
    reads.clear()
    ranged = results(25)
    assert whole.num_rows == int(np.isin(label, ["nsfw", "text"]).sum()) > 100
    assert ranged.sort_by(ORDER).equals(whole.sort_by(ORDER))
    assert len(reads) >= 20 and max(reads) < n / 4, reads  # 16 ranges of ~25 placements, not 400
