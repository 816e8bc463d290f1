"""What a reader yields: one item of a source, before validation; or why the source as a whole
cannot be read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RawItem:
    key: str
    data: bytes | None = None  # inline bytes or read from a local path
    url: str | None = None  # to download when data is None and this is set
    path: str | None = None  # local path the bytes came from (or should have)
    caption: str | None = None
    license: str | None = None
    source_url: str | None = None
    embedding: list[float] | None = None
    error: str | None = None  # a reader-level problem (missing path, bad record)
    error_status: str | None = None  # the Status value that error maps to (default invalid_image)
    # The error is about a whole file (unreadable Parquet, corrupt tar tail), not one record:
    # rows that came from that file earlier are not deleted on this run.
    file_level: bool = False


class SourceUnavailable(RuntimeError):
    """The source as a whole cannot be read (its location does not exist, say)."""
