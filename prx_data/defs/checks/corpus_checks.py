"""Checks on the corpus-wide export: what a trainer will stream."""

import contextlib
import os
import tempfile
import time

import dagster as dg

from prx_data.defs.resources import StorageResource
from prx_data.export.corpus_index import unpublished_buckets
from prx_data.export.skiplist import REWRITE_SHARE
from prx_data.export.tree import list_buckets

SKIP_LISTS = dg.AssetKey("skip_lists")
_MDS_COLUMNS = {"image", "caption", "sample_id"}


@contextlib.contextmanager
def _streaming_endpoint(storage_options: dict | None):
    # streaming reaches S3 through boto3, which reads the endpoint from S3_ENDPOINT_URL, not from
    # the storage options Lance takes; without it a MinIO-style endpoint looks unreadable.
    endpoint = (storage_options or {}).get("aws_endpoint")
    if not endpoint or os.environ.get("S3_ENDPOINT_URL"):
        yield
        return
    os.environ["S3_ENDPOINT_URL"] = endpoint
    try:
        yield
    finally:
        os.environ.pop("S3_ENDPOINT_URL", None)


def read_bucket(bucket_dir: str, storage_options: dict | None = None, attempts: int = 4) -> int:
    """Open one bucket folder the way a trainer does, with a plain ``StreamingDataset``, and read
    its first and last sample (two shards at most: a remote bucket is not downloaded whole).
    Returns the sample count; raises what streaming raises.

    streaming names its shared memory by the first free number on the machine: two processes
    opening datasets at the same moment (another run's check, a trainer) can pick the same name
    and one gets FileExistsError. That says nothing about the bucket, so it is tried again.
    """
    for attempt in range(attempts):
        try:
            return _read_bucket_once(bucket_dir, storage_options)
        except FileExistsError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _read_bucket_once(bucket_dir: str, storage_options: dict | None) -> int:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    with contextlib.ExitStack() as stack:
        if "://" in bucket_dir:
            stack.enter_context(_streaming_endpoint(storage_options))
            local = stack.enter_context(tempfile.TemporaryDirectory(prefix="prx-stream-check-"))
            ds = StreamingDataset(remote=bucket_dir, local=local, shuffle=False, batch_size=1)
        else:
            ds = StreamingDataset(local=bucket_dir, shuffle=False, batch_size=1)
        try:
            n = ds.num_samples
            if n == 0:
                raise ValueError("the index lists no samples")
            for i in {0, n - 1}:
                sample = ds[i]
                lacking = _MDS_COLUMNS - set(sample)
                if lacking:
                    raise ValueError(f"sample {i} lacks column(s) {sorted(lacking)}")
                if not sample["image"]:
                    raise ValueError(f"sample {i} has no image bytes")
            return n
        finally:
            # Two live datasets on one folder in a process collide in streaming's shared memory.
            del ds
            clean_stale_shared_memory()


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
    "that, rewriting the stream beats streaming and skipping (DESIGN.md).",
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
