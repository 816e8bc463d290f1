"""Which samples the skip-list sidecars exclude, and why: read from the sidecars themselves.

The training loader trusts the sidecars, not a table, so the explorer does too. The tree is
walked at most every ``ttl_s`` seconds and a sidecar is parsed again only when its mtime or
size changed, so a page view costs a directory walk at worst, not a re-read of every list.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from prx_data.export.skiplist import SKIP_INFIX, SkiplistError, read_sidecar
from prx_data.export.tree import list_buckets, list_sources


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
    def __init__(self, mds_root: str, ttl_s: float = 2.0):
        self.mds_root = mds_root
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._walked_at = float("-inf")
        self._parsed: dict[str, tuple[tuple[int, int], list[tuple[str, SkipEntry]] | str]] = {}
        self._snapshot = SkipSnapshot()

    def snapshot(self) -> SkipSnapshot:
        with self._lock:
            if time.monotonic() - self._walked_at >= self.ttl_s:
                self._refresh()
                self._walked_at = time.monotonic()
            return self._snapshot

    def _sidecar_paths(self) -> list[str]:
        if "://" in self.mds_root:
            return []  # sidecars of an object-store tree are not browsed (see the package doc)
        found = []
        for ref in list_buckets(self.mds_root):
            bucket_dir = ref.dir(self.mds_root)
            for source in list_sources(bucket_dir):
                found.extend(glob.glob(os.path.join(glob.escape(bucket_dir), source, "*" + SKIP_INFIX + "*.json")))
        return sorted(found)

    def _refresh(self) -> None:
        changed = False
        seen = set()
        for path in self._sidecar_paths():
            seen.add(path)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            stamp = (st.st_mtime_ns, st.st_size)
            cached = self._parsed.get(path)
            if cached is not None and cached[0] == stamp:
                continue
            self._parsed[path] = (stamp, self._read(path))
            changed = True
        for gone in set(self._parsed) - seen:
            del self._parsed[gone]
            changed = True
        if changed:
            self._snapshot = self._merge()

    def _read(self, path: str) -> list[tuple[str, SkipEntry]] | str:
        try:
            sidecar = read_sidecar(path)
        except (SkiplistError, OSError) as error:
            return str(error)
        rel = os.path.relpath(path, self.mds_root).replace(os.sep, "/")
        shard = f"{os.path.dirname(rel)}/{sidecar.shard}"
        kept = sidecar.kept_sample_ids or [None] * len(sidecar.sample_ids)
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
