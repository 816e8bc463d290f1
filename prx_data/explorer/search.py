"""Search: words over ``caption`` and ``source_caption``, with filters, one page at a time.

Per source table and text column, the full-text (INVERTED) index answers when the column has
one, otherwise a case-insensitive substring filter does; the result says which ran where, since
they match differently (tokens ranked by BM25 vs. a literal substring). Indexes are never built
here: building one is a write, and this app only reads.

Filters on raw columns (status, label) are pushed into Lance. Tier and bucket live in the
exports table and "skipped" in the sidecars, so they are sets of sample ids, applied to the
candidates as they stream by (pushed into Lance as ``sample_id IN (...)`` when the set is small).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

import lance
import pyarrow as pa

from prx_data.explorer import validate
from prx_data.explorer.catalog import TEXT_COLUMNS, Catalog, TableInfo
from prx_data.explorer.skips import SkipSnapshot

PAGE_SIZE = 48
# A full-text query ranks every match before returning; past this many per source, the page
# notes that only the best-ranked ones were looked at.
FTS_MAX_HITS = 10_000
PUSHDOWN_MAX_IDS = 1_000
HIT_COLUMNS = ("sample_id", "source", "caption", "source_caption", "status", "label", "width", "height")


@dataclass(frozen=True)
class SearchParams:
    q: str = ""
    source: str | None = None
    label: str | None = None
    status: str | None = None
    tier: int | None = None
    bucket: str | None = None
    skipped: bool | None = None
    page: int = 1

    @property
    def needs_exports(self) -> bool:
        return self.tier is not None or self.bucket is not None


@dataclass(frozen=True)
class Hit:
    source: str
    sample_id: str
    caption: str | None
    source_caption: str | None
    status: str
    label: str | None
    width: int | None
    height: int | None
    score: float | None
    matched_by: str
    skipped: bool
    has_embedding: bool


@dataclass(frozen=True)
class Method:
    source: str
    how: str  # "full-text index", "substring" or "filter only"
    columns: tuple[str, ...]


@dataclass
class SearchResult:
    hits: list[Hit]
    has_more: bool
    methods: list[Method] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class ExportIds:
    """Sample ids of a source's exports that match a tier/bucket, cached per table version."""

    def __init__(self, capacity: int = 32):
        self._cache: OrderedDict[tuple, frozenset[str]] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, ds: lance.LanceDataset | None, source: str, tier: int | None, bucket: str | None) -> frozenset[str]:
        if ds is None:
            return frozenset()
        key = (source, ds.version, tier, bucket)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        parts = ["shard IS NOT NULL"]
        if tier is not None:
            parts.append(f"tier = {int(tier)}")
        if bucket is not None:
            parts.append(f"bucket = {validate.sql_string(bucket)}")
        ids = frozenset(ds.to_table(columns=["sample_id"], filter=" AND ".join(parts)).column("sample_id").to_pylist())
        with self._lock:
            self._cache[key] = ids
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        return ids


def skipped_ids_of(snapshot: SkipSnapshot, source: str) -> frozenset[str]:
    # Shard paths are '<tier>/<HxW>/<source>/shard...': the source is the third part.
    return frozenset(sid for sid, entries in snapshot.by_sample.items() if any(e.shard.split("/")[2:3] == [source] for e in entries))


def search(
    catalog: Catalog, snapshot: SkipSnapshot, export_ids: ExportIds, params: SearchParams, page_size: int = PAGE_SIZE
) -> SearchResult:
    sources = [params.source] if params.source else sorted(catalog.sources())
    offset = (params.page - 1) * page_size
    wanted = offset + page_size + 1  # one more than the page tells whether a next page exists
    result = SearchResult(hits=[], has_more=False)
    found: list[Hit] = []
    for source in sources:
        info = catalog.raw(source)
        if info is None:
            continue
        for hit in _source_hits(catalog, info, snapshot, export_ids, params, wanted - len(found), result):
            found.append(hit)
            if len(found) >= wanted:
                break
        if len(found) >= wanted:
            break
    result.hits = found[offset : offset + page_size]
    result.has_more = len(found) > offset + page_size
    return result


def _base_filter(info: TableInfo, params: SearchParams) -> list[str] | None:
    """Raw-table conditions; None when the table cannot match (a filter on a missing column)."""
    names = set(info.ds.schema.names)
    parts = []
    if params.status is not None:
        parts.append(f"status = {validate.sql_string(params.status)}")
    if params.label is not None:
        if "label" not in names:
            return None
        parts.append(f"label = {validate.sql_string(params.label)}")
    return parts


def _required_ids(
    catalog: Catalog, info: TableInfo, snapshot: SkipSnapshot, export_ids: ExportIds, params: SearchParams
) -> frozenset[str] | None:
    """Ids a hit must be among (None: no such constraint)."""
    required = None
    if params.needs_exports:
        required = export_ids.get(catalog.exports(info.source), info.source, params.tier, params.bucket)
    if params.skipped:
        skipped = skipped_ids_of(snapshot, info.source)
        required = skipped if required is None else required & skipped
    return required


