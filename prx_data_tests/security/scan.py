"""Look for secret strings everywhere a reader of a folder or a database could find them,
compressed blobs included."""

from __future__ import annotations

import base64
import gzip
import sqlite3
import zlib
from collections.abc import Iterable
from pathlib import Path


def _expansions(blob: bytes) -> Iterable[bytes]:
    """The blob, and what it decompresses or decodes to (one level of base64 too)."""
    yield blob
    for decode in (zlib.decompress, gzip.decompress, lambda b: zlib.decompress(b, -15)):
        try:
            yield decode(blob)
        except Exception:
            pass
    try:
        decoded = base64.b64decode(blob, validate=True)
    except Exception:
        return
    yield decoded
    for decode in (zlib.decompress, gzip.decompress):
        try:
            yield decode(decoded)
        except Exception:
            pass


def _as_bytes(value) -> bytes | None:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return None


def found_in_blob(blob: bytes, secrets: Iterable[bytes]) -> set[bytes]:
    hits = set()
    for expanded in _expansions(blob):
        hits |= {s for s in secrets if s in expanded}
    return hits


def found_in_cells(rows: Iterable[tuple], secrets: list[bytes], where: str) -> list[str]:
    out = []
    for row in rows:
        for value in row:
            blob = _as_bytes(value)
            if blob is not None:
                out += [f"{where}: {s!r}" for s in found_in_blob(blob, secrets)]
    return out


def scan_folder(root: Path, secrets: list[bytes]) -> list[str]:
    """Every file under ``root`` (raw and decompressed) and every cell of every SQLite database."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        out += [f"{path}: {s!r}" for s in found_in_blob(path.read_bytes(), secrets)]
        if path.read_bytes()[:16] == b"SQLite format 3\x00":
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
                for table in tables:
                    out += found_in_cells(db.execute(f'SELECT * FROM "{table}"'), secrets, f"{path}:{table}")
    return out


def scan_postgres(dsn: str, secrets: list[bytes]) -> list[str]:
    import psycopg2

    out = []
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        for (table,) in cur.fetchall():
            cur.execute(f'SELECT * FROM "{table}"')
            out += found_in_cells(cur.fetchall(), secrets, f"postgres:{table}")
    return out
