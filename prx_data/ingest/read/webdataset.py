"""WebDataset sources: each tar shard's members grouped by key, one item per key."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from prx_data.core.schema import Status
from prx_data.ingest.read.contained import AnyRoot, open_contained, read_capped
from prx_data.ingest.read.raw_item import RawItem
from prx_data.ingest.read.records import INVALID_RECORD, SIDECAR_MAX_BYTES, BadValue, TooLarge, caption_value, json_object, text_value
from prx_data.ingest.read.source_files import ReadContext, file_error, list_files, make_root
from prx_data.ingest.registry import SourceSpec

# WebDataset member extensions that hold the image (the decoded header decides the format).
WDS_IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "avif", "gif", "bmp", "tif", "tiff", "heic", "heif", "jxl")


def _wds_key(member_name: str) -> tuple[str, str]:
    """WebDataset convention: the key is the path up to the first dot of the basename."""
    path = PurePosixPath(member_name)
    stem, _, ext = path.name.partition(".")
    return str(path.parent / stem) if str(path.parent) != "." else stem, ext.lower()


def _member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo, cap: int) -> bytes:
    if member.size > cap:
        raise TooLarge(f"member {member.name} of {member.size} bytes exceeds the limit of {cap}")
    handle = archive.extractfile(member)
    if handle is None:
        raise BadValue(f"member {member.name} has no data")
    data = read_capped(handle, cap)
    if data is None:
        raise TooLarge(f"member {member.name} exceeds the limit of {cap}")
    if len(data) != member.size:
        raise _Unreadable(f"member {member.name} is truncated ({len(data)} of {member.size} bytes)")
    return data


class _Unreadable(ValueError):
    pass


def _wds_item(archive: tarfile.TarFile, key: str, members: dict[str, list[tarfile.TarInfo]], spec: SourceSpec) -> RawItem:
    doubled = sorted(f"{m[0].name} ({len(m)}x)" for m in members.values() if len(m) > 1)
    if doubled:
        return RawItem(key=key, error=f"duplicate tar members: {', '.join(doubled)}", error_status=INVALID_RECORD)
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
            meta = json_object(_member_bytes(archive, one["json"], SIDECAR_MAX_BYTES), f"member {one['json'].name}")
        text_member = one.get("txt") or one.get("caption")
        if text_member is not None:
            caption = text_value(_member_bytes(archive, text_member, SIDECAR_MAX_BYTES), f"member {text_member.name}")
        else:
            name = fields.caption or "caption"
            caption = caption_value(meta.get(name), spec, f"'{name}' in {key}.json")
        item = RawItem(
            key=key,
            caption=caption,
            license=text_value(meta.get(fields.license or "license"), f"'license' in {key}.json") or spec.license,
            source_url=text_value(meta.get(fields.url or "url"), f"'url' in {key}.json"),
        )
        image = next((one[ext] for ext in WDS_IMAGE_EXTENSIONS if ext in one), None)
        if image is None:
            return RawItem(key=key, error=f"no image member for key {key!r} (members: {sorted(one)})", error_status=Status.MISSING.value)
        item.data = _member_bytes(archive, image, spec.max_bytes)
        item.path = image.name
        return item
    except BadValue as exc:
        return RawItem(key=key, error=str(exc), error_status=INVALID_RECORD)
    except TooLarge as exc:
        return RawItem(key=key, error=str(exc), error_status=Status.TOO_LARGE.value)
    except (_Unreadable, tarfile.TarError, OSError, EOFError, ValueError) as exc:
        return RawItem(key=key, error=f"{exc}"[:500], error_status=Status.UNREADABLE.value)


def read_webdataset(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    """Members group by key wherever they lie in the tar (an index of headers, then reads)."""
    ctx = ReadContext(spec, location, root or make_root(spec, location, None, storage_options))
    for file in list_files(location, (".tar",), ctx.root):
        yield from read_tar(ctx, file)


def read_tar(ctx: ReadContext, file: PurePath) -> Iterator[RawItem]:
    spec = ctx.spec
    handle, refused = open_contained(file, ctx.root)
    if handle is None:
        assert refused is not None, "open_contained says why it opened nothing"
        yield file_error(file, refused.status, refused.error)
        return
    with handle:
        try:
            archive = tarfile.open(fileobj=handle, mode="r:*")
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            yield file_error(file, Status.UNREADABLE.value, f"cannot open tar {file.name}: {exc}")
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
