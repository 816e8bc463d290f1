"""captions and caption_labels: per-source columns made by a VLM and a text classifier."""

import contextlib

import dagster as dg
from dagster_ray import RayResource

from prx_data.core.histogram import median
from prx_data.core.ray_tasks import Executor
from prx_data.defs.caption.resources import CaptionerResource, ClassifierResource
from prx_data.defs.code_versions import captions_code_version, labels_code_version
from prx_data.defs.conditions import PER_SOURCE
from prx_data.defs.partitions import PER_SOURCE_TAG, sources_partitions
from prx_data.defs.policies import SOURCE_TABLE_WRITER_TAG, captions_pool, labels_pool
from prx_data.defs.progress import ProgressLogger
from prx_data.defs.resources import RayTasksResource, StorageResource
from prx_data.models.captioning.base import BackendUnavailable


@contextlib.contextmanager
def _fail_clearly_when_down(kind: str, backend: str):
    """A backend that stays down after its retries fails the run with a message that says so."""
    try:
        yield
    except BackendUnavailable as exc:
        raise dg.Failure(
            description=f"{kind} backend {backend!r} is unavailable; finished batches are kept "
            f"in staging and the next run resumes from them. {exc}"
        ) from None


class StageRunConfig(dg.Config):
    executor: Executor = "auto"
    chunk_rows: int = 64


def captions(
    context: dg.AssetExecutionContext,
    config: StageRunConfig,
    storage: StorageResource,
    captioner: CaptionerResource,
    ray: RayResource,
    ray_tasks: RayTasksResource,
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.stages.caption_stage import caption_word_counts, compute_captions

    uri = storage.paths.raw_table(context.partition_key)
    backend = captioner.config()
    if backend.backend == "source":
        # Said once per source (its first captions run), not on every run of it.
        earlier = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[context.partition_key]), limit=1
        ).records
        (context.log.debug if earlier else context.log.warning)(
            "captioner backend 'source': keeping source captions (caption_model=source); configure vllm or openai for VLM captions"
        )
    with _fail_clearly_when_down("captioner", backend.backend):
        stats = compute_captions(
            uri,
            backend,
            executor=config.executor,
            chunk_rows=config.chunk_rows,
            storage_options=storage.options,
            progress=ProgressLogger(context.log, "captioned"),
            run_id=context.run_id,
            task_resources=ray_tasks.resources,
            local_max_rows=ray_tasks.local_max_rows,
        )
    words = caption_word_counts(uri, storage.options)
    return dg.MaterializeResult(
        metadata={
            "captioned": stats.processed - stats.failed,
            "failed": stats.failed,
            "skipped_current": stats.skipped_current,
            "resumed_from_staging": stats.resumed,
            "images_per_s": round(stats.rows_per_s, 2),
            "words_per_caption_median": median(words),
            "caption_model": stats.extra["caption_model"],
            "caption_prompt_version": stats.extra["caption_prompt_version"],
            "lance_version": stats.version,
            "table": dg.MetadataValue.path(uri),
        }
    )


def caption_labels(
    context: dg.AssetExecutionContext,
    config: StageRunConfig,
    storage: StorageResource,
    classifier: ClassifierResource,
    ray: RayResource,
    ray_tasks: RayTasksResource,
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.stages.label_stage import compute_labels, label_counts

    uri = storage.paths.raw_table(context.partition_key)
    backend = classifier.config()
    with _fail_clearly_when_down("classifier", backend.backend):
        stats = compute_labels(
            uri,
            backend,
            executor=config.executor,
            chunk_rows=max(config.chunk_rows, 256),
            storage_options=storage.options,
            progress=ProgressLogger(context.log, "labelled"),
            run_id=context.run_id,
            task_resources=ray_tasks.resources,
            local_max_rows=ray_tasks.local_max_rows,
        )
    return dg.MaterializeResult(
        metadata={
            "labelled": stats.processed - stats.failed,
            "failed": stats.failed,
            "skipped_current": stats.skipped_current,
            "captions_per_s": round(stats.rows_per_s, 1),
            "labels": dg.MetadataValue.json(label_counts(uri, storage.options)),
            "label_model": stats.extra["label_model"],
            "label_version": stats.extra["label_version"],
            "lance_version": stats.version,
            "table": dg.MetadataValue.path(uri),
        }
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The two model assets, built when the Definitions are loaded: their pool and code version
    come from the configured backends, so a code location started with other settings gets them
    without re-importing this module."""
    captions_asset = dg.asset(
        name="captions",
        partitions_def=sources_partitions,
        deps=["raw_samples"],
        group_name="caption",
        kinds={"lance", "ray"},
        tags=PER_SOURCE_TAG,
        pool=captions_pool(),
        code_version=captions_code_version(),
        automation_condition=PER_SOURCE,
        op_tags=SOURCE_TABLE_WRITER_TAG,
        description="Adds caption, caption_model, caption_prompt_version, caption_error. Only rows "
        "with no caption, an error, or one made by another model/prompt version are captioned.",
    )(captions)
    labels_asset = dg.asset(
        name="caption_labels",
        partitions_def=sources_partitions,
        deps=["captions"],
        group_name="caption",
        kinds={"lance", "ray"},
        tags=PER_SOURCE_TAG,
        pool=labels_pool(),
        code_version=labels_code_version(),
        automation_condition=PER_SOURCE,
        op_tags=SOURCE_TABLE_WRITER_TAG,
        description="Labels each caption visual, text or nsfw from the caption alone.",
    )(caption_labels)
    return dg.Definitions(assets=[captions_asset, labels_asset])
