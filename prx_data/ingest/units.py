"""Input units: the pieces of a source that ingest reads independently (one Ray task each).

The driver lists units cheaply (a folder walk, a glob, Parquet footers); a worker reads one
unit with :func:`read_unit` and gets exactly the items the whole-source reader would yield for
that piece, in the same order, so position keys and error rows do not depend on how a source
is split. Units are yielded lazily: a folder of 100M files is never a list in the driver.

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
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath

from prx_data.core.lance_io import chunked
from prx_data.ingest import readers
from prx_data.ingest.contained import AnyRoot, open_contained
from prx_data.ingest.items import RawItem
from prx_data.ingest.registry import RegisteredSource
from prx_data.ingest.unit_manifest import KEPT_FOLDER_UNIT, PIECES, ChangePlan, Kept

FOLDER_BATCH = 512
PARQUET_UNIT_ROWS = 8192
# A URL line is ~100-300 bytes: 8192 lines is a unit of a few MB and a few minutes of downloads.
JSONL_UNIT_LINES = 8192
# A URL costs ~3 ms of one worker's CPU and ~100 ms of waiting: 512 URLs is a few seconds of
# downloads, small enough that two workers share a 1,000-URL list, large enough that each
# unit's tail (its last slow requests) is a small part of it.
URL_UNIT_ITEMS = 512
# Cutting one row group into pieces makes each piece decode the rows before it (Parquet cannot
# seek to a row): at most this many pieces per group keeps that under ~1% of download CPU.
MAX_PIECES_PER_ROW_GROUP = 64
_SCAN_BLOCK = 4 * 1024 * 1024


@dataclass(frozen=True)
class Unit:
    index: int  # order in the source: the first occurrence of a duplicated key wins
    kind: str
    file: str | None = None
    entries: tuple[tuple[str, str | None], ...] = ()  # image folders: (path, unlistable reason)
    row_groups: tuple[int, ...] | None = None
    first_row: int = 0  # Parquet: rows before the first row group; JSONL: lines before the range
    byte_range: tuple[int, int] | None = None  # JSONL: the piece of the file, [start, end)
    rows: int | None = None  # Parquet piece of a row group: rows to read from first_row
    label: str = field(default="", compare=False)
    # (object, signature) it reads, for the unit manifest: one per entry of an image-folder batch
    # (aligned with ``entries``), the file otherwise; signature None when it could not be taken.
    objects: tuple[tuple[str, str | None], ...] = field(default=(), compare=False)


# Roots made in this process, by source: a worker reading many units of one object-store source
# asks the store what its location is (an object or a prefix) once, not once per unit.
_ROOTS: dict[tuple, AnyRoot] = {}


def _root(source: RegisteredSource, storage_options: dict | None) -> AnyRoot:
    key = (source.spec.model_dump_json(), str(source.path), tuple(sorted((storage_options or {}).items())))
    if key not in _ROOTS:
        if len(_ROOTS) > 64:
            _ROOTS.clear()
        _ROOTS[key] = readers.make_root(source.spec, source.resolve_location(), source.resolve_root(), storage_options)
    return _ROOTS[key]


def _context(source: RegisteredSource, storage_options: dict | None = None) -> readers._Context:
    return readers._Context(source.spec, source.resolve_location(), _root(source, storage_options))


def _unit_file(unit: Unit) -> str:
    # Every kind but image folders is read from one file; list_units always names it.
    if unit.file is None:
        raise ValueError(f"unit {unit.index} ({unit.kind}) names no file to read")
    return unit.file


def _path(source: RegisteredSource, text: str) -> Path | PurePosixPath:
    return PurePosixPath(text) if source.remote else Path(text)


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
    ``storage_options`` reach an object-store location (see ``object_source``). With a ``plan``,
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
        ctx = readers.image_folder_context(source.spec, location, _root(source, storage_options), storage_options)
        batch: list[tuple[str, str | None]] = []
        index = 0
        listed: list[tuple[str, str | None]] = []
        for walked in chunked(readers.walk_image_folder(ctx), folder_batch):
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
    root = _root(source, storage_options)
    files = readers._files(location, suffixes, root)
    parquet_ctx = _context(source, storage_options) if shape == "parquet" else None
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
            ranges = _line_runs(file, root, jsonl_lines)
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
        pieces = _row_group_runs(parquet_ctx, file, parquet_rows, split) if parquet_ctx is not None else None
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


def _line_runs(file, root: AnyRoot, lines: int) -> list[tuple[int, int, int]] | None:
    """(start, end, lines before start) for runs of ``lines`` lines; None to read the file whole
    (it holds fewer lines, or cannot be opened: its reader then yields the file's error row).
    Splits fall right after a newline, where the reader's lines start too, so the pieces'
    items are exactly the whole file's, with the same line numbers."""
    handle, _ = open_contained(file, root)
    if handle is None:
        return None
    runs, start, before, count, offset = [], 0, 0, 0, 0
    try:
        with handle:
            while block := handle.read(_SCAN_BLOCK):
                at = 0
                while True:
                    need = lines - count
                    # Find the need-th newline of this block from ``at``, or count them all.
                    pos = at - 1
                    for _ in range(need):
                        pos = block.find(b"\n", pos + 1)
                        if pos < 0:
                            break
                    if pos < 0:
                        count += block.count(b"\n", at)
                        break
                    end = offset + pos + 1
                    runs.append((start, end, before))
                    start, before, count, at = end, before + lines, 0, pos + 1
                offset += len(block)
    except OSError:
        return None
    if offset > start:
        runs.append((start, offset, before))
    return runs if len(runs) > 1 else None


def _row_group_runs(
    ctx: readers._Context, file: PurePath, rows: int, split: int | None = None
) -> list[tuple[tuple[int, ...], int, int | None]] | None:
    """(row groups, first row, rows or None for whole groups): runs of row groups of about
    ``rows`` rows; with ``split``, a row group of more than ``rows`` rows is also cut into
    row ranges (a URL list written as one row group). None to read the file whole (it fits in
    one unit, or its footer cannot be read: its reader then yields the file's error row)."""
    import pyarrow.parquet as pq

    handle, refused = open_contained(file, ctx.root, random_access=True)
    if handle is None:
        return None
    try:
        with handle:
            meta = pq.ParquetFile(handle).metadata
    except Exception:  # noqa: BLE001 - a bad footer is reported by the reader, as one row
        return None
    if meta.num_rows <= rows or (meta.num_row_groups <= 1 and not split):
        return None
    runs: list[tuple[tuple[int, ...], int, int | None]] = []
    current: list[int] = []
    first, seen = 0, 0
    for g in range(meta.num_row_groups):
        size = meta.row_group(g).num_rows
        if split and size > rows:
            if current:
                runs.append((tuple(current), first, None))
                current = []
            step = max(rows, -(-size // MAX_PIECES_PER_ROW_GROUP))
            runs.extend(((g,), start, min(step, seen + size - start)) for start in range(seen, seen + size, step))
            seen += size
            continue
        if not current:
            first = seen
        current.append(g)
        seen += size
        if seen - first >= rows:
            runs.append((tuple(current), first, None))
            current = []
    if current:
        runs.append((tuple(current), first, None))
    return runs if len(runs) > 1 else None


def read_unit(source: RegisteredSource, unit: Unit, storage_options: dict | None = None) -> Iterator[RawItem]:
    """One unit's items, read in this process (a worker opens the unit's files or objects)."""
    spec = source.spec
    root = _root(source, storage_options)
    if unit.kind == "lance":
        table = _unit_file(unit)
        yield from readers.read_lance(spec, table if source.remote else Path(table), root, storage_options)
        return
    ctx = _context(source, storage_options)
    if unit.kind == "image_folder":
        ctx = readers.image_folder_context(spec, source.resolve_location(), root, storage_options, check=False)
        for path, unlistable in unit.entries:
            yield readers.read_folder_entry(ctx, _path(source, path), unlistable)
    elif unit.kind == "parquet":
        groups = list(unit.row_groups) if unit.row_groups is not None else None
        yield from readers.read_parquet_file(ctx, _path(source, _unit_file(unit)), groups, unit.first_row, unit.rows)
    elif unit.kind == "jsonl":
        yield from readers.read_jsonl_file(ctx, _path(source, _unit_file(unit)), unit.byte_range, unit.first_row)
    else:
        yield from readers.read_tar(ctx, _path(source, _unit_file(unit)))
