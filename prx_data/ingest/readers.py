"""Readers: turn a source of any supported shape into a stream of :class:`RawItem`.

Every reader is a generator, so memory stays flat however large the source. Sources are
hostile until proven otherwise (see ``docs/security.md``):

- every item found becomes exactly one item here, good or not: a problem with one record
  (missing or unreadable file, a value of the wrong type, a sidecar that is not UTF-8) is an
  item with ``error`` set, and a file that cannot be read at all is one item for that file
  (``file_level``), while the other files' records are still read;
- every path (image files, ``image_kind: path``, sidecars, symlink targets, matched files) is
  read through :mod:`prx_data.ingest.contained`, so nothing outside the source's root is read;
- every read is capped while streaming (files, tar members, JSONL lines).

Only a source that cannot be opened at all raises :class:`SourceUnavailable`.
"""

from __future__ import annotations

import base64
import glob as globlib
import io
import json
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, cast

from prx_data.core.schema import Status
from prx_data.ingest.contained import AnyRoot, Root, default_root, open_contained, read_capped, read_contained, read_optional
from prx_data.ingest.items import RawItem, SourceUnavailable  # noqa: F401 - callers import it from here
from prx_data.ingest.object_source import Foreign, ObjectRoot, fixed_prefix
from prx_data.ingest.registry import RegisteredSource, SourceSpec

# Sidecar files beside images: read with their image, never items themselves.
SIDECAR_EXTENSIONS = (".txt", ".json")
# A caption or metadata sidecar larger than this is a mistake, not a caption.
SIDECAR_MAX_BYTES = 1024 * 1024
# WebDataset member extensions that hold the image (the decoded header decides the format).
WDS_IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "avif", "gif", "bmp", "tif", "tiff", "heic", "heif", "jxl")
_INVALID = Status.INVALID_RECORD.value


class _BadValue(ValueError):
    """A record field holds a value of the wrong type or encoding."""


