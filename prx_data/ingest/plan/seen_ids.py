"""The sample ids a run found, kept as Arrow and joined against the table without a Python set.

Units report (sample_id, unit, position). Ids stay in memory up to ``spill_rows``; past that
they go to hash partitions on local disk (by the id's leading hex digits, so each partition
holds about 1/``PARTITIONS`` of them). Both questions are then answered one partition at a
time with Arrow:

- duplicates across units: sort by (id, unit, position); every row after the first of its id
  is a duplicate, to skip in its unit;
- removals: the table's ids (streamed once, partitioned the same way) anti-joined with the
  run's ids.

Driver memory is bounded by one partition, not by the source.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

# Every sample id a unit holds (first occurrences), with its unit and position in the unit.
SEEN_SCHEMA = pa.schema([("sample_id", pa.string()), ("unit", pa.int64()), ("pos", pa.int64())])
# Stored rows to delete: replaced by a unit's new rows, or gone from the source.
REPLACED_SCHEMA = pa.schema([("sample_id", pa.string()), ("_rowaddr", pa.uint64())])

PARTITIONS = 256
SPILL_ROWS = 1_000_000


def _partition_of(ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    # sample ids are 32 hex digits of a hash: the first two are a uniform partition key.
    return pc.cast(pc.utf8_slice_codeunits(ids, 0, 2), pa.string())


class _Partitioned:
    """Tables of one schema, in memory or split by id partition into Arrow files."""

    def __init__(self, schema: pa.Schema, folder: str, name: str, spill_rows: int) -> None:
        self.schema, self.folder, self.name, self.spill_rows = schema, folder, name, spill_rows
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.writers: dict[str, ipc.RecordBatchFileWriter] = {}
        self.rows = 0
        self.closed = False

    @property
    def spilled(self) -> bool:
        return bool(self.writers)

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self.rows += table.num_rows
        self.buffer.append(table)
        self.buffered += table.num_rows
        if self.buffered >= self.spill_rows:
            self.flush()

    def flush(self) -> None:
        if not self.buffer or self.closed:
            return
        table = pa.concat_tables(self.buffer)
        self.buffer, self.buffered = [], 0
        keys = _partition_of(table.column("sample_id"))
        table = table.append_column("_p", keys).sort_by("_p")
        keys = table.column("_p")
        table = table.drop_columns(["_p"])
        for value in pc.unique(keys).to_pylist():
            part = table.filter(pc.equal(keys, value))
            writer = self.writers.get(value)
            if writer is None:
                writer = self.writers[value] = ipc.new_file(os.path.join(self.folder, f"{self.name}-{value}.arrow"), self.schema)
            writer.write_table(part)

    def close(self) -> None:
        if not self.closed:
            for writer in self.writers.values():
                writer.close()
            self.closed = True

    def partition(self, key: str) -> pa.Table:
        path = os.path.join(self.folder, f"{self.name}-{key}.arrow")
        if key not in self.writers:
            return self.schema.empty_table()
        with pa.OSFile(path) as source:  # read into memory: the file goes with the run
            return ipc.open_file(source).read_all()

    def keys(self) -> list[str]:
        return sorted(self.writers)


class SeenIds:
    def __init__(self, spill_rows: int = SPILL_ROWS) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="prx-ingest-ids-")
        self.spill_rows = spill_rows
        self.seen = _Partitioned(SEEN_SCHEMA, self._dir.name, "seen", spill_rows)

    @property
    def rows(self) -> int:
        return self.seen.rows

    def add(self, table: pa.Table) -> None:
        self.seen.add(table)

    def _parts(self, other: _Partitioned | None = None) -> Iterator[tuple[pa.Table, pa.Table | None]]:
        """(seen, other) per partition; one pair in memory when nothing spilled."""
        if not self.seen.spilled and (other is None or not other.spilled):
            seen = pa.concat_tables([SEEN_SCHEMA.empty_table(), *self.seen.buffer])
            yield seen, (pa.concat_tables([other.schema.empty_table(), *other.buffer]) if other is not None else None)
            return
        self.seen.flush()
        self.seen.close()
        if other is not None:
            other.flush()
            other.close()
        keys = sorted(set(self.seen.keys()) | set(other.keys() if other is not None else ()))
        for key in keys:
            yield self.seen.partition(key), (other.partition(key) if other is not None else None)

    def duplicates(self) -> dict[int, set[int]]:
        """unit -> positions holding an id that an earlier (unit, position) holds."""
        out: dict[int, set[int]] = defaultdict(set)
        for seen, _ in self._parts():
            if seen.num_rows < 2:
                continue
            ordered = seen.sort_by([("sample_id", "ascending"), ("unit", "ascending"), ("pos", "ascending")])
            ids = ordered.column("sample_id")
            repeat = pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1))
            dup = ordered.slice(1).filter(repeat)
            for unit, pos in zip(dup.column("unit").to_pylist(), dup.column("pos").to_pylist()):
                out[unit].add(pos)
        return dict(out)

    def removed(self, ds: lance.LanceDataset) -> pa.Table:
        """The table's rows whose id this run did not find: (sample_id, _rowaddr)."""
        stored = _Partitioned(REPLACED_SCHEMA, self._dir.name, "stored", self.spill_rows)
        for batch in ds.to_batches(columns=["sample_id"], with_row_address=True, batch_size=65536):
            stored.add(pa.Table.from_batches([batch]).select(["sample_id", "_rowaddr"]).cast(REPLACED_SCHEMA))
        gone = [REPLACED_SCHEMA.empty_table()]
        for seen, table in self._parts(stored):
            assert table is not None, "_parts pairs each partition with one of ``stored``"
            if table.num_rows:
                gone.append(table.filter(pc.invert(pc.is_in(table.column("sample_id"), value_set=seen.column("sample_id")))))
        return pa.concat_tables(gone)

    def close(self) -> None:
        self.seen.close()
        self._dir.cleanup()
