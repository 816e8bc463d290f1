"""Typed configuration of each captioning backend; ``backend`` picks one.

The configs are plain pydantic models (no Dagster), so a Dagster resource can hold one as a
field and Ray workers can receive one pickled.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator

from prx_data.models.captioning.images import ImageBudget
from prx_data.models.captioning.quality import CaptionGuards
from prx_data.models.inference.chat_http import ChatServerConfig
from prx_data.models.inference.factory import BackendConfig
from prx_data.models.inference.vllm_engine import VLLMStageConfig

QWEN3_VL_8B = "Qwen/Qwen3-VL-8B-Instruct"


class CaptionSampling(BackendConfig):
    # Qwen's published generation settings for the VL Instruct models.
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(0.8, gt=0, le=1)
    top_k: int | None = 20
    # 200 words is ~270 tokens; the headroom lets the length guard, not the cut, judge length.
    max_tokens: int = Field(512, ge=1)
    # Qwen's recommended setting for the VL Instruct models: without it a sampled caption can
    # loop on a phrase until max_tokens and end `truncated`.
    presence_penalty: float = Field(1.5, ge=-2, le=2)
    # Strings that end a caption early (none in production; tests with random weights use one).
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def openai_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "presence_penalty": self.presence_penalty,
        }
        if self.top_k is not None:
            params["top_k"] = self.top_k  # vLLM extension of the OpenAI schema
        if self.seed is not None:
            params["seed"] = self.seed
        if self.stop:
            params["stop"] = list(self.stop)
        return params


class SourceCaptionerConfig(BackendConfig):
    """Keep the source's own caption. The CPU default: no model, no GPU."""

    backend: Literal["source"] = "source"


class OpenAICaptionerConfig(BackendConfig):
    backend: Literal["openai"] = "openai"
    server: ChatServerConfig
    # Recorded in caption_model; defaults to the server's model name.
    model_id: str | None = None
    sampling: CaptionSampling = CaptionSampling()
    image: ImageBudget = ImageBudget()
    guards: CaptionGuards = CaptionGuards()
    extra_body: dict[str, Any] = Field(default_factory=dict)


class TransformersCaptionerConfig(BackendConfig):
    backend: Literal["transformers"] = "transformers"
    model_path: str = Field(description="Local checkpoint directory (no hub downloads)")
    model_id: str | None = Field(None, description="Recorded in caption_model; default: path")
    device: str = "cpu"
    dtype: str = "auto"
    batch_size: int = Field(4, ge=1)
    sampling: CaptionSampling = CaptionSampling()
    do_sample: bool = True
    image: ImageBudget = ImageBudget()
    guards: CaptionGuards = CaptionGuards()


class VLLMCaptionerConfig(VLLMStageConfig):
    """Qwen3-VL in vLLM on Ray; the defaults are the H200 profile (docs/gpu.md)."""

    # A local directory or object-storage URI in production; HF ids only resolve from a cache
    # because HF_HUB_OFFLINE=1 on the workers.
    model_source: str = QWEN3_VL_8B
    model_id: str = Field(QWEN3_VL_8B, description="Recorded in caption_model")
    # Batch and step sizes are the engine's defaults (VLLMStageConfig). A sequence: the image
    # (<= 1024 tokens, 2560 for text-heavy sources) + prompt (~350) + caption (<= 512).
    max_model_len: int = Field(4096, ge=256)
    sampling: CaptionSampling = CaptionSampling()
    image: ImageBudget = ImageBudget()
    # Sources whose images are mostly text (documents, slides, screenshots) get a larger
    # image-token budget so the transcription can read small print.
    text_heavy_sources: tuple[str, ...] = ()
    text_heavy_image: ImageBudget = ImageBudget(min_pixels=256 * 32 * 32, max_pixels=2560 * 32 * 32)
    guards: CaptionGuards = CaptionGuards()
    # Also emit the label (visual/text/nsfw) in the same request, after the caption, by
    # structured output; the text-only label pass can then be skipped (classifier "fused").
    fused_label: bool = False
    # vLLM's multimodal processor cache (4 GiB by default) keys processed images by content:
    # unique images never hit it, so it only costs hashing and memory. Raise it for corpora
    # that caption the same image again.
    mm_processor_cache_gb: float = Field(0, ge=0)
    # FP8 weights for the language model only; the vision tower stays bf16
    # (prx_data/captioning/fp8_vision.py). Off: `quantization` applies to the tower too.
    vision_bf16: bool = False

    @field_validator("model_source")
    @classmethod
    def _local_model(cls, value: str) -> str:
        # Ray 2.60's multimodal stage hands model_source to vLLM's ModelConfig unchanged (only
        # the engine stage downloads object-storage URIs), so a remote URI fails every batch.
        if "://" in value:
            raise ValueError(
                f"model_source {value!r}: the multimodal stage needs a local checkpoint directory on "
                "the workers (bake it into the worker image or sync it to a shared volume)"
            )
        return value

    def budget_for(self, source: str | None) -> ImageBudget:
        return self.text_heavy_image if source in self.text_heavy_sources else self.image

    def widest_budget(self) -> ImageBudget:
        return self.text_heavy_image if self.text_heavy_sources else self.image


CaptionerConfig = Annotated[
    Union[
        SourceCaptionerConfig,
        OpenAICaptionerConfig,
        TransformersCaptionerConfig,
        VLLMCaptionerConfig,
    ],
    Field(discriminator="backend"),
]
