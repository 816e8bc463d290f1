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
table knows, and the next run supersedes them (``_orphans``) before it writes anything.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TypeGuard

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.lance_io import open_table, storage_options_of
from prx_data.core.locking import table_lock
from prx_data.core.paths import superseded_uri
from prx_data.core.ray_tasks import task_options
from prx_data.core.reasons import reason_code
from prx_data.core.schema import EXPORT_SCHEMA, SUPERSEDED_SCHEMA
from prx_data.export.commit import abandon, begin, new_run_id, recover
from prx_data.export.mds_writer import MdsWriterConfig, commit_parts
from prx_data.export.reuse import ShardReader, shard_sizes, source_indexes
from prx_data.export.shard_writer import write_shards
from prx_data.export.skiplist import REWRITE_SHARE
from prx_data.export.tree import BucketRef, parse_bucket
from prx_data.imaging.buckets import BUCKETING_VERSION, BucketConfig, Drop, assign
from prx_data.imaging.transform import JPEG_QUALITY, Prepared, prepare
from prx_data.stages.column_stage import address_chunks, read_images
from prx_data.stages.executors import make_processor

# Bump when the resize/encode path changes in a way that changes exported bytes.
TRANSFORM_VERSION = "lanczos-cover-crop-v1"

# A caption longer than this is a scraping accident (a page's whole text, a base64 blob), not a
# caption: its sample is dropped with ``caption_too_long``. T5/LLM text encoders read a few
# hundred tokens; 20,000 characters leaves room for any long-form caption a VLM writes.
MAX_CAPTION_CHARS = 20_000
# Drop reasons that come from a row's columns, not its image bytes: decided anew on every run
# (an edited caption can lift them), never carried over from the last placement.
METADATA_DROPS = frozenset({"no_caption", "caption_too_long"})

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


def export_version(bucket_cfg: BucketConfig) -> str:
    """Names everything that decides the exported bytes; a change marks exports stale."""
    digest = hashlib.sha256(bucket_cfg.model_dump_json().encode()).hexdigest()[:10]
    return f"{TRANSFORM_VERSION}-q{JPEG_QUALITY}-buckets-{BUCKETING_VERSION}-{digest}"


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


def _key(*parts) -> str:
    return hashlib.blake2b(json.dumps(parts, default=str).encode(), digest_size=16).hexdigest()


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
    executor: Literal["ray", "local"] = "ray",
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
) -> ExportStats:
    """Bring the source's export up to date with its table, doing only the work that changed.

    Holds the source's table lock (``prx_data.core.locking``) for the whole run. ``write_workers``
    > 1 (with ``executor='ray'``) splits the rows to encode into that many Ray tasks, each of
    which encodes its rows and writes its own shards per bucket straight into ``mds_root`` (so
    they may run on any node that reaches the root, and need nothing the driver sees); the
    driver then publishes all of them in one commit. ``task_resources`` (e.g.
    ``{"cpu_pool": 0.01}``) is added to those tasks' Ray resource demands, to place them on
    labelled nodes. ``run_id`` goes to ``export_run_id`` on every row this run places or drops;
    kept rows keep the run that placed them. A caption longer than ``max_caption_chars`` (None: no
    cap) drops its sample as ``caption_too_long``.
    """
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
        )


