"""The ``vllm`` label backend: Qwen3-8B in vLLM through ``ray.data.llm``, text only.

The answer is constrained to the three labels with vLLM structured outputs (``choice``), and
thinking is switched off in the chat template, so a few output tokens suffice.

Rows in: ``sample_id``, ``caption``. Rows out: ``sample_id`` and
:data:`prx_data.schema.LABEL_COLUMNS`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prx_data.captioning.base import with_detail
from prx_data.captioning.gpu_env import gpu_runtime_env
from prx_data.labeling.base import BaseClassifier, LabelErrorCode, LabelResult
from prx_data.labeling.config import VLLMClassifierConfig
from prx_data.labeling.prompt import LABEL_PROMPT_VERSION, label_messages, parse_label
from prx_data.schema import LABELS

if TYPE_CHECKING:
    import ray.data
    from ray.data.llm import vLLMEngineProcessorConfig

PREP_ERROR = "prep_error"
_LABEL_KEYS = ("label", "label_model", "label_version", "label_error")


def label_sampling_params(max_tokens: int) -> dict[str, Any]:
    return {
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "structured_outputs": {"choice": list(LABELS)},
    }


def label_preprocess(row: dict[str, Any], *, max_tokens: int) -> dict[str, Any]:
    caption = row.get("caption")
    if caption is None or not str(caption).strip():
        # Rows cannot be dropped inside the processor: send a tiny request, mark the row.
        return {
            "messages": label_messages("."),
            "sampling_params": label_sampling_params(1),
            PREP_ERROR: LabelErrorCode.NO_CAPTION,
        }
    return {
        "messages": label_messages(str(caption)),
        "sampling_params": label_sampling_params(max_tokens),
        PREP_ERROR: None,
    }


def _label_row(sample_id: Any, result: LabelResult, model_id: str) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "label": result.label,
        "label_model": model_id,
        "label_version": LABEL_PROMPT_VERSION,
        "label_error": result.error,
    }


def label_postprocess(row: dict[str, Any], *, model_id: str) -> dict[str, Any]:
    if row.get(PREP_ERROR):
        return _label_row(row.get("sample_id"), LabelResult(error=row[PREP_ERROR]), model_id)
    text = row.get("generated_text")
    label = parse_label(text)
    if label is None:
        result = LabelResult(error=with_detail(LabelErrorCode.INVALID_LABEL, repr(text)))
    else:
        result = LabelResult(label=label)
    return _label_row(row.get("sample_id"), result, model_id)


def finalize_label_row(row: dict[str, Any], *, model_id: str) -> dict[str, Any]:
    failure = row.get("__inference_error__")
    if failure:
        result = LabelResult(error=with_detail(LabelErrorCode.INFERENCE_ERROR, failure))
        return _label_row(row.get("sample_id"), result, model_id)
    return {k: row[k] for k in ("sample_id", *_LABEL_KEYS)}


def vllm_label_engine_kwargs(cfg: VLLMClassifierConfig) -> dict[str, Any]:
    return {
        "max_model_len": cfg.max_model_len,
        "max_num_seqs": cfg.max_num_seqs,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "enable_prefix_caching": cfg.enable_prefix_caching,  # the system prompt is shared
        **cfg.extra_engine_kwargs,
    }


def vllm_label_processor_config(cfg: VLLMClassifierConfig) -> "vLLMEngineProcessorConfig":
    from ray.data.llm import vLLMEngineProcessorConfig

    return vLLMEngineProcessorConfig(
        model_source=cfg.model_source,
        engine_kwargs=vllm_label_engine_kwargs(cfg),
        batch_size=cfg.batch_size,
        concurrency=cfg.replicas,
        max_concurrent_batches=cfg.max_concurrent_batches,
        accelerator_type=cfg.accelerator_type,
        runtime_env=gpu_runtime_env(cfg.worker_env),
        # Qwen3's template adds an empty think block when thinking is off, so the answer
        # starts at once and fits in max_tokens.
        chat_template_stage={"chat_template_kwargs": {"enable_thinking": False}},
        should_continue_on_error=True,
    )


def build_vllm_label_processor(cfg: VLLMClassifierConfig):
    from ray.data.llm import build_processor

    return build_processor(
        vllm_label_processor_config(cfg),
        preprocess=functools.partial(label_preprocess, max_tokens=cfg.max_tokens),
        postprocess=functools.partial(label_postprocess, model_id=cfg.model_id),
    )


def label_dataset_vllm(ds: "ray.data.Dataset", cfg: VLLMClassifierConfig) -> "ray.data.Dataset":
    """Lazily label ``ds`` (rows with ``sample_id`` and ``caption``)."""
    processor = build_vllm_label_processor(cfg)
    return processor(ds).map(functools.partial(finalize_label_row, model_id=cfg.model_id))


class VLLMClassifier(BaseClassifier):
    """The vLLM backend behind the common interface; use :meth:`label_dataset` for real runs
    (:meth:`label_batch` starts the engine for every call)."""

    label_version = LABEL_PROMPT_VERSION

    def __init__(self, config: VLLMClassifierConfig) -> None:
        self.config = config
        self.model_id = config.model_id

    def label_dataset(self, ds: "ray.data.Dataset") -> "ray.data.Dataset":
        return label_dataset_vllm(ds, self.config)

    def label_batch(self, captions: Sequence[str | None]) -> list[LabelResult]:
        import ray.data

        items = [{"sample_id": str(i), "caption": c} for i, c in enumerate(captions)]
        if not items:
            return []
        done = self.label_dataset(ray.data.from_items(items)).take_all()
        out = {r["sample_id"]: r for r in done}
        results = []
        for item in items:
            r = out.get(item["sample_id"])
            if r is None:
                lost = with_detail(LabelErrorCode.INFERENCE_ERROR, "row lost")
                results.append(LabelResult(error=lost))
            elif r["label_error"] is not None:
                results.append(LabelResult(error=r["label_error"]))
            else:
                results.append(LabelResult(label=r["label"]))
        return results
