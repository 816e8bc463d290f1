"""Parquet sources: each file's rows as items, and the runs of row groups (or pieces of one
group) a big file is split into for several units."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path, PurePath

import pyarrow as pa

from prx_data.core.schema import Status
from prx_data.ingest.read.contained import AnyRoot, open_contained
from prx_data.ingest.read.raw_item import RawItem
from prx_data.ingest.read.records import INVALID_RECORD, SIDECAR_MAX_BYTES, missing_columns, named_columns, record_to_item
from prx_data.ingest.read.source_files import ReadContext, file_error, list_files, make_root
from prx_data.ingest.registry import SourceSpec

# Cutting one row group into pieces makes each piece decode the rows before it (Parquet cannot
# seek to a row): at most this many pieces per group keeps that under ~1% of download CPU.
MAX_PIECES_PER_ROW_GROUP = 64


def _position_key(ctx: ReadContext, file: PurePath, row: int) -> str:
    return f"{file.name}:{row}"


def read_parquet(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    ctx = ReadContext(spec, location, root or make_root(spec, location, None, storage_options))
    for file in list_files(location, (".parquet",), ctx.root):
        yield from read_parquet_file(ctx, file)


def read_parquet_file(
    ctx: ReadContext, file: PurePath, row_groups: list[int] | None = None, first_row: int = 0, rows: int | None = None
) -> Iterator[RawItem]:
    """One Parquet file, or only ``row_groups`` of it (whose first row is ``first_row`` of the
    file, so position keys are the same however the file is split); with ``rows``, only that
    many rows from ``first_row``, which may lie inside the first group (a piece of a group)."""
    import pyarrow.parquet as pq

    handle, refused = open_contained(file, ctx.root, random_access=True)
    if handle is None:
        assert refused is not None, "open_contained says why it opened nothing"
        yield file_error(file, refused.status, refused.error)
        return
    row = first_row
    with handle:
        try:
            parquet = pq.ParquetFile(handle)
            missing = missing_columns(ctx.spec, parquet.schema_arrow.names)
            if missing:
                # A typo in the spec, or a file of another layout: one row saying so, not one
                # per record (and not captions or licenses silently left empty).
                yield file_error(
                    file, INVALID_RECORD, f"{file.name} has no column {missing}; its columns: {parquet.schema_arrow.names}"[:500]
                )
                return
            skip, left = 0, rows
            if rows is not None and row_groups:
                skip = first_row - sum(parquet.metadata.row_group(g).num_rows for g in range(row_groups[0]))
            # Only the columns the spec names become Python values, and only after each cell's
            # size is checked in Arrow: an oversized cell costs its Arrow buffer, not a copy.
            columns = list(dict.fromkeys(named_columns(ctx.spec).values())) or None
            caps = _caps(ctx.spec)
            size = _batch_rows(parquet.metadata, row_groups)
            for batch in parquet.iter_batches(batch_size=size, row_groups=row_groups, columns=columns):
                if left is not None:
                    if skip >= batch.num_rows:
                        skip -= batch.num_rows
                        continue
                    batch, skip = batch.slice(skip, left), 0
                    left -= batch.num_rows
                oversized = _oversized(batch, caps)
                if oversized:
                    keep = pa.array([i not in oversized for i in range(batch.num_rows)])
                    records = iter(batch.filter(keep).to_pylist())
                else:
                    records = iter(batch.to_pylist())
                for i in range(batch.num_rows):
                    position = _position_key(ctx, file, row)
                    if i in oversized:
                        yield _too_large(ctx.spec, batch, i, position, oversized[i], file)
                    else:
                        yield record_to_item(next(records), ctx, file.parent, position)
                    row += 1
                if left == 0:
                    break
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a bad file
            where = f"from row {row}" if row else "at all"
            item = file_error(file, Status.UNREADABLE.value, f"cannot read {file.name} {where}: {type(exc).__name__}: {exc}"[:500])
            if row:
                item.key = f"{file.name}:unreadable-from-{row}"
            yield item


# Rows per Arrow batch: 256, fewer when rows are large (a batch of 256 images of 32 MB each
# would be 8 GB in Arrow before any check), judged from the row groups' uncompressed sizes.
_BATCH_BYTES = 64 * 1024 * 1024


def _batch_rows(meta, row_groups: list[int] | None) -> int:
    groups = row_groups if row_groups is not None else range(meta.num_row_groups)
    rows = sum(meta.row_group(g).num_rows for g in groups)
    size = sum(meta.row_group(g).total_byte_size for g in groups)
    return max(1, min(256, _BATCH_BYTES * max(rows, 1) // max(size, 1)))


def _caps(spec: SourceSpec) -> dict[str, int]:
    """The largest cell each named column may hold: an image its ``max_bytes``, text a sidecar's."""
    caps = {column: SIDECAR_MAX_BYTES for column in named_columns(spec).values()}
    if spec.fields.image and spec.fields.image_kind == "bytes":
        caps[spec.fields.image] = spec.max_bytes
    return caps


def _oversized(batch, caps: dict[str, int]) -> dict[int, tuple[str, int, int]]:
    """Row -> (column, bytes, cap) for the batch's cells over their column's cap, from the Arrow
    offsets (binary and string columns; nothing is copied)."""
    import pyarrow.compute as pc

    out: dict[int, tuple[str, int, int]] = {}
    for name, cap in caps.items():
        if name not in batch.schema.names:
            continue
        column = batch.column(name)
        kind = column.type
        if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            continue
        lengths = pc.binary_length(column)
        over = pc.greater(lengths, cap)
        if not pc.any(over).as_py():
            continue
        for i in pc.indices_nonzero(over).to_pylist():
            out.setdefault(i, (name, lengths[i].as_py(), cap))
    return out


def _too_large(spec: SourceSpec, batch, i: int, position: str, what: tuple[str, int, int], file: PurePath) -> RawItem:
    column, size, cap = what
    key = position
    if spec.fields.key and column != spec.fields.key:
        value = batch.column(spec.fields.key)[i].as_py()
        key = str(value) if value not in (None, "") else position
    return RawItem(
        key=key,
        error=f"column '{column}' of {position} in {file.name} holds {size} bytes, over the limit of {cap}",
        error_status=Status.TOO_LARGE.value,
    )


def row_group_runs(
    ctx: ReadContext, file: PurePath | str, rows: int, split: int | None = None
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
