"""Merge the per-source ``index.json`` files of a bucket into one index at the bucket folder.

With the merged index, ``StreamingDataset(local=<bucket folder>)`` (or one ``Stream`` per bucket)
reads every source of the bucket as one stream; shard basenames become ``<source>/shard.NNNNN.mds``.
Sources are merged in sorted order, so the result (and its bytes) only depend on what the
source folders hold. The merged index carries an extra ``prx`` block, ignored by streaming,
with each source's index sha256: the loader uses it to notice a stale merge or stale skip lists.

Publication. A trainer batches per stream and needs every stream to fill a batch, so a bucket is
published for training (its ``index.json`` written) only when it holds at least
``min_stream_samples`` unskipped samples (the setting: at least your global batch size). Any
other bucket stays in the tree with its shards and source indexes, but without a bucket-level
``index.json``, so a reader that lists bucket folders with an ``index.json`` (the project's
loader, PRX's trainer) never sees it; ``unpublished.json`` in its folder says why, with counts.
Unskipped counts come from the bucket's skip-list manifest when it was built against the current
source indexes. Skip lists change after indexing (opt-outs, labels), so the decision is taken
again each time skip lists are built (``skip_lists`` calls ``merge_all`` after writing them):
the published set always follows the current skips.

Retirement. A bucket every source left (its only images removed, re-bucketed or dropped) is
retired: its merged index, ``unpublished.json``, skip-list manifest and sidecars are removed, its
empty folders too (shards a previous merged index named are left to garbage collection,
``export.retention``), and
``retired_buckets.json`` at the root records it (the data card lists it). Nothing of it is left
that a stream check or trainer would take for a stream. A later export into the same shape
revives it (its record is dropped at the next merge).
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from prx_data.core.settings import SHARD_RETENTION_DAYS
from prx_data.core.storage import (
    Location,
    delete_file,
    is_file,
    join,
    list_dir,
    local_path,
    locate,
    read_bytes,
    try_read_bytes,
    write_bytes,
    write_if_changed,
)
from prx_data.export._fs import dumps_stable, sha256_bytes
from prx_data.export.retention import collect_garbage
from prx_data.export.skiplist import SkiplistError, parse_manifest
from prx_data.export.tree import (
    INDEX_BASENAME,
    RETIRED_BUCKETS_BASENAME,
    SKIP_INFIX,
    SKIPLIST_MANIFEST_BASENAME,
    SOURCE_RE,
    UNPUBLISHED_BASENAME,
    list_buckets,
    list_sources,
)

UNPUBLISHED_FORMAT: Final = "prx-unpublished-bucket"
RETIRED_FORMAT = "prx-retired-buckets"

MERGED_FORMAT: Final = 1


class _File(BaseModel):
    # Unknown keys are ignored so a later writer can add fields without breaking older readers.
    model_config = ConfigDict(extra="ignore", frozen=True)


class SourceProvenance(_File):
    index_sha256: str
    samples: int = Field(ge=0)


class MergedProvenance(_File):
    """The ``prx`` block of a merged ``index.json`` (streaming ignores it)."""

    format: Literal[1] = MERGED_FORMAT
    sources: dict[str, SourceProvenance]


class UnpublishedNote(_File):
    """``unpublished.json``: why a bucket is in the tree but not streamed for training."""

    format: Literal["prx-unpublished-bucket"] = UNPUBLISHED_FORMAT
    version: Literal[1] = 1
    reason: str
    samples: int = Field(ge=0)
    unskipped: int = Field(ge=0)
    min_stream_samples: int = Field(ge=1)
    sources: dict[str, str]

    def to_bytes(self) -> bytes:
        return dumps_stable(self.model_dump())


@dataclass(frozen=True)
class MergedIndex:
    bucket_dir: str
    sources: dict[str, str]  # source -> sha256 of its index.json
    num_shards: int
    num_samples: int
    written: bool  # False when the file already held these exact bytes (or was removed)
    unskipped: int = 0  # samples minus those the current skip lists skip
    published: bool = True  # has a bucket-level index.json: a stream for training
    retired: bool = False  # this merge found it emptied and removed its leftovers
    retired_sources: tuple[str, ...] = ()  # the sources its last merged index named


class StaleIndexError(RuntimeError):
    """The merged index no longer matches the source indexes it was built from."""


def _prefixed(info: dict, source: str) -> dict:
    info = copy.deepcopy(info)
    for key in ("raw_data", "zip_data"):
        if info.get(key):
            info[key]["basename"] = f"{source}/{info[key]['basename']}"
    return info


def source_index_digests(bucket_dir: str, storage_options: dict | None = None) -> dict[str, str]:
    """sha256 of every committed source's index.json in the bucket, by source."""
    return {source: sha256_bytes(raw) for source, raw in _source_indexes(bucket_dir, storage_options).items()}