def _column(table: pa.Table, name: str) -> list:
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


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
    max_caption_chars=MAX_CAPTION_CHARS,
) -> ExportStats:
    started = time.perf_counter()
    stats = ExportStats(source=source, version=export_version(bucket_cfg))
    # The writer's columns decide the shard layout: a change must not append to old shards.
    image_version = f"{stats.version}|{json.dumps(writer_cfg.columns(), sort_keys=True)}"
    ds = lance.dataset(table_uri, storage_options=options)
    names = ds.schema.names
    wanted = ["sample_id", "width", "height"] + [c for c in ("image_sha256", "caption", "phash", "label", "caption_model") if c in names]
    rows = ds.to_table(columns=wanted, filter="status = 'ok'", with_row_address=True)
    n = rows.num_rows
    ids = rows.column("sample_id").to_pylist()
    caption, label, model = _column(rows, "caption"), _column(rows, "label"), _column(rows, "caption_model")
    sha = _column(rows, "image_sha256")
    widths, heights = rows.column("width").to_pylist(), rows.column("height").to_pylist()
    drop: list[str | None] = [None] * n
    image_key = [_key(sha[i], widths[i], heights[i], image_version) if sha[i] else None for i in range(n)]
    meta_key = [_key(caption[i], label[i], model[i]) for i in range(n)]
    target: list[BucketRef | None] = [None] * n
    for i in range(n):
        if require_caption and not caption[i]:
            drop[i] = "no_caption"
            continue
        if max_caption_chars is not None and caption[i] and len(caption[i]) > max_caption_chars:
            drop[i] = f"caption_too_long: {len(caption[i])} characters, the limit is {max_caption_chars}"
            continue
        assigned = assign(widths[i], heights[i], bucket_cfg)
        if isinstance(assigned, Drop):
            drop[i] = assigned.reason
        else:
            target[i] = BucketRef(assigned.tier, assigned.height, assigned.width)

    # What is published now, and what the tables say about it. Under the table lock no other
    # export of the source is live: finish or clean up what a killed one left first, so a
    # rolled-forward commit's shards are seen (and superseded as orphans) by this run.
    recover(mds_root, source, options)
    indexes = source_indexes(mds_root, source, options)
    sizes = shard_sizes(indexes, source)
    prev_ds = open_table(exports_uri, options)
    prev_table = prev_ds.to_table() if prev_ds is not None else None
    prev = {r["sample_id"]: r for r in prev_table.to_pylist()} if prev_table is not None else {}
    sup_uri = superseded_uri(exports_uri)
    sup_ds = open_table(sup_uri, options)
    stored_sup = sup_ds.to_table().to_pylist() if sup_ds is not None else []
    prev_sup = [r for r in stored_sup if r["shard"] in sizes]

    def placed(record: dict | None) -> TypeGuard[dict]:
        return bool(record and record.get("shard") and record["shard"] in sizes)

    keep: list[int] = []
    reuse: list[tuple[int, dict]] = []  # (row, old placement) written with the old bytes
    encode: list[int] = []
    new_sup: list[dict] = []
    current = set()
    for i in range(n):
        if drop[i] is not None:
            continue
        current.add(ids[i])
        p = prev.get(ids[i])
        same_image = bool(p and image_key[i] and p.get("image_key") == image_key[i])
        if placed(p) and same_image:
            if p.get("meta_key") == meta_key[i]:
                keep.append(i)
            else:
                reuse.append((i, p))
                new_sup.append(p)
        elif p and not p.get("shard") and same_image and p.get("drop_reason") and reason_code(p["drop_reason"]) not in METADATA_DROPS:
            drop[i] = p["drop_reason"]  # dropped when its bytes were decoded: still the same bytes
        else:
            encode.append(i)
            if placed(p):
                new_sup.append(p)
    new_sup.extend(p for sid, p in prev.items() if sid not in current and placed(p))
    new_sup.extend(_orphans(mds_root, source, indexes, sizes, prev, prev_sup, options, scratch_dir))

    # Maintenance: a bucket whose superseded share passes the threshold is rewritten.
    total: Counter[str] = Counter()
    for shard, count in sizes.items():
        total[shard.rsplit("/", 2)[0]] += count
    superseded_in = Counter(r["shard"].rsplit("/", 2)[0] for r in (*prev_sup, *new_sup))
    # Rows to encode all have a bucket (a row without one was dropped above).
    arriving = Counter(ref.rel for ref in (target[i] for i in encode) if ref is not None) + Counter(
        p["shard"].rsplit("/", 2)[0] for _, p in reuse
    )
    rewrite = {
        _bucket_of(*rel.split("/"))
        for rel, count in superseded_in.items()
        if total[rel] and count / (total[rel] + arriving[rel]) > rewrite_share
    }
    rewrite_rels = {ref.rel for ref in rewrite}
    if rewrite:
        moved = [i for i in keep if prev[ids[i]]["shard"].rsplit("/", 2)[0] in rewrite_rels]
        keep = [i for i in keep if prev[ids[i]]["shard"].rsplit("/", 2)[0] not in rewrite_rels]
        reuse.extend((i, prev[ids[i]]) for i in moved)
    sup_after = [r for r in (*prev_sup, *new_sup) if r["shard"].rsplit("/", 2)[0] not in rewrite_rels]

    now = datetime.now(UTC)
    stats.kept, stats.reused, stats.encoded = len(keep), len(reuse), len(encode)
    stats.rewritten_buckets = sorted(rewrite_rels)
    stats.superseded = len(new_sup)
    stats.superseded_total = len(sup_after)
    late_drops: dict[str, str] = {}
    export = None
    if encode or reuse or rewrite:
        check()  # a lost lease must not commit
        export = _write(
            ds,
            rows,
            source,
            mds_root=mds_root,
            options=options,
            writer_cfg=writer_cfg,
            bucket_cfg=bucket_cfg,
            executor=executor,
            chunk_rows=chunk_rows,
            progress=progress,
            scratch_dir=scratch_dir,
            indexes=indexes,
            reuse=reuse,
            encode=encode,
            caption=caption,
            label=label,
            model=model,
            rewrite=rewrite,
            late_drops=late_drops,
            write_workers=write_workers if executor == "ray" else 1,
            task_resources=task_resources,
        )
    by_row = {sid: i for i, sid in enumerate(ids)}
    for sid, reason in late_drops.items():
        drop[by_row[sid]] = reason

    table = _exports_table(source, stats.version, (now, run_id), ids, rows, drop, image_key, meta_key, keep, prev, export)
    changed = export is not None or bool(new_sup) or not _same_exports(prev_table, table)
    if changed:
        lance.write_dataset(table, exports_uri, mode="overwrite", storage_options=options)
    if new_sup or len(sup_after) != len(stored_sup):
        sup_table = pa.Table.from_pylist(
            [
                {**{k: r.get(k) for k in SUPERSEDED_SCHEMA.names}, "source": source, "superseded_at": r.get("superseded_at") or now}
                for r in sup_after
            ],
            schema=SUPERSEDED_SCHEMA,
        )
        lance.write_dataset(sup_table, sup_uri, mode="overwrite", storage_options=options)
    stats.changed = changed
    placed_now = table.filter(pc.is_valid(table["shard"]))
    stats.exported = placed_now.num_rows
    stats.dropped = Counter(reason_code(d) for d in drop if d)
    stats.per_bucket = dict(
        sorted(Counter(f"{t}/{b}" for t, b in zip(placed_now["tier"].to_pylist(), placed_now["bucket"].to_pylist())).items())
    )
    if export is not None:
        stats.bytes_written = export.bytes_written
        stats.removed_buckets = [r.rel for r in export.removed_buckets]
    stats.seconds = time.perf_counter() - started
    return stats


