"""Export planning in columns: which rows of a source stay, are written with their old bytes,
are encoded, or are dropped, and which old placements that supersedes.

The driver's memory is bounded by a scan batch, not by the source: the source is read batch by
batch (captions included, since ``meta_key`` hashes them) and only narrow per-row columns
(sample id, row address, phash, keys, target bucket, drop reason) are kept, as Arrow arrays.
Captions of rows to write are read again, chunk by chunk, by whoever writes them. The previous
exports and superseded tables (no captions) are joined in Arrow; no per-row Python object lives
longer than one batch.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from datetime import datetime

import lance
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.schema import EXPORT_SCHEMA
from prx_data.export.reuse import ShardReader
from prx_data.export.tree import BucketRef, parse_bucket
from prx_data.imaging.buckets import BucketConfig, Drop, assign

# Columns the written samples carry besides the image (read per chunk, never source-wide).
META_COLUMNS = ("caption", "label", "caption_model")

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


def scan_current(
    ds: lance.LanceDataset,
    *,
    bucket_cfg: BucketConfig,
    image_version: str,
    require_caption: bool,
    max_caption_chars: int | None,
    batch_rows: int,
) -> pa.Table:
    """The source's ok rows as CURRENT_SCHEMA, in scan order; Python values live one batch."""
    names = ds.schema.names
    wanted = ["sample_id", "width", "height"] + [c for c in ("image_sha256", "phash", *META_COLUMNS) if c in names]
    batches = []
    offset = 0
    for batch in ds.to_batches(columns=wanted, filter="status = 'ok'", with_row_address=True, batch_size=batch_rows):
        n = batch.num_rows
        if not n:
            continue

        sha, widths, heights = _values(batch, "image_sha256"), _values(batch, "width"), _values(batch, "height")
        caption, label, model = _values(batch, "caption"), _values(batch, "label"), _values(batch, "caption_model")
        image_key = [row_key(sha[i], widths[i], heights[i], image_version) if sha[i] else None for i in range(n)]
        meta_key = [row_key(caption[i], label[i], model[i]) for i in range(n)]
        target: list[str | None] = [None] * n
        drop: list[str | None] = [None] * n
        for i in range(n):
            if require_caption and not caption[i]:
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
        batches.append(
            pa.record_batch(
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
        )
        offset += n
    return pa.Table.from_batches(batches, schema=CURRENT_SCHEMA).combine_chunks()


def with_columns(table: pa.Table | None, schema: pa.Schema) -> pa.Table:
    """``table`` with every column of ``schema`` (missing ones null), cast to it; an empty
    table when there is none."""
    if table is None:
        return schema.empty_table()
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.table(columns, schema=schema)


_PREV_SCHEMA = pa.schema([EXPORT_SCHEMA.field("sample_id"), *(EXPORT_SCHEMA.field(c) for c in PREV_COLUMNS)])


def _false(mask) -> pa.Array:
    return pc.fill_null(mask, False)


def _metadata_drop(reasons, metadata_drops: frozenset[str]) -> pa.Array:
    code = pc.replace_substring_regex(reasons, "(?s):.*", "")
    return _false(pc.is_in(code, value_set=pa.array(sorted(metadata_drops), pa.string())))


@dataclass
class Plan:
    joined: pa.Table  # current rows (CURRENT_SCHEMA) + the previous placement as p_* columns
    keep: pa.Array  # bool per joined row: left where it is
    reuse: pa.Table  # sample_id, _rowaddr, shard, index_in_shard: written with the old bytes
    encode: pa.Table  # sample_id, _rowaddr: decoded, resized, encoded
    drop: pa.Array  # per joined row: the drop reason (metadata, bucket, or carried over)
    new_sup: pa.Table  # PLACEMENT_SCHEMA: old placements newly superseded
    sup_after: pa.Table  # PLACEMENT_SCHEMA: what the superseded table holds after the run
    rewrite: set[BucketRef]


def plan(
    current: pa.Table,
    prev: pa.Table | None,
    stored_sup: pa.Table | None,
    sizes: dict[str, int],
    *,
    rewrite_share: float,
    metadata_drops: frozenset[str],
    orphans,
) -> Plan:
    """Classify every current row against its previous placement (an Arrow join on sample_id).

    ``orphans(known)`` returns PLACEMENT_SCHEMA rows for published placements that ``known``
    (shard, index_in_shard) does not cover."""
    shards = pa.array(sorted(sizes), pa.string())
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

    def placements(rows: pa.Table) -> pa.Table:
        return pa.table(
            [
                rows["sample_id"],
                rows["p_tier"],
                rows["p_bucket"],
                rows["p_shard"],
                rows["p_index_in_shard"],
                pa.nulls(rows.num_rows, pa.timestamp("us", tz="UTC")),
            ],
            schema=PLACEMENT_SCHEMA,
        )

    # Old placements of changed rows (re-used or encoded anew), in row order; then removed rows'.
    changed = placements(joined.filter(pc.and_(pc.and_(live, placed), pc.invert(keep))))
    live_ids = pa.table({"sample_id": joined.filter(live)["sample_id"]})
    gone = previous.join(live_ids, keys="sample_id", join_type="left anti")
    gone = gone.filter(_false(pc.is_in(gone["shard"], value_set=shards)))
    removed = pa.table(
        [
            gone["sample_id"],
            gone["tier"],
            gone["bucket"],
            gone["shard"],
            gone["index_in_shard"],
            pa.nulls(gone.num_rows, PLACEMENT_SCHEMA.field("superseded_at").type),
        ],
        schema=PLACEMENT_SCHEMA,
    )
    sup_prev = with_columns(stored_sup, PLACEMENT_SCHEMA)
    prev_sup = sup_prev.filter(_false(pc.is_in(sup_prev["shard"], value_set=shards)))
    placed_prev = previous.filter(_false(pc.is_in(previous["shard"], value_set=shards)))
    known = pa.concat_tables([placed_prev.select(["shard", "index_in_shard"]), prev_sup.select(["shard", "index_in_shard"])])
    new_sup = pa.concat_tables([changed, removed, orphans(known)]).combine_chunks()

    # Maintenance: a bucket whose superseded share passes the threshold is rewritten.
    total: dict[str, int] = {}
    for shard, count in sizes.items():
        total[shard_rel(shard)] = total.get(shard_rel(shard), 0) + count
    sup_all = pa.concat_tables([prev_sup, new_sup]).combine_chunks()
    superseded_in = _counts_by_rel(sup_all["shard"])
    reuse_rows = joined.filter(reuse)
    arriving = _counts(joined.filter(encode)["target"])
    for rel, count in _counts_by_rel(reuse_rows["p_shard"]).items():
        arriving[rel] = arriving.get(rel, 0) + count
    rewrite = {
        bucket_ref(*rel.split("/"))
        for rel, count in superseded_in.items()
        if total.get(rel) and count / (total[rel] + arriving.get(rel, 0)) > rewrite_share
    }
    rewrite_rels = {ref.rel for ref in rewrite}
    rewritten_shards = pa.array([s for s in sorted(sizes) if shard_rel(s) in rewrite_rels], pa.string())
    if rewrite:
        moved = pc.and_(keep, _false(pc.is_in(joined["p_shard"], value_set=rewritten_shards)))
        keep = pc.and_(keep, pc.invert(moved))
        reuse = pc.or_(reuse, moved)
    sup_after = sup_all.filter(pc.invert(_false(pc.is_in(sup_all["shard"], value_set=rewritten_shards))))

    reused = joined.filter(reuse)
    return Plan(
        joined=joined,
        keep=keep,
        reuse=pa.table(
            {
                "sample_id": reused["sample_id"],
                "_rowaddr": reused["_rowaddr"],
                "shard": reused["p_shard"],
                "index_in_shard": reused["p_index_in_shard"],
            }
        ),
        encode=joined.filter(encode).select(["sample_id", "_rowaddr"]),
        drop=drop,
        new_sup=new_sup,
        sup_after=sup_after,
        rewrite=rewrite,
    )


def _counts(values) -> dict[str, int]:
    counted = pc.value_counts(pc.drop_null(values))
    return {v.as_py(): c.as_py() for v, c in zip(counted.field("values"), counted.field("counts"))}


def _counts_by_rel(shards) -> dict[str, int]:
    by_rel: dict[str, int] = {}
    for shard, count in _counts(shards).items():
        by_rel[shard_rel(shard)] = by_rel.get(shard_rel(shard), 0) + count
    return by_rel


def find_orphans(mds_root, source, indexes, sizes, known: pa.Table, options, scratch_dir) -> pa.Table:
    """Placements in published shards that no table knows: a run killed between its MDS commit
    and its table writes. Their samples are written again by this run, so they are superseded.
    Only shards with fewer known placements than samples are looked at index by index."""
    sizes_table = pa.table({"shard": pa.array(list(sizes), pa.string()), "size": pa.array(list(sizes.values()), pa.int64())})
    known = known.join(sizes_table, keys="shard", join_type="inner")
    in_range = pc.and_(pc.greater_equal(known["index_in_shard"], 0), pc.less(known["index_in_shard"], known["size"]))
    known = known.filter(in_range)
    grouped = known.group_by("shard").aggregate([("index_in_shard", "count_distinct")])
    covered = dict(zip(grouped["shard"].to_pylist(), grouped["index_in_shard_count_distinct"].to_pylist()))
    unknown: list[tuple[str, int]] = []
    for shard, count in sizes.items():
        if covered.get(shard, 0) >= count:
            continue
        seen = set(known.filter(pc.equal(known["shard"], shard))["index_in_shard"].to_pylist()) if shard in covered else set()
        unknown.extend((shard, i) for i in range(count) if i not in seen)
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
    source: str, version: str, now: datetime, run_id: str | None, planned: Plan, lineage: pa.Table | None, late_drops: dict[str, str]
) -> pa.Table:
    """The source's new exports table (EXPORT_SCHEMA, sorted by sample_id), built in columns."""
    joined = planned.joined
    stamp = pa.scalar(now, pa.timestamp("us", tz="UTC"))
    drop = planned.drop
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
    kept = joined.filter(planned.keep)
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