def _source_indexes(bucket_dir: str, storage_options: dict | None) -> dict[str, bytes]:
    bucket = locate(bucket_dir, storage_options)
    found = {}
    for source in list_sources(bucket_dir, storage_options):
        raw = try_read_bytes(bucket.child(source, INDEX_BASENAME))
        if raw is not None:  # removed by a concurrent publish since the listing
            found[source] = raw
    return found


def _merged_object(bucket_dir: str, raw_by_source: dict[str, bytes]) -> tuple[dict | None, dict[str, str], int]:
    """(merged index object or None when there are no shards, source digests, samples)."""
    shards: list[dict] = []
    sources: dict[str, str] = {}
    samples_by_source: dict[str, int] = {}
    columns: tuple | None = None
    for source, raw in sorted(raw_by_source.items()):
        sources[source] = sha256_bytes(raw)
        obj = json.loads(raw)
        if obj.get("version") != 2:
            raise ValueError(f"{bucket_dir}/{source}/{INDEX_BASENAME}: unsupported index version {obj.get('version')}")
        samples_by_source[source] = 0
        for info in obj["shards"]:
            # A batch is collated across sources, so every shard of a bucket must share columns.
            these = (tuple(info.get("column_names", ())), tuple(info.get("column_encodings", ())))
            if columns is None:
                columns = these
            elif these != columns:
                raise ValueError(
                    f"{bucket_dir}/{source}: columns {these} differ from the bucket's {columns}; "
                    "re-export the source with the same writer config"
                )
            shards.append(_prefixed(info, source))
            samples_by_source[source] += int(info["samples"])
    if not shards:
        return None, {}, 0
    provenance = MergedProvenance(
        sources={name: SourceProvenance(index_sha256=digest, samples=samples_by_source[name]) for name, digest in sources.items()}
    )
    obj = {"version": 2, "shards": shards, "prx": provenance.model_dump()}
    return obj, sources, sum(samples_by_source.values())


def merge_bucket_index(bucket_dir: str, storage_options: dict | None = None, *, min_stream_samples: int = 1) -> MergedIndex:
    """(Re)write ``<bucket_dir>/index.json`` when the bucket is published; remove it when it has
    no source left or too few unskipped samples (``unpublished.json`` then says why)."""
    obj, sources, samples = _merged_object(bucket_dir, _source_indexes(bucket_dir, storage_options))
    return _publish(locate(bucket_dir, storage_options), obj, sources, samples, min_stream_samples)


def _skipped_now(bucket: Location, sources: dict[str, str]) -> int:
    """Skipped samples per the bucket's skip-list manifest, when it matches these sources.

    A manifest built against other source indexes says nothing about this export (and the loader
    refuses it until skip lists are rebuilt, which decides publication again).
    """

    raw = try_read_bytes(bucket.child(SKIPLIST_MANIFEST_BASENAME))
    if raw is None:
        return 0
    try:
        manifest = parse_manifest(raw, bucket.child(SKIPLIST_MANIFEST_BASENAME).uri)
    except SkiplistError:
        return 0  # a malformed manifest is reported by the loader, with its name
    return manifest.skipped if manifest.sources == sources else 0


