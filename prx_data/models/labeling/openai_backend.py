"""The ``openai`` label backend: a chat-completions server (``vllm serve Qwen/Qwen3-8B``) whose
answer is constrained to the three labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prx_data.core.schema import LABELS
from prx_data.models.captioning.chat_http import LazyChatClient
from prx_data.models.labeling.base import BaseClassifier, LabelErrorCode, LabelResult
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


class OpenAIClassifier(LazyChatClient, BaseClassifier):
    @property
    def label_version(self) -> str:
        return label_prompt_version()

    def __init__(self, config: OpenAIClassifierConfig) -> None:
        self.config = config
        self.model_id = config.model_id or config.server.model
        self.task = LabelTask(self.model_id, config.max_tokens)

    def label_batch(self, captions: Sequence[str | None]) -> list[LabelResult]:
        cfg = self.config
        extra = {**constraint_body(cfg), **cfg.extra_body}
        bodies = [
            None
            if caption is None or not caption.strip()
            else {
                "messages": self.task.request({"caption": caption}).messages,
                "max_tokens": cfg.max_tokens,
                "temperature": 0.0,
                **extra,
            }
            for caption in captions
        ]
        results = []
        for body, reply in zip(bodies, self._client.complete_many(bodies)):
            if body is None:
                results.append(LabelResult(error=LabelErrorCode.NO_CAPTION))
                continue
            assert reply is not None, "complete_many answers every body"
            if reply.error is not None:
                results.append(LabelResult(error=reply.error))
            else:
                judged = self.task.judge(reply.text, reply.finish_reason)
                results.append(LabelResult(label=judged.value, error=judged.error))
        return results
