"""Export planning in columns: which rows of a source stay, are written with their old bytes,
are encoded, or are dropped, and which old placements that supersedes.

The driver's memory is bounded by one planning partition, not by the source: the source is
read batch by batch (captions included, since ``meta_key`` hashes them) and only narrow per-row
columns (sample id, row address, phash, keys, target bucket, drop reason) are kept, spilled with
the previous exports and superseded tables to Arrow IPC files in sample-id partitions
(``core.spill``), and joined partition by partition. Two passes: the first sums the small
per-bucket counts the rewrite threshold needs, the second decides each partition and spills its
plan, which the exports table is then built from partition by partition. Captions of rows to
write are read again, chunk by chunk, by whoever writes them. The rows to encode are spilled too,
by ranges of scan position, and read back one range at a time (``core.spill.ScanOrdered``).
What stays whole-source in memory is only the rows re-used with their old bytes (sample id, row
address and old placement: the changed captions, or every row of a bucket being rewritten) and
the orphans a killed run left.

Order: partitions are sample-id ranges, so the exports table streams out sorted by sample id as
before, and the rows to write are re-sorted into scan order (the shards' content). The
superseded table's rows come partition by partition (stored, changed, removed, orphaned in each);
its readers (skip lists) only build per-shard sets of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import get_args

import lance
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.counts import value_counter
from prx_data.core.reasons import reason_code
from prx_data.core.schema import EXPORT_SCHEMA
from prx_data.core.spill import ScanOrdered, SpilledPartitions, partition_count, partition_of, range_bounds
from prx_data.export.reuse import ShardReader
from prx_data.export.tree import BucketRef, parse_bucket
from prx_data.imaging.buckets import BucketConfig, Drop, assign
from prx_data.imaging.colour import COLOUR_VERSION, needs_conversion
from prx_data.imaging.decode import Reason

# Columns the written samples carry besides the image (read per chunk, never source-wide).
META_COLUMNS = ("caption", "label", "caption_model")
# Planning a partition peaks near 1.7 KB a row on the driver (the joined narrow columns, their
# sorted copies, the new and previous exports rows compared; benchmarks/bench_export_memory.py
# at 40,000 rows in one partition): 1 M rows stay near 1.7 GB.
MAX_PARTITION_ROWS = 1_000_000
# A ``phash_error`` whose code is a decode reason says the image bytes are unusable (a JPEG
# cut mid-scan is first found there): the row is dropped with that reason, not exported.
# Other hash errors (``hash_failed: ...``) are left to the export's own decode.
_BAD_BYTES = frozenset(get_args(Reason))

CURRENT_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("_rowaddr", pa.uint64()),
        pa.field("_i", pa.int64()),  # scan position: keeps the old code's row order after joins
        pa.field("phash", pa.int64()),
        pa.field("image_key", pa.string()),
        pa.field("meta_key", pa.string()),
        pa.field("target", pa.string()),  # '<tier>/<HxW>' the row would land in
        pa.field("drop", pa.string()),
    ]
)
_ENCODE_SCHEMA = pa.schema([CURRENT_SCHEMA.field(name) for name in ("sample_id", "_rowaddr", "_i")])
# The previous exports table's columns, prefixed 'p_' once joined to the current rows.
PREV_COLUMNS = ("tier", "bucket", "shard", "index_in_shard", "drop_reason", "exported_at", "export_run_id", "image_key", "meta_key")
PLACEMENT_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("tier", pa.int32()),
        pa.field("bucket", pa.string()),
        pa.field("shard", pa.string()),
        pa.field("index_in_shard", pa.int64()),
        pa.field("superseded_at", pa.timestamp("us", tz="UTC")),
    ]
)


def _values(batch: pa.RecordBatch, name: str) -> list:
    return batch.column(name).to_pylist() if name in batch.schema.names else [None] * batch.num_rows


def row_key(*parts) -> str:
    return hashlib.blake2b(json.dumps(parts, default=str).encode(), digest_size=16).hexdigest()


def bucket_ref(tier: int | str, bucket: str) -> BucketRef:
    height, width = parse_bucket(bucket)
    return BucketRef(int(tier), height, width)


def shard_rel(shard: str) -> str:
    """'<tier>/<HxW>' of a shard path '<tier>/<HxW>/<source>/<file>'."""
    return shard.rsplit("/", 2)[0]


def _image_key(sha: str | None, width, height, image_version: str, colour_space: str | None) -> str | None:
    """What the encoded bytes are made from. The colour conversion's version is part of it only
    for rows it converts, so introducing or changing it re-exports exactly those rows; rows
    written as decoded keep the key older code gave them."""
    if not sha:
        return None
    if needs_conversion(colour_space):
        return row_key(sha, width, height, image_version, COLOUR_VERSION)
    return row_key(sha, width, height, image_version)


def scan_current(
    ds: lance.LanceDataset,
    *,
    bucket_cfg: BucketConfig,
    image_version: str,
    require_caption: bool,
    max_caption_chars: int | None,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    """The source's ok rows as CURRENT_SCHEMA batches, in scan order; Python values live one batch."""
    names = ds.schema.names
    wanted = ["sample_id", "width", "height"] + [
        c for c in ("image_sha256", "phash", "phash_error", "colour_space", *META_COLUMNS) if c in names
    ]
    offset = 0
    for batch in ds.to_batches(columns=wanted, filter="status = 'ok'", with_row_address=True, batch_size=batch_rows):
        n = batch.num_rows
        if not n:
            continue

        sha, widths, heights = _values(batch, "image_sha256"), _values(batch, "width"), _values(batch, "height")
        caption, label, model = _values(batch, "caption"), _values(batch, "label"), _values(batch, "caption_model")
        hash_error = _values(batch, "phash_error")
        colour = _values(batch, "colour_space")
        image_key = [_image_key(sha[i], widths[i], heights[i], image_version, colour[i]) for i in range(n)]
        meta_key = [row_key(caption[i], label[i], model[i]) for i in range(n)]
        target: list[str | None] = [None] * n
        drop: list[str | None] = [None] * n
        for i in range(n):
            if hash_error[i] and reason_code(hash_error[i]) in _BAD_BYTES:
                drop[i] = hash_error[i]
            elif require_caption and not caption[i]:
                drop[i] = "no_caption"
            elif max_caption_chars is not None and caption[i] and len(caption[i]) > max_caption_chars:
                drop[i] = f"caption_too_long: {len(caption[i])} characters, the limit is {max_caption_chars}"
            else:
                assigned = assign(widths[i], heights[i], bucket_cfg)
                if isinstance(assigned, Drop):
                    drop[i] = assigned.reason
                else:
                    target[i] = BucketRef(assigned.tier, assigned.height, assigned.width).rel
        phash = batch.column("phash").cast(pa.int64()) if "phash" in batch.schema.names else pa.nulls(n, pa.int64())
        yield pa.record_batch(
            [
                batch.column("sample_id").cast(pa.string()),
                batch.column("_rowaddr"),
                pa.array(range(offset, offset + n), pa.int64()),
                phash,
                pa.array(image_key, pa.string()),
                pa.array(meta_key, pa.string()),
                pa.array(target, pa.string()),
                pa.array(drop, pa.string()),
            ],
            schema=CURRENT_SCHEMA,
        )
        offset += n


