"""The one commit protocol of the MDS tree, the same on a local folder and an object store.

Writers (``export.shard_writer``), on any node, put shards straight into the source's folder
of each bucket under names that start with the run id (``<run>.<tag>.shard.NNNNN.mds``), so
nothing a reader may be using is ever overwritten. Readers only resolve
``<bucket>/<source>/index.json``. A run of a source:

1. ``begin``: an in-flight marker ``_commits/<source>.<run>.running`` (garbage collection
   leaves the run's objects alone while it exists), after rolling forward or cleaning up what
   earlier runs of the source left (``recover``);
2. the writers write their shards (nothing visible yet);
3. ``publish``: each bucket's new index is staged as ``<bucket>/<source>/<run>.index.json``,
   then the journal ``_commits/<source>.json`` is written (the commit point: one PUT, or one
   rename locally); then the flip: each staged index is copied over ``index.json`` (one write
   per bucket) and ``index.json`` is deleted from buckets the source left; then the journal,
   the staged indexes and the marker are deleted.

A run that dies before the journal exists changes nothing readers see; the next run of the
source deletes its objects (the ones no ``index.json`` names) and its marker. A run that dies
after it is rolled forward by the next run. Shards replaced by a commit stay until
``corpus_index`` has merged past them (``corpus_index.collect_garbage``), so a trainer holding
the previous merged index keeps working. There is no lock here: one export per source at a
time is the caller's job (``export_source`` holds the source's table lock; Dagster runs one
partition per source).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.storage import Location, delete_file, exists, list_dir, locate, try_read_bytes, write_bytes
from prx_data.export._fs import dumps_stable
from prx_data.export.tree import (
    COMMITS_DIR,
    INDEX_BASENAME,
    RUNNING_SUFFIX,
    SHARD_KEYS,
    SKIP_INFIX,
    BucketRef,
    check_source,
    journal_name,
    list_buckets,
    running_marker_name,
    staged_index_name,
)

if TYPE_CHECKING:  # the commit reads only what the writers returned
    from prx_data.export.shard_writer import WrittenShards

logger = logging.getLogger(__name__)

RUN_ID_RE = re.compile(r"^\d{8}T\d{6}-[0-9a-f]{8}$")


def new_run_id() -> str:
    # Sorts by time, and has no dot: object names split '<run id>.<name>' on the first dot.
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def run_of_object(name: str) -> str | None:
    """The run id an object name starts with, or None for index.json, sidecars' owners etc."""
    head = name.split(".", 1)[0]
    return head if RUN_ID_RE.match(head) else None


@dataclass
class Published:
    buckets: list[BucketRef]  # buckets the source has after the commit
    removed: list[BucketRef]  # buckets it had before and no longer has
    committed: bool  # False: nothing to install or remove, nothing was written


def _referenced(raw: bytes | None) -> set[str]:
    names: set[str] = set()
    for info in json.loads(raw).get("shards", ()) if raw else ():
        for key in SHARD_KEYS:
            if info.get(key):
                names.add(info[key]["basename"])
    return names


def source_buckets(root: Location, mds_root: str, source: str, storage_options: dict | None) -> list[BucketRef]:
    """Buckets where the source is published (has an ``index.json``)."""
    return [ref for ref in list_buckets(mds_root, storage_options) if exists(root.child(ref.rel, source, INDEX_BASENAME))]


def _apply(root: Location, journal: dict) -> None:
    """Idempotent; a staged index that is gone was applied and cleaned up already."""
    source, run_id = journal["source"], journal["run_id"]
    for rel in journal["install"]:
        data = try_read_bytes(root.child(rel, source, staged_index_name(run_id)))
        if data is not None:
            write_bytes(root.child(rel, source, INDEX_BASENAME), data)
    for rel in journal["remove"]:
        delete_file(root.child(rel, source, INDEX_BASENAME))


def _finish(root: Location, journal: dict) -> None:
    source, run_id = journal["source"], journal["run_id"]
    delete_file(root.child(COMMITS_DIR, journal_name(source)))
    for rel in journal["install"]:
        delete_file(root.child(rel, source, staged_index_name(run_id)))
    delete_file(root.child(COMMITS_DIR, running_marker_name(source, run_id)))


def abandon(mds_root: str, source: str, run_id: str, storage_options: dict | None = None) -> list[str]:
    """Delete what an uncommitted run wrote (objects no ``index.json`` names) and its marker.

    Returns the URIs deleted. Never touches a published shard, a sidecar or another run.
    """
    root = locate(mds_root, storage_options)
    raw = try_read_bytes(root.child(COMMITS_DIR, journal_name(source)))
    if raw is not None and json.loads(raw).get("run_id") == run_id:
        return []  # past its commit point: the next run rolls it forward, never deletes it
    deleted = []
    for ref in list_buckets(mds_root, storage_options):
        folder = root.child(ref.rel, source)
        entries = list_dir(folder)
        if not entries:
            continue
        live = _referenced(try_read_bytes(folder.child(INDEX_BASENAME)))
        for entry in entries:
            if entry.is_dir or SKIP_INFIX in entry.name or entry.name in live or run_of_object(entry.name) != run_id:
                continue
            delete_file(folder.child(entry.name))
            deleted.append(folder.child(entry.name).uri)
    delete_file(root.child(COMMITS_DIR, running_marker_name(source, run_id)))
    return deleted


