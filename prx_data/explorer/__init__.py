"""The corpus explorer: a read-only web app over the Lance tables, the exports and the skip lists.

Start it with ``prx-data explore`` (``prx_data.explorer.app:main``) or :func:`serve`. Nothing here
writes to a table, a shard or a sidecar; every id or name taken from a request is checked
against a pattern or a known set before it reaches Lance or the file system.
"""

from __future__ import annotations


def serve(host: str = "127.0.0.1", port: int = 8765, settings=None) -> None:
    # Imported lazily: the CLI imports this package without paying for Starlette and Lance.
    # lazy: pulls in lance, starlette, jinja2
    from prx_data.explorer.app import serve as _serve

    _serve(host=host, port=port, settings=settings)


__all__ = ["serve"]
