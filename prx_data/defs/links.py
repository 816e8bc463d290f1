"""Metadata values the Dagster UI renders as links: a storage location, or an explorer page.

A local path becomes a ``file://`` URL (the UI shows it as a link a desktop opens; a browser
tab opened from the UI's page may refuse ``file://``, so the explorer page beside it is the one
that always opens); an object-store URI stays as it is. Explorer links point at
``PRX_EXPLORER_URL``, where ``prx-data explore`` answers.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlencode

import dagster as dg

from prx_data.core.settings import get_settings
from prx_data.core.storage import local_path


def location_url(uri: str) -> str:
    local = local_path(uri)
    return Path(local).resolve().as_uri() if local is not None else uri


def location(uri: str) -> dg.MetadataValue:
    return dg.MetadataValue.url(location_url(uri))


def explorer_url(route: str, **query: str | int | None) -> str:
    base = get_settings().explorer_url.rstrip("/")
    params = urlencode({k: v for k, v in query.items() if v is not None})
    return f"{base}{quote(route)}" + (f"?{params}" if params else "")


def explorer(route: str, **query: str | int | None) -> dg.MetadataValue:
    return dg.MetadataValue.url(explorer_url(route, **query))


def markdown_links(rows: list[tuple[object, ...]], header: tuple[str, ...]) -> dg.MetadataValue:
    """A Markdown table whose ``(text, url)`` cells are links (Dagster's table values are text)."""

    def cell(value) -> str:
        if isinstance(value, tuple):
            text, url = value
            return f"[{text}]({url})"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))
