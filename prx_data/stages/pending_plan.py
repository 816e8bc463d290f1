"""The rows a column stage's run must do, planned without holding a source's worth of them.

One scan of the eligible rows (``sample_id``, the stage's condition and input columns, the stored
fingerprint: never a blob) decides each batch in Arrow and spills the rows to do (``sample_id``,
row address, input fingerprint) to local disk. When they are more than ``range_rows``, they are
split into sample-id ranges (``core.spill``) and the run does one range at a time: its
rows to do, the staged results of a killed run that match them, the fingerprints its results
are stored with. The commit looks results up range by range too (:class:`RangeLookup`).

Why by sample-id range and not by fragment: results come back from the processor keyed by
``sample_id`` only, in any order inside a range; a range's ids are known from the id alone.

Size: a range's rows to do are about 100 B each as Arrow, twice while sorted for lookups: one
million rows (``RANGE_ROWS``) stay near 200 MB, whatever the source's size (a 50 M-row first
run held ~11 GB before).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.sorted_keys import SortedKeys
from prx_data.core.spill import PartitionFiles, SpilledPartitions, key_runs, partition_count, partition_of, range_bounds
from prx_data.stages.column_spec import FINGERPRINT, ColumnStage, input_fingerprints

RANGE_ROWS = 1_000_000

# The rows to do, and the rows made before fingerprints existed that only get theirs recorded
# (upgrade "adopt"): the fingerprint is of the inputs they hold now.
TODO_SCHEMA = pa.schema([("sample_id", pa.string()), ("_rowaddr", pa.uint64()), (FINGERPRINT, pa.string())])
_STAGED_SCHEMA = pa.schema([("sample_id", pa.string()), (FINGERPRINT, pa.string())])


@dataclass
class PendingPlan:
    """The spilled plan of one run (``folder`` is the caller's, removed by it)."""

    folder: str
    stage: ColumnStage
    bounds: np.ndarray  # sample-id range bounds; empty for one range
    todo_rows: int
    changed: int  # rows redone because their inputs changed
    adopt_rows: int
    _todo: PartitionFiles
    _adopt: PartitionFiles
    _done: PartitionFiles | None = None
    resumed: int = 0

    @property
    def ranges(self) -> int:
        return len(self.bounds) + 1

    def todo(self, part: int) -> pa.Table:
        """Range ``part``'s rows to do (staged ones included), in scan order."""
        return self._todo.read(part)

    def remaining(self, part: int) -> pa.Table:
        """Range ``part``'s rows to do less those a killed run staged (:meth:`resume`)."""
        todo = self.todo(part)
        if self._done is None or not todo.num_rows:
            return todo
        done = self._done.read(part).column("sample_id")
        return todo.filter(pc.invert(pc.is_in(todo.column("sample_id"), value_set=done))) if len(done) else todo

    def resume(self, staged: lance.LanceDataset, batch_rows: int) -> int:
        """Find the staged results that count (for a row to do, made from the inputs it holds
        now): their rows are not done again. Returns how many."""
        fp_col = self.stage.fingerprint_column
        spill = SpilledPartitions(os.path.join(self.folder, "staged"), _STAGED_SCHEMA, self.bounds)
        columns = ["sample_id", *([fp_col] if fp_col else [])]
        for batch in staged.to_batches(columns=columns, filter=self.stage.current_filter(), batch_size=batch_rows):
            made_from = batch.column(fp_col) if fp_col else pa.nulls(batch.num_rows, pa.string())
            spill.add(pa.table({"sample_id": batch.column("sample_id"), FINGERPRINT: made_from}))
        spill.close()
        self._done = PartitionFiles(os.path.join(self.folder, "done"), pa.schema([("sample_id", pa.string())]))
        lookup = self.lookup(cached_ranges=1)
        for part in range(self.ranges):
            kept = spill.read(part)
            if not kept.num_rows:
                continue
            ids = kept.column("sample_id")
            done = pc.unique(ids.filter(lookup.current_made(ids, kept.column(FINGERPRINT) if fp_col else None)))
            self._done.put(part, pa.table({"sample_id": done}))
            self.resumed += len(done)
        self._done.close()
        return self.resumed

    def adopt_slices(self, rows: int) -> Iterator[pa.Table]:
        """The rows to adopt, ``rows`` at a time in scan order (so mostly a few fragments each)."""
        for batch in self._adopt.read_batches(0):
            for start in range(0, batch.num_rows, rows):
                yield pa.Table.from_batches([batch.slice(start, rows)])

    def lookup(self, cached_ranges: int = 2) -> RangeLookup:
        return RangeLookup(self, cached_ranges)


class RangeLookup:
    """The planned rows to do by ``sample_id``, a few ranges in memory at a time (least
    recently used dropped): results arrive range by range, so they mostly hit."""

    def __init__(self, plan: PendingPlan, cached_ranges: int):
        self.plan, self.cached_ranges = plan, max(1, cached_ranges)
        self._keys: OrderedDict[int, SortedKeys] = OrderedDict()
        self.loads = 0

    def _range(self, part: int) -> SortedKeys:
        if part in self._keys:
            self._keys.move_to_end(part)
            return self._keys[part]
        while len(self._keys) >= self.cached_ranges:
            self._keys.popitem(last=False)
        self.loads += 1
        keys = self._keys[part] = SortedKeys(self.plan.todo(part))
        return keys

    def get(self, ids: pa.Array | pa.ChunkedArray, column: str) -> pa.Array:
        """``column`` (``_rowaddr`` or the fingerprint) of each id, null where it is not a row to do."""
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        parts = partition_of(ids, self.plan.bounds)
        first = int(parts[0]) if len(parts) else 0
        if not len(parts) or (parts == first).all():
            return self._range(first).get(ids, column)
        order, runs = key_runs(parts)
        taken = ids.take(pa.array(order))
        pieces = [self._range(part).get(taken.slice(start, end - start), column) for part, start, end in runs]
        return pa.concat_arrays(pieces).take(pa.array(np.argsort(order)))

    def current_made(self, ids: pa.Array | pa.ChunkedArray, made_from: pa.Array | pa.ChunkedArray | None) -> pa.Array:
        """Which results (``ids``, made from inputs ``made_from``; None for a stage without
        inputs) are for a row to do, made from the inputs it holds now."""
        if made_from is None:
            return pc.is_valid(self.get(ids, "_rowaddr"))
        return pc.fill_null(pc.equal(self.get(ids, FINGERPRINT), made_from), False)


def plan_pending(ds: lance.LanceDataset, stage: ColumnStage, folder: str, range_rows: int = RANGE_ROWS) -> PendingPlan:
    """Rows stale by model/version/error, and (for a stage with inputs) rows whose inputs changed.

    One scan reads ``sample_id``, the condition and input columns and the stored fingerprint,
    batch by batch; each batch is decided with Arrow masks and its rows to do are spilled."""
    fp_col = stage.fingerprint_column
    stored_fp = [fp_col] if fp_col is not None and fp_col in ds.schema.names else []  # not yet on a table the stage never ran on
    present = [c for c in stage.inputs if c in ds.schema.names]
    columns = list(dict.fromkeys(["sample_id", *stage.condition_columns, *present, *stored_fp]))
    scanned = PartitionFiles(os.path.join(folder, "scan"), TODO_SCHEMA)
    adopt = PartitionFiles(os.path.join(folder, "adopt"), TODO_SCHEMA)
    changed = 0
    for batch in ds.scanner(columns=columns, filter=stage.eligible, with_row_address=True).to_batches():
        is_stale = stage.stale(batch)
        ids, addresses = batch.column("sample_id"), batch.column("_rowaddr")
        if fp_col is None:
            scanned.put(
                0, pa.table({"sample_id": ids, "_rowaddr": addresses, FINGERPRINT: pa.nulls(batch.num_rows, pa.string())}).filter(is_stale)
            )
            continue
        now = pa.array(input_fingerprints(batch, stage.inputs), pa.string())
        stored = batch.column(fp_col) if stored_fp else pa.nulls(batch.num_rows, pa.string())
        fresh = pc.invert(is_stale)
        unmarked = pc.and_(fresh, pc.is_null(stored))  # made before fingerprints
        edited = pc.and_(fresh, pc.fill_null(pc.not_equal(stored, now), False))
        changed += pc.sum(edited.cast(pa.int64())).as_py() or 0
        redo = pc.or_(is_stale, edited)
        if stage.upgrade == "redo":
            redo = pc.or_(redo, unmarked)
        else:
            adopt.put(0, pa.table({"sample_id": ids, "_rowaddr": addresses, FINGERPRINT: now}).filter(unmarked))
        scanned.put(0, pa.table({"sample_id": ids, "_rowaddr": addresses, FINGERPRINT: now}).filter(redo))
    scanned.close()
    adopt.close()
    partitions = partition_count(scanned.rows, range_rows)
    todo: PartitionFiles = scanned
    bounds = range_bounds(partitions)
    if partitions > 1:
        todo = SpilledPartitions(os.path.join(folder, "ranges"), TODO_SCHEMA, bounds)
        for batch in scanned.read_batches(0):
            todo.add(batch)
        todo.close()
        os.remove(scanned.path(0))
    return PendingPlan(folder, stage, bounds, scanned.rows, changed, adopt.rows, todo, adopt)


__all__ = ["RANGE_ROWS", "PendingPlan", "RangeLookup", "plan_pending"]
