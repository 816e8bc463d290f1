"""The ``openai`` label backend: a chat-completions server (``vllm serve Qwen/Qwen3-8B``) whose
answer is constrained to the three labels."""

from __future__ import annotations

from typing import Any

from prx_data.core.schema import LABELS
from prx_data.models.inference.chat_backend import ChatTaskBackend
from prx_data.models.labeling.base import BaseClassifier, LabelResult
from prx_data.models.labeling.config import OpenAIClassifierConfig
from prx_data.models.labeling.prompt import label_prompt_version
from prx_data.models.labeling.task import LabelTask


def constraint_body(config: OpenAIClassifierConfig) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if config.constraint == "structured_outputs":
        body["structured_outputs"] = {"choice": list(LABELS)}
    elif config.constraint == "guided_choice":
        body["guided_choice"] = list(LABELS)
    if config.disable_thinking:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    return body


class OpenAIClassifier(ChatTaskBackend[LabelResult], BaseClassifier):
    result_type = LabelResult

    def __init__(self, config: OpenAIClassifierConfig) -> None:
        self.config = config
        self.model_id = config.model_id or config.server.model
        self.task = LabelTask(self.model_id, config.max_tokens)

    @property
    def version(self) -> str:
        return label_prompt_version()

    def body_params(self) -> dict[str, Any]:
        cfg = self.config
        return {"max_tokens": cfg.max_tokens, "temperature": 0.0, **constraint_body(cfg), **cfg.extra_body}
