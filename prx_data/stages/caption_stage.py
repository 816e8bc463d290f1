"""The captions stage: a caption per usable row from the configured backend.

CPU backends (source, openai, transformers) run as row chunks on Ray with the captioner built
once per worker; the vLLM backend streams the rows through a Ray Data LLM processor on GPU
replicas. Either way results go through the resumable column stage.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterator
from typing import Literal

import lance
import pyarrow as pa

from prx_data.core.counts import word_histogram
from prx_data.core.lance_io import scan_text, storage_options_of
from prx_data.core.ray_tasks import ensure_ray
from prx_data.core.schema import CAPTION_COLUMNS, LABEL_COLUMNS, input_fingerprint_field
from prx_data.models.captioning.caption_columns import caption_results_table
from prx_data.models.captioning.config import (
    CaptionerConfig,
    SourceCaptionerConfig,
    VLLMCaptionerConfig,
)
from prx_data.models.captioning.factory import make_captioner, parse_captioner_config
from prx_data.models.captioning.stage_timings import record_stage_timings
from prx_data.models.captioning.vllm_ray import caption_dataset_vllm
from prx_data.stages.column_stage import ColumnStage, Processor, StageStats, address_chunks, read_images, read_rows, run_column_stage
from prx_data.stages.executors import Executor, make_processor
from prx_data.stages.versions import caption_identity


def caption_inputs(config: CaptionerConfig) -> tuple[str, ...]:
    """The columns a backend's caption is made from: the ``source`` captioner reads the source
    caption; the models read the image alone."""
    if isinstance(config, SourceCaptionerConfig):
        return ("image_sha256", "source_caption")
    return ("image_sha256",)


def caption_stage(config: CaptionerConfig) -> ColumnStage:
    model_id, prompt_version = caption_identity(config)
    inputs = caption_inputs(config)
    # Older code never redid a source caption after a sidecar edit: redo those (no model, cheap).
    # A model's caption followed its image already (a new image replaces the row): adopt it.
    upgrade: Literal["adopt", "redo"] = "redo" if isinstance(config, SourceCaptionerConfig) else "adopt"
    if isinstance(config, VLLMCaptionerConfig) and config.fused_label:
        # The fused request writes the label with the caption: nothing to invalidate.
        return ColumnStage(
            name="caption",
            columns=pa.schema([*CAPTION_COLUMNS, *LABEL_COLUMNS]),
            current={"caption_model": model_id, "caption_prompt_version": prompt_version},
            redo_if_set=("caption_error",),
            inputs=inputs,
            upgrade=upgrade,
            output_fingerprints={input_fingerprint_field("label").name: ("caption",)},
        )
    return ColumnStage(
        name="caption",
        columns=CAPTION_COLUMNS,
        current={"caption_model": model_id, "caption_prompt_version": prompt_version},
        redo_if_set=("caption_error",),
        invalidates=tuple(f.name for f in LABEL_COLUMNS),
        inputs=inputs,
        upgrade=upgrade,
    )


@functools.lru_cache(maxsize=2)
def _worker_captioner(config_json: str):
    """One captioner per worker process: a model is loaded once, not once per chunk."""
    return make_captioner(parse_captioner_config(json.loads(config_json)))


def caption_rows(config_json: str, sample_ids: list[str], images: list[bytes | None], rows: pa.Table) -> pa.Table:
    captioner = _worker_captioner(config_json)
    captions = rows.column("source_caption").to_pylist() if "source_caption" in rows.column_names else [None] * len(images)
    batch = [{"image": img, "source_caption": cap} for img, cap in zip(images, captions)]
    results = captioner.caption_batch(batch)
    return caption_results_table(sample_ids, results, captioner.model_id, captioner.prompt_version)


def _read_chunk(item: dict, *, uri: str, version: int, options: dict | None) -> list[dict]:
    ds = lance.dataset(uri, version=version, storage_options=options)
    images = read_images(ds, item["addresses"])
    sources = read_rows(ds, item["addresses"], ["source"]).column("source").to_pylist()
    return [{"sample_id": sid, "image": img, "source": src} for sid, img, src in zip(item["sample_ids"], images, sources)]


def vllm_processor(config: VLLMCaptionerConfig, chunk_rows: int = 256, task_resources: dict[str, float] | None = None) -> Processor:
    """Rows -> Ray Data (read images on CPU workers, which ask for ``task_resources``) -> vLLM
    replicas -> result batches of ``staging_rows`` (one staging fragment each)."""

    def run(ds: lance.LanceDataset, todo: pa.Table) -> Iterator[pa.Table]:
        import ray.data

        chunks = [
            {"addresses": c.column("_rowaddr").to_pylist(), "sample_ids": c.column("sample_id").to_pylist()}
            for c in address_chunks(todo, chunk_rows)
        ]
        if not chunks:
            return
        ensure_ray()  # joins the run's Ray here, not when the run starts (core.ray_tasks)
        rows = ray.data.from_items(chunks).flat_map(
            functools.partial(_read_chunk, uri=ds.uri, version=ds.version, options=storage_options_of(ds)),
            num_cpus=config.cpu_stage_num_cpus,
            resources=dict(task_resources) if task_resources else None,
        )
        out = caption_dataset_vllm(rows, config)
        yield from out.iter_batches(batch_size=config.staging_rows, batch_format="pyarrow")
        record_stage_timings(out, f"captions {config.model_id}")

    return run


def compute_captions(
    table_uri: str,
    config: CaptionerConfig | dict,
    *,
    executor: Executor = "ray",
    chunk_rows: int = 64,
    storage_options: dict | None = None,
    progress=None,
    run_id: str | None = None,
    task_resources: dict[str, float] | None = None,
    local_max_rows: int | None = None,
) -> StageStats:
    """``task_resources``: custom Ray resources the stage's CPU tasks ask for (the chunk tasks,
    or the vLLM path's table reads; the engine follows its own ``worker_env.node_resource``)."""
    config = parse_captioner_config(config)
    stage = caption_stage(config)
    if isinstance(config, VLLMCaptionerConfig):
        processor = vllm_processor(config, chunk_rows, task_resources)
    else:
        fn = functools.partial(caption_rows, config.model_dump_json())
        needs_image = not isinstance(config, SourceCaptionerConfig)
        if executor == "auto" and not needs_image and not task_resources:
            # The source backend copies a text column: Ray tasks would cost more than the copy.
            executor = "local"
        processor = make_processor(
            fn,
            columns=["source_caption"],
            with_images=needs_image,
            executor=executor,
            chunk_rows=chunk_rows,
            task_resources=task_resources,
            local_max_rows=local_max_rows,
        )
    stats = run_column_stage(
        table_uri, stage, processor, storage_options=storage_options, progress=progress, run_id=run_id, error_column="caption_error"
    )
    stats.extra.update(zip(("caption_model", "caption_prompt_version"), caption_identity(config)))
    return stats


def caption_word_counts(table_uri: str, storage_options: dict | None = None) -> Counter[int]:
    """{words: captions} over the table's captions, scanned in batches (see core.counts)."""
    ds = lance.dataset(table_uri, storage_options=storage_options)
    histogram: Counter[int] = Counter()
    for batch in scan_text(ds, ["caption"], filter="caption IS NOT NULL"):
        histogram.update(word_histogram(batch.column("caption")))
    return histogram


__all__ = ["caption_identity", "caption_inputs", "caption_rows", "caption_stage", "compute_captions"]
