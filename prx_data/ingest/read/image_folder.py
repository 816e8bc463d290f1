"""Image folders (a local folder or an object-store prefix): the walk in reading order, and
each image with its caption sidecar as an item."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePath, PurePosixPath

from prx_data.core.schema import Status
from prx_data.ingest.read.contained import AnyRoot, Root, read_contained, read_optional
from prx_data.ingest.read.object_store import ObjectRoot
from prx_data.ingest.read.raw_item import RawItem, SourceUnavailable
from prx_data.ingest.read.records import INVALID_RECORD, SIDECAR_MAX_BYTES, BadValue, caption_value, json_object, text_value
from prx_data.ingest.read.source_files import ReadContext, make_root
from prx_data.ingest.registry import SourceSpec

# Sidecar files beside images: read with their image, never items themselves.
SIDECAR_EXTENSIONS = (".txt", ".json")


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


def _sidecar_caption(image: PurePath, ctx: ReadContext) -> str | None:
    """The caption from ``<name>.txt`` or ``<name>.json`` beside the image; BadValue if bad."""
    txt = image.with_suffix(".txt")
    data, refused = read_optional(txt, ctx.root, SIDECAR_MAX_BYTES)
    if refused is not None:
        raise BadValue(f"sidecar {txt.name}: {refused.error}")
    if data is not None:
        return text_value(data, f"sidecar {txt.name}")
    meta = image.with_suffix(".json")
    data, refused = read_optional(meta, ctx.root, SIDECAR_MAX_BYTES)
    if refused is not None:
        raise BadValue(f"sidecar {meta.name}: {refused.error}")
    if data is not None:
        record = json_object(data, f"sidecar {meta.name}")
        name = "caption" if "caption" in record else "text"
        return caption_value(record.get(name), ctx.spec, f"sidecar {meta.name} '{name}'")
    return None


def read_image_folder(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    ctx = image_folder_context(spec, location, root, storage_options)
    for entry in walk_image_folder(ctx):
        yield read_folder_entry(ctx, *entry)


def image_folder_context(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None, *, check: bool = True
) -> ReadContext:
    """``check``: make sure the location can be reached (the lister does; a unit's reader, which
    runs after the listing succeeded, skips the extra requests)."""
    if isinstance(location, str):
        # A prefix has no existence of its own: an emptied one lists nothing (allow_empty decides).
        root = root or make_root(spec, location, None, storage_options)
        if not isinstance(root, ObjectRoot):
            raise ValueError(f"image folder {location} is an object-store URI, but its root is a local folder")
        if check:
            root.check(location)
        return ReadContext(spec, PurePosixPath(root.to_path(location)), root)
    if not location.is_dir():
        raise SourceUnavailable(f"image folder {location} does not exist")
    return ReadContext(spec, location, root or Root(location))


def walk_image_folder(ctx: ReadContext) -> Iterator[tuple[PurePath, str | None]]:
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


def read_folder_entry(ctx: ReadContext, path: PurePath, unlistable: str | None) -> RawItem:
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
    except BadValue as exc:
        return RawItem(key=key, path=shown, error=str(exc), error_status=INVALID_RECORD)
    return RawItem(key=key, data=data, path=shown, caption=caption, license=spec.license)
