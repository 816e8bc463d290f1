"""Input units as read: a :class:`Unit` names one piece of a source that is read on its own (one
Ray task each), and :func:`read_unit` reads it in this process.

A unit's items are exactly the items the whole-source reader (``whole_source``) yields for
that piece, in the same order, so position keys and error rows do not depend on how a source is
split. Which units a source has is decided by ``ingest.plan.unit_listing``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from prx_data.ingest.read.contained import AnyRoot
from prx_data.ingest.read.image_folder import image_folder_context, read_folder_entry
from prx_data.ingest.read.jsonl import read_jsonl_file
from prx_data.ingest.read.lance_table import read_lance
from prx_data.ingest.read.parquet import read_parquet_file
from prx_data.ingest.read.raw_item import RawItem
from prx_data.ingest.read.source_files import ReadContext, make_root
from prx_data.ingest.read.webdataset import read_tar
from prx_data.ingest.registry import RegisteredSource


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
    # Small JSONL or Parquet files read whole, one after another (``file`` is the first): a
    # source of many tiny files costs a unit per group, not per file.
    files: tuple[str, ...] = ()
    label: str = field(default="", compare=False)
    # (object, signature) it reads, for the unit manifest: one per entry of an image-folder batch
    # (aligned with ``entries``), one per file of a group (aligned with ``files``), the file
    # otherwise; signature None when it could not be taken.
    objects: tuple[tuple[str, str | None], ...] = field(default=(), compare=False)


# Roots made in this process, by source: a worker reading many units of one object-store source
# asks the store what its location is (an object or a prefix) once, not once per unit.
_ROOTS: dict[tuple, AnyRoot] = {}


def source_root(source: RegisteredSource, storage_options: dict | None) -> AnyRoot:
    """The containment root of ``source`` (``source_files.make_root``), made once per process."""
    key = (source.spec.model_dump_json(), str(source.path), tuple(sorted((storage_options or {}).items())))
    if key not in _ROOTS:
        if len(_ROOTS) > 64:
            _ROOTS.clear()
        _ROOTS[key] = make_root(source.spec, source.resolve_location(), source.resolve_root(), storage_options)
    return _ROOTS[key]


def source_context(source: RegisteredSource, storage_options: dict | None = None) -> ReadContext:
    return ReadContext(source.spec, source.resolve_location(), source_root(source, storage_options))


def _unit_file(unit: Unit) -> str:
    # Every kind but image folders is read from one file; list_units always names it.
    if unit.file is None:
        raise ValueError(f"unit {unit.index} ({unit.kind}) names no file to read")
    return unit.file


def _path(source: RegisteredSource, text: str) -> Path | PurePosixPath:
    return PurePosixPath(text) if source.remote else Path(text)


def read_unit(source: RegisteredSource, unit: Unit, storage_options: dict | None = None) -> Iterator[RawItem]:
    """One unit's items, read in this process (a worker opens the unit's files or objects)."""
    for _, item in read_unit_members(source, unit, storage_options):
        yield item


def read_unit_members(source: RegisteredSource, unit: Unit, storage_options: dict | None = None) -> Iterator[tuple[int, RawItem]]:
    """``read_unit``'s items with the number of the file of a group each came from (0 for a unit
    of one file or folder batch), so each file's rows can be recorded on their own."""
    if unit.files:
        ctx = source_context(source, storage_options)
        read = read_jsonl_file if unit.kind == "jsonl" else read_parquet_file
        for member, file in enumerate(unit.files):
            for item in read(ctx, _path(source, file)):
                yield member, item
        return
    for item in _read_one(source, unit, storage_options):
        yield 0, item


def _read_one(source: RegisteredSource, unit: Unit, storage_options: dict | None) -> Iterator[RawItem]:
    spec = source.spec
    root = source_root(source, storage_options)
    if unit.kind == "lance":
        table = _unit_file(unit)
        yield from read_lance(spec, table if source.remote else Path(table), root, storage_options)
        return
    ctx = source_context(source, storage_options)
    if unit.kind == "image_folder":
        ctx = image_folder_context(spec, source.resolve_location(), root, storage_options, check=False)
        for path, unlistable in unit.entries:
            yield read_folder_entry(ctx, _path(source, path), unlistable)
    elif unit.kind == "parquet":
        groups = list(unit.row_groups) if unit.row_groups is not None else None
        yield from read_parquet_file(ctx, _path(source, _unit_file(unit)), groups, unit.first_row, unit.rows)
    elif unit.kind == "jsonl":
        yield from read_jsonl_file(ctx, _path(source, _unit_file(unit)), unit.byte_range, unit.first_row)
    else:
        yield from read_tar(ctx, _path(source, _unit_file(unit)))
