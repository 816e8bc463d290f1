"""Label and opt-out skip rows from a stream of export batches, so the exports are scanned once
(alongside dedup) and never held whole.

What is looked up per exported row is read up front (``reason_lookup``): the samples an opt-out
already resolved to plus those whose content key equals a recorded fingerprint, and the
perceptual fingerprints with the degenerate rows whose hash is none (all small); and, one source
at a time as its exports arrive, that source's raw rows with an excluded label (a sample id
belongs to one source, so no other source's rows can match). The export batches are buffered
until the buffer is at least as large as those tables, then joined with them: each join costs
about the buffer's size, so the whole pass costs about the corpus' size, and memory is one
source's labelled rows plus one buffer (never the corpus).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.filters import one_of
from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.curation.optout.match import match_fingerprints
from prx_data.curation.optout.requests import read_fingerprints
from prx_data.imaging.fingerprints import DEGENERATE_COLUMN

PLACEMENT_COLUMNS = ["sample_id", "source", "shard", "index_in_shard"]
MIN_BUFFER_ROWS = 1 << 18  # a join's fixed cost is paid per buffer: keep buffers large
_PAIR_SCHEMA = pa.schema([("sample_id", pa.string()), ("request_id", pa.string())])
_HASHED_SCHEMA = pa.schema([("sample_id", pa.string()), ("source", pa.string()), ("phash", pa.int64())])


_LABEL_SCHEMA = pa.schema([("sample_id", pa.string()), ("reason", pa.string())])


@dataclass(frozen=True)
class ReasonLookup:
    # sample_id, reason ('label:<label>') of one source's raw rows with an excluded label
    labelled_of: Callable[[str], pa.Table]
    labels_excluded: bool  # some label is excluded (else labelled_of is always empty)
    optout_pairs: pa.Table  # sample_id, request_id: resolved matches and content-key matches
    fingerprints: pa.Table  # every recorded fingerprint (the perceptual ones are matched per batch)
    flat_ids: pa.Array  # raw rows flagged degenerate: their hash is no fingerprint

    @property
    def rows(self) -> int:
        """Rows looked up besides a source's labelled rows."""
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

    def labelled_of(source: str) -> pa.Table:
        ds = open_table(paths.raw_table(source), options) if exclude and source in sources else None
        if ds is None or "label" not in ds.schema.names:
            return _LABEL_SCHEMA.empty_table()
        found = ds.to_table(columns=["sample_id", "label"], filter=one_of("label", exclude))
        reason = pc.binary_join_element_wise("label:", found["label"], "")
        return pa.table({"sample_id": found["sample_id"], "reason": reason}).cast(_LABEL_SCHEMA)

    return ReasonLookup(
        labelled_of=labelled_of,
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
    With ``sink``, the rows go to it buffer by buffer instead (unsorted), and ``finish``
    returns empty tables."""

    lookup: ReasonLookup
    min_buffer_rows: int = MIN_BUFFER_ROWS
    sink: Callable[[pa.Table], None] | None = None
    _buffer: list[pa.Table] = field(default_factory=list)
    _buffered: int = 0
    _source: str | None = None  # the source of the buffered rows
    _labelled: pa.Table = field(default_factory=_LABEL_SCHEMA.empty_table)  # that source's
    _labels: list[pa.Table] = field(default_factory=list)
    _optouts: list[pa.Table] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        """Nothing to look up: batches need not be fed."""
        return not self.lookup.labels_excluded and not self.lookup.optout_pairs.num_rows and not self._perceptual.num_rows

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
            self._flush()
            self._source, self._labelled = sources[0], self.lookup.labelled_of(sources[0])
        self._buffer.append(batch.select([*PLACEMENT_COLUMNS, "phash"]))
        self._buffered += batch.num_rows
        if self._buffered >= max(self.min_buffer_rows, self.lookup.rows + self._labelled.num_rows):
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        exports = pa.concat_tables(self._buffer)
        self._buffer, self._buffered = [], 0
        placed = exports.select(PLACEMENT_COLUMNS)
        if self._labelled.num_rows:
            self._keep(self._labels, placed.join(self._labelled, "sample_id", join_type="inner", use_threads=False))
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
        self._flush()
        return self._rows(self._labels, schema), self._rows(self._optouts, schema)

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


__all__ = ["MIN_BUFFER_ROWS", "ReasonCollector", "ReasonLookup", "reason_lookup"]
