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
- Lance: the whole table (one unit).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath

from prx_data.ingest import readers
from prx_data.ingest.contained import AnyRoot, open_contained
from prx_data.ingest.items import RawItem
from prx_data.ingest.registry import RegisteredSource
from prx_data.ingest.unit_manifest import KEPT_FOLDER_UNIT, PIECES, ChangePlan, Kept

FOLDER_BATCH = 512
PARQUET_UNIT_ROWS = 8192
# A URL line is ~100-300 bytes: 8192 lines is a unit of a few MB and a few minutes of downloads.
JSONL_UNIT_LINES = 8192
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
) -> Iterator[Unit | Kept]:
    """The source's units in reading order; raises SourceUnavailable as the readers do.
    ``storage_options`` reach an object-store location (see ``object_source``). With a ``plan``,
    an object whose signature is unchanged is yielded as ``Kept`` and never opened (a JSONL
    file is not scanned for line runs, a Parquet footer is not read)."""
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
        for path, unlistable in readers.walk_image_folder(ctx):
            if plan is not None:
                sig = None if unlistable else plan.folder_signature(path)
                if plan.unchanged(str(path), sig):
                    yield Kept(KEPT_FOLDER_UNIT, str(path))
                    continue
                listed.append((str(path), sig))
            batch.append((str(path), unlistable))
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
        pieces = _row_group_runs(parquet_ctx, file, parquet_rows) if parquet_ctx is not None else None
        if not pieces:
            yield Unit(index, shape, file=str(file), label=str(file), objects=objects)
            continue
        for groups, first_row in pieces:
            yield Unit(index, shape, file=str(file), row_groups=groups, first_row=first_row, label=f"{file}#{groups[0]}", objects=objects)
            index += 1


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


def _row_group_runs(ctx: readers._Context, file: PurePath, rows: int) -> list[tuple[tuple[int, ...], int]] | None:
    """Runs of row groups of about ``rows`` rows; None to read the file whole (one row group, or
    a file whose footer cannot be read: its reader then yields the file's error row)."""
    import pyarrow.parquet as pq

    handle, refused = open_contained(file, ctx.root, random_access=True)
    if handle is None:
        return None
    try:
        with handle:
            meta = pq.ParquetFile(handle).metadata
    except Exception:  # noqa: BLE001 - a bad footer is reported by the reader, as one row
        return None
    if meta.num_row_groups <= 1 or meta.num_rows <= rows:
        return None
    runs: list[tuple[tuple[int, ...], int]] = []
    current: list[int] = []
    first, seen = 0, 0
    for g in range(meta.num_row_groups):
        if not current:
            first = seen
        current.append(g)
        seen += meta.row_group(g).num_rows
        if seen - first >= rows:
            runs.append((tuple(current), first))
            current = []
    if current:
        runs.append((tuple(current), first))
    return runs


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
        yield from readers.read_parquet_file(ctx, _path(source, _unit_file(unit)), groups, unit.first_row)
    elif unit.kind == "jsonl":
        yield from readers.read_jsonl_file(ctx, _path(source, _unit_file(unit)), unit.byte_range, unit.first_row)
    else:
        yield from readers.read_tar(ctx, _path(source, _unit_file(unit)))
