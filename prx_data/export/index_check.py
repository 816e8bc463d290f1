"""Checks of what a bucket's writer can put in front of a reader: the bucket ``index.json``, the
skip-list manifest's sidecar paths and the sidecars' sizes.

A trainer reads an MDS root that other writers can reach, and streaming trusts what it reads:
a shard basename is joined onto the bucket folder (or, on an object-store root, onto the local
cache the download lands in), a ``samples`` count sizes arrays before any shard is opened, and
a sidecar is parsed whole. Both readers of a bucket, the export's stream check
(``export/stream_check.py``) and the training loader (``training/loader.py``), check through
here before they use a name or a count, and every refusal is a ``ValueError`` naming the file
and the reason:

- basenames: ``<name>`` or ``<folder>/<name>``, each part a plain name (no ``..``, ``.``,
  empty part, absolute path, backslash or NUL), and the joined path inside its base folder
  (``inside``: the bucket folder with its symlinks resolved, or the cache folder);
- counts: ``samples`` an integer no larger than the shard's bytes allow (an MDS shard stores a
  4-byte offset per sample) and shard bytes under MDS's 4 GiB offset limit;
- sizes, before anything is parsed: ``index.json`` at most ``MAX_INDEX_BYTES``, a skip-list
  manifest at most ``MAX_MANIFEST_BYTES``, a sidecar at most ``sidecar_byte_cap`` of its
  shard's sample count (what its indices and sample ids can take at most).
"""

from __future__ import annotations

import json
import os
from typing import Any

from prx_data.export.mds_format import FORMAT, VERSION
from prx_data.export.tree import INDEX_BASENAME, SHARD_KEYS

MDS_COLUMNS = frozenset({"image", "caption", "sample_id"})  # what the export writes and its stream check reads
# What the skip-aware loader itself needs of a shard: skip lists index samples, and a run's
# samples are named by id. Other columns are the trainer's; a missing one fails where it reads.
SKIP_COLUMNS = frozenset({"sample_id"})
MAX_INDEX_BYTES = 256 * 1024 * 1024  # ~400k shard entries; a bucket of 100k shards is ~60 MB
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_SHARD_BYTES = 1 << 32  # MDS offsets are uint32
_OFFSET_BYTES = 4
# A sidecar's bytes per skipped sample at most: an index (20 digits), two quoted 32-hex ids, commas.
_SIDECAR_BYTES_PER_SAMPLE = 128
_SIDECAR_FIXED_BYTES = 64 * 1024
MAX_BASENAME_PARTS = 2  # '<source>/<file>' in a merged index, '<file>' in a source's


class IndexCheckError(ValueError):
    """A bucket index, manifest or sidecar a reader must not use; the message names the file."""


def check_size(size: int | None, limit: int, where: str) -> None:
    """Refuse a file of ``size`` bytes over ``limit`` (before it is read or parsed)."""
    if size is not None and size > limit:
        raise IndexCheckError(f"{where} is {size} bytes, over the {limit} a reader accepts; refusing to parse it")


def sidecar_byte_cap(shard_samples: int) -> int:
    """The most bytes a valid sidecar of a shard of ``shard_samples`` samples can take."""
    return _SIDECAR_FIXED_BYTES + _SIDECAR_BYTES_PER_SAMPLE * max(0, int(shard_samples))


