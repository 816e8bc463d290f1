"""mds_shards (per source), corpus_index and skip_lists (corpus-wide)."""

import dagster as dg
from dagster_ray import RayResource

from prx_data.defs.export.resources import ExportResource
from prx_data.defs.automation import CORPUS_SETTLED, PER_SOURCE, TRANSIENT_RETRY, export_code_version
from prx_data.defs.partitions import PER_SOURCE_TAG, sources_partitions
from prx_data.defs.progress import ProgressLogger
from prx_data.defs.resources import SourceRegistryResource, StorageResource
from prx_data.export.corpus_index import merge_all
from prx_data.stages.exclusion import compute_skips, write_skip_lists
from prx_data.stages.export_stage import export_source


class ExportRunConfig(dg.Config):
    executor: str = "ray"
    chunk_rows: int = 32


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
    "as MDS shards under `{mds root}/{tier}/{HxW}/{source}/`, replacing its previous export in one "
    "commit; records each sample's shard and index (or drop reason) in the exports table.",
)
def mds_shards(
    context: dg.AssetExecutionContext,
    config: ExportRunConfig,
    storage: StorageResource,
    export: ExportResource,
    ray: RayResource,
) -> dg.MaterializeResult:
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
        require_caption=export.require_caption,
        storage_options=storage.options,
        progress=ProgressLogger(context.log, "exported"),
    )
    return dg.MaterializeResult(
        metadata={
            "exported": stats.exported,
            "dropped": dg.MetadataValue.json(dict(stats.dropped)),
            "samples_per_bucket": dg.MetadataValue.json(stats.per_bucket),
            "bytes_written": stats.bytes_written,
            "removed_buckets": dg.MetadataValue.json(stats.removed_buckets),
            "images_per_s": round(stats.images_per_s, 1),
            "export_version": stats.version,
            "exports_table": dg.MetadataValue.path(storage.paths.exports_table(source)),
        }
    )


@dg.asset(
    deps=["mds_shards"],
    group_name="export",
    kinds={"mds"},
    automation_condition=CORPUS_SETTLED,
    description="One index.json per bucket folder covering every source's shards, so each bucket "
    "is one stream that a plain StreamingDataset reads.",
)
def corpus_index(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    merged = merge_all(storage.mds_root, storage.options)
    return dg.MaterializeResult(
        metadata={
            "buckets": len(merged),
            "samples": sum(m.num_samples for m in merged),
            "shards": sum(m.num_shards for m in merged),
            "indexes_rewritten": sum(m.written for m in merged),
            "samples_per_bucket": dg.MetadataValue.json({m.bucket_dir.removeprefix(storage.mds_root).strip("/"): m.num_samples for m in merged}),
        }
    )


@dg.asset(
    deps=["corpus_index", "caption_labels", "optout_requests"],
    group_name="export",
    kinds={"mds"},
    automation_condition=CORPUS_SETTLED,
    description="Per-shard skip-list sidecars: duplicates across sources, excluded labels and "
    "opt-outs. Shards are never rewritten; the training loader unions the sidecars.",
)
def skip_lists(
    context: dg.AssetExecutionContext,
    storage: StorageResource,
    registry: SourceRegistryResource,
    export: ExportResource,
) -> dg.MaterializeResult:
    reg = registry.load()
    priorities = {name: src.spec.priority for name, src in reg.sources.items()}
    exports, skips = compute_skips(
        storage.paths, priorities, bucket_cfg=export.bucket_config(), exclude_labels=export.exclude_labels, options=storage.options
    )
    report = write_skip_lists(storage.mds_root, skips, storage.options)
    per_reason = _sum_by(report.counts, "reason")
    per_source = _sum_by(report.counts, "source")
    streams = report.streams.to_pylist()
    for stream in streams:
        if stream["rewrite_recommended"]:
            context.log.warning(
                f"stream {stream['bucket']}: {stream['share']:.1%} of samples skipped (> 10%): consider rewriting it"
            )
    return dg.MaterializeResult(
        metadata={
            "exported_samples": exports.num_rows,
            "skipped_samples": len(set(skips.column("sample_id").to_pylist())),
            "per_reason": dg.MetadataValue.json(per_reason),
            "per_source": dg.MetadataValue.json(per_source),
            "per_bucket": dg.MetadataValue.json(_sum_by(report.counts, "bucket")),
            "skipped_share_per_stream": dg.MetadataValue.json({s["bucket"]: round(s["share"], 4) for s in streams}),
            "rewrite_recommended": dg.MetadataValue.json(report.rewrite_recommended),
            "sidecars_written": report.written,
            "sidecars_unchanged": report.unchanged,
            "sidecars_removed": report.removed,
        }
    )


def _sum_by(counts, key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in counts.to_pylist():
        out[row[key]] = out.get(row[key], 0) + int(row["skipped"])
    return dict(sorted(out.items()))
