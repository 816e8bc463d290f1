"""The corpus's skip rows on local disk, never whole in memory.

A skip-list build collects one row per (sample, placement, reason) over the whole corpus:
duplicates, excluded labels, opt-outs, superseded placements and folded originals (5-10 % of
the corpus). Its readers want them two ways, so every row is spilled twice (``core.spill``):

- by bucket (``<tier>/<HxW>``, the first two parts of the shard path): the sidecars and manifest
  of one bucket are made from that bucket's rows alone (``export.skiplist.build_skiplists``);
- by sample-id range (``stages.export_spill``): a sample id lives in one range, so distinct
  counts (skipped samples, per source, per opt-out request) are summed range by range.

The folder is the caller's (a temporary directory), removed by it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.spill import PartitionFiles
from prx_data.stages.export_spill import SpilledPartitions, partition_count, range_bounds

SKIP_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("shard", pa.string()),
        pa.field("index_in_shard", pa.int64()),
        pa.field("reason", pa.string()),
        pa.field("kept_sample_id", pa.string()),
    ]
)
SKIP_COLUMNS = SKIP_SCHEMA.names
# Skip rows per sample-id range: a range is what a distinct count holds at once.
RANGE_ROWS = 1_000_000


def shard_buckets(shards: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The bucket (``<tier>/<HxW>``: a shard path's first two parts) of each shard path; null
    where the path has fewer parts."""
    return pc.struct_field(pc.extract_regex(shards, r"^(?P<bucket>[^/]+/[^/]+)/"), "bucket")


def as_skip_rows(table: pa.Table) -> pa.Table:
    """``table`` in SKIP_SCHEMA; a missing ``kept_sample_id`` is null."""
    if "kept_sample_id" not in table.column_names:
        table = table.append_column("kept_sample_id", pa.nulls(table.num_rows, pa.string()))
    return table.select(SKIP_COLUMNS).cast(SKIP_SCHEMA)


class SpilledSkips:
    """Skip rows added batch by batch (``add``), read back a bucket or a sample-id range at a
    time once ``close``d. Rows added after a ``close`` (the fold policy's, after it read the
    others) go to a new generation of files, read together with the first. ``expected_rows``
    sizes the sample-id ranges (about ``range_rows`` rows each); more rows than expected only
    make the ranges larger."""

    def __init__(self, folder: str, expected_rows: int = 0, range_rows: int = RANGE_ROWS):
        self.folder = folder
        self._bounds = range_bounds(partition_count(expected_rows, range_rows))
        self._buckets: dict[str, int] = {}
        self._gens: list[tuple[PartitionFiles, SpilledPartitions]] = []
        self._open = False

    @property
    def num_rows(self) -> int:
        return sum(by_id.rows for _, by_id in self._gens)

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if not self._open:
            gen = os.path.join(self.folder, f"gen{len(self._gens)}")
            self._gens.append(
                (
                    PartitionFiles(os.path.join(gen, "by_bucket"), SKIP_SCHEMA),
                    SpilledPartitions(os.path.join(gen, "by_id"), SKIP_SCHEMA, self._bounds),
                )
            )
            self._open = True
        by_bucket, by_id = self._gens[-1]
        table = as_skip_rows(table)
        # Unparsable shard paths get bucket "" here and are refused by build_skiplists with the
        # path named, as a table holding them would be.
        buckets = pc.fill_null(shard_buckets(table["shard"]), "")
        encoded = pc.dictionary_encode(buckets).combine_chunks()
        codes = np.array([self._buckets.setdefault(name, len(self._buckets)) for name in encoded.dictionary.to_pylist()], np.int64)
        by_bucket.split(table, codes[encoded.indices.to_numpy(zero_copy_only=False)])
        by_id.add(table)

    def close(self) -> SpilledSkips:
        if self._open:
            by_bucket, by_id = self._gens[-1]
            by_bucket.close()
            by_id.close()
            self._open = False
        return self

    def bucket_names(self) -> list[str]:
        return sorted(self._buckets)

    def bucket(self, name: str) -> pa.Table:
        """The rows whose shard is in bucket ``name`` (empty for a bucket never seen)."""
        code = self._buckets.get(name)
        if code is None:
            return SKIP_SCHEMA.empty_table()
        return pa.concat_tables([by_bucket.read(code) for by_bucket, _ in self._gens])

    def id_ranges(self) -> Iterator[pa.Table]:
        """Every row, one sample-id range at a time: the ranges are disjoint in sample id."""
        for part in range(len(self._bounds) + 1):
            yield pa.concat_tables([SKIP_SCHEMA.empty_table(), *(by_id.read(part) for _, by_id in self._gens)])

    def distinct_samples(self) -> tuple[int, dict[str, int]]:
        """(samples skipped, samples skipped per source): a sample skipped for two reasons or in
        two placements counts once."""
        total, per_source = 0, dict[str, int]()
        for rows in self.id_ranges():
            if not rows.num_rows:
                continue
            total += pc.count_distinct(rows["sample_id"], mode="all").as_py()
            pairs = rows.select(["source", "sample_id"]).group_by(["source", "sample_id"], use_threads=False).aggregate([])
            counts = pairs.group_by("source", use_threads=False).aggregate([("sample_id", "count")])
            for source, count in zip(counts["source"].to_pylist(), counts["sample_id_count"].to_pylist()):
                per_source[source] = per_source.get(source, 0) + count
        return total, dict(sorted(per_source.items()))


__all__ = ["RANGE_ROWS", "SKIP_COLUMNS", "SKIP_SCHEMA", "SpilledSkips", "as_skip_rows", "shard_buckets"]