def check_relative(name: Any, where: str, *, max_parts: int = MAX_BASENAME_PARTS) -> str:
    """``name`` if it is '<part>' or '<part>/<part>' (up to ``max_parts``) of plain names."""
    if not isinstance(name, str) or not name:
        raise IndexCheckError(f"{where}: the name is {name!r}, not a file name")
    parts = name.split("/")
    if (
        name.startswith("/")
        or os.path.isabs(name)
        or "\\" in name
        or "\x00" in name
        or len(parts) > max_parts
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise IndexCheckError(
            f"{where}: {name!r} is not a plain name inside the bucket folder (at most {max_parts} parts, "
            "no '..', '.', empty part, absolute path, backslash or NUL)"
        )
    return name


def inside(base: str, name: str, where: str, *, resolve: bool) -> str:
    """The path ``name`` names under local folder ``base``, refused when it leaves ``base``
    (``resolve``: with symlinks resolved, for a folder whose writer may plant links)."""
    joined = os.path.join(base, *name.split("/"))
    top = os.path.realpath(base) if resolve else os.path.normpath(os.path.abspath(base))
    path = os.path.realpath(joined) if resolve else os.path.normpath(os.path.abspath(joined))
    if os.path.commonpath([top, path]) != top:
        raise IndexCheckError(f"{where}: {name!r} resolves to {path}, outside {top}")
    return path


def check_entry(info: Any, where: str, columns: frozenset[str] = SKIP_COLUMNS) -> None:
    """One shard entry of an ``index.json``, as streaming would use it (see the module doc)."""
    if not isinstance(info, dict):
        raise IndexCheckError(f"{where} is a {type(info).__name__}, not an object")
    raw_data = info.get("raw_data")
    basename = raw_data.get("basename") if isinstance(raw_data, dict) else None
    if not isinstance(basename, str) or not basename:
        raise IndexCheckError(f"{where} has no raw_data.basename")
    where = f"{where} ({basename})"
    for key in SHARD_KEYS:
        part = info.get(key)
        if part is None and key != "raw_data":
            continue
        if not isinstance(part, dict):
            raise IndexCheckError(f"{where}: {key} is {part!r:.80}, not an object")
        check_relative(part.get("basename"), f"{where}: {key}.basename")
        size = part.get("bytes")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_SHARD_BYTES:
            raise IndexCheckError(f"{where}: {key}.bytes is {size!r:.40}, not a shard size (0 to {MAX_SHARD_BYTES})")
    if info.get("format") != FORMAT or info.get("version") != VERSION:
        raise IndexCheckError(
            f"{where} is format {info.get('format')!r:.40} version {info.get('version')!r:.40}; expected {FORMAT!r} version {VERSION}"
        )
    names = info.get("column_names")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise IndexCheckError(f"{where} has no column_names list")
    lacking = columns - set(names)
    if lacking:
        raise IndexCheckError(f"{where} lacks column(s) {sorted(lacking)} (has {names})")
    for key in ("column_encodings", "column_sizes"):
        if not isinstance(info.get(key), list) or len(info[key]) != len(names):
            raise IndexCheckError(f"{where}: {key} does not match column_names {names}")
    samples = info.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
        raise IndexCheckError(f"{where}: samples is {samples!r:.40}, not a count")
    raw_bytes = info["raw_data"]["bytes"]
    if samples * _OFFSET_BYTES > raw_bytes:
        raise IndexCheckError(
            f"{where}: samples is {samples}, more than a shard of {raw_bytes} bytes can hold ({_OFFSET_BYTES} bytes of offset per sample)"
        )


def parse_index(raw: bytes, where: str, columns: frozenset[str] = SKIP_COLUMNS) -> list[dict[str, Any]]:
    """The checked shard entries of an ``index.json``'s bytes (``where`` names the file); each
    shard must hold ``columns``."""
    return parse_index_object(raw, where, columns)["shards"]


def parse_index_object(raw: bytes, where: str, columns: frozenset[str] = SKIP_COLUMNS) -> dict[str, Any]:
    """An ``index.json``'s bytes as a checked object (``where`` names the file)."""
    check_size(len(raw), MAX_INDEX_BYTES, where)
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexCheckError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise IndexCheckError(f"{where} holds a JSON {type(obj).__name__}, not an object")
    if obj.get("version") != 2:  # streaming's index version, not the shard format's
        raise IndexCheckError(f"{where} has version {obj.get('version')!r:.40}; streaming reads version 2")
    shards = obj.get("shards")
    if not isinstance(shards, list) or not shards:
        raise IndexCheckError(f"{where} lists no shards ('shards' is {shards!r:.80})")
    for number, info in enumerate(shards):
        check_entry(info, f"{where}: shard entry {number}", columns)
    return obj


def read_local_index(folder: str, where: str | None = None, *, filename: str = INDEX_BASENAME) -> list[dict[str, Any]]:
    """``parse_index`` of ``<folder>/index.json`` (or ``filename``, a download beside it) on this machine, its size checked first, every
    basename checked to stay inside ``folder`` (symlinks resolved), and a merged index's shard
    list checked against its ``prx`` block (``check_merged_shards``)."""
    path = os.path.join(folder, filename)
    where = where or path
    try:
        check_size(os.path.getsize(path), MAX_INDEX_BYTES, where)
        with open(path, "rb") as handle:
            raw = handle.read(MAX_INDEX_BYTES + 1)
    except FileNotFoundError as exc:
        raise IndexCheckError(f"{where} does not exist") from exc
    obj = parse_index_object(raw, where)
    shards = obj["shards"]
    check_merged_shards(shards, obj.get("prx"), where)
    for number, info in enumerate(shards):
        for key in SHARD_KEYS:
            if info.get(key):
                inside(folder, info[key]["basename"], f"{where}: shard entry {number}", resolve=True)
    return shards


def check_merged_shards(shards: list[dict[str, Any]], provenance: Any, where: str) -> None:
    """A merged index's shard list against its own ``prx`` block (what the skip-list manifest
    is built against): every basename under a source the block names, and each source's
    samples the block's count. ``provenance`` is the raw block (None: not a merged index)."""
    if provenance is None:
        return
    sources = provenance.get("sources") if isinstance(provenance, dict) else None
    if not isinstance(sources, dict):
        raise IndexCheckError(f"{where}: its prx block names no sources")
    counted: dict[str, int] = dict.fromkeys(sources, 0)
    for number, info in enumerate(shards):
        basename = info["raw_data"]["basename"]
        source = basename.split("/", 1)[0] if "/" in basename else None
        if source not in counted:
            raise IndexCheckError(f"{where}: shard entry {number} ({basename}) is not under a source the index names ({sorted(sources)})")
        counted[source] += info["samples"]
    for source, entry in sorted(sources.items()):
        recorded = entry.get("samples") if isinstance(entry, dict) else None
        if recorded != counted[source]:
            raise IndexCheckError(
                f"{where}: source {source} has {counted[source]} samples in the shard list, the index records {recorded!r:.40}"
            )
