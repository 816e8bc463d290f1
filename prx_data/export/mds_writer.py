"""Write one source partition's encoded samples into the MDS tree, atomically per partition.

Layout: ``<mds root>/<tier>/<height>x<width>/<source>/shard.NNNNN.mds`` + ``index.json``.

Atomicity: every bucket is written into ``<bucket>/<source>.staging-<run id>/``. Only after all
buckets are finished, indexed and checked is a commit journal written
(``<mds root>/_commits/<source>.json``); the journal is then applied by renames
(final -> ``<source>.old-<run id>``, staging -> final, and final -> old for buckets the source no
longer has) and deleted. A run that fails or is killed before the journal exists leaves the
previous export untouched (its staging folders are removed by the next run of the source); a run
killed while applying the journal is rolled forward by the next run (``recover_source``). Each
bucket is swapped by two renames, so a reader can, for microseconds, find a bucket without the
source's folder; it never finds a half-written one.

Object-store roots (s3://, gs://) have no rename, so there ``write_partition`` publishes
differently: the partition is written and checked in a local scratch root (as above), then
uploaded in an order that keeps the same promise
(a reader sees the previous export or the new one, never a half-written one):

1. an in-flight marker ``_commits/<source>.<run id>.running`` (garbage collection leaves the
   run's objects alone while it exists);
2. every shard, under a name that carries the run id (``<run id>.shard.00000.mds``), so no
   object a reader may be using is ever overwritten;
3. each bucket's new source index, staged as ``<bucket>/<source>/<run id>.index.json``;
4. the commit journal ``_commits/<source>.json`` (the commit point, one PUT);
5. the flip: each staged index is copied to ``<bucket>/<source>/index.json`` (one PUT per
   bucket: the only objects readers resolve), and ``index.json`` is deleted from buckets the
   source left; then the journal, the staged indexes and the marker are deleted.

A run that dies before step 4 changes nothing readers see; its objects are garbage. A run
that dies during step 5 is rolled forward by the next export of the source
(``recover_remote_source``). Shards of replaced exports stay until ``corpus_index`` has merged
past them (see ``corpus_index.collect_garbage``), so a trainer holding the previous merged index
keeps working. There is no object-store lock: one export per source at a time is the
orchestrator's job (one Dagster run per source partition).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, Field
from streaming import MDSWriter

from prx_data.compat.streaming_internals import flush_shard
from prx_data.core.locking import local_file_lock
from prx_data.core.schema import EXPORT_SCHEMA
from prx_data.export._fs import dumps_stable
from prx_data.export.tree import INDEX_BASENAME, BucketRef, check_source, list_buckets
from prx_data.core.storage import (
    atomic_write_bytes,
    delete_file,
    exists,
    fsync_dir,
    local_path,
    locate,
    try_read_bytes,
    upload_file,
    write_bytes,
)

logger = logging.getLogger(__name__)

# `bytes`, not MDS `jpeg`: the `jpeg` encoding re-encodes at PIL's default quality 75 (STACK.md).
# `bytes` stores what it is given, and any StreamingDataset can read it without a custom codec.
BASE_COLUMNS: dict[str, str] = {
    "image": "bytes",
    "caption": "str",
    "sample_id": "str",
    "source": "str",
    "original_width": "int32",
    "original_height": "int32",
}
JPEG_MAGIC = b"\xff\xd8\xff"
COMMITS_DIR = "_commits"

# Where each written sample landed: the export table's placement columns.
LINEAGE_SCHEMA = pa.schema(
    [EXPORT_SCHEMA.field(name) for name in ("sample_id", "source", "tier", "bucket", "shard", "index_in_shard")]
)


class MdsWriterConfig(BaseModel):
    size_limit: int = Field(128 * 1024 * 1024, gt=0, description="Target shard size in bytes.")
    max_buffered_bytes: int = Field(
        1024 * 1024 * 1024,
        gt=0,
        description="Cap on bytes held by all open bucket writers together; when passed, the "
        "fullest writer flushes an early (smaller) shard. Bounds memory for unordered input.",
    )
    extra_columns: tuple[str, ...] = Field(
        ("label", "caption_model"),
        description="Optional str columns; a missing or None value is stored as ''.",
    )
    hashes: tuple[str, ...] = Field((), description="MDS shard hashes, e.g. ('xxh64',).")
    require_jpeg: bool = Field(True, description="Reject images that do not start with a JPEG SOI.")

    def columns(self) -> dict[str, str]:
        columns = dict(BASE_COLUMNS)
        for name in self.extra_columns:
            if name in columns:
                raise ValueError(f"extra column {name!r} clashes with a base column")
            columns[name] = "str"
        return columns


@dataclass
class PartitionExport:
    """What one ``write_partition`` call produced."""

    source: str
    run_id: str
    lineage: pa.Table  # LINEAGE_SCHEMA, one row per written sample
    buckets: list[BucketRef]  # buckets the source now has
    removed_buckets: list[BucketRef]  # buckets the source had before and no longer has
    samples_per_bucket: dict[str, int] = field(default_factory=dict)  # "tier/HxW" -> count
    bytes_written: int = 0
    seconds: float = 0.0


def new_run_id() -> str:
    # Sorts by time, and has no dot: remote object names split '<run id>.<name>' on the first dot.
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def staging_name(source: str, run_id: str) -> str:
    return f"{source}.staging-{run_id}"


def old_name(source: str, run_id: str) -> str:
    return f"{source}.old-{run_id}"


def journal_path(mds_root: str, source: str) -> str:
    return os.path.join(mds_root, COMMITS_DIR, f"{source}.json")


class _BucketWriter:
    """One open MDSWriter plus the sample ids in the order they were written."""

    def __init__(self, out: str, config: MdsWriterConfig) -> None:
        os.makedirs(out, exist_ok=False)
        self.out = out
        self.writer = MDSWriter(
            out=out,
            columns=config.columns(),
            compression=None,  # JPEG is already compressed
            hashes=list(config.hashes) or None,
            size_limit=config.size_limit,
        )
        self.sample_ids: list[str] = []
        self.bytes = 0

    @property
    def buffered(self) -> int:
        return int(self.writer.new_shard_size)

    def write(self, row: dict[str, Any]) -> None:
        self.writer.write(row)
        self.sample_ids.append(row["sample_id"])
        self.bytes += len(row["image"])

    def flush_early(self) -> None:
        flush_shard(self.writer)

    def cancel(self) -> None:
        self.writer.cancel_future_jobs()

    def finish(self) -> None:
        self.writer.finish()


class _AdoptedShards:
    """A bucket's staging folder filled with shards other processes wrote (``parts``)."""

    def __init__(self, out: str) -> None:
        os.makedirs(out, exist_ok=False)
        self.out = out
        self.shards: list[dict] = []
        self.sample_ids: list[str] = []
        self.bytes = 0

    def adopt(self, folder: str, tag: str, sample_ids: list[str]) -> None:
        for info in _read_index(folder)["shards"]:
            for key in ("raw_data", "zip_data"):
                if info.get(key):
                    name = f"{tag}.{info[key]['basename']}"
                    os.rename(os.path.join(folder, info[key]["basename"]), os.path.join(self.out, name))
                    info[key]["basename"] = name
            self.bytes += int(info["raw_data"]["bytes"])
            self.shards.append(info)
        self.sample_ids.extend(sample_ids)

    def cancel(self) -> None:
        return None

    def finish(self) -> None:
        atomic_write_bytes(os.path.join(self.out, INDEX_BASENAME), json.dumps({"shards": self.shards, "version": 2}, sort_keys=True).encode())


