"""Lance sources: a table's rows as items."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path, PurePath, PurePosixPath

from prx_data.core.schema import Status
from prx_data.ingest.read.contained import AnyRoot, Root
from prx_data.ingest.read.object_store import ObjectRoot
from prx_data.ingest.read.raw_item import RawItem, SourceUnavailable
from prx_data.ingest.read.records import missing_columns, named_columns, record_to_item
from prx_data.ingest.read.source_files import ReadContext, make_root
from prx_data.ingest.registry import SourceSpec


def read_lance(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    import lance

    remote = isinstance(location, str) and "://" in location
    try:
        ds = lance.dataset(str(location), storage_options=(storage_options or None) if remote else None)
    except Exception as exc:  # noqa: BLE001 - lance raises several types for a missing table
        raise SourceUnavailable(f"cannot open Lance table {location}: {exc}") from exc
    missing = missing_columns(spec, ds.schema.names)
    if missing:
        raise SourceUnavailable(f"Lance table {location} has no column {missing}; its columns: {ds.schema.names}")
    base: PurePath
    if remote:
        root = root or make_root(spec, location, None, storage_options)
        if not isinstance(root, ObjectRoot):
            raise ValueError(f"Lance table {location} is an object-store URI, but its root is a local folder")
        base = PurePosixPath(root.to_path(str(location))).parent
    else:
        base = Path(str(location)).parent
        root = root or Root(base)
    ctx = ReadContext(spec, location, root)
    row = 0
    try:
        for batch in ds.to_batches(columns=list(dict.fromkeys(named_columns(spec).values())), batch_size=256):
            for record in batch.to_pylist():
                yield record_to_item(record, ctx, base, f"row:{row}")
                row += 1
    except Exception as exc:  # noqa: BLE001 - a damaged fragment must not hide the rows read
        yield RawItem(
            key=f"row:{row}:unreadable",
            error=f"cannot read {location} from row {row}: {type(exc).__name__}: {exc}"[:500],
            error_status=Status.UNREADABLE.value,
            file_level=True,
        )
