"""The caption_labels stage: visual / text / nsfw from the caption alone."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterator

import lance
import pyarrow as pa

from prx_data.core.counts import value_counter
from prx_data.core.filters import STATUS_OK, all_of, is_set
from prx_data.core.lance_io import SCAN_ROWS, storage_options_of
from prx_data.core.ray_tasks import ensure_ray
from prx_data.core.schema import LABEL_COLUMNS
from prx_data.models.captioning.stage_timings import record_stage_timings
from prx_data.models.labeling.base import LabelResult
from prx_data.models.labeling.config import (
    ClassifierConfig,
    FusedClassifierConfig,
    VLLMClassifierConfig,
)
from prx_data.models.labeling.factory import make_classifier, parse_classifier_config
from prx_data.models.labeling.label_columns import label_results_table, with_label_score
from prx_data.models.labeling.vllm_ray import label_dataset_vllm
from prx_data.stages.column_stage import ColumnStage, Processor, StageStats, address_chunks, read_rows, run_column_stage
from prx_data.stages.executors import Executor, make_processor
from prx_data.stages.versions import label_identity

NO_FUSED_LABEL = "no_fused_label"


def label_stage(config: ClassifierConfig) -> ColumnStage:
    model_id, version = label_identity(config)
    return ColumnStage(
        name="label",
        columns=LABEL_COLUMNS,
        current={"label_model": model_id, "label_version": version},
        eligible=all_of(STATUS_OK, is_set("caption")),
        redo_if_set=("label_error",),
        # A label follows its caption; older code nulled the label of every re-captioned row,
        # so labels made before the fingerprint existed are adopted, not redone.
        inputs=("caption",),
    )


@functools.lru_cache(maxsize=2)
def _worker_classifier(config_json: str):
    return make_classifier(parse_classifier_config(json.loads(config_json)))


def label_rows(config_json: str, sample_ids: list[str], _images: list, rows: pa.Table) -> pa.Table:
    classifier = _worker_classifier(config_json)
    results = classifier.label_batch(rows.column("caption").to_pylist())
    return label_results_table(sample_ids, results, classifier.model_id, classifier.label_version)


def _read_captions(item: dict, *, uri: str, version: int, options: dict | None) -> list[dict]:
    ds = lance.dataset(uri, version=version, storage_options=options)
    return read_rows(ds, item["addresses"], ["sample_id", "caption"]).to_pylist()


def vllm_label_processor(config: VLLMClassifierConfig, task_resources: dict[str, float] | None = None) -> Processor:
    """Pending captions stream to the engine in chunks of ``chunk_rows`` read on Ray workers
    (never all in one driver block); results come back ``staging_rows`` at a time."""

    def run(ds: lance.LanceDataset, todo: pa.Table) -> Iterator[pa.Table]:
        import ray.data

        chunks = [{"addresses": c.column("_rowaddr").to_pylist()} for c in address_chunks(todo, config.chunk_rows)]
        if not chunks:
            return
        ensure_ray()  # joins the run's Ray here, not when the run starts (core.ray_tasks)
        rows = ray.data.from_items(chunks).flat_map(
            functools.partial(_read_captions, uri=ds.uri, version=ds.version, options=storage_options_of(ds)),
            num_cpus=config.cpu_stage_num_cpus,
            resources=dict(task_resources) if task_resources else None,
        )
        out = label_dataset_vllm(rows, config)
        for batch in out.iter_batches(batch_size=config.staging_rows, batch_format="pyarrow"):
            yield with_label_score(batch)
        record_stage_timings(out, f"labels {config.model_id}")

    return run


def fused_label_processor(config: FusedClassifierConfig) -> Processor:
    """No model: rows still pending were captioned without the fused label."""

    def run(ds: lance.LanceDataset, todo: pa.Table) -> Iterator[pa.Table]:
        # lazy: pulls in PIL
        from prx_data.models.captioning.task import fused_label_version

        if todo.num_rows:
            n = todo.num_rows
            yield label_results_table(
                todo.column("sample_id").to_pylist(), [LabelResult(error=NO_FUSED_LABEL)] * n, config.model_id, fused_label_version()
            )

    return run


def compute_labels(
    table_uri: str,
    config: ClassifierConfig | dict,
    *,
    executor: Executor = "ray",
    chunk_rows: int = 256,
    storage_options: dict | None = None,
    progress=None,
    run_id: str | None = None,
    task_resources: dict[str, float] | None = None,
    local_max_rows: int | None = None,
) -> StageStats:
    """``task_resources``: custom Ray resources the stage's CPU tasks ask for (the chunk tasks,
    or the vLLM path's table reads; the engine follows its own ``worker_env.node_resource``)."""
    config = parse_classifier_config(config)
    stage = label_stage(config)
    if isinstance(config, VLLMClassifierConfig):
        processor = vllm_label_processor(config, task_resources)
    elif isinstance(config, FusedClassifierConfig):
        processor = fused_label_processor(config)
    else:
        fn = functools.partial(label_rows, config.model_dump_json())
        processor = make_processor(
            fn,
            columns=["caption"],
            with_images=False,
            executor=executor,
            chunk_rows=chunk_rows,
            task_resources=task_resources,
            local_max_rows=local_max_rows,
        )
    stats = run_column_stage(
        table_uri, stage, processor, storage_options=storage_options, progress=progress, run_id=run_id, error_column="label_error"
    )
    stats.extra.update(zip(("label_model", "label_version"), label_identity(config)))
    return stats


def label_counts(table_uri: str, storage_options: dict | None = None) -> dict[str, int]:
    ds = lance.dataset(table_uri, storage_options=storage_options)
    out: Counter[str] = Counter()
    for batch in ds.to_batches(columns=["label"], filter="label IS NOT NULL", batch_size=SCAN_ROWS):
        out.update(value_counter(batch.column("label")))
    return dict(sorted(out.items()))


__all__ = ["compute_labels", "label_counts", "label_identity", "label_rows", "label_stage"]