def _to_row(sample: Mapping[str, Any], source: str, config: MdsWriterConfig) -> dict[str, Any]:
    image = sample["image"]
    if not isinstance(image, bytes):
        image = bytes(image)  # bytearray / memoryview / numpy buffer
    if config.require_jpeg and not image.startswith(JPEG_MAGIC):
        raise ValueError(f"sample {sample.get('sample_id')!r}: image is not JPEG-encoded bytes")
    if sample.get("source", source) != source:
        raise ValueError(
            f"sample {sample.get('sample_id')!r} has source {sample['source']!r}, partition is {source!r}"
        )
    row: dict[str, Any] = {
        "image": image,
        "caption": sample.get("caption") or "",
        "sample_id": str(sample["sample_id"]),
        "source": source,
        "original_width": int(sample["original_width"]),
        "original_height": int(sample["original_height"]),
    }
    for name in config.extra_columns:
        value = sample.get(name)
        row[name] = "" if value is None else str(value)
    return row


@contextmanager
def _source_lock(mds_root: str, source: str) -> Iterator[None]:
    """One export of a source at a time: recovery deletes staging folders it does not own."""
    busy = f"another export of source {source!r} is running under {mds_root}"
    with local_file_lock(os.path.join(mds_root, COMMITS_DIR, f"{source}.lock"), wait_s=0, busy=busy):
        yield