def _json_object(data: bytes, what: str) -> dict:
    """A sidecar or tar member that must hold a JSON object; ``what`` names it in the error."""
    try:
        record = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise _BadValue(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except (json.JSONDecodeError, RecursionError):
        raise _BadValue(f"{what} is not valid JSON") from None
    if not isinstance(record, dict):
        raise _BadValue(f"{what} is not a JSON object")
    return record


@dataclass(frozen=True)
class _Context:
    spec: SourceSpec
    location: Path | PurePosixPath | str  # a local path, or on an object store its URI
    root: AnyRoot


def make_root(spec: SourceSpec, location: Path | str, explicit: Path | str | None = None, storage_options: dict | None = None) -> AnyRoot:
    """The containment root of a source: ``explicit`` (the spec's ``root``), else the folder the
    location stands for (itself, a file's folder, a glob's fixed prefix, a Lance table's
    folder). Object-store locations get an ``ObjectRoot`` reached with ``storage_options``."""
    if not isinstance(location, str):
        if explicit is not None:
            return Root(explicit)
        return Root(
            location if spec.shape == "image_folder" else (Path(str(location)).parent if spec.shape == "lance" else default_root(location))
        )
    if explicit is not None:
        return ObjectRoot(str(explicit), storage_options, spec.storage)
    prefix = fixed_prefix(location)
    if spec.shape == "lance" or (spec.shape != "image_folder" and prefix == location and _names_object(location, storage_options, spec)):
        prefix = location.rsplit("/", 1)[0]
    return ObjectRoot(prefix, storage_options, spec.storage)


def _names_object(uri: str, storage_options: dict | None, spec: SourceSpec) -> bool:
    probe = ObjectRoot(uri, storage_options, spec.storage)
    probe.check(uri)
    return probe.is_object(probe.path)


def _files(location: Path | str, suffixes: tuple[str, ...], root: AnyRoot | None = None) -> list[Path] | list[PurePosixPath]:
    if isinstance(root, ObjectRoot):
        return [PurePosixPath(p) for p in root.files(str(location), suffixes)]
    pattern = str(location)
    local = Path(location)
    if any(ch in pattern for ch in "*?["):
        files = [Path(p) for p in sorted(globlib.glob(pattern, recursive=True))]
    elif local.is_dir():
        files = sorted(p for p in local.rglob("*") if p.suffix.lower() in suffixes)
    elif local.exists():
        files = [local]
    else:
        raise SourceUnavailable(f"location {location} does not exist")
    # Directories matched by a glob are not files; everything else (symlinks, FIFOs) is vetted
    # when opened, so it becomes a row rather than vanishing here.
    return [f for f in files if f.is_symlink() or not f.is_dir()]


def _file_error(file: PurePath, refused_status: str, error: str) -> RawItem:
    return RawItem(key=f"{file.name}:unreadable", path=str(file), error=error, error_status=refused_status, file_level=True)


# -- typed fields ---------------------------------------------------------------------------------


def _text(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _BadValue(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    if not isinstance(value, str):
        raise _BadValue(f"{what} must be a string, got {type(value).__name__}")
    return value.strip() or None


def _caption(value: Any, spec: SourceSpec, what: str = "caption") -> str | None:
    if isinstance(value, dict):
        language = spec.fields.caption_language
        if not language:
            raise _BadValue(f"{what} is a mapping (keys {sorted(map(str, value))[:5]}); set fields.caption_language to choose one")
        return _text(value.get(language), f"{what}[{language!r}]")
    return _text(value, what)


def _key(value: Any, name: str) -> str | None:
    if isinstance(value, bool):
        raise _BadValue(f"key field '{name}' must be a string or an integer, got bool")
    if isinstance(value, int):
        return str(value)
    return _text(value, f"key field '{name}'")


def _embedding(value: Any, spec: SourceSpec) -> list[float] | None:
    if value is None:
        return None
    name = spec.fields.embedding
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise _BadValue(f"embedding field '{name}' must be a list of numbers, got {type(value).__name__}")
    out = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise _BadValue(f"embedding field '{name}' holds {type(x).__name__}, not a number")
        out.append(float(x))
    if spec.embedding_dim and len(out) != spec.embedding_dim:
        raise _BadValue(f"embedding field '{name}' has {len(out)} values, embedding_dim is {spec.embedding_dim}")
    return out


def _image_bytes(value: Any, name: str, cap: int) -> bytes:
    if isinstance(value, str):  # JSON carries bytes as base64
        if len(value) > cap * 4 // 3 + 8:
            raise _TooLarge(f"base64 image of {len(value)} characters exceeds the limit of {cap} bytes")
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            raise _BadValue(f"field '{name}' is not valid base64") from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    # bytes(int) would allocate that many zero bytes: a huge integer must not reach it.
    raise _BadValue(f"field '{name}' must hold image bytes, got {type(value).__name__}")


class _TooLarge(ValueError):
    pass


# -- tabular records ------------------------------------------------------------------------------


def _record_to_item(record: dict[str, Any], ctx: _Context, base: PurePath, position: str) -> RawItem:
    spec = ctx.spec
    fields = spec.fields
    key = position
    try:
        if fields.key:
            key = _key(record.get(fields.key), fields.key) or ""
            if not key:
                return RawItem(key=position, error=f"key field '{fields.key}' is empty", error_status=_INVALID)
        return _typed_record(record, ctx, base, key)
    except _BadValue as exc:
        return RawItem(key=key, error=str(exc), error_status=_INVALID)
    except _TooLarge as exc:
        return RawItem(key=key, error=str(exc), error_status=Status.TOO_LARGE.value)


def _typed_record(record: dict[str, Any], ctx: _Context, base: PurePath, key: str) -> RawItem:
    spec = ctx.spec
    fields = spec.fields
    item = RawItem(
        key=key,
        caption=_caption(record.get(fields.caption), spec, f"caption field '{fields.caption}'") if fields.caption else None,
        license=(_text(record.get(fields.license), f"license field '{fields.license}'") if fields.license else None) or spec.license,
        source_url=_text(record.get(fields.url), f"url field '{fields.url}'") if fields.url else None,
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
        text = _text(value, f"path field '{fields.image}'")
        if not text:
            raise _BadValue(f"path field '{fields.image}' is empty")
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
        url = _text(value, f"url field '{fields.image}'")
        if not url:
            raise _BadValue(f"url field '{fields.image}' is empty")
        item.url = url
        item.source_url = item.source_url or url
    return item


def _position_key(ctx: _Context, file: PurePath, row: int) -> str:
    return f"{file.name}:{row}"


def _named_columns(spec: SourceSpec) -> dict[str, str]:
    """The columns the spec's ``fields`` name, by setting (``{"caption": "alt_text"}``)."""
    names = ("key", "image", "caption", "license", "url", "embedding")
    return {name: column for name in names if (column := getattr(spec.fields, name))}


def _missing_columns(spec: SourceSpec, columns: list[str]) -> str:
    """The spec's named fields that are not columns, as ``fields.caption 'cap'`` (empty if none)."""
    return ", ".join(f"fields.{name} {column!r}" for name, column in _named_columns(spec).items() if column not in columns)


def read_parquet(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    ctx = _Context(spec, location, root or make_root(spec, location, None, storage_options))
    for file in _files(location, (".parquet",), ctx.root):
        yield from read_parquet_file(ctx, file)


def read_parquet_file(
    ctx: _Context, file: PurePath, row_groups: list[int] | None = None, first_row: int = 0, rows: int | None = None
) -> Iterator[RawItem]:
    """One Parquet file, or only ``row_groups`` of it (whose first row is ``first_row`` of the
    file, so position keys are the same however the file is split); with ``rows``, only that
    many rows from ``first_row``, which may lie inside the first group (a piece of a group)."""
    import pyarrow.parquet as pq

    handle, refused = open_contained(file, ctx.root, random_access=True)
    if handle is None:
        assert refused is not None, "open_contained says why it opened nothing"
        yield _file_error(file, refused.status, refused.error)
        return
    row = first_row
    with handle:
        try:
            parquet = pq.ParquetFile(handle)
            missing = _missing_columns(ctx.spec, parquet.schema_arrow.names)
            if missing:
                # A typo in the spec, or a file of another layout: one row saying so, not one
                # per record (and not captions or licenses silently left empty).
                yield _file_error(file, _INVALID, f"{file.name} has no column {missing}; its columns: {parquet.schema_arrow.names}"[:500])
                return
            skip, left = 0, rows
            if rows is not None and row_groups:
                skip = first_row - sum(parquet.metadata.row_group(g).num_rows for g in range(row_groups[0]))
            for batch in parquet.iter_batches(batch_size=256, row_groups=row_groups):
                if left is not None:
                    if skip >= batch.num_rows:
                        skip -= batch.num_rows
                        continue
                    batch, skip = batch.slice(skip, left), 0
                    left -= batch.num_rows
                for record in batch.to_pylist():
                    yield _record_to_item(record, ctx, file.parent, _position_key(ctx, file, row))
                    row += 1
                if left == 0:
                    break
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a bad file
            where = f"from row {row}" if row else "at all"
            item = _file_error(file, Status.UNREADABLE.value, f"cannot read {file.name} {where}: {type(exc).__name__}: {exc}"[:500])
            if row:
                item.key = f"{file.name}:unreadable-from-{row}"
            yield item


def _jsonl_lines(handle, limit: int, first_line: int = 0, length: int | None = None) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) per line; None for a line longer than ``limit`` (skipped unread).
    ``length``: read only the lines that start within that many bytes (a unit's byte range)."""
    line_no = first_line
    read = 0
    while length is None or read < length:
        line = handle.readline(limit + 1)
        if not line:
            return
        read += len(line)
        line_no += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while True:  # drop the rest of the overlong line in bounded pieces
                rest = handle.readline(limit + 1)
                read += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            yield line_no, None
            continue
        yield line_no, line


def read_jsonl(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    ctx = _Context(spec, location, root or make_root(spec, location, None, storage_options))
    for file in _files(location, (".jsonl", ".json"), ctx.root):
        yield from read_jsonl_file(ctx, file)


def jsonl_line_limit(spec: SourceSpec) -> int:
    # A line carries at most one image as base64 plus its metadata.
    return spec.max_bytes * 4 // 3 + SIDECAR_MAX_BYTES


def read_jsonl_file(ctx: _Context, file: PurePath, byte_range: tuple[int, int] | None = None, first_line: int = 0) -> Iterator[RawItem]:
    """The file's items; ``byte_range`` (start, end) with the number of lines before ``start``
    reads one piece of a split file (see ``units``): the lines that start in that range."""
    spec = ctx.spec
    limit = jsonl_line_limit(spec)
    handle, refused = open_contained(file, ctx.root)
    if handle is None:
        assert refused is not None, "open_contained says why it opened nothing"
        yield _file_error(file, refused.status, refused.error)
        return
    with handle:
        # The handle is a raw file (os.fdopen, unbuffered) or an object-store stream: both have
        # the readinto a BufferedReader reads through, which BinaryIO does not declare.
        buffered = io.BufferedReader(cast(io.RawIOBase, handle))
        length = None
        try:
            if byte_range is not None:
                buffered.seek(byte_range[0])
                length = byte_range[1] - byte_range[0]
            for line_no, raw in _jsonl_lines(buffered, limit, first_line, length):
                position = f"{file.name}:{line_no}"
                if raw is None:
                    yield RawItem(
                        key=position,
                        error=f"line {line_no} of {file.name} is longer than {limit} bytes",
                        error_status=Status.TOO_LARGE.value,
                    )
                    continue
                try:
                    line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    yield RawItem(
                        key=position,
                        error=f"line {line_no} of {file.name} is not UTF-8: {exc.reason} at byte {exc.start}",
                        error_status=_INVALID,
                    )
                    continue
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, RecursionError) as exc:
                    msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
                    yield RawItem(key=position, error=f"line {line_no} of {file.name} is not JSON: {msg}", error_status=_INVALID)
                    continue
                if not isinstance(record, dict):
                    yield RawItem(key=position, error=f"line {line_no} of {file.name} is not an object", error_status=_INVALID)
                    continue
                yield _record_to_item(record, ctx, file.parent, position)
        except OSError as exc:
            yield _file_error(file, Status.UNREADABLE.value, f"cannot read {file.name}: {exc}")


# -- image folders --------------------------------------------------------------------------------


def _walk(folder: Path, root: Root, visited: set[str]) -> Iterator[tuple[Path, str | None]]:
    """(path, None) for every item, (folder, reason) for a folder that cannot be listed.

    Dotfiles and sidecars are not items. Directory symlinks are followed only inside the root
    and only once (no loops); one that leaves the root is yielded as an item so that it
    becomes an ``outside_root`` row.
    """
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        yield folder, f"cannot list {folder}: {exc.strerror or exc}"
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        try:
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError:
            is_dir = False
        if is_dir:
            real = os.path.realpath(path)
            if not root.contains(real):
                yield path, None
            elif real not in visited:
                visited.add(real)
                yield from _walk(path, root, visited)
            # else: a link back to a folder already listed; its files are rows already
            continue
        if path.suffix.lower() in SIDECAR_EXTENSIONS:
            continue  # read (contained) with its image, never an item
        yield path, None


def _sidecar_caption(image: PurePath, ctx: _Context) -> str | None:
    """The caption from ``<name>.txt`` or ``<name>.json`` beside the image; _BadValue if bad."""
    txt = image.with_suffix(".txt")
    data, refused = read_optional(txt, ctx.root, SIDECAR_MAX_BYTES)
    if refused is not None:
        raise _BadValue(f"sidecar {txt.name}: {refused.error}")
    if data is not None:
        return _text(data, f"sidecar {txt.name}")
    meta = image.with_suffix(".json")
    data, refused = read_optional(meta, ctx.root, SIDECAR_MAX_BYTES)
    if refused is not None:
        raise _BadValue(f"sidecar {meta.name}: {refused.error}")
    if data is not None:
        record = _json_object(data, f"sidecar {meta.name}")
        name = "caption" if "caption" in record else "text"
        return _caption(record.get(name), ctx.spec, f"sidecar {meta.name} '{name}'")
    return None


def read_image_folder(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    ctx = image_folder_context(spec, location, root, storage_options)
    for entry in walk_image_folder(ctx):
        yield read_folder_entry(ctx, *entry)


def image_folder_context(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None, *, check: bool = True
) -> _Context:
    """``check``: make sure the location can be reached (the lister does; a unit's reader, which
    runs after the listing succeeded, skips the extra requests)."""
    if isinstance(location, str):
        # A prefix has no existence of its own: an emptied one lists nothing (allow_empty decides).
        root = root or make_root(spec, location, None, storage_options)
        if not isinstance(root, ObjectRoot):
            raise ValueError(f"image folder {location} is an object-store URI, but its root is a local folder")
        if check:
            root.check(location)
        return _Context(spec, PurePosixPath(root.to_path(location)), root)
    if not location.is_dir():
        raise SourceUnavailable(f"image folder {location} does not exist")
    return _Context(spec, location, root or Root(location))


def walk_image_folder(ctx: _Context) -> Iterator[tuple[PurePath, str | None]]:
    """The folder's entries in reading order: (path, None), or (folder, reason) when unlistable."""
    # image_folder_context pairs an object-store root with a PurePosixPath, a local one with a Path.
    if isinstance(ctx.root, ObjectRoot):
        assert isinstance(ctx.location, PurePosixPath)
        return _walk_prefix(ctx.location, ctx.root)
    assert isinstance(ctx.location, Path)
    return _walk(ctx.location, ctx.root, {os.path.realpath(ctx.location)})


def _walk_prefix(folder: PurePosixPath, root: ObjectRoot) -> Iterator[tuple[PurePosixPath, str | None]]:
    """``_walk`` on an object store: one delimited listing per folder, same order and rules (no
    links to follow there)."""
    try:
        entries = root.scandir(str(folder))
    except OSError as exc:
        yield folder, f"cannot list {root.uri(str(folder))}: {str(exc)[:300]}"
        return
    for name, is_dir in entries:
        if name.startswith("."):
            continue
        path = folder / name
        if is_dir:
            yield from _walk_prefix(path, root)
        elif path.suffix.lower() not in SIDECAR_EXTENSIONS:
            yield path, None


def read_folder_entry(ctx: _Context, path: PurePath, unlistable: str | None) -> RawItem:
    spec = ctx.spec
    key = path.relative_to(ctx.location).as_posix()
    if unlistable:
        return RawItem(key=f"{key}:unlistable", error=unlistable, error_status=Status.UNREADABLE.value, file_level=True)
    shown = ctx.root.uri(str(path)) if isinstance(ctx.root, ObjectRoot) else str(path)
    data, refused = read_contained(path, ctx.root, spec.max_bytes)
    if refused is not None:
        return RawItem(key=key, path=shown, error=refused.error, error_status=refused.status)
    try:
        caption = _sidecar_caption(path, ctx)
    except _BadValue as exc:
        return RawItem(key=key, path=shown, error=str(exc), error_status=_INVALID)
    return RawItem(key=key, data=data, path=shown, caption=caption, license=spec.license)


# -- WebDataset -----------------------------------------------------------------------------------


def _wds_key(member_name: str) -> tuple[str, str]:
    """WebDataset convention: the key is the path up to the first dot of the basename."""
    path = PurePosixPath(member_name)
    stem, _, ext = path.name.partition(".")
    return str(path.parent / stem) if str(path.parent) != "." else stem, ext.lower()


def _member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo, cap: int) -> bytes:
    if member.size > cap:
        raise _TooLarge(f"member {member.name} of {member.size} bytes exceeds the limit of {cap}")
    handle = archive.extractfile(member)
    if handle is None:
        raise _BadValue(f"member {member.name} has no data")
    data = read_capped(handle, cap)
    if data is None:
        raise _TooLarge(f"member {member.name} exceeds the limit of {cap}")
    if len(data) != member.size:
        raise _Unreadable(f"member {member.name} is truncated ({len(data)} of {member.size} bytes)")
    return data


class _Unreadable(ValueError):
    pass


def _wds_item(archive: tarfile.TarFile, key: str, members: dict[str, list[tarfile.TarInfo]], spec: SourceSpec) -> RawItem:
    doubled = sorted(f"{m[0].name} ({len(m)}x)" for m in members.values() if len(m) > 1)
    if doubled:
        return RawItem(key=key, error=f"duplicate tar members: {', '.join(doubled)}", error_status=_INVALID)
    links = sorted(m[0].name for m in members.values() if not m[0].isfile())
    if links:
        return RawItem(
            key=key,
            error=f"tar members that are links or special files are not read: {', '.join(links)}",
            error_status=Status.UNREADABLE.value,
        )
    one = {ext: m[0] for ext, m in members.items()}
    fields = spec.fields
    try:
        meta: dict[str, Any] = {}
        if "json" in one:
            meta = _json_object(_member_bytes(archive, one["json"], SIDECAR_MAX_BYTES), f"member {one['json'].name}")
        text_member = one.get("txt") or one.get("caption")
        if text_member is not None:
            caption = _text(_member_bytes(archive, text_member, SIDECAR_MAX_BYTES), f"member {text_member.name}")
        else:
            name = fields.caption or "caption"
            caption = _caption(meta.get(name), spec, f"'{name}' in {key}.json")
        item = RawItem(
            key=key,
            caption=caption,
            license=_text(meta.get(fields.license or "license"), f"'license' in {key}.json") or spec.license,
            source_url=_text(meta.get(fields.url or "url"), f"'url' in {key}.json"),
        )
        image = next((one[ext] for ext in WDS_IMAGE_EXTENSIONS if ext in one), None)
        if image is None:
            return RawItem(key=key, error=f"no image member for key {key!r} (members: {sorted(one)})", error_status=Status.MISSING.value)
        item.data = _member_bytes(archive, image, spec.max_bytes)
        item.path = image.name
        return item
    except _BadValue as exc:
        return RawItem(key=key, error=str(exc), error_status=_INVALID)
    except _TooLarge as exc:
        return RawItem(key=key, error=str(exc), error_status=Status.TOO_LARGE.value)
    except (_Unreadable, tarfile.TarError, OSError, EOFError, ValueError) as exc:
        return RawItem(key=key, error=f"{exc}"[:500], error_status=Status.UNREADABLE.value)


def read_webdataset(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    """Members group by key wherever they lie in the tar (an index of headers, then reads)."""
    ctx = _Context(spec, location, root or make_root(spec, location, None, storage_options))
    for file in _files(location, (".tar",), ctx.root):
        yield from read_tar(ctx, file)


def read_tar(ctx: _Context, file: PurePath) -> Iterator[RawItem]:
    spec = ctx.spec
    handle, refused = open_contained(file, ctx.root)
    if handle is None:
        assert refused is not None, "open_contained says why it opened nothing"
        yield _file_error(file, refused.status, refused.error)
        return
    with handle:
        try:
            archive = tarfile.open(fileobj=handle, mode="r:*")
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            yield _file_error(file, Status.UNREADABLE.value, f"cannot open tar {file.name}: {exc}")
            return
        # Only headers are held (TarInfo objects); member data is read per key below.
        groups: dict[str, dict[str, list[tarfile.TarInfo]]] = {}
        broken: str | None = None
        try:
            for member in archive:
                if member.isdir():
                    continue
                key, ext = _wds_key(member.name)
                groups.setdefault(key, {}).setdefault(ext, []).append(member)
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            broken = f"tar {file.name} is corrupt after {sum(len(g) for g in groups.values())} members: {exc}"
        try:
            for key, members in groups.items():
                yield _wds_item(archive, key, members, spec)
        finally:
            archive.close()
        if broken:
            yield RawItem(key=f"{file.name}:corrupt", path=str(file), error=broken, error_status=Status.UNREADABLE.value, file_level=True)


# -- Lance ----------------------------------------------------------------------------------------


def read_lance(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    import lance

    remote = isinstance(location, str) and "://" in location
    try:
        ds = lance.dataset(str(location), storage_options=(storage_options or None) if remote else None)
    except Exception as exc:  # noqa: BLE001 - lance raises several types for a missing table
        raise SourceUnavailable(f"cannot open Lance table {location}: {exc}") from exc
    missing = _missing_columns(spec, ds.schema.names)
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
    ctx = _Context(spec, location, root)
    row = 0
    try:
        for batch in ds.to_batches(columns=list(dict.fromkeys(_named_columns(spec).values())), batch_size=256):
            for record in batch.to_pylist():
                yield _record_to_item(record, ctx, base, f"row:{row}")
                row += 1
    except Exception as exc:  # noqa: BLE001 - a damaged fragment must not hide the rows read
        yield RawItem(
            key=f"row:{row}:unreadable",
            error=f"cannot read {location} from row {row}: {type(exc).__name__}: {exc}"[:500],
            error_status=Status.UNREADABLE.value,
            file_level=True,
        )


READERS = {
    "image_folder": read_image_folder,
    "parquet": read_parquet,
    "jsonl": read_jsonl,
    "webdataset": read_webdataset,
    "lance": read_lance,
}


def read_source(source: RegisteredSource, storage_options: dict | None = None) -> Iterator[RawItem]:
    """Every item of ``source``; ``storage_options`` reach an object-store location."""
    location = source.resolve_location()
    root = make_root(source.spec, location, source.resolve_root(), storage_options)
    return READERS[source.spec.shape](source.spec, location, root, storage_options)
