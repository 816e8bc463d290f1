"""The ``openai`` captioner: the caption task (:class:`CaptionTask`) on an OpenAI-compatible
chat-completions server (``vllm serve``), the same requests and judgement as on vLLM-on-Ray."""

from __future__ import annotations

from typing import Any

from prx_data.models.captioning.base import BaseCaptioner, CaptionResult
from prx_data.models.captioning.config import OpenAICaptionerConfig
from prx_data.models.captioning.prompt import caption_prompt_version
from prx_data.models.captioning.task import CaptionTask
from prx_data.models.inference.chat_backend import ChatTaskBackend


class OpenAICaptioner(ChatTaskBackend[CaptionResult], BaseCaptioner):
    result_type = CaptionResult
    prepare_in_threads = True  # image decoding and resizing

    def __init__(self, config: OpenAICaptionerConfig) -> None:
        self.config = config
        self.model_id = config.model_id or config.server.model
        self.task = CaptionTask(self.model_id, sampling=config.sampling, image=config.image, guards=config.guards)

    @property
    def version(self) -> str:
        return caption_prompt_version()

    def body_params(self) -> dict[str, Any]:
        return {**self.config.sampling.openai_params(), **self.config.extra_body}