def _existing_source_buckets(mds_root: str, source: str) -> list[BucketRef]:
    return [ref for ref in list_buckets(mds_root) if os.path.isdir(ref.source_dir(mds_root, source))]


def _apply_journal(mds_root: str, journal: dict[str, Any]) -> None:
    """Idempotent: safe to re-run after a crash at any point."""
    source, run_id = journal["source"], journal["run_id"]
    for rel in journal["install"]:
        bucket_dir = os.path.join(mds_root, rel)
        staging = os.path.join(bucket_dir, staging_name(source, run_id))
        final = os.path.join(bucket_dir, source)
        if not os.path.isdir(staging):
            continue  # already installed
        if os.path.isdir(final):
            os.rename(final, os.path.join(bucket_dir, old_name(source, run_id)))
        os.rename(staging, final)
        fsync_dir(bucket_dir)
    for rel in journal["remove"]:
        bucket_dir = os.path.join(mds_root, rel)
        final = os.path.join(bucket_dir, source)
        if os.path.isdir(final):
            os.rename(final, os.path.join(bucket_dir, old_name(source, run_id)))
            fsync_dir(bucket_dir)


def _clean_transient(mds_root: str, source: str) -> None:
    """Remove this source's staging and old folders (failed runs, finished swaps)."""
    prefixes = (f"{source}.staging-", f"{source}.old-")
    for ref in list_buckets(mds_root):
        bucket_dir = ref.dir(mds_root)
        for name in os.listdir(bucket_dir):
            if name.startswith(prefixes):
                shutil.rmtree(os.path.join(bucket_dir, name), ignore_errors=True)


def recover_source(mds_root: str, source: str) -> bool:
    """Finish a committed swap that was interrupted, then drop transient folders.

    Returns True when an interrupted commit was rolled forward. Call under the source lock
    (``write_partition`` does).
    """
    path = journal_path(mds_root, source)
    rolled = False
    if os.path.exists(path):
        with open(path, "rb") as handle:
            journal = json.loads(handle.read())
        logger.warning("rolling forward interrupted export %s of %s", journal["run_id"], source)
        _apply_journal(mds_root, journal)
        os.remove(path)
        rolled = True
    _clean_transient(mds_root, source)
    return rolled


def _read_index(folder: str) -> dict:
    with open(os.path.join(folder, INDEX_BASENAME), "rb") as handle:
        return json.loads(handle.read())


def _lineage_for_bucket(ref: BucketRef, source: str, shards: list[dict], sample_ids: list[str]) -> pa.Table:
    """``shards``: the index entries of the samples written, in writer order."""
    counts = np.array([shard["samples"] for shard in shards], dtype=np.int64)
    if int(counts.sum()) != len(sample_ids):
        raise RuntimeError(f"{ref.rel}/{source}: index has {int(counts.sum())} samples, wrote {len(sample_ids)}")
    prefix = f"{ref.rel}/{source}/"
    names = np.array([prefix + shard["raw_data"]["basename"] for shard in shards], dtype=object)
    # Writer order == global order in the index, so index_in_shard is the position minus the
    # start of the shard the position falls in.
    shard_of = np.repeat(np.arange(len(shards)), counts)
    starts = np.cumsum(counts) - counts
    index_in_shard = np.arange(len(sample_ids), dtype=np.int64) - starts[shard_of]
    n = len(sample_ids)
    return pa.table(
        {
            "sample_id": pa.array(sample_ids, pa.string()),
            "source": pa.array([source] * n, pa.string()),
            "tier": pa.array(np.full(n, ref.tier, np.int32)),
            "bucket": pa.array([ref.bucket] * n, pa.string()),
            "shard": pa.array(names[shard_of], pa.string()),
            "index_in_shard": pa.array(index_in_shard),
        },
        schema=LINEAGE_SCHEMA,
    )


