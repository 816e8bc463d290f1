"""raw_samples: one Lance table per source, in the common schema."""

import dagster as dg
from pydantic import Field

from prx_data.core.ids import printable
from prx_data.curation.optout.requests import ingest_matcher
from prx_data.defs.code_versions import INGEST_CODE_VERSION
from prx_data.defs.conditions import PER_SOURCE
from prx_data.defs.failures import fail_fast
from prx_data.defs.partitions import PER_SOURCE_TAG, sources_partitions
from prx_data.defs.policies import SOURCE_TABLE_WRITER_TAG, TRANSIENT_RETRY
from prx_data.defs.resources import RayTasksResource, SourceRegistryResource, StorageResource
from prx_data.ingest.read.raw_item import SourceUnavailable


class RawSamplesConfig(dg.Config):
    reread_unchanged: bool = Field(
        default=False,
        description="Open every object of the source, not only those whose ETag/size/mtime changed since the "
        "last run (prx_data/ingest/plan/unit_manifest.py); for stores whose signatures cannot be trusted.",
    )


@dg.asset(
    partitions_def=sources_partitions,
    group_name="ingest",
    kinds={"lance"},
    tags=PER_SOURCE_TAG,
    code_version=INGEST_CODE_VERSION,
    automation_condition=PER_SOURCE,
    retry_policy=TRANSIENT_RETRY,
    op_tags=SOURCE_TABLE_WRITER_TAG,
    description="The source's items in the common schema: one row per item, with a status.",
)
@fail_fast
def raw_samples(
    context: dg.AssetExecutionContext,
    config: RawSamplesConfig,
    storage: StorageResource,
    registry: SourceRegistryResource,
    ray_tasks: RayTasksResource,
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.ingest.driver import ingest_source

    reg = registry.load(storage)
    try:
        source = reg.get(context.partition_key)
    except KeyError as exc:
        # A spec that broke or was removed: retrying cannot help, and the last good table stays.
        raise dg.Failure(description=str(exc).strip('"'), allow_retries=False) from None
    uri = storage.paths.raw_table(source.name)
    try:
        stats = ingest_source(
            source,
            uri,
            rows_per_fragment=storage.rows_per_fragment,
            storage_options=storage.options,
            optout=ingest_matcher(registry.optout_dir),
            run_id=context.run_id,
            task_resources=ray_tasks.resources,
            local_max_rows=ray_tasks.local_max_rows,
            reread_unchanged=config.reread_unchanged,
        )
    except SourceUnavailable as exc:
        # fail_fast decides from the cause: a missing table fails once, a network error retries.
        raise SourceUnavailable(f"source {source.name!r}: {exc}") from exc
    if stats.duplicate_key_count:
        context.log.warning(
            f"{stats.duplicate_key_count} duplicated key(s) in {source.name}, first kept: "
            + ", ".join(printable(k) for k in stats.duplicate_keys)
        )
    # Keys, file names and errors come from the data: escaped, so none can forge a log line.
    for line in stats.warnings:
        context.log.warning(printable(line))
    for line in stats.errors_sample:
        context.log.info(f"row error: {printable(line)}")
    meta = stats.as_metadata()
    return dg.MaterializeResult(
        metadata={
            **{k: v for k, v in meta.items() if k != "rows_by_status"},
            "rows_by_status": dg.MetadataValue.json(meta["rows_by_status"]),
            "table_uri": dg.MetadataValue.path(uri),
            "spec": dg.MetadataValue.path(str(source.path)),
            "spec_fingerprint": source.fingerprint,
            "duplicate_key_examples": dg.MetadataValue.json(stats.duplicate_keys),
        },
        data_version=dg.DataVersion(f"v{stats.version}"),
    )
