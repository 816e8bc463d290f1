"""Rows spilled to local disk by partition, so a process holds one partition at a time instead of
a whole table: the one spill module, shared by export planning, the column stages' pending
plans, dedup, the skip-list build, the fold plan and the data card.

Each partition is one Arrow IPC stream file, opened on first write (``PartitionFiles``). Rows are
partitioned three ways:

- by sample-id range (``SpilledPartitions``): K equal slices of the 128-bit hex space that
  ``core.ids.sample_id`` draws from (balanced for every id the project makes), cut by string
  comparison, so any other string still lands in exactly one partition (only the balance
  suffers). The partition of a row is a function of its ``sample_id`` alone, so the rows of one
  sample in several tables always meet in the same partition and a join there is exact. Ranges,
  not a scrambling hash: partitions read in order and each sorted by sample id are the whole
  table sorted by sample id.
- by ranges of a scan position (``ScanOrdered``): read back in scan order one range at a time.
- by a string key, a bucket (``SpilledByKey``), read back one key at a time; ``SpilledRows``
  spills each row both by key and by sample-id range. ``TableByKey`` is a table in memory seen
  the same way (``RowsByKey``).

Which key a row has is the caller's; the folder is the caller's too (a temporary directory),
removed by it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# One open file per partition while a table streams in: stay far below `ulimit -n`. Past that
# many partitions, partitions grow instead.
MAX_PARTITIONS = 1024
_ID_SPACE = 1 << 128
_SLICE_ROWS = 65_536


def key_runs(keys: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """The stable sort order of ``keys``, and ``(key, start, end)`` of each run of one key in it."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    edges = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
    return order, [(int(ordered[start]), start, end) for start, end in zip(edges[:-1].tolist(), edges[1:].tolist())]


class PartitionFiles:
    """Rows keep their order inside a partition. ``schema`` (else the first table's) is what
    every partition is written and read with."""

    def __init__(self, folder: str, schema: pa.Schema | None = None):
        os.makedirs(folder, exist_ok=True)
        self.folder, self.schema = folder, schema
        self._sinks: dict[int, tuple[pa.NativeFile, pa.ipc.RecordBatchStreamWriter]] = {}
        self._written: set[int] = set()
        self.rows = 0

    def path(self, part: int) -> str:
        return os.path.join(self.folder, f"part-{part:05d}.arrows")

    def split(self, table: pa.Table, parts: np.ndarray) -> None:
        """Append each row of ``table`` to partition ``parts[row]``."""
        if not table.num_rows:
            return
        order, runs = key_runs(parts)
        taken = table if len(runs) == 1 else table.take(pa.array(order))
        for part, start, end in runs:
            self.put(part, taken.slice(start, end - start))

    def put(self, part: int, table: pa.Table) -> None:
        """Append ``table``, whose rows all belong to partition ``part``, as they are."""
        if not table.num_rows:
            return
        if self.schema is None:
            self.schema = table.schema
        if part not in self._sinks:
            sink = pa.OSFile(self.path(part), "wb")
            self._sinks[part] = (sink, pa.ipc.new_stream(sink, self.schema))
            self._written.add(part)
        self._sinks[part][1].write_table(table.select(self.schema.names).cast(self.schema))
        self.rows += table.num_rows

    def close(self) -> list[int]:
        """Close every open file; returns the partitions that hold rows."""
        for sink, writer in self._sinks.values():
            writer.close()
            sink.close()
        self._sinks = {}
        return sorted(self._written)

    def read(self, part: int) -> pa.Table:
        """Partition ``part`` (an empty table when no row fell in it)."""
        if not os.path.exists(self.path(part)):
            if self.schema is None:
                raise ValueError("nothing was spilled, so there is no schema to read with")
            return self.schema.empty_table()
        with pa.OSFile(self.path(part), "rb") as source:
            return pa.ipc.open_stream(source).read_all()

    def read_batches(self, part: int) -> Iterator[pa.RecordBatch]:
        if os.path.exists(self.path(part)):
            with pa.OSFile(self.path(part), "rb") as source:
                yield from pa.ipc.open_stream(source)


# By sample-id range ------------------------------------------------------------------------------
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


# By ranges of a scan position ----------------------------------------------------------------------
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


# By key (a bucket) ----------------------------------------------------------------------------------
Keys = Callable[[pa.Table], pa.Array | pa.ChunkedArray]


class RowsByKey(Protocol):
    """Rows read one key (a bucket, ``<tier>/<HxW>``) at a time: a table in memory
    (``TableByKey``) or rows spilled by key (``SpilledByKey``, ``SpilledRows``)."""

    def bucket_names(self) -> list[str]: ...

    def bucket(self, name: str) -> pa.Table: ...