def _publish(bucket: Location, obj: dict | None, sources: dict[str, str], samples: int, min_stream_samples: int) -> MergedIndex:
    target, marker = bucket.child(INDEX_BASENAME), bucket.child(UNPUBLISHED_BASENAME)
    current = try_read_bytes(target)
    if obj is None:
        # An empty index would make StreamingDataset fail on this stream; a leftover manifest
        # or sidecar would make the bucket look like one: retire it whole.
        before = _last_sources(bucket, current)
        retired = _retire(bucket)
        return MergedIndex(bucket.uri, {}, 0, 0, current is not None, 0, False, retired=retired, retired_sources=tuple(before))
    unskipped = samples - _skipped_now(bucket, sources)
    num_shards = len(obj["shards"])
    if unskipped >= max(1, min_stream_samples):
        data = dumps_stable(obj)
        if current != data:
            write_bytes(target, data)
        if is_file(marker):
            delete_file(marker)
        return MergedIndex(bucket.uri, sources, num_shards, samples, current != data, unskipped, True)
    if current is not None:
        delete_file(target)
    note = UnpublishedNote(
        reason="fully skipped" if unskipped <= 0 else "fewer unskipped samples than min_stream_samples",
        samples=samples,
        unskipped=max(0, unskipped),
        min_stream_samples=min_stream_samples,
        sources=sources,
    )
    write_if_changed(marker, note.to_bytes())
    return MergedIndex(bucket.uri, sources, num_shards, samples, current is not None, max(0, unskipped), False)


def _last_sources(bucket: Location, merged: bytes | None) -> list[str]:
    """The sources a bucket held before it emptied: its merged index's, or (unpublished) its note's."""
    if merged is not None:
        return sorted(merged_source_digests(json.loads(merged)))
    note = try_read_bytes(bucket.child(UNPUBLISHED_BASENAME))
    try:
        return sorted(UnpublishedNote.model_validate_json(note).sources) if note is not None else []
    except ValueError:
        return []


def _retire(bucket: Location) -> bool:
    """Remove what makes an emptied bucket look alive; True when anything was removed."""
    removed = False
    for name in (INDEX_BASENAME, UNPUBLISHED_BASENAME, SKIPLIST_MANIFEST_BASENAME):
        if is_file(bucket.child(name)):
            delete_file(bucket.child(name))
            removed = True
    for folder in list_dir(bucket):
        if not (folder.is_dir and SOURCE_RE.fullmatch(folder.name)):
            continue
        for entry in list_dir(bucket.child(folder.name)):
            if not entry.is_dir and SKIP_INFIX in entry.name:
                delete_file(bucket.child(folder.name, entry.name))
                removed = True
    bucket_dir = local_path(bucket.uri)
    if bucket_dir is not None:  # object stores have no folders to leave behind
        for dirpath, _dirs, _files in sorted(os.walk(bucket_dir), key=lambda t: -len(t[0])):
            try:
                os.rmdir(dirpath)  # only empty ones: shards waiting for collect_garbage stay
            except OSError:
                pass
        try:
            os.rmdir(os.path.dirname(bucket_dir.rstrip(os.sep)))  # the tier folder, when this was its last bucket
        except OSError:
            pass
    return removed


def retired_buckets(mds_root: str, storage_options: dict | None = None) -> dict[str, dict]:
    """``"tier/HxW"`` -> {retired_at, sources} for every bucket retired and not revived since."""
    raw = try_read_bytes(locate(mds_root, storage_options).child(RETIRED_BUCKETS_BASENAME))
    if raw is None:
        return {}
    obj = json.loads(raw)
    if obj.get("format") != RETIRED_FORMAT:
        raise ValueError(f"{join(mds_root, RETIRED_BUCKETS_BASENAME)}: not a {RETIRED_FORMAT} file")
    return dict(obj.get("buckets", {}))


