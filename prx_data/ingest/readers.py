"""Readers: turn a source of any supported shape into a stream of :class:`RawItem`.

Every reader is a generator, so memory stays flat however large the source. Problems with a
single record (missing file, undecodable field) become an item with ``error`` set; only a source
that cannot be opened at all raises.
"""

from __future__ import annotations

import base64
import glob as globlib
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from prx_data.ingest.items import RawItem
from prx_data.registry import RegisteredSource, SourceSpec
from prx_data.schema import Status

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff"}


class SourceUnavailable(RuntimeError):
    """The source as a whole cannot be read (its location does not exist, say)."""


def _files(location: Path, suffixes: tuple[str, ...]) -> list[Path]:
    pattern = str(location)
    if any(ch in pattern for ch in "*?["):
        files = [Path(p) for p in sorted(globlib.glob(pattern, recursive=True))]
    elif location.is_dir():
        files = sorted(p for p in location.rglob("*") if p.suffix.lower() in suffixes)
    elif location.exists():
        files = [location]
    else:
        raise SourceUnavailable(f"location {location} does not exist")
    return [f for f in files if f.is_file()]


def _read_sidecar_caption(image_path: Path) -> str | None:
    txt = image_path.with_suffix(".txt")
    if txt.is_file():
        return txt.read_text(errors="replace").strip() or None
    meta = image_path.with_suffix(".json")
    if meta.is_file():
        try:
            record = json.loads(meta.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if isinstance(record, dict):
            value = record.get("caption") or record.get("text")
            return str(value).strip() if value else None
    return None


def read_image_folder(spec: SourceSpec, location: Path) -> Iterator[RawItem]:
    if not location.is_dir():
        raise SourceUnavailable(f"image folder {location} does not exist")
    for path in _files(location, tuple(IMAGE_EXTENSIONS)):
        key = path.relative_to(location).as_posix()
        try:
            data = path.read_bytes()
        except OSError as exc:
            yield RawItem(key=key, path=str(path), error=f"cannot read {path}: {exc}")
            continue
        yield RawItem(key=key, data=data, path=str(path), caption=_read_sidecar_caption(path), license=spec.license)


def _field(record: dict[str, Any], name: str | None) -> Any:
    return record.get(name) if name else None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _record_to_item(record: dict[str, Any], spec: SourceSpec, base: Path, position: str) -> RawItem:
    fields = spec.fields
    key = _text(_field(record, fields.key)) or position
    item = RawItem(
        key=key,
        caption=_text(_field(record, fields.caption)),
        license=_text(_field(record, fields.license)) or spec.license,
        source_url=_text(_field(record, fields.url)),
    )
    if fields.embedding:
        vector = record.get(fields.embedding)
        if vector is not None:
            item.embedding = [float(x) for x in vector]
    value = record.get(fields.image) if fields.image else None
    if value is None:
        item.error = f"field '{fields.image}' is empty"
        item.error_status = Status.MISSING.value
        return item
    if fields.image_kind == "bytes":
        if isinstance(value, str):  # JSON carries bytes as base64
            try:
                value = base64.b64decode(value, validate=True)
            except ValueError:
                item.error = f"field '{fields.image}' is not valid base64"
                return item
        item.data = bytes(value)
    elif fields.image_kind == "path":
        path = Path(str(value))
        path = path if path.is_absolute() else base / path
        item.path = str(path)
        try:
            item.data = path.read_bytes()
        except FileNotFoundError:
            item.error = f"missing file {path}"
            item.error_status = Status.MISSING.value
        except OSError as exc:
            item.error = f"cannot read {path}: {exc}"
    else:  # url
        item.url = str(value)
        item.source_url = item.source_url or item.url
    return item


def read_parquet(spec: SourceSpec, location: Path) -> Iterator[RawItem]:
    import pyarrow.parquet as pq

    for file in _files(location, (".parquet",)):
        parquet = pq.ParquetFile(file)
        row = 0
        for batch in parquet.iter_batches(batch_size=256):
            for record in batch.to_pylist():
                yield _record_to_item(record, spec, file.parent, f"{file.name}:{row}")
                row += 1


def read_jsonl(spec: SourceSpec, location: Path) -> Iterator[RawItem]:
    for file in _files(location, (".jsonl", ".json")):
        with file.open("r", encoding="utf-8", errors="replace") as handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                position = f"{file.name}:{line_no}"
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield RawItem(key=position, error=f"line {line_no} of {file.name} is not JSON: {exc.msg}")
                    continue
                if not isinstance(record, dict):
                    yield RawItem(key=position, error=f"line {line_no} of {file.name} is not an object")
                    continue
                yield _record_to_item(record, spec, file.parent, position)


def _wds_key(member_name: str) -> tuple[str, str]:
    """WebDataset convention: the key is the path up to the first dot of the basename."""
    path = PurePosixPath(member_name)
    stem, _, ext = path.name.partition(".")
    return str(path.parent / stem) if str(path.parent) != "." else stem, ext.lower()


def _wds_item(key: str, members: dict[str, bytes], spec: SourceSpec) -> RawItem:
    meta: dict[str, Any] = {}
    if "json" in members:
        try:
            loaded = json.loads(members["json"])
            meta = loaded if isinstance(loaded, dict) else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            meta = {}
    fields = spec.fields
    caption = members.get("txt") or members.get("caption")
    item = RawItem(
        key=key,
        caption=_text(caption.decode("utf-8", "replace")) if caption else _text(meta.get(fields.caption or "caption")),
        license=_text(meta.get(fields.license or "license")) or spec.license,
        source_url=_text(meta.get(fields.url or "url")),
    )
    for ext in ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff"):
        if ext in members:
            item.data = members[ext]
            break
    else:
        item.error = f"no image member for key {key!r} (members: {sorted(members)})"
    return item


def read_webdataset(spec: SourceSpec, location: Path) -> Iterator[RawItem]:
    for file in _files(location, (".tar",)):
        try:
            archive = tarfile.open(file, mode="r|*")
        except tarfile.TarError as exc:
            yield RawItem(key=file.name, error=f"cannot open tar {file}: {exc}")
            continue
        current_key: str | None = None
        members: dict[str, bytes] = {}
        try:
            for member in archive:
                if not member.isfile():
                    continue
                key, ext = _wds_key(member.name)
                if key != current_key and current_key is not None:
                    yield _wds_item(current_key, members, spec)
                    members = {}
                current_key = key
                handle = archive.extractfile(member)
                members[ext] = handle.read() if handle else b""
        except tarfile.TarError as exc:
            yield RawItem(key=f"{file.name}:corrupt", error=f"tar {file} is corrupt: {exc}")
        finally:
            archive.close()
        if current_key is not None:
            yield _wds_item(current_key, members, spec)


def read_lance(spec: SourceSpec, location: Path | str) -> Iterator[RawItem]:
    import lance

    try:
        ds = lance.dataset(str(location))
    except Exception as exc:  # noqa: BLE001 - lance raises several types for a missing table
        raise SourceUnavailable(f"cannot open Lance table {location}: {exc}") from exc
    fields = spec.fields
    wanted = [f for f in (fields.key, fields.image, fields.caption, fields.license, fields.url, fields.embedding) if f]
    missing = [f for f in wanted if f not in ds.schema.names]
    if missing:
        raise SourceUnavailable(f"Lance table {location} has no column(s) {missing}")
    row = 0
    for batch in ds.to_batches(columns=list(dict.fromkeys(wanted)), batch_size=256):
        for record in batch.to_pylist():
            yield _record_to_item(record, spec, Path(str(location)).parent, f"row:{row}")
            row += 1


READERS = {
    "image_folder": read_image_folder,
    "parquet": read_parquet,
    "jsonl": read_jsonl,
    "webdataset": read_webdataset,
    "lance": read_lance,
}


def read_source(source: RegisteredSource) -> Iterator[RawItem]:
    location = source.resolve_location()
    return READERS[source.spec.shape](source.spec, location)
