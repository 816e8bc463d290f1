"""Which samples the skip-list sidecars exclude, and why: read from the sidecars themselves.

The training loader trusts the sidecars, not a table, so the explorer does too, on a local
folder and an object store alike. The tree is listed at most every ``ttl_s`` seconds (one
recursive listing, which carries sizes and mtimes) and a sidecar is read again only when its
mtime or size changed, so a page view costs a listing at worst, not a re-read of every list.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from prx_data.core.storage import locate, try_read_bytes
from prx_data.export.skiplist import SkiplistError, parse_sidecar, root_sidecar_entries


@dataclass(frozen=True)
class SkipEntry:
    reason: str
    shard: str  # relative to the MDS root, as in the exports table
    index_in_shard: int
    sidecar: str  # relative to the MDS root
    kept_sample_id: str | None


@dataclass(frozen=True)
class SkipSnapshot:
    by_sample: dict[str, tuple[SkipEntry, ...]] = field(default_factory=dict)
    errors: tuple[str, ...] = ()  # sidecars that could not be read, with why
    sidecars: int = 0

    def reasons(self, sample_id: str) -> tuple[SkipEntry, ...]:
        return self.by_sample.get(sample_id, ())

    def is_skipped(self, sample_id: str) -> bool:
        return sample_id in self.by_sample

    def samples_per_reason(self) -> Counter:
        """Unique samples per reason (a sample in several shards counts once per reason)."""
        counts: Counter = Counter()
        for entries in self.by_sample.values():
            counts.update({entry.reason for entry in entries})
        return counts


class SkipIndex:
    def __init__(self, mds_root: str, ttl_s: float = 2.0, storage_options: dict | None = None):
        self.mds_root = mds_root
        self.root = locate(mds_root, storage_options)
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._walked_at = float("-inf")
        self._parsed: dict[str, tuple[tuple, list[tuple[str, SkipEntry]] | str]] = {}
        self._snapshot = SkipSnapshot()

    def snapshot(self) -> SkipSnapshot:
        with self._lock:
            if time.monotonic() - self._walked_at >= self.ttl_s:
                self._refresh()
                self._walked_at = time.monotonic()
            return self._snapshot

    def _refresh(self) -> None:
        changed = False
        seen = set()
        for entry in root_sidecar_entries(self.root):
            rel = entry.name
            seen.add(rel)
            stamp = (entry.mtime, entry.size)
            cached = self._parsed.get(rel)
            if cached is not None and cached[0] == stamp:
                continue
            self._parsed[rel] = (stamp, self._read(rel))
            changed = True
        for gone in set(self._parsed) - seen:
            del self._parsed[gone]
            changed = True
        if changed:
            self._snapshot = self._merge()

    def _read(self, rel: str) -> list[tuple[str, SkipEntry]] | str:
        loc = self.root.child(rel)
        try:
            data = try_read_bytes(loc)
            if data is None:
                raise SkiplistError(f"missing skip-list sidecar {loc.uri}")
            sidecar = parse_sidecar(data, loc.uri)
        except (SkiplistError, OSError) as error:
            return str(error)
        shard = f"{posixpath.dirname(rel)}/{sidecar.shard}"
        kept: Sequence[str | None] = sidecar.kept_sample_ids or [None] * len(sidecar.sample_ids)
        return [
            (sample_id, SkipEntry(sidecar.reason, shard, int(index), rel, keep or None))
            for sample_id, index, keep in zip(sidecar.sample_ids, sidecar.indices.tolist(), kept)
        ]

    def _merge(self) -> SkipSnapshot:
        by_sample: dict[str, list[SkipEntry]] = {}
        errors = []
        for _path, (_, parsed) in sorted(self._parsed.items()):
            if isinstance(parsed, str):
                errors.append(parsed)
                continue
            for sample_id, entry in parsed:
                by_sample.setdefault(sample_id, []).append(entry)
        return SkipSnapshot({k: tuple(v) for k, v in by_sample.items()}, tuple(errors), len(self._parsed))
