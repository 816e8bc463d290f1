"""Reading the files a source names without ever leaving the source's root.

A source is written by someone else: a symlink in an image folder, a ``../../etc/passwd`` in a
path column or a FIFO named ``photo.jpg`` must cost one error row, never a read outside the
root, a hang, or a whole file held in memory. Every read here:

1. resolves the path (symlinks included) and refuses it unless it lies inside the root;
2. opens the resolved path without following a final symlink and without blocking (FIFOs);
3. checks, through ``/proc/self/fd`` where it exists, that the opened file is still inside the
   root (a link swapped between steps 1 and 2 is caught here);
4. refuses anything but a regular file, compares its size with the cap before reading, and
   reads at most ``cap + 1`` bytes, so a file that grows while read cannot pass the cap either.

A source on an object store has an ``object_store.ObjectRoot`` instead: the same three calls
(``open_contained``, ``read_contained``, ``read_optional``) check containment on the prefix,
compare the object's size with the cap before reading and read at most ``cap + 1`` bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, cast

from prx_data.core.schema import Status
from prx_data.ingest.read.object_store import READ_CHUNK, ObjectRoot

_CHUNK = 1024 * 1024
_FD_DIR = "/proc/self/fd"


@dataclass(frozen=True)
class Refused:
    """Why a path was not read: a row status and a message."""

    status: str
    error: str


class Root:
    """The folder a source's reads must stay inside (compared after resolving symlinks)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.path.realpath(os.fspath(path))
        self._prefix = self.path.rstrip(os.sep) + os.sep

    def contains(self, real: str) -> bool:
        return real == self.path or real.startswith(self._prefix)

    def __str__(self) -> str:
        return self.path


def default_root(location: Path) -> Path:
    """The folder a location stands for: itself, a file's folder, or a glob's fixed prefix."""
    text = str(location)
    if any(ch in text for ch in "*?["):
        parts = []
        for part in location.parts:
            if any(ch in part for ch in "*?["):
                break
            parts.append(part)
        return Path(*parts) if parts else Path(".")
    if location.is_dir():
        return location
    return location.parent


AnyRoot = Root | ObjectRoot


def open_contained(path: str | os.PathLike, root: AnyRoot, *, random_access: bool = False) -> tuple[BinaryIO | None, Refused | None]:
    """An open regular file inside ``root``, or why not. The caller closes the file.
    ``random_access``: the reader seeks around (Parquet); otherwise it reads front to back."""
    if isinstance(root, ObjectRoot):
        return _open_object(os.fspath(path), root, random_access)
    shown = os.fspath(path)
    real = os.path.realpath(shown)
    if not root.contains(real):
        return None, Refused(Status.OUTSIDE_ROOT.value, f"{shown} resolves to {real}, outside the source root {root}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        return None, Refused(Status.MISSING.value, f"missing file {shown}")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, Refused(Status.UNREADABLE.value, f"symlink loop at {shown}")
        return None, Refused(Status.UNREADABLE.value, f"cannot open {shown}: {exc.strerror or exc}")
    try:
        opened = _opened_path(fd)
        if opened is not None and not root.contains(opened):
            raise _Refuse(Status.OUTSIDE_ROOT.value, f"{shown} was replaced by a link to {opened}, outside the source root {root}")
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _Refuse(Status.UNREADABLE.value, f"{shown} is not a regular file ({_kind(mode)})")
        # Back to blocking reads: O_NONBLOCK was only there so a FIFO could not hang open().
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        if random_access and opened is not None:
            return _arrow_file(fd), None
        return os.fdopen(fd, "rb", buffering=0), None
    except _Refuse as refused:
        os.close(fd)
        return None, Refused(refused.status, refused.error)
    except OSError as exc:
        os.close(fd)
        return None, Refused(Status.UNREADABLE.value, f"cannot read {shown}: {exc.strerror or exc}")


def read_contained(path: str | os.PathLike, root: AnyRoot, cap: int) -> tuple[bytes | None, Refused | None]:
    """The bytes of a regular file inside ``root`` of at most ``cap`` bytes, or why not."""
    remote = isinstance(root, ObjectRoot)
    handle, refused = open_contained(path, root, random_access=remote)
    if handle is None:
        return None, refused
    with handle:
        try:
            size = root.size(handle) if isinstance(root, ObjectRoot) else os.fstat(handle.fileno()).st_size
            if size > cap:
                return None, Refused(Status.TOO_LARGE.value, f"{size} bytes exceeds the limit of {cap}")
            data = read_capped(handle, cap, READ_CHUNK if remote else _CHUNK)
        except OSError as exc:
            return None, Refused(Status.UNREADABLE.value, f"cannot read {os.fspath(path)}: {exc.strerror or exc}")
    if data is None:
        return None, Refused(Status.TOO_LARGE.value, f"more than {cap} bytes exceeds the limit of {cap}")
    return data, None


def read_optional(path: str | os.PathLike, root: AnyRoot, cap: int) -> tuple[bytes | None, Refused | None]:
    """``read_contained``, but a path that does not exist is (None, None): an optional sidecar."""
    if not isinstance(root, ObjectRoot) and not os.path.lexists(path):
        return None, None
    data, refused = read_contained(path, root, cap)
    # Locally a name that exists but cannot be opened (a dangling link) stays an error.
    if isinstance(root, ObjectRoot) and refused is not None and refused.status == Status.MISSING.value:
        return None, None
    return data, refused


def read_capped(handle: IO[bytes], cap: int, chunk_size: int = _CHUNK) -> bytes | None:
    """Read to the end, or None as soon as more than ``cap`` bytes arrived (never cap + chunk)."""
    buf = bytearray()
    while True:
        chunk = handle.read(min(chunk_size, cap + 1 - len(buf)))
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > cap:
            return None


def _open_object(path: str, root: ObjectRoot, random_access: bool) -> tuple[BinaryIO | None, Refused | None]:
    refused = root.refuse(path)
    if refused is not None:
        return None, Refused(*refused)
    shown = root.uri(path)
    try:
        return root.open(path, random_access=random_access), None
    except FileNotFoundError:
        return None, Refused(Status.MISSING.value, f"missing object {shown}")
    except IsADirectoryError:
        return None, Refused(Status.UNREADABLE.value, f"{shown} is not an object (a prefix)")
    except OSError as exc:
        return None, Refused(Status.UNREADABLE.value, f"cannot open {shown}: {str(exc)[:300]}")


class _Refuse(Exception):
    def __init__(self, status: str, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


def _arrow_file(fd: int) -> BinaryIO:
    """The vetted file as Arrow's own file (reopened through ``/proc/self/fd``: the same file,
    whatever its path names now), so Parquet pages are read into Arrow memory, never into a
    Python ``bytes`` each (a 200 MB cell would cost 200 MB of Python heap before any check)."""
    import pyarrow as pa

    file = pa.OSFile(f"{_FD_DIR}/{fd}", "rb")  # an OSError here: the caller closes ``fd``
    os.close(fd)
    return cast(BinaryIO, file)


def _opened_path(fd: int) -> str | None:
    try:
        return os.path.realpath(os.readlink(f"{_FD_DIR}/{fd}"))
    except OSError:
        return None  # no /proc (macOS): steps 1 and 2 still hold


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"