def recover(mds_root: str, source: str, storage_options: dict | None = None) -> dict:
    """Repair what earlier runs of ``source`` left: roll a committed publish forward, delete the
    objects and markers of runs that died before their commit point.

    Assumes no other run of the source is live (see the module doc). Returns
    ``{"rolled_forward": run or None, "abandoned": [runs], "deleted": [uris]}``.
    """
    check_source(source)
    root = locate(mds_root, storage_options)
    report: dict = {"rolled_forward": None, "abandoned": [], "deleted": []}
    raw = try_read_bytes(root.child(COMMITS_DIR, journal_name(source)))
    if raw is not None:
        journal = json.loads(raw)
        logger.warning("rolling forward interrupted export %s of %s under %s", journal["run_id"], source, mds_root)
        _apply(root, journal)
        _finish(root, journal)
        report["rolled_forward"] = journal["run_id"]
    prefix, suffix = f"{source}.", RUNNING_SUFFIX
    for entry in list_dir(root.child(COMMITS_DIR)):
        if entry.name.startswith(prefix) and entry.name.endswith(suffix):
            run = entry.name[len(prefix) : -len(suffix)]
            if RUN_ID_RE.match(run):
                logger.warning("cleaning up export %s of %s, which died before its commit", run, source)
                report["deleted"] += abandon(mds_root, source, run, storage_options)
                report["abandoned"].append(run)
    return report


def begin(mds_root: str, source: str, run_id: str, storage_options: dict | None = None) -> dict:
    """Repair earlier runs, then mark ``run_id`` in flight. Call before any writer starts."""
    if not RUN_ID_RE.match(run_id):
        raise ValueError(f"run id {run_id!r} is not of the form {RUN_ID_RE.pattern} (use new_run_id())")
    report = recover(mds_root, source, storage_options)
    root = locate(mds_root, storage_options)
    write_bytes(root.child(COMMITS_DIR, running_marker_name(source, run_id)), dumps_stable({"source": source, "run_id": run_id}))
    return report


def publish(
    mds_root: str,
    source: str,
    run_id: str,
    parts: list[WrittenShards],
    *,
    storage_options: dict | None = None,
    rewrite: set[BucketRef] | None = None,
    allow_empty: bool = False,
) -> Published:
    """Make the parts' shards the source's export (see the module doc for ``rewrite``).

    Without ``rewrite`` the parts replace the whole export, and buckets without parts' shards
    are removed (which needs ``allow_empty`` when nothing at all was written). With it, the
    parts' shards are appended to the published ones, except in the buckets listed, which are
    replaced (removed when nothing was written to them).
    """
    root = locate(mds_root, storage_options)
    for part in parts:
        if part.source != source or part.run_id != run_id:
            raise ValueError(f"part of {part.source!r} run {part.run_id} cannot be published as {source!r} run {run_id}")
    if len({part.tag for part in parts}) != len(parts):
        raise ValueError("two parts share a writer tag; their shard names would collide")
    lineage = [part.lineage for part in parts if part.lineage.num_rows]
    ids = pc.count_distinct(pa.chunked_array([c for t in lineage for c in t["sample_id"].chunks], pa.string())).as_py() if lineage else 0
    if ids != sum(t.num_rows for t in lineage):
        raise ValueError(f"source {source!r}: duplicate sample_id in the partition")
    shards: dict[BucketRef, list[dict]] = {}
    for part in parts:
        for ref, entries in part.shards.items():
            if entries:
                shards.setdefault(ref, []).extend(entries)
    if not shards and not allow_empty and rewrite is None:
        raise ValueError(f"source {source!r}: no samples to export (pass allow_empty=True to remove it)")
    previous = source_buckets(root, mds_root, source, storage_options)
    if rewrite is None:
        removed = sorted(set(previous) - set(shards))
        now_has = sorted(shards)
    else:
        removed = sorted((set(previous) & set(rewrite)) - set(shards))
        now_has = sorted((set(previous) - set(removed)) | set(shards))
    if not shards and not removed:
        delete_file(root.child(COMMITS_DIR, running_marker_name(source, run_id)))
        return Published(buckets=now_has, removed=[], committed=False)
    for ref in sorted(shards):
        entries = shards[ref]
        if rewrite is not None and ref in previous and ref not in rewrite:
            current = try_read_bytes(root.child(ref.rel, source, INDEX_BASENAME))
            if current is None:
                raise RuntimeError(f"{ref.rel}/{source}/{INDEX_BASENAME} vanished while appending to it")
            entries = json.loads(current)["shards"] + entries
        index = {"shards": entries, "version": 2}
        write_bytes(root.child(ref.rel, source, staged_index_name(run_id)), json.dumps(index, sort_keys=True).encode())
    journal = {"source": source, "run_id": run_id, "install": [r.rel for r in sorted(shards)], "remove": [r.rel for r in removed]}
    write_bytes(root.child(COMMITS_DIR, journal_name(source)), dumps_stable(journal))  # the commit point
    _apply(root, journal)
    _finish(root, journal)
    return Published(buckets=now_has, removed=removed, committed=True)
