"""Which samples an opt-out request covers, so the explorer does not show their pictures.

Rows opted out at ingest keep no bytes; rows matched later (``optout_requests``) still hold
theirs until the table is rebuilt, and are listed in the opt-out samples table. The set is read
again when that table gets a new version, checked at most every ``ttl_s``.
"""

from __future__ import annotations

import threading
import time

from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths


class OptedOut:
    def __init__(self, paths: StoragePaths, options: dict | None = None, ttl_s: float = 2.0):
        self.uri = paths.optout_samples_table()
        self.options = options
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._checked = -float("inf")
        self._version: int | None = None
        self._ids: frozenset[str] = frozenset()

    def ids(self) -> frozenset[str]:
        with self._lock:
            if time.monotonic() - self._checked >= self.ttl_s:
                self._refresh()
                self._checked = time.monotonic()
            return self._ids

    def __contains__(self, sample_id: str) -> bool:
        return sample_id in self.ids()

    def _refresh(self) -> None:
        ds = open_table(self.uri, self.options)
        if ds is None:
            self._version, self._ids = None, frozenset()
            return
        if ds.version != self._version:
            self._ids = frozenset(ds.to_table(columns=["sample_id"]).column("sample_id").to_pylist())
            self._version = ds.version