def _rename_shards(folder: str, index: dict, run_id: str) -> None:
    """Give freshly written shards run-scoped names, so they can sit beside kept ones."""
    for info in index["shards"]:
        for key in ("raw_data", "zip_data"):
            if info.get(key):
                target = remote_object_name(run_id, info[key]["basename"])
                os.rename(os.path.join(folder, info[key]["basename"]), os.path.join(folder, target))
                info[key]["basename"] = target


def _link_kept_shards(final: str, staging: str, index: dict) -> dict:
    """Hard-link the source's current shards into ``staging`` and prepend them to ``index``.

    A link is free and keeps the bytes a reader may be streaming; the old folder is swapped out
    by the usual journal, so appending stays all-or-nothing.
    """
    kept = _read_index(final)["shards"]
    for info in kept:
        for key in ("raw_data", "zip_data"):
            if info.get(key):
                name = info[key]["basename"]
                try:
                    os.link(os.path.join(final, name), os.path.join(staging, name))
                except OSError:
                    shutil.copy2(os.path.join(final, name), os.path.join(staging, name))
    return {**index, "shards": kept + index["shards"]}


def write_partition(
    samples: Iterable[Mapping[str, Any]],
    *,
    mds_root: str,
    source: str,
    config: MdsWriterConfig | None = None,
    run_id: str | None = None,
    allow_empty: bool = False,
    rewrite: set[BucketRef] | None = None,
    parts: list[tuple[str, pa.Table]] | None = None,
    storage_options: dict | None = None,
    scratch_dir: str | None = None,
) -> PartitionExport:
    """Write all of ``source``'s samples and replace its previous export in one commit.

    ``mds_root`` is a local folder or an object-store root (reached with ``storage_options``).
    MDSWriter writes real files, so on an object store the partition is written in a local
    scratch folder (under ``scratch_dir``, default the system temp) and published from there
    (see the module doc); a local root is written in place and committed by renames. The
    promise is the same on both: readers see the previous export or the new one, never half.

    ``parts`` merges the work of parallel writers instead: each part is (a root on the same
    filesystem, its lineage) that one task filled by calling ``write_partition`` on it; their
    shards are moved in (renamed ``p<k>.<name>``), each bucket's indexes concatenated, and the
    result is committed as if written here. ``samples`` must then be empty.

    ``rewrite`` switches to incremental mode: the samples given are appended to the source's
    current shards (new shards, run-scoped names), except in the buckets listed in ``rewrite``,
    whose shards are replaced by what is written (the bucket is removed when nothing is).
    Buckets neither written nor listed are left untouched, and a run with nothing to write and
    nothing to rewrite commits nothing.

    Each sample carries ``tier, height, width`` (the bucket shape it was encoded to), ``image``
    (JPEG bytes, stored unchanged), ``caption, sample_id, original_width, original_height`` and
    optionally the configured extra columns. Input may interleave buckets.

    An empty input removes the source from the tree, so it needs ``allow_empty=True``: an
    upstream bug that yields nothing must not silently wipe a good export.
    """
    local = local_path(mds_root)
    if local is None:
        return _publish_to_object_store(
            samples, mds_root=mds_root, source=source, storage_options=storage_options, config=config, run_id=run_id,
            allow_empty=allow_empty, scratch_dir=scratch_dir, rewrite=rewrite, parts=parts,
        )
    return _write_local(
        samples, mds_root=local, source=source, config=config, run_id=run_id, allow_empty=allow_empty, rewrite=rewrite, parts=parts
    )