def key_codes(keys: pa.Array | pa.ChunkedArray, codes: dict[str, int]) -> np.ndarray:
    """The code of each row's key in ``codes``, new keys numbered in the order first seen
    (``codes`` grows); -1 for a null key."""
    encoded = pc.dictionary_encode(keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys)
    known = np.array([codes.setdefault(key, len(codes)) for key in encoded.dictionary.to_pylist()], np.int64)
    indices = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    return np.where(indices >= 0, known[indices] if len(known) else -1, -1)


class TableByKey:
    """A table seen one key at a time: ``keys`` holds each row's; keys in first-seen order, rows
    with a null key in none."""

    def __init__(self, table: pa.Table, keys: pa.Array | pa.ChunkedArray) -> None:
        self.table, self.keys = table, keys
        self.names = [key for key in pc.unique(keys).to_pylist() if key is not None]

    def bucket_names(self) -> list[str]:
        return list(self.names)

    def bucket(self, name: str) -> pa.Table:
        return self.table.filter(pc.fill_null(pc.equal(self.keys, name), False))


class SpilledByKey:
    """Rows added batch by batch (``add``), each under the key ``keys`` gives it (a row whose key
    is null is not kept), read back a key at a time once ``close``d. ``bucket_names`` keeps the
    order keys were first seen in, as a group-by over the whole table would."""

    def __init__(self, folder: str, schema: pa.Schema, keys: Keys, codes: dict[str, int] | None = None):
        self._files = PartitionFiles(folder, schema)
        self._keys = keys
        self._codes = {} if codes is None else codes  # shared by the generations of a SpilledRows

    @property
    def rows(self) -> int:
        return self._files.rows

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        codes = key_codes(self._keys(table), self._codes)
        kept = codes >= 0
        if not kept.all():
            table, codes = table.filter(pa.array(kept)), codes[kept]
        self._files.split(table, codes)

    def close(self) -> SpilledByKey:
        self._files.close()
        return self

    def bucket_names(self) -> list[str]:
        return list(self._codes)

    def bucket(self, name: str) -> pa.Table:
        code = self._codes.get(name)
        if code is None:
            assert self._files.schema is not None  # given at construction
            return self._files.schema.empty_table()
        return self._files.read(code)


class SpilledRows:
    """Rows spilled twice, by key and by sample-id range, and read back either way once
    ``close``d: a key at a time (``bucket``) or a range at a time (``id_ranges``, disjoint in
    sample id, so distinct counts sum range by range). Rows added after a ``close`` go to a new
    generation of files, read together with the first. ``expected_rows`` sizes the ranges (about
    ``range_rows`` rows each); more rows than expected only make the ranges larger."""

    def __init__(self, folder: str, schema: pa.Schema, keys: Keys, *, expected_rows: int = 0, range_rows: int):
        self.folder, self.schema, self._keys = folder, schema, keys
        self._bounds = range_bounds(partition_count(expected_rows, range_rows))
        self._codes: dict[str, int] = {}
        self._gens: list[tuple[SpilledByKey, SpilledPartitions]] = []
        self._open = False

    @property
    def num_rows(self) -> int:
        return sum(by_id.rows for _, by_id in self._gens)

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if not self._open:
            gen = os.path.join(self.folder, f"gen{len(self._gens)}")
            by_key = SpilledByKey(os.path.join(gen, "by_bucket"), self.schema, self._keys, self._codes)
            self._gens.append((by_key, SpilledPartitions(os.path.join(gen, "by_id"), self.schema, self._bounds)))
            self._open = True
        by_key, by_id = self._gens[-1]
        by_key.add(table)
        by_id.add(table)

    def close(self) -> SpilledRows:
        if self._open:
            by_key, by_id = self._gens[-1]
            by_key.close()
            by_id.close()
            self._open = False
        return self

    def bucket_names(self) -> list[str]:
        return list(self._codes)

    def bucket(self, name: str) -> pa.Table:
        """The rows under key ``name`` (empty for a key never seen)."""
        if name not in self._codes:
            return self.schema.empty_table()
        return pa.concat_tables([by_key.bucket(name) for by_key, _ in self._gens])

    def id_ranges(self) -> Iterator[pa.Table]:
        """Every row, one sample-id range at a time."""
        for part in range(len(self._bounds) + 1):
            yield pa.concat_tables([self.schema.empty_table(), *(by_id.read(part) for _, by_id in self._gens)])
