"""Run policy applied to the assets: step retries, the one-writer tag, and the GPU pool."""

from __future__ import annotations

import dagster as dg

# For raw_samples, phashes and mds_shards: Ray workers lost, object-store hiccups and Lance
# commit conflicts (a compaction or another writer committed first) pass on a retry; the column
# stages keep staged batches, so a retry redoes only what was not staged. Short delays: long
# outages are left to run retries (dagster.yaml run_retries), which hold no run slot while they
# wait. Not on captions / caption_labels: their backends retry each request themselves, and a
# backend that stays down must fail with its own message (the step's error), which a step retry
# would replace with "Exceeded max_retries"; the run retry still re-runs them, from staging.
TRANSIENT_RETRY = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)

# Marks the ops that commit to the run's source table (raw_samples, phashes, captions,
# caption_labels): a second concurrent commit fails with a commit conflict. The in-process
# executor (executor.py) runs a run's steps one at a time; the tag names the constraint for any
# executor that would not.
SOURCE_TABLE_WRITER_TAG = {"prx/lance_writer": "source_table"}

# Model steps that run on a GPU of this deployment queue on this pool (dagster.yaml sets its limit).
GPU_POOL = "gpu"


def _uses_local_gpu(config) -> bool:
    # vLLM always runs on GPU workers; transformers / MiniLM only with a CUDA device. A remote
    # OpenAI-compatible server and source captions use no GPU of this deployment.
    if config.backend == "vllm":
        return True
    return str(getattr(config, "device", "cpu")).startswith("cuda")


def captions_pool() -> str | None:
    """``gpu`` when the configured captioner runs on a GPU here, else no pool: CPU backends must
    not queue sources behind each other for a GPU they never use."""
    # lazy: pulls in PIL, httpx, pyarrow
    from prx_data.core.settings import get_settings
    from prx_data.models.captioning.factory import parse_captioner_config

    return GPU_POOL if _uses_local_gpu(parse_captioner_config(get_settings().captioner)) else None


def labels_pool() -> str | None:
    # lazy: pulls in httpx, pyarrow, numpy
    from prx_data.core.settings import get_settings
    from prx_data.models.labeling.factory import parse_classifier_config

    return GPU_POOL if _uses_local_gpu(parse_classifier_config(get_settings().classifier)) else None
