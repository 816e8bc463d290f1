"""Checks on the corpus-wide export: what a trainer will stream."""

import dagster as dg

from prx_data.defs.resources import StorageResource
from prx_data.export.corpus_index import unpublished_buckets
from prx_data.export.skiplist import REWRITE_SHARE
from prx_data.export.stream_check import read_bucket
from prx_data.export.tree import list_buckets

SKIP_LISTS = dg.AssetKey("skip_lists")


@dg.asset_check(
    asset="corpus_index",
    blocking=True,
    description="Every bucket folder opens as a plain streaming.StreamingDataset and its first and "
    "last samples read back with image, caption and sample_id. Blocks skip_lists in the same run.",
)
def bucket_streams_readable(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    # Only published buckets are streams; the others have no index.json on purpose.
    unpublished = set(unpublished_buckets(storage.mds_root, storage.options))
    buckets = [ref for ref in list_buckets(storage.mds_root, storage.options) if ref.rel not in unpublished]
    samples, failures = {}, {}
    for ref in buckets:
        try:
            samples[ref.rel] = read_bucket(ref.dir(storage.mds_root), storage.options)
        except Exception as exc:  # noqa: BLE001 - any failure to stream is what this check reports
            failures[ref.rel] = f"{type(exc).__name__}: {exc}"[:500]
    for rel, error in failures.items():
        context.log.error(f"bucket {rel} does not stream: {error}")
    return dg.AssetCheckResult(
        passed=not failures,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "buckets": len(buckets),
            "readable": len(samples),
            "samples": sum(samples.values()),
            "unreadable": dg.MetadataValue.json(failures),
        },
    )


@dg.asset_check(
    asset=SKIP_LISTS,
    description=f"No bucket stream has more than {REWRITE_SHARE:.0%} of its samples skipped; past "
    "that, rewriting the stream beats streaming and skipping (docs/bucketing.md).",
)
def skipped_share_per_stream(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    event = context.instance.get_latest_materialization_event(SKIP_LISTS)
    meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
    if "skipped_share_per_stream" not in meta:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, description="skip_lists has no skipped_share_per_stream metadata yet")
    shares: dict[str, float] = meta["skipped_share_per_stream"].value
    over = {bucket: share for bucket, share in sorted(shares.items(), key=lambda kv: -kv[1]) if share > REWRITE_SHARE}
    return dg.AssetCheckResult(
        passed=not over,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "streams": len(shares),
            "over_limit": dg.MetadataValue.json(over),
            "max_share": max(shares.values(), default=0.0),
            "limit": REWRITE_SHARE,
        },
    )
