"""phashes: a 64-bit DCT perceptual hash per usable row, computed on Ray, and the colour space
each image's embedded profile declares."""

import dagster as dg
from dagster_ray import RayResource

from prx_data.core.ray_tasks import Executor
from prx_data.defs.code_versions import phashes_code_version
from prx_data.defs.conditions import PER_SOURCE
from prx_data.defs.failures import fail_fast
from prx_data.defs.partitions import PER_SOURCE_TAG, sources_partitions
from prx_data.defs.policies import SOURCE_TABLE_WRITER_TAG, TRANSIENT_RETRY
from prx_data.defs.resources import RayTasksResource, StorageResource
from prx_data.defs.stage_runs import stage_run
from prx_data.imaging.phash import PHASH_VERSION


class PhashConfig(dg.Config):
    chunk_rows: int = 256
    executor: Executor = "auto"


@dg.asset(
    partitions_def=sources_partitions,
    deps=["raw_samples"],
    group_name="image",
    kinds={"lance", "ray"},
    tags=PER_SOURCE_TAG,
    code_version=phashes_code_version(),
    automation_condition=PER_SOURCE,
    retry_policy=TRANSIENT_RETRY,
    op_tags=SOURCE_TABLE_WRITER_TAG,
    description="Adds phash, phash_version, phash_error to the source's table, and colour_space (the "
    "colour space the image's ICC profile declares: srgb, display-p3, adobe-rgb, other:<profile>, "
    "none, invalid-profile); rows already done with the current versions are skipped.",
)
@fail_fast
def phashes(
    context: dg.AssetExecutionContext, config: PhashConfig, storage: StorageResource, ray: RayResource, ray_tasks: RayTasksResource
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.stages.colour_stage import read_colour_spaces
    from prx_data.stages.phash_stage import compute_phashes

    uri = storage.paths.raw_table(context.partition_key)
    stats = compute_phashes(uri, **stage_run(context, storage, ray_tasks, config.executor, config.chunk_rows, "hashed"))
    colour = read_colour_spaces(uri, **stage_run(context, storage, ray_tasks, config.executor, config.chunk_rows, "read colour spaces of"))
    return dg.MaterializeResult(
        metadata={
            "rows_hashed": stats.processed,
            "errors": stats.failed,
            "skipped_current": stats.skipped_current,
            "resumed_from_staging": stats.resumed,
            "images_per_s": round(stats.rows_per_s, 1),
            "phash_version": PHASH_VERSION,
            "colour_rows_read": colour.processed,
            # Profiles that do not parse or fit their image: recorded, the image used as sRGB.
            "colour_profile_errors": colour.failed,
            "lance_version": colour.version or stats.version,
            "table": dg.MetadataValue.path(uri),
        }
    )
