"""The ``vllm`` backend: Qwen3-VL in vLLM, driven by Ray Data's LLM API (``ray.data.llm``).

This is a dataset-to-dataset transform, not a per-batch :class:`Captioner`: Ray Data streams
rows through preprocess (CPU) -> multimodal prepare -> chat template -> tokenize -> vLLM (GPU)
-> detokenize -> postprocess, keeping the GPU busy. ``ray.data.llm`` imports without vLLM; the
vLLM stages run in the GPU worker environment (:mod:`prx_data.captioning.gpu_env`).

Rows in: ``sample_id``, ``image`` (bytes). Rows out: ``sample_id`` and the caption columns of
:data:`prx_data.schema.CAPTION_COLUMNS`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prx_data.captioning.base import BaseCaptioner, CaptionResult, CaptionRow, with_detail
from prx_data.captioning.base import CaptionErrorCode as E
from prx_data.captioning.config import CaptionSampling, VLLMCaptionerConfig
from prx_data.captioning.gpu_env import gpu_runtime_env
from prx_data.captioning.images import ImageBudget, image_data_url
from prx_data.captioning.prompt import CAPTION_PROMPT_VERSION, caption_messages
from prx_data.captioning.quality import CaptionGuards, judge_caption

if TYPE_CHECKING:
    import ray.data
    from ray.data.llm import vLLMEngineProcessorConfig

PREP_ERROR = "prep_error"


def _placeholder_messages() -> list[dict]:
    """What a row whose image could not be prepared sends to the engine: a one-token text
    request. Rows cannot be dropped inside the processor, and bad images are rare here (ingest
    validated them), so this costs less than splitting and re-joining the stream. Same shape
    as real messages so the column's type does not change from row to row."""
    return [
        {"role": "system", "content": "."},
        {"role": "user", "content": [{"type": "text", "text": "."}]},
    ]


def vllm_sampling_params(sampling: CaptionSampling) -> dict[str, Any]:
    params: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
    }
    if sampling.top_k is not None:
        params["top_k"] = sampling.top_k
    if sampling.seed is not None:
        params["seed"] = sampling.seed
    return params


def caption_preprocess(
    row: dict[str, Any], *, image: ImageBudget, sampling: CaptionSampling
) -> dict[str, Any]:
    """Row (sample_id, image bytes) -> chat messages with the image fitted to the budget.

    Ray carries every input column through all stages, so the raw image is replaced by None
    here: only the resized data URL travels on.
    """
    try:
        url = image_data_url(row.get("image"), image)
    except Exception as exc:
        return {
            "image": None,
            "messages": _placeholder_messages(),
            "sampling_params": {**vllm_sampling_params(sampling), "max_tokens": 1},
            PREP_ERROR: with_detail(E.BAD_IMAGE, repr(exc)),
        }
    return {
        "image": None,
        "messages": caption_messages(url),
        "sampling_params": vllm_sampling_params(sampling),
        PREP_ERROR: None,
    }


def _caption_row(sample_id: Any, result: CaptionResult, model_id: str) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "caption": result.caption,
        "caption_model": model_id,
        "caption_prompt_version": CAPTION_PROMPT_VERSION,
        "caption_error": result.error,
    }


def caption_postprocess(
    row: dict[str, Any], *, model_id: str, guards: CaptionGuards, max_tokens: int
) -> dict[str, Any]:
    """Engine output -> caption columns, through the quality guards.

    Ray's vLLM stage does not expose vLLM's finish_reason; a generation that used all of
    ``max_tokens`` is the same signal.
    """
    if row.get(PREP_ERROR):
        return _caption_row(row.get("sample_id"), CaptionResult(error=row[PREP_ERROR]), model_id)
    n_generated = int(row.get("num_generated_tokens") or 0)
    finish = "length" if n_generated >= max_tokens else "stop"
    result = judge_caption(row.get("generated_text"), finish_reason=finish, guards=guards)
    return _caption_row(row.get("sample_id"), result, model_id)