def _orphans(mds_root, source, indexes, sizes, prev, prev_sup, options, scratch_dir) -> list[dict]:
    """Placements in published shards that no table knows: a run killed between its MDS commit
    and its table writes. Their samples are written again by this run, so they are superseded."""
    known: dict[str, set[int]] = {}
    for record in (*prev.values(), *prev_sup):
        if record.get("shard") in sizes:
            known.setdefault(record["shard"], set()).add(int(record["index_in_shard"]))
    unknown = [(shard, i) for shard, count in sizes.items() for i in range(count) if i not in known.get(shard, ())]
    if not unknown:
        return []
    with tempfile.TemporaryDirectory(prefix=f"prx-orphans-{source}-", dir=scratch_dir) as scratch:
        reader = ShardReader(mds_root, indexes, source, scratch, options)
        found = []
        for shard, index, sample in reader.read(unknown):
            tier, bucket = shard.split("/")[:2]
            found.append({"sample_id": sample["sample_id"], "tier": int(tier), "bucket": bucket, "shard": shard, "index_in_shard": index})
    return found


def _write(
    ds,
    rows,
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
    reuse,
    encode,
    caption,
    label,
    model,
    rewrite,
    late_drops,
    write_workers,
    task_resources,
):
    ids = rows.column("sample_id").to_pylist()
    extras = {"label": label, "caption_model": model}
    processor = make_processor(functools.partial(prepare_rows, bucket_cfg.model_dump_json()), executor=executor, chunk_rows=chunk_rows)
    by_id = {sid: i for i, sid in enumerate(ids)}
    todo = rows.take(pa.array(encode, pa.int64())).select(["sample_id", "_rowaddr"])

    def meta(i: int) -> dict:
        sample = {"caption": caption[i], "sample_id": ids[i]}
        sample.update({name: values[i] for name, values in extras.items()})
        return sample

    def samples(scratch: str, encoded: bool = True) -> Iterator[dict]:
        if reuse:
            reader = ShardReader(mds_root, indexes, source, scratch, options)
            row_of = {(p["shard"], int(p["index_in_shard"])): i for i, p in reuse}
            for shard, index, old in reader.read(row_of):
                i = row_of[(shard, index)]
                if old["sample_id"] != ids[i]:
                    raise RuntimeError(f"{shard}[{index}] holds {old['sample_id']}, the exports table says {ids[i]}")
                ref = _bucket_of(*shard.split("/")[:2])
                yield {
                    "image": old["image"],
                    "tier": ref.tier,
                    "height": ref.height,
                    "width": ref.width,
                    "original_width": old["original_width"],
                    "original_height": old["original_height"],
                    **meta(i),
                }
        done = 0
        for result in processor(ds, todo) if todo.num_rows and encoded else ():
            for rec in result.to_pylist():
                i = by_id[rec["sample_id"]]
                if rec["drop_reason"]:
                    late_drops[rec["sample_id"]] = rec["drop_reason"]
                    continue
                yield {
                    "image": rec["jpeg"],
                    "tier": rec["tier"],
                    "height": rec["height"],
                    "width": rec["width"],
                    "original_width": rec["original_width"],
                    "original_height": rec["original_height"],
                    **meta(i),
                }
            done += result.num_rows
            if progress:
                progress(done, todo.num_rows)

    mds_run = new_run_id()
    started = time.perf_counter()
    begin(mds_root, source, mds_run, options)
    try:
        with tempfile.TemporaryDirectory(prefix=f"prx-reuse-{source}-", dir=scratch_dir) as scratch:
            if write_workers > 1 and len(encode) > 1:
                parts = _write_parallel(
                    ds,
                    source,
                    todo,
                    {ids[i]: meta(i) for i in encode},
                    samples(scratch, encoded=False) if reuse else None,
                    mds_root=mds_root,
                    options=options,
                    writer_cfg=writer_cfg,
                    bucket_cfg=bucket_cfg,
                    chunk_rows=chunk_rows,
                    scratch_dir=scratch_dir,
                    late_drops=late_drops,
                    workers=min(write_workers, len(encode)),
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
                    )
                ]
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
    todo: pa.Table,
    meta: dict,
    chunk_rows: int,
):
    """One parallel writer (a Ray task, any node): encode its rows and write its shards straight
    into the MDS root under the run's names. Returns them unpublished, with its late drops."""
    ds = lance.dataset(uri, version=version, storage_options=lance_options)
    late: dict[str, str] = {}

    def samples() -> Iterator[dict]:
        for chunk in address_chunks(todo, chunk_rows):
            images = read_images(ds, chunk.column("_rowaddr").to_pylist())
            for rec in prepare_rows(bucket_cfg_json, chunk.column("sample_id").to_pylist(), images, chunk).to_pylist():
                if rec["drop_reason"]:
                    late[rec["sample_id"]] = rec["drop_reason"]
                    continue
                yield {
                    "image": rec["jpeg"],
                    "tier": rec["tier"],
                    "height": rec["height"],
                    "width": rec["width"],
                    "original_width": rec["original_width"],
                    "original_height": rec["original_height"],
                    **meta[rec["sample_id"]],
                }

    config = MdsWriterConfig.model_validate_json(writer_cfg_json)
    written = write_shards(samples(), mds_root=mds_root, source=source, run_id=run_id, tag=tag, config=config, storage_options=mds_options)
    return written, late