def with_columns(table: pa.Table | None, schema: pa.Schema) -> pa.Table:
    """``table`` with every column of ``schema`` (missing ones null), cast to it; an empty
    table when there is none."""
    if table is None:
        return schema.empty_table()
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.table(columns, schema=schema)


_PREV_SCHEMA = pa.schema([EXPORT_SCHEMA.field("sample_id"), *(EXPORT_SCHEMA.field(c) for c in PREV_COLUMNS)])
# What the exports table needs of a planned row (spilled between planning and the table write).
PLANNED_COLUMNS = (
    "sample_id", "_i", "phash", "image_key", "meta_key",
    "p_tier", "p_bucket", "p_shard", "p_index_in_shard", "p_exported_at", "p_export_run_id", "p_drop_reason",
)  # fmt: skip


_JOINED_TYPES = {**{f.name: f.type for f in CURRENT_SCHEMA}, **{f"p_{f.name}": f.type for f in _PREV_SCHEMA}}
_PLANNED_SCHEMA = pa.schema(
    [*(pa.field(name, _JOINED_TYPES[name]) for name in PLANNED_COLUMNS), pa.field("keep", pa.bool_()), pa.field("drop", pa.string())]
)


def _false(mask) -> pa.Array:
    return pc.fill_null(mask, False)


