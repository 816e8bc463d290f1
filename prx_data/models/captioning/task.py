"""The caption task (and the fused caption + label task) of the one VLM stage."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from prx_data.core.reasons import with_detail
from prx_data.core.schema import LABELS
from prx_data.models.captioning.base import CaptionErrorCode as E
from prx_data.models.captioning.config import CaptionSampling, VLLMCaptionerConfig
from prx_data.models.captioning.images import ImageBudget, image_data_url
from prx_data.models.captioning.prompt import (
    SYSTEM_PROMPT,
    USER_PROMPT,
    caption_messages,
    caption_prompt_version,
    fused_prompt_version,
    fused_system_prompt,
)
from prx_data.models.captioning.quality import CaptionGuards, judge_caption
from prx_data.models.derived_columns import CAPTION, LABEL
from prx_data.models.inference.vlm import Judged, PrepError, VLMRequest, VLMTask


def fused_label_version() -> str:
    """The label a fused request writes is versioned by the fused prompt: the text-only
    classifier's rows (label_prompt_version) and these are never mistaken for each other."""
    return "f-" + fused_prompt_version().removeprefix("pf-")


FUSED_SCHEMA = {
    "type": "object",
    "properties": {"caption": {"type": "string"}, "label": {"type": "string", "enum": list(LABELS)}},
    "required": ["caption", "label"],
    "additionalProperties": False,
}


def sampling_params(sampling: CaptionSampling, **extra: Any) -> dict[str, Any]:
    """vLLM SamplingParams kwargs: the OpenAI-compatible ones (the same keys for every row, one
    Arrow type) plus the task's own."""
    return {**sampling.openai_params(), **extra}


class CaptionTask(VLMTask):
    columns = CAPTION
    inputs = ("image",)

    def __init__(
        self,
        model_id: str,
        *,
        sampling: CaptionSampling = CaptionSampling(),
        image: ImageBudget = ImageBudget(),
        guards: CaptionGuards = CaptionGuards(),
        budget_for=None,
    ) -> None:
        self.model_id = model_id
        self.version = caption_prompt_version()
        self.sampling = sampling
        self.image = image
        self.guards = guards
        self._budget_for = budget_for

    @classmethod
    def from_config(cls, cfg: VLLMCaptionerConfig) -> CaptionTask:
        if cfg.fused_label:
            return FusedCaptionLabelTask.from_config(cfg)
        return cls(cfg.model_id, sampling=cfg.sampling, image=cfg.image, guards=cfg.guards, budget_for=cfg.budget_for)

    def system(self) -> str:
        return SYSTEM_PROMPT

    def extra_sampling(self) -> dict[str, Any]:
        return {}

    def request(self, row: Mapping[str, Any]) -> VLMRequest:
        budget = self._budget_for(row.get("source")) if self._budget_for else self.image
        try:
            url = image_data_url(row.get("image"), budget)
        except Exception as exc:  # undecodable bytes are this row's problem only
            raise PrepError(with_detail(E.BAD_IMAGE, repr(exc))) from None
        return VLMRequest(caption_messages(url, self.system(), USER_PROMPT), sampling_params(self.sampling, **self.extra_sampling()))

    def placeholder(self) -> VLMRequest:
        return VLMRequest(
            caption_messages(None, self.system(), "."), sampling_params(self.sampling, **{**self.extra_sampling(), "max_tokens": 1})
        )

    def judge(self, text: str | None, finish_reason: str | None) -> Judged:
        result = judge_caption(text, finish_reason=finish_reason, guards=self.guards)
        return Judged(value=result.caption, error=result.error)


class FusedCaptionLabelTask(CaptionTask):
    """Caption and label in one request: ``{"caption": ..., "label": ...}`` by structured output
    (JSON schema), so the label is read off the same generation and the text-only pass over
    the captions can be skipped. Writes the label columns too."""

    # A fused label has no score (null), like the other LLM backends.
    extra_columns = (LABEL.value, LABEL.model, LABEL.version, LABEL.error, "label_score")

    def __init__(self, model_id: str, **kw: Any) -> None:
        super().__init__(model_id, **kw)
        self.version = fused_prompt_version()

    @classmethod
    def from_config(cls, cfg: VLLMCaptionerConfig) -> FusedCaptionLabelTask:
        return cls(cfg.model_id, sampling=cfg.sampling, image=cfg.image, guards=cfg.guards, budget_for=cfg.budget_for)

    def system(self) -> str:
        return fused_system_prompt()

    def extra_sampling(self) -> dict[str, Any]:
        return {"structured_outputs": {"json": json.dumps(FUSED_SCHEMA)}}

    def judge(self, text: str | None, finish_reason: str | None) -> Judged:
        try:
            answer = json.loads(text or "")
            caption, label = answer["caption"], answer["label"]
        except (ValueError, KeyError, TypeError):
            if finish_reason == "length":
                return Judged(error=with_detail(E.TRUNCATED, "max_tokens"))
            return Judged(error=with_detail(E.BAD_RESPONSE, (text or "")[:80]))
        result = judge_caption(caption, finish_reason=finish_reason, guards=self.guards)
        if result.caption is None:
            return Judged(error=result.error)
        if label not in LABELS:
            return Judged(error=with_detail(E.BAD_RESPONSE, f"label {label!r}"))
        extra = {LABEL.value: label, LABEL.model: self.model_id, LABEL.version: fused_label_version(), LABEL.error: None}
        return Judged(value=result.caption, extra=extra)
