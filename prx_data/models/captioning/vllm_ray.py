"""The ``vllm`` caption backend: Qwen3-VL in vLLM through Ray Data's LLM API.

The caption (or fused caption + label) task of :mod:`prx_data.models.captioning.task` run by the shared
vLLM path of :mod:`prx_data.models.inference.vllm_engine`. Rows in: ``sample_id``, ``image`` (bytes)
and optionally ``source`` (picks the image budget). Rows out: ``sample_id`` and the caption
columns (plus the label columns when ``fused_label``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prx_data.models.captioning.base import BaseCaptioner, CaptionResult
from prx_data.models.captioning.config import VLLMCaptionerConfig
from prx_data.models.captioning.fp8_vision import keep_vision_bf16
from prx_data.models.captioning.task import CaptionTask
from prx_data.models.derived_columns import CAPTION
from prx_data.models.inference import vllm_engine
from prx_data.models.inference.vllm_backend import VLLMTaskBackend

if TYPE_CHECKING:
    import ray.data


def caption_engine_kwargs(cfg: VLLMCaptionerConfig) -> dict[str, Any]:
    widest = cfg.widest_budget()
    kwargs = vllm_engine.engine_kwargs(
        cfg,
        # One image per prompt and no video: vLLM sizes its encoder budget from these limits.
        limit_mm_per_prompt={"image": 1, "video": 0},
        # The image-token budget for the processor and for vLLM's memory profiling (which
        # otherwise reserves room for the model's maximum, 16k tokens per image). Images are
        # already resized to their source's budget in preprocess; this is the widest one.
        mm_processor_kwargs={"size": {"shortest_edge": widest.min_pixels, "longest_edge": widest.max_pixels}},
        mm_processor_cache_gb=cfg.mm_processor_cache_gb,
    )
    return keep_vision_bf16(kwargs) if cfg.vision_bf16 else kwargs


def caption_dataset_vllm(ds: ray.data.Dataset, cfg: VLLMCaptionerConfig) -> ray.data.Dataset:
    """Lazily caption ``ds``; nothing runs until the result is consumed or written."""
    return vllm_engine.run_task(
        ds,
        CaptionTask.from_config(cfg),
        cfg,
        engine=caption_engine_kwargs(cfg),
        multimodal=True,
        max_tokens=cfg.sampling.max_tokens,
    )


class VLLMCaptioner(VLLMTaskBackend[CaptionResult], BaseCaptioner):
    """The caption task on vLLM (:class:`~prx_data.models.inference.vllm_backend.VLLMTaskBackend`)."""

    result_type = CaptionResult
    columns = CAPTION
    dataset_inputs = ("image", "source")

    def __init__(self, config: VLLMCaptionerConfig) -> None:
        self.config = config
        self.model_id = config.model_id
        self._version = CaptionTask.from_config(config).version

    @property
    def version(self) -> str:
        return self._version

    def run_dataset(self, ds: ray.data.Dataset) -> ray.data.Dataset:
        return caption_dataset_vllm(ds, self.config)