def _metadata_drop(reasons, metadata_drops: frozenset[str]) -> pa.Array:
    code = pc.replace_substring_regex(reasons, "(?s):.*", "")
    return _false(pc.is_in(code, value_set=pa.array(sorted(metadata_drops), pa.string())))


@dataclass
class _Classified:
    """One partition's rows against their previous placements, before the rewrite decision."""

    joined: pa.Table  # current rows (CURRENT_SCHEMA) + the previous placement as p_* columns
    live: pa.Array
    placed: pa.Array
    keep: pa.Array
    reuse: pa.Array
    encode: pa.Array
    drop: pa.Array  # the drop reason (metadata, bucket, or carried over)
    changed: pa.Table  # PLACEMENT_SCHEMA: old placements of changed rows, in row order
    removed: pa.Table  # PLACEMENT_SCHEMA: old placements of rows no longer live
    prev_sup: pa.Table  # PLACEMENT_SCHEMA: stored superseded placements in published shards
    known: pa.Table  # shard, index_in_shard: placements in published shards the tables know


def _placements(sample_id, tier, bucket, shard, index) -> pa.Table:
    return pa.table(
        [sample_id, tier, bucket, shard, index, pa.nulls(len(sample_id), PLACEMENT_SCHEMA.field("superseded_at").type)],
        schema=PLACEMENT_SCHEMA,
    )


def _known(previous: pa.Table, prev_sup: pa.Table, shards: pa.Array) -> pa.Table:
    """(shard, index_in_shard) of every placement in a published shard that a table knows."""
    placed_prev = previous.filter(_false(pc.is_in(previous["shard"], value_set=shards)))
    return pa.concat_tables([placed_prev.select(["shard", "index_in_shard"]), prev_sup.select(["shard", "index_in_shard"])])