def _write_parallel(
    ds,
    source,
    todo,
    meta,
    reused,
    *,
    mds_root,
    options,
    writer_cfg,
    bucket_cfg,
    chunk_rows,
    scratch_dir,
    late_drops,
    workers,
    run_id,
    task_resources,
):
    """``workers`` Ray tasks encode and write; the driver writes the re-used bytes (``reused``)
    meanwhile. Returns every writer's unpublished shards; the caller publishes them."""
    # lazy: ray is a measured heavy import
    import ray

    if not ray.is_initialized():
        raise RuntimeError("Ray is not initialized: run this stage with a dagster-ray RayResource")
    task = ray.remote(**task_options(num_cpus=1, max_retries=0, resources=task_resources))(_write_part)
    refs = []
    for k, group in enumerate(np.array_split(np.arange(todo.num_rows), workers), start=1):
        chunk = todo.take(pa.array(group, pa.int64()))
        part_meta = {sid: meta[sid] for sid in chunk.column("sample_id").to_pylist()}
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
                chunk,
                part_meta,
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
                )
            )
        try:
            results = ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            raise (exc.cause or exc) from None
    except BaseException:
        # Nothing may keep writing once the run is abandoned: kill the tasks and wait until
        # they are gone (a cancel only asks), so the clean-up sees everything they wrote.
        for ref in refs:
            ray.cancel(ref, force=True)
        ray.wait(refs, num_returns=len(refs), timeout=60)
        raise
    for written, late in results:
        parts.append(written)
        late_drops.update(late)
    return parts


