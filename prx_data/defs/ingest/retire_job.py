"""The ``retire_source`` job: what the registry sensor launches when a spec is removed (and what
``prx-data sources remove`` runs directly). Policy: ``prx_data/curation/retire.py``."""

import dagster as dg

from prx_data.core.settings import get_settings
from prx_data.curation.retire import archive_source, receipt_path
from prx_data.defs import links
from prx_data.defs.failures import fail_fast
from prx_data.defs.partitions import SOURCES_PARTITION
from prx_data.defs.resources import SourceRegistryResource, StorageResource
from prx_data.export.corpus_index import merge_all

CORPUS_INDEX = dg.AssetKey("corpus_index")
RETIRE_TAG = "prx/retire"


class RetireConfig(dg.Config):
    source: str
    reason: str = "spec removed from the sources folder"


# The op is "retire" and the job "retire_source": an op named like its job makes the code
# location fail to load (Dagster sees two definitions named retire_source).
@dg.op(
    name="retire",
    description="Moves the source's export out of the training tree (kept under _retired/), "
    "rebuilds the merged bucket indexes without it, and removes its partition.",
)
@fail_fast
def retire_source(context: dg.OpExecutionContext, config: RetireConfig, storage: StorageResource, registry: SourceRegistryResource) -> None:
    reg = registry.load(storage)
    if config.source in reg.sources or config.source in reg.contested:
        # Re-added while the retirement waited (or claimed by specs again): nothing to retire.
        raise dg.Failure(description=f"source {config.source!r} has a spec again; it was not retired", allow_retries=False)
    receipt = archive_source(storage.paths, config.source, reason=config.reason, options=storage.options)
    min_samples = get_settings().min_stream_samples
    merged = merge_all(storage.mds_root, storage.options, min_stream_samples=min_samples, gc_min_age_s=get_settings().shard_retention_s)
    # The merged indexes are corpus_index's output: recording it lets automation refresh the
    # skip lists and the data card (with the receipt) as after any other change of the tree.
    context.log_event(
        dg.AssetMaterialization(
            CORPUS_INDEX,
            description=f"rebuilt without retired source {config.source!r}",
            metadata={
                "buckets": len(merged),
                "samples": sum(m.num_samples for m in merged),
                "retired_source": config.source,
                "receipt": links.location(receipt_path(storage.mds_root, receipt)),
            },
        )
    )
    if context.instance.has_dynamic_partition(SOURCES_PARTITION, config.source):
        context.instance.delete_dynamic_partition(SOURCES_PARTITION, config.source)
    moved = "\n".join(f"- `{a}` → `{b}`" for a, b in receipt.moved.items()) or "- nothing was exported"
    context.log.info(f"retired {config.source}: {receipt.samples_moved} sample(s) out of training\n{moved}")


@dg.job(
    name="retire_source",
    tags={"prx/kind": "retire"},
    description="Retire a source whose spec was removed: keep its data, take it out of training and of the partition set.",
)
def retire_source_job():
    retire_source()