def _classify(current: pa.Table, prev: pa.Table, stored_sup: pa.Table, shards: pa.Array, metadata_drops) -> _Classified:
    previous = with_columns(prev, _PREV_SCHEMA)
    renamed = previous.rename_columns(["sample_id", *(f"p_{c}" for c in PREV_COLUMNS)]).append_column(
        "p_found", pc.is_valid(previous["sample_id"])
    )
    joined = current.join(renamed, keys="sample_id", join_type="left outer").sort_by("_i").combine_chunks()

    live = pc.is_null(joined["drop"])
    placed = _false(pc.is_in(joined["p_shard"], value_set=shards))
    same_image = _false(pc.equal(joined["p_image_key"], joined["image_key"]))
    same_meta = _false(pc.equal(joined["p_meta_key"], joined["meta_key"]))
    stays = pc.and_(pc.and_(live, placed), same_image)
    keep = pc.and_(stays, same_meta)
    reuse = pc.and_(stays, pc.invert(same_meta))
    # Dropped when its bytes were decoded, and still the same bytes: the reason carries over.
    unplaced = pc.or_(pc.is_null(joined["p_shard"]), _false(pc.equal(joined["p_shard"], "")))
    carried = pc.and_(
        pc.and_(pc.and_(live, pc.invert(placed)), pc.and_(_false(joined["p_found"]), unplaced)),
        pc.and_(
            pc.and_(same_image, _false(pc.not_equal(joined["p_drop_reason"], ""))),
            pc.invert(_metadata_drop(joined["p_drop_reason"], metadata_drops)),
        ),
    )
    encode = pc.and_(live, pc.invert(pc.or_(pc.or_(keep, reuse), carried)))
    drop = pc.if_else(carried, joined["p_drop_reason"], joined["drop"])

    rows = joined.filter(pc.and_(pc.and_(live, placed), pc.invert(keep)))
    changed = _placements(rows["sample_id"], rows["p_tier"], rows["p_bucket"], rows["p_shard"], rows["p_index_in_shard"])
    live_ids = pa.table({"sample_id": joined.filter(live)["sample_id"]})
    gone = previous.join(live_ids, keys="sample_id", join_type="left anti")
    gone = gone.filter(_false(pc.is_in(gone["shard"], value_set=shards)))
    removed = _placements(gone["sample_id"], gone["tier"], gone["bucket"], gone["shard"], gone["index_in_shard"])
    sup_prev = with_columns(stored_sup, PLACEMENT_SCHEMA)
    prev_sup = sup_prev.filter(_false(pc.is_in(sup_prev["shard"], value_set=shards)))
    return _Classified(joined, live, placed, keep, reuse, encode, drop, changed, removed, prev_sup, _known(previous, prev_sup, shards))


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for key, count in counts.items():
        into[key] = into.get(key, 0) + count


@dataclass
class Plan:
    """The run's plan, partition by partition on local disk; only the rows to write in memory."""

    planned: SpilledPartitions  # PLANNED_COLUMNS + keep (bool) + drop (final reason), per row
    sup_after: SpilledPartitions  # PLACEMENT_SCHEMA: what the superseded table holds after the run
    previous: SpilledPartitions | None  # the previous exports table, as stored
    reuse: pa.Table  # sample_id, _rowaddr, shard, index_in_shard: written with the old bytes
    encode: ScanOrdered  # sample_id, _rowaddr: decoded, resized, encoded (spilled, scan order)
    rewrite: set[BucketRef]
    kept: int
    new_sup: int  # old placements newly superseded
    stored_sup: int  # rows of the superseded table before the run

    @property
    def partitions(self) -> int:
        return self.planned.partitions


