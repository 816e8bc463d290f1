"""One record (a Parquet or Lance row, a JSONL line, a sidecar or tar member's JSON) as a
:class:`RawItem`: the spec's ``fields`` read as typed values, a bad value costing its record
only (an item with ``error`` set), never the source."""

from __future__ import annotations

import base64
import json
from pathlib import Path, PurePath
from typing import Any

from prx_data.core.schema import Status
from prx_data.ingest.read.contained import read_contained
from prx_data.ingest.read.object_store import Foreign, ObjectRoot
from prx_data.ingest.read.raw_item import RawItem
from prx_data.ingest.read.source_files import ReadContext
from prx_data.ingest.registry import SourceSpec

# A caption or metadata sidecar larger than this is a mistake, not a caption.
SIDECAR_MAX_BYTES = 1024 * 1024
INVALID_RECORD = Status.INVALID_RECORD.value


class BadValue(ValueError):
    """A record field holds a value of the wrong type or encoding."""


def json_object(data: bytes, what: str) -> dict:
    """A sidecar or tar member that must hold a JSON object; ``what`` names it in the error."""
    try:
        record = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise BadValue(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except (json.JSONDecodeError, RecursionError):
        raise BadValue(f"{what} is not valid JSON") from None
    if not isinstance(record, dict):
        raise BadValue(f"{what} is not a JSON object")
    return record


# -- typed fields ---------------------------------------------------------------------------------


def text_value(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadValue(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    if not isinstance(value, str):
        raise BadValue(f"{what} must be a string, got {type(value).__name__}")
    return value.strip() or None


def caption_value(value: Any, spec: SourceSpec, what: str = "caption") -> str | None:
    if isinstance(value, dict):
        language = spec.fields.caption_language
        if not language:
            raise BadValue(f"{what} is a mapping (keys {sorted(map(str, value))[:5]}); set fields.caption_language to choose one")
        return text_value(value.get(language), f"{what}[{language!r}]")
    return text_value(value, what)


def _key(value: Any, name: str) -> str | None:
    if isinstance(value, bool):
        raise BadValue(f"key field '{name}' must be a string or an integer, got bool")
    if isinstance(value, int):
        return str(value)
    return text_value(value, f"key field '{name}'")


def _embedding(value: Any, spec: SourceSpec) -> list[float] | None:
    if value is None:
        return None
    name = spec.fields.embedding
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise BadValue(f"embedding field '{name}' must be a list of numbers, got {type(value).__name__}")
    out = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise BadValue(f"embedding field '{name}' holds {type(x).__name__}, not a number")
        out.append(float(x))
    if spec.embedding_dim and len(out) != spec.embedding_dim:
        raise BadValue(f"embedding field '{name}' has {len(out)} values, embedding_dim is {spec.embedding_dim}")
    return out


def _image_bytes(value: Any, name: str, cap: int) -> bytes:
    if isinstance(value, str):  # JSON carries bytes as base64
        if len(value) > cap * 4 // 3 + 8:
            raise TooLarge(f"base64 image of {len(value)} characters exceeds the limit of {cap} bytes")
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            raise BadValue(f"field '{name}' is not valid base64") from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    # bytes(int) would allocate that many zero bytes: a huge integer must not reach it.
    raise BadValue(f"field '{name}' must hold image bytes, got {type(value).__name__}")


class TooLarge(ValueError):
    pass


# -- tabular records ------------------------------------------------------------------------------


def record_to_item(record: dict[str, Any], ctx: ReadContext, base: PurePath, position: str) -> RawItem:
    spec = ctx.spec
    fields = spec.fields
    key = position
    try:
        if fields.key:
            key = _key(record.get(fields.key), fields.key) or ""
            if not key:
                return RawItem(key=position, error=f"key field '{fields.key}' is empty", error_status=INVALID_RECORD)
        return _typed_record(record, ctx, base, key)
    except BadValue as exc:
        return RawItem(key=key, error=str(exc), error_status=INVALID_RECORD)
    except TooLarge as exc:
        return RawItem(key=key, error=str(exc), error_status=Status.TOO_LARGE.value)


def _typed_record(record: dict[str, Any], ctx: ReadContext, base: PurePath, key: str) -> RawItem:
    spec = ctx.spec
    fields = spec.fields
    item = RawItem(
        key=key,
        caption=caption_value(record.get(fields.caption), spec, f"caption field '{fields.caption}'") if fields.caption else None,
        license=(text_value(record.get(fields.license), f"license field '{fields.license}'") if fields.license else None) or spec.license,
        source_url=text_value(record.get(fields.url), f"url field '{fields.url}'") if fields.url else None,
    )
    if fields.embedding:
        item.embedding = _embedding(record.get(fields.embedding), spec)
    value = record.get(fields.image) if fields.image else None
    if value is None:
        item.error = f"field '{fields.image}' is empty"
        item.error_status = Status.MISSING.value
        return item
    assert fields.image, "value was read from the image field"
    if fields.image_kind == "bytes":
        item.data = _image_bytes(value, fields.image, spec.max_bytes)
    elif fields.image_kind == "path":
        text = text_value(value, f"path field '{fields.image}'")
        if not text:
            raise BadValue(f"path field '{fields.image}' is empty")
        target: str | PurePath
        if isinstance(ctx.root, ObjectRoot):
            target = ctx.root.resolve(text, str(base))
            item.path = target if isinstance(target, Foreign) else ctx.root.uri(target)
        else:
            local = Path(text).expanduser()
            target = local if local.is_absolute() else base / local
            item.path = str(target)
        data, refused = read_contained(target, ctx.root, spec.max_bytes)
        if refused is not None:
            item.error, item.error_status = refused.error, refused.status
        item.data = data
    else:  # url
        url = text_value(value, f"url field '{fields.image}'")
        if not url:
            raise BadValue(f"url field '{fields.image}' is empty")
        item.url = url
        item.source_url = item.source_url or url
    return item


def named_columns(spec: SourceSpec) -> dict[str, str]:
    """The columns the spec's ``fields`` name, by setting (``{"caption": "alt_text"}``)."""
    names = ("key", "image", "caption", "license", "url", "embedding")
    return {name: column for name in names if (column := getattr(spec.fields, name))}


def missing_columns(spec: SourceSpec, columns: list[str]) -> str:
    """The spec's named fields that are not columns, as ``fields.caption 'cap'`` (empty if none)."""
    return ", ".join(f"fields.{name} {column!r}" for name, column in named_columns(spec).items() if column not in columns)
