"""Retiring a source whose spec was removed: keep its data, take it out of training.

Policy (docs/ui.md#retiring-a-source):

- the source's export leaves the training tree: each ``<tier>/<bucket>/<source>/`` shard folder
  moves to ``<mds_root>/_retired/<source>/<stamp>/<tier>/<bucket>/``, and its exports tables
  (``exports/<source>.lance`` and the superseded placements) move to
  ``<lance_root>/retired/<source>/<stamp>/``; the merged bucket indexes are then rebuilt, so no
  published index names a moved shard;
- the source's own table (``sources/<source>.lance``: rows, phashes, captions, labels) stays where
  it is, so re-adding the spec later re-ingests incrementally and reuses its captions, and the
  export starts afresh (no exports table) and writes every usable row again;
- a receipt (``receipt.json`` beside the moved shards) says what moved where and when; the data
  card lists every receipt.

``_retired`` is not a tier (tiers are numbers), so no bucket listing, merge or trainer sees it.
The ``retire_source`` job (``defs/ingest/retire_job.py``) runs ``archive_source``.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import pyarrow.fs as pafs

from prx_data.core.paths import RETIRED_DIR as RETIRED_LANCE
from prx_data.core.paths import StoragePaths
from prx_data.core.storage import Location, delete_tree, exists, is_file, join, list_dir, locate, read_bytes, write_bytes
from prx_data.export.tree import INDEX_BASENAME, RETIRE_RECEIPT_BASENAME, RETIRED_DIR, list_buckets, retired_source_dir


@dataclass
class Receipt:
    source: str
    retired_at: str
    reason: str
    moved: dict[str, str] = field(default_factory=dict)  # from -> to
    kept: list[str] = field(default_factory=list)
    samples_moved: int = 0


def stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def _move(src: Location, dst: Location) -> None:
    """A folder moved as a whole: one rename on a local disk; copy then delete on an object store
    (the copy is complete before the original goes, so an interruption loses nothing)."""
    if isinstance(src.fs, pafs.LocalFileSystem):
        os.makedirs(os.path.dirname(dst.path), exist_ok=True)
        os.replace(src.path, dst.path)
        return
    pafs.copy_files(src.path, dst.path, source_filesystem=src.fs, destination_filesystem=dst.fs)
    delete_tree(src)


def _samples(source_dir: Location) -> int:
    index = source_dir.child(INDEX_BASENAME)
    if not is_file(index):
        return 0
    try:
        return sum(int(s.get("samples", 0)) for s in json.loads(read_bytes(index)).get("shards", []))
    except (ValueError, TypeError):
        return 0


def archive_source(paths: StoragePaths, source: str, *, reason: str, options: dict | None = None, now: datetime | None = None) -> Receipt:
    """Move ``source``'s export out of the training tree (see the module docstring)."""
    when = stamp(now)
    receipt = Receipt(source=source, retired_at=when, reason=reason)
    mds_archive = locate(retired_source_dir(paths.mds_root, source, when), options)
    for ref in list_buckets(paths.mds_root, options):
        src = locate(ref.source_dir(paths.mds_root, source), options)
        if not exists(src):
            continue
        receipt.samples_moved += _samples(src)
        dst = mds_archive.child(ref.rel)
        _move(src, dst)
        receipt.moved[src.uri] = dst.uri
    lance_archive = locate(paths.retired_dir(source, when), options)
    for uri in (paths.exports_table(source), paths.superseded_table(source)):
        src = locate(uri, options)
        if exists(src):
            dst = lance_archive.child(posixpath.basename(uri.rstrip("/")))
            _move(src, dst)
            receipt.moved[src.uri] = dst.uri
    raw = locate(paths.raw_table(source), options)
    if exists(raw):
        receipt.kept.append(raw.uri)
    write_bytes(mds_archive.child(RETIRE_RECEIPT_BASENAME), json.dumps(asdict(receipt), indent=2).encode())
    return receipt


def receipt_path(mds_root: str, receipt: Receipt) -> str:
    """Where ``receipt`` was written (beside the retired source's shards)."""
    return join(retired_source_dir(mds_root, receipt.source, receipt.retired_at), RETIRE_RECEIPT_BASENAME)


def receipts(mds_root: str, options: dict | None = None, source: str | None = None) -> list[Receipt]:
    """Every retirement recorded under ``mds_root``, oldest first (of ``source`` only, if given)."""
    base = locate(join(mds_root, RETIRED_DIR), options)
    out = []
    for entry in list_dir(base):
        if not entry.is_dir or (source is not None and entry.name != source):
            continue
        for run in list_dir(base.child(entry.name)):
            loc = base.child(entry.name, run.name, RETIRE_RECEIPT_BASENAME)
            if run.is_dir and is_file(loc):
                out.append(Receipt(**json.loads(read_bytes(loc))))
    return sorted(out, key=lambda r: (r.retired_at, r.source))


def receipts_markdown(items: list[Receipt]) -> str:
    """The data card's section on retired sources."""
    if not items:
        return ""
    lines = ["", "## Retired sources", "", "| source | retired (UTC) | samples taken out of training | reason |", "|---|---|---|---|"]
    lines += [f"| {r.source} | {r.retired_at} | {r.samples_moved} | {r.reason} |" for r in items]
    lines.append("")
    lines.append(
        f"Their shards and exports tables are kept under `{RETIRED_DIR}/` and `{RETIRED_LANCE}/` (see docs/ui.md#retiring-a-source)."
    )
    return "\n".join(lines) + "\n"
