"""httpx: connect an ``HTTPTransport`` through our own httpcore network backend.

httpcore's ``ConnectionPool`` takes a ``network_backend`` publicly, but ``httpx.HTTPTransport``
builds its pool itself and offers no way to pass one. Rebuilding the transport by hand would
copy far more of httpx (request/response mapping, error translation) than swapping the backend
on the pool it built. A transport whose pool is not where this expects fails here, loudly:
fetching without the address guard must never happen silently.
"""

from __future__ import annotations

from typing import Any

import httpcore
import httpx

WRITTEN_FOR = {"httpx": "0.28.1", "httpcore": "1.0.9"}


def set_network_backend(transport: httpx.HTTPTransport, backend: httpcore.NetworkBackend) -> None:
    pool: Any = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore.ConnectionPool) or not hasattr(pool, "_network_backend"):
        raise RuntimeError(
            f"cannot install a network backend on {type(transport).__name__} "
            f"(httpx {httpx.__version__}, httpcore {httpcore.__version__}): see prx_data.compat.httpx_backend"
        )
    pool._network_backend = backend


def version_mismatch() -> str | None:
    installed = {"httpx": httpx.__version__, "httpcore": httpcore.__version__}
    if installed == WRITTEN_FOR:
        return None
    return (
        f"installed {installed}, prx_data.compat.httpx_backend was written for {WRITTEN_FOR}: "
        "re-check that HTTPTransport keeps its httpcore.ConnectionPool in `_pool` and that the "
        "pool opens every connection through `_network_backend` (the download address guard "
        "depends on it; prx_data_tests/ingest/test_hostile_sources.py must pass), then update WRITTEN_FOR"
    )
