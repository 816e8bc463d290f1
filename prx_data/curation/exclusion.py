"""Corpus-wide exclusion: what the loader must skip, and why, from every source's exports.

Reasons: ``dedup`` (exact phash equality within an aspect-ratio bucket, across tiers and
sources), ``label:<label>`` for excluded caption labels, ``optout:<request id>`` for samples an
opt-out request resolved to. Shards are never rewritten: the result is written as sidecars.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.filters import one_of
from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.core.settings import EXCLUDE_LABELS
from prx_data.core.spill import SpilledByKey
from prx_data.curation.dedup import DEFAULT_PARTITION_ROWS, DedupConfig, find_duplicates, spilled_duplicates
from prx_data.curation.optout.match import hashed_candidates, keyed_candidates, match_fingerprints, raw_rows
from prx_data.curation.optout.receipt import record_build
from prx_data.curation.optout.requests import read_fingerprints
from prx_data.curation.skip_reasons import MIN_BUFFER_ROWS, ReasonCollector, reason_lookup
from prx_data.export.skiplist import SKIP_COLUMNS, SKIP_SCHEMA, SkiplistReport, SpilledSkips, as_skip_rows, build_skiplists
from prx_data.export.tree import placed_buckets
from prx_data.imaging.buckets import BucketConfig

# PRX_DEDUP_RADIUS's default (core/settings.py); callers that run under settings pass theirs.
DEFAULT_DEDUP_RADIUS = 2


def dedup_config(bucket_cfg: BucketConfig, radius: int = DEFAULT_DEDUP_RADIUS) -> DedupConfig:
    """The dedup grid is the bucketing grid: same ratios, same range; ``radius`` in bits."""
    return DedupConfig(
        num_aspect_ratios=bucket_cfg.shapes_per_tier,
        min_aspect=bucket_cfg.ar_min,
        max_aspect=bucket_cfg.ar_max,
        multiple=bucket_cfg.multiple,
        radius=radius,
    )


EXPORTED_SCHEMA = pa.schema(
    [
        ("sample_id", pa.string()),
        ("source", pa.string()),
        ("tier", pa.int32()),
        ("bucket", pa.string()),
        ("shard", pa.string()),
        ("index_in_shard", pa.int64()),
        ("phash", pa.int64()),
        ("source_priority", pa.int64()),
        ("phash_degenerate", pa.bool_()),
        ("image_sha256", pa.string()),
    ]
)


def exported_samples(paths: StoragePaths, priorities: Mapping[str, int], options: dict | None = None) -> pa.Table:
    """Every exported sample of the given sources, with its source priority."""
    tables = []
    for source, priority in sorted(priorities.items()):
        ds = open_table(paths.exports_table(source), options)
        if ds is None:
            continue
        t = ds.to_table(columns=["sample_id", "source", "tier", "bucket", "shard", "index_in_shard", "phash"], filter="shard IS NOT NULL")
        t = t.append_column("source_priority", pa.array([priority] * t.num_rows, pa.int64()))
        tables.append(_with_content_keys(t, paths.raw_table(source), options))
    if not tables:
        return EXPORTED_SCHEMA.empty_table()
    return pa.concat_tables(tables)


_EXPORT_COLUMNS = ["sample_id", "source", "tier", "bucket", "shard", "index_in_shard", "phash"]
SCAN_BATCH_ROWS = 16_384


def _degenerate_keys(raw_uri: str, options: dict | None) -> pa.Table:
    """(sample_id, phash_degenerate, image_sha256) of the raw rows flagged degenerate: the only
    rows whose content key dedup reads, so a few rows instead of the whole raw table."""
    raw = open_table(raw_uri, options)
    if raw is None or "phash_degenerate" not in raw.schema.names:
        return pa.table({"sample_id": pa.array([], pa.string())})
    names = raw.schema.names
    wanted = ["sample_id", "phash_degenerate", *(["image_sha256"] if "image_sha256" in names else [])]
    return raw.to_table(columns=wanted, filter="phash_degenerate = true")


def exported_row_count(paths: StoragePaths, priorities: Mapping[str, int], options: dict | None = None) -> int:
    """Rows of every source's exports table (placed or dropped): an upper bound of the exported
    samples, to size spills before the scan."""
    found = (open_table(paths.exports_table(source), options) for source in sorted(priorities))
    return sum(ds.count_rows() for ds in found if ds is not None)


def exported_batches(paths: StoragePaths, priorities: Mapping[str, int], options: dict | None = None, batch_rows: int = SCAN_BATCH_ROWS):
    """(row count upper bound, iterator of tables): ``exported_samples``' rows, streamed from each
    source's exports table in scanner batches; only the degenerate rows' content keys are joined
    (a non-degenerate row's sha256 is never read by dedup, so it stays null here)."""
    datasets = []
    for source, priority in sorted(priorities.items()):
        ds = open_table(paths.exports_table(source), options)
        if ds is not None:
            datasets.append((source, priority, ds))

    def batches():
        for source, priority, ds in datasets:
            keys = _degenerate_keys(paths.raw_table(source), options)
            # Readahead bounded: Lance's defaults prefetch many fragments, i.e. memory ~ the table.
            scanner = ds.scanner(
                columns=_EXPORT_COLUMNS, filter="shard IS NOT NULL", batch_size=batch_rows, batch_readahead=2, fragment_readahead=1
            )
            for batch in scanner.to_batches():
                t = pa.Table.from_batches([batch])
                t = t.append_column("source_priority", pa.array(np.full(t.num_rows, priority, np.int64)))
                yield _joined_keys(t, keys)

    return sum(ds.count_rows() for _, _, ds in datasets), batches()


def _joined_keys(exports: pa.Table, keys: pa.Table) -> pa.Table:
    if keys.num_rows:
        joined = exports.join(keys, "sample_id", join_type="left outer")
    else:
        joined = exports
    for name, kind in (("phash_degenerate", pa.bool_()), ("image_sha256", pa.string())):
        if name not in joined.column_names:
            joined = joined.append_column(name, pa.nulls(joined.num_rows, kind))
    return joined.select([*exports.column_names, "phash_degenerate", "image_sha256"]).cast(EXPORTED_SCHEMA)


def spilled_dedup_rows(
    paths: StoragePaths,
    priorities: Mapping[str, int],
    cfg: DedupConfig,
    options: dict | None = None,
    *,
    max_partition_rows: int = DEFAULT_PARTITION_ROWS,
    scratch_dir: str | None = None,
    on_batch: Callable[[pa.Table], None] | None = None,
    sink: Callable[[pa.Table], None] | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None,
) -> pa.Table:
    """``dedup_rows(exported_samples(...))`` without holding the corpus: the exports stream from
    Lance into partitions spilled under ``scratch_dir`` (see curation.dedup.spilled_duplicates). ``on_batch``
    sees every export batch (``EXPORTED_SCHEMA``) of that one scan. With ``sink``, the rows go to
    it partition by partition (SKIP_SCHEMA) and an empty table is returned. ``keep`` narrows each
    batch (after ``on_batch``) to the rows dedup decides among: an ablation view's included rows."""
    total, batches = exported_batches(paths, priorities, options)

    def shaped():
        for batch in batches:
            if on_batch is not None:
                on_batch(batch)
            if keep is not None:
                batch = keep(batch)
            yield _with_shape(batch)

    dups = spilled_duplicates(
        shaped(),
        cfg,
        total_rows=total,
        columns=["sample_id", "source", "shard", "index_in_shard"],
        max_partition_rows=max_partition_rows,
        scratch_dir=scratch_dir,
        sink=None if sink is None else (lambda rows: sink(as_skip_rows(rows))),
    )
    return as_skip_rows(dups)


def _with_content_keys(exports: pa.Table, raw_uri: str, options: dict | None) -> pa.Table:
    """Adds ``phash_degenerate`` and ``image_sha256`` from the raw table (null when absent):
    dedup matches degenerate fingerprints by content key only."""
    raw = open_table(raw_uri, options)
    wanted = [c for c in ("phash_degenerate", "image_sha256") if c in raw.schema.names] if raw is not None else []
    keys = (
        raw.to_table(columns=["sample_id", *wanted]) if raw is not None and wanted else pa.table({"sample_id": pa.array([], pa.string())})
    )
    joined = exports.join(keys, "sample_id", join_type="left outer")
    for name, kind in (("phash_degenerate", pa.bool_()), ("image_sha256", pa.string())):
        if name not in joined.column_names:
            joined = joined.append_column(name, pa.nulls(joined.num_rows, kind))
    return joined.select([*exports.column_names, "phash_degenerate", "image_sha256"])


def _with_shape(exports: pa.Table) -> pa.Table:
    parts = pc.split_pattern(exports["bucket"], "x")
    height = pc.cast(pc.list_element(parts, 0), pa.int64())
    width = pc.cast(pc.list_element(parts, 1), pa.int64())
    return exports.append_column("height", height).append_column("width", width)


def dedup_rows(exports: pa.Table, cfg: DedupConfig) -> pa.Table:
    dups = find_duplicates(_with_shape(exports), cfg)
    return dups.select(SKIP_COLUMNS).cast(SKIP_SCHEMA)


def label_rows(
    exports: pa.Table, paths: StoragePaths, sources: Iterable[str], exclude: Iterable[str], options: dict | None = None
) -> pa.Table:
    exclude = sorted(set(exclude))
    tables = []
    for source in sources:
        ds = open_table(paths.raw_table(source), options)
        if ds is None or "label" not in ds.schema.names or not exclude:
            continue
        labelled = ds.to_table(columns=["sample_id", "label"], filter=one_of("label", exclude))
        tables.append(labelled)
    return _join_reasons(exports, tables, lambda t: pc.binary_join_element_wise("label:", t["label"], ""))


def optout_rows(exports: pa.Table, optouts: pa.Table | None) -> pa.Table:
    """``optouts``: sample_id, request_id (one row per request that covers the sample)."""
    if optouts is None or optouts.num_rows == 0:
        return SKIP_SCHEMA.empty_table()
    return _join_reasons(
        exports, [optouts.select(["sample_id", "request_id"])], lambda t: pc.binary_join_element_wise("optout:", t["request_id"], "")
    )


def optout_samples(paths: StoragePaths, exports: pa.Table, sources: Iterable[str], options: dict | None = None) -> pa.Table:
    """(sample_id, request_id) of every exported sample an opt-out covers: the samples the last
    resolution matched, plus every exported sample whose image matches a fingerprint a request
    recorded. The second part is re-applied on every build, so a source that lands later, a
    re-export or a re-ingest that dropped a matched row's bytes never lets a copy back in."""

    parts = []
    matched = read_optout_samples(paths, options)
    if matched is not None:
        parts.append(matched.select(["sample_id", "request_id"]))
    fingerprints = read_fingerprints(paths, options)
    if fingerprints.num_rows and exports.num_rows:
        raw = raw_rows(paths, sources, options)
        # The exported image's hash (what the shard holds), and the row's content key; the join
        # with the exports below keeps exported samples only.
        hashed = hashed_candidates(raw, exports.select(["sample_id", "source", "phash"]), include_raw=False)
        found = match_fingerprints(fingerprints, hashed, keyed_candidates(raw))
        parts.append(found.select(["sample_id", "request_id"]))
    if not parts:
        return pa.table({"sample_id": pa.array([], pa.string()), "request_id": pa.array([], pa.string())})
    both = pa.concat_tables([p.cast(pa.schema([("sample_id", pa.string()), ("request_id", pa.string())])) for p in parts])
    return both.group_by(["sample_id", "request_id"], use_threads=False).aggregate([])


def _join_reasons(exports: pa.Table, tables: list[pa.Table], reason_of) -> pa.Table:
    if not tables:
        return SKIP_SCHEMA.empty_table()
    found = pa.concat_tables(tables)
    found = found.append_column("reason", reason_of(found))
    joined = exports.select(["sample_id", "source", "shard", "index_in_shard"]).join(
        found.select(["sample_id", "reason"]), "sample_id", join_type="inner"
    )
    joined = joined.append_column("kept_sample_id", pa.nulls(joined.num_rows, pa.string()))
    return (
        joined.select(SKIP_COLUMNS)
        .cast(SKIP_SCHEMA)
        .sort_by([("shard", "ascending"), ("index_in_shard", "ascending"), ("reason", "ascending")])
    )


def superseded_rows(paths: StoragePaths, sources: Iterable[str], options: dict | None = None) -> pa.Table:
    """Old placements an incremental export replaced (``superseded``), from each source's table."""
    return pa.concat_tables([SKIP_SCHEMA.empty_table(), *superseded_batches(paths, sources, options)])


def superseded_batches(paths: StoragePaths, sources: Iterable[str], options: dict | None = None) -> Iterator[pa.Table]:
    """``superseded_rows`` batch by batch."""
    for source in sorted(sources):
        ds = open_table(paths.superseded_table(source), options)
        if ds is None:
            continue
        for batch in ds.to_batches(columns=["sample_id", "source", "shard", "index_in_shard"], batch_size=SCAN_BATCH_ROWS):
            found = pa.Table.from_batches([batch])
            yield as_skip_rows(found.append_column("reason", pa.array(["superseded"] * found.num_rows, pa.string())))


@dataclass
class RecordedSkiplistReport(SkiplistReport):
    """A skip-list build recorded for the requesters' receipts, under ``build_id``."""

    build_id: str | None = None


def write_skip_lists(
    mds_root: str, skips: pa.Table | SpilledSkips, storage_options: dict | None = None, paths: StoragePaths | None = None
) -> SkiplistReport:
    """Write the sidecars; with ``paths``, also record the build (which request it excludes, on
    which shards) for the requesters' receipts (the report is then a RecordedSkiplistReport).
    ``skips``: a table, or rows spilled by bucket and sample id (read a part at a time)."""
    report = build_skiplists(skips, mds_root, storage_options=storage_options)
    if paths is None:
        return report
    build_id = record_build(paths, skips, storage_options)
    return RecordedSkiplistReport(**{f.name: getattr(report, f.name) for f in fields(report)}, build_id=build_id)


def read_optout_samples(paths: StoragePaths, options: dict | None = None) -> pa.Table | None:
    ds = open_table(paths.optout_samples_table(), options)
    return None if ds is None else ds.to_table(columns=["sample_id", "request_id"])


PLACEMENT_SCHEMA = pa.schema(
    [(name, EXPORTED_SCHEMA.field(name).type) for name in ("sample_id", "source", "tier", "bucket", "shard", "index_in_shard")]
)


class SpilledPlacements(SpilledByKey):
    """The corpus's placements on local disk by bucket, for the fold policy's plan: it reads one
    bucket's placements and skip rows at a time instead of every placement of the corpus
    (``curation.fold``). A placement without a shard is in no bucket and is not kept."""

    def __init__(self, folder: str, schema: pa.Schema = PLACEMENT_SCHEMA):
        super().__init__(folder, schema, placed_buckets)


@dataclass
class SkipScan:
    """What one scan of the exports gives: the skip rows, how many placements were scanned and,
    when asked for (the fold policy needs them), the placements' columns."""

    skips: pa.Table  # SKIP_SCHEMA
    exported: int  # exported placements (rows with a shard) over every source
    placements: pa.Table  # PLACEMENT_SCHEMA; empty unless asked for


def scan_skips(
    paths: StoragePaths,
    priorities: Mapping[str, int],
    *,
    bucket_cfg: BucketConfig,
    exclude_labels: Iterable[str] = EXCLUDE_LABELS,
    options: dict | None = None,
    dedup_radius: int = DEFAULT_DEDUP_RADIUS,
    max_partition_rows: int = DEFAULT_PARTITION_ROWS,
    scratch_dir: str | None = None,
    placements: bool = False,
    min_buffer_rows: int = MIN_BUFFER_ROWS,
    into: SpilledSkips | None = None,
    placements_into: SpilledPlacements | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None,
) -> SkipScan:
    """Every skip over the whole corpus from one streamed scan of the exports: dedup spills one
    partition of at most ``max_partition_rows`` (exact dedup) under ``scratch_dir`` (the system
    temp folder when None); labels and opt-outs are joined per buffer of at least
    ``min_buffer_rows`` exports (see curation.skip_reasons). With ``into``, every skip row goes
    there as it is found (left open) and ``SkipScan.skips`` is empty; without, they come back as
    one table. ``placements``: the placements come back as one table; ``placements_into``: they
    go there, spilled by bucket, instead (what the fold policy's plan reads). ``keep``: the rows
    dedup decides among, per batch (``spilled_dedup_rows``); labels and opt-outs see every row."""
    cfg = dedup_config(bucket_cfg, dedup_radius)
    lookup = reason_lookup(paths, priorities, exclude_labels, read_optout_samples(paths, options), options)
    sink = into.add if into is not None else None
    reasons = ReasonCollector(lookup, min_buffer_rows, sink=sink, scratch_dir=scratch_dir)
    kept: list[pa.Table] = []
    exported = 0

    def on_batch(batch: pa.Table) -> None:
        nonlocal exported
        exported += batch.num_rows
        reasons.add(batch)
        if placements:
            kept.append(batch.select(PLACEMENT_SCHEMA.names))
        if placements_into is not None:
            placements_into.add(batch.select(PLACEMENT_SCHEMA.names).cast(PLACEMENT_SCHEMA))

    try:
        dups = spilled_dedup_rows(
            paths,
            priorities,
            cfg,
            options,
            max_partition_rows=max_partition_rows,
            scratch_dir=scratch_dir,
            on_batch=on_batch,
            sink=sink,
            keep=keep,
        )
        labels, optouts = reasons.finish(SKIP_SCHEMA)
    finally:
        reasons.close()  # the label join's spill, also when the scan failed
    if into is not None:
        for rows in superseded_batches(paths, priorities, options):
            into.add(rows)
        skips = SKIP_SCHEMA.empty_table()
    else:
        skips = pa.concat_tables([dups, labels, optouts, superseded_rows(paths, priorities, options)])
    table = pa.concat_tables(kept).cast(PLACEMENT_SCHEMA) if kept else PLACEMENT_SCHEMA.empty_table()
    return SkipScan(skips=skips, exported=exported, placements=table)


def compute_skips(
    paths: StoragePaths,
    priorities: Mapping[str, int],
    *,
    bucket_cfg: BucketConfig,
    exclude_labels: Iterable[str] = EXCLUDE_LABELS,
    options: dict | None = None,
    dedup_radius: int = DEFAULT_DEDUP_RADIUS,
    max_partition_rows: int = DEFAULT_PARTITION_ROWS,
    scratch_dir: str | None = None,
) -> tuple[pa.Table, pa.Table]:
    """(placements, skip rows) over the whole corpus: ``scan_skips`` with the placements kept
    (what ``curation.fold.apply_fold_policy`` takes as its exports)."""
    scan = scan_skips(
        paths,
        priorities,
        bucket_cfg=bucket_cfg,
        exclude_labels=exclude_labels,
        options=options,
        dedup_radius=dedup_radius,
        max_partition_rows=max_partition_rows,
        scratch_dir=scratch_dir,
        placements=True,
    )
    return scan.placements, scan.skips


__all__ = ["RecordedSkiplistReport", "SkipScan", "compute_skips", "scan_skips", "dedup_config", "exported_samples", "write_skip_lists"]
