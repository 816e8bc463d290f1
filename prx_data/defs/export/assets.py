"""mds_shards (per source), corpus_index and skip_lists (corpus-wide)."""

import dagster as dg
from dagster_ray import RayResource

from prx_data.core.ray_tasks import Executor
from prx_data.core.settings import get_settings
from prx_data.defs import links
from prx_data.defs.code_versions import export_code_version
from prx_data.defs.conditions import CORPUS_SETTLED, PER_SOURCE
from prx_data.defs.export.resources import ExportResource
from prx_data.defs.failures import fail_fast
from prx_data.defs.partitions import PER_SOURCE_TAG, sources_partitions
from prx_data.defs.policies import TRANSIENT_RETRY
from prx_data.defs.progress import ProgressLogger
from prx_data.defs.resources import RayTasksResource, SourceRegistryResource, StorageResource
from prx_data.export.corpus_index import merge_all


class ExportRunConfig(dg.Config):
    executor: Executor = "auto"
    chunk_rows: int = 32
    # Ray tasks that each encode a share of the rows and write their own shards (1: one writer
    # in the run process); each writes straight into the MDS root, so they may run on any node
    # that reaches it (see export_source). Unset: the spec's ``write_workers``, else
    # PRX_WRITE_WORKERS, else 1.
    write_workers: int | None = None