def parts_root(mds_root: str, source: str, scratch_dir: str | None = None) -> str:
    """A fresh local folder for parallel writers' parts (``write_partition(parts=...)``).

    Beside the tree when it is local (same filesystem, so merging moves shards instead of
    copying them; a killed run's leftovers are removed first, under the source's lock), else in
    ``scratch_dir``. The caller removes it.
    """
    local = local_path(mds_root)
    if local is None:
        return tempfile.mkdtemp(prefix=f"prx-parts-{source}-", dir=scratch_dir)
    commits = os.path.join(local, COMMITS_DIR)
    for stale in glob.glob(os.path.join(glob.escape(commits), f"{source}.parts-*")):
        shutil.rmtree(stale, ignore_errors=True)
    folder = os.path.join(commits, f"{source}.parts-{new_run_id()}")
    os.makedirs(folder)
    return folder


def _write_local(
    samples: Iterable[Mapping[str, Any]],
    *,
    mds_root: str,
    source: str,
    config: MdsWriterConfig | None,
    run_id: str | None,
    allow_empty: bool,
    rewrite: set[BucketRef] | None,
    parts: list[tuple[str, pa.Table]] | None,
) -> PartitionExport:
    check_source(source)
    config = config or MdsWriterConfig()
    run_id = run_id or new_run_id()
    started = time.perf_counter()
    os.makedirs(mds_root, exist_ok=True)
    with _source_lock(mds_root, source):
        recover_source(mds_root, source)
        writers: dict[BucketRef, _BucketWriter | _AdoptedShards] = {}
        try:
            for k, (part_root, part_lineage) in enumerate(parts or ()):
                for ref in list_buckets(part_root):
                    folder = ref.source_dir(part_root, source)
                    if not os.path.isfile(os.path.join(folder, INDEX_BASENAME)):
                        continue
                    if ref not in writers:
                        writers[ref] = _AdoptedShards(os.path.join(ref.dir(mds_root), staging_name(source, run_id)))
                    mine = part_lineage.filter(
                        pc.and_(pc.equal(part_lineage["tier"], ref.tier), pc.equal(part_lineage["bucket"], ref.bucket))
                    )
                    writers[ref].adopt(folder, f"p{k}", mine["sample_id"].to_pylist())
            buffered = 0
            for sample in samples:
                ref = BucketRef(int(sample["tier"]), int(sample["height"]), int(sample["width"]))
                writer = writers.get(ref)
                if writer is None:
                    out = os.path.join(ref.dir(mds_root), staging_name(source, run_id))
                    writer = writers[ref] = _BucketWriter(out, config)
                elif isinstance(writer, _AdoptedShards):
                    raise ValueError("write_partition takes samples or parts, not both")
                before = writer.buffered
                writer.write(_to_row(sample, source, config))
                buffered += writer.buffered - before
                if buffered > config.max_buffered_bytes:
                    fullest = max(writers.values(), key=lambda w: w.buffered)
                    buffered -= fullest.buffered
                    fullest.flush_early()
            for writer in writers.values():
                writer.finish()
            previous = _existing_source_buckets(mds_root, source)
            tables = []
            for ref in sorted(writers):
                out = writers[ref].out
                index = _read_index(out)
                if rewrite is not None and ref in previous and ref not in rewrite:
                    _rename_shards(out, index, run_id)
                    tables.append(_lineage_for_bucket(ref, source, index["shards"], writers[ref].sample_ids))
                    atomic_write_bytes(
                        os.path.join(out, INDEX_BASENAME),
                        json.dumps(_link_kept_shards(ref.source_dir(mds_root, source), out, index), sort_keys=True).encode(),
                    )
                else:
                    tables.append(_lineage_for_bucket(ref, source, index["shards"], writers[ref].sample_ids))
            lineage = pa.concat_tables(tables) if tables else LINEAGE_SCHEMA.empty_table()
            if pc.count_distinct(lineage["sample_id"]).as_py() != lineage.num_rows:
                raise ValueError(f"source {source!r}: duplicate sample_id in the partition")
        except BaseException:
            for ref, writer in writers.items():
                writer.cancel()
                shutil.rmtree(writer.out, ignore_errors=True)
            raise

        if not writers and not allow_empty and rewrite is None:
            raise ValueError(f"source {source!r}: no samples to export (pass allow_empty=True to remove it)")
        if rewrite is None:
            removed = sorted(set(previous) - set(writers))
        else:
            removed = sorted((set(previous) & set(rewrite)) - set(writers))
        journal = {
            "source": source,
            "run_id": run_id,
            "install": [ref.rel for ref in sorted(writers)],
            "remove": [ref.rel for ref in removed],
        }
        if journal["install"] or journal["remove"]:
            path = journal_path(mds_root, source)
            atomic_write_bytes(path, dumps_stable(journal))  # the commit point
            _apply_journal(mds_root, journal)
            os.remove(path)
            _clean_transient(mds_root, source)

    now_has = set(writers) if rewrite is None else (set(previous) - set(removed)) | set(writers)
    return PartitionExport(
        source=source,
        run_id=run_id,
        lineage=lineage,
        buckets=sorted(now_has),
        removed_buckets=removed,
        samples_per_bucket={ref.rel: len(writers[ref].sample_ids) for ref in sorted(writers)},
        bytes_written=sum(w.bytes for w in writers.values()),
        seconds=time.perf_counter() - started,
    )


