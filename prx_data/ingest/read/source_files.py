"""A source's location as the readers see it: its containment root, the files it names, and
the item that stands for a file that cannot be read at all."""

from __future__ import annotations

import glob as globlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath

from prx_data.ingest.read.contained import AnyRoot, Root, default_root
from prx_data.ingest.read.object_store import ObjectRoot, fixed_prefix
from prx_data.ingest.read.raw_item import RawItem, SourceUnavailable
from prx_data.ingest.registry import SourceSpec


@dataclass(frozen=True)
class ReadContext:
    """What a reader reads with: the spec, the location, and the root every read stays inside."""

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


def list_files(location: Path | str, suffixes: tuple[str, ...], root: AnyRoot | None = None) -> list[Path] | list[PurePosixPath]:
    if isinstance(root, ObjectRoot):
        return [PurePosixPath(p) for p in root.files(str(location), suffixes)]
    return [Path(name) for name, _ in _local_files(location, suffixes)]


def list_sized_files(location: Path | str, suffixes: tuple[str, ...], root: AnyRoot | None = None) -> list[tuple[str, int | None]]:
    """``list_files`` as names (no path object a file: a listing of millions), each with its
    size (None for anything but a regular file: such a file is read on its own, and its reader
    says why it cannot be read), from one ``lstat`` a file."""
    if isinstance(root, ObjectRoot):
        return root.sized_files(str(location), suffixes)
    return _local_files(location, suffixes)


def _local_files(location: Path | str, suffixes: tuple[str, ...]) -> list[tuple[str, int | None]]:
    pattern = str(location)
    local = Path(location)
    if any(ch in pattern for ch in "*?["):
        names = sorted(globlib.glob(pattern, recursive=True))
    elif local.is_dir():
        names = [str(p) for p in sorted(p for p in local.rglob("*") if p.suffix.lower() in suffixes)]
    elif local.exists():
        names = [str(local)]
    else:
        raise SourceUnavailable(f"location {location} does not exist")
    # Directories matched by a glob are not files; everything else (symlinks, FIFOs, a file
    # gone since the listing) is vetted when opened, so it becomes a row rather than vanishing.
    files: list[tuple[str, int | None]] = []
    for name in names:
        try:
            mode = os.lstat(name)
        except OSError:
            files.append((name, None))
            continue
        if stat.S_ISDIR(mode.st_mode):
            continue
        files.append((name, mode.st_size if stat.S_ISREG(mode.st_mode) else None))
    return files


def file_error(file: PurePath, refused_status: str, error: str) -> RawItem:
    return RawItem(key=f"{file.name}:unreadable", path=str(file), error=error, error_status=refused_status, file_level=True)