def plan(
    current: Iterable[pa.RecordBatch],
    prev: Iterable[pa.RecordBatch] | None,
    stored_sup: Iterable[pa.RecordBatch] | None,
    sizes: dict[str, int],
    *,
    rows: int,
    folder: str,
    max_partition_rows: int,
    prev_schema: pa.Schema | None = None,
    sup_schema: pa.Schema | None = None,
    rewrite_share: float,
    metadata_drops: frozenset[str],
    orphans,
) -> Plan:
    """Classify every current row against its previous placement, one sample-id partition at a
    time (``core.spill``): the current rows, the previous exports and the stored superseded
    placements are spilled under ``folder`` in about ``rows / max_partition_rows`` partitions.
    A first pass sums the per-bucket counts the rewrite threshold needs, a second decides each
    partition and spills its plan. Memory: one partition, plus the rows to write.

    ``orphans(covered, known_in)`` returns PLACEMENT_SCHEMA rows for published placements the
    tables do not cover: ``covered`` counts the known placements per shard, ``known_in(shards)``
    lists them for the given shards."""
    shards = pa.array(sorted(sizes), pa.string())
    bounds = range_bounds(partition_count(rows, max_partition_rows))

    def spill(name: str, batches, schema) -> SpilledPartitions | None:
        if batches is None:
            return None
        spilled = SpilledPartitions(os.path.join(folder, name), schema, bounds)
        try:
            for batch in batches:
                spilled.add(batch)
        finally:
            spilled.close()  # a failed scan must not keep files open in the spill
        return spilled

    cur = spill("current", current, CURRENT_SCHEMA)
    assert cur is not None  # the source's own rows are always scanned
    previous = spill("previous", prev, prev_schema)
    stored = spill("superseded", stored_sup, sup_schema)
    parts = cur.partitions

    def classified(part: int) -> _Classified:
        return _classify(
            cur.read(part),
            previous.read(part) if previous is not None else None,
            stored.read(part) if stored is not None else None,
            shards,
            metadata_drops,
        )

    # First pass: the small aggregates (per bucket, per shard) summed over partitions.
    superseded_in: dict[str, int] = {}
    arriving: dict[str, int] = {}
    covered: dict[str, int] = {}
    for part in range(parts):
        c = classified(part)
        for placements in (c.prev_sup, c.changed, c.removed):
            _add(superseded_in, _counts_by_rel(placements["shard"]))
        _add(arriving, value_counter(c.joined.filter(c.encode)["target"]))
        _add(arriving, _counts_by_rel(c.joined.filter(c.reuse)["p_shard"]))
        _add(covered, _distinct_in_range(c.known, sizes))

    def known_in(wanted: list[str]) -> pa.Table:
        # A sample id lives in one partition, so the same placement is never counted twice
        # across them unless two tables' rows disagree on which sample it holds.
        value_set = pa.array(wanted, pa.string())
        found = []
        for part in range(parts):
            prev_part = with_columns(previous.read(part) if previous else None, _PREV_SCHEMA)
            sup_part = with_columns(stored.read(part) if stored else None, PLACEMENT_SCHEMA)
            known = _known(prev_part, sup_part.filter(_false(pc.is_in(sup_part["shard"], value_set=shards))), shards)
            found.append(known.filter(_false(pc.is_in(known["shard"], value_set=value_set))))
        return pa.concat_tables(found)  # one per partition: never empty

    found = orphans(covered, known_in)
    _add(superseded_in, _counts_by_rel(found["shard"]))
    orphan_part = partition_of(found["sample_id"], bounds)

    # Maintenance: a bucket whose superseded share passes the threshold is rewritten.
    total: dict[str, int] = {}
    for shard, count in sizes.items():
        total[shard_rel(shard)] = total.get(shard_rel(shard), 0) + count
    rewrite = {
        bucket_ref(*rel.split("/"))
        for rel, count in superseded_in.items()
        if total.get(rel) and count / (total[rel] + arriving.get(rel, 0)) > rewrite_share
    }
    rewrite_rels = {ref.rel for ref in rewrite}
    rewritten_shards = pa.array([s for s in sorted(sizes) if shard_rel(s) in rewrite_rels], pa.string())

    # Second pass: decide each partition and spill its plan.
    planned = SpilledPartitions(os.path.join(folder, "planned"), _PLANNED_SCHEMA, bounds)
    sup_after = SpilledPartitions(os.path.join(folder, "sup_after"), PLACEMENT_SCHEMA, bounds)
    encode = ScanOrdered(os.path.join(folder, "encode"), _ENCODE_SCHEMA, max_partition_rows)
    reuses = []
    kept = new_sup = 0
    for part in range(parts):
        c = classified(part)
        keep, reuse = c.keep, c.reuse
        if rewrite:
            moved = pc.and_(keep, _false(pc.is_in(c.joined["p_shard"], value_set=rewritten_shards)))
            keep = pc.and_(keep, pc.invert(moved))
            reuse = pc.or_(reuse, moved)
        mine = found.filter(pa.array(orphan_part == part)) if found.num_rows else found
        sup_new = pa.concat_tables([c.changed, c.removed, mine])
        sup_all = pa.concat_tables([c.prev_sup, sup_new])
        sup_after.put(part, sup_all.filter(pc.invert(_false(pc.is_in(sup_all["shard"], value_set=rewritten_shards)))))
        new_sup += sup_new.num_rows
        kept += pc.sum(keep.cast(pa.int64())).as_py() or 0
        planned.put(part, c.joined.select(list(PLANNED_COLUMNS)).append_column("keep", keep).append_column("drop", c.drop))
        encode.add(c.joined.filter(c.encode).select(_ENCODE_SCHEMA.names))
        reused = c.joined.filter(reuse)
        reuses.append(
            pa.table(
                {
                    "sample_id": reused["sample_id"],
                    "_rowaddr": reused["_rowaddr"],
                    "shard": reused["p_shard"],
                    "index_in_shard": reused["p_index_in_shard"],
                    "_i": reused["_i"],
                }
            )
        )
    # The rows to write, in scan order as one partition would list them (the shards' order).
    reuse = pa.concat_tables(reuses).sort_by("_i").drop_columns(["_i"]).combine_chunks()
    return Plan(
        planned=planned.close(),
        sup_after=sup_after.close(),
        previous=previous,
        reuse=reuse,
        encode=encode.close(),
        rewrite=rewrite,
        kept=kept,
        new_sup=new_sup,
        stored_sup=stored.rows if stored is not None else 0,
    )


