"""What a source's run was made from, so ``prx-data run`` skips a source whose inputs are unchanged.

A source's input fingerprint covers everything its chain reads: the spec file's bytes, the
listing (path, size, mtime) of every file under its location (and under ``root:`` when the spec
sets one), the opt-out folder's version (ingest matches opt-outs), the code version of every
asset in the Definitions, and the settings that change outputs. After a successful run it is
recorded beside the tables (``<lance_root>/_run_inputs/<source>.json``) with the versions of the
source's tables; a later run skips the source only when the fingerprint and the table versions
both match (a table rolled back, deleted or written by another run makes it run).

The listing is a superset on purpose: a glob location is listed from its fixed prefix, so any
change under it runs the source (never a missed change, at worst a run that finds nothing).
Works on local and object-store (``s3://``) roots and locations.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prx_data.core.storage import (
    glob_entries,
    is_file,
    locate,
    try_read_bytes,
    write_bytes,
)
from prx_data.ingest.read.webdataset import WDS_IMAGE_EXTENSIONS

RECORDS = "_run_inputs"
CORPUS = "_corpus"
# Settings that do not change what a run writes: where Ray is, credentials, lock timing.
_VOLATILE_SETTINGS = {"ray_address", "storage_options", "postgres_url", "lock_wait_s", "lock_ttl_s", "startup_checks", "kuberay_spec"}
# Past this many files the listing is not worth its time: the source just runs.
MAX_LISTED = 2_000_000


class ListingTooLarge(Exception):
    pass


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _fixed_prefix(location: str) -> str:
    """The part of a location before its first glob character (a folder or file to list)."""
    if not glob.has_magic(location):
        return location
    parts = location.split("/")
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return "/".join(fixed) or "."


def _local_listing(path: Path) -> list[tuple[str, int, int]]:
    if path.is_file():
        st = path.stat()
        return [(path.name, st.st_size, st.st_mtime_ns)]
    found = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except OSError:
                continue  # vanished while listed: the next run sees the folder as it is then
            # An undecodable name stays as its surrogate escapes (json.dumps escapes them).
            found.append((os.path.relpath(full, path).replace(os.sep, "/"), st.st_size, st.st_mtime_ns))
            if len(found) > MAX_LISTED:
                raise ListingTooLarge(str(path))
    return found


def _remote_listing(uri: str, options: Mapping[str, str] | None) -> list[tuple[str, int, str]]:

    loc = locate(uri, options)
    if is_file(loc):
        info = loc.fs.get_file_info(loc.path)
        return [(os.path.basename(loc.path), info.size, str(info.mtime))]
    entries = glob_entries(loc, "*", recursive=True)
    if len(entries) > MAX_LISTED:
        raise ListingTooLarge(uri)
    return [(e.name, e.size or 0, str(e.mtime)) for e in entries]


def listing(location: str | Path, options: Mapping[str, str] | None = None) -> list:
    """(name, size, mtime) of every file under ``location`` (a file, folder or glob)."""
    location = str(location)
    prefix = _fixed_prefix(location)
    if "://" in prefix:
        return _remote_listing(prefix, options)
    path = Path(prefix)
    return _local_listing(path) if path.exists() else []


def settings_digest(settings) -> str:
    return _digest({k: v for k, v in settings.model_dump(mode="json").items() if k not in _VOLATILE_SETTINGS})


@dataclass(frozen=True)
class SourceInputs:
    source: str
    fingerprint: str | None  # None: could not be listed (too large): always runs
    # Rows the listing suggests (``listed_rows``); None when it could not be listed.
    listed_rows: int | None = None


def source_inputs(source, *, code_versions: Mapping[str, str], settings, optout_version: str) -> SourceInputs:
    """``source``: a ``RegisteredSource``."""
    try:
        location = listing(_resolved(source.spec.location, source.path), settings.storage_options)
        root = listing(_resolved(source.spec.root, source.path), settings.storage_options) if source.spec.root else None
        parts = {
            "spec_file": hashlib.sha256(Path(source.path).read_bytes()).hexdigest(),
            "location": location,
            "root": root,
            "code_versions": dict(sorted(code_versions.items())),
            "settings": settings_digest(settings),
            "optout": optout_version,
        }
    except (ListingTooLarge, OSError):
        return SourceInputs(source.name, None)
    return SourceInputs(source.name, _digest(parts), listed_rows(location + (root or [])))


# A guess at the bytes of a row inside a container file (Parquet, JSONL, tar, Lance): an image
# with its metadata. Only decides whether to start Ray early (``listed_rows``).
_CONTAINER_BYTES_PER_ROW = 64 * 1024


def listed_rows(entries: Iterable[tuple]) -> int:
    """A cheap guess at the rows a listing holds: one per image file, and one per 64 KiB of
    other files (captions and sidecars add next to nothing). It decides only whether a run
    starts Ray at once (``run_plan.RunPlan.expects_ray``); a URL list is underestimated, and then
    ingest starts Ray once it has written enough rows."""
    rows = 0
    for name, size, *_ in entries:
        suffix = os.path.splitext(name)[1][1:].lower()
        rows += 1 if suffix in WDS_IMAGE_EXTENSIONS else (size or 0) // _CONTAINER_BYTES_PER_ROW
    return rows


def _resolved(location: str, spec_path) -> str:
    if "://" in location:
        return location
    loc = Path(location).expanduser()
    return str(loc if loc.is_absolute() else Path(spec_path).parent / loc)


def table_versions(uris: Iterable[str], options: Mapping[str, str] | None) -> dict[str, int | None]:
    # lazy: lance (the run has loaded it already; a plain import here would cost the CLI)
    from prx_data.core.lance_io import open_table

    out = {}
    for uri in uris:
        ds = open_table(uri, dict(options or {}))
        out[uri] = None if ds is None else int(ds.version)
    return out


class RunRecords:
    """The per-source (and corpus) records under ``<lance_root>/_run_inputs``."""

    def __init__(self, lance_root: str, options: Mapping[str, str] | None = None) -> None:
        self.root = lance_root.rstrip("/")
        self.options = dict(options or {})

    def _loc(self, name: str):
        return locate(f"{self.root}/{RECORDS}/{name}.json", self.options)

    def read(self, name: str) -> dict | None:
        try:
            raw = try_read_bytes(self._loc(name))
            return None if raw is None else json.loads(raw)
        except (OSError, ValueError):
            return None  # unreadable: treated as never run

    def write(self, name: str, fingerprint: str, tables: Mapping[str, int | None], listed_rows: int | None = None) -> None:
        record = {"fingerprint": fingerprint, "tables": dict(tables), "listed_rows": listed_rows}
        # A local write makes its folder; an object store has none to make.
        write_bytes(self._loc(name), json.dumps(record, sort_keys=True).encode())

    def listed_rows(self, name: str) -> int:
        """The ``listed_rows`` of the source's last successful run (0: none, or not recorded)."""
        value = (self.read(name) or {}).get("listed_rows")
        return value if isinstance(value, int) else 0

    def unchanged(self, name: str, fingerprint: str | None, tables: Mapping[str, int | None]) -> bool:
        if fingerprint is None:
            return False
        record = self.read(name)
        return record is not None and bool(record) and record.get("fingerprint") == fingerprint and record.get("tables") == dict(tables)


def corpus_fingerprint(
    sources: Mapping[str, SourceInputs],
    tables: Mapping[str, int | None],
    *,
    code_versions: Mapping[str, str],
    settings,
    optout_version: str,
) -> str:
    return _digest(
        {
            "sources": {name: inputs.fingerprint for name, inputs in sorted(sources.items())},
            "tables": dict(sorted(tables.items())),
            "code_versions": dict(sorted(code_versions.items())),
            "settings": settings_digest(settings),
            "optout": optout_version,
        }
    )
