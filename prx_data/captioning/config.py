"""Typed configuration of each captioning backend; ``backend`` picks one.

The configs are plain pydantic models (no Dagster), so a Dagster resource can hold one as a
field and Ray workers can receive one pickled.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from prx_data.captioning.chat_http import ChatServerConfig
from prx_data.captioning.gpu_env import WorkerEnv
from prx_data.captioning.images import ImageBudget
from prx_data.captioning.quality import CaptionGuards

QWEN3_VL_8B = "Qwen/Qwen3-VL-8B-Instruct"


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())


class CaptionSampling(_Config):
    # Qwen's published generation settings for the VL Instruct models.
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(0.8, gt=0, le=1)
    top_k: int | None = 20
    # 200 words is ~270 tokens; the headroom lets the length guard, not the cut, judge length.
    max_tokens: int = Field(512, ge=1)
    seed: int | None = None

    def openai_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if self.top_k is not None:
            params["top_k"] = self.top_k  # vLLM extension of the OpenAI schema
        if self.seed is not None:
            params["seed"] = self.seed
        return params


class SourceCaptionerConfig(_Config):
    """Keep the source's own caption. The CPU default: no model, no GPU."""

    backend: Literal["source"] = "source"


class OpenAICaptionerConfig(_Config):
    backend: Literal["openai"] = "openai"
    server: ChatServerConfig
    # Recorded in caption_model; defaults to the server's model name.
    model_id: str | None = None
    sampling: CaptionSampling = CaptionSampling()
    image: ImageBudget = ImageBudget()
    guards: CaptionGuards = CaptionGuards()
    extra_body: dict[str, Any] = Field(default_factory=dict)


class TransformersCaptionerConfig(_Config):
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


class VLLMCaptionerConfig(_Config):
    backend: Literal["vllm"] = "vllm"
    # A local directory or object-storage URI in production; HF ids only resolve from a cache
    # because HF_HUB_OFFLINE=1 on the workers.
    model_source: str = QWEN3_VL_8B
    model_id: str = Field(QWEN3_VL_8B, description="Recorded in caption_model")
    replicas: int = Field(1, ge=1, description="vLLM engine replicas (one GPU each)")
    batch_size: int = Field(32, ge=1)
    max_concurrent_batches: int = Field(8, ge=1)
    max_model_len: int = Field(8192, ge=256)
    max_num_seqs: int = Field(128, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    enable_prefix_caching: bool = True
    accelerator_type: str | None = None
    extra_engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    sampling: CaptionSampling = CaptionSampling()
    image: ImageBudget = ImageBudget()
    guards: CaptionGuards = CaptionGuards()
    worker_env: WorkerEnv = WorkerEnv()


CaptionerConfig = Annotated[
    Union[
        SourceCaptionerConfig,
        OpenAICaptionerConfig,
        TransformersCaptionerConfig,
        VLLMCaptionerConfig,
    ],
    Field(discriminator="backend"),
]