def _record_retirements(root: Location, mds_root: str, storage_options: dict | None, merged: list[MergedIndex], rels: list[str]) -> None:
    record = retired_buckets(mds_root, storage_options)
    updated = dict(record)
    for rel, m in zip(rels, merged):
        if m.sources:
            updated.pop(rel, None)  # exported into again: alive
        elif m.retired:
            updated[rel] = {"retired_at": datetime.now(UTC).isoformat(timespec="seconds"), "sources": list(m.retired_sources)}
    if updated != record:
        write_bytes(root.child(RETIRED_BUCKETS_BASENAME), dumps_stable({"format": RETIRED_FORMAT, "version": 1, "buckets": updated}))


def merge_all(
    mds_root: str,
    storage_options: dict | None = None,
    *,
    min_stream_samples: int = 1,
    gc_min_age_s: float = SHARD_RETENTION_DAYS * 86400.0,
) -> list[MergedIndex]:
    """Merge every bucket of the tree, in sorted bucket order, and decide its publication.

    A bucket is published (gets its ``index.json``) only with at least ``min_stream_samples``
    unskipped samples (see the module doc). Then each bucket's garbage is collected
    (``export.retention``): shards and merged indexes that stopped being published more than
    ``gc_min_age_s`` ago (callers pass the ``PRX_SHARD_RETENTION_DAYS`` setting) are deleted, the
    rest recorded with the time they stopped. ``storage_options`` reach an object-store root
    (callers pass the settings' own).
    """
    if min_stream_samples < 1:
        raise ValueError(f"min_stream_samples must be at least 1, got {min_stream_samples}")
    root = locate(mds_root, storage_options)
    merged, rels = [], []
    for ref in list_buckets(mds_root, storage_options):
        bucket = root.child(ref.rel)
        before = try_read_bytes(bucket.child(INDEX_BASENAME))
        merged.append(merge_bucket_index(ref.dir(mds_root), storage_options, min_stream_samples=min_stream_samples))
        rels.append(ref.rel)
        folder = local_path(bucket.uri)
        if folder is None or os.path.isdir(folder):  # a retired local bucket may be gone whole
            collect_garbage(root, bucket, before, retention_s=gc_min_age_s)
    _record_retirements(root, mds_root, storage_options, merged, rels)
    return merged


def unpublished_buckets(mds_root: str, storage_options: dict | None = None) -> dict[str, dict]:
    """``"tier/HxW"`` -> the ``unpublished.json`` note of every bucket not published for training."""
    root = locate(mds_root, storage_options)
    found = {}
    for ref in list_buckets(mds_root, storage_options):
        raw = try_read_bytes(root.child(ref.rel, UNPUBLISHED_BASENAME))
        if raw is not None and not is_file(root.child(ref.rel, INDEX_BASENAME)):
            found[ref.rel] = UnpublishedNote.model_validate_json(raw).model_dump()
    return found


def merged_source_digests(index_obj: dict) -> dict[str, str]:
    """The per-source digests recorded in a merged index object ({} if not a merged index)."""
    block = index_obj.get("prx")
    if not block:
        return {}
    return {name: entry.index_sha256 for name, entry in MergedProvenance.model_validate(block).sources.items()}


def check_merged_fresh(bucket_dir: str, storage_options: dict | None = None) -> None:
    """Raise ``StaleIndexError`` when a source was (re)exported after the merge."""
    path = join(bucket_dir, INDEX_BASENAME)
    recorded = merged_source_digests(json.loads(read_bytes(locate(path, storage_options))))
    current = source_index_digests(bucket_dir, storage_options)
    if recorded != current:
        changed = sorted(set(recorded.items()) ^ set(current.items()))
        names = sorted({name for name, _ in changed})
        raise StaleIndexError(f"{path} is stale for sources {names}: re-run the corpus index merge")
