"""Table maintenance: compact fragments towards the target size and keep indexes current.

Indexes per source table: full-text (INVERTED) on ``caption`` and ``source_caption`` (with token positions, which phrase queries need), BTREE on
``sample_id``, BITMAP on ``label`` and ``status``, a vector index on ``embedding`` when there is
one; on the exports table, BTREE on ``sample_id`` and BITMAP on ``bucket``. Creating an index is
skipped, with the reason recorded, when the column is missing or all null. A full-text index found
without token positions is rebuilt with them: without them every quoted (phrase) query on it fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import lance

from prx_data.core.lance_io import open_table, storage_options_of
from prx_data.core.locking import locks_table

# The scalar index kinds these tables use (a subset of what LanceDataset.create_scalar_index takes).
ScalarIndexKind = Literal["BTREE", "BITMAP", "INVERTED"]
IndexSpec = tuple[str, ScalarIndexKind]

SOURCE_INDEXES: tuple[IndexSpec, ...] = (
    ("caption", "INVERTED"),
    ("source_caption", "INVERTED"),
    ("sample_id", "BTREE"),
    ("source_url", "BTREE"),  # lineage --url and opt-out requests by URL
    ("label", "BITMAP"),
    ("status", "BITMAP"),
)
EXPORT_INDEXES: tuple[IndexSpec, ...] = (("sample_id", "BTREE"), ("bucket", "BITMAP"))
# IVF needs a few rows per partition to train; below this a vector search scans (fast anyway).
MIN_ROWS_FOR_VECTOR_INDEX = 256


@dataclass
class TableMaintenance:
    uri: str
    fragments_before: int = 0
    fragments_after: int = 0
    rows: int = 0
    compacted: bool = False
    indexes: dict[str, str] = field(default_factory=dict)  # "column:type" -> created|updated|skipped: why


def _index_names(ds: lance.LanceDataset) -> dict[str, str]:
    out = {}
    for info in ds.describe_indices():
        fields = getattr(info, "field_names", None) or getattr(info, "fields", None) or []
        for column in fields:
            out[column] = info.name
    return out


def _lacks_positions(ds: lance.LanceDataset, index_name: str) -> bool:
    """A full-text index whose segments were built without token positions."""
    stats = ds.index_statistics(index_name)
    params = [part.get("params") or {} for part in (stats.get("segments") or stats.get("indices") or [])]
    return any(not p.get("with_position", False) for p in params)


def _wanted(ds: lance.LanceDataset, indexes: Sequence[IndexSpec]) -> list[IndexSpec]:
    names = set(ds.schema.names)
    return [(column, kind) for column, kind in indexes if column in names]


@locks_table("uri", "options")  # compaction beside an ingest's upsert is a commit conflict
def maintain_table(
    uri: str, *, target_rows_per_fragment: int, indexes: Sequence[IndexSpec] = SOURCE_INDEXES, options: dict | None = None
) -> TableMaintenance | None:
    ds = open_table(uri, options)
    if ds is None:
        return None
    report = TableMaintenance(uri=uri, fragments_before=len(ds.get_fragments()), rows=ds.count_rows())
    wanted = max(1, math.ceil(report.rows / target_rows_per_fragment))
    if report.fragments_before > wanted:
        ds.optimize.compact_files(target_rows_per_fragment=target_rows_per_fragment)
        ds = lance.dataset(uri, storage_options=storage_options_of(ds))
        report.compacted = True

    existing = _index_names(ds)
    for column, kind in _wanted(ds, indexes):
        key = f"{column}:{kind}"
        if ds.count_rows(filter=f"{column} IS NOT NULL") == 0:
            report.indexes[key] = "skipped: column is all null"
            continue
        rebuild = kind == "INVERTED" and column in existing and _lacks_positions(ds, existing[column])
        if column in existing and not rebuild:
            report.indexes[key] = "updated"
            continue
        if kind == "INVERTED":
            ds.create_scalar_index(column, kind, replace=True, with_position=True)
        else:
            ds.create_scalar_index(column, kind, replace=True)
        report.indexes[key] = "rebuilt: positions added" if rebuild else "created"
    if "embedding" in ds.schema.names:
        rows = ds.count_rows(filter="embedding IS NOT NULL")
        if "embedding" in existing:
            report.indexes["embedding:IVF"] = "updated"
        elif rows < MIN_ROWS_FOR_VECTOR_INDEX:
            report.indexes["embedding:IVF"] = f"skipped: {rows} vectors < {MIN_ROWS_FOR_VECTOR_INDEX} (flat search is used)"
        else:
            partitions = max(1, int(math.sqrt(rows)) // 4)
            ds.create_index("embedding", "IVF_FLAT", metric="cosine", num_partitions=partitions)
            report.indexes["embedding:IVF"] = "created"
    ds = lance.dataset(uri, storage_options=storage_options_of(ds))
    if any(v == "updated" for v in report.indexes.values()):
        # New rows since the index was built become searchable without a full rebuild.
        ds.optimize.optimize_indices()
        ds = lance.dataset(uri, storage_options=storage_options_of(ds))
    report.fragments_after = len(ds.get_fragments())
    return report
