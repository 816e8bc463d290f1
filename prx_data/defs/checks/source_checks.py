"""Checks on one source partition, run in the same run as the asset they check.

Each check reads the committed table (no blobs) and reports what it counted, so a warning in the
UI says how far off the partition is, not only that it is.
"""

import math
from collections import Counter

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.counts import reason_codes, value_counter, words_per_caption
from prx_data.core.histogram import SortedHistogram
from prx_data.core.lance_io import SCAN_ROWS, open_table, scan_text
from prx_data.defs import links
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


def _first_sorted(ids) -> list[str]:
    """The ``_EXAMPLES`` smallest of many ids, sorted, without a Python list of them all."""
    return sorted(pc.take(ids, pc.select_k_unstable(ids, _EXAMPLES, [("dummy", "ascending")])).to_pylist())


def _thresholds(registry: SourceRegistryResource, source: str) -> CheckThresholds:
    found = registry.load().sources.get(source)
    return found.spec.checks if found else _DEFAULTS


def _missing(asset: str, uri: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=False, description=f"no {asset} table at {uri}", metadata={"table": links.location(uri)})


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
    counts = value_counter(statuses)
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
            "table": links.location(uri),
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
    # Counted by Lance and Arrow: no caption of the source becomes a Python string.
    usable = ds.count_rows("status = 'ok'")
    captioned = ds.count_rows("status = 'ok' AND caption IS NOT NULL")
    coverage = captioned / usable if usable else 1.0
    by_error: Counter[str] = Counter()
    for batch in ds.to_batches(columns=["caption_error"], filter="status = 'ok' AND caption_error IS NOT NULL", batch_size=SCAN_ROWS):
        errors = batch.column("caption_error")
        errors = errors.filter(pc.not_equal(errors, ""))
        by_error.update(value_counter(reason_codes(errors)))
    examples = ds.to_table(columns=["source_key", "caption_error"], filter="status = 'ok' AND caption IS NULL", limit=_EXAMPLES)
    uncaptioned = zip(examples.column("source_key").to_pylist(), examples.column("caption_error").to_pylist())
    return dg.AssetCheckResult(
        passed=coverage >= min_coverage,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "usable_rows": usable,
            "captioned": captioned,
            "coverage": round(coverage, 4),
            "min_coverage": min_coverage,
            "uncaptioned_by_error": dg.MetadataValue.json(dict(sorted(by_error.items()))),
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
    lo, hi = CAPTION_WORDS
    histogram: Counter[int] = Counter()
    examples: dict[str, str] = {}
    # Batch by batch in Arrow: a source's captions are never Python strings, only the examples.
    for batch in scan_text(ds, ["source_key", "caption"], filter="status = 'ok' AND caption IS NOT NULL"):
        words = words_per_caption(batch.column("caption"))
        histogram.update(value_counter(words))
        if len(examples) < _EXAMPLES:
            out = pc.or_(pc.less(words, lo), pc.greater(words, hi))
            picked = pa.table({"key": batch.column("source_key"), "caption": batch.column("caption"), "words": words}).filter(out)
            for row in picked.slice(0, _EXAMPLES - len(examples)).to_pylist():
                # The item as its source names it, and what the caption says: readable, unlike ids.
                examples[row["key"]] = f"{row['words']} word(s): {_excerpt(row['caption'])}"
    data = SortedHistogram(histogram)
    outliers = sum(n for words, n in histogram.items() if not lo <= words <= hi)
    share = outliers / data.total if data.total else 0.0
    return dg.AssetCheckResult(
        passed=share <= max_outliers,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "captions": data.total,
            "words_min": data.values[0] if data.total else 0,
            "words_median": data[data.total // 2] if data.total else 0,
            "words_max": data.values[-1] if data.total else 0,
            "out_of_range": outliers,
            "out_of_range_share": round(share, 4),
            "range": dg.MetadataValue.json(list(CAPTION_WORDS)),
            "examples": dg.MetadataValue.json(examples),
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
    # Arrow columns of the source (~100 bytes a row), never a Python object per row.
    usable = pc.unique(raw.to_table(columns=["sample_id"], filter="status = 'ok'").column("sample_id"))
    rows = exports.to_table(columns=["sample_id", "shard", "drop_reason"])
    has_shard, has_reason = pc.is_valid(rows.column("shard")), pc.is_valid(rows.column("drop_reason"))
    per_id = rows.group_by("sample_id").aggregate([([], "count_all")])
    listed = per_id.column("sample_id")
    ids = rows.column("sample_id")
    problems = {
        "missing": usable.filter(pc.invert(pc.is_in(usable, value_set=listed))),
        "not_usable_but_listed": listed.filter(pc.invert(pc.is_in(listed, value_set=usable))),
        "listed_twice": listed.filter(pc.greater(per_id.column("count_all"), 1)),
        "neither_exported_nor_dropped": ids.filter(pc.invert(pc.or_(has_shard, has_reason))),
        "exported_and_dropped": ids.filter(pc.and_(has_shard, has_reason)),
    }
    return dg.AssetCheckResult(
        passed=not any(len(found) for found in problems.values()),
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "usable_rows": len(usable),
            "exported": pc.sum(has_shard).as_py() or 0,
            "dropped": pc.sum(has_reason).as_py() or 0,
            **{name: len(found) for name, found in problems.items()},
            "examples": dg.MetadataValue.json({name: _first_sorted(found) for name, found in problems.items() if len(found)}),
        },
    )
