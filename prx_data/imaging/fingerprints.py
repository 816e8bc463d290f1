"""Image fingerprints for opt-outs: a perceptual hash, or for degenerate (flat, near-flat)
images the exact content key ``image_sha256``, whose phash says nothing about the picture.

Kept apart from the phash stage so ingest can fingerprint a row it is about to opt out (and whose
bytes it drops) without running the stage.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from prx_data.core.schema import PHASH_COLUMNS

DEGENERATE_COLUMN = "phash_degenerate"  # added by the phash stage; absent on older tables


def ingest_fingerprint(data: bytes | None) -> dict:
    """``image_sha256`` and the phash stage's columns for an image's bytes (never raises).

    Ingest stores these on a row it opts out, so the request keeps the fingerprint of an image
    that is no longer kept.
    """
    # lazy: pulls in PIL
    from prx_data.imaging.phash import phash_row

    if data is None:
        return {}
    row = phash_row(data)
    out = {name: row.get(name) for name in PHASH_COLUMNS.names}
    out["image_sha256"] = hashlib.sha256(data).hexdigest()
    return out


def image_fingerprint(data: bytes) -> tuple[int | None, str, bool]:
    """(phash or None when degenerate, sha256, degenerate) of an image file; raises DecodeError."""
    # lazy: pulls in PIL
    from prx_data.imaging.phash import phash_bytes, phash_row

    sha = hashlib.sha256(data).hexdigest()
    row = phash_row(data)
    if row.get("phash") is None:
        phash_bytes(data)  # raises the decode error with its message
    degenerate = bool(row.get(DEGENERATE_COLUMN))
    phash = row["phash"]
    assert phash is None or isinstance(phash, int), "phash_row stores an int64 or null"
    return (None if degenerate else phash), sha, degenerate


def degenerate_mask(table: pa.Table) -> pa.Array:
    """Rows whose phash is not a fingerprint (tolerates the column being absent or null)."""
    import pyarrow.compute as pc

    if DEGENERATE_COLUMN not in table.column_names:
        return pa.array([False] * table.num_rows, pa.bool_())
    return pc.fill_null(table[DEGENERATE_COLUMN], False).combine_chunks()


__all__ = ["DEGENERATE_COLUMN", "degenerate_mask", "image_fingerprint", "ingest_fingerprint"]