def _distinct_in_range(known: pa.Table, sizes: dict[str, int]) -> dict[str, int]:
    """Distinct known indexes per shard, counting only those inside the shard."""
    sizes_table = pa.table({"shard": pa.array(list(sizes), pa.string()), "size": pa.array(list(sizes.values()), pa.int64())})
    known = known.join(sizes_table, keys="shard", join_type="inner")
    in_range = pc.and_(pc.greater_equal(known["index_in_shard"], 0), pc.less(known["index_in_shard"], known["size"]))
    grouped = known.filter(in_range).group_by("shard").aggregate([("index_in_shard", "count_distinct")])
    return dict(zip(grouped["shard"].to_pylist(), grouped["index_in_shard_count_distinct"].to_pylist()))


def _counts_by_rel(shards) -> dict[str, int]:
    by_rel: dict[str, int] = {}
    for shard, count in value_counter(shards).items():
        by_rel[shard_rel(shard)] = by_rel.get(shard_rel(shard), 0) + count
    return by_rel


def find_orphans(mds_root, source, indexes, sizes, covered: dict[str, int], known_in, options, scratch_dir) -> pa.Table:
    """Placements in published shards that no table knows: a run killed between its MDS commit
    and its table writes. Their samples are written again by this run, so they are superseded.
    Only shards with fewer known placements (``covered``) than samples are looked at index by
    index (``known_in(shards)`` lists their known placements)."""
    short = [shard for shard, count in sizes.items() if covered.get(shard, 0) < count]
    if not short:
        return PLACEMENT_SCHEMA.empty_table()
    known = known_in(short)
    unknown: list[tuple[str, int]] = []
    for shard in short:
        seen = set(known.filter(pc.equal(known["shard"], shard))["index_in_shard"].to_pylist()) if shard in covered else set()
        unknown.extend((shard, i) for i in range(sizes[shard]) if i not in seen)
    if not unknown:
        return PLACEMENT_SCHEMA.empty_table()
    found: dict[str, list] = {name: [] for name in PLACEMENT_SCHEMA.names}
    with tempfile.TemporaryDirectory(prefix=f"prx-orphans-{source}-", dir=scratch_dir) as scratch:
        reader = ShardReader(mds_root, indexes, source, scratch, options)
        for shard, index, sample in reader.read(unknown):
            tier, bucket = shard.split("/")[:2]
            for name, value in zip(PLACEMENT_SCHEMA.names, (sample["sample_id"], int(tier), bucket, shard, index, None)):
                found[name].append(value)
    return pa.table(found, schema=PLACEMENT_SCHEMA)


