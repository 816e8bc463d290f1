"""Corpus figures for the stats page: resolution tiers, aspect-ratio buckets, exclusions.

Exclusions come from three places, kept apart because they happen at different steps:
ingest (a row's status other than ``ok``), export (the exports table's ``drop_reason``) and
after export (the skip-list sidecars). Figures are cached per table version, so a page view
over an unchanged corpus does not rescan it.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.reasons import reason_code
from prx_data.explorer.catalog import Catalog
from prx_data.explorer.skips import SkipSnapshot


@dataclass
class SourceFigures:
    rows: int = 0
    statuses: Counter = field(default_factory=Counter)
    tiers: Counter = field(default_factory=Counter)
    buckets: Counter = field(default_factory=Counter)  # "<tier>/<HxW>"
    drops: Counter = field(default_factory=Counter)


@dataclass
class CorpusFigures:
    sources: dict[str, SourceFigures]
    skip_reasons: Counter
    skip_errors: tuple[str, ...]
    skipped_samples: int

    def total(self, name: str) -> Counter:
        out: Counter = Counter()
        for figures in self.sources.values():
            out.update(getattr(figures, name))
        return out

    @property
    def exported(self) -> int:
        return sum(self.total("tiers").values())


def _counts(table: pa.Table, column: str) -> Counter:
    if table.num_rows == 0:
        return Counter()
    result = pc.value_counts(table.column(column).combine_chunks())
    return Counter({v["values"]: v["counts"] for v in result.to_pylist() if v["values"] is not None})


def _drop_kind(reason: str) -> str:
    # Drop reasons may carry a detail after ':' (e.g. a decode message); the kind is the chart key.
    return reason_code(reason)


class Figures:
    def __init__(self) -> None:
        self._cache: dict[tuple, SourceFigures] = {}
        self._lock = threading.Lock()

    def source(self, catalog: Catalog, source: str) -> SourceFigures | None:
        info = catalog.raw(source)
        if info is None:
            return None
        exports = catalog.exports(source)
        key = (source, info.ds.version, exports.version if exports is not None else None)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        figures = SourceFigures(rows=info.ds.count_rows(), statuses=_counts(info.ds.to_table(columns=["status"]), "status"))
        if exports is not None:
            placed = exports.to_table(columns=["tier", "bucket"], filter="shard IS NOT NULL")
            figures.tiers = _counts(placed, "tier")
            if placed.num_rows:
                tier = pc.cast(placed.column("tier"), pa.string())
                keyed = pc.binary_join_element_wise(tier, placed.column("bucket"), "/")
                figures.buckets = _counts(pa.table({"key": keyed}), "key")
            dropped = exports.to_table(columns=["drop_reason"], filter="drop_reason IS NOT NULL")
            figures.drops = Counter(_drop_kind(r) for r in dropped.column("drop_reason").to_pylist())
        with self._lock:
            # Older versions of this source are never asked for again.
            for old in [k for k in self._cache if k[0] == source]:
                del self._cache[old]
            self._cache[key] = figures
        return figures

    def corpus(self, catalog: Catalog, snapshot: SkipSnapshot) -> CorpusFigures:
        sources = {}
        for source in sorted(catalog.sources()):
            figures = self.source(catalog, source)
            if figures is not None:
                sources[source] = figures
        return CorpusFigures(sources, snapshot.samples_per_reason(), snapshot.errors, len(snapshot.by_sample))


def bucket_sort_key(key: str) -> tuple[int, float]:
    """'1024/768x1344' sorts by tier, then aspect ratio (width / height)."""
    tier, _, shape = key.partition("/")
    height, _, width = shape.partition("x")
    try:
        return int(tier), int(width) / int(height)
    except (ValueError, ZeroDivisionError):
        return 0, 0.0


def aspect_label(key: str) -> str:
    tier, _, shape = key.partition("/")
    height, _, width = shape.partition("x")
    try:
        return f"{key}  (w/h {int(width) / int(height):.2f})"
    except (ValueError, ZeroDivisionError):
        return key
