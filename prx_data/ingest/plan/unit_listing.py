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
from prx_data.ingest.read.source_files import list_files
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
    url_units = source.spec.fields.image_kind == "url" and (workers or source.spec.ingest_workers()) > 1
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
    files = list_files(location, suffixes, root)
    parquet_ctx = source_context(source, storage_options) if shape == "parquet" else None
    for ordinal, file in enumerate(files):
        index = ordinal * PIECES
        objects = ()
        if plan is not None:
            sig = plan.signature(file)
            if plan.unchanged(str(file), sig):
                yield Kept(index, str(file))
                continue
            objects = ((str(file), sig),)
        if shape == "jsonl":
            ranges = line_runs(file, root, jsonl_lines)
            if ranges:
                for start, end, before in ranges:
                    yield Unit(
                        index,
                        shape,
                        file=str(file),
                        byte_range=(start, end),
                        first_row=before,
                        label=f"{file}:{before + 1}",
                        objects=objects,
                    )
                    index += 1
                continue
        split = parquet_rows if url_units else None
        pieces = row_group_runs(parquet_ctx, file, parquet_rows, split) if parquet_ctx is not None else None
        if not pieces:
            yield Unit(index, shape, file=str(file), label=str(file), objects=objects)
            continue
        for groups, first_row, rows in pieces:
            yield Unit(
                index,
                shape,
                file=str(file),
                row_groups=groups,
                first_row=first_row,
                rows=rows,
                label=f"{file}#{groups[0]}+{first_row}",
                objects=objects,
            )
            index += 1


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
