"""Stable sample identity: the same item of the same source always gets the same id."""

from __future__ import annotations

import hashlib


def sample_id(source: str, source_key: str) -> str:
    """128-bit hex id from (source name, key inside the source).

    128 bits, not 64: at a billion samples a 64-bit id has a few-percent chance of a collision.
    """
    digest = hashlib.blake2b(f"{source}\x00{source_key}".encode(), digest_size=16)
    return digest.hexdigest()
