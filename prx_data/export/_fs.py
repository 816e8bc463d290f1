"""Stable JSON and digests shared by the export modules (writing lives in ``prx_data.core.storage``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def dumps_stable(obj: Any) -> bytes:
    """JSON with sorted keys and no whitespace: equal content gives equal bytes."""
    return (json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
