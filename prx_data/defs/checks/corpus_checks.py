"""Checks on the corpus-wide export: what a trainer will stream."""

from typing import Any

import dagster as dg

from prx_data.defs.resources import StorageResource
from prx_data.export.skiplist import REWRITE_SHARE, iter_root_sidecars
from prx_data.export.stream_check import read_bucket, stream_buckets

SKIP_LISTS = dg.AssetKey("skip_lists")
# What each check means and what to do when it fails.
CHECKS_DOC = "docs/ui.md#asset-checks"


@dg.asset_check(
    asset="corpus_index",
    blocking=True,
    description="Every published bucket's merged index.json holds what a streaming.StreamingDataset "
    "needs (version 2, mds shard entries with image, caption and sample_id, samples, basenames inside "
    "the bucket), and its first and last samples read back with image bytes, caption and sample_id "
    "through the project's MDS reader (streaming 0.13's reading, without importing streaming). Blocks "
    "skip_lists in the same run.",
)
def bucket_streams_readable(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    # Only published buckets are streams; unpublished and retired ones have no index.json on purpose.
    buckets = stream_buckets(storage.mds_root, storage.options)
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
            "guide": dg.MetadataValue.path(CHECKS_DOC),
        },
    )


@dg.asset_check(
    asset=SKIP_LISTS,
    description=f"No published bucket stream has more than {REWRITE_SHARE:.0%} of its samples "
    "skipped; past that, rewriting the stream beats streaming and skipping. Unpublished buckets "
    f"(read by no trainer) are not counted. Failing: the streams and example skipped samples; see {CHECKS_DOC}.",
)
def skipped_share_per_stream(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    event = context.instance.get_latest_materialization_event(SKIP_LISTS)
    meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
    if "skipped_share_per_stream" not in meta:
        return dg.AssetCheckResult(
            passed=False, severity=dg.AssetCheckSeverity.WARN, description="skip_lists has no skipped_share_per_stream metadata yet"
        )
    shares: dict[str, float] = meta["skipped_share_per_stream"].value
    unpublished = set(meta["unpublished_buckets"].value) if "unpublished_buckets" in meta else set()
    # Stream keys name the bucket ("768x1360" or "1024/768x1360"); unpublished ones are "tier/bucket".
    published = {b: v for b, v in shares.items() if not any(u == b or u.endswith("/" + b) for u in unpublished)}
    over = {bucket: share for bucket, share in sorted(published.items(), key=lambda kv: -kv[1]) if share > REWRITE_SHARE}
    metadata: dict[str, Any] = {
        "streams": len(published),
        "unpublished_not_counted": len(shares) - len(published),
        "over_limit": dg.MetadataValue.json(over),
        "max_share": max(published.values(), default=0.0),
        "limit": REWRITE_SHARE,
        "guide": dg.MetadataValue.path(CHECKS_DOC),
    }
    if over:
        metadata["examples"] = dg.MetadataValue.json(_skipped_examples(storage, over))
    return dg.AssetCheckResult(
        passed=not over,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{len(over)} published stream(s) over {REWRITE_SHARE:.0%} skipped: {', '.join(over)}" if over else None,
        metadata=metadata,
    )


def _skipped_examples(storage: StorageResource, streams: dict[str, float], per_stream: int = 5) -> dict[str, list[str]]:
    """A few skipped samples per stream over the limit: "sample id: reason" from the sidecars."""
    out: dict[str, list[str]] = {}
    for sidecar in iter_root_sidecars(storage.mds_root, storage.options):
        for bucket in streams:
            if f"/{bucket}/" in f"/{sidecar.path}" and len(out.setdefault(bucket, [])) < per_stream:
                room = per_stream - len(out[bucket])
                out[bucket] += [f"{sample_id}: {sidecar.reason}" for sample_id in sidecar.sample_ids[:room]]
    return out


@dg.asset_check(
    asset=SKIP_LISTS,
    description="Every ablation view file in PRX_VIEWS_DIR loaded and was built by the last skip_lists "
    "run (docs/views.md). Failing: each bad view file, named with the field and why; the other views "
    f"and the default cut were built regardless; see {CHECKS_DOC}.",
)
def view_files_valid(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    event = context.instance.get_latest_materialization_event(SKIP_LISTS)
    meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
    errors: dict[str, str] = meta["view_errors"].value if "view_errors" in meta else {}
    views: dict[str, Any] = meta["views"].value if "views" in meta else {}
    for why in errors.values():
        context.log.error(why)
    return dg.AssetCheckResult(
        passed=not errors,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"{len(errors)} view file(s) not built: {', '.join(sorted(errors))}" if errors else None,
        metadata={
            "views_built": dg.MetadataValue.json(sorted(views)),
            "bad_view_files": dg.MetadataValue.json(errors),
            "guide": dg.MetadataValue.path(CHECKS_DOC),
        },
    )
