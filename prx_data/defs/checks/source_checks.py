"""Checks on one source partition, run in the same run as the asset they check.

Each check reads the committed table (no blobs) and reports what it counted, so a warning in the
UI says how far off the partition is, not only that it is.
"""

import math

import dagster as dg
import pyarrow.compute as pc

from prx_data.core.lance_io import open_table
from prx_data.core.reasons import reason_code
from prx_data.defs.checks.corpus_checks import CHECKS_DOC
from prx_data.defs.partitions import sources_partitions
from prx_data.defs.resources import SourceRegistryResource, StorageResource
from prx_data.ingest.registry import CheckThresholds

# Defaults; a source's spec may set its own (`checks:`), e.g. a scraped list with dead links.
# Above the error share, a source is mostly broken links or files: worth a look before training
# on it. Usable rows without a caption are dropped at export (require_caption).
_DEFAULTS = CheckThresholds()
# Fewer words carry no description (a file name, "banner"); short alt texts such as "the moon"
# still do. More are cut by the text encoder's token budget.
CAPTION_WORDS = (2, 300)
# Not errors: these rows were excluded on purpose.
_NOT_ERRORS = ("ok", "opted_out")
_EXAMPLES = 5
_EXCERPT = 80


def _excerpt(text: str | None) -> str:
    if text is None:
        return "(none)"
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"


def _thresholds(registry: SourceRegistryResource, source: str) -> CheckThresholds:
    found = registry.load().sources.get(source)
    return found.spec.checks if found else _DEFAULTS


def _missing(asset: str, uri: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=False, description=f"no {asset} table at {uri}", metadata={"table": dg.MetadataValue.path(uri)})


@dg.asset_check(
    asset="raw_samples",
    partitions_def=sources_partitions,
    description=f"Share of rows that failed to ingest (any status but ok / opted_out) is at most "
    f"{_DEFAULTS.max_error_share:.0%} (or the spec's checks.max_error_share)."
    " See " + CHECKS_DOC + ".",
)
def ingest_error_share(
    context: dg.AssetCheckExecutionContext, storage: StorageResource, registry: SourceRegistryResource
) -> dg.AssetCheckResult:
    max_share = _thresholds(registry, context.partition_key).max_error_share
    uri = storage.paths.raw_table(context.partition_key)
    ds = open_table(uri, storage.options)
    if ds is None:
        return _missing("raw_samples", uri)
    statuses = ds.to_table(columns=["status"]).column("status")
    counts = {row["values"]: row["counts"] for row in pc.value_counts(statuses).to_pylist()}
    rows = len(statuses)
    errors = sum(n for status, n in counts.items() if status not in _NOT_ERRORS)
    share = errors / rows if rows else 0.0
    quoted = ", ".join(f"'{s}'" for s in _NOT_ERRORS)
    failed = ds.to_table(columns=["source_key", "status", "error"], filter=f"status NOT IN ({quoted})", limit=_EXAMPLES).to_pylist()
    examples = {r["source_key"]: f"{r['status']}: {_excerpt(r['error'])}" for r in failed}
    return dg.AssetCheckResult(
        passed=rows > 0 and share <= max_share,
        severity=dg.AssetCheckSeverity.WARN,
        description=None if rows else "the source has no rows",
        metadata={
            "rows": rows,
            "error_rows": errors,
            "error_share": round(share, 4),
            "max_share": max_share,
            "rows_by_status": dg.MetadataValue.json(dict(sorted(counts.items()))),
            "examples": dg.MetadataValue.json(examples),
            "table": dg.MetadataValue.path(uri),
        },
    )


@dg.asset_check(
    asset="raw_samples",
    partitions_def=sources_partitions,
    description="Fragments at most ceil(rows / rows_per_fragment) + 1: appends leave small "
    "fragments, and a table of many small fragments scans slowly until it is compacted."
    " See " + CHECKS_DOC + ".",
)
def fragment_count(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    uri = storage.paths.raw_table(context.partition_key)
    ds = open_table(uri, storage.options)
    if ds is None:
        return _missing("raw_samples", uri)
    rows, fragments = ds.count_rows(), len(ds.get_fragments())
    # +1: the fragment an incremental ingest appends before compaction folds it in.
    limit = math.ceil(rows / storage.rows_per_fragment) + 1
    return dg.AssetCheckResult(
        passed=fragments <= limit,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"fragments": fragments, "max_fragments": limit, "rows": rows, "rows_per_fragment": storage.rows_per_fragment},
    )


