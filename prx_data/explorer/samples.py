"""One sample, traced: its raw row, every shard that holds it, and every sidecar that skips it.

Also "more like this" (nearest neighbours by the source's own ``embedding``: embeddings of
different sources need not share a space, so neighbours come from the same table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prx_data.core.storage import is_file, locate
from prx_data.core.urls import redact_text, redact_url
from prx_data.explorer import validate
from prx_data.explorer.catalog import ROW_COLUMNS, Catalog
from prx_data.explorer.skips import SkipEntry, SkipSnapshot

NEIGHBOURS = 24


@dataclass(frozen=True)
class Placement:
    tier: int | None
    bucket: str | None
    shard: str | None  # relative to the MDS root
    index_in_shard: int | None
    drop_reason: str | None
    export_version: str | None
    shard_file: str | None  # resolved path or URI, only when it stays under the MDS root
    shard_exists: bool


@dataclass(frozen=True)
class SampleView:
    source: str
    row: dict
    placements: list[Placement]
    skips: tuple[SkipEntry, ...]
    has_embedding: bool
    table_version: int


@dataclass(frozen=True)
class Neighbour:
    sample_id: str
    caption: str | None
    distance: float


def _row_filter(sample_id: str) -> str:
    return f"sample_id = {validate.sql_string(validate.sample_id(sample_id))}"


def load_sample(catalog: Catalog, snapshot: SkipSnapshot, source: str, sample_id: str) -> SampleView:
    info = catalog.raw(source)
    if info is None:
        raise validate.NotFound(f"no table for source {source}")
    columns = {c: c for c in info.columns}
    if info.has_embedding:
        columns["has_embedding"] = "embedding IS NOT NULL"
    rows = info.ds.to_table(columns=columns, filter=_row_filter(sample_id), limit=1).to_pylist()
    if not rows:
        raise validate.NotFound(f"no sample {sample_id} in {source}")
    # Columns a stage has not added yet read as empty, so the page need not know the stages.
    row = {**dict.fromkeys(ROW_COLUMNS), **rows[0]}
    # Tables written before URLs were redacted at ingest still hold the original.
    row["source_url"] = redact_url(row["source_url"])
    row["error"] = redact_text(row["error"])
    return SampleView(
        source=source,
        row=row,
        placements=placements(catalog, source, sample_id),
        skips=snapshot.reasons(sample_id),
        has_embedding=bool(row.pop("has_embedding", False)),
        table_version=info.ds.version,
    )


def placements(catalog: Catalog, source: str, sample_id: str) -> list[Placement]:
    ds = catalog.exports(source)
    if ds is None:
        return []
    wanted = ["tier", "bucket", "shard", "index_in_shard", "drop_reason", "export_version"]
    names = set(ds.schema.names)
    table = ds.to_table(columns=[c for c in wanted if c in names], filter=_row_filter(sample_id))
    out = []
    for rec in table.to_pylist():
        shard = rec.get("shard")
        # The shard path comes from a table, not the request, but it is still only shown when it
        # resolves inside the MDS root.
        where = validate.inside(catalog.settings.mds_root, shard) if shard else None
        out.append(
            Placement(
                tier=rec.get("tier"),
                bucket=rec.get("bucket"),
                shard=shard,
                index_in_shard=rec.get("index_in_shard"),
                drop_reason=rec.get("drop_reason"),
                export_version=rec.get("export_version"),
                shard_file=where,
                shard_exists=bool(where and is_file(locate(where, catalog.options))),
            )
        )
    return out


def find_source(catalog: Catalog, sample_id: str) -> str | None:
    """The source whose table holds ``sample_id`` (ids are unique across sources)."""
    where = _row_filter(sample_id)
    for source in sorted(catalog.sources()):
        info = catalog.raw(source)
        if info is not None and info.ds.count_rows(filter=where):
            return source
    return None


def neighbours(catalog: Catalog, source: str, sample_id: str, k: int = NEIGHBOURS) -> list[Neighbour]:
    info = catalog.raw(source)
    if info is None:
        raise validate.NotFound(f"no table for source {source}")
    if not info.has_embedding:
        raise validate.NotFound(f"source {source} has no embedding column")
    rows = info.ds.to_table(columns=["embedding"], filter=_row_filter(sample_id), limit=1)
    if rows.num_rows == 0:
        raise validate.NotFound(f"no sample {sample_id} in {source}")
    value = rows.column("embedding")[0]
    if not value.is_valid:
        raise validate.NotFound(f"sample {sample_id} has no embedding")
    query = np.asarray(value.values.to_numpy(zero_copy_only=False), dtype=np.float32)
    text = "caption" if "caption" in info.ds.schema.names else "source_caption"
    found = info.ds.to_table(
        columns={"sample_id": "sample_id", "caption": text, "_distance": "_distance"},
        nearest={"column": "embedding", "q": query, "k": k + 1},
    )
    out = [
        Neighbour(sid, caption, float(dist))
        for sid, caption, dist in zip(*(found.column(c).to_pylist() for c in ("sample_id", "caption", "_distance")))
        if sid != sample_id
    ]
    return out[:k]