# Object-store roots ----------------------------------------------------------------------------
RUN_ID_RE = re.compile(r"^\d{8}T\d{6}-[0-9a-f]{8}$")


def remote_object_name(run_id: str, basename: str) -> str:
    """'shard.00000.mds' of run R -> 'R.shard.00000.mds' (flat, so sidecars and lineage keep
    the '<tier>/<HxW>/<source>/<basename>' shape)."""
    return f"{run_id}.{basename}"


def run_of_object(name: str) -> str | None:
    """The run id an object name starts with, or None for index.json, sidecars' owners etc."""
    head = name.split(".", 1)[0]
    return head if RUN_ID_RE.match(head) else None


def staged_index_name(run_id: str) -> str:
    return remote_object_name(run_id, INDEX_BASENAME)


def running_marker_name(source: str, run_id: str) -> str:
    return f"{source}.{run_id}.running"


def _apply_remote_journal(root, journal: dict[str, Any]) -> None:
    """Idempotent; a staged index that is gone was applied and cleaned up already."""
    source, run_id = journal["source"], journal["run_id"]
    for rel in journal["install"]:
        data = try_read_bytes(root.child(rel, source, staged_index_name(run_id)))
        if data is not None:
            write_bytes(root.child(rel, source, INDEX_BASENAME), data)
    for rel in journal["remove"]:
        delete_file(root.child(rel, source, INDEX_BASENAME))


def _finish_remote_journal(root, journal: dict[str, Any]) -> None:
    source, run_id = journal["source"], journal["run_id"]
    delete_file(root.child(COMMITS_DIR, f"{source}.json"))
    for rel in journal["install"]:
        delete_file(root.child(rel, source, staged_index_name(run_id)))


def recover_remote_source(mds_root: str, source: str, storage_options: dict | None = None) -> bool:
    """Roll a committed but unfinished publish forward. True when there was one."""
    root = locate(mds_root, storage_options)
    raw = try_read_bytes(root.child(COMMITS_DIR, f"{source}.json"))
    if raw is None:
        return False
    journal = json.loads(raw)
    logger.warning("rolling forward interrupted export %s of %s under %s", journal["run_id"], source, mds_root)
    _apply_remote_journal(root, journal)
    _finish_remote_journal(root, journal)
    return True


def _remote_source_buckets(mds_root: str, source: str, storage_options: dict | None) -> list[BucketRef]:
    root = locate(mds_root, storage_options)
    return [ref for ref in list_buckets(mds_root, storage_options) if exists(root.child(ref.rel, source, INDEX_BASENAME))]