@dg.asset_check(
    asset="captions",
    partitions_def=sources_partitions,
    description=f"At least {_DEFAULTS.min_caption_coverage:.0%} of usable rows have a caption (or the "
    "spec's checks.min_caption_coverage)."
    " See " + CHECKS_DOC + ".",
)
def caption_coverage(
    context: dg.AssetCheckExecutionContext, storage: StorageResource, registry: SourceRegistryResource
) -> dg.AssetCheckResult:
    min_coverage = _thresholds(registry, context.partition_key).min_caption_coverage
    uri = storage.paths.raw_table(context.partition_key)
    ds = open_table(uri, storage.options)
    if ds is None or "caption" not in ds.schema.names:
        return _missing("captions", uri)
    usable = ds.to_table(columns=["source_key", "caption", "caption_error"], filter="status = 'ok'")
    captioned = usable.num_rows - usable.column("caption").null_count
    coverage = captioned / usable.num_rows if usable.num_rows else 1.0
    errors = [reason_code(e) for e in usable.column("caption_error").to_pylist() if e]
    by_error = {e: errors.count(e) for e in sorted(set(errors))}
    uncaptioned = [
        (key, error)
        for key, caption, error in zip(*(usable.column(c).to_pylist() for c in ("source_key", "caption", "caption_error")))
        if caption is None
    ][:_EXAMPLES]
    return dg.AssetCheckResult(
        passed=coverage >= min_coverage,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "usable_rows": usable.num_rows,
            "captioned": captioned,
            "coverage": round(coverage, 4),
            "min_coverage": min_coverage,
            "uncaptioned_by_error": dg.MetadataValue.json(by_error),
            "examples": dg.MetadataValue.json({key: error or "no caption" for key, error in uncaptioned}),
        },
    )


@dg.asset_check(
    asset="captions",
    partitions_def=sources_partitions,
    description=f"At most {_DEFAULTS.max_caption_length_outliers:.0%} of captions are shorter than "
    f"{CAPTION_WORDS[0]} or longer than {CAPTION_WORDS[1]} words (or the spec's "
    "checks.max_caption_length_outliers)."
    " See " + CHECKS_DOC + ".",
)
def caption_length(
    context: dg.AssetCheckExecutionContext, storage: StorageResource, registry: SourceRegistryResource
) -> dg.AssetCheckResult:
    max_outliers = _thresholds(registry, context.partition_key).max_caption_length_outliers
    uri = storage.paths.raw_table(context.partition_key)
    ds = open_table(uri, storage.options)
    if ds is None or "caption" not in ds.schema.names:
        return _missing("captions", uri)
    table = ds.to_table(columns=["source_key", "caption"], filter="status = 'ok' AND caption IS NOT NULL")
    words = [len(c.split()) for c in table.column("caption").to_pylist()]
    lo, hi = CAPTION_WORDS
    outliers = [i for i, n in enumerate(words) if not lo <= n <= hi]
    share = len(outliers) / len(words) if words else 0.0
    keys, captions = table.column("source_key").to_pylist(), table.column("caption").to_pylist()
    return dg.AssetCheckResult(
        passed=share <= max_outliers,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "captions": len(words),
            "words_min": min(words, default=0),
            "words_median": sorted(words)[len(words) // 2] if words else 0,
            "words_max": max(words, default=0),
            "out_of_range": len(outliers),
            "out_of_range_share": round(share, 4),
            "range": dg.MetadataValue.json(list(CAPTION_WORDS)),
            # The item as its source names it, and what the caption says: readable, unlike ids.
            "examples": dg.MetadataValue.json({keys[i]: f"{words[i]} word(s): {_excerpt(captions[i])}" for i in outliers[:_EXAMPLES]}),
        },
    )


@dg.asset_check(
    asset="mds_shards",
    partitions_def=sources_partitions,
    description="Every usable row of the source is in the exports table exactly once, either "
    "exported (a shard and index) or with a drop reason, and nothing else is."
    " See " + CHECKS_DOC + ".",
)
def usable_rows_accounted(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    source = context.partition_key
    raw_uri, exports_uri = storage.paths.raw_table(source), storage.paths.exports_table(source)
    raw, exports = open_table(raw_uri, storage.options), open_table(exports_uri, storage.options)
    if raw is None:
        return _missing("raw_samples", raw_uri)
    if exports is None:
        return _missing("exports", exports_uri)
    usable = set(raw.to_table(columns=["sample_id"], filter="status = 'ok'").column("sample_id").to_pylist())
    rows = exports.to_table(columns=["sample_id", "shard", "drop_reason"]).to_pylist()
    seen: dict[str, int] = {}
    neither, both = [], []
    for row in rows:
        seen[row["sample_id"]] = seen.get(row["sample_id"], 0) + 1
        has_shard, has_reason = row["shard"] is not None, row["drop_reason"] is not None
        if not (has_shard or has_reason):
            neither.append(row["sample_id"])
        elif has_shard and has_reason:
            both.append(row["sample_id"])
    missing = sorted(usable - seen.keys())
    unknown = sorted(seen.keys() - usable)
    repeated = sorted(sid for sid, n in seen.items() if n > 1)
    problems = {
        "missing": missing,
        "not_usable_but_listed": unknown,
        "listed_twice": repeated,
        "neither_exported_nor_dropped": neither,
        "exported_and_dropped": both,
    }
    return dg.AssetCheckResult(
        passed=not any(problems.values()),
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "usable_rows": len(usable),
            "exported": sum(1 for r in rows if r["shard"] is not None),
            "dropped": sum(1 for r in rows if r["drop_reason"] is not None),
            **{name: len(ids) for name, ids in problems.items()},
            "examples": dg.MetadataValue.json({name: ids[:_EXAMPLES] for name, ids in problems.items() if ids}),
        },
    )
