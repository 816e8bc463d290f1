"""Rows spilled to local disk by partition: one Arrow IPC stream file per partition, opened on
first write, so a process holds one partition at a time instead of a whole table. Which row
goes where is the caller's (``curation.dedup_spill`` by fingerprint or aspect key,
``stages.export_spill`` by sample-id range); the folder is the caller's too, removed by it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa


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
