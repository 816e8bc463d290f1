"""captions and caption_labels: per-source columns made by a VLM and a text classifier."""

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import dagster as dg
from dagster_ray import RayResource

from prx_data.core.histogram import median
from prx_data.core.ray_tasks import Executor
from prx_data.defs import links
from prx_data.defs.caption.resources import CaptionerResource, ClassifierResource
from prx_data.defs.code_versions import captions_code_version, labels_code_version
from prx_data.defs.conditions import PER_SOURCE
from prx_data.defs.partitions import PER_SOURCE_TAG, sources_partitions
from prx_data.defs.policies import SOURCE_TABLE_WRITER_TAG, captions_pool, labels_pool
from prx_data.defs.resources import RayTasksResource, StorageResource
from prx_data.defs.stage_runs import stage_run
from prx_data.models.inference.backend import BackendUnavailable

if TYPE_CHECKING:
    from prx_data.stages.column_stage import StageStats


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


def _materialize(
    context: dg.AssetExecutionContext,
    run: tuple[StageRunConfig, StorageResource, RayTasksResource],
    stage,
    backend,
    kind: str,
    done: str,
    chunk_rows: int,
    own: Callable[["StageStats", str], dict],
) -> dg.MaterializeResult:
    """Run a model stage (``stages.model_stage``) over the partition's table. ``done``: what a
    made row is called (progress lines, metadata); ``own(stats, table)``: the stage's own metadata."""
    config, storage, ray_tasks = run
    uri = storage.paths.raw_table(context.partition_key)
    with _fail_clearly_when_down(kind, backend.backend):
        stats = stage.compute(uri, backend, **stage_run(context, storage, ray_tasks, config.executor, chunk_rows, done))
    return dg.MaterializeResult(
        metadata={
            done: stats.processed - stats.failed,
            "failed": stats.failed,
            "skipped_current": stats.skipped_current,
            **own(stats, uri),
            # The identity the stage recorded in every row (its model and version columns).
            **{name: stats.extra[name] for name in (stage.columns.model, stage.columns.version)},
            "lance_version": stats.version,
            "table": links.location(uri),
        }
    )


_CAPTIONS = (
    "Adds caption, caption_model, caption_prompt_version, caption_error. Only rows "
    "with no caption, an error, or one made by another model/prompt version are captioned."
)


def captions(
    context: dg.AssetExecutionContext,
    config: StageRunConfig,
    storage: StorageResource,
    captioner: CaptionerResource,
    ray: RayResource,
    ray_tasks: RayTasksResource,
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.stages.caption_stage import CAPTIONS, caption_word_counts

    backend = captioner.config()
    if backend.backend == "source":
        # Said once per source (its first captions run), not on every run of it.
        earlier = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[context.partition_key]), limit=1
        ).records
        (context.log.debug if earlier else context.log.warning)(
            "captioner backend 'source': keeping source captions (caption_model=source); configure vllm or openai for VLM captions"
        )

    def own(stats: "StageStats", uri: str) -> dict:
        return {
            "resumed_from_staging": stats.resumed,
            "images_per_s": round(stats.rows_per_s, 2),
            "words_per_caption_median": median(caption_word_counts(uri, storage.options)),
        }

    return _materialize(context, (config, storage, ray_tasks), CAPTIONS, backend, "captioner", "captioned", config.chunk_rows, own)


_LABELS = "Labels each caption visual, text or nsfw from the caption alone."


def caption_labels(
    context: dg.AssetExecutionContext,
    config: StageRunConfig,
    storage: StorageResource,
    classifier: ClassifierResource,
    ray: RayResource,
    ray_tasks: RayTasksResource,
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.stages.label_stage import CAPTION_LABELS, label_counts

    def own(stats: "StageStats", uri: str) -> dict:
        return {"captions_per_s": round(stats.rows_per_s, 1), "labels": dg.MetadataValue.json(label_counts(uri, storage.options))}

    run = (config, storage, ray_tasks)
    return _materialize(context, run, CAPTION_LABELS, classifier.config(), "classifier", "labelled", max(config.chunk_rows, 256), own)


def _model_asset(fn, *, after: str, pool: str | None, code_version: str, description: str) -> dg.AssetsDefinition:
    """A per-source model asset named as its function: one writer of the source table, made
    after ``after``, automated with the chain."""
    return dg.asset(
        name=fn.__name__,
        partitions_def=sources_partitions,
        deps=[after],
        group_name="caption",
        kinds={"lance", "ray"},
        tags=PER_SOURCE_TAG,
        pool=pool,
        code_version=code_version,
        automation_condition=PER_SOURCE,
        op_tags=SOURCE_TABLE_WRITER_TAG,
        description=description,
    )(fn)


@dg.definitions
def defs() -> dg.Definitions:
    """The two model assets, built when the Definitions are loaded: their pool and code version
    come from the configured backends, so a code location started with other settings gets them
    without re-importing this module."""
    return dg.Definitions(
        assets=[
            _model_asset(captions, after="raw_samples", pool=captions_pool(), code_version=captions_code_version(), description=_CAPTIONS),
            _model_asset(caption_labels, after="captions", pool=labels_pool(), code_version=labels_code_version(), description=_LABELS),
        ]
    )