def _publish_to_object_store(
    samples: Iterable[Mapping[str, Any]],
    *,
    mds_root: str,
    source: str,
    storage_options: dict | None,
    config: MdsWriterConfig | None,
    run_id: str | None,
    allow_empty: bool,
    scratch_dir: str | None,
    rewrite: set[BucketRef] | None,
    parts: list[tuple[str, pa.Table]] | None,
) -> PartitionExport:
    """``write_partition`` for an object-store root: write in local scratch, then publish.

    ``rewrite`` as for ``write_partition``: kept buckets get the new shards appended to their
    published index (the old shard objects stay where they are, nothing is copied).

    The scratch copy needs room for the whole partition (its shards are uploaded after the
    partition is complete and checked); ``scratch_dir`` picks where (default: the system temp).
    Lineage names the published objects (``<tier>/<HxW>/<source>/<run id>.shard.NNNNN.mds``).
    """
    check_source(source)
    run_id = run_id or new_run_id()
    started = time.perf_counter()
    root = locate(mds_root, storage_options)
    recover_remote_source(mds_root, source, storage_options)
    marker = root.child(COMMITS_DIR, running_marker_name(source, run_id))
    sent = 0
    with tempfile.TemporaryDirectory(prefix=f"prx-mds-{source}-", dir=scratch_dir) as scratch:
        export = _write_local(
            samples, mds_root=scratch, source=source, config=config, run_id=run_id, allow_empty=True, rewrite=None, parts=parts
        )
        if not export.buckets and not allow_empty and rewrite is None:
            raise ValueError(f"source {source!r}: no samples to export (pass allow_empty=True to remove it)")
        previous = _remote_source_buckets(mds_root, source, storage_options)
        if rewrite is None:
            removed = sorted(set(previous) - set(export.buckets))
        else:
            removed = sorted((set(previous) & set(rewrite)) - set(export.buckets))
        if export.buckets or removed:
            write_bytes(marker, dumps_stable({"source": source, "run_id": run_id}))
            try:
                for ref in export.buckets:
                    local_dir = ref.source_dir(scratch, source)
                    with open(os.path.join(local_dir, INDEX_BASENAME), "rb") as handle:
                        index = json.loads(handle.read())
                    for info in index["shards"]:
                        for key in ("raw_data", "zip_data"):
                            if info.get(key):
                                basename = info[key]["basename"]
                                target = remote_object_name(run_id, basename)
                                sent += upload_file(os.path.join(local_dir, basename), root.child(ref.rel, source, target))
                                info[key]["basename"] = target
                    if rewrite is not None and ref in previous and ref not in rewrite:
                        current = try_read_bytes(root.child(ref.rel, source, INDEX_BASENAME))
                        if current is None:
                            raise RuntimeError(f"{ref.rel}/{source}/{INDEX_BASENAME} vanished while appending to it")
                        index["shards"] = json.loads(current)["shards"] + index["shards"]
                    write_bytes(root.child(ref.rel, source, staged_index_name(run_id)), dumps_stable(index))
                journal = {
                    "source": source,
                    "run_id": run_id,
                    "install": [ref.rel for ref in export.buckets],
                    "remove": [ref.rel for ref in removed],
                }
                write_bytes(root.child(COMMITS_DIR, f"{source}.json"), dumps_stable(journal))  # the commit point
                _apply_remote_journal(root, journal)
                _finish_remote_journal(root, journal)
            finally:
                delete_file(marker)

    shards = export.lineage.column("shard").to_pylist()
    renamed = [f"{rel}/{remote_object_name(run_id, base)}" for rel, base in (s.rsplit("/", 1) for s in shards)]
    lineage = export.lineage.set_column(
        export.lineage.schema.get_field_index("shard"), "shard", pa.array(renamed, pa.string())
    )
    logger.info("published %s to %s: %d buckets, %d bytes, run %s", source, mds_root, len(export.buckets), sent, run_id)
    return PartitionExport(
        source=source,
        run_id=run_id,
        lineage=lineage,
        buckets=export.buckets if rewrite is None else sorted((set(previous) - set(removed)) | set(export.buckets)),
        removed_buckets=removed,
        samples_per_bucket=export.samples_per_bucket,
        bytes_written=export.bytes_written,
        seconds=time.perf_counter() - started,
    )