@dg.asset(
    partitions_def=sources_partitions,
    deps=["caption_labels", "phashes"],
    group_name="export",
    kinds={"mds", "ray"},
    tags=PER_SOURCE_TAG,
    code_version=export_code_version(),
    automation_condition=PER_SOURCE,
    retry_policy=TRANSIENT_RETRY,
    description="Buckets, resizes (Lanczos), encodes (JPEG q92) and writes the source's usable rows "
    "as MDS shards under `{mds root}/{tier}/{HxW}/{source}/`, incrementally: new and changed rows are "
    "appended as new shards in one commit (a changed caption re-uses the encoded bytes), old "
    "placements are skipped as 'superseded', and a bucket is rewritten once they pass 10 %; a run "
    "with nothing new does no image work. Records each sample's shard and index (or drop reason).",
)
@fail_fast
def mds_shards(
    context: dg.AssetExecutionContext,
    config: ExportRunConfig,
    storage: StorageResource,
    export: ExportResource,
    ray: RayResource,
    ray_tasks: RayTasksResource,
    registry: SourceRegistryResource,
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.stages.export_stage import export_source

    source = context.partition_key
    stats = export_source(
        storage.paths.raw_table(source),
        source,
        mds_root=storage.mds_root,
        exports_uri=storage.paths.exports_table(source),
        bucket_cfg=export.bucket_config(),
        writer_cfg=export.writer_config(),
        executor=config.executor,
        chunk_rows=config.chunk_rows,
        write_workers=config.write_workers or registry.load().export_write_workers(source, ray_tasks.write_workers),
        task_resources=ray_tasks.resources,
        local_max_rows=ray_tasks.local_max_rows,
        run_id=context.run_id,
        require_caption=export.require_caption,
        max_caption_chars=export.max_caption_chars,
        storage_options=storage.options,
        progress=ProgressLogger(context.log, "encoded"),
    )
    context.log.info(stats.summary)
    return dg.MaterializeResult(
        metadata={
            "exported": stats.exported,
            "dropped": dg.MetadataValue.json(dict(stats.dropped)),
            "samples_per_bucket": dg.MetadataValue.json(stats.per_bucket),
            "bytes_written": stats.bytes_written,
            "removed_buckets": dg.MetadataValue.json(stats.removed_buckets),
            "images_per_s": round(stats.images_per_s, 1),
            "encoded": stats.encoded,
            "reused_bytes": stats.reused,
            "kept": stats.kept,
            "superseded": stats.superseded,
            "superseded_total": stats.superseded_total,
            "rewritten_buckets": dg.MetadataValue.json(stats.rewritten_buckets),
            "changed": stats.changed,
            "export_version": stats.version,
            "exports_table": links.location(storage.paths.exports_table(source)),
            # Where this source's shards are, one folder per bucket; each bucket links to its
            # samples in the explorer (the UI's Markdown opens http links only).
            "shard_folders": links.markdown_links(
                [
                    (
                        (bucket, links.explorer_url("/", source=source, tier=bucket.split("/")[0], bucket=bucket.split("/")[1])),
                        int(stats.per_bucket[bucket]),
                        f"`{storage.mds_root.rstrip('/')}/{bucket}/{source}/`",
                    )
                    for bucket in sorted(stats.per_bucket)
                ],
                ("bucket", "samples", "folder"),
            ),
        }
    )


@dg.asset(
    deps=["mds_shards"],
    group_name="export",
    kinds={"mds"},
    automation_condition=CORPUS_SETTLED,
    description="One index.json per bucket folder covering every source's shards, so each bucket "
    "is one stream that a plain StreamingDataset reads. Only buckets with at least "
    "PRX_MIN_STREAM_SAMPLES unskipped samples are published; the rest stay in the tree with an "
    "unpublished.json (skip_lists decides again once the skips are current).",
)
@fail_fast
def corpus_index(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    min_samples = get_settings().min_stream_samples
    merged = merge_all(storage.mds_root, storage.options, min_stream_samples=min_samples, gc_min_age_s=get_settings().shard_retention_s)
    return dg.MaterializeResult(
        metadata={
            "buckets": len(merged),
            "samples": sum(m.num_samples for m in merged),
            "shards": sum(m.num_shards for m in merged),
            "indexes_rewritten": sum(m.written for m in merged),
            "samples_per_bucket": dg.MetadataValue.json(
                {m.bucket_dir.removeprefix(storage.mds_root).strip("/"): m.num_samples for m in merged}
            ),
            **publication_metadata(storage.mds_root, merged, min_samples),
        }
    )


def publication_metadata(mds_root: str, merged, min_samples: int) -> dict:
    """Which buckets a trainer sees, and which stay unpublished with their counts."""
    rel = lambda m: m.bucket_dir.removeprefix(mds_root).strip("/")  # noqa: E731
    return {
        "min_stream_samples": min_samples,
        "published_buckets": sum(m.published for m in merged),
        "unpublished_buckets": dg.MetadataValue.json(
            {rel(m): {"samples": m.num_samples, "unskipped": m.unskipped} for m in merged if m.num_samples and not m.published}
        ),
    }


@dg.asset(
    deps=["corpus_index", "caption_labels", "optout_requests"],
    group_name="export",
    kinds={"mds"},
    automation_condition=CORPUS_SETTLED,
    description="Per-shard skip-list sidecars: duplicates across sources, excluded labels and "
    "opt-outs. Shards are never rewritten; the training loader unions the sidecars. With "
    "PRX_FOLD_SPARSE_BUCKETS=1, first re-exports the unskipped images of sparse buckets into the "
    "nearest published bucket of the same tier and skips their originals as 'folded'.",
)
@fail_fast
def skip_lists(
    context: dg.AssetExecutionContext,
    storage: StorageResource,
    registry: SourceRegistryResource,
    export: ExportResource,
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.curation.fold import FoldPolicy
    from prx_data.curation.refresh import rebuild_skip_lists

    reg = registry.load(storage)
    priorities = {name: src.spec.priority for name, src in reg.sources.items()}
    min_samples = get_settings().min_stream_samples
    rebuilt = rebuild_skip_lists(
        storage.paths,
        priorities,
        bucket_cfg=export.bucket_config(),
        exclude_labels=export.exclude_labels,
        min_stream_samples=min_samples,
        dedup_radius=get_settings().dedup_radius,
        fold=FoldPolicy.from_settings(get_settings()),
        writer_cfg=export.writer_config(),
        options=storage.options,
        run_id=context.run_id,
        views_dir=get_settings().views_dir,
        retention_s=get_settings().shard_retention_s,
    )
    report, merged, folds = rebuilt.report, rebuilt.merged, rebuilt.folds
    views = rebuilt.views
    for why in (views.errors if views else {}).values():
        context.log.error(f"view not built: {why}")
    per_reason = _sum_by(report.counts, "reason")
    # In samples: a sample skipped for two reasons is one sample.
    per_source = rebuilt.skipped_per_source
    streams = report.streams.to_pylist()
    # An unpublished bucket (too few samples left, or folded away) is streamed by no trainer:
    # rewriting it would buy nothing.
    unpublished = {m.bucket_dir.rstrip("/") for m in merged if not m.published}
    for stream in streams:
        if stream["rewrite_recommended"] and not any(d.endswith("/" + stream["bucket"]) for d in unpublished):
            context.log.warning(f"stream {stream['bucket']}: {stream['share']:.1%} of samples skipped (> 10%): consider rewriting it")
    return dg.MaterializeResult(
        metadata={
            "exported_samples": rebuilt.exported_samples,
            "skipped_samples": rebuilt.skipped_samples,
            "per_reason": dg.MetadataValue.json(per_reason),
            "per_source": dg.MetadataValue.json(per_source),
            "per_bucket": dg.MetadataValue.json(_sum_by(report.counts, "bucket")),
            "skipped_share_per_stream": dg.MetadataValue.json({s["bucket"]: round(s["share"], 4) for s in streams}),
            "rewrite_recommended": dg.MetadataValue.json(report.rewrite_recommended),
            "sidecars_written": report.written,
            "sidecars_unchanged": report.unchanged,
            "sidecars_removed": report.removed,
            "folded_buckets": dg.MetadataValue.json(folds.folds),
            "fold_refused": dg.MetadataValue.json(folds.refused),
            "folded_samples": folds.folded,
            "fold_images_encoded": folds.encoded,
            **publication_metadata(storage.mds_root, merged, min_samples),
            **views_metadata(views),
        }
    )


def views_metadata(views) -> dict:
    """Per ablation view: trainable samples, skipped placements per rule, per bucket counts;
    and the view files that were not built, with why."""
    if views is None:
        return {}
    return {
        "views": dg.MetadataValue.json(
            {
                name: {
                    "trainable": b.trainable,
                    "skipped": b.skipped,
                    "per_rule": b.per_rule,
                    "per_bucket": b.buckets,
                    "warnings": b.warnings,
                }
                for name, b in sorted(views.built.items())
            }
        ),
        "view_errors": dg.MetadataValue.json(dict(sorted(views.errors.items()))),
        "retired_views": dg.MetadataValue.json(views.retired),
    }


def _sum_by(counts, key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in counts.to_pylist():
        out[row[key]] = out.get(row[key], 0) + int(row["skipped"])
    return dict(sorted(out.items()))
