"""Label and opt-out skip rows from a stream of export batches, so the exports are scanned once
(alongside dedup) and never held whole.

Opt-outs: what is looked up per exported row is read up front (``reason_lookup``): the samples
an opt-out already resolved to plus those whose content key equals a recorded fingerprint, and
the perceptual fingerprints with the degenerate rows whose hash is none (all small). The export
batches are buffered until the buffer is at least as large as those tables, then joined with
them: each join costs about the buffer's size, so the whole pass costs about the corpus' size.

Labels: a sample id belongs to one source, so a source's placements need only that source's raw
rows with an excluded label. Both can be as large as the source (a tenth of a 50 M-image source
labelled ``text`` is 5 M rows), so neither is held: while a source's exports stream by, their
placements are spilled by sample-id range (``core.spill``) under the scan's scratch
folder; when the source ends, its labelled rows are scanned into the same ranges, and the two are
joined range by range (a sample's placements and its label always meet in one range). Memory is
one range of each (~``RANGE_ROWS``) plus one buffer, never a source or the corpus.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.filters import one_of
from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.core.spill import SpilledPartitions, partition_count, range_bounds
from prx_data.curation.optout.match import match_fingerprints
from prx_data.curation.optout.requests import read_fingerprints
from prx_data.imaging.fingerprints import DEGENERATE_COLUMN

PLACEMENT_COLUMNS = ["sample_id", "source", "shard", "index_in_shard"]
MIN_BUFFER_ROWS = 1 << 18  # a join's fixed cost is paid per buffer: keep buffers large
# Rows of a source's placements (and of its labelled rows) per sample-id range of the label join.
RANGE_ROWS = 1_000_000
_PAIR_SCHEMA = pa.schema([("sample_id", pa.string()), ("request_id", pa.string())])
_HASHED_SCHEMA = pa.schema([("sample_id", pa.string()), ("source", pa.string()), ("phash", pa.int64())])


_LABEL_SCHEMA = pa.schema([("sample_id", pa.string()), ("reason", pa.string())])


@dataclass(frozen=True)
class ReasonLookup:
    # Batches of (sample_id, reason 'label:<label>') of one source's raw rows with an excluded
    # label, read from the source's table as they are consumed.
    labelled_of: Callable[[str], Iterator[pa.Table]]
    labels_excluded: bool  # some label is excluded (else labelled_of is always empty)
    optout_pairs: pa.Table  # sample_id, request_id: resolved matches and content-key matches
    fingerprints: pa.Table  # every recorded fingerprint (the perceptual ones are matched per batch)
    flat_ids: pa.Array  # raw rows flagged degenerate: their hash is no fingerprint
    # Rows in a source's exports table (an upper bound of its placements: sizes the ranges).
    exported_rows_of: Callable[[str], int] = lambda _source: 0

    @property
    def rows(self) -> int:
        """Rows looked up per buffer (the opt-out tables)."""
        return self.optout_pairs.num_rows + len(self.flat_ids)


def reason_lookup(
    paths: StoragePaths, sources: Iterable[str], exclude_labels: Iterable[str], optouts: pa.Table | None, options: dict | None = None
) -> ReasonLookup:
    """``optouts``: (sample_id, request_id) an opt-out resolution matched (None: none)."""
    sources, exclude = sorted(sources), sorted(set(exclude_labels))
    flat, keyed = [], []
    fingerprints = read_fingerprints(paths, options)
    shas = pc.unique(fingerprints["sha256"].combine_chunks().drop_null()).to_pylist() if fingerprints.num_rows else []
    for source in sources:
        ds = open_table(paths.raw_table(source), options)
        if ds is None:
            continue
        names = ds.schema.names
        if fingerprints.num_rows and DEGENERATE_COLUMN in names:
            flat.append(ds.to_table(columns=["sample_id"], filter=f"{DEGENERATE_COLUMN} = true")["sample_id"])
        if shas and "image_sha256" in names:
            found = ds.to_table(columns=["sample_id", "source", "image_sha256"], filter=one_of("image_sha256", shas))
            keyed.append(pa.table({"sample_id": found["sample_id"], "source": found["source"], "sha256": found["image_sha256"]}))
    pairs = [] if optouts is None else [optouts.select(["sample_id", "request_id"]).cast(_PAIR_SCHEMA)]
    if keyed:
        # Content keys are matched here once (not per batch): the match is by key, not by row.
        found = match_fingerprints(fingerprints, _HASHED_SCHEMA.empty_table(), pa.concat_tables(keyed))
        pairs.append(found.select(["sample_id", "request_id"]).cast(_PAIR_SCHEMA))

    def labelled_of(source: str) -> Iterator[pa.Table]:
        ds = open_table(paths.raw_table(source), options) if exclude and source in sources else None
        if ds is None or "label" not in ds.schema.names:
            return
        for batch in ds.to_batches(columns=["sample_id", "label"], filter=one_of("label", exclude), batch_size=1 << 16):
            if batch.num_rows:
                reason = pc.binary_join_element_wise("label:", batch["label"], "")
                yield pa.table({"sample_id": batch["sample_id"], "reason": reason}).cast(_LABEL_SCHEMA)

    def exported_rows_of(source: str) -> int:
        ds = open_table(paths.exports_table(source), options)
        return 0 if ds is None else ds.count_rows()

    return ReasonLookup(
        labelled_of=labelled_of,
        exported_rows_of=exported_rows_of,
        labels_excluded=bool(exclude),
        optout_pairs=_unique_pairs(pairs),
        fingerprints=fingerprints,
        flat_ids=pa.chunked_array(flat, pa.string()).combine_chunks() if flat else pa.array([], pa.string()),
    )


def _unique_pairs(parts: list[pa.Table]) -> pa.Table:
    if not parts:
        return _PAIR_SCHEMA.empty_table()
    return pa.concat_tables(parts).group_by(["sample_id", "request_id"], use_threads=False).aggregate([])


@dataclass
class ReasonCollector:
    """Feed it export batches (``add``), then ``finish`` -> (label rows, opt-out rows), each
    ``sample_id, source, shard, index_in_shard, reason`` sorted by shard, index and reason.
    With ``sink``, the rows go to it buffer by buffer (and range by range) instead (unsorted),
    and ``finish`` returns empty tables. The label join spills under ``scratch_dir`` (the
    system temp folder when None); ``range_rows`` sizes its sample-id ranges."""

    lookup: ReasonLookup
    min_buffer_rows: int = MIN_BUFFER_ROWS
    sink: Callable[[pa.Table], None] | None = None
    scratch_dir: str | None = None
    range_rows: int = RANGE_ROWS
    _buffer: list[pa.Table] = field(default_factory=list)
    _buffered: int = 0
    _source: str | None = None  # the source of the batches being fed
    _placed: SpilledPartitions | None = None  # that source's placements, by sample-id range
    _folder: str | None = None
    _labels: list[pa.Table] = field(default_factory=list)
    _optouts: list[pa.Table] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        """Nothing to look up: batches need not be fed."""
        return not self.lookup.labels_excluded and not self._matches_optouts

    @property
    def _matches_optouts(self) -> bool:
        return bool(self.lookup.optout_pairs.num_rows or self._perceptual.num_rows)

    @property
    def _perceptual(self) -> pa.Table:
        fps = self.lookup.fingerprints
        return fps.filter(pc.is_valid(fps["phash"])) if fps.num_rows else fps

    def add(self, batch: pa.Table) -> None:
        if self.idle or not batch.num_rows:
            return
        sources = pc.unique(batch["source"]).to_pylist()
        if len(sources) > 1:  # the scan yields one source at a time; anything else is split
            for source in sources:
                self.add(batch.filter(pc.equal(batch["source"], source)))
            return
        if sources[0] != self._source:
            self._end_source()
            self._source = sources[0]
            if self.lookup.labels_excluded:
                self._placed = self._spill(sources[0], "placed", pa.schema([(c, batch.schema.field(c).type) for c in PLACEMENT_COLUMNS]))
        if self._placed is not None:
            self._placed.add(batch.select(PLACEMENT_COLUMNS))
        if not self._matches_optouts:
            return
        self._buffer.append(batch.select([*PLACEMENT_COLUMNS, "phash"]))
        self._buffered += batch.num_rows
        if self._buffered >= max(self.min_buffer_rows, self.lookup.rows):
            self._flush()

    def _spill(self, source: str, name: str, schema: pa.Schema) -> SpilledPartitions:
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="prx-labels-", dir=self.scratch_dir)
        parts = partition_count(self.lookup.exported_rows_of(source), self.range_rows)
        return SpilledPartitions(os.path.join(self._folder, name), schema, range_bounds(parts))

    def _end_source(self) -> None:
        """The source's last batch was fed: match its opt-outs, then join its labels range by range."""
        self._flush()
        placed, self._placed = self._placed, None
        if placed is None or not placed.close().rows:
            return
        assert self._source is not None
        labelled = SpilledPartitions(os.path.join(self._folder or "", "labelled"), _LABEL_SCHEMA, placed.bounds)
        for rows in self.lookup.labelled_of(self._source):
            labelled.add(rows)
        labelled.close()
        if labelled.rows:
            for part in range(placed.partitions):
                found = labelled.read(part)
                if found.num_rows:
                    self._keep(self._labels, placed.read(part).join(found, "sample_id", join_type="inner", use_threads=False))
        for spill in (placed, labelled):
            shutil.rmtree(spill.folder, ignore_errors=True)

    def _flush(self) -> None:
        if not self._buffer:
            return
        exports = pa.concat_tables(self._buffer)
        self._buffer, self._buffered = [], 0
        placed = exports.select(PLACEMENT_COLUMNS)
        pairs = [self.lookup.optout_pairs]
        perceptual = self._perceptual
        if perceptual.num_rows:
            hashed = exports.filter(pc.is_valid(exports["phash"])).select(_HASHED_SCHEMA.names).cast(_HASHED_SCHEMA)
            if len(self.lookup.flat_ids):
                hashed = hashed.filter(pc.invert(pc.is_in(hashed["sample_id"], value_set=self.lookup.flat_ids)))
            pairs.append(match_fingerprints(perceptual, hashed, None).select(["sample_id", "request_id"]).cast(_PAIR_SCHEMA))
        pairs = _unique_pairs(pairs)
        if pairs.num_rows:
            joined = placed.join(pairs, "sample_id", join_type="inner", use_threads=False)
            reason = pc.binary_join_element_wise("optout:", joined["request_id"], "")
            self._keep(self._optouts, joined.drop_columns(["request_id"]).append_column("reason", reason))

    def _keep(self, into: list[pa.Table], rows: pa.Table) -> None:
        if self.sink is None:
            into.append(rows)
        elif rows.num_rows:
            self.sink(rows.select([*PLACEMENT_COLUMNS, "reason"]))

    def finish(self, schema: pa.Schema) -> tuple[pa.Table, pa.Table]:
        """Both tables cast to ``schema`` (the skip schema; ``kept_sample_id`` is null)."""
        try:
            self._end_source()
        finally:
            self.close()
        return self._rows(self._labels, schema), self._rows(self._optouts, schema)

    def close(self) -> None:
        """Remove the label join's spill (``finish`` does; call it when the scan fails)."""
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder, self._placed = None, None

    @staticmethod
    def _rows(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return schema.empty_table()
        rows = pa.concat_tables([p.select([*PLACEMENT_COLUMNS, "reason"]) for p in parts])
        rows = rows.append_column("kept_sample_id", pa.nulls(rows.num_rows, pa.string()))
        return (
            rows.select(schema.names)
            .cast(schema)
            .sort_by([("shard", "ascending"), ("index_in_shard", "ascending"), ("reason", "ascending")])
        )


__all__ = ["MIN_BUFFER_ROWS", "RANGE_ROWS", "ReasonCollector", "ReasonLookup", "reason_lookup"]