def exports_table(
    source: str, version: str, now: datetime, run_id: str | None, joined: pa.Table, lineage: pa.Table | None, late_drops: dict[str, str]
) -> pa.Table:
    """The new exports table (EXPORT_SCHEMA, sorted by sample_id) of the planned rows ``joined``
    (one partition of ``Plan.planned``), built in columns. ``lineage`` and ``late_drops`` may
    hold other partitions' rows too: only those of ``joined`` are used."""
    stamp = pa.scalar(now, pa.timestamp("us", tz="UTC"))
    drop = joined["drop"].combine_chunks()
    if late_drops:
        late = pa.table({"sample_id": pa.array(list(late_drops), pa.string()), "late": pa.array(list(late_drops.values()), pa.string())})
        with_late = joined.select(["sample_id", "_i"]).join(late, keys="sample_id", join_type="left outer").sort_by("_i")
        drop = pc.coalesce(drop, with_late["late"].combine_chunks())

    def part(rows, tier, bucket, shard, index, reason, exported_at, run) -> pa.Table:
        n = rows.num_rows

        def const(value, type_):
            return pc.fill_null(pa.nulls(n, type_), pa.scalar(value, type_)) if value is not None else pa.nulls(n, type_)

        return pa.table(
            {
                "sample_id": rows["sample_id"],
                "source": const(source, pa.string()),
                "tier": tier,
                "bucket": bucket,
                "shard": shard,
                "index_in_shard": index,
                "phash": rows["phash"],
                "drop_reason": reason if reason is not None else pa.nulls(n, pa.string()),
                "export_version": const(version, pa.string()),
                "exported_at": exported_at if exported_at is not None else const(now, pa.timestamp("us", tz="UTC")),
                "export_run_id": run if run is not None else const(run_id, pa.string()),
                "image_key": rows["image_key"],
                "meta_key": rows["meta_key"],
            }
        ).cast(EXPORT_SCHEMA)

    parts = []
    kept = joined.filter(joined["keep"])
    # A kept row keeps when and by which run it was made.
    parts.append(
        part(
            kept,
            kept["p_tier"],
            kept["p_bucket"],
            kept["p_shard"],
            kept["p_index_in_shard"],
            None,
            pc.coalesce(kept["p_exported_at"], stamp),
            kept["p_export_run_id"],
        )
    )
    if lineage is not None and lineage.num_rows:
        made = lineage.select(["sample_id", "tier", "bucket", "shard", "index_in_shard"]).join(
            joined.select(["sample_id", "phash", "image_key", "meta_key"]), keys="sample_id", join_type="inner"
        )
        parts.append(part(made, made["tier"], made["bucket"], made["shard"], made["index_in_shard"], None, None, None))
    dropped_mask = pc.is_valid(drop)
    dropped = joined.filter(dropped_mask)
    reasons = pc.filter(drop, dropped_mask)
    # A drop that repeats the last run's reason keeps when and by which run it was decided.
    same = _false(pc.equal(dropped["p_drop_reason"], reasons))
    nulls_i32, nulls_str, nulls_i64 = (
        pa.nulls(dropped.num_rows, pa.int32()),
        pa.nulls(dropped.num_rows, pa.string()),
        pa.nulls(dropped.num_rows, pa.int64()),
    )
    parts.append(
        part(
            dropped,
            nulls_i32,
            nulls_str,
            nulls_str,
            nulls_i64,
            reasons,
            pc.if_else(same, pc.coalesce(dropped["p_exported_at"], stamp), stamp),
            pc.if_else(same, dropped["p_export_run_id"], pa.scalar(run_id, pa.string())),
        )
    )
    return pa.concat_tables(parts).combine_chunks().sort_by("sample_id")


__all__ = ["META_COLUMNS", "PLACEMENT_SCHEMA", "Plan", "exports_table", "find_orphans", "plan", "scan_current", "with_columns"]
