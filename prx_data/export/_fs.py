"""Stable JSON and digests shared by the export modules.

Writing (atomic local writes, whole-object PUTs) lives in ``prx_data.storage_uri``; the local
helpers are re-exported here for the MDS writer's staging folders.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from prx_data.storage_uri import atomic_write_bytes, fsync_dir  # noqa: F401 (re-exported)


def dumps_stable(obj: Any) -> bytes:
    """JSON with sorted keys and no whitespace: equal content gives equal bytes."""
    return (json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