def _exports_table(source, version, made, ids, rows, drop, image_key, meta_key, keep, prev, export) -> pa.Table:
    phash = _column(rows, "phash")
    out: dict[str, list] = {name: [] for name in EXPORT_SCHEMA.names}

    def add(i, tier, bucket, shard, index, reason, when):
        exported_at, run_id = when
        for name, value in (
            ("sample_id", ids[i]),
            ("source", source),
            ("tier", tier),
            ("bucket", bucket),
            ("shard", shard),
            ("index_in_shard", index),
            ("phash", phash[i]),
            ("drop_reason", reason),
            ("export_version", version),
            ("exported_at", exported_at),
            ("export_run_id", run_id),
            ("image_key", image_key[i]),
            ("meta_key", meta_key[i]),
        ):
            out[name].append(value)

    def before(p) -> tuple:
        """When and by which run an unchanged row was made: its earlier values."""
        return (p.get("exported_at") or made[0], p.get("export_run_id"))

    by_row = {sid: i for i, sid in enumerate(ids)}
    for i in keep:
        p = prev[ids[i]]
        add(i, p["tier"], p["bucket"], p["shard"], p["index_in_shard"], None, before(p))
    if export is not None:
        for r in export.lineage.to_pylist():
            add(by_row[r["sample_id"]], r["tier"], r["bucket"], r["shard"], r["index_in_shard"], None, made)
    for i, reason in enumerate(drop):
        if reason:
            p = prev.get(ids[i])
            same = p is not None and p.get("drop_reason") == reason
            add(i, None, None, None, None, reason, before(p) if same else made)
    return pa.table(out).select(EXPORT_SCHEMA.names).cast(EXPORT_SCHEMA).sort_by("sample_id")


def _same_exports(prev: pa.Table | None, new: pa.Table) -> bool:
    if prev is None or prev.schema.names != new.schema.names:
        return False
    columns = [c for c in new.schema.names if c not in ("exported_at", "export_run_id")]
    return prev.select(columns).sort_by("sample_id").equals(new.select(columns).sort_by("sample_id"))


__all__ = ["MAX_CAPTION_CHARS", "ExportStats", "export_source", "export_version", "prepare_rows"]
