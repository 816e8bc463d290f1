"""The label task of the one VLM stage: a caption in, one of LABELS out by structured output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prx_data.core.reasons import with_detail
from prx_data.core.schema import LABELS
from prx_data.models.derived_columns import LABEL
from prx_data.models.inference.vlm import Judged, PrepError, VLMRequest, VLMTask
from prx_data.models.labeling.base import LabelErrorCode
from prx_data.models.labeling.prompt import label_messages, label_prompt_version, parse_label

# Qwen3 thinks before answering unless told not to; the template then writes an empty think
# block, so the answer starts at once and fits in a few tokens.
NO_THINKING = {"enable_thinking": False}


def label_sampling(max_tokens: int) -> dict[str, Any]:
    return {"temperature": 0.0, "max_tokens": max_tokens, "structured_outputs": {"choice": list(LABELS)}}


class LabelTask(VLMTask):
    columns = LABEL
    inputs = ("caption",)

    def __init__(self, model_id: str, max_tokens: int = 3) -> None:
        self.model_id = model_id
        self.version = label_prompt_version()
        self.max_tokens = max_tokens

    def request(self, row: Mapping[str, Any]) -> VLMRequest:
        caption = row.get("caption")
        if caption is None or not str(caption).strip():
            raise PrepError(LabelErrorCode.NO_CAPTION)
        return VLMRequest(label_messages(str(caption)), label_sampling(self.max_tokens))

    def placeholder(self) -> VLMRequest:
        return VLMRequest(label_messages("."), label_sampling(1))

    def judge(self, text: str | None, finish_reason: str | None) -> Judged:
        label = parse_label(text)
        if label is None:
            return Judged(error=with_detail(LabelErrorCode.INVALID_LABEL, repr(text)))
        return Judged(value=label)
