"""Rows of a source spilled to local disk in sample-id ranges, so export planning holds one
range at a time, never the whole source.

The partition of a row is a function of its ``sample_id`` alone, so the current rows, the
previous exports and the superseded placements of one sample always meet in the same
partition and a join there is exact. The ranges are K equal slices of the 128-bit hex space
that ``core.ids.sample_id`` draws from (balanced for every id the project makes); they are cut
by string comparison, so any other string still lands in exactly one partition (only the
balance suffers). Ranges, not a scrambling hash: partitions read in order and each sorted by
sample id are the whole table sorted by sample id, so the exports table comes out byte for byte
as one partition would make it.

Each partition is one Arrow IPC stream file (``core.spill``); the folder is the caller's (a
temporary directory under ``scratch_dir``), removed by it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from prx_data.core.spill import PartitionFiles

# Planning a partition peaks near 1.7 KB a row on the driver (the joined narrow columns, their
# sorted copies, the new and previous exports rows compared; benchmarks/bench_export_memory.py
# at 40,000 rows in one partition): 1 M rows stay near 1.7 GB.
MAX_PARTITION_ROWS = 1_000_000
# One open file per partition while a table streams in: stay far below `ulimit -n`. Past
# 1024 * MAX_PARTITION_ROWS (2 billion rows) partitions grow instead.
MAX_PARTITIONS = 1024
_ID_SPACE = 1 << 128
_SLICE_ROWS = 65_536


def partition_count(rows: int, max_partition_rows: int) -> int:
    """Partitions that hold ``rows`` rows with at most about ``max_partition_rows`` each."""
    if max_partition_rows < 1:
        raise ValueError(f"max_partition_rows must be at least 1, got {max_partition_rows}")
    return max(1, min(MAX_PARTITIONS, math.ceil(rows / max_partition_rows)))


def range_bounds(partitions: int) -> np.ndarray:
    """The first sample id of partitions 1..K-1 (32 lowercase hex digits)."""
    return np.array([format(k * _ID_SPACE // partitions, "032x") for k in range(1, partitions)], dtype=str)


def partition_of(sample_ids: pa.Array | pa.ChunkedArray, bounds: np.ndarray) -> np.ndarray:
    """The partition of each id: how many bounds are at or below it (code-point order, the
    order Arrow sorts UTF-8 strings in). A null id goes to partition 0."""
    if not len(bounds):
        return np.zeros(len(sample_ids), np.int64)
    out = np.empty(len(sample_ids), np.int64)
    # In slices: a NumPy string array takes 4 bytes a character.
    for start in range(0, len(sample_ids), _SLICE_ROWS):
        ids = np.array(sample_ids.slice(start, _SLICE_ROWS).fill_null("").to_pylist(), dtype=str)
        out[start : start + len(ids)] = np.searchsorted(bounds, ids, side="right")
    return out


class ScanOrdered(PartitionFiles):
    """Rows to write, spilled by ranges of their scan position (``_i``) and read back in scan
    order one range at a time: the order the shards were always written in, without holding
    every row to write. Call ``close`` before reading."""

    def __init__(self, folder: str, schema: pa.Schema, range_rows: int):
        if range_rows < 1:
            raise ValueError(f"range_rows must be at least 1, got {range_rows}")
        super().__init__(folder, schema)
        self.range_rows = range_rows

    @property
    def num_rows(self) -> int:
        return self.rows

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self.split(table, table["_i"].to_numpy() // self.range_rows)

    def tables(self) -> Iterator[pa.Table]:
        """Each range's rows in scan order, without ``_i``."""
        for part in sorted(self._written):
            yield self.read(part).sort_by("_i").drop_columns(["_i"])

    def chunks(self, size: int) -> Iterator[pa.Table]:
        """Slices of at most ``size`` rows, in scan order (a range's last one may be shorter)."""
        for table in self.tables():
            for start in range(0, table.num_rows, size):
                yield table.slice(start, size)

    def close(self) -> ScanOrdered:  # type: ignore[override]
        super().close()
        return self


class SpilledPartitions(PartitionFiles):
    """One table's rows split into sample-id range partitions (``bounds``)."""

    def __init__(self, folder: str, schema: pa.Schema, bounds: np.ndarray):
        super().__init__(folder, schema)
        self.bounds = bounds
        self.partitions = len(bounds) + 1

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append ``batch`` (cast to the schema), each row to its sample id's partition."""
        if not batch.num_rows:
            return
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        self.split(table, partition_of(table["sample_id"], self.bounds))

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every partition's record batches, partition by partition."""
        for part in range(self.partitions):
            yield from self.read_batches(part)

    def close(self) -> SpilledPartitions:  # type: ignore[override]
        super().close()
        return self


__all__ = ["MAX_PARTITION_ROWS", "ScanOrdered", "SpilledPartitions", "partition_count", "partition_of", "range_bounds"]