def _source_hits(
    catalog: Catalog,
    info: TableInfo,
    snapshot: SkipSnapshot,
    export_ids: ExportIds,
    params: SearchParams,
    wanted: int,
    result: SearchResult,
) -> Iterator[Hit]:
    base = _base_filter(info, params)
    if base is None:
        return
    required = _required_ids(catalog, info, snapshot, export_ids, params)
    if required is not None and not required:
        return
    if required is not None and len(required) <= PUSHDOWN_MAX_IDS:
        base = base + [f"sample_id IN ({', '.join(validate.sql_string(s) for s in sorted(required))})"]

    keep = _Gate(required, params.skipped, snapshot)

    names = set(info.ds.schema.names)
    columns = {c: c for c in HIT_COLUMNS if c in names}
    columns["has_embedding"] = "embedding IS NOT NULL" if info.has_embedding else "false"
    seen: set[str] = set()
    if not params.q:
        result.methods.append(Method(info.source, "filter only", ()))
        scanner = info.ds.scanner(columns=columns, filter=_and(base), batch_size=1024)
        yield from _hits(scanner, info.source, "filter", keep, seen)
        return

    text_columns = [c for c in TEXT_COLUMNS if c in names]
    indexed = [c for c in text_columns if c in info.fts_columns]
    plain = [c for c in text_columns if c not in info.fts_columns]
    if indexed:
        result.methods.append(Method(info.source, "full-text index", tuple(indexed)))
        # Post-filters (tier, bucket, skipped) drop some ranked hits, so ask for more of them.
        factor = 1 if required is None and params.skipped is None else 20
        limit = min(FTS_MAX_HITS, max(100, wanted * factor))
        table = full_text_table(info.ds, columns, params.q, indexed, _and(base), limit)
        if table.num_rows >= limit:
            result.notes.append(f"{info.source}: only the {limit} best-ranked full-text matches were looked at")
        yield from _hits_from_table(table, info.source, "full-text", keep, seen)
    if plain:
        result.methods.append(Method(info.source, "substring", tuple(plain)))
        match = "(" + " OR ".join(validate.like_contains(c, params.q) for c in plain) + ")"
        scanner = info.ds.scanner(columns=columns, filter=_and(base + [match]), batch_size=1024)
        yield from _hits(scanner, info.source, "substring", keep, seen)


def is_phrase(query: str) -> bool:
    """A query holding a double-quoted phrase (``"red square"``)."""
    return query.count('"') >= 2


def full_text_table(ds: lance.LanceDataset, columns: dict, query: str, indexed: list[str], where: str | None, limit: int) -> pa.Table:
    """Best-ranked full-text matches over ``indexed`` columns, best first.

    Lance refuses a phrase query over several columns ("Phrase queries cannot be used with
    multiple columns"): a phrase is asked of each column alone, and a row matched in several
    keeps its best score."""
    groups = [[c] for c in indexed] if is_phrase(query) and len(indexed) > 1 else [indexed]
    tables = [
        ds.to_table(
            columns={**columns, "_score": "_score"},
            full_text_query={"query": query, "columns": group},
            filter=where,
            prefilter=True,
            limit=limit,
        )
        for group in groups
    ]
    if len(tables) == 1:
        return tables[0]
    table = pa.concat_tables(tables).sort_by([("_score", "descending")])
    first: dict[str, int] = {}
    for i, sid in enumerate(table.column("sample_id").to_pylist()):
        first.setdefault(sid, i)
    return table.take(pa.array(sorted(first.values()), pa.int64())).slice(0, limit)


@dataclass(frozen=True)
class _Gate:
    """What the Lance filter could not say: exports and sidecar constraints."""

    required: frozenset[str] | None
    skipped: bool | None
    snapshot: SkipSnapshot

    def __call__(self, sample_id: str) -> bool:
        if self.required is not None and sample_id not in self.required:
            return False
        return self.skipped is None or self.snapshot.is_skipped(sample_id) == self.skipped


def _and(parts: list[str]) -> str | None:
    return " AND ".join(f"({p})" for p in parts) if parts else None


def _hits(scanner, source: str, matched_by: str, keep: _Gate, seen: set[str]) -> Iterator[Hit]:
    for batch in scanner.to_batches():
        yield from _hits_from_table(batch, source, matched_by, keep, seen)


def _hits_from_table(table, source: str, matched_by: str, keep: _Gate, seen: set[str]) -> Iterator[Hit]:
    rows = table.to_pylist()
    for row in rows:
        sid = row["sample_id"]
        if sid in seen or not keep(sid):
            continue
        seen.add(sid)
        yield Hit(
            source=source,
            sample_id=sid,
            caption=row.get("caption"),
            source_caption=row.get("source_caption"),
            status=row.get("status"),
            label=row.get("label"),
            width=row.get("width"),
            height=row.get("height"),
            score=row.get("_score"),
            matched_by=matched_by,
            skipped=keep.snapshot.is_skipped(sid),
            has_embedding=bool(row.get("has_embedding")),
        )
