"""The export stage: bucket, resize, encode and write a source's usable rows as MDS shards,
and record where every sample landed (or why it was dropped) in the source's exports table.

Incremental: each exported row records what its bytes were made from (``image_key``) and what
its other columns hold (``meta_key``). A re-run compares them with the source table and
- leaves unchanged rows where they are (no image work; a run where nothing changed writes
  nothing at all),
- appends new and changed rows as new shards of their buckets (``mds_writer``'s incremental
  mode); a row whose caption / label changed but whose image did not is written with the
  JPEG bytes of its old placement, never re-encoded,
- records the old placement of every removed or changed row in the source's superseded table,
  which ``skip_lists`` turns into ``superseded`` sidecars,
- rewrites a bucket of the source (its live samples copied from the old shards, again without
  image work) once superseded placements pass ``rewrite_share`` (10 %) of its samples.

Decoding and encoding run on Ray; every writer (the driver, or ``write_workers`` Ray tasks on
any node) writes its shards straight into the MDS root under the run's names, and the driver
publishes them at once (``export.commit``, the same on a folder and on ``s3://``), so a failed
or killed run leaves the previous export as it was and the next run cleans up after it. The MDS
commit comes first and the tables after it; a run killed in between leaves shards that no
table knows, and the next run supersedes them (``export_plan.find_orphans``) before it writes
anything. Planning is columnar (``export_plan``) and partitioned: the driver spills narrow Arrow
columns per row to local disk in sample-id partitions (``max_partition_rows``) and holds one at a
time, captions only chunk by chunk, never a Python object per row of the source.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import lance
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.counts import value_counter
from prx_data.core.lance_io import open_table, storage_options_of
from prx_data.core.locking import table_lock
from prx_data.core.paths import superseded_uri
from prx_data.core.ray_tasks import ensure_ray, task_options
from prx_data.core.reasons import reason_code
from prx_data.core.schema import EXPORT_SCHEMA, SUPERSEDED_SCHEMA
from prx_data.core.spill import PartitionFiles, ScanOrdered, SpilledPartitions, range_bounds
from prx_data.export.commit import abandon, begin, new_run_id, recover
from prx_data.export.mds_rows import LINEAGE_SCHEMA
from prx_data.export.mds_writer import MdsWriterConfig, commit_parts
from prx_data.export.reuse import ShardReader, shard_sizes, source_indexes
from prx_data.export.shard_writer import write_shards
from prx_data.export.skiplist import REWRITE_SHARE
from prx_data.export.tree import BucketRef, parse_bucket
from prx_data.imaging.buckets import BucketConfig, Drop
from prx_data.imaging.transform import Prepared, prepare
from prx_data.stages.column_stage import address_chunks, read_images, read_rows
from prx_data.stages.executors import Executor, make_processor, resolve_executor
from prx_data.stages.export_plan import MAX_PARTITION_ROWS, META_COLUMNS, exports_table, find_orphans, plan, scan_current
from prx_data.stages.versions import export_version

# A caption longer than this is a scraping accident (a page's whole text, a base64 blob), not a
# caption: its sample is dropped with ``caption_too_long``. T5/LLM text encoders read a few
# hundred tokens; 20,000 characters leaves room for any long-form caption a VLM writes.
MAX_CAPTION_CHARS = 20_000
# Drop reasons that come from a row's columns, not its image bytes: decided anew on every run
# (an edited caption can lift them), never carried over from the last placement.
METADATA_DROPS = frozenset({"no_caption", "caption_too_long"})
# Source rows per planning batch: the captions the driver holds at once (about 1 KB each).
PLAN_BATCH_ROWS = 8192
# Lineage rows per object a parallel writer yields (~150 bytes each as Arrow).
LINEAGE_YIELD_ROWS = 65_536

_PREPARED_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("jpeg", pa.large_binary()),
        pa.field("tier", pa.int32()),
        pa.field("height", pa.int32()),
        pa.field("width", pa.int32()),
        pa.field("original_width", pa.int32()),
        pa.field("original_height", pa.int32()),
        pa.field("drop_reason", pa.string()),
    ]
)


def prepare_rows(bucket_cfg_json: str, sample_ids: list[str], images: list[bytes | None], _rows: pa.Table) -> pa.Table:
    cfg = BucketConfig.model_validate_json(bucket_cfg_json)
    out: dict[str, list] = {name: [] for name in _PREPARED_SCHEMA.names}
    for sid, data in zip(sample_ids, images):
        result = prepare(data, cfg) if data is not None else Drop("invalid_image", "no image bytes")
        out["sample_id"].append(sid)
        values: tuple
        if isinstance(result, Prepared):
            values = (result.jpeg, result.tier, result.height, result.width, result.original_width, result.original_height, None)
        else:
            values = (None, None, None, None, None, None, f"{result.reason}: {result.detail}" if result.detail else result.reason)
        for name, value in zip(_PREPARED_SCHEMA.names[1:], values):
            out[name].append(value)
    return pa.table(out, schema=_PREPARED_SCHEMA)


@dataclass
class ExportStats:
    source: str
    exported: int = 0
    dropped: Counter = field(default_factory=Counter)
    per_bucket: dict[str, int] = field(default_factory=dict)
    bytes_written: int = 0
    removed_buckets: list[str] = field(default_factory=list)
    seconds: float = 0.0
    version: str = ""
    encoded: int = 0  # rows decoded, resized and encoded this run (the image work)
    reused: int = 0  # rows written with the bytes of their old placement (no image work)
    kept: int = 0  # rows left where they were
    superseded: int = 0  # old placements newly excluded ("superseded")
    superseded_total: int = 0  # placements the superseded table holds after the run
    rewritten_buckets: list[str] = field(default_factory=list)
    changed: bool = True  # False: nothing to do, nothing was written

    @property
    def images_per_s(self) -> float:
        return self.encoded / self.seconds if self.seconds else 0.0

    @property
    def summary(self) -> str:
        """The run's line for the log: how many of the source's usable rows the export holds,
        and why the others are not in it."""
        dropped = sum(self.dropped.values())
        work = f"{self.encoded} encoded, {self.reused} re-used, {self.kept} kept in place"
        if not dropped:
            return f"exported {self.exported}/{self.exported} rows ({work})"
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(self.dropped.items(), key=lambda rc: (-rc[1], rc[0])))
        return f"exported {self.exported} of {self.exported + dropped} rows ({dropped} dropped: {reasons}; {work})"


def _bucket_of(tier: int | str, bucket: str) -> BucketRef:
    height, width = parse_bucket(bucket)
    return BucketRef(int(tier), height, width)


def export_source(
    table_uri: str,
    source: str,
    *,
    mds_root: str,
    exports_uri: str,
    bucket_cfg: BucketConfig | None = None,
    writer_cfg: MdsWriterConfig | None = None,
    executor: Executor = "ray",
    chunk_rows: int = 32,
    require_caption: bool = True,
    storage_options: dict | None = None,
    progress=None,
    scratch_dir: str | None = None,
    rewrite_share: float = REWRITE_SHARE,
    write_workers: int = 1,
    run_id: str | None = None,
    max_caption_chars: int | None = MAX_CAPTION_CHARS,
    task_resources: dict[str, float] | None = None,
    local_max_rows: int | None = None,
    plan_batch_rows: int = PLAN_BATCH_ROWS,
    max_partition_rows: int = MAX_PARTITION_ROWS,
) -> ExportStats:
    """Bring the source's export up to date with its table, doing only the work that changed.

    Holds the source's table lock (``prx_data.core.locking``) for the whole run. ``write_workers``
    > 1 (with ``executor='ray'``, or ``'auto'`` past ``LOCAL_MAX_ROWS`` rows to encode) splits
    the rows to encode into that many Ray tasks, each of
    which encodes its rows and writes its own shards per bucket straight into ``mds_root`` (so
    they may run on any node that reaches the root, and need nothing the driver sees); the
    driver then publishes all of them in one commit. ``task_resources`` (e.g.
    ``{"cpu_pool": 0.01}``) is added to those tasks' Ray resource demands, to place them on
    labelled nodes. ``run_id`` goes to ``export_run_id`` on every row this run places or drops;
    kept rows keep the run that placed them. A caption longer than ``max_caption_chars`` (None: no
    cap) drops its sample as ``caption_too_long``. ``plan_batch_rows`` source rows are planned at
    a time: with captions, they are what the driver holds besides one planning partition.
    Planning spills the source's narrow per-row columns (and the previous exports and
    superseded tables) under ``scratch_dir`` in sample-id partitions of about
    ``max_partition_rows`` rows and holds one at a time (``core.spill``); the spill is
    removed when the run ends, failed or not.
    """
    if max_partition_rows < 1:
        raise ValueError(f"max_partition_rows must be at least 1, got {max_partition_rows}")
    if plan_batch_rows < 1:
        raise ValueError(f"plan_batch_rows must be at least 1, got {plan_batch_rows}")
    if max_caption_chars is not None and max_caption_chars < 1:
        raise ValueError(f"max_caption_chars must be at least 1 (or None for no cap), got {max_caption_chars}")
    with table_lock(table_uri, storage_options, purpose=f"export of {source}") as check:
        return _export(
            table_uri,
            source,
            mds_root=mds_root,
            exports_uri=exports_uri,
            bucket_cfg=bucket_cfg or BucketConfig(),
            writer_cfg=writer_cfg or MdsWriterConfig(),
            executor=executor,
            chunk_rows=chunk_rows,
            require_caption=require_caption,
            options=storage_options,
            progress=progress,
            scratch_dir=scratch_dir,
            rewrite_share=rewrite_share,
            check=check,
            write_workers=write_workers,
            run_id=run_id,
            max_caption_chars=max_caption_chars,
            task_resources=task_resources,
            local_max_rows=local_max_rows,
            plan_batch_rows=plan_batch_rows,
            max_partition_rows=max_partition_rows,
        )


def prepare_with_meta(bucket_cfg_json: str, sample_ids: list[str], images: list[bytes | None], rows: pa.Table) -> pa.Table:
    """``prepare_rows`` plus the sample's other columns (``rows``: read by the worker for its
    chunk), so the driver never holds captions beyond the chunks in flight."""
    prepared = prepare_rows(bucket_cfg_json, sample_ids, images, rows)
    for name in META_COLUMNS:
        prepared = prepared.append_column(
            name, rows.column(name) if name in rows.column_names else pa.nulls(prepared.num_rows, pa.string())
        )
    return prepared


def _sample(rec: dict) -> dict:
    return {
        "image": rec["jpeg"],
        "tier": rec["tier"],
        "height": rec["height"],
        "width": rec["width"],
        "original_width": rec["original_width"],
        "original_height": rec["original_height"],
        "caption": rec["caption"],
        "sample_id": rec["sample_id"],
        "label": rec["label"],
        "caption_model": rec["caption_model"],
    }


def _export(
    table_uri,
    source,
    *,
    mds_root,
    exports_uri,
    bucket_cfg,
    writer_cfg,
    executor,
    chunk_rows,
    require_caption,
    options,
    progress,
    scratch_dir,
    rewrite_share,
    check,
    write_workers,
    run_id=None,
    task_resources=None,
    local_max_rows=None,
    max_caption_chars=MAX_CAPTION_CHARS,
    plan_batch_rows=PLAN_BATCH_ROWS,
    max_partition_rows=MAX_PARTITION_ROWS,
) -> ExportStats:
    started = time.perf_counter()
    stats = ExportStats(source=source, version=export_version(bucket_cfg))
    # The writer's columns decide the shard layout: a change must not append to old shards.
    image_version = f"{stats.version}|{json.dumps(writer_cfg.columns(), sort_keys=True)}"
    ds = lance.dataset(table_uri, storage_options=options)
    meta_columns = [c for c in META_COLUMNS if c in ds.schema.names]

    # What is published now, and what the tables say about it. Under the table lock no other
    # export of the source is live: finish or clean up what a killed one left first, so a
    # rolled-forward commit's shards are seen (and superseded as orphans) by this run.
    recover(mds_root, source, options)
    indexes = source_indexes(mds_root, source, options)
    sizes = shard_sizes(indexes, source)
    prev_ds = open_table(exports_uri, options)
    sup_uri = superseded_uri(exports_uri)
    sup_ds = open_table(sup_uri, options)
    rows = max([ds.count_rows(), *(t.count_rows() for t in (prev_ds, sup_ds) if t is not None)])
    with tempfile.TemporaryDirectory(prefix=f"prx-export-plan-{source}-", dir=scratch_dir) as spill:
        planned = plan(
            scan_current(
                ds,
                bucket_cfg=bucket_cfg,
                image_version=image_version,
                require_caption=require_caption,
                max_caption_chars=max_caption_chars,
                batch_rows=plan_batch_rows,
            ),
            prev_ds.to_batches(batch_size=plan_batch_rows) if prev_ds is not None else None,
            sup_ds.to_batches(batch_size=plan_batch_rows) if sup_ds is not None else None,
            sizes,
            rows=rows,
            folder=spill,
            max_partition_rows=max_partition_rows,
            prev_schema=prev_ds.schema if prev_ds is not None else None,
            sup_schema=sup_ds.schema if sup_ds is not None else None,
            rewrite_share=rewrite_share,
            metadata_drops=METADATA_DROPS,
            orphans=lambda covered, known_in: find_orphans(mds_root, source, indexes, sizes, covered, known_in, options, scratch_dir),
        )
        rewrite = planned.rewrite
        encode, reuse = planned.encode, planned.reuse

        now = datetime.now(UTC)
        stats.kept, stats.reused, stats.encoded = planned.kept, reuse.num_rows, encode.num_rows
        stats.rewritten_buckets = sorted(ref.rel for ref in rewrite)
        stats.superseded = planned.new_sup
        stats.superseded_total = planned.sup_after.rows
        late_drops: dict[str, str] = {}
        # Where every written sample landed, spilled as the shards close (in sample-id
        # partitions, like the plan), never held for the whole run.
        lineage = SpilledPartitions(os.path.join(spill, "lineage"), LINEAGE_SCHEMA, range_bounds(planned.partitions))
        export = None
        if encode.num_rows or reuse.num_rows or rewrite:
            check()  # a lost lease must not commit
            where = resolve_executor(executor, encode.num_rows, task_resources, local_max_rows)
            export = _write(
                ds,
                source,
                mds_root=mds_root,
                options=options,
                writer_cfg=writer_cfg,
                bucket_cfg=bucket_cfg,
                executor=where,
                chunk_rows=chunk_rows,
                progress=progress,
                scratch_dir=scratch_dir,
                indexes=indexes,
                reuse=reuse,
                encode=encode,
                meta_columns=meta_columns,
                rewrite=rewrite,
                late_drops=late_drops,
                lineage=lineage,
                write_workers=write_workers if where == "ray" else 1,
                task_resources=task_resources,
            )
        del encode, reuse
        lineage.close()
        same = _new_exports(planned, spill, source, stats, now, run_id, lineage, late_drops)
        changed = export is not None or bool(planned.new_sup) or not same
        if changed:
            # Streamed partition by partition: in sample-id order, as one sorted table would be.
            lance.write_dataset(
                pa.RecordBatchReader.from_batches(EXPORT_SCHEMA, new_exports_batches(spill, planned)),
                exports_uri,
                mode="overwrite",
                storage_options=options,
            )
        if planned.new_sup or planned.sup_after.rows != planned.stored_sup:
            stamp = pa.scalar(now, pa.timestamp("us", tz="UTC"))

            def superseded():
                for after in planned.sup_after.batches():
                    yield pa.record_batch(
                        {
                            "sample_id": after["sample_id"],
                            "source": pc.fill_null(pa.nulls(after.num_rows, pa.string()), source),
                            "tier": after["tier"],
                            "bucket": after["bucket"],
                            "shard": after["shard"],
                            "index_in_shard": after["index_in_shard"],
                            "superseded_at": pc.coalesce(after["superseded_at"], stamp),
                        }
                    ).cast(SUPERSEDED_SCHEMA)

            lance.write_dataset(
                pa.RecordBatchReader.from_batches(SUPERSEDED_SCHEMA, superseded()), sup_uri, mode="overwrite", storage_options=options
            )
    stats.changed = changed
    if export is not None:
        stats.bytes_written = export.bytes_written
        stats.removed_buckets = [r.rel for r in export.removed_buckets]
    stats.seconds = time.perf_counter() - started
    return stats


def _new_exports(planned, spill: str, source: str, stats: ExportStats, now, run_id, lineage: SpilledPartitions, late_drops) -> bool:
    """Build the new exports table partition by partition into ``spill``/exports and count its
    placements and drops into ``stats``. True when it equals the previous table in all but
    when and by which run each row was made."""
    exports = SpilledPartitions(os.path.join(spill, "exports"), EXPORT_SCHEMA, range_bounds(planned.partitions))
    same = planned.previous is not None and planned.previous.schema.names == EXPORT_SCHEMA.names
    exported = 0
    dropped: Counter[str] = Counter()
    per_bucket: Counter[str] = Counter()
    for part in range(planned.partitions):
        table = exports_table(source, stats.version, now, run_id, planned.planned.read(part), lineage.read(part), late_drops)
        if same and not _same_exports(planned.previous.read(part), table):
            same = False
        exports.put(part, table)
        placed_now = table.filter(pc.is_valid(table["shard"]))
        exported += placed_now.num_rows
        for reason, count in value_counter(table["drop_reason"]).items():
            dropped[reason_code(reason)] += count
        grouped = placed_now.group_by(["tier", "bucket"]).aggregate([("sample_id", "count")])
        for t, b, c in zip(grouped["tier"].to_pylist(), grouped["bucket"].to_pylist(), grouped["sample_id_count"].to_pylist()):
            per_bucket[f"{t}/{b}"] += c
    exports.close()
    stats.exported, stats.dropped, stats.per_bucket = exported, dropped, dict(sorted(per_bucket.items()))
    return same


def new_exports_batches(spill: str, planned) -> Iterator[pa.RecordBatch]:
    yield from SpilledPartitions(os.path.join(spill, "exports"), EXPORT_SCHEMA, range_bounds(planned.partitions)).batches()


def _check_distinct(lineage: SpilledPartitions, source: str) -> None:
    """Before the commit: no sample was written twice. A sample id lives in one partition, so
    distinct ids per partition add up to distinct ids overall."""
    lineage.close()
    for part in range(lineage.partitions):
        ids = lineage.read(part)["sample_id"]
        if pc.count_distinct(ids).as_py() != len(ids):
            raise ValueError(f"source {source!r}: duplicate sample_id in the partition")


def _write(
    ds,
    source,
    *,
    mds_root,
    options,
    writer_cfg,
    bucket_cfg,
    executor,
    chunk_rows,
    progress,
    scratch_dir,
    indexes,
    reuse: pa.Table,
    encode: pa.Table,
    meta_columns: list[str],
    rewrite,
    late_drops,
    lineage: SpilledPartitions,
    write_workers,
    task_resources,
):
    processor = make_processor(
        functools.partial(prepare_with_meta, bucket_cfg.model_dump_json()),
        columns=meta_columns,
        executor=executor,
        chunk_rows=chunk_rows,
        task_resources=task_resources,
    )

    def reused(scratch: str) -> Iterator[dict]:
        """The old bytes of every re-used row, shard by shard; captions read per shard."""
        if not reuse.num_rows:
            return
        reader = ShardReader(mds_root, indexes, source, scratch, options)
        ordered = reuse.sort_by([("shard", "ascending"), ("index_in_shard", "ascending")])
        shard_col = ordered["shard"].combine_chunks()
        counts = pc.value_counts(shard_col)
        start = 0
        for shard, count in sorted(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist())):
            rows = ordered.slice(start, count)
            start += count
            meta = read_rows(ds, rows["_rowaddr"].to_pylist(), meta_columns)
            ids = rows["sample_id"].to_pylist()
            at = {int(index): k for k, index in enumerate(rows["index_in_shard"].to_pylist())}
            for _, index, old in reader.read((shard, index) for index in at):
                k = at[index]
                if old["sample_id"] != ids[k]:
                    raise RuntimeError(f"{shard}[{index}] holds {old['sample_id']}, the exports table says {ids[k]}")
                ref = _bucket_of(*shard.split("/")[:2])
                yield {
                    "image": old["image"],
                    "tier": ref.tier,
                    "height": ref.height,
                    "width": ref.width,
                    "original_width": old["original_width"],
                    "original_height": old["original_height"],
                    "caption": meta.column("caption")[k].as_py() if "caption" in meta_columns else None,
                    "sample_id": ids[k],
                    "label": meta.column("label")[k].as_py() if "label" in meta_columns else None,
                    "caption_model": meta.column("caption_model")[k].as_py() if "caption_model" in meta_columns else None,
                }

    def samples(scratch: str) -> Iterator[dict]:
        yield from reused(scratch)
        done = 0
        for result in processor(ds, encode) if encode.num_rows else ():
            for rec in result.to_pylist():
                if rec["drop_reason"]:
                    late_drops[rec["sample_id"]] = rec["drop_reason"]
                    continue
                yield _sample(rec)
            done += result.num_rows
            if progress:
                progress(done, encode.num_rows)

    mds_run = new_run_id()
    started = time.perf_counter()
    begin(mds_root, source, mds_run, options)
    try:
        with tempfile.TemporaryDirectory(prefix=f"prx-reuse-{source}-", dir=scratch_dir) as scratch:
            if write_workers > 1 and encode.num_rows > 1:
                parts = _write_parallel(
                    ds,
                    source,
                    encode,
                    meta_columns,
                    reused(scratch) if reuse.num_rows else None,
                    mds_root=mds_root,
                    options=options,
                    writer_cfg=writer_cfg,
                    bucket_cfg=bucket_cfg,
                    chunk_rows=chunk_rows,
                    scratch_dir=scratch_dir,
                    late_drops=late_drops,
                    lineage=lineage,
                    workers=min(write_workers, encode.num_rows),
                    run_id=mds_run,
                    task_resources=task_resources,
                )
            else:
                parts = [
                    write_shards(
                        samples(scratch),
                        mds_root=mds_root,
                        source=source,
                        run_id=mds_run,
                        tag="p0",
                        config=writer_cfg,
                        storage_options=options,
                        scratch_dir=scratch_dir,
                        lineage_sink=lineage.add,
                    )
                ]
        _check_distinct(lineage, source)
        return commit_parts(
            parts,
            mds_root=mds_root,
            source=source,
            run_id=mds_run,
            storage_options=options,
            rewrite=rewrite,
            allow_empty=True,
            started=started,
        )
    except BaseException:
        abandon(mds_root, source, mds_run, options)
        raise


def _write_part(
    uri,
    version,
    lance_options,
    bucket_cfg_json,
    writer_cfg_json,
    mds_root,
    mds_options,
    source,
    run_id,
    tag,
    pieces: list,
    meta_columns: list[str],
    chunk_rows: int,
):
    """One parallel writer (a Ray generator task, any node): encode its rows (``pieces``:
    object refs of tables of sample_id, _rowaddr, fetched one at a time) and write its shards
    straight into the MDS root under the run's names. Yields its lineage in batches of
    ``LINEAGE_YIELD_ROWS`` (spilled to this node's disk as the shards close, so the task never
    holds it whole), then its unpublished shards and late drops."""
    import ray

    ds = lance.dataset(uri, version=version, storage_options=lance_options)
    late: dict[str, str] = {}

    def chunks() -> Iterator[pa.Table]:
        for piece in pieces:
            yield from address_chunks(ray.get(piece), chunk_rows)

    def samples() -> Iterator[dict]:
        for chunk in chunks():
            addresses = chunk.column("_rowaddr").to_pylist()
            images = read_images(ds, addresses)
            rows = read_rows(ds, addresses, meta_columns)
            for rec in prepare_with_meta(bucket_cfg_json, chunk.column("sample_id").to_pylist(), images, rows).to_pylist():
                if rec["drop_reason"]:
                    late[rec["sample_id"]] = rec["drop_reason"]
                    continue
                yield _sample(rec)

    config = MdsWriterConfig.model_validate_json(writer_cfg_json)
    with tempfile.TemporaryDirectory(prefix=f"prx-lineage-{source}-") as local:
        spilled = PartitionFiles(local, LINEAGE_SCHEMA)
        written = write_shards(
            samples(),
            mds_root=mds_root,
            source=source,
            run_id=run_id,
            tag=tag,
            config=config,
            storage_options=mds_options,
            lineage_sink=lambda table: spilled.put(0, table),
        )
        spilled.close()
        batches: list[pa.RecordBatch] = []
        rows = 0
        for batch in spilled.read_batches(0):
            batches.append(batch)
            rows += batch.num_rows
            if rows >= LINEAGE_YIELD_ROWS:
                yield pa.Table.from_batches(batches, LINEAGE_SCHEMA)
                batches, rows = [], 0
        if batches:
            yield pa.Table.from_batches(batches, LINEAGE_SCHEMA)
    yield written, late


def _write_parallel(
    ds,
    source,
    todo,
    meta_columns,
    reused,
    *,
    mds_root,
    options,
    writer_cfg,
    bucket_cfg,
    chunk_rows,
    scratch_dir,
    late_drops,
    lineage: SpilledPartitions,
    workers,
    run_id,
    task_resources,
):
    """``workers`` Ray tasks encode and write; the driver writes the re-used bytes (``reused``)
    meanwhile. Returns every writer's unpublished shards, their lineage spilled into
    ``lineage`` as the tasks yield it; the caller publishes them."""
    ray = ensure_ray()
    task = ray.remote(**task_options(num_cpus=1, max_retries=0, resources=task_resources))(_write_part)
    refs = []
    for k, pieces in enumerate(_scan_runs(ray, todo, workers), start=1):
        refs.append(
            task.remote(
                ds.uri,
                ds.version,
                storage_options_of(ds),
                bucket_cfg.model_dump_json(),
                writer_cfg.model_dump_json(),
                mds_root,
                options,
                source,
                run_id,
                f"p{k}",
                pieces,
                meta_columns,
                chunk_rows,
            )
        )
    try:
        parts = []
        if reused is not None:
            parts.append(
                write_shards(
                    reused,
                    mds_root=mds_root,
                    source=source,
                    run_id=run_id,
                    tag="p0",
                    config=writer_cfg,
                    storage_options=options,
                    scratch_dir=scratch_dir,
                    lineage_sink=lineage.add,
                )
            )
        # Each task's yields in writer order, one object at a time: lineage batches go to disk
        # as they arrive, and what a task yields before the driver gets to it waits in Ray's
        # object store (spilled to disk past its memory).
        for gen in refs:
            for ref in gen:
                try:
                    item = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    raise (exc.cause or exc) from None
                if isinstance(item, pa.Table):
                    lineage.add(item)
                else:
                    written, late = item
                    parts.append(written)
                    late_drops.update(late)
    except BaseException:
        # Nothing may keep writing once the run is abandoned: kill the tasks and wait until
        # they are gone (a cancel only asks), so the clean-up sees everything they wrote.
        for gen in refs:
            ray.cancel(gen, force=True)
        _drain(ray, refs, deadline=time.monotonic() + 60)
        raise
    return parts


def _drain(ray, generators: list, deadline: float) -> None:
    """Read what cancelled generator tasks still yield until each ends (an error ends a
    killed one): a generator is "ready" as soon as one yield waits, even while its task runs."""
    for gen in generators:
        while (left := deadline - time.monotonic()) > 0:
            ready, _ = ray.wait([gen], timeout=left)
            if not ready:
                break
            try:
                ref = next(gen)
            except StopIteration:
                break
            try:
                ray.get(ref)
            except Exception:  # noqa: BLE001 - the task's end (killed, failed) is what we wait for
                pass


def _scan_runs(ray, todo: ScanOrdered, workers: int) -> list[list]:
    """``workers`` contiguous runs of the rows to encode, in scan order, their sizes differing by
    at most one row, each a list of object refs of its pieces: the driver holds one spilled
    range at a time, and Ray's object store spills to disk past its memory."""
    n = todo.num_rows
    sizes = [n // workers + (1 if k < n % workers else 0) for k in range(workers)]
    runs: list[list] = [[] for _ in sizes]
    k, room = 0, sizes[0]
    for table in todo.tables():
        start = 0
        while start < table.num_rows:
            while not room:
                k += 1
                room = sizes[k]
            take = min(room, table.num_rows - start)
            runs[k].append(ray.put(table.slice(start, take)))
            room -= take
            start += take
    return runs


def _same_exports(prev: pa.Table, new: pa.Table) -> bool:
    columns = [c for c in new.schema.names if c not in ("exported_at", "export_run_id")]
    return prev.select(columns).sort_by("sample_id").equals(new.select(columns).sort_by("sample_id"))


__all__ = ["MAX_CAPTION_CHARS", "ExportStats", "export_source", "export_version", "prepare_rows"]
