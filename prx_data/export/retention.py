"""What stopped being published stays for a retention period, counted from when it stopped.

A trainer opens a bucket's merged ``index.json`` once and reads the shards it names for the whole
run (days to weeks). A re-export, a rewrite past the skip share or a retired bucket makes the next
merge name other shards; the old ones are garbage only once no trainer that opened the tree
before can still need them. Their write time says nothing about that (a shard written a month
ago may have been published until a minute ago), so each bucket keeps ``superseded.json``:
every run-named object no index names any more, with the time a merge first found it unnamed,
and the replaced merged indexes, copied to ``_superseded/`` when a merge replaces or removes
``index.json`` (a trainer or an audit can reopen the tree as it was). ``collect_garbage`` deletes
an entry only when that time is older than the retention (``PRX_SHARD_RETENTION_DAYS``, 7 days
by default). Running it twice, or merging twice in one run, changes no time: only the first
sighting counts.

Never candidates: what the current merged index, the current source indexes or the merged index
just replaced name; objects of runs still publishing (their ``_commits/<source>.<run>.running``
marker); skip-list sidecars; names that do not start with a run id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from prx_data.core.storage import Location, delete_file, list_dir, locate, try_read_bytes, write_bytes, write_if_changed
from prx_data.export._fs import dumps_stable, sha256_bytes
from prx_data.export.commit import run_of_object
from prx_data.export.tree import (
    COMMITS_DIR,
    INDEX_BASENAME,
    RUNNING_SUFFIX,
    SHARD_KEYS,
    SKIP_INFIX,
    SOURCE_RE,
    SUPERSEDED_BASENAME,
    SUPERSEDED_DIR,
    list_buckets,
    running_marker_name,
    superseded_index_name,
)

logger = logging.getLogger(__name__)

SUPERSEDED_FORMAT: Final = "prx-superseded"


def referenced(raw: bytes | None) -> set[str]:
    """Shard file basenames an index names ('<source>/<name>' in a merged index)."""
    if raw is None:
        return set()
    names = set()
    for info in json.loads(raw).get("shards", ()):
        for key in SHARD_KEYS:
            if info.get(key):
                names.add(info[key]["basename"])
    return names


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def read_superseded(bucket: Location) -> dict[str, datetime]:
    """``'<source>/<name>'`` or ``'_superseded/<name>'`` -> when it stopped being published."""
    raw = try_read_bytes(bucket.child(SUPERSEDED_BASENAME))
    if raw is None:
        return {}
    try:
        obj = json.loads(raw)
        if obj.get("format") != SUPERSEDED_FORMAT:
            raise ValueError(f"format is {obj.get('format')!r}")
        return {str(name): datetime.fromisoformat(when) for name, when in dict(obj["objects"]).items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # Unreadable times: every entry counts as stopped now, so nothing is deleted early.
        logger.warning("%s is malformed (%s); retention restarts for what it listed", bucket.child(SUPERSEDED_BASENAME).uri, exc)
        return {}


def _write_superseded(bucket: Location, entries: dict[str, datetime]) -> None:
    loc = bucket.child(SUPERSEDED_BASENAME)
    if not entries:
        if try_read_bytes(loc) is not None:
            delete_file(loc)
        return
    body = {"format": SUPERSEDED_FORMAT, "version": 1, "objects": {name: _stamp(when) for name, when in sorted(entries.items())}}
    write_if_changed(loc, dumps_stable(body))


def keep_replaced_index(bucket: Location, previous: bytes | None, current: bytes | None, now: datetime) -> str | None:
    """Copy a merged index this merge replaced or removed into ``_superseded/``; its name or None."""
    if previous is None or previous == current:
        return None
    name = superseded_index_name(now.strftime("%Y%m%dT%H%M%SZ"), sha256_bytes(previous))
    write_bytes(bucket.child(*name.split("/")), previous)
    return name


@dataclass
class Collected:
    deleted: list[str] = field(default_factory=list)  # URIs
    retained: int = 0  # superseded entries kept, inside their retention


def collect_garbage(
    root: Location,
    bucket: Location,
    previous_index: bytes | None = None,
    *,
    retention_s: float,
    now: datetime | None = None,
) -> Collected:
    """Record what no index of ``bucket`` names any more and delete what stopped being
    published more than ``retention_s`` ago. ``previous_index``: the merged index this merge
    replaced (its shards are kept through this merge, its bytes copied to ``_superseded/``)."""
    now = now or datetime.now(UTC)
    current = try_read_bytes(bucket.child(INDEX_BASENAME))
    entries = read_superseded(bucket)
    copied = keep_replaced_index(bucket, previous_index, current, now)
    if copied:
        entries.setdefault(copied, now)
    live = referenced(current)
    just_replaced = referenced(previous_index)
    running = {entry.name for entry in list_dir(root.child(COMMITS_DIR)) if entry.name.endswith(RUNNING_SUFFIX)}
    seen: set[str] = set()
    candidates: list[tuple[str, Location]] = []
    for folder in list_dir(bucket):
        if not (folder.is_dir and SOURCE_RE.fullmatch(folder.name)):
            continue
        source_dir = bucket.child(folder.name)
        live |= {f"{folder.name}/{name}" for name in referenced(try_read_bytes(source_dir.child(INDEX_BASENAME)))}
        for entry in list_dir(source_dir):
            run = run_of_object(entry.name)
            if entry.is_dir or run is None or SKIP_INFIX in entry.name or running_marker_name(folder.name, run) in running:
                continue
            candidates.append((f"{folder.name}/{entry.name}", source_dir.child(entry.name)))
    for entry in list_dir(bucket.child(SUPERSEDED_DIR)):
        if not entry.is_dir:
            candidates.append((f"{SUPERSEDED_DIR}/{entry.name}", bucket.child(SUPERSEDED_DIR, entry.name)))
    result = Collected()
    for name, loc in candidates:
        seen.add(name)
        if name in live:
            entries.pop(name, None)  # published again
            continue
        stopped = entries.setdefault(name, now)
        if name in just_replaced or (now - stopped).total_seconds() < retention_s:
            result.retained += 1
            continue
        delete_file(loc)
        entries.pop(name)
        result.deleted.append(loc.uri)
    for name in set(entries) - seen:
        entries.pop(name)  # gone by other means
    _write_superseded(bucket, entries)
    return result


def collect_all(
    mds_root: str, storage_options: dict | None = None, *, retention_s: float, buckets: Iterable[str] | None = None
) -> Collected:
    """``collect_garbage`` over every bucket of the tree (``prx-data gc``), merging nothing."""
    root = locate(mds_root, storage_options)
    total = Collected()
    rels = list(buckets) if buckets is not None else [ref.rel for ref in list_buckets(mds_root, storage_options)]
    for rel in rels:
        done = collect_garbage(root, root.child(rel), retention_s=retention_s)
        total.deleted += done.deleted
        total.retained += done.retained
    return total
