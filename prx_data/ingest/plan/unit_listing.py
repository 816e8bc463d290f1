"""Input units: the pieces of a source that ingest reads independently (one Ray task each).

The driver lists units cheaply (a folder walk, a glob, Parquet footers); a worker reads one
unit with ``ingest.read.units.read_unit`` and gets exactly the items the whole-source reader
would yield for that piece, in the same order, so position keys and error rows do not depend on
how a source is split. Units are yielded lazily: a folder of 100M files is never a list in the
driver. With a change plan (``unit_manifest``), an object whose signature is unchanged is not
a unit but ``Kept``: never opened.

- image folders: batches of ``folder_batch`` files, in walk order;
- WebDataset: one tar shard;
- JSONL: one file, or runs of about ``jsonl_lines`` lines (byte ranges that start and end at a
  line start, found by one sequential scan in the driver), so a single big URL list is read and
  downloaded by ``workers`` tasks at once;
- Parquet: one file, or runs of row groups of about ``parquet_rows`` rows (a URL list in one
  big file becomes several URL batches);
- URL lists read by ``workers`` > 1: JSONL runs and Parquet pieces of ``URL_UNIT_ITEMS`` items
  (a Parquet row group is cut into row ranges), so a list of a few thousand URLs is downloaded
  by every worker's own session, not by one;
- small JSONL and Parquet files that are not split: consecutive files grouped into one unit
  (``GROUP_BYTES``), each file read whole; a kept file (unchanged) ends a group;
- Lance: the whole table (one unit).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePath

from prx_data.core.lance_io import chunked
from prx_data.ingest.plan.unit_manifest import KEPT_FOLDER_UNIT, PIECES, ChangePlan, Kept
from prx_data.ingest.read.image_folder import image_folder_context, walk_image_folder
from prx_data.ingest.read.jsonl import line_runs
from prx_data.ingest.read.parquet import row_group_runs
from prx_data.ingest.read.source_files import list_sized_files
from prx_data.ingest.read.units import Unit, source_context, source_root
from prx_data.ingest.registry import RegisteredSource

FOLDER_BATCH = 512
PARQUET_UNIT_ROWS = 8192
# A URL line is ~100-300 bytes: 8192 lines is a unit of a few MB and a few minutes of downloads.
JSONL_UNIT_LINES = 8192
# A URL costs ~3 ms of one worker's CPU and ~100 ms of waiting: 512 URLs is a few seconds of
# downloads, small enough that two workers share a 1,000-URL list, large enough that each
# unit's tail (its last slow requests) is a small part of it.
URL_UNIT_ITEMS = 512
# Small JSONL and Parquet files (at most 1/16 of this) are read in groups of about this many
# bytes (and at most ``jsonl_lines`` / ``parquet_rows`` files): a unit per file costs a task, a
# Lance fragment and the driver's bookkeeping each, ~3 ms a file and memory growing with the
# file count. URL lists group fewer bytes (a URL line is ~200 bytes), as they cut units smaller.
GROUP_BYTES = 16 * 1024 * 1024
URL_GROUP_BYTES = URL_UNIT_ITEMS * 256


def list_units(
    source: RegisteredSource,
    folder_batch: int | None = None,
    parquet_rows: int | None = None,
    storage_options: dict | None = None,
    jsonl_lines: int | None = None,
    plan: ChangePlan | None = None,
    workers: int | None = None,
) -> Iterator[Unit | Kept]:
    """The source's units in reading order; raises SourceUnavailable as the readers do.
    ``storage_options`` reach an object-store location (see ``read.object_store``). With a ``plan``,
    an object whose signature is unchanged is yielded as ``Kept`` and never opened (a JSONL
    file is not scanned for line runs, a Parquet footer is not read). ``workers`` (default: the
    spec's) > 1 cuts URL lists into download-sized units."""
    url_units = source.spec.fields.image_kind == "url" and (workers or source.spec.workers) > 1
    if url_units:
        jsonl_lines = jsonl_lines or URL_UNIT_ITEMS
        parquet_rows = parquet_rows or URL_UNIT_ITEMS
    folder_batch = folder_batch or FOLDER_BATCH
    parquet_rows = parquet_rows or PARQUET_UNIT_ROWS
    jsonl_lines = jsonl_lines or JSONL_UNIT_LINES
    shape = source.spec.shape
    location = source.resolve_location()
    if shape == "image_folder":
        ctx = image_folder_context(source.spec, location, source_root(source, storage_options), storage_options)
        batch: list[tuple[str, str | None]] = []
        index = 0
        listed: list[tuple[str, str | None]] = []
        for walked in chunked(walk_image_folder(ctx), folder_batch):
            for (path, unlistable), sig, kept in _decide(plan, walked):
                if kept:
                    yield Kept(KEPT_FOLDER_UNIT, path)
                    continue
                if plan is not None:
                    listed.append((path, sig))
                batch.append((path, unlistable))
                if len(batch) >= folder_batch:
                    yield Unit(index, shape, entries=tuple(batch), label=f"{batch[0][0]}..", objects=tuple(listed))
                    index, batch, listed = index + 1, [], []
        if batch:
            yield Unit(index, shape, entries=tuple(batch), label=f"{batch[0][0]}..", objects=tuple(listed))
        return
    objects: tuple[tuple[str, str | None], ...] = ()
    if shape == "lance":
        if plan is not None:
            sig = plan.lance_signature(str(location))
            if plan.unchanged(str(location), sig):
                yield Kept(0, str(location))
                return
            objects = ((str(location), sig),)
        yield Unit(0, shape, file=str(location), label=str(location), objects=objects)
        return
    suffixes = {"parquet": (".parquet",), "jsonl": (".jsonl", ".json"), "webdataset": (".tar",)}[shape]
    root = source_root(source, storage_options)
    files = list_sized_files(location, suffixes, root)
    parquet_ctx = source_context(source, storage_options) if shape == "parquet" else None
    group_bytes = URL_GROUP_BYTES if url_units else GROUP_BYTES
    groups = _Groups(shape, jsonl_lines if shape == "jsonl" else parquet_rows, group_bytes)
    for chunk in chunked(enumerate(files), 1024):
        sigs, kept_flags = _decide_files(plan, [file for _, (file, _) in chunk])
        for (ordinal, (file, size)), sig, kept in zip(chunk, sigs, kept_flags):
            index = ordinal * PIECES
            if kept:
                # A kept file ends the group before it: groups hold consecutive files only, so
                # every key keeps its place in the source's order against the kept rows.
                yield from groups.flush()
                yield Kept(index, file)
                continue
            objects = ((file, sig),) if plan is not None else ()
            forced = plan is not None and file in plan.forced
            small = size is not None and shape != "webdataset" and not forced and size <= group_bytes // 16
            # A file of no more bytes than a run has lines has no more lines than that: never split.
            ranges = None if shape != "jsonl" or (small and size <= jsonl_lines) else line_runs(file, root, jsonl_lines)
            split = parquet_rows if url_units else None
            pieces = row_group_runs(parquet_ctx, file, parquet_rows, split) if parquet_ctx is not None else None
            if small and not ranges and not pieces:
                assert size is not None, "a small file has a size"
                yield from groups.add(index, file, objects, size)
                continue
            yield from groups.flush()
            if ranges:
                for start, end, before in ranges:
                    yield Unit(
                        index,
                        shape,
                        file=file,
                        byte_range=(start, end),
                        first_row=before,
                        label=f"{file}:{before + 1}",
                        objects=objects,
                    )
                    index += 1
                continue
            if not pieces:
                yield Unit(index, shape, file=file, label=file, objects=objects)
                continue
            for groups_of_rows, first_row, rows in pieces:
                yield Unit(
                    index,
                    shape,
                    file=file,
                    row_groups=groups_of_rows,
                    first_row=first_row,
                    rows=rows,
                    label=f"{file}#{groups_of_rows[0]}+{first_row}",
                    objects=objects,
                )
                index += 1
    yield from groups.flush()


class _Groups:
    """Consecutive small files gathered into one unit, up to ``max_files`` files or
    ``max_bytes`` bytes; a group of one file is that file's plain unit."""

    def __init__(self, shape: str, max_files: int, max_bytes: int) -> None:
        self.shape, self.max_files, self.max_bytes = shape, max_files, max_bytes
        self._members: list[tuple[int, str, tuple[tuple[str, str | None], ...]]] = []
        self._bytes = 0

    def add(self, index: int, file: str, objects: tuple[tuple[str, str | None], ...], size: int) -> Iterator[Unit]:
        if self._members and (len(self._members) >= self.max_files or self._bytes + size > self.max_bytes):
            yield from self.flush()
        self._members.append((index, file, objects))
        self._bytes += size

    def flush(self) -> Iterator[Unit]:
        members, self._members, self._bytes = self._members, [], 0
        if not members:
            return
        index, first, objects = members[0]
        if len(members) == 1:
            yield Unit(index, self.shape, file=first, label=first, objects=objects)
            return
        yield Unit(
            index,
            self.shape,
            file=first,
            files=tuple(f for _, f, _ in members),
            label=f"{first}.. ({len(members)} files)",
            objects=tuple(o for _, _, objs in members for o in objs),
        )


def _decide_files(plan: ChangePlan | None, files: list[str]) -> tuple[list[str | None], list[bool]]:
    """(signatures, kept) of a chunk of files, looked up for the whole chunk at once."""
    if plan is None:
        return [None] * len(files), [False] * len(files)
    sigs = plan.signatures(files)
    return sigs, plan.unchanged_many(files, sigs)


def _decide(plan: ChangePlan | None, walked: list[tuple[PurePath, str | None]]) -> list[tuple[tuple[str, str | None], str | None, bool]]:
    """((path, unlistable), signature, kept) for a chunk of walked entries: the signatures and
    the manifest are looked up for the whole chunk at once."""
    entries = [(str(path), unlistable) for path, unlistable in walked]
    if plan is None:
        return [(entry, None, False) for entry in entries]
    listable = [path for path, unlistable in walked if not unlistable]
    found = iter(plan.folder_signatures(listable))
    sigs = [None if unlistable else next(found) for _, unlistable in walked]
    kept = plan.unchanged_many([path for path, _ in entries], sigs)
    return list(zip(entries, sigs, kept))