def finalize_caption_row(row: dict[str, Any], *, model_id: str) -> dict[str, Any]:
    """Give rows the engine failed on (``should_continue_on_error``) the same columns."""
    failure = row.get("__inference_error__")
    if failure:
        result = CaptionResult(error=with_detail(E.INFERENCE_ERROR, failure))
        return _caption_row(row.get("sample_id"), result, model_id)
    return {k: row[k] for k in ("sample_id", *_CAPTION_KEYS)}


_CAPTION_KEYS = ("caption", "caption_model", "caption_prompt_version", "caption_error")


def vllm_engine_kwargs(cfg: VLLMCaptionerConfig) -> dict[str, Any]:
    return {
        "max_model_len": cfg.max_model_len,
        "max_num_seqs": cfg.max_num_seqs,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "enable_prefix_caching": cfg.enable_prefix_caching,  # the system prompt is shared
        # One image per prompt and no video: vLLM sizes its encoder budget from these limits.
        "limit_mm_per_prompt": {"image": 1, "video": 0},
        **cfg.extra_engine_kwargs,
    }


def vllm_processor_config(cfg: VLLMCaptionerConfig) -> "vLLMEngineProcessorConfig":
    from ray.data.llm import vLLMEngineProcessorConfig

    return vLLMEngineProcessorConfig(
        model_source=cfg.model_source,
        engine_kwargs=vllm_engine_kwargs(cfg),
        batch_size=cfg.batch_size,
        concurrency=cfg.replicas,
        max_concurrent_batches=cfg.max_concurrent_batches,
        accelerator_type=cfg.accelerator_type,
        runtime_env=gpu_runtime_env(cfg.worker_env),
        # Parses the image parts of the messages into vLLM multimodal data (Ray 2.60 name).
        prepare_multimodal_stage={"enabled": True},
        # A failed row becomes a row with caption_error, not a failed job.
        should_continue_on_error=True,
    )


def build_vllm_caption_processor(cfg: VLLMCaptionerConfig):
    """A ``ray.data.llm`` Processor: call it on a dataset of (sample_id, image) rows."""
    from ray.data.llm import build_processor

    return build_processor(
        vllm_processor_config(cfg),
        preprocess=functools.partial(caption_preprocess, image=cfg.image, sampling=cfg.sampling),
        postprocess=functools.partial(
            caption_postprocess,
            model_id=cfg.model_id,
            guards=cfg.guards,
            max_tokens=cfg.sampling.max_tokens,
        ),
    )


def caption_dataset_vllm(ds: "ray.data.Dataset", cfg: VLLMCaptionerConfig) -> "ray.data.Dataset":
    """Lazily caption ``ds``; nothing runs until the result is consumed or written."""
    processor = build_vllm_caption_processor(cfg)
    return processor(ds).map(functools.partial(finalize_caption_row, model_id=cfg.model_id))


class VLLMCaptioner(BaseCaptioner):
    """The vLLM backend behind the common interface.

    :meth:`caption_dataset` is the way to use it. :meth:`caption_batch` works, but each call
    runs a small Ray Data job that starts the engine replicas again (minutes for an 8B model):
    only for tests and tiny batches.
    """

    prompt_version = CAPTION_PROMPT_VERSION

    def __init__(self, config: VLLMCaptionerConfig) -> None:
        self.config = config
        self.model_id = config.model_id

    def caption_dataset(self, ds: "ray.data.Dataset") -> "ray.data.Dataset":
        return caption_dataset_vllm(ds, self.config)

    def caption_batch(self, rows: Sequence[CaptionRow]) -> list[CaptionResult]:
        import ray.data

        items = [{"sample_id": str(i), "image": row.get("image")} for i, row in enumerate(rows)]
        if not items:
            return []
        done = self.caption_dataset(ray.data.from_items(items)).take_all()
        out = {r["sample_id"]: r for r in done}
        results = []
        for item in items:
            r = out.get(item["sample_id"])
            if r is None:
                results.append(CaptionResult(error=with_detail(E.INFERENCE_ERROR, "row lost")))
            elif r["caption_error"] is not None:
                results.append(CaptionResult(error=r["caption_error"]))
            else:
                results.append(CaptionResult(caption=r["caption"]))
        return results
