"""Small local-filesystem helpers shared by the export modules: atomic writes, stable JSON.

Everything here works on local paths. Object-store roots are meant to be handled by writing
locally and uploading (see ``mds_writer``), so these helpers never see a URI.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any


def dumps_stable(obj: Any) -> bytes:
    """JSON with sorted keys and no whitespace: equal content gives equal bytes."""
    return (json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``.

    Same folder so the rename stays on one filesystem (atomic on POSIX); readers see the old
    file or the new one, never a torn one.
    """
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_if_changed(path: str, data: bytes) -> bool:
    """Atomically write ``data`` unless the file already holds exactly these bytes.

    Skipping unchanged files keeps mtimes stable, so uploads/rsyncs and caches see no change.
    Returns True when the file was (re)written.
    """
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except FileNotFoundError:
        pass
    atomic_write_bytes(path, data)
    return True


def fsync_dir(path: str) -> None:
    """Persist a rename in ``path`` (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
